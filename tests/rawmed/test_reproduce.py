"""`zoo reproduce rawmed`: the `--quick` run end to end (slow; CI runs it), and every asserted claim can fail.

``check_claims`` is fed a healthy made-up result that passes every asserted claim; each perturbation mimics a broken
implementation and must make exactly the claims it names fail. No protocol is run for these.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import reproduce_quick

from zoo.rawmed import reproduce as R


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 with the generation gate and C5 asserted and holding (C4's KCl task is info in --quick); table, JSON
    and plot written."""
    reproduce_quick("rawmed", tmp_path, {"gen": 1, "C5": 1}, ("rawmed_arms.png",))


def _metrics(invalid: float, mia: float, icde: float, kcl_tstr: float) -> dict[str, float]:
    return {"gen/invalid_frac": invalid, "gen/stay_drop_rate": 0.1, "gen/layout_errors": 0.0, "eval/mia/accuracy": mia,
            "eval/icde/all": icde, "eval/ipcc/mean": 0.2, "eval/cde/mean": 0.05, "eval/time_gap_ks/nonzero": 0.1,
            "eval/event_count_ks": 0.1, "eval/utility/tstr_mean": 0.8, "eval/utility/trtr_mean": 0.85,
            "eval/utility/kcl_test_holdout/tstr": kcl_tstr, "eval/utility/kcl_test_holdout/trtr": 0.8}  # fmt: skip


def healthy(quick: bool = False) -> tuple[list[dict], list[dict]]:
    stage1 = [{"recipe": recipe, "seed": s, "token_acc": 0.99 if recipe == "rqvae" else 0.97,
               "patientweight_ks": 0.05 if recipe == "rqvae" else 0.1, "val_token_acc": 0.99, "seconds": 1.0}
              for recipe in ("rqvae", "rqvae_depth1", "rqvae_in_text") for s in (0, 1, 2)]  # fmt: skip
    arms = {"rawmed": _metrics(0.05, 0.5, 0.1, 0.75), "marginal": _metrics(0.0, 0.5, 0.3, 0.6),
            "copy": _metrics(0.0, 0.98, 0.01, 0.8)}  # fmt: skip
    if not quick:
        arms |= {"no_timesep": _metrics(0.05, 0.5, 0.12, 0.7), "vq_depth1": _metrics(0.08, 0.5, 0.15, 0.7)}
    return stage1, [{"arm": a, "seed": 0, "seconds": 1.0, "metrics": m} for a, m in arms.items()]


def _set(arm: str, key: str, value: float) -> Callable:
    def apply(stage1: list[dict], stage2: list[dict]) -> None:
        next(r for r in stage2 if r["arm"] == arm)["metrics"][key] = value

    return apply


PERTURBATIONS: dict[str, tuple[Callable, set[str]]] = {
    # a decoder or post-processor that garbles a third of the events
    "invalid events": (_set("rawmed", "gen/invalid_frac", 0.35), {"gen"}),
    # a generator that memorises the train stays
    "memorised": (_set("rawmed", "eval/mia/accuracy", 0.8), {"C5"}),
    # a broken attack (or a generator leaking the holdout) below the band
    "MIA below the band": (_set("rawmed", "eval/mia/accuracy", 0.25), {"C5"}),
    # the planted KCl rule lost (time separation broken, codes collapsed)
    "KCl rule lost": (_set("rawmed", "eval/utility/kcl_test_holdout/tstr", 0.55), {"C4"}),
}


def _failing(stage1: list[dict], stage2: list[dict], quick: bool = False) -> set[str]:
    return {c.name for c in R.check_claims(stage1, stage2, quick) if c.asserted and not c.holds}


def test_healthy_result_passes_every_asserted_claim() -> None:
    assert _failing(*healthy()) == set()
    assert _failing(*healthy(quick=True), quick=True) == set()


@pytest.mark.parametrize("name", sorted(PERTURBATIONS))
def test_perturbation_fails_its_claims(name: str) -> None:
    """Each perturbation makes exactly the claims it names fail (a claim that cannot fail is caught)."""
    perturb, expected = PERTURBATIONS[name]
    stage1, stage2 = healthy()
    perturb(stage1, stage2)
    failing = _failing(stage1, stage2)
    assert {e for e in expected if any(f.startswith(e) for f in failing)} == expected, failing
    assert all(any(f.startswith(e) for e in expected) for f in failing), failing


def test_every_asserted_claim_has_a_perturbation_and_c1_to_c3_are_reported() -> None:
    """The revision: C1-C3 and C4's mean are reported only; a bad value there changes no verdict."""
    stage1, stage2 = healthy()
    claims = R.check_claims(stage1, stage2, False)
    asserted = [c.name for c in claims if c.asserted]
    covered = {e for _, expected in PERTURBATIONS.values() for e in expected}
    assert len(asserted) == 3 and all(any(n.startswith(e) for e in covered) for n in asserted), asserted
    reported = {c.name.split(" ")[0] for c in claims if not c.asserted}
    assert {"C1", "C2", "C3", "C4"} <= reported
    _set("rawmed", "eval/icde/all", 0.9)(stage1, stage2)
    _set("rawmed", "eval/time_gap_ks/nonzero", 0.9)(stage1, stage2)
    assert _failing(stage1, stage2) == set()


def test_table_lists_every_arm_and_the_stage1_reconstructions() -> None:
    stage1, stage2 = healthy()
    text = R.table(stage1, stage2)
    assert "| metric | rawmed | marginal | copy | no_timesep | vq_depth1 |" in text
    assert "| I-CDE | 0.100 | 0.300 | 0.010 | 0.120 | 0.150 |" in text
    assert "| rqvae_depth1 | 1 | 0.9700 | 0.100 | 0.9900 | 1 |" in text


def test_quick_prints_the_kcl_task_without_gating_it() -> None:
    """--quick: C4's KCl task is an info line (not reproduced at that scale); the full protocol gates it."""
    stage1, stage2 = healthy(quick=True)
    _set("rawmed", "eval/utility/kcl_test_holdout/tstr", 0.5)(stage1, stage2)
    assert _failing(stage1, stage2, quick=True) == set()
    assert {f.split(" ")[0] for f in _failing(stage1, stage2, quick=False)} == {"C4"}
