"""`zoo evaluate rawmed`: the documented command on two folders of per-table CSVs, through the launcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datamodules.ehr.datamodule import EHRDataModule
from zoo.launcher import evaluate


def test_zoo_evaluate_rawmed_writes_metrics_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest's tool runs on the real test split vs another split and writes metrics.json and report.md."""
    dm = EHRDataModule(n_stays=60, max_events=8)
    real, other = dm.write_split("test", str(tmp_path / "test")), dm.write_split("holdout", str(tmp_path / "syn"))
    code = evaluate(["rawmed", "--real-test", real, "--synthetic", other, "--parts", "fidelity", "temporal",
                     "--out", str(tmp_path / "out")])  # fmt: skip
    assert code == 0
    blob = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert 0 <= blob["cde/mean"] <= 1 and "time_gap_ks/all" in blob
    assert (tmp_path / "out" / "report.md").stat().st_size > 0


def test_zoo_evaluate_lists_the_tools_and_a_bad_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An unknown slug prints the usage with the methods that have a tool; a missing folder is one line, code 2."""
    assert evaluate(["nope"]) == 2
    assert "rawmed" in capsys.readouterr().err
    code = evaluate(["rawmed", "--real-test", str(tmp_path / "none"), "--synthetic", str(tmp_path / "none")])
    assert code == 2
    assert "Traceback" not in capsys.readouterr().err
