"""`zoo reproduce xrlhf --quick` end to end (slow; CI runs it): claims 1-4 hold as medians over seeds 0-2, and the
table, JSON and plot are written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import reproduce_quick


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0, all nine asserted claims present and holding (a dropped or failing claim is caught)."""
    blob = reproduce_quick("xrlhf", tmp_path, {"C1": 3, "C2": 2, "C3": 3, "C4": 1}, ("xrlhf_fix_rates.png",))
    arms = {row["arm"] for row in blob["metrics"]["rows"]}
    assert {"convex", "knn", "random set", "planted"} <= arms
