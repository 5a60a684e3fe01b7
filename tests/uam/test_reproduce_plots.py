"""The reproduction's plot drawn from a small made-up result (no training): titled, labelled, one legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.uam import reproduce as R

from .test_reproduce import fake_runs


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plot_is_titled_and_labelled(tmp_path: Path) -> None:
    """Catches an untitled plot, an unlabelled axis or bars without a legend naming them (one bar series per
    dataset and forgetting mode, digits and MNIST)."""
    assert Path(R._plot(fake_runs(("digits", "mnist")), tmp_path)).stat().st_size > 0
