"""`zoo reproduce prune_finetune --quick` end to end (slow; CI runs it): the exact-merge and schedule claims hold on
real pruning of the pretrained TSFM, and table, JSON and plots are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_merge_and_schedule_claims(tmp_path: Path) -> None:
    """C1 (merged = masked, parameter bookkeeping) and C2 (schedule, block-parameter drop) hold; C4 is reported per
    target with its block-parameter drop. The exit code is 1 while C4 fails on taylor (see the method page)."""
    from zoo.core.reproduce import dispatch

    code = dispatch(["reproduce", "prune_finetune", "--quick", "--out", str(tmp_path)])
    blob = json.loads((tmp_path / "prune_finetune.json").read_text())
    claims = {c["name"]: c for c in blob["claims"]}
    for name, claim in claims.items():
        if name.startswith(("C1", "C2")) and claim["asserted"]:
            assert claim["holds"], (name, claim["value"])
    c4 = [c for n, c in claims.items() if n.startswith("C4 taylor: Prune+FT / FT")]
    assert len(c4) == 1 and code == (0 if c4[0]["holds"] else 1)
    assert (tmp_path / "prune_finetune.md").is_file() and (tmp_path / "prune_finetune_mse.png").is_file()
