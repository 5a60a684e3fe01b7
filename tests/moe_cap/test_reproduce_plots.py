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


def test_radar_holds_every_family_that_ran_and_the_table_lists_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:  # fmt: skip
    """Catches a reproduction radar that drops a family, scores one seed instead of the seeds' median, or a table
    without the radar's rows (systems, their measured TPOT / cost / EM and the scores normalised across them)."""
    import zoo.moe_cap.cap_radar as cap_radar

    drawn: list[Any] = []
    monkeypatch.setattr(cap_radar, "draw_radar", lambda systems, path, **kw: drawn.append(systems) or path)
    keys = ("act_frac_decode", "act_experts_decode", "s_mbu_decode", "mbu_dense_decode", "s_mfu_decode",
            "mfu_dense_decode", "s_mfu_code_decode", "s_mfu_paper_decode", "cost_usd", "em")  # fmt: skip
    runs = [{"family": f, "batch": b, "seed": s,
             "means": {**dict.fromkeys(keys, 0.5), "tpot_s": (i + 1) * (s + 1) * 1e-3}}
            for i, f in enumerate(R.CONFIGS) for b in (1, 4, 8, 16) for s in (0, 1, 2)]  # fmt: skip
    frac = {f: [0.5] * len(R.BATCHES) for f in R.MOE}
    unions = {f: {"E": 8, "k": 2, "mean_count": {t: 2.0 for t in R.UNION_ROWS}} for f in ("a", "b")}
    R._plots(runs, unions, frac, tmp_path)
    systems = drawn[-1]
    assert [s["system_name"] for s in systems] == [f"hf-eager {f} b=8" for f in R.CONFIGS]
    assert [s["tpot_s"] for s in systems] == pytest.approx([(i + 1) * 2e-3 for i in range(len(R.CONFIGS))])
    table = R._table(runs, {})
    for i, family in enumerate(R.CONFIGS):
        assert f"| hf-eager {family} b=8 | {2 * (i + 1):.2f} | 0.50 | 0.500 | " in table
    assert "| hf-eager mixtral b=8 | 2.00 | 0.50 | 0.500 | 100.0 / 20.0 / 20.0 |" in table  # the fastest of six
    assert "| hf-eager llama b=8 | 12.00 | 0.50 | 0.500 | 20.0 / 20.0 / 20.0 |" in table  # the slowest
