"""Decomposable discrete-BN scores for binary_dag: saturated-CPT likelihood, stage-2 pruning and the exact DP oracle.

Card binary_dag, "Two-stage scalable variant" and "Exact oracle". Restricted to a DAG, the saturated logistic
conditional of node j with parents S has one free parameter per parent configuration, so its maximum-likelihood fit
is the empirical conditional table and its log-likelihood is, in closed form,

    LL_j(S) = sum over configurations (s, v) of c_{s,v} log(c_{s,v} / t_s) = sum c log c - sum t log t,

with ``c_{s,v}`` the count of (x_S = s, x_j = v) and ``t_s`` the count of x_S = s. The counts come from one
``numpy.bincount`` over the mixed-radix keys of the parent configurations (no Python loop over samples). A family's
score is ``-LL_j(S) + pen(S)`` (lower is better) with

- ``bic``: ``(log n / 2) (card_j - 1) prod_{k in S} card_k``, i.e. ``(log n / 2) 2^|S|`` on binary data;
- ``l0``: ``lam0 |S|``, in nats on the summed log-likelihood. The card gives no default for ``lam0``; ``None`` means
  ``log(n) / 2`` per edge (reconstructed: one BIC parameter per edge).

Data is a (n, d) integer matrix of state indices ``0..card_j - 1`` (``uint8`` in the zoo) with ``card`` one int per
column. Scores use the given ``card`` for the penalty, also where a state is never observed (pgmpy's ``bic-d`` counts
only the observed states; the two agree whenever every state occurs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

from zoo.binary_dag.graphs import require_dag

Penalty = Literal["bic", "l0"]

#: Largest d the exact DP oracle accepts (card: "Exact oracle (d <= 8)").
DP_MAX_NODES = 8
#: Above this many radix values the parent keys are compressed with ``numpy.unique`` (keeps bincount and int64 small).
_KEY_LIMIT = 1 << 22


# ---------------------------------------------------------------- validation


def check_data(x: np.ndarray, card: Sequence[int]) -> tuple[np.ndarray, tuple[int, ...]]:
    """Validate ``x`` (n, d) integer states and ``card`` (d ints >= 2); one error naming the argument otherwise."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"x: expected a 2-D (n, d) matrix of state indices, got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"x: expected at least one sample and one column, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise ValueError(f"x: expected integer state indices (uint8 in the zoo), got dtype {arr.dtype}")
    card_t = tuple(int(c) for c in card)
    if len(card_t) != arr.shape[1] or any(c < 2 for c in card_t):
        raise ValueError(f"card={list(card)}: expected {arr.shape[1]} integers >= 2 (one per column of x)")
    lo, hi = arr.min(axis=0), arr.max(axis=0)
    if (lo < 0).any() or (hi >= np.asarray(card_t)).any():
        col = int(np.flatnonzero((lo < 0) | (hi >= np.asarray(card_t)))[0])
        raise ValueError(
            f"x: column {col} holds values in [{int(lo[col])}, {int(hi[col])}], expected state indices in "
            f"[0, {card_t[col] - 1}] (card[{col}]={card_t[col]})"
        )
    return arr, card_t


def _check_node(j: int, d: int, name: str = "j") -> int:
    if not (isinstance(j, int | np.integer) and 0 <= int(j) < d):
        raise ValueError(f"{name}={j!r}: expected a column index in [0, {d - 1}]")
    return int(j)


def _check_parents(parents: Iterable[int], j: int, d: int, name: str = "parents") -> tuple[int, ...]:
    ps = tuple(int(p) for p in parents)
    if any(not 0 <= p < d for p in ps) or len(set(ps)) != len(ps) or j in ps:
        raise ValueError(f"{name}={list(ps)}: expected distinct column indices in [0, {d - 1}] other than j={j}")
    return ps


def _check_penalty(pen: str, lam0: float | None) -> None:
    if pen not in ("bic", "l0"):
        raise ValueError(f"pen={pen!r}: expected 'bic' or 'l0'")
    if lam0 is not None and not (isinstance(lam0, int | float) and math.isfinite(lam0) and lam0 >= 0):
        raise ValueError(f"lam0={lam0!r}: expected None or a finite number >= 0")


def _check_search(max_subsets: int, mi_candidates: int) -> None:
    if not (isinstance(max_subsets, int) and max_subsets >= 1):
        raise ValueError(f"max_subsets={max_subsets!r}: expected an integer >= 1")
    if not (isinstance(mi_candidates, int) and mi_candidates >= 1):
        raise ValueError(f"mi_candidates={mi_candidates!r}: expected an integer >= 1")


def _check_max_parents(max_parents: int | None) -> None:
    if max_parents is not None and not (isinstance(max_parents, int) and max_parents >= 0):
        raise ValueError(f"max_parents={max_parents!r}: expected None or an integer >= 0")


# ---------------------------------------------------------------- counts and likelihoods


def _xlogx_sum(counts: np.ndarray) -> float:
    c = counts[counts > 0].astype(np.float64)
    return float((c * np.log(c)).sum())


def _keys(x: np.ndarray, cols: Sequence[int], card: Sequence[int]) -> tuple[np.ndarray, int]:
    """Mixed-radix key of the configuration of ``x[:, cols]`` per sample, and the number of possible keys."""
    n = x.shape[0]
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for c in cols:
        if radix * card[c] > _KEY_LIMIT:  # compress to the observed configurations before the key grows too large
            _, key = np.unique(key, return_inverse=True)
            key = key.astype(np.int64).ravel()
            radix = int(key.max()) + 1
        key = key * card[c] + x[:, c]
        radix *= card[c]
    return key, radix


def _family_ll(x: np.ndarray, j: int, parents: Sequence[int], card: Sequence[int]) -> float:
    """Saturated-CPT log-likelihood of column j given ``parents`` (validated inputs)."""
    key, radix = _keys(x, parents, card)
    joint = key * card[j] + x[:, j]
    size = radix * card[j]
    if size <= max(_KEY_LIMIT, 4 * x.shape[0]):
        c = np.bincount(joint, minlength=size)
        t = c.reshape(radix, card[j]).sum(axis=1)
    else:
        c = np.unique(joint, return_counts=True)[1]
        t = np.unique(key, return_counts=True)[1]
    return _xlogx_sum(c) - _xlogx_sum(t)


def _penalty(j: int, parents: Sequence[int], card: Sequence[int], n: int, pen: str, lam0: float | None) -> float:
    if pen == "bic":
        return 0.5 * math.log(n) * (card[j] - 1) * math.prod(card[p] for p in parents)
    return (0.5 * math.log(n) if lam0 is None else float(lam0)) * len(parents)


def family_loglik(x: np.ndarray, j: int, parents: Iterable[int], card: Sequence[int]) -> float:
    """Saturated-CPT log-likelihood ``sum c log(c / t)`` of column ``j`` given ``parents`` (summed over samples)."""
    arr, card_t = check_data(x, card)
    j = _check_node(j, arr.shape[1])
    return _family_ll(arr, j, _check_parents(parents, j, arr.shape[1]), card_t)


def family_score(
    x: np.ndarray,
    j: int,
    parents: Iterable[int],
    card: Sequence[int],
    pen: Penalty = "bic",
    lam0: float | None = None,
) -> float:
    """``-LL_j(parents) + pen(parents)`` (lower is better); see the module docstring for ``bic`` and ``l0``."""
    arr, card_t = check_data(x, card)
    _check_penalty(pen, lam0)
    j = _check_node(j, arr.shape[1])
    ps = _check_parents(parents, j, arr.shape[1])
    return -_family_ll(arr, j, ps, card_t) + _penalty(j, ps, card_t, arr.shape[0], pen, lam0)


def mutual_information(x: np.ndarray, i: int, j: int, card: Sequence[int]) -> float:
    """Empirical mutual information I(x_i; x_j) in nats (plug-in estimate from the joint counts)."""
    arr, card_t = check_data(x, card)
    i, j = _check_node(i, arr.shape[1], "i"), _check_node(j, arr.shape[1], "j")
    return _mi(arr, i, j, card_t)


def _mi(x: np.ndarray, i: int, j: int, card: Sequence[int]) -> float:
    n = x.shape[0]
    joint = np.bincount(x[:, i].astype(np.int64) * card[j] + x[:, j], minlength=card[i] * card[j])
    joint = joint.reshape(card[i], card[j])
    # I = (1/n)[sum c log c - sum a log a - sum b log b] + log n
    value = (_xlogx_sum(joint) - _xlogx_sum(joint.sum(1)) - _xlogx_sum(joint.sum(0))) / n + math.log(n)
    return max(value, 0.0)


def saturated_nll(x: np.ndarray, adj: np.ndarray, card: Sequence[int]) -> float:
    """Per-sample negative log-likelihood of the DAG ``adj`` with empirical (saturated) CPTs, in nats.

    ``-(1/n) sum_j LL_j(pa_j)``: the training NLL the saturated MVB model reaches on that DAG (card claim 3). Every
    complete DAG attains the empirical joint entropy, whatever its order.
    """
    arr, card_t = check_data(x, card)
    a = require_dag(adj)
    if a.shape[0] != arr.shape[1]:
        raise ValueError(f"adj: expected shape ({arr.shape[1]}, {arr.shape[1]}) to match x, got {a.shape}")
    total = sum(_family_ll(arr, j, tuple(np.flatnonzero(a[:, j]).tolist()), card_t) for j in range(arr.shape[1]))
    return -total / arr.shape[0]


def dag_score(
    x: np.ndarray, adj: np.ndarray, card: Sequence[int], pen: Penalty = "bic", lam0: float | None = None
) -> float:
    """The decomposable score ``sum_j family_score(x, j, pa_j)`` of the DAG ``adj`` (lower is better)."""
    arr, card_t = check_data(x, card)
    _check_penalty(pen, lam0)
    a = require_dag(adj)
    if a.shape[0] != arr.shape[1]:
        raise ValueError(f"adj: expected shape ({arr.shape[1]}, {arr.shape[1]}) to match x, got {a.shape}")
    n = arr.shape[0]
    total = 0.0
    for j in range(arr.shape[1]):
        ps = tuple(np.flatnonzero(a[:, j]).tolist())
        total += -_family_ll(arr, j, ps, card_t) + _penalty(j, ps, card_t, n, pen, lam0)
    return total


# ---------------------------------------------------------------- stage 2: best parents within a candidate set


def _n_subsets(m: int, k: int) -> int:
    return sum(math.comb(m, s) for s in range(min(k, m) + 1))


def mi_candidates_for(
    x: np.ndarray, j: int, allowed: Sequence[int], card: Sequence[int], mi_candidates: int
) -> tuple[int, ...]:
    """The ``mi_candidates`` nodes of ``allowed`` with the highest empirical MI with x_j (ties: smaller index first).

    Returned in increasing index order.
    """
    arr, card_t = check_data(x, card)
    j = _check_node(j, arr.shape[1])
    cand = sorted(_check_parents(allowed, j, arr.shape[1], "allowed"))
    return _top_mi(arr, j, cand, card_t, mi_candidates)


def _top_mi(x: np.ndarray, j: int, cand: list[int], card: Sequence[int], m: int) -> tuple[int, ...]:
    mis = np.array([_mi(x, k, j, card) for k in cand])
    keep = np.argsort(-mis, kind="stable")[:m]
    return tuple(sorted(cand[i] for i in keep))


def best_parents(
    x: np.ndarray,
    j: int,
    allowed: Iterable[int],
    card: Sequence[int],
    max_parents: int | None = 4,
    pen: Penalty = "bic",
    lam0: float | None = None,
    max_subsets: int = 5000,
    mi_candidates: int = 8,
) -> tuple[tuple[int, ...], float]:
    """The parent set ``S`` of ``allowed`` (``|S| <= max_parents``) with the lowest :func:`family_score`.

    Exhaustive over the subsets of ``allowed`` when there are at most ``max_subsets`` of them; otherwise only the
    ``mi_candidates`` allowed nodes of highest empirical mutual information with x_j are searched (card, stage 2).
    Subsets are visited by size, then in lexicographic order, and a later one must score strictly lower to win: on
    exact ties the smaller, then lexicographically first, set is kept.

    Returns:
        (sorted parent tuple, its score).
    """
    arr, card_t = check_data(x, card)
    _check_penalty(pen, lam0)
    _check_max_parents(max_parents)
    j = _check_node(j, arr.shape[1])
    cand = sorted(_check_parents(allowed, j, arr.shape[1], "allowed"))
    _check_search(max_subsets, mi_candidates)
    return _best_parents(arr, j, cand, card_t, max_parents, pen, lam0, max_subsets, mi_candidates)


def _best_parents(
    x: np.ndarray,
    j: int,
    cand: list[int],
    card: Sequence[int],
    max_parents: int | None,
    pen: str,
    lam0: float | None,
    max_subsets: int,
    mi_candidates: int,
) -> tuple[tuple[int, ...], float]:
    k = len(cand) if max_parents is None else max_parents
    if _n_subsets(len(cand), k) > max_subsets:
        cand = list(_top_mi(x, j, cand, card, mi_candidates))
    n = x.shape[0]
    best: tuple[tuple[int, ...], float] = ((), math.inf)
    for size in range(min(k, len(cand)) + 1):
        for subset in itertools.combinations(cand, size):
            score = -_family_ll(x, j, subset, card) + _penalty(j, subset, card, n, pen, lam0)
            if score < best[1]:
                best = (subset, score)
    return best


def prune_to_order(
    x: np.ndarray,
    order: Sequence[int],
    card: Sequence[int],
    max_parents: int | None = 4,
    pen: Penalty = "bic",
    lam0: float | None = None,
    max_subsets: int = 5000,
    mi_candidates: int = 8,
) -> np.ndarray:
    """Stage 2 of the two-stage method: each node's best parents among its predecessors in ``order``.

    Args:
        x: (n, d) state indices.
        order: a permutation of ``range(d)`` (a topological order, e.g. of the stage-1 DAG).
        card: states per column.
        max_parents: largest parent set (None: no limit).
        pen: ``bic`` or ``l0``.
        lam0: the ``l0`` weight (None: ``log(n) / 2``).
        max_subsets: exhaustive search up to this many candidate subsets per node, else the MI restriction.
        mi_candidates: how many predecessors the MI restriction keeps.

    Returns:
        Boolean DAG adjacency consistent with ``order``.
    """
    arr, card_t = check_data(x, card)
    _check_penalty(pen, lam0)
    _check_max_parents(max_parents)
    _check_search(max_subsets, mi_candidates)
    d = arr.shape[1]
    order_t = [int(v) for v in order]
    if sorted(order_t) != list(range(d)):
        raise ValueError(f"order={order_t}: expected a permutation of 0..{d - 1}")
    adj = np.zeros((d, d), dtype=bool)
    for pos, j in enumerate(order_t):
        cand = sorted(order_t[:pos])
        ps, _ = _best_parents(arr, j, cand, card_t, max_parents, pen, lam0, max_subsets, mi_candidates)
        adj[list(ps), j] = True
    return adj


# ---------------------------------------------------------------- exact oracle


def dp_oracle(
    x: np.ndarray,
    card: Sequence[int],
    max_parents: int | None = None,
    pen: Penalty = "bic",
    lam0: float | None = None,
) -> tuple[np.ndarray, float]:
    """The exact minimiser of the decomposable score over all DAGs, by dynamic programming over subsets (d <= 8).

    1. Local scores ``s_j(S)`` for every node j and parent set ``S`` of the other nodes (``|S| <= max_parents``).
    2. Best parent sets ``bps(j, U) = min_{S subset U} s_j(S)``, by ``bps(j, U) = min(s_j(U), min_k bps(j, U - k))``.
    3. ``F(U) = min_{j in U} F(U - j) + bps(j, U - j)``, with j the sink of U; the optimal DAG is read back from
       ``F(V)``. This equals enumerating all d! orders with exhaustive stage-2 pruning.

    Tie-breaking (deterministic, the same rule as :func:`best_parents`): among parent sets of exactly equal score the
    smaller, then lexicographically first, set wins; among sinks of exactly equal ``F`` the smallest index wins.
    Markov-equivalent DAGs have equal scores in exact arithmetic (BIC and l0 are score-equivalent), so which member
    of the optimal equivalence class is returned depends on floating-point rounding; compare results as CPDAGs.

    Returns:
        (boolean DAG adjacency, its score).
    """
    arr, card_t = check_data(x, card)
    _check_penalty(pen, lam0)
    _check_max_parents(max_parents)
    d, n = arr.shape[1], arr.shape[0]
    if d > DP_MAX_NODES:
        raise ValueError(f"x has d={d} columns: the exact DP oracle accepts d <= {DP_MAX_NODES} (use two_stage)")
    k = d - 1 if max_parents is None else max_parents
    full = (1 << d) - 1
    members = [tuple(v for v in range(d) if m >> v & 1) for m in range(1 << d)]

    def rank(mask: int) -> tuple[int, tuple[int, ...]]:
        return (len(members[mask]), members[mask])

    # bps_score[j][U], bps_set[j][U] for U a mask over all nodes not containing j
    bps_score = np.full((d, 1 << d), math.inf)
    bps_set = np.zeros((d, 1 << d), dtype=np.int64)
    for j in range(d):
        for mask in sorted(range(1 << d), key=rank):  # by size: every U - k is done before U
            if mask >> j & 1:
                continue
            ps = members[mask]
            best_s, best_m = math.inf, 0
            if len(ps) <= k:
                best_s = -_family_ll(arr, j, ps, card_t) + _penalty(j, ps, card_t, n, pen, lam0)
                best_m = mask
            for v in ps:
                sub = mask & ~(1 << v)
                s, m = bps_score[j, sub], int(bps_set[j, sub])
                if s < best_s or (s == best_s and rank(m) < rank(best_m)):
                    best_s, best_m = s, m
            bps_score[j, mask], bps_set[j, mask] = best_s, best_m
    f = np.full(1 << d, math.inf)
    sink = np.zeros(1 << d, dtype=np.int64)
    f[0] = 0.0
    for mask in range(1, 1 << d):  # every mask - j is smaller than mask
        for j in members[mask]:
            rest = mask & ~(1 << j)
            value = f[rest] + bps_score[j, rest]
            if value < f[mask]:
                f[mask], sink[mask] = value, j
    adj = np.zeros((d, d), dtype=bool)
    mask = full
    while mask:
        j = int(sink[mask])
        mask &= ~(1 << j)
        adj[list(members[int(bps_set[j, mask])]), j] = True
    return adj, float(f[full])
