"""The reproduction's plots drawn from a small made-up result (no runs): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.binary_dag import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_curve_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or arms told apart by colour only (identical curves here)."""
    chain = [[0, 0, 1, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]
    wrong = [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 1, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]
    runs = []
    for n in ("2k", "5k", "20k"):
        for arm, est, shd in (("two-stage", chain, 0), ("first-order", wrong, 4), ("oracle", chain, 0),
                              ("joint saturated", wrong, 4)):  # fmt: skip
            runs.append({"setting": f"interaction5 n={n}", "arm": arm, "seed": 0, "estimate": est,
                         "metrics": {"cpdag_shd": shd}})  # fmt: skip
    paths = [R.plot_graphs(runs, tmp_path), R.plot_shd_by_n(runs, tmp_path)]
    assert [Path(p).name for p in paths] == ["binary_dag_graphs.png", "binary_dag_shd_by_n.png"]
    assert all(Path(p).stat().st_size > 0 for p in paths)
