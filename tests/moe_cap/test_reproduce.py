"""`zoo reproduce moe_cap --quick` end to end (slow; CI runs it): every asserted claim C1-C5 holds on the six tiny
configs, and the table, JSON and plots are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 and each claim family present and holding (a dropped claim or a failing one is caught)."""
    from zoo.core.reproduce import dispatch

    code = dispatch(["reproduce", "moe_cap", "--quick", "--out", str(tmp_path)])
    blob = json.loads((tmp_path / "moe_cap.json").read_text())
    asserted = [c for c in blob["claims"] if c["asserted"]]
    assert code == 0 and all(c["holds"] for c in asserted), [c["name"] for c in asserted if not c["holds"]]
    for prefix, count in {"C1": 3, "C2": 2, "C3": 10, "C4": 4, "C5": 9}.items():
        assert sum(c["name"].startswith(prefix) for c in asserted) == count, prefix
    for name in ("moe_cap.md", "moe_cap_activation.png", "moe_cap_radar.png"):
        assert (tmp_path / name).stat().st_size > 0, name
