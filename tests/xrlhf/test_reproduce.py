"""`zoo reproduce xrlhf --quick` end to end (slow; CI runs it): claims 1-4 hold as medians over seeds 0-2, and the
table, JSON and plot are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0, all nine asserted claims present and holding (a dropped or failing claim is caught)."""
    from zoo.core.reproduce import dispatch

    code = dispatch(["reproduce", "xrlhf", "--quick", "--out", str(tmp_path)])
    blob = json.loads((tmp_path / "xrlhf.json").read_text())
    asserted = [c for c in blob["claims"] if c["asserted"]]
    assert code == 0 and all(c["holds"] for c in asserted), [c["name"] for c in asserted if not c["holds"]]
    for prefix, count in {"C1": 3, "C2": 2, "C3": 3, "C4": 1}.items():
        assert sum(c["name"].startswith(prefix) for c in asserted) == count, prefix
    arms = {row["arm"] for row in blob["metrics"]["rows"]}
    assert {"convex", "knn", "random set", "planted"} <= arms
    for name in ("xrlhf.md", "xrlhf_fix_rates.png"):
        assert (tmp_path / name).stat().st_size > 0, name
