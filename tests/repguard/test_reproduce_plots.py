"""The reproduction's plot drawn from a small synthetic result (no training): titled, labelled, one legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.repguard import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plot_is_titled_and_labelled(tmp_path: Path) -> None:
    """Catches an untitled plot, an unlabelled axis or bars without a legend naming them."""
    arms = {(task, attack): {name: {"asr_wt_mean": 50.0} for name in ("no_defense", *R.ARMS, *R.POST_HOC)}
            for task in R.TASKS for attack in (*R.ATTACKS, "none")}  # fmt: skip
    assert Path(R._plot(arms, tmp_path)).stat().st_size > 0
