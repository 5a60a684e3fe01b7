"""`zoo reproduce coop_se --quick` end to end (slow; CI runs it), and (issue #22, deliverable 8) every asserted claim of
`zoo reproduce coop_se` can fail.

`zoo.coop_se.reproduce.claims` reads only the runs' numbers, so the claim tests build made-up runs on which every
asserted claim holds (numbers shaped like the card's reference: Reg(m) ∝ m^-0.93, path = complete, no_comm ≈ 1.08·se,
one aggregated 39-bit message per edge per round), check they all hold, then perturb the numbers one claim reads the
way a broken implementation would and see that claim fail.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import reproduce_quick

from zoo.coop_se import reproduce as R


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick(tmp_path: Path) -> None:
    """Exit code 0; every asserted claim C1-C5 present and holding; table, JSON and plots written."""
    reproduce_quick("coop_se", tmp_path, {"C1": 3, "C2": 3, "C3": 2, "C4": 3, "C5": 7, "safety:": 1},
                    ("coop_se_regret_vs_m.png", "coop_se_regret_curves.png"))  # fmt: skip


T, A = 20_000, 5


def _run(regret_per_agent: float, m: int, **metrics: float) -> dict[str, Any]:
    spread = [1.0 + 0.02 * ((v % 3) - 1) for v in range(m)]  # max/mean = 1.02 (C4)
    base = {"bits_per_message_max": R._bound(m, T, A), "best_arm_eliminations": 0.0, "comm_rounds": float(T),
            "comm_phases": float(T), "msgs_per_edge_round_max": float(m - 1), "value_max_count": 0.0,
            "value_max_sum": 0.0, "bits_per_edge_round_max": float((m - 1) * R._bound(m, T, A))}  # fmt: skip
    return {"regret": [[regret_per_agent * s for s in spread]] * 3, "metrics": {**base, **metrics}, "diameter": m - 1,
            "edge_peak": 0}  # fmt: skip


def _results() -> dict[str, dict[str, Any]]:
    reg = {m: 1800.0 * m**-0.93 for m in R.PATH_M}
    out = {f"path m={m}": _run(reg[m], m) for m in R.PATH_M}
    out |= {f"complete m={m}": _run(reg[m], m) for m in R.COMPLETE_M}
    out["no_comm m=8"] = _run(1950.0, 8, bits_per_message_max=0.0, comm_rounds=0.0, comm_phases=0.0)
    logsize = {"bits_per_message_max": 39.0, "msgs_per_edge_round_max": 1.0, "bits_per_edge_round_max": 39.0,
               "value_max_count": 127_000.0, "value_max_sum": 114_000.0}  # fmt: skip
    out["logsize m=8"] = _run(reg[8] * 1.01, 8, **logsize)
    out["logrounds m=8"] = _run(520.0, 8, bits_per_message_max=153.0, comm_rounds=91.0, comm_phases=15.0)
    return out


def _scale(label: str, factor: float, agent: int | None = None) -> Callable[[dict], None]:
    def apply(res: dict) -> None:
        res[label]["regret"] = [[x * (factor if agent in (None, v) else 1.0) for v, x in enumerate(row)]
                                for row in res[label]["regret"]]  # fmt: skip

    return apply


def _set(label: str, key: str, value: float) -> Callable[[dict], None]:
    def apply(res: dict) -> None:
        res[label]["metrics"][key] = value

    return apply


def _flat_after_8(res: dict) -> None:  # no speed-up beyond 8 agents (samples of far agents never arrive)
    res["path m=16"]["regret"] = copy.deepcopy(res["path m=8"]["regret"])


#: claim name -> the perturbation that must make it fail (a broken implementation's numbers)
BREAKS: dict[str, Callable[[dict], None]] = {
    "C1 path m=1 regret within ±15% of the card's 1796": _scale("path m=1", 1.3),
    "C1 slope log Reg vs log m, m in {2,4,8,16}": _flat_after_8,
    "C1 Reg(8)/Reg(1) on the path": _scale("path m=8", 1.5),
    "C2 diameter gap |path-complete|/complete m=4": _scale("complete m=4", 1.2),
    "C2 diameter gap |path-complete|/complete m=8": _scale("complete m=8", 0.9),
    "C2 diameter gap |path-complete|/complete m=16": _scale("path m=16", 1.1),
    "C3 no_comm(8) / se(1)": _scale("no_comm m=8", 1.5),
    "C3 no_comm(8) / Coop-SE path(8)": _scale("path m=8", 1.6),
    "C4 max-agent / mean-agent regret, path m=4": _scale("path m=4", 1.4, agent=0),
    "C4 max-agent / mean-agent regret, path m=8": _scale("path m=8", 1.4, agent=3),
    "C4 max-agent / mean-agent regret, path m=16": _scale("path m=16", 2.0, agent=15),
    # flooding's one-sample messages: 7 per edge per round
    "C5 logsize bits per edge per round / log2(mAT)": _set("logsize m=8", "bits_per_edge_round_max", 7 * 39.0),
    "C5 logsize largest count sent / its field's capacity": _set("logsize m=8", "value_max_count", 2.0**18),
    "C5 logsize / Coop-SE mean individual regret, path m=8": _scale("logsize m=8", 1.6),
    "C5 logsize / Coop-SE max-agent regret, path m=8": _scale("logsize m=8", 2.0, agent=4),
    # snapshots relayed every round instead of at 2^j
    "C5 logrounds rounds with a message / (diameter·(⌊log2 T⌋+1))": _set("logrounds m=8", "comm_rounds", float(T)),
    "C5 logrounds regret above Coop-SE path(8)": _scale("logrounds m=8", 0.5),
    "C5 logrounds regret below no_comm(8)": _scale("logrounds m=8", 4.0),
    "safety: best-arm eliminations over all runs": _set("path m=4", "best_arm_eliminations", 1.0),
}


def _by_name(results: dict) -> dict[str, Any]:
    return {c.name: c for c in R.claims(results, T, A)}


def test_every_asserted_claim_has_a_break_and_holds_unbroken() -> None:
    """The made-up runs pass every asserted claim, and BREAKS names each asserted claim (a new claim needs a row)."""
    claims = _by_name(_results())
    asserted = {name for name, c in claims.items() if c.asserted}
    assert asserted == set(BREAKS)
    assert all(claims[name].holds for name in asserted), [n for n in asserted if not claims[n].holds]


@pytest.mark.parametrize("name", list(BREAKS))
def test_claim_fails_on_broken_numbers(name: str) -> None:
    """The perturbation (a broken implementation's numbers) makes this claim fail."""
    results = _results()
    BREAKS[name](results)
    assert not _by_name(results)[name].holds
