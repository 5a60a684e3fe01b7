"""The reproduction's plot and table drawn from a small synthetic result (no training): titled, labelled, one legend;
the table names its evaluation negatives."""

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


def _runs(other_ap: float) -> list[dict]:
    scores = {"mrr": 0.5, "mrr_seen": 0.6, "mrr_unseen": 0.4, "hits10": 0.7, "ap_random": 0.8}
    row = {**scores, "other": {"mrr": 0.5, "ap_random": other_ap}}
    return [{"stream": s, "seed": 0, "results": {m: row for m in R.MODELS}} for s in R.STREAMS]


def test_table_names_the_evaluation_negatives_of_each_column() -> None:
    """Issue #21: the table says which negatives its main columns used (default: the public code's collision
    check) and carries the other setting beside them. Catches a table that drops the setting or mixes the two."""
    table = R._table(_runs(0.75))
    assert "eval_collision_check=true, the public code's draw on small DyGLib sets" in table
    assert "| mrr (false) | AP (random, false) |" in table
    assert "| A | CRAFT | 0.500 | 0.600 | 0.400 | 0.700 | 0.800 | 0.500 | 0.750 |" in table
    flipped = R._table(_runs(0.75), check="false")
    assert "eval_collision_check=false, the zoo's earlier draw" in flipped and "AP (random, true)" in flipped
    assert R.OPTIONS["eval_collision_check"][0] == "true"  # the default is the public code's draw
    assert "--data.init_args.eval_collision_check=false" in R._overrides("A", "false")
