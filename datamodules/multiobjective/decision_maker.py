"""A simulated decision maker answering pairwise comparisons with probit noise (card ``bope_monne``, BOPE step 3.3).

The DM prefers the outcome with the larger true utility ``g``; with probit noise of scale σ the answer is flipped
with probability ``1 − Φ(|g(y₁) − g(y₂)|/σ)``. An exact tie goes to the first outcome of the pair.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class ProbitDM:
    """A decision maker with true utility ``utility`` and probit noise ``sigma`` (0: noise-free).

    Args:
        utility: the true utility ``g``, ``(..., k) -> (...)``.
        sigma: probit noise scale (>= 0).
        generator: the source of the flips; one uniform is drawn per pair even when ``sigma == 0``, so a noise-free
            and a noisy run consume the same random stream.
    """

    def __init__(self, utility: nn.Module, sigma: float, generator: torch.Generator) -> None:
        if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma >= 0):
            raise ValueError(f"ProbitDM: sigma={sigma!r}; expected a finite number >= 0")
        self.utility, self.sigma, self.generator = utility, float(sigma), generator

    def flip_probability(self, y1: Tensor, y2: Tensor) -> Tensor:
        """``1 − Φ(|g(y₁) − g(y₂)|/σ)`` per pair, ``(..., k), (..., k) -> (...)``; 0 when σ = 0."""
        gap = (self.utility(y1) - self.utility(y2)).abs()
        if self.sigma == 0:
            return torch.zeros_like(gap)
        return torch.special.ndtr(-gap / self.sigma)  # 1 − Φ(z) = Φ(−z), accurate in the tail

    def compare(self, y: Tensor) -> Tensor:
        """Answer ``n`` comparisons.

        Args:
            y: the pairs, ``(n, 2, k)``.

        Returns:
            Long ``(n, 2)``: per pair the local (winner, loser) indices in {0, 1}.
        """
        if y.dim() != 3 or y.shape[1] != 2:
            raise ValueError(f"ProbitDM.compare: y has shape {tuple(y.shape)}; expected (n, 2, k) pairs")
        with torch.no_grad():
            g = self.utility(y)
            second = (g[:, 1] > g[:, 0]).long()  # the truly better one; a tie goes to index 0
            p = self.flip_probability(y[:, 0], y[:, 1])
        u = torch.rand(len(y), generator=self.generator, dtype=torch.float64)
        winner = second ^ (u < p.to(u)).long()
        return torch.stack((winner, 1 - winner), dim=-1)

    def comparisons(self, y_pairs: Tensor, offset: int = 0) -> Tensor:
        """Answer ``n`` comparisons as global row indices, for pairs stored as rows ``offset + 2i, offset + 2i + 1``.

        Args:
            y_pairs: the pairs, ``(n, 2, k)``.
            offset: the row of the first pair's first outcome.

        Returns:
            Long ``(n, 2)``: (winner, loser) rows, as BoTorch's ``comparisons``.
        """
        local = self.compare(y_pairs)
        return local + offset + 2 * torch.arange(len(y_pairs)).unsqueeze(-1)
