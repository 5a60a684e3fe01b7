"""UAM maths as plain functions, and the classifier networks (pure torch; no Lightning).

Unlearning-Aware Minimization (Kim, Kim, Chae, Yoon) perturbs the weights along the normalised forget gradient,
``w + rho * g_f / ||g_f||``, takes the retain gradient there, optionally projects it with ``[I - gamma P_f]``
(``P_f = g_hat_f g_hat_f^T``, our reconstruction of the published LLM equation), restores ``w`` and steps. Every norm
is the *global* L2 norm over all trainable parameters flattened together (``scope="global"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "MLP",
    "ResNet18",
    "SmallCNN",
    "build_classifier",
    "cosine_rho",
    "dot",
    "flat",
    "global_norm",
    "project_retain_grad",
    "projection_coefficients",
    "random_other_labels",
]

Projection = Literal["always", "conflict_only", "none"]
Scope = Literal["global", "per_tensor"]


def flat(tensors: Sequence[Tensor]) -> Tensor:
    """All tensors flattened into one float64 vector (the space every UAM norm and inner product lives in)."""
    return torch.cat([t.reshape(-1) for t in tensors]).double()


def dot(a: Sequence[Tensor], b: Sequence[Tensor]) -> Tensor:
    """``<a, b>`` over all tensors flattened together (float64)."""
    return flat(a) @ flat(b)


def global_norm(grads: Sequence[Tensor]) -> Tensor:
    """Global L2 norm ``||g||_2`` of a list of tensors flattened together (not a per-tensor norm)."""
    return flat(grads).norm()


def projection_coefficients(
    g_r: Sequence[Tensor],
    g_f: Sequence[Tensor],
    gamma: float,
    mode: Projection = "always",
    scope: Scope = "global",
    eps: float = 1e-16,
) -> list[float] | None:
    """Per-tensor ``c_i`` with ``[I - gamma P_f] g_r = g_r_i - c_i g_f_i`` (``None``: no projection at all).

    ``c = gamma <g_r, g_f> / (||g_f|| + eps)^2`` over the scope (all tensors together, or each on its own); 0 where
    ``conflict_only`` finds ``<g_r, g_f> <= 0``. See :func:`project_retain_grad` for the algebra.
    """
    if mode == "none" or gamma == 0.0:
        return None
    groups = [[i] for i in range(len(g_r))] if scope == "per_tensor" else [list(range(len(g_r)))]
    coefs = [0.0] * len(g_r)
    for idx in groups:
        r, f = flat([g_r[i] for i in idx]), flat([g_f[i] for i in idx])
        inner = float(r @ f)
        if mode == "conflict_only" and inner <= 0.0:
            continue
        coef = gamma * inner / (float(f.norm()) + eps) ** 2
        for i in idx:
            coefs[i] = coef
    return coefs


def project_retain_grad(
    g_r: Sequence[Tensor],
    g_f: Sequence[Tensor],
    gamma: float,
    mode: Projection = "always",
    scope: Scope = "global",
    eps: float = 1e-16,
) -> list[Tensor]:
    """``[I - gamma P_f] g_r`` with ``P_f = g_hat_f g_hat_f^T`` (reconstruction: see zoo/uam/README.md).

    The ``g_hat_f`` component of the result is ``(1 - gamma) <g_r, g_hat_f>``; the orthogonal part is unchanged.
    ``conflict_only`` projects only when ``<g_r, g_f> > 0`` (the retain step would lower the forget loss); with
    ``gamma >= 1`` the first-order change of the forget loss is then never negative.

    Args:
        g_r: retain gradient, one tensor per parameter.
        g_f: forget gradient (at the unperturbed weights), same shapes.
        gamma: projection strength (``gamma = 1`` removes the forget component, ``gamma > 1`` reverses it).
        mode: ``always`` | ``conflict_only`` | ``none`` (the public library's behaviour: no projection).
        scope: ``global`` (one ``g_hat_f`` over all parameters) or ``per_tensor`` (each tensor on its own).
        eps: added to ``||g_f||`` before dividing.

    Returns:
        The projected retain gradient (new tensors; inputs are not modified).
    """
    coefs = projection_coefficients(g_r, g_f, gamma, mode, scope, eps)
    if coefs is None:
        return [g.clone() for g in g_r]
    return [r - c * f if c else r.clone() for r, f, c in zip(g_r, g_f, coefs, strict=True)]


def cosine_rho(rho0: float, step: int, total: int | None, start: int = 0) -> float:
    """Library cosine schedule ``rho0 (1 + cos(pi (t - t0) / (T - t0))) / 2`` for ``t >= t0``; ``rho0`` before.

    Args:
        rho0: initial radius.
        step: 0-based optimizer step ``t``.
        total: ``T`` (``cosine_total_step``); ``None`` means a constant radius.
        start: ``t0`` (``cosine_start_step``).
    """
    if total is None or step < start:
        return rho0
    frac = min((step - start) / max(total - start, 1), 1.0)
    return rho0 * (1.0 + math.cos(math.pi * frac)) / 2.0


def random_other_labels(y: Tensor, num_classes: int, generator: torch.Generator | None = None) -> Tensor:
    """Uniform random labels different from ``y`` (SalUn's random-label forgetting): ``(y + U{1..K-1}) mod K``."""
    shift = torch.randint(1, num_classes, y.shape, generator=generator, device="cpu").to(y.device)
    return (y + shift) % num_classes


class MLP(nn.Module):
    """ReLU MLP ``input -> hidden... -> classes`` with the card's initialisation.

    Hidden weights ``N(0, 2/fan_in)``, output weights ``N(0, 1/fan_in)``, zero biases; the reproduction's 64-64-10 net
    is ``hidden=[64]``.

    Args:
        input_dim: flattened input size.
        num_classes: number of classes.
        hidden: hidden layer widths.
    """

    def __init__(self, input_dim: int, num_classes: int, hidden: Sequence[int] = (64,)) -> None:
        super().__init__()
        sizes = [input_dim, *hidden, num_classes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        for i, layer in enumerate(self.layers):
            gain = 1.0 if i == len(self.layers) - 1 else 2.0
            nn.init.normal_(layer.weight, 0.0, math.sqrt(gain / layer.in_features))
            nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(N, classes)`` of inputs ``(N, ...)`` (flattened)."""
        x = x.flatten(1)
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


class SmallCNN(nn.Module):
    """Two conv blocks and a linear head, for 28x28 or 32x32 images (a fast CPU model for MNIST/CIFAR runs).

    Args:
        in_channels: image channels.
        num_classes: number of classes.
        width: channels of the first block (the second has twice as many).
    """

    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Linear(2 * width * 16, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits of images ``(N, C, H, W)``."""
        return self.head(self.features(x).flatten(1))


class _Block(nn.Module):
    """ResNet basic block (two 3x3 convs with batch norm, identity or 1x1 shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: Tensor) -> Tensor:
        """``relu(bn2(conv2(relu(bn1(conv1 x)))) + shortcut(x))``."""
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 (3x3 stem, no max-pool; [2, 2, 2, 2] basic blocks), the library's CIFAR backbone.

    Args:
        in_channels: image channels.
        num_classes: number of classes.
    """

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits of images ``(N, C, H, W)``."""
        return self.head(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


def build_classifier(
    arch: Literal["mlp", "cnn", "resnet18"], input_dim: int, num_classes: int, hidden: Sequence[int], in_channels: int
) -> nn.Module:
    """Build the classifier named by ``arch``; image models reshape flat inputs to ``(C, s, s)``.

    Args:
        arch: ``mlp`` | ``cnn`` | ``resnet18``.
        input_dim: flattened input size (from the datamodule).
        num_classes: number of classes (from the datamodule).
        hidden: MLP hidden widths.
        in_channels: image channels of the conv models; ``input_dim / in_channels`` must be a square.
    """
    if arch == "mlp":
        return MLP(input_dim, num_classes, hidden)
    side = math.isqrt(input_dim // max(in_channels, 1))
    if in_channels < 1 or side * side * in_channels != input_dim:
        raise ValueError(
            f"--model.init_args.arch={arch}: input_dim={input_dim} is not in_channels={in_channels} square images"
        )
    net = SmallCNN(in_channels, num_classes) if arch == "cnn" else ResNet18(in_channels, num_classes)
    return nn.Sequential(nn.Unflatten(1, (in_channels, side, side)), net)
