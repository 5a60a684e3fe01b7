"""Seeded sparse-regression problems (card ``adam_sharpness``, public code's ``generate_data``)."""

from __future__ import annotations

from typing import Literal

import numpy as np

ZMode = Literal["rademacher", "gaussian"]
#: Every non-zero of w* has at least this magnitude (values redrawn until they do).
MIN_ABS = 1e-2


def sparse_w_star(rng: np.random.Generator, d: int, k: int) -> np.ndarray:
    """k-sparse w* (d,): uniform random support, values U(−1, 1) redrawn until every |value| ≥ ``MIN_ABS``."""
    support = rng.choice(d, size=k, replace=False)
    values = rng.uniform(-1.0, 1.0, size=k)
    while k and np.abs(values).min() < MIN_ABS:
        values = rng.uniform(-1.0, 1.0, size=k)
    w = np.zeros(d)
    w[support] = values
    return w


def inputs(rng: np.random.Generator, n: int, d: int, z_mode: ZMode) -> np.ndarray:
    """(n, d) inputs: uniform ±1 (``rademacher``) or N(0, I) (``gaussian``)."""
    if z_mode == "rademacher":
        return rng.integers(0, 2, size=(n, d)).astype(np.float64) * 2 - 1
    return rng.standard_normal((n, d))


def sparse_problem(d: int, k: int, n: int, n_test: int, z_mode: ZMode, seed: int) -> dict[str, np.ndarray]:
    """One seeded problem: ``Z`` (n, d), clean ``y``, ``w_star``, and ``n_test`` fresh test samples."""
    rng = np.random.default_rng(seed)
    w = sparse_w_star(rng, d, k)
    Z = inputs(rng, n, d, z_mode)
    Zt = inputs(rng, n_test, d, z_mode)
    return {"Z": Z, "y": Z @ w, "w_star": w, "Z_test": Zt, "y_test": Zt @ w}
