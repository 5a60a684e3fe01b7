"""The reproduction's plots drawn from a small made-up result (no runs): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.adam_sharpness import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_curve_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or arms told apart by colour only (identical curves here)."""
    loss = [[100.0 * i, 1.0 / i, 2.0 / i] for i in range(1, 6)]
    history = [{"step": 1000 * i, "trH": [1.0, 2.0], "tr_sqrt_diagH": [3.0, 4.0]} for i in range(4)]
    curves = {name: {"loss": loss, "history": history} for name in R.QUICK_ARMS}
    paths = R._plots(curves, tmp_path)
    assert [Path(p).name for p in paths] == ["adam_sharpness_loss.png", "adam_sharpness_sharpness.png"]
    assert all(Path(p).stat().st_size > 0 for p in paths)
