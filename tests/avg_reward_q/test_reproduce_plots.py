"""The reproduction's plots drawn from a small synthetic result (no runs): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.avg_reward_q import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_curve_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or variants told apart by colour only (identical curves here)."""
    ks = [100, 1000, 10000, 100000]
    row = {"curve_k": ks, "curve_mse": [1.0, 0.1, 0.01, 0.001], "curve_drift": [0.1, 0.2, 0.3, 0.4]}
    metrics = {"variants": {name: row for name in R.VARIANTS}, "instance": {"gap": 3.0, "mdp_seed": 0}}
    paths = R._plots(metrics, tmp_path)
    assert [Path(p).name for p in paths] == ["avg_reward_q_span_mse.png", "avg_reward_q_drift.png"]
    assert all(Path(p).stat().st_size > 0 for p in paths)
