"""Normalised probabilists' Hermite activations h_k = He_k/√k! and their Gaussian kernels.

An activation is a dict ``{degree k: c_k}`` of coefficients on h_k, so that for unit u, v and x ~ N(0, I)
E[σ(⟨u,x⟩)·σ'(⟨v,x⟩)] = Σ_k c_k·c'_k·⟨u,v⟩^k (Mehler). ``raw_z4`` is the monomial z⁴/√105 (unit second moment):
z⁴ = 3·h₀ + 6√2·h₂ + √24·h₄, so its information exponent is 2 (the card's ablation, never a default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor

Activation = Literal["he4", "he6", "hermite_mix", "raw_z4"]
ACTIVATIONS: tuple[str, ...] = ("he4", "he6", "hermite_mix", "raw_z4")
#: z⁴/√105 in the h_k basis (E[z⁸] = 105).
RAW_Z4 = {0: 3 / math.sqrt(105), 2: 6 * math.sqrt(2) / math.sqrt(105), 4: math.sqrt(24) / math.sqrt(105)}


def coefficients(activation: str, mix_coeffs: Sequence[float] | None = None) -> dict[int, float]:
    """The activation's nonzero coefficients ``{k: c_k}`` on h_k (``mix_coeffs[k]`` is c_k for ``hermite_mix``)."""
    match activation:
        case "he4":
            return {4: 1.0}
        case "he6":
            return {6: 1.0}
        case "raw_z4":
            return dict(RAW_Z4)
        case "hermite_mix":
            if not mix_coeffs:
                raise ValueError("activation='hermite_mix' needs mix_coeffs (c_k on h_k, index = degree k)")
            return {k: float(c) for k, c in enumerate(mix_coeffs) if c != 0.0}
    raise ValueError(f"activation={activation!r}: expected one of {', '.join(ACTIVATIONS)}")


def check_mix(option: str, mix_coeffs: Sequence[float] | None) -> None:
    """A ``hermite_mix`` list: finite, odd degrees zero (σ even), at least one nonzero degree >= 1."""
    if mix_coeffs is None or not all(isinstance(c, int | float) and math.isfinite(c) for c in mix_coeffs):
        raise ValueError(f"{option}={mix_coeffs!r}: expected a list of finite c_k (index = degree k)")
    if odd := [k for k, c in enumerate(mix_coeffs) if k % 2 == 1 and c != 0.0]:
        raise ValueError(f"{option}={list(mix_coeffs)!r}: odd degree(s) {odd} nonzero; σ must be even")
    if not any(c != 0.0 for c in mix_coeffs[1:]):
        raise ValueError(f"{option}={list(mix_coeffs)!r}: expected a nonzero c_k at some degree k >= 2")


def information_exponent(coeffs: dict[int, float], tol: float = 1e-12) -> int:
    """The smallest degree k >= 1 with |c_k| > tol."""
    return min(k for k, c in coeffs.items() if k >= 1 and abs(c) > tol)


def hermite_e(z: Tensor, n: int) -> list[Tensor]:
    """[He_0(z), ..., He_n(z)] by He_{k+1} = z·He_k − k·He_{k−1}."""
    out = [torch.ones_like(z), z]
    for k in range(1, n):
        out.append(z * out[k] - k * out[k - 1])
    return out[: n + 1]


def sigma(z: Tensor, coeffs: dict[int, float]) -> Tensor:
    """σ(z) = Σ_k c_k·He_k(z)/√k!."""
    values = hermite_e(z, max(coeffs))
    return sum(c * values[k] / math.sqrt(math.factorial(k)) for k, c in coeffs.items())


def kernel(x: Tensor, coeffs: dict[int, float], other: dict[int, float] | None = None) -> Tensor:
    """Σ_k c_k·c'_k·x^k elementwise (``other`` None: c' = c)."""
    other = coeffs if other is None else other
    return sum(c * other[k] * x**k for k, c in coeffs.items() if k in other) + 0 * x


def kernel_prime(x: Tensor, coeffs: dict[int, float], other: dict[int, float] | None = None) -> Tensor:
    """d/dx of :func:`kernel`: Σ_k k·c_k·c'_k·x^(k−1)."""
    other = coeffs if other is None else other
    return sum(k * c * other[k] * x ** (k - 1) for k, c in coeffs.items() if k in other and k >= 1) + 0 * x


def hermite_projection(fn: Callable[[Tensor], Tensor], degree: int, nodes: int = 80) -> list[float]:
    """E[fn(z)·h_k(z)] for k = 0..degree by Gauss–Hermite quadrature (``numpy.polynomial.hermite_e.hermegauss``)."""
    from numpy.polynomial.hermite_e import hermegauss

    z, w = hermegauss(nodes)
    z, w = torch.as_tensor(z), torch.as_tensor(w / math.sqrt(2 * math.pi))
    f = fn(z)
    return [float((w * f * h).sum()) / math.sqrt(math.factorial(k)) for k, h in enumerate(hermite_e(z, degree))]


def information_exponent_of(fn: Callable[[Tensor], Tensor], degree: int = 12, tol: float = 1e-8) -> int:
    """The information exponent of any function: the smallest k >= 1 with E[fn·h_k] ≠ 0 (quadrature)."""
    proj = hermite_projection(fn, degree)
    found = [k for k in range(1, degree + 1) if abs(proj[k]) > tol]
    if not found:
        raise ValueError(f"no Hermite component of degree 1..{degree} above {tol}")
    return found[0]
