"""`zoo reproduce emergence`: the `--quick` run end to end (slow; CI runs it), and every asserted claim can fail.

``check_claims`` is fed a healthy made-up result (τ_p ≈ 200·p^1.8 per seed with sharp transitions, a trained arm
that learned one direction and whose unaligned a_j vanished) that passes every asserted claim; each perturbation
mimics a broken implementation and must make exactly the claims it names fail. No protocol is run for these.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import reproduce_quick

from zoo.emergence import reproduce as R


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 with C1 (5), C2 (2), C3 (4), C4 (1), C5 (2) asserted and holding; table, JSON and plots written."""
    reproduce_quick("emergence", tmp_path, {"C1": 5, "C2": 2, "C3": 4, "C4": 1, "C5": 2},
                    ("emergence_overlaps.png", "emergence_recovery_times.png", "emergence_loss.png"))  # fmt: skip


P, M, SEEDS = 8, 16, 4


def _arm(tau: list[list[float]], *, trained: bool = False) -> dict:
    t03 = [[0.9 * t if math.isfinite(t) else math.inf for t in row] for row in tau]
    hist = [{"t": t, "M": [[0.5] * P] * SEEDS, "n_learned": [0] * SEEDS,
             "loss_fixed": [0.9 - 0.5 * k / 10] * SEEDS, "loss_refit": [0.5 - 0.049 * k] * SEEDS}
            for k, t in enumerate(range(0, 40_001, 4000))]  # fmt: skip
    a_final = [[0.0] * M for _ in range(SEEDS)] if trained else [[0.3] * M for _ in range(SEEDS)]
    overlap = [[0.1] * M for _ in range(SEEDS)]
    if trained:
        for r in range(SEEDS):
            a_final[r][0], overlap[r][0] = 0.91, 1.0
    return {"name": "x", "n_replicas": SEEDS, "P": P, "m": M, "d": 400, "tau": tau, "t03": t03,
            "tau_hat": [[row[0] / 1.1] + [1e4] * (P - 1) for row in tau], "history": hist, "a_final": a_final,
            "neuron_max_overlap": overlap, "beta": 1.5}  # fmt: skip


def healthy() -> dict[str, dict]:
    base = [[200.0 * p**1.8 * (1 + 0.1 * ((r + p) % 3)) for p in range(1, P + 1)] for r in range(SEEDS)]
    trained = [[250.0] + [math.inf] * (P - 1) for _ in range(SEEDS)]
    return {"fixed": _arm(base), "refit": _arm(copy.deepcopy(base)), "trained": _arm(trained, trained=True)}


def _set(arm: str, key: str, fn: Callable) -> Callable[[dict], None]:
    """Change ``arms[arm][key]``; τ of ``fixed`` changes in ``refit`` too (the two share the first layer)."""

    def apply(arms: dict) -> None:
        arms[arm][key] = fn(arms[arm][key])
        if (arm, key) == ("fixed", "tau"):
            arms["refit"]["tau"] = copy.deepcopy(arms[arm][key])

    return apply


def _swap12(tau: list[list[float]]) -> list[list[float]]:
    return [[row[0], row[0] - 1, *row[2:]] for row in tau]


def _shuffle(arms: dict) -> None:
    for arm in ("fixed", "refit"):
        for key in ("tau", "t03"):
            arms[arm][key] = [[row[0], *reversed(row[1:])] for row in arms[arm][key]]


def _smooth(arms: dict) -> None:
    arms["fixed"]["t03"] = [[t / 10 for t in row] for row in arms["fixed"]["tau"]]


def _rising(arms: dict) -> None:
    arms["fixed"]["history"][3]["loss_fixed"] = [1.0] * SEEDS


def _flat(tau: list[list[float]]) -> list[list[float]]:
    return [[row[0] * (1 + 0.01 * p) for p in range(P)] for row in tau]


def _no_collapse(arms: dict) -> None:
    arms["trained"]["tau"] = [[250.0, 900.0, 3000.0] + [math.inf] * (P - 3) for _ in range(SEEDS)]


def _few_fixed(tau: list[list[float]]) -> list[list[float]]:
    return [[*row[:4], *[math.inf] * (P - 4)] for row in tau]


def _refit_loss(arms: dict) -> None:
    arms["fixed"]["history"][-1]["loss_refit"] = [0.05] * SEEDS


def _refit_drift(arms: dict) -> None:
    arms["refit"]["tau"] = [[t + 1 for t in row] for row in arms["refit"]["tau"]]


#: perturbation -> the asserted claims (name prefixes) it must make fail
PERTURBATIONS: dict[str, tuple[Callable[[dict], None], set[str]]] = {
    "direction 2 before 1": (_set("fixed", "tau", _swap12), {"C1 first direction first"}),
    "τ_1 too early": (
        _set("fixed", "tau", lambda t: [[40.0, *row[1:]] for row in t]),
        {"C1 τ_1 range: min", "C1 τ_1/τ̂_1 (cubic-ODE predictor): min"},
    ),
    "τ_1 too late": (
        _set("fixed", "tau", lambda t: [[790.0 * 2, *row[1:]] for row in t]),
        {"C1 τ_1 range: max", "C1 τ_1/τ̂_1 (cubic-ODE predictor): max", "C1 first direction first", "C4 power law"},
    ),
    "time axis off by 2": (
        _set("fixed", "tau_hat", lambda th: [[v * 2 for v in row] for row in th]),
        {"C1 τ_1/τ̂_1 (cubic-ODE predictor): min"},
    ),
    "ordering reversed (p >= 2)": (_shuffle, {"C2 ordering: min", "C2 ordering: median", "C4 power law"}),
    "no emergence": (_smooth, {"C3 emergence: max over seeds", "C3 emergence: min over seeds"}),
    "objective rises": (_rising, {"C3 monotone"}),
    "refit loss high": (_refit_loss, {"C3 final L_refit"}),
    "flat τ_p": (_set("fixed", "tau", _flat), {"C4 power law"}),
    "no collapse": (_no_collapse, {"C5 collapse: max over seeds"}),
    "fixed learns few": (_set("fixed", "tau", _few_fixed), {"C5 fixed"}),
    "refit arm differs": (_refit_drift, {"refit arm"}),
}


def _failing(arms: dict) -> set[str]:
    return {c.name for c in R.check_claims(arms) if c.asserted and not c.holds}


def test_healthy_result_passes_every_asserted_claim() -> None:
    assert _failing(healthy()) == set()


@pytest.mark.parametrize("name", sorted(PERTURBATIONS))
def test_perturbation_fails_its_claims(name: str) -> None:
    """Each perturbation makes exactly the claims it names fail (a claim that cannot fail is caught)."""
    perturb, expected = PERTURBATIONS[name]
    arms = healthy()
    perturb(arms)
    failing = _failing(arms)
    assert {e for e in expected if any(f.startswith(e) for f in failing)} == expected, failing
    assert all(any(f.startswith(e) for e in expected) for f in failing), failing


def test_every_asserted_claim_has_a_perturbation() -> None:
    names = [c.name for c in R.check_claims(healthy()) if c.asserted]
    covered = {e for _, expected in PERTURBATIONS.values() for e in expected}
    assert all(any(n.startswith(e) for e in covered) for n in names), names


def test_info_arms_never_decide_the_exit_code() -> None:
    """The raw_z4, online/population d=32 and exploratory P=32 arms add info claims only (their numbers may fail)."""
    arms = healthy()
    bad = _arm([[math.inf] * P for _ in range(SEEDS)])
    for name in ("raw_z4", "online d=32", "population d=32", "exploratory P=32"):
        arms[name] = copy.deepcopy(bad if name != "population d=32" else arms["fixed"])
    claims = R.check_claims(arms)
    extra = [c for c in claims if c.name.startswith(("raw_z4", "online", "exploratory"))]
    assert len(extra) == 4 and not any(c.asserted for c in extra)
    assert _failing(arms) == set()
