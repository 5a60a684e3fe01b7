"""The reproduction's plots drawn from a small made-up result (no runs): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.bope_monne import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_curve_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or arms told apart by colour only (identical curves here)."""
    runs = []
    for arm in R.ARMS:
        for noise in ("none",) if arm in R.DM_FREE else ("none", "probit"):
            for seed in range(2):
                history = [{"u": 0.5, "regret": 1.0}, {"u": 0.6, "regret": 0.8}, {"u": 0.7, "regret": 0.6}]
                if arm not in R.DM_FREE:
                    history[0].update(pe_u=0.5, acc=0.9, tau=0.8)
                runs.append({"setting": R.MAIN, "arm": arm, "noise": noise, "seed": seed, "history": history,
                             "seconds": 1.0})  # fmt: skip
    paths = [R.plot_stages(runs, tmp_path), R.plot_pe_stage(runs, tmp_path)]
    assert [Path(p).name for p in paths] == ["bope_monne_utility_by_stage.png", "bope_monne_pe_stage.png"]
    assert all(Path(p).stat().st_size > 0 for p in paths)
    assert "| vehicle_safety-pwl | MoNNE | none | 0.700 [0.700, 0.700] | 0.500" in R.table(runs)
