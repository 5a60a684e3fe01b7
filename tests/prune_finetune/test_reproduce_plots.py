"""The reproduction's plots drawn from a small synthetic result (no training): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.prune_finetune import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_schedule_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or schedules told apart by colour only (the full grid: every target
    x (r, alpha), seeds overlaid; the schedule was left without a legend past 8 curves)."""
    medians = {t: {arm: {"mse": 0.1} for arm in R.ARMS} for t in R.TARGETS}
    history = [[1, 80, 0.0, 100, 20], [2, 64, 0.0, 80, 16]]
    stage1 = [{"r": r, "alpha": a, "summary": {"scored_entries": 100}, "history": history} for r, a in R.GRID]
    results = [{"target": t, "seed": s, "stage1": stage1} for t in R.TARGETS for s in (0, 1)]
    paths = [R._plot(medians, list(R.TARGETS), tmp_path), R._plot_schedule(results, tmp_path)]
    assert all(Path(p).stat().st_size > 0 for p in paths)
