"""Decomposable scores of binary_dag: saturated-CPT likelihood, stage-2 pruning and the exact DP oracle (card test 6).

Each test names the wrong implementation it catches. Data comes from small seeded ancestral samplers written here
(the zoo's generators live in ``datamodules/binary``, tested on their own). The file runs in a few seconds.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from binary_dag.helpers import adj_of
from zoo.binary_dag.graphs import cpdag, cpdag_shd, topological_order
from zoo.binary_dag.score import (
    best_parents,
    dag_score,
    dp_oracle,
    family_loglik,
    family_score,
    mi_candidates_for,
    mutual_information,
    prune_to_order,
    saturated_nll,
)

#: interaction5 (card "Data"): 0->2, 1->2, 2->3, 2->4, 3->4.
INTERACTION5 = adj_of(5, [(0, 2), (1, 2), (2, 3), (2, 4), (3, 4)])


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def sample_interaction5(n: int, seed: int) -> np.ndarray:
    """The card's interaction5 fixture, sampled ancestrally."""
    rng = np.random.default_rng(seed)
    x0 = rng.random(n) < 0.3
    x1 = rng.random(n) < 0.6
    x2 = rng.random(n) < sigmoid(-1.5 + 3.5 * (x0 & x1) + 1.5 * (~x0 & ~x1))
    x3 = rng.random(n) < np.where(x2, 0.8, 0.25)
    x4 = rng.random(n) < sigmoid(1.5 - 3.0 * x2 - 3.0 * x3 + 5.0 * (x2 & x3))
    return np.stack([x0, x1, x2, x3, x4], axis=1).astype(np.uint8)


def sample_random_cpt(adj: np.ndarray, card: tuple[int, ...], n: int, seed: int) -> np.ndarray:
    """Ancestral sampling with a Dirichlet(1) conditional table per parent configuration."""
    rng = np.random.default_rng(seed)
    d = adj.shape[0]
    x = np.zeros((n, d), dtype=np.uint8)
    for j in topological_order(adj):
        parents = np.flatnonzero(adj[:, j])
        key = np.zeros(n, dtype=np.int64)
        for p in parents:
            key = key * card[p] + x[:, p]
        n_cfg = int(np.prod([card[p] for p in parents])) if len(parents) else 1
        table = rng.dirichlet(np.ones(card[j]), size=n_cfg)
        cum = np.cumsum(table, axis=1)[key]
        x[:, j] = (rng.random(n)[:, None] > cum[:, :-1]).sum(axis=1)
    return x


def reference_loglik(x: np.ndarray, j: int, parents: tuple[int, ...]) -> float:
    """Explicit loop: sum over samples of log P_hat(x_j | x_S) with empirical conditional frequencies."""
    joint: Counter = Counter()
    marg: Counter = Counter()
    for row in x.tolist():
        cfg = tuple(row[p] for p in parents)
        joint[cfg, row[j]] += 1
        marg[cfg] += 1
    total = 0.0
    for row in x.tolist():
        cfg = tuple(row[p] for p in parents)
        total += math.log(joint[cfg, row[j]] / marg[cfg])
    return total


def test_family_loglik_matches_explicit_loop() -> None:
    """The bincount likelihood equals a per-sample loop, for binary and 3-state columns (a wrong mixed-radix key,
    e.g. one that collides configurations, or a missing ``t log t`` term fails here)."""
    card = (2, 3, 2, 3, 2)
    adj = adj_of(5, [(0, 2), (1, 2), (1, 3), (2, 4), (3, 4)])
    x = sample_random_cpt(adj, card, 600, seed=3)
    for j, parents in [(2, (0, 1)), (4, (3, 2)), (3, ()), (0, (1, 3, 4)), (1, (4, 0))]:
        assert family_loglik(x, j, parents, card) == pytest.approx(reference_loglik(x, j, parents), rel=1e-12)


def test_family_score_penalties() -> None:
    """BIC is (log n / 2)(card_j - 1) prod card_parents, l0 is lam0 |S|: a penalty on 2^|S| regardless of the
    cards, or on the wrong node's cardinality, fails here."""
    card = (2, 3, 2, 3, 2)
    x = sample_random_cpt(adj_of(5, [(0, 1), (1, 3)]), card, 400, seed=1)
    ll = family_loglik(x, 3, (0, 1), card)
    bic = math.log(400) / 2 * (3 - 1) * (2 * 3)
    assert family_score(x, 3, (0, 1), card) == pytest.approx(-ll + bic, rel=1e-12)
    assert family_score(x, 3, (0, 1), card, pen="l0", lam0=1.7) == pytest.approx(-ll + 2 * 1.7, rel=1e-12)
    assert family_score(x, 3, (0, 1), card, pen="l0") == pytest.approx(-ll + 2 * math.log(400) / 2, rel=1e-12)


def test_mutual_information_reference() -> None:
    """Plug-in MI against its definition sum p_ab log(p_ab / (p_a p_b)); zero for a column with itself shuffled."""
    x = sample_interaction5(5000, seed=0)
    p = np.zeros((2, 2))
    for a, b in zip(x[:, 2], x[:, 3], strict=True):
        p[a, b] += 1
    p /= p.sum()
    ref = sum(p[a, b] * math.log(p[a, b] / (p[a].sum() * p[:, b].sum())) for a in range(2) for b in range(2))
    assert mutual_information(x, 2, 3, (2,) * 5) == pytest.approx(ref, rel=1e-10)
    assert mutual_information(x, 3, 2, (2,) * 5) == pytest.approx(ref, rel=1e-10)
    assert mutual_information(x, 2, 2, (2,) * 5) > mutual_information(x, 2, 3, (2,) * 5)


def test_saturated_nll_identity_and_sparser_wrong_dag() -> None:
    """Card claim 3 / key identity: every complete DAG fits the joint exactly, so three random orders give the same
    saturated NLL (the empirical joint entropy); a sparser wrong DAG gives a larger one."""
    x = sample_interaction5(20000, seed=0)
    card = (2,) * 5
    rng = np.random.default_rng(0)
    values = []
    for _ in range(3):
        perm = rng.permutation(5)
        complete = np.zeros((5, 5), dtype=bool)
        for a, b in itertools.combinations(range(5), 2):
            complete[perm[a], perm[b]] = True
        values.append(saturated_nll(x, complete, card))
    assert max(values) - min(values) <= 1e-10 * abs(min(values))
    # the closed form: the empirical joint entropy
    counts = np.bincount(x @ (1 << np.arange(5)), minlength=32)
    p = counts[counts > 0] / x.shape[0]
    assert values[0] == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    assert saturated_nll(x, INTERACTION5, card) > values[0]  # true DAG: sparser, not complete
    wrong = adj_of(5, [(2, 0), (2, 1), (3, 2), (4, 3)])  # a sparser wrong DAG
    assert saturated_nll(x, wrong, card) > saturated_nll(x, INTERACTION5, card)


def brute_force(x: np.ndarray, card: tuple[int, ...], max_parents: int | None, pen: str, lam0: float | None):
    """All d! orders, each node's best parent set among its predecessors; returns (min score, optimal DAGs)."""
    d = x.shape[1]
    cache: dict[tuple[int, tuple[int, ...]], float] = {}

    def local(j: int, s: tuple[int, ...]) -> float:
        if (j, s) not in cache:
            cache[j, s] = family_score(x, j, s, card, pen=pen, lam0=lam0)
        return cache[j, s]

    results = []
    for order in itertools.permutations(range(d)):
        adj = np.zeros((d, d), dtype=bool)
        total = 0.0
        for pos, j in enumerate(order):
            pred = sorted(order[:pos])
            k = len(pred) if max_parents is None else max_parents
            subsets = [s for size in range(min(k, len(pred)) + 1) for s in itertools.combinations(pred, size)]
            best = min(subsets, key=lambda s: local(j, s))
            adj[list(best), j] = True
            total += local(j, best)
        results.append((total, adj))
    best_total = min(t for t, _ in results)
    optimal = [a for t, a in results if t <= best_total + 1e-9 * abs(best_total)]
    return best_total, optimal


@pytest.mark.parametrize(
    ("fixture", "max_parents", "pen", "lam0"),
    [("interaction5", None, "bic", None), ("random_cpt", None, "bic", None), ("random_cpt", 2, "l0", 3.0)],
)
def test_dp_oracle_equals_brute_force_over_120_orders(fixture: str, max_parents: int | None, pen: str, lam0) -> None:
    """Card test 6: the subset DP reaches the brute-force optimum over all 5! orders, and its DAG is one of the
    optimal ones (all of which share one CPDAG: the scores are score-equivalent). A DP that drops a subset, reads
    the graph back wrongly or mixes up the sink fails here."""
    if fixture == "interaction5":
        x, card = sample_interaction5(3000, seed=1), (2,) * 5
    else:
        card = (2, 3, 2, 2, 3)
        x = sample_random_cpt(adj_of(5, [(0, 1), (1, 2), (3, 2), (2, 4), (0, 4)]), card, 1500, seed=2)
    adj, score = dp_oracle(x, card, max_parents=max_parents, pen=pen, lam0=lam0)
    best, optimal = brute_force(x, card, max_parents, pen, lam0)
    assert score == pytest.approx(best, rel=1e-12)
    assert score == pytest.approx(dag_score(x, adj, card, pen=pen, lam0=lam0), rel=1e-12)
    assert any(np.array_equal(adj, a) for a in optimal)
    assert all(cpdag_shd(adj, a) == 0 for a in optimal)
    if max_parents is not None:
        assert adj.sum(axis=0).max() <= max_parents
    assert adj.sum() >= 3, "the fixture must give a non-trivial optimum"


def test_dp_oracle_recovers_interaction5_mec() -> None:
    """Card claim 2 at n = 100k (revision): the DP-BIC oracle returns the true MEC on interaction5."""
    x = sample_interaction5(100_000, seed=0)
    adj, _ = dp_oracle(x, (2,) * 5)
    np.testing.assert_array_equal(cpdag(adj), cpdag(INTERACTION5))


def test_prune_to_order_recovers_true_parents() -> None:
    """Stage 2 on the true order of a well-sampled fixture returns the true parents (a score that favours the
    empty set, or an order-handling bug that lets a successor be a parent, fails here)."""
    x = sample_interaction5(50_000, seed=0)
    adj = prune_to_order(x, [0, 1, 2, 3, 4], (2,) * 5)
    np.testing.assert_array_equal(adj, INTERACTION5)
    # a reversed order may only use predecessors: every edge goes from earlier to later in that order
    order = [4, 3, 2, 1, 0]
    rev = prune_to_order(x, order, (2,) * 5)
    pos = {v: i for i, v in enumerate(order)}
    assert all(pos[i] < pos[j] for i, j in zip(*np.nonzero(rev), strict=True))
    assert rev.sum() > 0


def xor_fixture(n: int, seed: int) -> np.ndarray:
    """x7 = x0 XOR x1 (invisible to pairwise MI) with 10% noise, x2 a 90% copy of x7, x3..x6 independent noise."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, 8)) < 0.5).astype(np.uint8)
    x[:, 7] = (x[:, 0] ^ x[:, 1]) ^ (rng.random(n) < 0.1)
    x[:, 2] = x[:, 7] ^ (rng.random(n) < 0.1)
    return x


def test_mi_candidate_restriction_kicks_in_above_max_subsets() -> None:
    """Above ``max_subsets`` only the top-MI predecessors are searched. Subsets of 7 allowed nodes with |S| <= 4:
    1 + 7 + 21 + 35 + 35 = 99. The XOR parents 0 and 1 have no marginal MI, so the restricted search cannot find
    them while the exhaustive one does; a restriction applied at the wrong count (or never) fails here."""
    x = xor_fixture(4000, seed=0)
    card = (2,) * 8
    allowed = list(range(7))
    assert mi_candidates_for(x, 7, allowed, card, 1) == (2,)
    exhaustive, s_ex = best_parents(x, 7, allowed, card, max_parents=4, max_subsets=99, mi_candidates=1)
    assert {0, 1} <= set(exhaustive)
    restricted, s_re = best_parents(x, 7, allowed, card, max_parents=4, max_subsets=98, mi_candidates=1)
    assert restricted == (2,)
    assert s_ex < s_re


def test_dp_oracle_rejects_large_d_and_bad_inputs() -> None:
    x = np.zeros((10, 9), dtype=np.uint8)
    x[::2] = 1
    with pytest.raises(ValueError, match="d=9 columns: the exact DP oracle accepts d <= 8"):
        dp_oracle(x, (2,) * 9)
    with pytest.raises(ValueError, match=r"card=\[2, 2\]: expected 9 integers >= 2"):
        family_score(x, 0, (), (2, 2))
    with pytest.raises(ValueError, match=r"x: column 0 holds values in \[0, 2\], expected state indices in \[0, 1\]"):
        family_loglik(np.array([[0, 1], [2, 0]]), 0, (), (2, 2))
    with pytest.raises(ValueError, match="pen='aic': expected 'bic' or 'l0'"):
        family_score(x, 0, (), (2,) * 9, pen="aic")
    with pytest.raises(ValueError, match=r"parents=\[0\]: expected distinct column indices"):
        family_loglik(x, 0, (0,), (2,) * 9)
    with pytest.raises(ValueError, match=r"order=\[0, 0, 1, 2, 3, 4, 5, 6, 7\]: expected a permutation"):
        prune_to_order(x, [0, 0, 1, 2, 3, 4, 5, 6, 7], (2,) * 9)
    with pytest.raises(ValueError, match="x: expected integer state indices"):
        family_loglik(x.astype(float), 0, (), (2,) * 9)
