"""The monotone neural-network ensemble (MoNNE) utility surrogate and its BoTorch faces (card ``bope_monne``).

Pure torch, no Lightning. The maths of the card's "MoNNE utility surrogate" and "Acquisitions" sections:

- :class:`MonotoneEnsemble`: M members ``g_m(y) = exp(v₃)ᵀ σ(exp(V₂) σ(exp(V₁) ŷ + b₁) + b₂) + b₃`` on the scaled
  outcome ``ŷ = (y − lo)/(hi − lo)``, every weight matrix made positive (``exp``; ``softplus``/``square`` are options),
  a non-decreasing activation (``tanh`` default), vectorised as batched weights ``[M, out, in]`` (one broadcast matmul
  per layer, no loop over members). ``monotone=False`` is the ablation: raw signed weights, Kaiming initialisation.
- :func:`hinge_loss` and :func:`fit_ensemble`: the per-member hinge loss on pairwise comparisons, full-batch Adam,
  refit from scratch.
- :func:`ensemble_eubo`: the exact ensemble EUBO ``(1/M) Σ_m max(g_m(y₁), g_m(y₂))`` of a pair of outcomes.
- :func:`pairwise_accuracy`, :func:`kendall_tau`: the surrogate diagnostics on held-out pairs.

The BoTorch faces (``EnsembleModel``, the learned objective, the EUBO acquisition) are in
:mod:`zoo.bope_monne.acquisition`.

Example:
    >>> import torch
    >>> ens = MonotoneEnsemble(k=3, members=4, seed=0)
    >>> ens(torch.rand(10, 3, dtype=torch.float64)).shape
    torch.Size([4, 10])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn

Activation = Literal["tanh", "sigmoid", "relu"]
Positivity = Literal["exp", "softplus", "square"]

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"tanh": torch.tanh, "sigmoid": torch.sigmoid,
                                                      "relu": torch.relu}  # fmt: skip
POSITIVITY: dict[str, Callable[[Tensor], Tensor]] = {
    "exp": torch.exp,
    "softplus": nn.functional.softplus,
    "square": torch.square,
}
#: The inverse of each positivity map: a raw parameter that maps to a given positive weight.
_INVERSE: dict[str, Callable[[Tensor], Tensor]] = {
    "exp": torch.log,
    "softplus": lambda w: w + torch.log(-torch.expm1(-w)),  # log(exp(w) - 1), stable
    "square": torch.sqrt,
}


class MonotoneEnsemble(nn.Module):
    """M utility networks ``R^k -> R`` held as batched weights and evaluated together.

    Args:
        k: number of outcomes.
        members: ensemble size M (card default 8).
        hidden: hidden-layer widths (card default two layers of 32).
        activation: ``tanh`` (default), ``sigmoid``, or ``relu`` (convex: kept only for the ablation test).
        positivity: the map that makes weights positive: ``exp`` (published), ``softplus`` or ``square``.
        monotone: ``False`` is the non-monotone ablation (raw signed weights, Kaiming initialisation).
        lo: the outcome lower bounds of the input scaling (default 0).
        hi: the outcome upper bounds (default 1).
        seed: the initialisation seed (:meth:`reset`).
    """

    def __init__(self, k: int, members: int = 8, hidden: tuple[int, ...] | list[int] = (32, 32),
                 activation: Activation = "tanh", positivity: Positivity = "exp", monotone: bool = True,
                 lo: Tensor | None = None, hi: Tensor | None = None, seed: int = 0) -> None:  # fmt: skip
        super().__init__()
        self.k, self.members, self.hidden = int(k), int(members), tuple(int(h) for h in hidden)
        self.activation, self.positivity, self.monotone = activation, positivity, bool(monotone)
        self.act = ACTIVATIONS[activation]
        self.positive = POSITIVITY[positivity]
        sizes = (self.k, *self.hidden, 1)
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(self.members, n_out, n_in, dtype=torch.float64))
            for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True)
        )
        self.biases = nn.ParameterList(
            nn.Parameter(torch.empty(self.members, n_out, dtype=torch.float64)) for n_out in sizes[1:]
        )
        lo = torch.zeros(self.k, dtype=torch.float64) if lo is None else torch.as_tensor(lo, dtype=torch.float64)
        hi = torch.ones(self.k, dtype=torch.float64) if hi is None else torch.as_tensor(hi, dtype=torch.float64)
        self.register_buffer("lo", lo.clone())
        self.register_buffer("scale", (hi - lo).clone())
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """Initialise every member from ``seed`` (the card's initialisation; independent members).

        Monotone: effective weights ``exp(N(−log fan_in, 0.5²))`` (the raw parameter is the positivity map's inverse
        of it, so every map starts from the same weights), first-layer biases ``b₁ = −W₁ c`` with
        ``c ~ U[0,1]^k`` per unit (each unit's transition inside the box), other biases ``U(−1, 1)``.
        Non-monotone: Kaiming-normal weights (fan in), the same biases.
        """
        gen = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
                fan_in = w.shape[-1]
                if self.monotone:
                    log_w = -math.log(fan_in) + 0.5 * torch.randn(w.shape, generator=gen, dtype=w.dtype)
                    w.copy_(_INVERSE[self.positivity](torch.exp(log_w)))
                else:
                    w.copy_(torch.randn(w.shape, generator=gen, dtype=w.dtype) * math.sqrt(2.0 / fan_in))
                if i == 0:
                    c = torch.rand(w.shape, generator=gen, dtype=w.dtype)
                    b.copy_(-(self.effective(w) * c).sum(-1))
                else:
                    b.copy_(2 * torch.rand(b.shape, generator=gen, dtype=b.dtype) - 1)

    def effective(self, raw: Tensor) -> Tensor:
        """The weights a layer uses: ``positivity(raw)`` when monotone, ``raw`` otherwise."""
        return self.positive(raw) if self.monotone else raw

    def scaled(self, y: Tensor) -> Tensor:
        """``ŷ = (y − lo)/(hi − lo)``."""
        return (y - self.lo) / self.scale

    def forward(self, y: Tensor) -> Tensor:
        """Every member's utility: ``(..., n, k) -> (..., M, n)``."""
        h = self.scaled(y.to(self.lo.dtype)).unsqueeze(-3)  # (..., 1, n, k)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.matmul(h, self.effective(w).transpose(-1, -2)) + b.unsqueeze(-2)  # (..., M, n, out)
            if i < last:
                h = self.act(h)
        return h.squeeze(-1)

    def member(self, m: int, y: Tensor) -> Tensor:
        """Member ``m`` alone, one ``nn.functional.linear`` per layer: ``(..., n, k) -> (..., n)`` (a reference)."""
        h = self.scaled(y.to(self.lo.dtype))
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = nn.functional.linear(h, self.effective(w[m]), b[m])
            if i < last:
                h = self.act(h)
        return h.squeeze(-1)

    def mean(self, y: Tensor) -> Tensor:
        """The ensemble-mean utility ``(1/M) Σ_m g_m(y)``: ``(..., n, k) -> (..., n)``."""
        return self(y).mean(-2)


def hinge_loss(g: Tensor, comps: Tensor, margin: float = 1.0, weights: Tensor | None = None) -> Tensor:
    """Per-member hinge loss ``(1/|D|) Σ max(0, margin − (g_m(y_w) − g_m(y_l)))``.

    Args:
        g: utilities ``(M, n)`` of the n outcomes the comparisons index.
        comps: ``(m, 2)`` rows ``(winner, loser)`` of row indices into the outcomes.
        margin: the hinge margin.
        weights: optional ``(M, m)`` per-member pair weights (bootstrap counts); rows are normalised to mean 1.

    Returns:
        ``(M,)`` losses.
    """
    gap = g[:, comps[:, 0]] - g[:, comps[:, 1]]
    loss = torch.relu(margin - gap)
    if weights is None:
        return loss.mean(-1)
    return (loss * weights).sum(-1) / weights.sum(-1)


def fit_ensemble(ensemble: MonotoneEnsemble, y: Tensor, comps: Tensor, steps: int = 300, lr: float = 1e-2,
                 margin: float = 1.0, bootstrap: bool = False, seed: int = 0,
                 warm_start: bool = False) -> Tensor:  # fmt: skip
    """Fit every member to the comparisons, full-batch Adam (``steps`` steps), from scratch unless ``warm_start``.

    Members share nothing: the summed loss gives each member's parameters only its own gradient, and Adam is
    elementwise, so this is M independent fits run as one vectorised one.

    Args:
        ensemble: the ensemble (re-initialised from ``seed`` unless ``warm_start``).
        y: ``(n, k)`` outcomes.
        comps: ``(m, 2)`` ``(winner, loser)`` rows into ``y``.
        steps: Adam steps.
        lr: Adam learning rate.
        margin: hinge margin.
        bootstrap: each member sees a bootstrap resample of the comparisons (unverified option).
        seed: initialisation (and bootstrap) seed.
        warm_start: continue from the current weights.

    Returns:
        The final per-member losses ``(M,)``.
    """
    if not warm_start:
        ensemble.reset(seed)
    weights = None
    if bootstrap:
        gen = torch.Generator().manual_seed(int(seed) + 7919)
        draws = torch.randint(0, comps.shape[0], (ensemble.members, comps.shape[0]), generator=gen)
        weights = torch.zeros(ensemble.members, comps.shape[0], dtype=y.dtype).scatter_add_(
            1, draws, torch.ones_like(draws, dtype=y.dtype)
        )
    y = y.to(ensemble.lo.dtype)
    optimizer = torch.optim.Adam(ensemble.parameters(), lr=lr)
    with torch.enable_grad():
        for _ in range(int(steps)):
            optimizer.zero_grad(set_to_none=True)
            losses = hinge_loss(ensemble(y), comps, margin, weights)
            losses.sum().backward()
            optimizer.step()
    with torch.no_grad():
        return hinge_loss(ensemble(y), comps, margin, weights)


def pairwise_accuracy(scores: Tensor, truth: Tensor) -> float:
    """Share of pairs ordered as ``truth`` orders them; a tie in ``scores`` (or in ``truth``) counts as wrong.

    Args:
        scores: ``(n, 2)`` predicted utilities of n pairs.
        truth: ``(n, 2)`` true utilities.
    """
    pred, true = torch.sign(scores[:, 0] - scores[:, 1]), torch.sign(truth[:, 0] - truth[:, 1])
    return float(((pred == true) & (true != 0)).double().mean())


def kendall_tau(scores: Tensor, truth: Tensor) -> float:
    """Kendall's τ over pairs: ``(concordant − discordant)/n`` with ties counted as neither (τ-a over the pairs)."""
    prod = torch.sign(scores[:, 0] - scores[:, 1]) * torch.sign(truth[:, 0] - truth[:, 1])
    return float(prod.mean())


def ensemble_eubo(ensemble: MonotoneEnsemble, y1: Tensor, y2: Tensor) -> Tensor:
    """The exact ensemble EUBO ``(1/M) Σ_m max(g_m(y₁), g_m(y₂))``: ``(..., k)`` pairs to ``(...)``."""
    g = ensemble(torch.stack([y1, y2], dim=-2))  # (..., M, 2)
    return g.max(-1).values.mean(-1)
