"""`zoo reproduce prune_finetune --quick` end to end (slow; CI runs it): the exact-merge and schedule claims hold on
real pruning of the pretrained TSFM, and table, JSON and plots are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_merge_and_schedule_claims(tmp_path: Path) -> None:
    """C1 (merged = masked, parameter bookkeeping), C2 (schedule, block-parameter drop) and C4 (Prune+FT within 1.05 x
    full FT on the median of three seeds, stage 1 on the fine-tuned validation MSE) hold: exit code 0; both stage-1
    selectors are in the table."""
    from zoo.core.reproduce import dispatch

    code = dispatch(["reproduce", "prune_finetune", "--quick", "--out", str(tmp_path)])
    blob = json.loads((tmp_path / "prune_finetune.json").read_text())
    claims = {c["name"]: c for c in blob["claims"]}
    for name, claim in claims.items():
        if name.startswith(("C1", "C2")) and claim["asserted"]:
            assert claim["holds"], (name, claim["value"])
    assert claims["C4 taylor: Prune+FT / FT test MSE (H-mean)"]["holds"] and code == 0
    assert "C4 taylor: Prune+FT / FT with stage 1 on pruned" in claims  # the other selector, printed
    assert blob["settings"]["seeds"] == [0, 1, 2]
    assert "| finetuned (gated) |" in (tmp_path / "prune_finetune.md").read_text()
    assert (tmp_path / "prune_finetune.md").is_file() and (tmp_path / "prune_finetune_mse.png").is_file()
