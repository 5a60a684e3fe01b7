"""The reproduction's plot drawn from a small synthetic result (no training): titled, labelled, one legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.xrlhf import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plot_is_titled_and_labelled(tmp_path: Path) -> None:
    """Catches an untitled plot, an unlabelled axis or bars and points without a legend naming them."""
    rows = [{"arm": arm, "retrain_fixed": 0.5, "unlearn_fixed": 0.5, "union_recall": 0.5} for arm in R.ARMS]
    assert Path(R._plot(rows, tmp_path)).stat().st_size > 0
