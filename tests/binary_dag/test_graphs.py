"""Graph utilities of binary_dag: DAG checks, NOTEARS thresholding, CPDAGs and metrics (card test 5).

Each test names the wrong implementation it catches. Nothing here trains; the file runs in about a second.
"""

from __future__ import annotations

import itertools
import warnings

import networkx as nx
import numpy as np
import pytest

from binary_dag.helpers import adj_of
from zoo.binary_dag.graphs import (
    cpdag,
    cpdag_shd,
    dag_shd,
    edges,
    find_cycle,
    from_edges,
    is_dag,
    structure_metrics,
    threshold_acyclic,
    to_networkx,
    topological_order,
)


def random_dag(d: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """Edges along a random permutation, each with probability p."""
    perm = rng.permutation(d)
    a = np.zeros((d, d), dtype=bool)
    for u, v in itertools.combinations(range(d), 2):
        if rng.random() < p:
            a[perm[u], perm[v]] = True
    return a


#: interaction5 (card "Data"): 0->2, 1->2, 2->3, 2->4, 3->4.
INTERACTION5 = adj_of(5, [(0, 2), (1, 2), (2, 3), (2, 4), (3, 4)])


def test_is_dag_and_find_cycle() -> None:
    """A cycle detector that misses long cycles or self-loops, or returns a non-cycle, fails here."""
    chain = adj_of(4, [(0, 1), (1, 2), (2, 3)])
    assert is_dag(chain) and find_cycle(chain) is None
    loop = adj_of(4, [(0, 1), (1, 2), (2, 3), (3, 1)])
    assert not is_dag(loop)
    cycle = find_cycle(loop)
    assert sorted(cycle) == [1, 2, 3]
    for u, v in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        assert loop[u, v], f"{u}->{v} is not an edge"
    self_loop = adj_of(3, [(0, 1), (2, 2)])
    assert not is_dag(self_loop) and find_cycle(self_loop) == [2]


def test_topological_order_ties_by_index() -> None:
    """Kahn's algorithm must pick the smallest free index (a FIFO or DFS order differs on this graph)."""
    a = adj_of(5, [(4, 0), (3, 1), (0, 2)])
    # free at the start: 2? no (0->2); free: 1? no (3->1); free are {3, 4}: 3 first, which frees 1 (< 4)
    assert topological_order(a) == [3, 1, 4, 0, 2]
    assert topological_order(np.zeros((3, 3), dtype=bool)) == [0, 1, 2]
    with pytest.raises(ValueError, match="expected a DAG, found the cycle"):
        topological_order(adj_of(3, [(0, 1), (1, 2), (2, 0)]))


def test_threshold_acyclic_removes_weakest_cycle_edge() -> None:
    """Thresholding keeps W > omega and breaks a cycle at its weakest edge, not at an arbitrary or global one."""
    w = np.zeros((4, 4))
    w[0, 1], w[1, 2], w[2, 0] = 0.9, 0.5, 0.7  # cycle 0->1->2->0, weakest 1->2
    w[3, 0] = 0.4  # weaker than every cycle edge, but on no cycle: must stay
    w[0, 3] = 0.2  # below omega
    a = threshold_acyclic(w, 0.3)
    assert is_dag(a)
    assert edges(a) == [("0", "1"), ("2", "0"), ("3", "0")]
    # the comparison is strict: an entry equal to omega is dropped
    assert not threshold_acyclic(np.array([[0.0, 0.3], [0.0, 0.0]]), 0.3).any()
    # two interlocked cycles: 0->1->0 (weak back edge 0.35) and 1->2->1 (weak 2->1 0.4)
    w2 = np.zeros((3, 3))
    w2[0, 1], w2[1, 0], w2[1, 2], w2[2, 1] = 1.0, 0.35, 1.0, 0.4
    assert edges(threshold_acyclic(w2, 0.3)) == [("0", "1"), ("1", "2")]


def test_cpdag_card_fixtures() -> None:
    """Card test 5: chains are Markov equivalent, a collider is not; a wrong v-structure or Meek step fails here."""
    a_b_c = adj_of(3, [(0, 1), (1, 2)])
    c_b_a = adj_of(3, [(2, 1), (1, 0)])
    collider = adj_of(3, [(0, 1), (2, 1)])
    assert cpdag_shd(a_b_c, c_b_a) == 0
    assert cpdag_shd(a_b_c, collider) == 2
    assert cpdag_shd(collider, collider) == 0
    np.testing.assert_array_equal(cpdag(collider), collider.astype(np.int8))


def test_cpdag_interaction5() -> None:
    """The interaction5 CPDAG is {0->2, 1->2, 2->3, 2->4} directed plus 3-4 undirected (R1 orients 2->3 and 2->4)."""
    p = cpdag(INTERACTION5)
    expected = adj_of(5, [(0, 2), (1, 2), (2, 3), (2, 4), (3, 4), (4, 3)]).astype(np.int8)
    np.testing.assert_array_equal(p, expected)


def test_meek_r2_and_r3() -> None:
    """Hand-worked CPDAGs that need R2 and R3 (a v-structures-plus-R1 implementation leaves these undirected)."""
    # R3: a-c, a-d, c->b<-d, a-b: the kite. DAG a->c, a->d, c->b, d->b, a->b.
    kite = adj_of(4, [(0, 2), (0, 3), (2, 1), (3, 1), (0, 1)])
    p = cpdag(kite)
    assert p[0, 1] == 1 and p[1, 0] == 0, "R3 must orient a->b"
    assert p[0, 2] == p[2, 0] == 1 and p[0, 3] == p[3, 0] == 1
    # R2: 0->1<-3 collider, 1->2 by R1, then 0-2 becomes 0->2 by R2 (0->1->2)
    g = adj_of(4, [(0, 1), (3, 1), (1, 2), (0, 2)])
    p = cpdag(g)
    np.testing.assert_array_equal(p, g.astype(np.int8))


def _pgmpy_cpdag(a: np.ndarray) -> np.ndarray:
    from pgmpy.base import DAG

    d = a.shape[0]
    dag = DAG()
    dag.add_nodes_from(range(d))
    dag.add_edges_from(zip(*np.nonzero(a), strict=True))
    pdag = dag.to_pdag()
    p = np.zeros((d, d), dtype=np.int8)
    for u, v in pdag.directed_edges:
        p[u, v] = 1
    for u, v in pdag.undirected_edges:
        p[u, v] = p[v, u] = 1
    return p


def test_cpdag_agrees_with_pgmpy_to_pdag() -> None:
    """Card test 5: the zoo's CPDAG equals pgmpy's ``DAG.to_pdag()`` (Chickering) on 50 random DAGs with d <= 10."""
    pytest.importorskip("pgmpy")
    rng = np.random.default_rng(0)
    n_undirected = n_directed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(50):
            d = int(rng.integers(3, 11))
            a = random_dag(d, float(rng.uniform(0.2, 0.6)), rng)
            p = cpdag(a)
            np.testing.assert_array_equal(p, _pgmpy_cpdag(a))
            n_undirected += int((p & p.T).sum() // 2)
            n_directed += int((p & ~p.T.astype(bool)).sum())
    assert n_undirected > 20 and n_directed > 20, "the random DAGs must exercise both edge kinds"


def test_cpdag_is_an_equivalence_class_invariant() -> None:
    """Covered edge reversals keep the MEC: the CPDAG must not change (Chickering 1995)."""
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(30):
        a = random_dag(7, 0.4, rng)
        for i, j in zip(*np.nonzero(a), strict=True):
            pa_j = a[:, j].copy()
            pa_j[i] = False
            if np.array_equal(pa_j, a[:, i]):  # i -> j is covered
                b = a.copy()
                b[i, j], b[j, i] = False, True
                np.testing.assert_array_equal(cpdag(a), cpdag(b))
                assert cpdag_shd(a, b) == 0 and dag_shd(a, b) == 1
                checked += 1
    assert checked > 10


def test_cpdag_rejects_a_cycle() -> None:
    with pytest.raises(ValueError, match=r"adj: expected a DAG, found the cycle 0 -> 1 -> 0"):
        cpdag(adj_of(2, [(0, 1), (1, 0)]))


def test_shd_and_metrics_hand_worked() -> None:
    """Hand-worked SHDs, skeleton P/R/F1, TPR and FDR (a metric that counts a reversal twice, or mixes skeleton
    and directed counts, fails here)."""
    true = adj_of(4, [(0, 1), (1, 2), (2, 3)])
    est = adj_of(4, [(1, 0), (1, 2), (0, 3)])  # 0-1 reversed, 1->2 right, 2-3 missing, 0-3 extra
    assert dag_shd(true, est) == 3  # |skeleton diff| = 2 (missing 2-3, extra 0-3) + 1 reversed
    m = structure_metrics(true, est)
    assert m["dag_shd"] == 3
    assert m["skel_precision"] == pytest.approx(2 / 3)
    assert m["skel_recall"] == pytest.approx(2 / 3)
    assert m["skel_f1"] == pytest.approx(2 / 3)
    assert m["tpr"] == pytest.approx(1 / 3)  # only 1->2 with its direction
    assert m["fdr"] == pytest.approx(2 / 3)  # 1->0 reversed, 0->3 absent
    assert m["n_edges_true"] == 3 and m["n_edges_est"] == 3
    # CPDAGs: true chain is fully undirected 0-1-2-3; est: 1->0, 1->2, 0->3 is a chain 3-0-1-2 with no v-structure,
    # undirected 1-0, 1-2, 0-3. Pairs: 0-1 same, 1-2 same, 2-3 missing, 0-3 extra -> 2.
    assert m["cpdag_shd"] == 2 and m["cpdag_shd_norm"] == pytest.approx(2 / 3)
    # empty estimate: NOTEARS' max(count, 1) convention
    m0 = structure_metrics(true, np.zeros((4, 4), dtype=bool))
    assert m0["skel_precision"] == 0 and m0["skel_recall"] == 0 and m0["skel_f1"] == 0
    assert m0["fdr"] == 0 and m0["tpr"] == 0 and m0["cpdag_shd"] == 3


def test_cpdag_shd_counts_direction_only_once() -> None:
    """A directed vs undirected status on one pair costs 1, not 2 (causal-learn's pre-PR-110 pitfall, card Metrics)."""
    collider = adj_of(3, [(0, 1), (2, 1)])
    chain = adj_of(3, [(0, 1), (1, 2)])
    # collider CPDAG: 0->1<-2; chain CPDAG: 0-1-2: two pairs differ, each once
    assert cpdag_shd(collider, chain) == 2
    assert cpdag_shd(collider, adj_of(3, [(0, 1)])) == 2  # 0->1 vs 0-1, and 1-2 missing


def test_edges_networkx_and_names() -> None:
    a = adj_of(3, [(2, 0), (0, 1)])
    names = ["a", "b", "c"]
    assert edges(a, names) == [("a", "b"), ("c", "a")]
    g = to_networkx(a, names)
    assert isinstance(g, nx.DiGraph) and list(g.nodes) == names and set(g.edges) == {("a", "b"), ("c", "a")}
    np.testing.assert_array_equal(from_edges(edges(a, names), names), a)
    with pytest.raises(ValueError, match="names: expected 3 names"):
        edges(a, ["a", "b"])
    with pytest.raises(ValueError, match="unknown node 'z'"):
        from_edges([("a", "z")], names)


def test_bad_adjacency_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"adj: expected a square \(d, d\) adjacency matrix, got shape \(2, 3\)"):
        is_dag(np.zeros((2, 3), dtype=bool))
    with pytest.raises(ValueError, match="est_adj: expected the shape of true_adj"):
        cpdag_shd(np.zeros((3, 3), dtype=bool), np.zeros((4, 4), dtype=bool))
    with pytest.raises(ValueError, match="found values other than 0 and 1"):
        is_dag(np.array([[0, 2], [0, 0]]))
