"""The CAP radar compares systems (issue #21, point 6): axes normalised across the runs drawn together, a refused
one-system radar, and ``python -m zoo.moe_cap.cap_radar`` drawing any set of run JSONs on one PNG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zoo.core.reproduce import figure_problems
from zoo.moe_cap import cap_radar as R


def record(name: str, tpot: float, cost: float, em: float) -> dict[str, Any]:
    """A minimal ``moecap_{stage}.json`` record as the callback writes it."""
    means = {"tpot_s": tpot, "cost_usd": cost, "em": em, "ttft_s": 0.01, "s_mfu_decode": 0.1}
    return {"system_name": name, "spec": {}, "knobs": {}, "means": means, "records": []}


def write_runs(tmp_path: Path) -> list[Path]:
    """Three run folders: a fast/cheap/inaccurate, a slow/dear/accurate and a middle system (two share a name)."""
    runs = [("hf-eager-mixtral", 0.010, 9000.0, 0.2), ("hf-eager-mixtral", 0.030, 9500.0, 0.6),
            ("hf-eager-olmoe", 0.020, 10000.0, 0.4)]  # fmt: skip
    paths = []
    for i, (name, tpot, cost, em) in enumerate(runs):
        path = tmp_path / f"run{i}" / "moecap_validate.json"
        path.parent.mkdir()
        path.write_text(json.dumps(record(name, tpot, cost, em)))
        paths.append(path)
    return paths


def test_scores_are_normalised_across_runs_not_per_run(tmp_path: Path) -> None:
    """Catches a radar scored per run (each run alone: performance 100, cost 20, accuracy 20 whatever it measured):
    three runs loaded together score the fastest 100 and the slowest 20 on performance, the dearest 20 on cost, and
    accuracy relative to the least accurate run."""
    paths = write_runs(tmp_path)
    alone = [R.radar_scores(R.load_systems([p]))[0] for p in paths]
    assert alone == [{"performance": 100.0, "cost": 20.0, "accuracy": 20.0}] * 3  # the old callback radar
    together = R.radar_scores(R.load_systems(paths))
    assert [s["performance"] for s in together] == pytest.approx([100.0, 20.0, 60.0])
    assert [s["cost"] for s in together] == pytest.approx([20 + 1000 / 10000 * 80, 20 + 500 / 10000 * 80, 20.0])
    assert [s["accuracy"] for s in together] == pytest.approx([20.0, 20 + 0.4 / 0.8 * 80, 20 + 0.2 / 0.8 * 80])


def test_one_system_is_refused_and_names_are_kept_apart(tmp_path: Path) -> None:
    """Catches a degenerate one-system radar being drawn, and two runs of one config sharing a legend entry."""
    paths = write_runs(tmp_path)
    with pytest.raises(ValueError, match="compares systems: got 1"):
        R.draw_radar(R.load_systems(paths[:1]), tmp_path / "one.png")
    with pytest.raises(ValueError, match="compares systems"):
        R.radar(paths[0])
    names = [s["system_name"] for s in R.load_systems(paths)]
    assert names == ["hf-eager-mixtral [run0/moecap_validate]", "hf-eager-mixtral [run1/moecap_validate]",
                     "hf-eager-olmoe"]  # fmt: skip
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([record("same", 0.1, 1.0, 0.0), record("same", 0.2, 1.0, 0.0)]))
    assert [s["system_name"] for s in R.load_systems([listed])] == ["same #1", "same #2"]


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_command_draws_files_folders_and_a_reproduction_report(tmp_path: Path, monkeypatch: Any) -> None:
    """``python -m zoo.moe_cap.cap_radar`` draws record files, run folders and a reproduction report on one titled
    PNG with one legend entry per system; a single system or a missing file is one ``zoo: error:`` line, exit 2."""
    from matplotlib.figure import Figure

    drawn: list[Any] = []
    savefig = Figure.savefig

    def keep(fig: Any, *args: Any, **kwargs: Any) -> None:
        drawn.append((figure_problems(fig), [t.get_text() for t in fig.axes[0].get_legend().get_texts()]))
        savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    paths = write_runs(tmp_path)
    report = tmp_path / "moe_cap.json"
    runs = [{"family": f, "batch": b, "seed": s, "means": {"tpot_s": t * (1 + s), "cost_usd": 9017.5, "em": 0.0}}
            for f, t in (("mixtral", 0.003), ("olmoe", 0.005)) for b in (1, 8) for s in (0, 1, 2)]  # fmt: skip
    report.write_text(json.dumps({"slug": "moe_cap", "metrics": {"runs": runs}}))
    out = tmp_path / "cmp" / "cap.png"
    assert R.main([str(paths[0]), str(paths[1].parent), str(paths[2]), str(report), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    problems, legend = drawn[-1]
    assert problems == [] and len(legend) == 5
    assert legend[3].startswith("hf-eager mixtral b=8: ")  # the reproduction's families, medians over seeds
    assert R.reproduction_systems(runs)[0]["tpot_s"] == pytest.approx(0.006)
    assert R.main([str(paths[0]), "--out", str(tmp_path / "x.png")]) == 2
    assert R.main([str(tmp_path / "missing.json"), str(paths[0])]) == 2
    assert not (tmp_path / "x.png").exists()


def test_command_line_entry_point(tmp_path: Path) -> None:
    """The documented shell command runs (``python -m``), prints the PNG's path and exits 0."""
    paths = write_runs(tmp_path)
    done = subprocess.run([sys.executable, "-m", "zoo.moe_cap.cap_radar", *map(str, paths)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == paths[0].parent / "cap_radar.png"
    assert (paths[0].parent / "cap_radar.png").stat().st_size > 0
