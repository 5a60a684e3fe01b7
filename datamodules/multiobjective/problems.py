"""Closed-form multi-objective test problems of the BOPE experiments (card ``bope_monne``, section Data).

Each :class:`OutcomeProblem` maps designs ``x`` in its box to the outcome vector ``y`` the decision maker judges:

- ``vehicle_safety`` (d=5, k=3): BoTorch's VehicleSafety objectives ``f``, negated and min-max normalised,
  ``y = (−f − lo)/(hi − lo)``; not clipped (y₁ = 1.0046 at x = 1);
- ``dtlz2`` (d=8, k=4): DTLZ2 with 4 objectives, ``y = f`` (not negated);
- ``car_cab`` (d=7, k=9): RE9-7-1 car cab design (Tanabe & Ishibuchi 2020) with the stochastic variables fixed at 0,
  ``y = (f − lo)/(hi − lo)``.

``raw`` is ``f`` before negation and normalisation; every map is differentiable and takes any batch dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

#: The problems, in the card's order.
PROBLEMS: tuple[str, ...] = ("vehicle_safety", "dtlz2", "car_cab")

#: VehicleSafety normalisation of −f (card, Data).
VS_LO: tuple[float, ...] = (-1704.0, -11.708, -0.26192)
VS_HI: tuple[float, ...] = (-1661.9, -6.2136, -0.042879)
#: CarCab normalisation of f (card, Data); it keeps y₃ ≈ 0.507 almost constant (kept for parity).
CARCAB_LO: tuple[float, ...] = (-42.150, -0.47829, -115.63, -0.0072040, -0.18255, -10.168, 27.023, -8.0731, -6.4556)
CARCAB_HI: tuple[float, ...] = (-16.0992, 0.9511, 112.7138, 0.2750, 0.1909, 14.4804, 28.9855, 0.5, 0.5)
#: DTLZ2 (8d, 4 objectives) surrogate input bounds (card, Data).
DTLZ2_HI: tuple[float, ...] = (2.5366, 2.5237, 2.5996, 2.6484)


def vehicle_safety_raw(x: Tensor) -> Tensor:
    """VehicleSafety's three objectives ``f`` (to be minimised), ``(..., 5) -> (..., 3)``."""
    x1, x2, x3, x4, x5 = x.unbind(-1)
    f1 = 1640.2823 + 2.3573285 * x1 + 2.3220035 * x2 + 4.5688768 * x3 + 7.7213633 * x4 + 4.4559504 * x5
    f2 = (6.5856 + 1.15 * x1 - 1.0427 * x2 + 0.9738 * x3 + 0.8364 * x4 - 0.3695 * x1 * x4 + 0.0861 * x1 * x5
          + 0.3628 * x2 * x4 - 0.1106 * x1**2 - 0.3437 * x3**2 + 0.1764 * x4**2)  # fmt: skip
    f3 = (-0.0551 + 0.0181 * x1 + 0.1024 * x2 + 0.0421 * x3 - 0.0073 * x1 * x2 + 0.024 * x2 * x3 - 0.0118 * x2 * x4
          - 0.0204 * x3 * x4 - 0.008 * x3 * x5 - 0.0241 * x2**2 + 0.0109 * x4**2)  # fmt: skip
    return torch.stack((f1, f2, f3), dim=-1)


def dtlz2_raw(x: Tensor, k: int = 4) -> Tensor:
    """DTLZ2 with ``k`` objectives, ``(..., d) -> (..., k)``: ``g = Σ_{i ≥ k} (x_i − 0.5)²`` over the last d−k+1."""
    g = (x[..., k - 1 :] - 0.5).pow(2).sum(-1)
    angle = x[..., : k - 1] * (math.pi / 2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    out = []
    for j in range(k):  # objective j (0-based): Π_{i < k−1−j} cos(θ_i) · sin(θ_{k−1−j}) for j > 0
        m = k - 1 - j
        f = (1 + g) * cos[..., :m].prod(-1)
        out.append(f if j == 0 else f * sin[..., m])
    return torch.stack(out, dim=-1)


def car_cab_raw(x: Tensor) -> Tensor:
    """RE9-7-1 car cab design's nine objectives ``f``, stochastic variables x₈..x₁₁ at 0, ``(..., 7) -> (..., 9)``."""
    x1, x2, x3, x4, x5, x6, x7 = x.unbind(-1)
    f1 = -(1.98 + 4.9 * x1 + 6.67 * x2 + 6.98 * x3 + 4.01 * x4 + 1.75 * x5 + 1e-5 * x6 + 2.73 * x7)
    f2 = -0.16 + 0.3717 * x2 * x4
    f3 = 0.32 - (0.261 - 0.0159 * x1 * x2 - 0.019 * x2 * x7 + 0.0144 * x3 * x5)
    f4 = 0.32 - (0.214 + 0.00817 * x5 + 0.03099 * x2 * x6 - 0.018 * x2 * x7 - 0.00364 * x5 * x6 - 0.018 * x2**2)
    f5 = 0.32 - (0.74 - 0.61 * x2 + 0.227 * x2**2)
    f6 = 32 - ((28.98 + 3.818 * x3 - 4.2 * x1 * x2) + (33.86 + 2.95 * x3 - 5.057 * x1 * x2) + (46.36 - 9.9 * x2)) / 3
    f7 = 32 - (4.72 - 0.5 * x4 - 0.19 * x2 * x3)
    f8 = 4 - (10.58 - 0.674 * x1 * x2)
    f9 = 9.9 - (16.45 - 0.489 * x3 * x7 - 0.843 * x5 * x6)
    return torch.stack((f1, f2, f3, f4, f5, f6, f7, f8, f9), dim=-1)


def _minmax(f: Tensor, lo: tuple[float, ...], hi: tuple[float, ...]) -> Tensor:
    lo_t, hi_t = torch.tensor(lo, dtype=f.dtype, device=f.device), torch.tensor(hi, dtype=f.dtype, device=f.device)
    return (f - lo_t) / (hi_t - lo_t)


#: name -> (raw objectives, the used outcome y from raw f).
_MAPS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] = {
    "vehicle_safety": (vehicle_safety_raw, lambda f: _minmax(-f, VS_LO, VS_HI)),
    "dtlz2": (dtlz2_raw, lambda f: f),
    "car_cab": (car_cab_raw, lambda f: _minmax(f, CARCAB_LO, CARCAB_HI)),
}


@dataclass(frozen=True)
class OutcomeProblem:
    """A closed-form outcome function ``y = f(x)`` on a box, with the surrogate's outcome bounds.

    Attributes:
        name: one of :data:`PROBLEMS`.
        d: design dimension.
        k: number of outcomes.
        x_lo: lower corner of the design box.
        x_hi: upper corner of the design box.
        y_lo: lower surrogate input bound per outcome (MoNNE's input scaling, PairwiseGP's ``Normalize``).
        y_hi: upper surrogate input bound per outcome.
    """

    name: str
    d: int
    k: int
    x_lo: tuple[float, ...]
    x_hi: tuple[float, ...]
    y_lo: tuple[float, ...]
    y_hi: tuple[float, ...]

    def _check(self, x: Tensor) -> None:
        if x.shape[-1:] != (self.d,):
            raise ValueError(f"{self.name}: x has shape {tuple(x.shape)}; expected (..., {self.d}) designs")

    def raw(self, x: Tensor) -> Tensor:
        """The raw objectives ``f`` (before negation and normalisation), ``(..., d) -> (..., k)``."""
        self._check(x)
        return _MAPS[self.name][0](x)

    def __call__(self, x: Tensor) -> Tensor:
        """The used outcome ``y`` (the decision maker's input), ``(..., d) -> (..., k)``; never clipped."""
        self._check(x)
        raw, used = _MAPS[self.name]
        return used(raw(x))

    def bounds(self) -> Tensor:
        """The design box, float64 ``(2, d)``: lower row, upper row."""
        return torch.tensor((self.x_lo, self.x_hi), dtype=torch.float64)

    def outcome_bounds(self) -> Tensor:
        """The surrogate input bounds, float64 ``(2, k)``: ``y_lo``, ``y_hi``."""
        return torch.tensor((self.y_lo, self.y_hi), dtype=torch.float64)


def make_problem(name: str) -> OutcomeProblem:
    """The problem ``name`` (one of :data:`PROBLEMS`) with the card's boxes and outcome bounds."""
    match name:
        case "vehicle_safety":
            return OutcomeProblem(name, 5, 3, (1.0,) * 5, (3.0,) * 5, (0.0,) * 3, (1.0,) * 3)
        case "dtlz2":
            return OutcomeProblem(name, 8, 4, (0.0,) * 8, (1.0,) * 8, (0.0,) * 4, DTLZ2_HI)
        case "car_cab":
            return OutcomeProblem(name, 7, 9, (0.5, 0.45, 0.5, 0.5, 0.875, 0.4, 0.4),
                                  (1.5, 1.35, 1.5, 1.5, 2.625, 1.2, 1.2), (0.0,) * 9, (1.0,) * 9)  # fmt: skip
    raise ValueError(f"problem {name!r}: expected one of " + ", ".join(repr(p) for p in PROBLEMS))
