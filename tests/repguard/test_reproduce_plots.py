"""The reproduction's plots drawn from a small synthetic result (no training): titled, labelled, one legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.repguard import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_labelled(tmp_path: Path) -> None:
    """Catches an untitled plot, an unlabelled axis or bars and curves without a legend naming them."""
    metrics = {"asr_wt_mean": 50.0, "asr_wo": 0.0, "ca_avg": 97.0}
    table: R.Table = {}
    for attack in (*R.SINGLE, "mtba"):
        table[(("refusal", attack, 0.05, 0.0), 0)] = {name: dict(metrics) for name in R.DEFENSES}
    for attack in R.SINGLE:
        for rate in R.SWEEP:
            table[(("refusal", attack, rate, 0.0), 0)] = {n: dict(metrics) for n in ("no_defense", "repguard")}
    assert Path(R._plot_defenses(table, 0, tmp_path)).stat().st_size > 0
    assert Path(R._plot_sweep(table, 0, tmp_path)).stat().st_size > 0
