"""Seeded binary Bayesian networks in the multivariate-Bernoulli (MVB) form (card ``binary_dag``, section Data).

Conventions: a graph is a numpy ``bool`` adjacency ``adj`` (d, d) with ``adj[i, j]`` iff edge i -> j; data is a
``uint8`` matrix (n, d) of 0/1 states. Every conditional is stored as a table ``cpt`` of ``P(x_j = 1 | pa = c)``
over the ``2**|pa|`` parent configurations, the parents in ascending index order and configuration key
``c = Σ_i x_{pa_i} 2**i`` (parent i is bit i). A logistic conditional with all its monomials is exactly such a table,
so sampling is one table look-up per node, vectorised over samples.

Draw order (one ``numpy.random.Generator``): graph, then the parameters of nodes 0..d-1 in index order, then the
samples, one ``rng.random(n)`` per node in topological order (Kahn, ties by smallest index).

Reconstructed (the card leaves them open; each is fixed here and named in the docstrings below):
- SF graphs: Barabási–Albert attachment where the t-th arriving node is variable ``π[t]`` and edges point from the
  earlier arrival to the later one (hubs are parents), so every in-degree is ``≤ max(k, 1)``.
- ``interaction`` terms of order 3 and above draw ``|γ| ~ U(1.5, 3)`` like the pairs.
- Roots draw ``P(x = 1) ~ U(0.2, 0.8)`` under every ``conditional`` (``random_cpt`` included).
"""

from __future__ import annotations

from itertools import combinations
from typing import Literal

import numpy as np

Graph = Literal["er", "sf"]
Conditional = Literal["interaction", "random_cpt", "logistic_linear"]
GRAPHS = ("er", "sf")
CONDITIONALS = ("interaction", "random_cpt", "logistic_linear")

#: The card's fixture: 0 -> 2, 1 -> 2, 2 -> 3, 2 -> 4, 3 -> 4.
INTERACTION5_EDGES = ((0, 2), (1, 2), (2, 3), (2, 4), (3, 4))
#: Resampling limit of :func:`random_dag` when a draw has an in-degree above ``max_in_degree``.
MAX_TRIES = 1000
#: Largest in-degree a table conditional is built for (2**16 configurations).
MAX_PARENTS = 16


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def edges_to_adj(d: int, edges: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> np.ndarray:
    """Boolean (d, d) adjacency of an edge list ``(i, j)`` meaning i -> j."""
    adj = np.zeros((d, d), dtype=bool)
    for i, j in edges:
        adj[i, j] = True
    return adj


def parents(adj: np.ndarray, j: int) -> np.ndarray:
    """Parents of node j in ascending index order (the bit order of its table)."""
    return np.flatnonzero(adj[:, j])


def topological_order(adj: np.ndarray) -> list[int]:
    """Kahn's order with ties broken by the smallest index; ``ValueError`` if ``adj`` has a cycle."""
    indeg = adj.sum(axis=0).astype(int)
    ready = sorted(np.flatnonzero(indeg == 0).tolist())
    order: list[int] = []
    while ready:
        v = ready.pop(0)
        order.append(v)
        for w in np.flatnonzero(adj[v]).tolist():
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
                ready.sort()
    if len(order) != adj.shape[0]:
        raise ValueError("the graph has a directed cycle; expected a DAG")
    return order


def config_keys(x: np.ndarray, pa: np.ndarray) -> np.ndarray:
    """Configuration key ``Σ_i x[:, pa_i] 2**i`` (int64, (n,)) of the parent columns ``pa``."""
    keys = np.zeros(x.shape[0], dtype=np.int64)
    for bit, p in enumerate(pa):  # loop over parents (≤ MAX_PARENTS), vectorised over samples
        keys |= x[:, p].astype(np.int64) << bit
    return keys


def _config_bits(m: int) -> np.ndarray:
    """(2**m, m) 0/1 matrix: row c holds the parent states of configuration key c."""
    return ((np.arange(2**m)[:, None] >> np.arange(m)[None, :]) & 1).astype(np.float64)


def random_dag(
    d: int, graph: Graph = "er", k: float = 1, max_in_degree: int = 4, rng: np.random.Generator | None = None
) -> np.ndarray:
    """A random DAG with ``k·d`` expected edges, redrawn while any in-degree exceeds ``max_in_degree``.

    A random permutation π orders the nodes. ``er``: each π-ordered pair (π[a], π[b]), a < b, is an edge with
    probability ``min(1, 2k/(d−1))``. ``sf``: Barabási–Albert(d, k) attachment (a star on the first k + 1 arrivals,
    then each arrival joins k distinct earlier nodes chosen with probability ∝ degree); the t-th arrival is π[t] and
    edges point from the earlier arrival to the later one (reconstruction: the card says "oriented along π").

    Args:
        d: number of nodes (≥ 2).
        graph: ``er`` or ``sf``.
        k: expected edges per node (``sf``: an integer in [1, d − 1]).
        max_in_degree: largest in-degree accepted.
        rng: the generator (graph draws come first in :func:`mvb_problem`).
    """
    rng = np.random.default_rng() if rng is None else rng
    if graph not in GRAPHS:
        raise ValueError(f"graph={graph!r}: expected one of 'er', 'sf'")
    if not d >= 2:
        raise ValueError(f"d={d}: expected at least 2 nodes")
    if not k > 0:
        raise ValueError(f"k={k}: expected a number > 0 (expected edges per node)")
    if graph == "sf" and not (float(k).is_integer() and 1 <= k <= d - 1):
        raise ValueError(f"k={k}: graph='sf' attaches k edges per node; expected an integer in [1, {d - 1}]")
    if graph == "sf" and k > max_in_degree:
        raise ValueError(f"k={k}: graph='sf' gives every later node k parents, above max_in_degree={max_in_degree}")
    for _ in range(MAX_TRIES):
        perm = rng.permutation(d)
        ordered = np.zeros((d, d), dtype=bool)  # ordered[a, b]: an edge between π positions a < b
        if graph == "er":
            ordered = np.triu(rng.random((d, d)) < min(1.0, 2.0 * k / (d - 1)), 1)
        else:
            m = int(k)
            ordered[0, 1 : m + 1] = True
            repeated = [0] * m + list(range(1, m + 1))  # each node once per incident edge
            for v in range(m + 1, d):
                targets: set[int] = set()
                while len(targets) < m:
                    targets.add(repeated[int(rng.integers(len(repeated)))])
                for t in targets:
                    ordered[t, v] = True
                repeated += sorted(targets) + [v] * m
        adj = np.zeros((d, d), dtype=bool)
        adj[np.ix_(perm, perm)] = ordered
        if adj.sum(axis=0).max() <= max_in_degree:
            return adj
    raise ValueError(f"random_dag: no {graph!r} graph with d={d}, k={k} and every in-degree <= {max_in_degree} in "
                     f"{MAX_TRIES} draws; lower k or raise max_in_degree")  # fmt: skip


def mvb_conditionals(
    adj: np.ndarray, conditional: Conditional = "interaction", max_interaction_order: int = 2,
    rng: np.random.Generator | None = None,
) -> list[np.ndarray]:  # fmt: skip
    """Draw each node's table ``P(x_j = 1 | pa = c)`` (nodes 0..d-1 in index order; the card's draws).

    Roots: ``P(x = 1) ~ U(0.2, 0.8)``. Nodes with parents:

    - ``interaction``: ``logit = b + Σ β_k x_k + Σ_{|S| = 2..r} γ_S Π_{k∈S} x_k`` over parent subsets S,
      ``r = max_interaction_order``; ``b ~ U(−1, 1)``, ``|β| ~ U(0.5, 2)``, ``|γ| ~ U(1.5, 3)``, random signs
      (order ≥ 3 uses the γ range: reconstruction).
    - ``random_cpt``: ``P(x_j = 1 | pa = c) ~ U(0.1, 0.9)`` independently per configuration.
    - ``logistic_linear``: ``logit = b + Σ β_k x_k`` (no interactions; same b and β draws).

    Returns:
        One float64 array of length ``2**|pa_j|`` per node (key bit i = i-th parent in ascending order).
    """
    rng = np.random.default_rng() if rng is None else rng
    if conditional not in CONDITIONALS:
        raise ValueError(f"conditional={conditional!r}: expected one of " + ", ".join(map(repr, CONDITIONALS)))
    if not max_interaction_order >= 1:
        raise ValueError(f"max_interaction_order={max_interaction_order}: expected an integer >= 1")
    cpts = []
    for j in range(adj.shape[0]):
        m = len(parents(adj, j))
        if m > MAX_PARENTS:
            raise ValueError(f"node {j} has {m} parents; expected at most {MAX_PARENTS} (2**m configurations)")
        if m == 0:
            cpts.append(np.array([rng.uniform(0.2, 0.8)]))
            continue
        if conditional == "random_cpt":
            cpts.append(rng.uniform(0.1, 0.9, size=2**m))
            continue
        bits = _config_bits(m)
        b = rng.uniform(-1.0, 1.0)
        beta = rng.uniform(0.5, 2.0, size=m) * rng.choice((-1.0, 1.0), size=m)
        logit = b + bits @ beta
        if conditional == "interaction":
            for order in range(2, min(max_interaction_order, m) + 1):
                subsets = list(combinations(range(m), order))
                gamma = rng.uniform(1.5, 3.0, size=len(subsets)) * rng.choice((-1.0, 1.0), size=len(subsets))
                for g, s in zip(gamma, subsets, strict=True):
                    logit = logit + g * bits[:, list(s)].prod(axis=1)
        cpts.append(_sigmoid(logit))
    return cpts


def sample_from_cpts(adj: np.ndarray, cpts: list[np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """Ancestral sampling: ``x_j = [u < P(x_j = 1 | pa)]``, one ``rng.random(n)`` per node in topological order."""
    x = np.zeros((n, adj.shape[0]), dtype=np.uint8)
    for j in topological_order(adj):
        p = cpts[j][config_keys(x, parents(adj, j))]
        x[:, j] = rng.random(n) < p
    return x


def sample_mvb(
    adj: np.ndarray, n: int, conditional: Conditional = "interaction", max_interaction_order: int = 2,
    rng: np.random.Generator | None = None,
) -> np.ndarray:  # fmt: skip
    """Draw the conditionals of ``adj`` (:func:`mvb_conditionals`), then n ancestral samples: uint8 (n, d)."""
    rng = np.random.default_rng() if rng is None else rng
    return sample_from_cpts(adj, mvb_conditionals(adj, conditional, max_interaction_order, rng), n, rng)


def interaction5_cpts() -> list[np.ndarray]:
    """The fixture's tables (key bit 0 = the first parent).

    X0 ~ Bern(0.3), X1 ~ Bern(0.6), logit P(X2 = 1) = −1.5 + 3.5·X0X1 + 1.5·[X0 = X1 = 0],
    P(X3 = 1) = 0.8 if X2 = 1 else 0.25, logit P(X4 = 1) = 1.5 − 3X2 − 3X3 + 5X2X3.
    """
    x0, x1 = _config_bits(2).T  # X2's parents (0, 1); X4's parents (2, 3) use the same bit layout
    p2 = _sigmoid(-1.5 + 3.5 * x0 * x1 + 1.5 * (1 - x0) * (1 - x1))
    p4 = _sigmoid(1.5 - 3.0 * x0 - 3.0 * x1 + 5.0 * x0 * x1)
    return [np.array([0.3]), np.array([0.6]), p2, np.array([0.25, 0.8]), p4]


def interaction5(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The card's 5-node fixture: ``(x uint8 (n, 5), adj)`` from ``numpy.random.default_rng(seed)``."""
    adj = edges_to_adj(5, INTERACTION5_EDGES)
    return sample_from_cpts(adj, interaction5_cpts(), n, np.random.default_rng(seed)), adj


def mvb_problem(
    d: int = 10, graph: Graph | Literal["interaction5"] = "er", k: float = 1, n: int = 10000,
    conditional: Conditional = "interaction", max_interaction_order: int = 2, max_in_degree: int = 4, seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """One seeded problem ``(x, adj)``: graph, then parameters, then samples from one ``default_rng(seed)``.

    ``graph="interaction5"`` is the fixture (:func:`interaction5`; ``d`` must be 5, the other arguments but n and
    seed do not apply).
    """
    if graph == "interaction5":
        if d != 5:
            raise ValueError(f"d={d}: graph='interaction5' has 5 nodes; expected d=5")
        return interaction5(n, seed)
    rng = np.random.default_rng(seed)
    adj = random_dag(d, graph, k, max_in_degree, rng)
    return sample_mvb(adj, n, conditional, max_interaction_order, rng), adj
