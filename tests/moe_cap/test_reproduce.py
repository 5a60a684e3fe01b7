"""`zoo reproduce moe_cap --quick` end to end (slow; CI runs it): every asserted claim C1-C5 holds on the six tiny
configs, and the table, JSON and plots are written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import reproduce_quick


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 and each claim family present and holding (a dropped claim or a failing one is caught)."""
    reproduce_quick("moe_cap", tmp_path, {"C1": 3, "C2": 2, "C3": 10, "C4": 4, "C5": 9},
                    ("moe_cap_activation.png", "moe_cap_radar.png"))  # fmt: skip
