"""Graph utilities for binary_dag: DAG checks, thresholding, CPDAGs and structure metrics (numpy + networkx only).

Conventions (card binary_dag, "Metrics"): a graph is a boolean adjacency ``A`` of shape (d, d) with ``A[i, j]`` True
iff the edge i -> j; nodes are the data's columns, in order. A CPDAG is an int8 matrix ``P`` with ``P[i, j] = 1,
P[j, i] = 0`` for a directed edge i -> j and ``P[i, j] = P[j, i] = 1`` for an undirected edge i - j.

The CPDAG of a DAG is built here (own code): keep the skeleton undirected, orient the v-structures (unshielded
colliders), then apply Meek's rules R1-R4 until nothing changes. Meek (1995) showed the closure is unique, so the
order in which edges are visited does not change the result; the tests compare it with pgmpy's ``DAG.to_pdag()``
(Chickering's edge-labelling algorithm) on random DAGs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import networkx as nx


def as_adjacency(adj: np.ndarray, name: str = "adj") -> np.ndarray:
    """``adj`` as a square boolean matrix; one error naming ``name`` when it is not a square 2-D array."""
    a = np.asarray(adj)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{name}: expected a square (d, d) adjacency matrix, got shape {a.shape}")
    if a.dtype != bool:
        if not np.issubdtype(a.dtype, np.number):
            raise ValueError(f"{name}: expected a boolean or 0/1 adjacency matrix, got dtype {a.dtype}")
        if not np.isin(a, (0, 1)).all():
            raise ValueError(f"{name}: expected a boolean or 0/1 adjacency matrix, found values other than 0 and 1")
        a = a.astype(bool)
    return a


def _same_size(true_adj: np.ndarray, est_adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t, e = as_adjacency(true_adj, "true_adj"), as_adjacency(est_adj, "est_adj")
    if t.shape != e.shape:
        raise ValueError(f"est_adj: expected the shape of true_adj {t.shape}, got {e.shape}")
    return t, e


def _kahn(a: np.ndarray) -> list[int]:
    """Kahn's algorithm with a min-heap: among the nodes free at each step, the smallest index comes first."""
    indeg = a.sum(axis=0).astype(np.int64)
    heap = [int(v) for v in np.flatnonzero(indeg == 0)]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        v = heapq.heappop(heap)
        order.append(v)
        for w in np.flatnonzero(a[v]):
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, int(w))
    return order


def is_dag(adj: np.ndarray) -> bool:
    """Whether ``adj`` has no directed cycle (a self-loop is a cycle)."""
    a = as_adjacency(adj)
    return len(_kahn(a)) == a.shape[0]


def find_cycle(adj: np.ndarray) -> list[int] | None:
    """One directed cycle ``[v0, v1, ..., vk]`` (edges v0->v1, ..., vk->v0), or None for a DAG.

    Deterministic: depth-first search from the smallest unvisited index, children in index order; the first back edge
    found closes the returned cycle. A self-loop i -> i is returned as ``[i]``.
    """
    a = as_adjacency(adj)
    d = a.shape[0]
    state = np.zeros(d, dtype=np.int8)  # 0 unvisited, 1 on the current path, 2 finished
    for root in range(d):
        if state[root]:
            continue
        path = [root]
        children = [iter(np.flatnonzero(a[root]).tolist())]
        state[root] = 1
        while path:
            child = next(children[-1], None)
            if child is None:
                state[path.pop()] = 2
                children.pop()
            elif state[child] == 1:
                return path[path.index(child) :]
            elif state[child] == 0:
                state[child] = 1
                path.append(child)
                children.append(iter(np.flatnonzero(a[child]).tolist()))
    return None


def topological_order(adj: np.ndarray) -> list[int]:
    """A topological order of the DAG ``adj`` (Kahn's algorithm, ties broken by the smallest index).

    Raises:
        ValueError: ``adj`` has a cycle (the message lists it).
    """
    a = as_adjacency(adj)
    order = _kahn(a)
    if len(order) != a.shape[0]:
        raise ValueError(f"adj: expected a DAG, found the cycle {_cycle_text(a)}")
    return order


def _cycle_text(a: np.ndarray) -> str:
    cycle = find_cycle(a) or []
    return " -> ".join(str(v) for v in [*cycle, cycle[0]]) if cycle else "(none)"


def require_dag(adj: np.ndarray, name: str = "adj") -> np.ndarray:
    """``adj`` as a boolean matrix; one error naming ``name`` and a cycle when it is not a DAG."""
    a = as_adjacency(adj, name)
    if len(_kahn(a)) != a.shape[0]:
        raise ValueError(f"{name}: expected a DAG, found the cycle {_cycle_text(a)}")
    return a


def threshold_acyclic(W: np.ndarray, omega: float = 0.3) -> np.ndarray:  # noqa: N803 (the card's name)
    """Keep the edges with ``W > omega``, then break each remaining cycle at its weakest edge (NOTEARS post-processing).

    While the kept graph has a cycle (the one :func:`find_cycle` returns), the kept edge of that cycle with the
    smallest weight is removed (on equal weights, the first edge along the cycle). The diagonal is ignored (no
    self-loops). Signed weights, as DAGMA returns them, are thresholded by the caller on ``abs(W)``.

    Args:
        W: (d, d) real matrix, ``W[i, j]`` the strength of the edge i -> j.
        omega: threshold; only entries strictly above it are kept.

    Returns:
        A boolean DAG adjacency.
    """
    w = np.asarray(W, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"W: expected a square (d, d) matrix, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("W: expected finite values, found NaN or inf")
    a = w > omega
    np.fill_diagonal(a, False)
    while (cycle := find_cycle(a)) is not None:
        pairs = list(zip(cycle, cycle[1:] + cycle[:1], strict=True))
        src, tgt = min(pairs, key=lambda e: w[e])
        a[src, tgt] = False
    return a


def cpdag(adj: np.ndarray) -> np.ndarray:
    """The CPDAG (essential graph) of a DAG: v-structures, then Meek's rules R1-R4 to closure.

    Args:
        adj: boolean DAG adjacency, ``adj[i, j]`` iff i -> j.

    Returns:
        int8 matrix ``P``: ``P[i, j] = 1, P[j, i] = 0`` for a compelled i -> j, both 1 for a reversible edge i - j.
    """
    a = require_dag(adj)
    d = a.shape[0]
    skel = a | a.T
    directed = np.zeros((d, d), dtype=bool)  # directed[i, j]: i -> j is oriented in the pattern
    for j in range(d):
        parents = np.flatnonzero(a[:, j])
        for k, p in enumerate(parents):
            for q in parents[k + 1 :]:
                if not skel[p, q]:  # unshielded collider p -> j <- q
                    directed[p, j] = directed[q, j] = True
    undirected = skel & ~directed & ~directed.T
    changed = True
    while changed:
        changed = False
        for i, j in zip(*np.nonzero(np.triu(undirected)), strict=True):
            for x, y in ((int(i), int(j)), (int(j), int(i))):
                if _meek_orients(x, y, directed, undirected, skel):
                    directed[x, y] = True
                    undirected[x, y] = undirected[y, x] = False
                    changed = True
                    break
    return (directed | undirected).astype(np.int8)


def _meek_orients(x: int, y: int, directed: np.ndarray, undirected: np.ndarray, skel: np.ndarray) -> bool:
    """Whether one of Meek's rules orients the undirected edge x - y as x -> y."""
    # R1: c -> x - y with c, y non-adjacent (else a new v-structure at y)
    if (directed[:, x] & ~skel[:, y]).any():
        return True
    # R2: x -> c -> y (else a cycle)
    if (directed[x, :] & directed[:, y]).any():
        return True
    # R3: x - c -> y and x - e -> y with c, e non-adjacent
    kites = np.flatnonzero(undirected[x, :] & directed[:, y])
    if len(kites) > 1 and (~skel[np.ix_(kites, kites)] & ~np.eye(len(kites), dtype=bool)).any():
        return True
    # R4: e -> c -> y with x - e, x adjacent to c, e and y non-adjacent
    for c in np.flatnonzero(skel[x, :] & directed[:, y]):
        if (directed[:, c] & undirected[x, :] & ~skel[:, y]).any():
            return True
    return False


def _pair_codes(p: np.ndarray) -> np.ndarray:
    """Status of every unordered pair i < j: 0 none, 1 i->j, 2 j->i, 3 both (undirected, or a 2-cycle)."""
    p = p.astype(bool)
    code = p.astype(np.int8) + 2 * p.T.astype(np.int8)
    return code[np.triu_indices(p.shape[0], k=1)]


def cpdag_shd(true_adj: np.ndarray, est_adj: np.ndarray) -> int:
    """Structural Hamming distance between the CPDAGs of two DAGs, one unit per unordered pair whose status differs.

    The status of a pair is one of {none, a -> b, b -> a, a - b}; so a missing, extra, reversed or wrongly
    (un)directed edge each costs exactly 1.
    """
    t, e = _same_size(true_adj, est_adj)
    return int((_pair_codes(cpdag(t)) != _pair_codes(cpdag(e))).sum())


def dag_shd(true_adj: np.ndarray, est_adj: np.ndarray) -> int:
    """DAG structural Hamming distance: |skeleton difference| + number of reversed edges.

    Counted per unordered pair whose directed status differs (a pair holding both directions counts as its own
    status), which equals the sum above for DAGs.
    """
    t, e = _same_size(true_adj, est_adj)
    return int((_pair_codes(t) != _pair_codes(e)).sum())


def structure_metrics(true_adj: np.ndarray, est_adj: np.ndarray) -> dict[str, float]:
    """CPDAG-SHD (plain and divided by the true edge count), DAG-SHD, skeleton P/R/F1, directed-edge TPR and FDR.

    Empty denominators follow NOTEARS' ``count_accuracy``: each ratio divides by ``max(count, 1)``, so an empty
    estimate has precision 0 and FDR 0. ``tpr`` is the share of true edges found with their direction; ``fdr`` the
    share of estimated edges that are absent or reversed in the truth.
    """
    t, e = _same_size(true_adj, est_adj)
    iu = np.triu_indices(t.shape[0], k=1)
    skel_t, skel_e = (t | t.T)[iu], (e | e.T)[iu]
    n_true, n_est = int(t.sum()), int(e.sum())
    tp_skel = int((skel_t & skel_e).sum())
    precision = tp_skel / max(int(skel_e.sum()), 1)
    recall = tp_skel / max(int(skel_t.sum()), 1)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    tp_dir = int((t & e).sum())
    shd = cpdag_shd(t, e)
    return {
        "cpdag_shd": float(shd),
        "cpdag_shd_norm": shd / max(n_true, 1),
        "dag_shd": float(dag_shd(t, e)),
        "skel_precision": precision,
        "skel_recall": recall,
        "skel_f1": f1,
        "tpr": tp_dir / max(n_true, 1),
        "fdr": (n_est - tp_dir) / max(n_est, 1),
        "n_edges_true": float(n_true),
        "n_edges_est": float(n_est),
    }


def _names(d: int, names: Sequence[str] | None) -> list[str]:
    if names is None:
        return [str(i) for i in range(d)]
    names = list(names)
    if len(names) != d:
        raise ValueError(f"names: expected {d} names (one per node), got {len(names)}")
    if len(set(names)) != d:
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"names: expected distinct names, found duplicates {dup}")
    return names


def edges(adj: np.ndarray, names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """The edges ``(source, target)`` of ``adj``, by source index then target index (names default to "0", "1", ...)."""
    a = as_adjacency(adj)
    labels = _names(a.shape[0], names)
    return [(labels[i], labels[j]) for i, j in zip(*np.nonzero(a), strict=True)]


def from_edges(edge_list: Sequence[tuple[str, str]], names: Sequence[str]) -> np.ndarray:
    """The boolean adjacency over ``names`` (column order) of an edge list of ``(source, target)`` names."""
    labels = _names(len(names), names)
    index = {n: i for i, n in enumerate(labels)}
    a = np.zeros((len(labels), len(labels)), dtype=bool)
    for src, tgt in edge_list:
        for node in (src, tgt):
            if node not in index:
                raise ValueError(f"edge ({src!r}, {tgt!r}): unknown node {node!r}; expected one of {labels}")
        a[index[src], index[tgt]] = True
    return a


def to_networkx(adj: np.ndarray, names: Sequence[str] | None = None) -> nx.DiGraph:
    """A ``networkx.DiGraph`` over all nodes (in column order, isolated ones included) with the edges of ``adj``."""
    import networkx as nx

    a = as_adjacency(adj)
    labels = _names(a.shape[0], names)
    graph = nx.DiGraph()
    graph.add_nodes_from(labels)
    graph.add_edges_from(edges(a, labels))
    return graph
