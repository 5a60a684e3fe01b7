"""The reproduction's plots drawn from a small synthetic result (no simulation): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zoo.coop_se import reproduce as R
from zoo.core import reproduce as core


def _results() -> dict[str, dict[str, Any]]:
    """Every run label of ``--quick``, all with the same curve (the worst case: every curve on top of another)."""
    labels = [f"{prefix} m={m}" for prefix, (_, ms) in R.RUNS.items() for m in ms]
    return {label: {"regret": [[100.0] * 4] * 3, "curve_t": [1, 10, 100, 1000], "curve": [0.5, 5.0, 50.0, 100.0]}
            for label in labels}  # fmt: skip


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_regret_curve_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches an untitled plot, a title without the direction, and regret curves told apart by colour only (two
    of the five curves of ``coop_se_regret_curves.png`` hid under others: path m=8 under complete m=8, path m=1
    under no_comm m=8)."""
    seen: dict[str, Any] = {}

    def keep(fig: Any, out: Path, name: str) -> str:
        ax = fig.axes[0]
        handles, labels = ax.get_legend_handles_labels()
        seen[name] = (ax.get_title(), labels, {(h.get_marker(), h.get_linestyle()) for h in handles})
        return core.save_figure(fig, out, name)

    monkeypatch.setattr(R, "save_figure", keep)
    path = {m: 1000.0 / m for m in R.PATH_M}
    comp = {m: 1000.0 / m for m in R.COMPLETE_M}  # the complete graph exactly on the path: both must show
    paths = R._plots(_results(), path, comp, tmp_path, T=20000)
    assert [Path(p).name for p in paths] == ["coop_se_regret_vs_m.png", "coop_se_regret_curves.png"]
    assert all(Path(p).stat().st_size > 0 for p in paths)
    for title, _, _ in seen.values():
        assert title.startswith("coop_se:") and "lower is better" in title and "T = 20000" in title
    _, labels, styles = seen["coop_se_regret_curves.png"]
    assert labels == ["path m=1", "path m=8", "complete m=8", "no_comm m=8", "logsize m=8", "logrounds m=8"]
    assert len(styles) == 6  # six curves, six (marker, line style) pairs
