"""The reproduction's plots drawn from a small synthetic result (no training): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.dco import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_curve_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or arms told apart by colour only (CE @100 and the early-stopped CE
    coincide in real runs; every curve is identical here)."""
    vals = {k: 0.5 for k in R.KS}
    rows = [("CE", 100, vals), ("CE", 6000, vals), ("CE early-stopped (val pass@16)", -1, vals)]
    rows += [(arm, 6000, vals) for arm in R.KANSWER_ARMS if arm != "CE"]
    hist = [{"epoch": e, "test/pass@16": 0.5, "test/pass@256": 0.9} for e in (99.0, 199.0, 299.0)]
    lm = {arm: [hist, hist] for arm in R.LM_ARMS}
    paths = [R._plot_kanswer(rows, tmp_path), R._plot_lm(lm, tmp_path)]
    assert all(Path(p).stat().st_size > 0 for p in paths)
