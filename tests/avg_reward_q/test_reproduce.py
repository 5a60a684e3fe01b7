"""`zoo reproduce avg_reward_q --quick` end to end (slow; CI runs it): every asserted claim holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import reproduce_quick


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 with C1 (2), C2 (3), C3 (1), C4' (1), C5 (3) asserted and holding; table, JSON and plots written."""
    blob = reproduce_quick("avg_reward_q", tmp_path, {"C1": 2, "C2": 3, "C3": 1, "C4'": 1, "C5": 3},
                           ("avg_reward_q_span_mse.png", "avg_reward_q_drift.png"))  # fmt: skip
    assert blob["metrics"]["instance"]["gap"] == pytest.approx(3.0071, abs=1e-3)
