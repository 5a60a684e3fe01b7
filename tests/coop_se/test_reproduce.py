"""`zoo reproduce coop_se --quick` end to end (slow; CI runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import reproduce_quick


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick(tmp_path: Path) -> None:
    """Exit code 0; every asserted claim C1-C5 present and holding; table, JSON and plots written."""
    reproduce_quick("coop_se", tmp_path, {"C1": 3, "C2": 3, "C3": 2, "C4": 3, "C5": 7, "safety:": 1},
                    ("coop_se_regret_vs_m.png", "coop_se_regret_curves.png"))  # fmt: skip
