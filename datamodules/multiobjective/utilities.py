"""The decision maker's true utilities ``g(y)`` of the BOPE experiments (card ``bope_monne``, section Data).

Each utility is a parameter-free ``torch.nn.Module`` mapping outcomes ``(..., k)`` to utilities ``(...)``,
differentiable, with its constants as buffers. ``monotone`` says whether ``g`` is non-decreasing in every outcome
(MoNNE's assumption): all are, except :class:`NegL1Dist`, which exists as a misspecification check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn

from datamodules.multiobjective.problems import PROBLEMS, make_problem

#: problem -> its utilities (card, Data), the first being the default.
UTILITIES: dict[str, tuple[str, ...]] = {
    "vehicle_safety": ("pwl", "kumaraswamy"),
    "dtlz2": ("pwl", "neg_l1"),
    "car_cab": ("linear", "pwl"),
}

#: (problem, utility) -> probit σ calibrated so that the DM errs on 10 % of the top-10 % utility pairs (card, Data).
PROBIT_SIGMA: dict[tuple[str, str], float] = {
    ("vehicle_safety", "kumaraswamy"): 0.0203,
    ("vehicle_safety", "pwl"): 0.1587,
    ("dtlz2", "pwl"): 0.1872,
    ("dtlz2", "neg_l1"): 0.0467,
    ("car_cab", "linear"): 0.0439,
    ("car_cab", "pwl"): 0.1151,
}

#: Kumaraswamy inputs are clamped to [EPS, 1 − EPS] so the CDF is finite (and flat) outside [0, 1].
EPS = 1e-6


def _vector(values: Sequence[float] | Tensor) -> Tensor:
    return torch.as_tensor(values, dtype=torch.float64).reshape(-1).clone()


class _Utility(nn.Module):
    """Shared shape check: the last dim of ``y`` is the number of outcomes ``k``."""

    #: Whether ``g`` is non-decreasing in every outcome.
    monotone: ClassVar[bool] = True
    #: The utility's name in :data:`UTILITIES`.
    name: ClassVar[str] = ""
    k: int

    def _check(self, y: Tensor) -> None:
        if y.shape[-1:] != (self.k,):
            raise ValueError(f"{type(self).__name__}: y has shape {tuple(y.shape)}; expected (..., {self.k}) outcomes")


class PiecewiseLinear(_Utility):
    """``Σ_k [β1_k y_k + (β2_k − β1_k) t_k if y_k < t_k else β2_k y_k]``: continuous, concave when β1 > β2.

    Args:
        beta1: slopes below the thresholds.
        beta2: slopes above the thresholds.
        thresholds: the kinks ``t``.
    """

    name = "pwl"

    def __init__(self, beta1: Sequence[float] | Tensor, beta2: Sequence[float] | Tensor,
                 thresholds: Sequence[float] | Tensor) -> None:  # fmt: skip
        super().__init__()
        b1, b2, t = _vector(beta1), _vector(beta2), _vector(thresholds)
        if not b1.shape == b2.shape == t.shape:
            raise ValueError(f"PiecewiseLinear: beta1, beta2 and thresholds have lengths {len(b1)}, {len(b2)}, "
                             f"{len(t)}; expected one value per outcome each")  # fmt: skip
        self.k = len(b1)
        self.register_buffer("beta1", b1)
        self.register_buffer("beta2", b2)
        self.register_buffer("thresholds", t)

    def forward(self, y: Tensor) -> Tensor:
        """Utilities ``(...)`` of outcomes ``(..., k)``."""
        self._check(y)
        b1, b2, t = self.beta1.to(y), self.beta2.to(y), self.thresholds.to(y)
        return torch.where(y < t, b1 * y + (b2 - b1) * t, b2 * y).sum(-1)


class KumaraswamyCDFProduct(_Utility):
    """``Π_k [1 − (1 − z_k^{a_k})^{b_k}]`` with ``z = clamp(y, 1e-6, 1 − 1e-6)``: finite for every y.

    Args:
        a: first Kumaraswamy concentration per outcome.
        b: second Kumaraswamy concentration per outcome.
    """

    name = "kumaraswamy"

    def __init__(self, a: Sequence[float] | Tensor, b: Sequence[float] | Tensor) -> None:
        super().__init__()
        a_t, b_t = _vector(a), _vector(b)
        if a_t.shape != b_t.shape:
            raise ValueError(f"KumaraswamyCDFProduct: a and b have lengths {len(a_t)}, {len(b_t)}; expected one "
                             "value per outcome each")  # fmt: skip
        self.k = len(a_t)
        self.register_buffer("a", a_t)
        self.register_buffer("b", b_t)

    def forward(self, y: Tensor) -> Tensor:
        """Utilities ``(...)`` of outcomes ``(..., k)``."""
        self._check(y)
        z = y.clamp(EPS, 1 - EPS)
        return (1 - (1 - z.pow(self.a.to(y))).pow(self.b.to(y))).prod(-1)


class Linear(_Utility):
    """``βᵀ y``.

    Args:
        beta: the weight per outcome.
    """

    name = "linear"

    def __init__(self, beta: Sequence[float] | Tensor) -> None:
        super().__init__()
        beta_t = _vector(beta)
        self.k = len(beta_t)
        self.register_buffer("beta", beta_t)

    def forward(self, y: Tensor) -> Tensor:
        """Utilities ``(...)`` of outcomes ``(..., k)``."""
        self._check(y)
        return (y * self.beta.to(y)).sum(-1)


class NegL1Dist(_Utility):
    """``−‖y − center‖₁``: not monotone (a misspecification check for MoNNE).

    Args:
        center: the ideal outcome.
    """

    monotone = False
    name = "neg_l1"

    def __init__(self, center: Sequence[float] | Tensor) -> None:
        super().__init__()
        center_t = _vector(center)
        self.k = len(center_t)
        self.register_buffer("center", center_t)

    def forward(self, y: Tensor) -> Tensor:
        """Utilities ``(...)`` of outcomes ``(..., k)``."""
        self._check(y)
        return -(y - self.center.to(y)).abs().sum(-1)


def make_utility(problem: str, name: str) -> nn.Module:
    """The utility ``name`` of ``problem`` with the card's parameters (see :data:`UTILITIES`)."""
    if problem not in UTILITIES:
        raise ValueError(f"problem {problem!r}: expected one of " + ", ".join(repr(p) for p in PROBLEMS))
    if name not in UTILITIES[problem]:
        raise ValueError(f"utility {name!r}: expected one of {', '.join(map(repr, UTILITIES[problem]))} for "
                         f"problem={problem!r}")  # fmt: skip
    match problem, name:
        case "vehicle_safety", "pwl":
            return PiecewiseLinear((2.0, 6.0, 8.0), (1.0, 2.0, 2.0), (0.5, 0.8, 0.8))
        case "vehicle_safety", "kumaraswamy":
            return KumaraswamyCDFProduct((0.5, 1.0, 1.5), (1.0, 2.0, 3.0))
        case "dtlz2", "pwl":
            return PiecewiseLinear((4.0, 3.0, 2.0, 1.0), (0.4, 0.3, 0.2, 0.1), (1.0,) * 4)
        case "dtlz2", "neg_l1":
            dtlz2 = make_problem("dtlz2")
            return NegL1Dist(dtlz2(torch.full((dtlz2.d,), 0.5, dtype=torch.float64)))
        case "car_cab", "linear":
            return Linear([2.25 - 0.25 * i for i in range(9)])
        case "car_cab", "pwl":
            return PiecewiseLinear([7.0 - 0.25 * i for i in range(9)],
                                   (0.5, 0.4, 0.375, 0.35, 0.325, 0.3, 0.275, 0.25, 0.225),
                                   [0.55 - 0.01 * i for i in range(9)])  # fmt: skip
    raise AssertionError("unreachable")  # pragma: no cover
