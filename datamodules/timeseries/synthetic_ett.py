"""Seeded ETTh-shaped synthetic series, written once as a CSV in the zoo cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from datamodules.timeseries.cache import atomic_write
from datamodules.timeseries.csv_series import ETT_COLUMNS
from zoo.core.cache import cache_root
from zoo.core.messages import say

#: Rows of the real ETTh files (the synthetic one has as many).
ETT_HOUR_ROWS = 17_420
#: Bumped whenever the synthetic ETT generator changes (part of the cached file name).
_SYNTH_VERSION = 1


def synthetic_ett_frame(seed: int = 0, rows: int = ETT_HOUR_ROWS) -> pd.DataFrame:
    """The seeded ETTh-shaped frame: six loads and an oil temperature driven by lagged loads.

    ``load_k(t) = a_k + b_k t/T + c_k sin(2 pi t/24 + phi_k) + d_k sin(2 pi t/168 + psi_k) + e_k(t)`` with
    stationary AR(1) noise ``e_k`` (coefficient 0.9, innovation std 0.3), and
    ``OT(t) = sum_k w_k load_k(t - lag_k) + 0.5 N(0, 1)``, ``lag_k`` in ``{1..24}``.
    The coefficient ranges are ours (loads of a few units like ETTh1's, OT of tens).

    Args:
        seed: generator seed.
        rows: number of hourly rows from ``2016-07-01 00:00:00``.

    Returns:
        The frame with columns :data:`ETT_COLUMNS` (``date`` as strings ``YYYY-mm-dd HH:MM:SS``).
    """
    rng = np.random.default_rng([seed, 0xE7])
    k, lag_max = 6, 24
    n = rows + lag_max  # lag_max warm-up rows so that load_k(t - lag_k) exists for t = 0
    t = np.arange(-lag_max, rows, dtype=np.float64)[:, None]
    a = rng.uniform(2.0, 10.0, k)
    b = rng.uniform(-3.0, 3.0, k)
    c = rng.uniform(0.5, 3.0, k)
    d = rng.uniform(0.2, 1.5, k)
    phi, psi = rng.uniform(0.0, 2 * np.pi, (2, k))
    w = rng.uniform(0.2, 1.0, k)
    lag = rng.integers(1, lag_max + 1, k)
    ar, sigma = 0.9, 0.3
    innovation = rng.normal(0.0, sigma, (n, k))
    noise = np.empty((n, k))
    noise[0] = rng.normal(0.0, sigma / np.sqrt(1 - ar**2), k)  # stationary start
    for i in range(1, n):  # 17k steps over a (6,) vector: a few ms
        noise[i] = ar * noise[i - 1] + innovation[i]
    loads = a + b * t / rows + c * np.sin(2 * np.pi * t / 24 + phi) + d * np.sin(2 * np.pi * t / 168 + psi) + noise
    rows_idx = np.arange(rows)[:, None] + lag_max - lag  # row of load_k(t - lag_k) in the padded array
    ot = (w * np.take_along_axis(loads, rows_idx, axis=0)).sum(1) + 0.5 * rng.normal(0.0, 1.0, rows)
    dates = pd.date_range("2016-07-01 00:00:00", periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    frame = pd.DataFrame(loads[lag_max:], columns=list(ETT_COLUMNS[1:7]))
    frame.insert(0, "date", dates)
    frame["OT"] = ot
    return frame


def write_synthetic_ett(path: str, seed: int = 0) -> str:
    """Write the seeded synthetic ETTh CSV (17,420 hourly rows, the ETT header) to ``path`` (write-then-rename).

    Args:
        path: target CSV file; parent folders are created.
        seed: generator seed.

    Returns:
        ``path``.
    """
    frame = synthetic_ett_frame(seed)
    atomic_write(Path(path), lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6f"))
    return path


def synthetic_ett_path(seed: int = 0) -> Path:
    """The cached synthetic ETTh CSV of ``seed``, written on first use.

    The file is ``$ZOO_CACHE/ltsf/synthetic_ett_v<version>_seed<seed>.csv``.
    """
    target = cache_root() / "ltsf" / f"synthetic_ett_v{_SYNTH_VERSION}_seed{seed}.csv"
    if not target.is_file():
        write_synthetic_ett(str(target), seed)
        say(f"synthetic_ett: wrote the seeded ETTh-shaped CSV once; cached {target}")
    return target
