"""The seeded additive teacher: orthonormal directions V (P×d) and power-law second layer a*_p ∝ p^(−β)."""

from __future__ import annotations

import torch
from torch import Tensor


def power_law(P: int, beta: float) -> Tensor:
    """a*_p = p^(−β)/‖(q^(−β))_{q≤P}‖₂ (float64, Σ a*² = 1)."""
    a = torch.arange(1, P + 1, dtype=torch.float64) ** (-beta)
    return a / a.norm()


def directions(d: int, P: int, seed: int) -> Tensor:
    """V ∈ R^{P×d} with orthonormal rows: QR of a d×P Gaussian matrix drawn from ``seed`` (float64)."""
    gen = torch.Generator().manual_seed(int(seed))
    q, r = torch.linalg.qr(torch.randn(d, P, generator=gen, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).T.contiguous()  # sign fix: unique QR


def make_teacher(d: int, P: int, beta: float, seeds: list[int]) -> tuple[Tensor, Tensor]:
    """One teacher per seed: V (R, P, d) and a* (R, P)."""
    V = torch.stack([directions(d, P, s) for s in seeds])
    return V, power_law(P, beta).expand(len(seeds), P).clone()
