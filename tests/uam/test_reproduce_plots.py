"""The reproduction's plot drawn from a small synthetic result (no training): titled, labelled, one legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.uam import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plot_is_titled_and_labelled(tmp_path: Path) -> None:
    """Catches an untitled plot, an unlabelled axis or bars without a legend naming them."""
    runs = [{"mode": "mislabeled", "seed": s, "results": {label: {"FA": 50.0, "TA": 90.0} for label in R.ROWS}}
            for s in (0, 1)]  # fmt: skip
    assert Path(R._plot(runs, tmp_path)).stat().st_size > 0
