"""Causal history index over a temporal stream and the hashed negative sampling it serves."""

from __future__ import annotations

from typing import Literal

import numpy as np

#: Windows are precomputed only below this many (E * L) entries (int32: 256 MB).
WINDOW_CACHE_ENTRIES = 64_000_000
#: Resampling rounds of the training-negative collision check before giving up on a row.
_MAX_COLLISION_ROUNDS = 64


# --------------------------------------------------------------------------------------------------------------
# Causal history lookup
# --------------------------------------------------------------------------------------------------------------


class TemporalIndex:
    """Vectorised causal history over an undirected temporal adjacency (event u->v inserted as (u,v) and (v,u)).

    Entries are stable-sorted by (node, time, event id); ``ptr`` holds per-node offsets and ``keys`` the int64
    ``node * (R + 1) + dense_time_rank`` (R distinct timestamps), so "entries of v strictly before t" is the prefix
    ``[ptr[v], searchsorted(keys, v * (R + 1) + searchsorted(unique_t, t, 'left')))``.

    Args:
        src: int (E,) source ids.
        dst: int (E,) destination ids.
        t: float (E,) timestamps (any order; ties keep event order).
        num_nodes: number of node ids (max id + 1); queried ids must be below it.
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, num_nodes: int) -> None:
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        t = np.asarray(t, dtype=np.float64).ravel()
        if not len(src) == len(dst) == len(t):
            raise ValueError(f"TemporalIndex: src, dst, t lengths differ ({len(src)}, {len(dst)}, {len(t)})")
        self.num_nodes = int(num_nodes)
        n = len(t)
        if n and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.num_nodes):
            raise ValueError(f"TemporalIndex: node ids must lie in [0, num_nodes={self.num_nodes})")
        if n and not np.isfinite(t).all():
            raise ValueError("TemporalIndex: timestamps must be finite")
        eid = np.arange(n, dtype=np.int64)
        if n > 1 and (t[1:] < t[:-1]).any():
            eid = np.argsort(t, kind="stable")
            src, dst, t = src[eid], dst[eid], t[eid]
        new_time = np.empty(n, dtype=bool)
        new_time[:1] = True
        np.not_equal(t[1:], t[:-1], out=new_time[1:])
        #: Distinct timestamps, ascending.
        self.unique_t = t[new_time]
        rank = np.cumsum(new_time) - 1
        self._stride = np.int64(len(self.unique_t) + 1)
        if self.num_nodes * int(self._stride) >= 2**62:
            raise ValueError(f"TemporalIndex: num_nodes * (distinct times + 1) overflows int64 keys ({n} events)")
        node = np.empty(2 * n, dtype=np.int64)
        nbr = np.empty(2 * n, dtype=np.int64)
        node[0::2], node[1::2] = src, dst
        nbr[0::2], nbr[1::2] = dst, src
        # Stable sort by node via unique int64 keys node * 2E + position (np.sort of keys is ~5x faster than a
        # stable argsort); within a node the order is (time, event id, role).
        width = np.int64(max(2 * n, 1))
        if self.num_nodes * int(width) >= 2**62:
            raise ValueError(f"TemporalIndex: num_nodes * 2E overflows int64 sort keys ({n} events)")
        ordered = np.sort(node * width + np.arange(2 * n, dtype=np.int64))
        node, by_node = ordered // width, ordered % width
        pair = by_node // 2
        #: Neighbour of each entry.
        self.nbr = nbr[by_node]
        #: Time of each entry.
        self.time = t[pair]
        #: Event id (position in the arrays given to the constructor) of each entry.
        self.eid = eid[pair]
        #: Sorted int64 search keys ``node * (R + 1) + dense_time_rank``.
        self.keys = node * self._stride + rank[pair]
        #: Per-node offsets: entries of v are ``ptr[v]:ptr[v + 1]``.
        self.ptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(node, minlength=self.num_nodes), out=self.ptr[1:])

    def __len__(self) -> int:
        return len(self.nbr)

    def _prepare(self, nodes: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
        """Broadcast, flatten and validate a query; returns (nodes, dense time ranks, shape).

        The rank of t is the number of distinct stored times strictly below t; it is computed before broadcasting
        (one search per row when a (B, 1) time column meets (B, C) candidates).
        """
        nodes = np.asarray(nodes, dtype=np.int64)
        times = np.asarray(times, dtype=np.float64)
        rank = np.searchsorted(self.unique_t, times, side="left")
        nodes, rank = np.broadcast_arrays(nodes, rank)
        q = nodes.ravel()
        if q.size and (q.min() < 0 or q.max() >= self.num_nodes):
            bad = q[(q < 0) | (q >= self.num_nodes)][0]
            raise IndexError(f"TemporalIndex: node id {bad} outside [0, num_nodes={self.num_nodes})")
        return q, rank.ravel(), nodes.shape

    def _search(self, query: np.ndarray, side: Literal["left", "right"] = "left") -> np.ndarray:
        """``searchsorted(keys, query)``; large queries are sorted first (cache-friendly, ~2x faster)."""
        if query.size < 4096:
            return np.searchsorted(self.keys, query, side=side)
        order = np.argsort(query)
        out = np.empty(query.shape, dtype=np.int64)
        out[order] = np.searchsorted(self.keys, query[order], side=side)
        return out

    def _end(self, q: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """One past the last entry of node q strictly before the time of dense rank ``rank``."""
        return self._search(q * self._stride + rank)

    def window(self, nodes: np.ndarray, times: np.ndarray, L: int) -> np.ndarray:
        """Last ``L`` neighbours of each node strictly before its time, left-aligned oldest first.

        Args:
            nodes: int (B,) node ids (any shape works; ``times`` broadcasts to it).
            times: float (B,) query times.
            L: window length.

        Returns:
            int64 (B, L): ``[n_1 .. n_l, 0 .. 0]`` with n_1 the oldest of the l <= L most recent neighbours; ties in
            time keep event order.
        """
        if L < 1:
            raise ValueError(f"TemporalIndex.window: L must be >= 1, got {L}")
        q, rank, shape = self._prepare(nodes, times)
        if len(self.nbr) == 0:
            return np.zeros((*shape, L), dtype=np.int64)
        end = self._end(q, rank)
        idx = np.maximum(end - L, self.ptr[q])[:, None] + np.arange(L)
        valid = idx < end[:, None]
        return np.where(valid, self.nbr[np.minimum(idx, len(self.nbr) - 1)], 0).reshape(*shape, L)

    def window_details(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        L: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`window` plus each slot's interaction time and event id.

        Args:
            nodes: int (B,) node ids.
            times: float (B,) query times.
            L: window length.

        Returns:
            ``(nbr, time, eid, valid)``, each (B, L): neighbour ids (0 pad), entry times (NaN pad), event ids (-1 pad)
            and the validity mask.
        """
        if L < 1:
            raise ValueError(f"TemporalIndex.window: L must be >= 1, got {L}")
        q, rank, shape = self._prepare(nodes, times)
        out_shape = (*shape, L)
        if len(self.nbr) == 0:
            zeros = np.zeros(out_shape, dtype=np.int64)
            return zeros, np.full(out_shape, np.nan), zeros - 1, zeros.astype(bool)
        end = self._end(q, rank)
        start = np.maximum(end - L, self.ptr[q])
        idx = start[:, None] + np.arange(L)
        valid = idx < end[:, None]
        idx = np.minimum(idx, len(self.nbr) - 1)
        nbr = np.where(valid, self.nbr[idx], 0)
        time = np.where(valid, self.time[idx], np.nan)
        eid = np.where(valid, self.eid[idx], -1)
        return nbr.reshape(out_shape), time.reshape(out_shape), eid.reshape(out_shape), valid.reshape(out_shape)

    def last_time(self, nodes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Time of each node's last interaction in any role strictly before its query time.

        Args:
            nodes: int node ids, any shape.
            times: float query times, broadcastable to ``nodes``.

        Returns:
            float64, the broadcast shape; NaN where the node has no earlier interaction.
        """
        q, rank, shape = self._prepare(nodes, times)
        out = np.full(q.shape, np.nan)
        if len(self.nbr):
            end = self._end(q, rank)
            has = end > self.ptr[q]
            out[has] = self.time[end[has] - 1]
        return out.reshape(shape)

    def count(self, nodes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Number of interactions of each node strictly before its query time.

        Args:
            nodes: int node ids, any shape.
            times: float query times, broadcastable to ``nodes``.

        Returns:
            int64, the broadcast shape.
        """
        q, rank, shape = self._prepare(nodes, times)
        if not len(self.nbr):
            return np.zeros(shape, dtype=np.int64)
        return (self._end(q, rank) - self.ptr[q]).reshape(shape)

    def touches_at(self, nodes: np.ndarray, times: np.ndarray, others: np.ndarray) -> np.ndarray:
        """Whether ``nodes[i]`` interacts with ``others[i]`` (either direction) at exactly ``times[i]``.

        Args:
            nodes: int (B,) node ids.
            times: float (B,) times.
            others: int (B,) the other endpoint.

        Returns:
            bool (B,).
        """
        q, rank, shape = self._prepare(nodes, times)
        tq = np.broadcast_to(np.asarray(times, dtype=np.float64), shape).ravel()
        other = np.broadcast_to(np.asarray(others, dtype=np.int64), shape).ravel()
        hit = np.zeros(q.shape, dtype=bool)
        if not len(self.nbr) or not len(self.unique_t):
            return hit.reshape(shape)
        exact = (rank < len(self.unique_t)) & (self.unique_t[np.minimum(rank, len(self.unique_t) - 1)] == tq)
        key = q * self._stride + rank
        lo = self._search(key, "left")
        width = np.where(exact, self._search(key, "right") - lo, 0)
        rows = np.flatnonzero(width > 0)
        if rows.size:
            w_max = int(width[rows].max())
            step = max(1, 4_000_000 // w_max)
            for s in range(0, rows.size, step):
                r = rows[s : s + step]
                idx = lo[r, None] + np.arange(w_max)
                inside = idx < (lo[r] + width[r])[:, None]
                vals = self.nbr[np.minimum(idx, len(self.nbr) - 1)]
                hit[r] = ((vals == other[r, None]) & inside).any(1)
        return hit.reshape(shape)

    def at_time(self, nodes: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every neighbour of each node at exactly its time (either direction; duplicates kept), as CSR.

        The public CRAFT code's ``NeighborSampler.find_neighbors_at_time`` for a batch (``utils/utils.py`` of
        luyi256/CRAFT): the nodes its evaluation negatives avoid on the small DyGLib sets.

        Args:
            nodes: int (B,) node ids.
            times: float (B,) times.

        Returns:
            ``(offsets, neighbours)``: int64 (B + 1,) offsets and int64 neighbour ids; row i's neighbours are
            ``neighbours[offsets[i]:offsets[i + 1]]``, in (time, event id, role) order.
        """
        q, rank, _ = self._prepare(np.asarray(nodes).ravel(), np.asarray(times).ravel())
        tq = np.asarray(times, dtype=np.float64).ravel()
        offsets = np.zeros(q.size + 1, dtype=np.int64)
        if not len(self.nbr) or not q.size:
            return offsets, np.zeros(0, dtype=np.int64)
        exact = (rank < len(self.unique_t)) & (self.unique_t[np.minimum(rank, len(self.unique_t) - 1)] == tq)
        key = q * self._stride + rank
        lo = self._search(key, "left")
        width = np.where(exact, self._search(key, "right") - lo, 0)
        np.cumsum(width, out=offsets[1:])
        entry = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - lo, width)
        return offsets, self.nbr[entry]


# --------------------------------------------------------------------------------------------------------------
# Sampling helpers
# --------------------------------------------------------------------------------------------------------------


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, elementwise on uint64 (wrapping arithmetic).

    Args:
        x: uint64 array.

    Returns:
        uint64 array of hashes.
    """
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _event_hash(seed: int, epoch: int, eids: np.ndarray, counter: int) -> np.ndarray:
    """Counter-based hash of (seed, epoch, event id, counter): the training negative's randomness."""
    h = splitmix64(np.full(eids.shape, seed, dtype=np.uint64))
    h = splitmix64(h ^ np.uint64(epoch))
    h = splitmix64(h ^ eids.astype(np.uint64))
    return splitmix64(h ^ np.uint64(counter))


def sample_without_replacement(
    rng: np.random.Generator, n_rows: int, pool_size: int, k: int, exclude: np.ndarray | None = None
) -> np.ndarray:
    """Per row, ``k`` distinct indices into ``range(pool_size)``, uniform without replacement, skipping ``exclude[i]``.

    Vectorised: rejection of duplicates in numpy rounds when k is small relative to the pool, random keys +
    ``argpartition`` when it is not. Both are equivariant under relabelling the pool, hence uniform over k-subsets.

    Args:
        rng: numpy generator.
        n_rows: number of rows.
        pool_size: pool size.
        k: requested count; capped at the number of available indices.
        exclude: optional int (n_rows,) index excluded from each row (the positive).

    Returns:
        int64 (n_rows, min(k, available)).
    """
    avail = pool_size - (exclude is not None)
    k = max(0, min(k, avail))
    if k == 0 or n_rows == 0:
        return np.zeros((n_rows, k), dtype=np.int64)
    if k == avail:
        draw = rng.permuted(np.broadcast_to(np.arange(k, dtype=np.int64), (n_rows, k)), axis=1)
    elif 2 * k > avail:
        chunk = max(1, 8_000_000 // avail)
        parts = [
            np.argpartition(rng.random((min(chunk, n_rows - s), avail)), k - 1, axis=1)[:, :k]
            for s in range(0, n_rows, chunk)
        ]
        draw = np.concatenate(parts).astype(np.int64)
    else:
        draw = rng.integers(0, avail, size=(n_rows, k), dtype=np.int64)
        rows = np.arange(n_rows)
        column = np.arange(k, dtype=np.int64)
        while rows.size:
            # sorting unique keys value * k + column keeps the first column of each repeated value (stable order)
            ordered = np.sort(draw[rows] * k + column, axis=1)
            value, order = ordered // k, ordered % k
            dup = np.zeros(ordered.shape, dtype=bool)
            dup[:, 1:] = value[:, 1:] == value[:, :-1]
            has = dup.any(axis=1)
            rows, dup, order = rows[has], dup[has], order[has]
            r, c = np.nonzero(dup)
            draw[rows[r], order[r, c]] = rng.integers(0, avail, size=r.size, dtype=np.int64)
    if exclude is not None:
        draw = draw + (draw >= np.asarray(exclude, dtype=np.int64)[:, None])
    return draw


def redraw_excluded(
    rng: np.random.Generator, draw: np.ndarray, rows: np.ndarray, excluded: np.ndarray, pool_size: int
) -> None:
    """Redraw, in place, entries of ``draw`` that are excluded for their row or repeat an earlier entry of it.

    Rejection rounds: each bad entry is redrawn uniformly from ``range(pool_size)`` until every row holds distinct
    allowed indices. Started from a uniform draw of distinct indices, the result is uniform over the k-subsets of
    each row's allowed indices (every step is equivariant under relabelling them). Rows need room: at least
    ``2 * k`` allowed indices, so a round rejects at most about half of its draws.

    Args:
        rng: numpy generator.
        draw: int64 ``(R, k)`` indices into the pool, one row per ``rows`` entry (modified in place).
        rows: int ``(R,)`` row ids that key ``excluded``.
        excluded: sorted unique int64 keys ``row_id * pool_size + index`` that a row must not hold.
        pool_size: pool size.
    """
    k = draw.shape[1]
    if not draw.size:
        return
    column = np.arange(k, dtype=np.int64)
    base = np.asarray(rows, dtype=np.int64)[:, None] * pool_size
    while True:
        bad = np.isin(base + draw, excluded)
        ordered = np.sort(draw * k + column, axis=1)  # a repeated value keeps its first column, as above
        value, order = ordered // k, ordered % k
        repeat = np.zeros(ordered.shape, dtype=bool)
        repeat[:, 1:] = value[:, 1:] == value[:, :-1]
        r, c = np.nonzero(repeat)
        bad[r, order[r, c]] = True
        if not bad.any():
            return
        draw[bad] = rng.integers(0, pool_size, size=int(bad.sum()), dtype=np.int64)


def _sample_range(lo: int, hi: int, excluded: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Up to ``size`` distinct integers of ``[lo, hi)`` minus sorted ``excluded``, uniform (all if too few)."""
    if hi <= lo or size <= 0:
        return np.zeros(0, dtype=np.int64)
    ex = excluded[(excluded >= lo) & (excluded < hi)]
    if hi - lo - ex.size <= size:
        return np.setdiff1d(np.arange(lo, hi, dtype=np.int64), ex, assume_unique=True)
    if hi - lo <= 4 * size:
        return rng.choice(np.setdiff1d(np.arange(lo, hi, dtype=np.int64), ex, assume_unique=True), size, False)
    chosen = np.zeros(0, dtype=np.int64)
    while chosen.size < size:
        draw = rng.integers(lo, hi, size=2 * (size - chosen.size) + 8, dtype=np.int64)
        chosen = np.concatenate([chosen, draw[~np.isin(draw, ex)]])
        _, first = np.unique(chosen, return_index=True)
        chosen = chosen[np.sort(first)]
    return chosen[:size]
