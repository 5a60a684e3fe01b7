"""`zoo reproduce binary_dag`: the `--quick` run end to end (slow; CI runs it), and every asserted claim can fail.

``check_claims`` is fed a healthy made-up result that passes every asserted claim; each perturbation mimics a broken
implementation and must make exactly the claims it names fail. No protocol is run for these.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import reproduce_quick

from zoo.binary_dag import reproduce as R


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 with C1 (2), C2 (1), C3 (2) asserted and holding; table, JSON and plots written."""
    reproduce_quick("binary_dag", tmp_path, {"C1": 2, "C2": 1, "C3": 2},
                    ("binary_dag_graphs.png", "binary_dag_shd_by_n.png"))  # fmt: skip


SEEDS = range(5)


def _run(setting: str, arm: str, seed: int, shd: float) -> dict:
    return {"setting": setting, "arm": arm, "seed": seed, "seconds": 1.0, "estimate": [[0] * 5] * 5,
            "metrics": {"cpdag_shd": shd, "dag_shd": shd, "skel_f1": 1.0, "n_edges_est": 5.0}}  # fmt: skip


def healthy() -> tuple[list[dict], dict]:
    runs = []
    for s in SEEDS:
        runs += [_run("interaction5 n=20k", "two-stage", s, 0), _run("interaction5 n=20k", "first-order", s, 4),
                 _run("interaction5 n=100k", "oracle", s, 0), _run("interaction5 n=20k", "joint saturated", s, 6),
                 {**_run("ER-1 d=10 n=10k", "two-stage", s, 3), "true_order_shd": 0, "order_violations": 1,
                  "true_edges": 9}, _run("ER-1 d=10 n=10k", "first-order", s, 9),
                 _run("ER-1 d=10 n=10k", "HC-BIC", s, 4), _run("ER-1 d=10 n=10k", "PC", s, 8),
                 _run("ER-1 d=10 n=10k", "DAGMA-logistic", s, 10)]  # fmt: skip
    runs.append(_run("ER-1 d=10 n=10k", "joint saturated", 0, 12))
    for name, value in R.C5_HC.items():
        runs += [_run(f"{name} native n=1k", "HC-BIC", 0, value), _run(f"{name} native n=1k", "PC", 0, 30)]
    identity = {"orders": [[0, 1, 2, 3, 4]] * 3, "saturated_nll": [2.86] * 3, "first_order_nll": [3.08, 3.0801, 3.08],
                "saturated_spread": 1e-12, "first_order_spread": 2e-5}  # fmt: skip
    return runs, identity


def _shd(setting: str, arm: str, value: float, seeds: int = 5) -> Callable:
    def apply(runs: list[dict], identity: dict) -> None:
        hits = [r for r in runs if r["setting"] == setting and r["arm"] == arm]
        for r in hits[:seeds]:
            r["metrics"]["cpdag_shd"] = value

    return apply


def _true_order(value: int) -> Callable:
    def apply(runs: list[dict], identity: dict) -> None:
        for r in runs:
            if r["setting"] == "ER-1 d=10 n=10k" and r["arm"] == "two-stage":
                r["true_order_shd"] = value

    return apply


def _identity(key: str, value: float) -> Callable:
    def apply(runs: list[dict], identity: dict) -> None:
        identity[key] = value

    return apply


PERTURBATIONS: dict[str, tuple[Callable, set[str]]] = {
    # the two-stage method no better than first order on the interaction fixture (a stage-2 score without interactions)
    "two-stage misses the interaction": (_shd("interaction5 n=20k", "two-stage", 3), {"C1 two-stage"}),
    # first-order features that could express the interaction (a wrong monomial set)
    "first-order recovers it": (_shd("interaction5 n=20k", "first-order", 0), {"C1 first-order"}),
    # the oracle wrong in 2 of 5 seeds (a DP that does not minimise over every sink)
    "oracle wrong twice": (_shd("interaction5 n=100k", "oracle", 5, seeds=2), {"C2"}),
    # an optimiser-based saturated NLL that stops early
    "saturated NLLs differ": (_identity("saturated_spread", 1e-4), {"C3 saturated"}),
    # first-order NLL computed with saturated features
    "first-order NLLs equal": (_identity("first_order_spread", 1e-9), {"C3 first-order"}),
    # a stage 2 that does not find the parents even from the true order
    "stage 2 wrong on the true order": (_true_order(4), {"C4 stage 2"}),
}


def _failing(runs: list[dict], identity: dict, quick: bool = False, version: str = "1.1.2") -> set[str]:
    return {c.name for c in R.check_claims(runs, identity, quick, version) if c.asserted and not c.holds}


def test_healthy_result_passes_every_asserted_claim() -> None:
    runs, identity = healthy()
    assert _failing(runs, identity) == set()


@pytest.mark.parametrize("name", sorted(PERTURBATIONS))
def test_perturbation_fails_its_claims(name: str) -> None:
    """Each perturbation makes exactly the claims it names fail (a claim that cannot fail is caught)."""
    perturb, expected = PERTURBATIONS[name]
    runs, identity = healthy()
    perturb(runs, identity)
    failing = _failing(runs, identity)
    assert {e for e in expected if any(f.startswith(e) for f in failing)} == expected, failing
    assert all(any(f.startswith(e) for e in expected) for f in failing), failing


def test_every_asserted_claim_has_a_perturbation() -> None:
    runs, identity = healthy()
    names = [c.name for c in R.check_claims(runs, identity, False, "1.1.2") if c.asserted]
    covered = {e for _, expected in PERTURBATIONS.values() for e in expected}
    assert all(any(n.startswith(e) for e in covered) for n in names), names


def test_c4_not_reproduced_is_reported_never_gated() -> None:
    """C4's comparisons are info lines (not reproduced): a two-stage result far behind HC-BIC changes no verdict."""
    runs, identity = healthy()
    _shd("ER-1 d=10 n=10k", "two-stage", 12)(runs, identity)
    assert _failing(runs, identity) == set()
    c4 = [c for c in R.check_claims(runs, identity, False, "1.1.2") if "not reproduced" in c.name]
    assert len(c4) == 2 and not any(c.asserted or c.holds for c in c4)


def test_quick_gates_c1_to_c3_only_and_c5_is_reported() -> None:
    """--quick asserts C1-C3 (5 claims); C5 (the pgmpy harness regression) never decides the exit code."""
    runs, identity = healthy()
    quick = [c for c in R.check_claims(runs, identity, True, "1.1.2") if c.asserted]
    assert sorted(c.name.split(" ")[0] for c in quick) == ["C1", "C1", "C2", "C3", "C3"]
    bad = copy.deepcopy(runs)
    _shd("child native n=1k", "HC-BIC", 9)(bad, identity)
    assert _failing(bad, identity) == set()
    c5 = [c for c in R.check_claims(bad, identity, False, "1.1.2") if c.name.startswith("C5")]
    assert len(c5) == 6 and not any(c.asserted for c in c5) and not all(c.holds for c in c5)
