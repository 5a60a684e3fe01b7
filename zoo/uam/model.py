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

# The gradient-list maths lives in zoo.core.gradients (the unlearning callback uses it); importable from here as before.
from zoo.core.gradients import (
    Projection,
    Scope,
    cosine_rho,
    dot,
    flat,
    global_norm,
    project_retain_grad,
    projection_coefficients,
)

__all__ = [
    "MLP",
    "Projection",
    "ResNet18",
    "Scope",
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
