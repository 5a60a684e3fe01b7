"""The reproduction's plots drawn from a small made-up result (no runs): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.emergence import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_curve_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or arms told apart by colour only (identical curves here)."""
    P, S = 8, 4
    hist = [{"t": t, "M": [[0.5] * P] * S, "loss_fixed": [0.4] * S, "loss_refit": [0.1] * S} for t in (0, 100, 1000)]
    arm = {"P": P, "m": 16, "d": 400, "beta": 1.5, "tau": [[100.0 * p for p in range(1, P + 1)]] * S,
           "median_tau": [100.0 * p for p in range(1, P + 1)], "tau_slope": 1.0, "history": hist}  # fmt: skip
    metrics = {"arms": {"fixed": arm, "trained": arm, "raw_z4": arm}}
    paths = R.make_plots(metrics, tmp_path)
    assert [Path(p).name for p in paths] == ["emergence_overlaps.png", "emergence_recovery_times.png",
                                             "emergence_loss.png"]  # fmt: skip
    assert all(Path(p).stat().st_size > 0 for p in paths)
