"""The reproduction's plots drawn from a small synthetic result (no model runs): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zoo.core.reproduce import figure_problems
from zoo.moe_cap import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_curve_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches an untitled or unlabelled plot, or families (or radar systems) told apart by colour only: the tiny
    configs tie on the radar, and every family's curve is identical here. The radar draws on its own canvas, so its
    figure is checked as it is saved."""
    from matplotlib.figure import Figure

    radar: list[Any] = []
    savefig = Figure.savefig

    def keep(fig: Any, *args: Any, **kwargs: Any) -> None:
        radar.append(figure_problems(fig))
        savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    runs = [{"family": f, "batch": 8, "means": {"tpot_s": 0.01, "cost_usd": 0.0, "em": 0.0}} for f in R.CONFIGS]
    unions = {f: {"E": 8, "k": 2, "mean_count": {t: min(8.0, 2.0 * t) for t in R.UNION_ROWS}} for f in ("a", "b")}
    frac = {f: [0.5] * len(R.BATCHES) for f in R.MOE}
    paths = R._plots(runs, unions, frac, tmp_path)
    assert [Path(p).name for p in paths] == ["moe_cap_activation.png", "moe_cap_radar.png"]
    assert all(Path(p).stat().st_size > 0 for p in paths)
    assert radar[-1] == []  # the radar: titled, every system's legend entry its own look
