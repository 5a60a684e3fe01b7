"""The reproduction's plot drawn from a small synthetic result (no training): titled, labelled, one legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.craft import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plot_is_titled_and_labelled(tmp_path: Path) -> None:
    """Catches an untitled plot, an unlabelled axis or bars without a legend naming them."""
    scores = {"mrr": 0.5, "mrr_seen": 0.6, "mrr_unseen": 0.4}
    runs = [{"stream": s, "seed": seed, "results": {m: scores for m in R.MODELS}} for s in R.STREAMS for seed in (0, 1)]
    assert Path(R._plot(runs, tmp_path)).stat().st_size > 0
