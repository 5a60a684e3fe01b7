"""Statistical behaviour over fixed seeds (card tests 7 and 8): ordering and emergence, and the collapse regression."""

from __future__ import annotations

import math
from statistics import fmean, median

import torch

from datamodules.gaussian_teacher.hermite import coefficients
from datamodules.gaussian_teacher.teacher import make_teacher
from zoo.emergence.model import HermiteStudent, StepConfig, population_steps, sharpness, spearman_with_index

HE4 = coefficients("he4")


def _passages(lr_a: float, steps: int, seeds: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """First updates with M_p > 0.3 and > 0.9 (R, P) of the card's protocol on ``seeds`` (one vectorised run)."""
    V, astar = make_teacher(400, 8, 1.5, seeds)
    model = HermiteStudent(len(seeds), 16, 400, HE4, 0.3, seeds[0])
    first = torch.full((2, len(seeds), 8), math.inf, dtype=torch.float64)

    def observe(Ms: torch.Tensor, t0: int) -> None:
        steps = torch.arange(t0, t0 + len(Ms), dtype=torch.float64).view(-1, 1, 1)
        for i, th in enumerate((0.3, 0.9)):
            first[i] = torch.minimum(first[i], torch.where(Ms > th, steps, math.inf).amin(0))

    population_steps(model, V, astar, StepConfig(0.2, lr_a, HE4, HE4), steps, 0, [observe])
    return first[0], first[1]


def test_ordering_and_emergence_three_seeds() -> None:
    """3 seeds, 2e4 updates: τ_1 = min_p τ_p in each seed, mean Spearman ρ(τ_p, p) > 0.5, median s_p < 0.25: catches
    a wrong a*-ordering (teacher weights unused or reversed) or smooth (non-emergent) learning curves."""
    t03, t09 = _passages(0.0, 20_000, [0, 1, 2])
    rhos, sharp = [], []
    for r in range(3):
        tau = t09[r].tolist()
        assert math.isfinite(tau[0]) and tau[0] == min(tau), tau
        rhos.append(spearman_with_index(tau))
        sharp += [s for s in sharpness(t03[r].tolist(), tau) if not math.isnan(s)]
    assert fmean(rhos) > 0.5, rhos
    assert median(sharp) < 0.25, sharp


def test_trained_second_layer_collapses() -> None:
    """`trained` with lr_a = 0.002 learns <= 2 directions in 2e4 updates (guards the default against silently
    switching to joint training: `fixed` learns >= 6 in the same budget, see test_ordering_and_emergence)."""
    _, t09 = _passages(0.002, 20_000, [0])
    assert int(torch.isfinite(t09).sum()) <= 2, t09
