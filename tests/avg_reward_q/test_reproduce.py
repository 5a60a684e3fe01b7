"""`zoo reproduce avg_reward_q`: the `--quick` run end to end (slow; CI runs it), and every asserted claim can fail.

The second part (issue #22) feeds ``check_claims``, the protocol's claim check, perturbed curves. A healthy synthetic
result (closed-form curves with the laws the claims check: span MSE ∝ 1/k for adaptive α 3 and its centred twin on the
same trajectories, k^-0.23 for α 0.3, the universal run sitting at Q̄, drift α·r*·ln k) passes every asserted claim.
Each perturbation mimics a broken implementation or a broken number and must make exactly the claims it names fail,
so a claim that holds by construction (the old C5, ‖Q−Q*_c‖∞ ≤ sp(Q−Q*), an identity for mean-centred tables) has no
place here. A claim added to the protocol without a perturbation fails
``test_every_asserted_claim_has_a_perturbation``. No protocol is run for these: the curves are built here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import reproduce_quick

from zoo.avg_reward_q import reproduce as R


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 with C1 (2), C2 (3), C3 (1), C4' (1), C5 (3) asserted and holding; table, JSON and plots written."""
    blob = reproduce_quick("avg_reward_q", tmp_path, {"C1": 2, "C2": 3, "C3": 1, "C4'": 1, "C5": 3},
                           ("avg_reward_q_span_mse.png", "avg_reward_q_drift.png"))  # fmt: skip
    assert blob["metrics"]["instance"]["gap"] == pytest.approx(3.0071, abs=1e-3)


GAP, R_STAR, ALPHA = 3.0, 0.9, 3.0
LONG = R.QUICK_LONG
#: per-replica error factors (8 replicas): median 1, mean square 1.035.
Z = [0.7, 0.8, 0.9, 1.0, 1.0, 1.1, 1.2, 1.3]
TIES = {"star": "0.0048 at state 2", "bar": "0.0086 at state 3"}
#: claim id -> the piece of its name that identifies it among the asserted claims.
IDS = {
    "C1 slope": "C1 rate: adaptive α=3 span-MSE slope",
    "C1 level": "C1 rate: adaptive α=3 span MSE at k=1e5",
    "C2 bar": "median sp(Q−Q̄)/gap",
    "C2 star": "median sp(Q−Q*)/gap",
    "C2 square": "mean sp(Q−Q*)² / gap²",
    "C3": "C3 α too small",
    "C4'": "C4' policy off near-ties: adaptive",
    "C5 centering": "C5 centering",
    "C5 pointwise": "C5 pointwise",
    "C5 drift": "C5 drift",
}

Curves = dict[str, list[dict]]


def _adaptive(k: int) -> list[float]:
    """Span errors of adaptive α 3: span MSE 0.0062·(1e5/k), slope −1."""
    return [z * math.sqrt(0.006 * R.SHORT / k) for z in Z]


def _curve(ks: list[int], err: Callable[[int], list[float]], **fields: Callable[[int], list[float]]) -> list[dict]:
    n = len(Z)
    base = {"span_err_bar": lambda k: [GAP] * n, "pointwise": lambda k: [math.nan] * n, "drift": lambda k: [0.0] * n,
            "greedy_agree": lambda k: [1.0] * n, "greedy_agree_bar": lambda k: [0.5] * n,
            "agree_far": lambda k: [1.0] * n, "agree_bar_far": lambda k: [1.0] * n}  # fmt: skip
    base.update(fields)
    return [{"k": k, "span_err": err(k), **{name: f(k) for name, f in base.items()}} for k in ks]


def healthy() -> Curves:
    """Curves that obey every law the asserted claims check (the protocol's grids, 8 replicas)."""
    long_ks = R.grid(LONG)
    short_ks = [k for k in long_ks if k <= R.SHORT]
    iid_ks = R.grid(R.IID)
    return {
        "adaptive α=3": _curve(long_ks, _adaptive, drift=lambda k: [ALPHA * R_STAR * math.log(k) + 0.1 * z for z in Z]),
        "adaptive α=0.3": _curve(long_ks, lambda k: [0.5 * z * (R.SHORT / k) ** 0.115 for z in Z]),
        "universal α=36": _curve(long_ks, lambda k: [GAP * (1 + 0.01 * (z - 1)) for z in Z],
                                 span_err_bar=lambda k: [0.02 * GAP * z for z in Z],
                                 greedy_agree=lambda k: [4 / 6] * len(Z)),
        "adaptive α=3 centered": _curve(short_ks, _adaptive, pointwise=lambda k: [0.6 * e for e in _adaptive(k)]),
        "iid adaptive α=3": _curve(iid_ks, lambda k: [0.09 * z for z in Z]),
        "iid universal α=36": _curve(iid_ks, lambda k: [0.09 * z for z in Z]),
    }  # fmt: skip


def _claim_id(name: str) -> str:
    (found,) = [i for i, piece in IDS.items() if piece in name]
    return found


def failing(curves: Curves) -> set[str]:
    """Ids of the asserted claims that fail on ``curves``."""
    claims = R.check_claims(curves, GAP, R_STAR, TIES, LONG, ALPHA)
    return {_claim_id(c.name) for c in claims if c.asserted and not c.holds}


def _map(curves: Curves, name: str, field: str, f: Callable[[int, list[float]], list[float]]) -> None:
    for row in curves[name]:
        row[field] = f(row["k"], row[field])


def _same_run_both_groups(curves: Curves, f: Callable[[int, list[float]], list[float]]) -> None:
    """A bug in adaptive α 3 shows in both of its runs (uncentred and centred: the same update, the same stream)."""
    _map(curves, "adaptive α=3", "span_err", f)
    _map(curves, "adaptive α=3 centered", "span_err", f)


def _slow_adaptive(c: Curves) -> None:
    """A global clock (or α misapplied): the error decays as k^-0.2, with the same MSE at 1e5."""
    _same_run_both_groups(c, lambda k, e: [x * (k / R.SHORT) ** 0.3 for x in e])


def _large_adaptive(c: Curves) -> None:
    """h or α misapplied: the right slope, but 4× the span MSE at 1e5 (0.025)."""
    _same_run_both_groups(c, lambda k, e: [2 * x for x in e])


def _universal_local(c: Curves) -> None:
    """'universal' secretly on local clocks: it converges to Q*, not to Q̄."""
    _map(c, "universal α=36", "span_err", lambda k, e: [0.02 * GAP * z for z in Z])
    _map(c, "universal α=36", "span_err_bar", lambda k, e: [GAP] * len(Z))


def _universal_short_of_qbar(c: Curves) -> None:
    """Q̄ computed wrongly (or the run too short): median sp(Q−Q̄) 0.1·gap."""
    _map(c, "universal α=36", "span_err_bar", lambda k, e: [5 * x for x in e])


def _universal_median_low(c: Curves) -> None:
    """Median sp(Q−Q*) 0.85·gap while the mean square stays at 0.99·gap²."""
    _map(c, "universal α=36", "span_err", lambda k, e: [GAP * v for v in [0.85] * 5 + [1.2] * 3])


def _universal_heavy_tail(c: Curves) -> None:
    """One replica at 2·gap: median 1.0·gap but mean sp² 1.375·gap²."""
    _map(c, "universal α=36", "span_err", lambda k, e: [GAP * v for v in [1.0] * 7 + [2.0]])


def _small_alpha_fast(c: Curves) -> None:
    """α 0.3 behaving like a large α (the α of the config ignored): slope −1."""
    _map(c, "adaptive α=0.3", "span_err", lambda k, e: [0.5 * z * (R.SHORT / k) ** 0.5 for z in Z])


def _policy_wrong(c: Curves) -> None:
    """Greedy(Q_k) wrong on a state away from near-ties in 2 of 8 replicas at the end."""
    c["adaptive α=3"][-1]["agree_far"] = [1.0] * 6 + [0.0] * 2


def _centring_not_a_shift(c: Curves) -> None:
    """Centring that moves Q off the line Q + c·e (per-state means, or RVI's f(Q) inside the TD target)."""
    _map(c, "adaptive α=3 centered", "span_err", lambda k, e: [x * (1 + 1e-6) for x in e])


def _grids_out_of_step(c: Curves) -> None:
    """The centred run logs k the uncentred one did not (nothing to compare at those k): NaN, not a pass."""
    for row in c["adaptive α=3 centered"]:
        row["k"] = row["k"] + 1 if row["k"] < R.SHORT else row["k"]


def _pointwise_plateau(c: Curves) -> None:
    """The run centred by Q(s0,a0) but compared with Q* − mean(Q*): the pointwise error stops at a constant."""
    _map(c, "adaptive α=3 centered", "pointwise", lambda k, e: [0.3 + 0.1 * x for x in e])


def _pointwise_uncentred(c: Curves) -> None:
    """Centring never applied: ‖Q_k − Q*_c‖∞ grows with the drift α·r*·ln k."""
    _map(c, "adaptive α=3 centered", "pointwise", lambda k, e: [ALPHA * R_STAR * math.log(k)] * len(Z))


def _drift_off(c: Curves) -> None:
    """The drift of mean(Q_k) at 0.8·α·r* per unit ln k (α applied as 2.4)."""
    _map(c, "adaptive α=3", "drift", lambda k, e: [0.8 * ALPHA * R_STAR * math.log(k)] * len(Z))


PERTURBATIONS: dict[str, tuple[Callable[[Curves], None], set[str]]] = {
    "slow adaptive": (_slow_adaptive, {"C1 slope"}),
    "large adaptive": (_large_adaptive, {"C1 level"}),
    "universal on local clocks": (_universal_local, {"C2 bar", "C2 star", "C2 square"}),
    "universal short of Q̄": (_universal_short_of_qbar, {"C2 bar"}),
    "universal median low": (_universal_median_low, {"C2 star"}),
    "universal heavy tail": (_universal_heavy_tail, {"C2 square"}),
    "α 0.3 fast": (_small_alpha_fast, {"C3"}),
    "policy wrong": (_policy_wrong, {"C4'"}),
    "centring not a shift": (_centring_not_a_shift, {"C5 centering"}),
    "grids out of step": (_grids_out_of_step, {"C5 centering"}),
    "pointwise plateau": (_pointwise_plateau, {"C5 pointwise"}),
    "pointwise uncentred": (_pointwise_uncentred, {"C5 pointwise"}),
    "drift off": (_drift_off, {"C5 drift"}),
}


def test_healthy_curves_pass_every_asserted_claim() -> None:
    """Catches a claim that fails on correct numbers (a sign error, a wrong k, a misread field)."""
    claims = R.check_claims(healthy(), GAP, R_STAR, TIES, LONG, ALPHA)
    asserted = [c for c in claims if c.asserted]
    assert [c.name for c in asserted if not c.holds] == []
    assert sorted(_claim_id(c.name) for c in asserted) == sorted(IDS)


@pytest.mark.parametrize("name", PERTURBATIONS)
def test_perturbed_curves_fail_exactly_their_claims(name: str) -> None:
    """Catches a claim that cannot fail (it holds by construction) or that fails for the wrong reason."""
    perturb, expected = PERTURBATIONS[name]
    curves = copy.deepcopy(healthy())
    perturb(curves)
    assert failing(curves) == expected


def test_every_asserted_claim_has_a_perturbation() -> None:
    """Catches a claim added to (or renamed in) the protocol with no test of its ability to fail."""
    covered = set().union(*(expected for _, expected in PERTURBATIONS.values()))
    assert covered == set(IDS)
