"""Temporal link prediction data: one stream, causal history lookup, fixed evaluation negatives, loaders.

``TemporalLinkDataModule`` serves every temporal link model of the zoo (CRAFT, EdgeBank, TGN, ...) from one
:class:`TemporalStream`, so one run gives one comparable table. ``path=None`` generates the seeded seen/unseen stream
(:mod:`datamodules.seen_unseen`, written in the JODIE layout and read back by the real reader); ``path=`` reads JODIE,
DyGLib ``ml_``, TGB or TGB-Seq files offline (:mod:`datamodules.temporal_formats`). Nothing downloads.

:class:`TemporalIndex` answers "last L neighbours of v strictly before t" and "last interaction time of v strictly
before t" for whole batches with two ``searchsorted`` calls over int64 keys ``node * (R + 1) + dense_time_rank``;
no per-row Python loop and no float ``node * BIG + t`` keys (which lose the fractions of unix-scale times).

Example:
    >>> dm = TemporalLinkDataModule(n_events=2000, n_users=50, n_items=100)
    >>> dm.setup()
    >>> batch = next(iter(dm.train_dataloader()))
    >>> sorted(batch) == ["dst", "eid", "msg", "neg", "src", "t"]
    True
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.seen_unseen import BayesOracle, seen_unseen_stream, validate_generator_args
from datamodules.temporal_formats import RawTemporal, TemporalFormatError, read_temporal, time_quantile_split
from zoo.core.datamodule import SplitLoaders, ZooDataModule

__all__ = [
    "TemporalFormatError",
    "TemporalIndex",
    "TemporalLinkDataModule",
    "TemporalStream",
    "sample_without_replacement",
    "splitmix64",
]

SplitName = Literal["train", "val", "test"]
_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}
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


# --------------------------------------------------------------------------------------------------------------
# Stream and datamodule
# --------------------------------------------------------------------------------------------------------------


@dataclass
class TemporalStream:
    """The internal event stream with its split, seen flags and fixed evaluation negatives.

    Attributes:
        name: dataset name.
        src: int64 (E,) 1-based source ids, 0 = padding.
        dst: int64 (E,) destination ids.
        t: float64 (E,) non-decreasing (stable-sorted) timestamps.
        split: int8 (E,) 0 train, 1 val, 2 test.
        msg: float32 (E, F) edge features (F >= 1; a 1.0 column when the format has none).
        label: int64 (E,) state labels.
        num_nodes: max id + 1.
        bipartite: source and destination id sets are disjoint.
        dst_min: smallest destination id.
        seen: bool (E,) per ``seen_def`` (stream: the (src, dst) pair occurred strictly earlier; trainval: the pair
            occurs in train+val).
        eval_neg: ``"val"``/``"test"`` -> (n_split, Kmax) int64 negatives (0 = pad), rows in event order.
        eval_neg_mask: same shapes, True = valid.
        stats: repeat ratio, surprise, seen fractions per split, counts.
    """

    name: str
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    split: np.ndarray
    msg: np.ndarray
    label: np.ndarray
    num_nodes: int
    bipartite: bool
    dst_min: int
    seen: np.ndarray
    eval_neg: dict[str, np.ndarray] = field(default_factory=dict)
    eval_neg_mask: dict[str, np.ndarray] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t)


class _Rows(Dataset):
    """Dataset of row positions; the collate function gathers whole batches vectorised."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def _check(flag: str, ok: bool, value: object, expected: str) -> None:
    """Raise a ValueError naming ``--data.init_args.<flag>`` when ``ok`` is false."""
    if not ok:
        raise ValueError(f"--data.init_args.{flag}={value!r}: expected {expected}")


class TemporalLinkDataModule(SplitLoaders, ZooDataModule):
    """Temporal link prediction data (synthetic seen/unseen stream by default, JODIE/DyGLib/TGB/TGB-Seq on disk).

    Training batches: ``eid, src, dst, t, neg, msg`` (one training negative per event, a deterministic function of
    (seed, epoch, event), so shuffled and chronological loaders feed identical per-event inputs). Evaluation
    batches (chronological): ``eid, src, dst, t, msg, neg (B, Kmax), neg_mask, seen`` and the DyGLib AP/AUC negatives
    ``ap_{random,historical,inductive}_{src,dst}`` (one per positive; evaluation only).

    Args:
        path: data file or folder; ``None`` generates the seeded seen/unseen stream.
        format: on-disk format (``auto`` detects from the file name and header).
        name: dataset name inside a folder (``wikipedia``, ``tgbl-wiki`` ...).
        mode: generator structure, ``cluster`` (communities) or ``succ`` (successor table).
        p_repeat: generator probability that a user with history repeats a recent item.
        n_users: generator users.
        n_items: generator items.
        n_events: generator events.
        branching: generator successors per item (``succ``).
        eps: generator probability of a uniform item on a non-repeat event.
        repeat_window: generator repeat window (most recent history entries).
        recency: generator repeat weight ``recency ** age``.
        cluster_size: generator community size (divides ``n_items``).
        p_switch: generator per-event community switch probability.
        zipf: generator user-activity exponent.
        seed: seed of the generator, the negatives and the inductive mask.
        batch_size: training batch size.
        eval_batch_size: validation/test batch size (also fixes the DyGLib AP negatives' batches).
        num_eval_negatives: K, evaluation negatives per positive for ``rnd``/``hist_rnd`` (shipped TGB/TGB-Seq
            negatives keep their own count).
        eval_negatives: ``rnd`` (K distinct uniform destinations, not the positive) or ``hist_rnd`` (TGB: up to half
            from the source's training destinations).
        train_neg: training negatives uniform over ``train_dst`` (unique training destinations, official) or
            ``all_dst``.
        collision_check: resample a training negative that the source touches at exactly t.
        val_ratio: validation share of the chronological time-quantile split.
        test_ratio: test share.
        inductive_ratio: fraction of the nodes of val/test masked out of the training graph and events.
        shuffle: shuffle training batches (memory models such as TGN refuse ``True``).
        sort: stable-sort files with decreasing timestamps (with a warning) instead of raising.
        seen_def: ``stream`` (pair occurred strictly earlier; TGB-Seq) or ``trainval`` (pair in train+val).
        cache_dir: user folder for converted arrays (and the generated csv); ``None`` disables caching.
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        path: str | None = None,
        format: Literal["auto", "jodie", "dyglib", "tgb", "tgbseq"] = "auto",
        name: str | None = None,
        mode: Literal["cluster", "succ"] = "cluster",
        p_repeat: float = 0.1,
        n_users: int = 500,
        n_items: int = 1000,
        n_events: int = 20000,
        branching: int = 3,
        eps: float = 0.05,
        repeat_window: int = 10,
        recency: float = 0.7,
        cluster_size: int = 20,
        p_switch: float = 0.02,
        zipf: float = 0.5,
        seed: int = 0,
        batch_size: int = 200,
        eval_batch_size: int = 200,
        num_eval_negatives: int = 100,
        eval_negatives: Literal["rnd", "hist_rnd"] = "rnd",
        train_neg: Literal["train_dst", "all_dst"] = "train_dst",
        collision_check: bool = True,
        val_ratio: float = 0.15,
        test_ratio: float = 0.15,
        inductive_ratio: float = 0.0,
        shuffle: bool = True,
        sort: bool = False,
        seen_def: Literal["stream", "trainval"] = "stream",
        cache_dir: str | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        _check("format", format in ("auto", "jodie", "dyglib", "tgb", "tgbseq"), format, "auto|jodie|dyglib|tgb|tgbseq")
        _check("format", path is not None or format == "auto", format, "auto when path is null (the generator)")
        _check("eval_negatives", eval_negatives in ("rnd", "hist_rnd"), eval_negatives, "rnd or hist_rnd")
        _check("train_neg", train_neg in ("train_dst", "all_dst"), train_neg, "train_dst or all_dst")
        _check("seen_def", seen_def in ("stream", "trainval"), seen_def, "stream or trainval")
        _check("val_ratio", 0.0 < val_ratio < 1.0, val_ratio, "a ratio in (0, 1)")
        _check("test_ratio", 0.0 < test_ratio < 1.0, test_ratio, "a ratio in (0, 1)")
        _check("val_ratio", val_ratio + test_ratio < 1.0, val_ratio, f"val_ratio + test_ratio={test_ratio} < 1")
        _check("inductive_ratio", 0.0 <= inductive_ratio < 1.0, inductive_ratio, "a ratio in [0, 1)")
        _check("num_eval_negatives", num_eval_negatives >= 1, num_eval_negatives, ">= 1")
        _check("batch_size", batch_size >= 1, batch_size, ">= 1")
        _check("eval_batch_size", eval_batch_size >= 1, eval_batch_size, ">= 1")
        _check("seed", seed >= 0, seed, ">= 0")
        _check("num_workers", num_workers >= 0, num_workers, ">= 0")
        if path is None:
            validate_generator_args(
                mode=mode,
                p_repeat=p_repeat,
                n_users=n_users,
                n_items=n_items,
                n_events=n_events,
                branching=branching,
                eps=eps,
                repeat_window=repeat_window,
                recency=recency,
                cluster_size=cluster_size,
                p_switch=p_switch,
                zipf=zipf,
            )
        self.path, self.format, self.name = path, format, name
        self.generator_args = {
            "mode": mode,
            "p_repeat": p_repeat,
            "n_users": n_users,
            "n_items": n_items,
            "n_events": n_events,
            "branching": branching,
            "eps": eps,
            "repeat_window": repeat_window,
            "recency": recency,
            "cluster_size": cluster_size,
            "p_switch": p_switch,
            "zipf": zipf,
        }
        self.seed = seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.num_eval_negatives, self.eval_negatives = num_eval_negatives, eval_negatives
        self.train_neg, self.collision_check = train_neg, collision_check
        self.val_ratio, self.test_ratio, self.inductive_ratio = val_ratio, test_ratio, inductive_ratio
        #: Shuffle training batches; memory models (TGN) refuse a datamodule with ``shuffle=True``.
        self.shuffle = shuffle
        self.sort, self.seen_def, self.cache_dir, self.num_workers = sort, seen_def, cache_dir, num_workers
        #: The stream, built by :meth:`setup`.
        self.stream: TemporalStream | None = None
        #: Unique destination ids of the training events (the official training-negative pool).
        self.train_destinations: np.ndarray | None = None
        #: Unique destination ids of the whole stream.
        self.all_destinations: np.ndarray | None = None
        #: Node ids masked out of training (``inductive_ratio > 0``).
        self.masked_nodes: np.ndarray | None = None
        # Shape facts of the stream, read by the properties below (which load the data on first use).
        self._num_nodes: int | None = None
        self._bipartite: bool | None = None
        self._dst_min: int | None = None
        self._msg_dim: int | None = None
        #: Optional node features of the format (DyGLib ``_node.npy``).
        self.node_feat: np.ndarray | None = None
        self._oracle: BayesOracle | None = None
        self._eids: dict[str, np.ndarray] = {}
        self._indices: dict[str, TemporalIndex] = {}
        self._window_caches: dict[tuple[str, int], np.ndarray] = {}
        self._ap: dict[str, dict[str, np.ndarray]] = {}

    # Link sources: LightningCLI reads them right after __init__, so they load the stream on first use (the same
    # cached stream setup() then reuses).
    @property
    def num_nodes(self) -> int:
        """Max node id + 1 (the size of an ``all`` ID table)."""
        self.setup()
        return self._num_nodes

    @property
    def bipartite(self) -> bool:
        """Source and destination id sets are disjoint."""
        self.setup()
        return self._bipartite

    @property
    def dst_min(self) -> int | None:
        """Smallest destination id when the data is bipartite, else ``None`` (CRAFT's ``id_space: auto``)."""
        self.setup()
        return self._dst_min if self._bipartite else None

    @property
    def msg_dim(self) -> int:
        """Edge-feature width F."""
        self.setup()
        return self._msg_dim

    @property
    def input_dim(self) -> int:
        """Edge-message width, linked into models that take ``input_dim`` (TGN)."""
        return self.msg_dim

    # ---------------------------------------------------------------------------------------------------------
    # setup
    # ---------------------------------------------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        """Generate or read the stream once (idempotent); split, mask, flag seen pairs and fix the negatives.

        Args:
            stage: Lightning stage (unused: every stage needs the same stream).
        """
        if self.stream is not None:
            return
        if self.path is None:
            generated = seen_unseen_stream(
                **self.generator_args,
                seed=self.seed,
                val_ratio=self.val_ratio,
                test_ratio=self.test_ratio,
                cache_dir=self.cache_dir,
            )
            raw = generated.raw
            self._oracle = generated.oracle
        else:
            raw = read_temporal(
                self.path,
                self.format,
                self.name,
                sort=self.sort,
                val_ratio=self.val_ratio,
                test_ratio=self.test_ratio,
                cache_dir=self.cache_dir,
            )
        self._build(raw)

    def _build(self, raw: RawTemporal) -> None:
        """Turn a parsed stream into the :class:`TemporalStream` and every fixed evaluation array."""
        src, dst, t = raw.src, raw.dst, raw.t
        n = len(t)
        split = raw.split if raw.split is not None else time_quantile_split(t, self.val_ratio, self.test_ratio)
        for name, code in _SPLIT_CODE.items():
            if not (split == code).any():
                raise ValueError(
                    f"{raw.source}: the {name} split is empty (--data.init_args.val_ratio={self.val_ratio}, "
                    f"--data.init_args.test_ratio={self.test_ratio}; {n} events, {len(np.unique(t))} distinct times)"
                )
        num_nodes = int(max(src.max(), dst.max())) + 1
        unique_src, unique_dst = np.unique(src), np.unique(dst)
        pair = src * num_nodes + dst
        _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
        seen_stream = t > t[first][inverse]
        seen = seen_stream if self.seen_def == "stream" else np.isin(pair, pair[split <= 1])
        # inductive setting: mask a fraction of the val/test nodes out of the training graph and events
        masked = np.zeros(num_nodes, dtype=bool)
        if self.inductive_ratio > 0:
            eval_nodes = np.unique(np.concatenate([src[split > 0], dst[split > 0]]))
            n_mask = int(round(self.inductive_ratio * len(eval_nodes)))
            chosen = np.random.default_rng([self.seed, 3]).choice(eval_nodes, size=n_mask, replace=False)
            masked[chosen] = True
        train = (split == 0) & ~masked[src] & ~masked[dst]
        self._eids = {
            "train": np.flatnonzero(train),
            "val": np.flatnonzero(split == 1),
            "test": np.flatnonzero(split == 2),
        }
        if not self._eids["train"].size:
            raise ValueError(f"--data.init_args.inductive_ratio={self.inductive_ratio} leaves no training event")
        self.masked_nodes = np.flatnonzero(masked)
        self.train_destinations = np.unique(dst[train])
        self.all_destinations = unique_dst
        self._num_nodes = num_nodes
        self._bipartite = not np.intersect1d(unique_src, unique_dst, assume_unique=True).size
        self._dst_min = int(dst.min())
        self._msg_dim = int(raw.msg.shape[1])
        self.node_feat = raw.node_feat
        self.stream = TemporalStream(
            name=raw.name,
            src=src,
            dst=dst,
            t=t,
            split=split.astype(np.int8),
            msg=raw.msg.astype(np.float32, copy=False),
            label=raw.label,
            num_nodes=num_nodes,
            bipartite=self._bipartite,
            dst_min=self._dst_min,
            seen=seen,
        )
        self._indices, self._window_caches = {}, {}
        for code, name in ((1, "val"), (2, "test")):
            rows = self._eids[name]
            if name in raw.eval_neg:
                neg, mask = raw.eval_neg[name], raw.eval_neg_mask[name]
                if len(neg) != len(rows):
                    raise ValueError(f"{raw.source}: {len(neg)} shipped {name} negative rows for {len(rows)} events")
                if self.eval_negatives != "rnd":
                    warnings.warn(
                        f"--data.init_args.eval_negatives={self.eval_negatives} ignored for {name}: "
                        f"{raw.source} ships fixed {name} negatives",
                        stacklevel=2,
                    )
            elif self.eval_negatives == "rnd":
                neg, mask = self._rnd_negatives(rows, np.random.default_rng([self.seed, code]))
            else:
                neg, mask = self._hist_rnd_negatives(rows, np.random.default_rng([self.seed, code]))
            self.stream.eval_neg[name], self.stream.eval_neg_mask[name] = neg, mask
            self._ap[name] = self._dyglib_negatives(rows, code, unique_src, first, inverse)
        val_test = pair[split <= 1]
        test_pairs = np.unique(pair[split == 2])
        self.stream.stats = {
            "n_events": float(n),
            "n_nodes": float(len(np.union1d(unique_src, unique_dst))),
            "num_nodes": float(num_nodes),
            "n_train": float((split == 0).sum()),
            "n_val": float((split == 1).sum()),
            "n_test": float((split == 2).sum()),
            "n_train_events": float(train.sum()),
            "n_masked_nodes": float(masked.sum()),
            "repeat_ratio": float(seen_stream.mean()),
            "surprise": float((~np.isin(test_pairs, val_test)).sum() / (split == 2).sum()),
            "seen_frac_train": float(seen[split == 0].mean()),
            "seen_frac_val": float(seen[split == 1].mean()),
            "seen_frac_test": float(seen[split == 2].mean()),
            "k_val": float(self.stream.eval_neg["val"].shape[1]),
            "k_test": float(self.stream.eval_neg["test"].shape[1]),
        }

    # ---------------------------------------------------------------------------------------------------------
    # evaluation negatives
    # ---------------------------------------------------------------------------------------------------------

    def _rnd_negatives(self, rows: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``rnd``: K distinct destinations per positive, uniform without replacement, excluding the positive."""
        pool = self.all_destinations
        positive = np.searchsorted(pool, self.stream.dst[rows])
        draw = sample_without_replacement(rng, len(rows), len(pool), self.num_eval_negatives, exclude=positive)
        return pool[draw], np.ones(draw.shape, dtype=bool)

    def _hist_rnd_negatives(self, rows: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """TGB ``hist_rnd`` negatives (per-event loop, as TGB's generator; not the default).

        Up to K/2 of s's training destinations (not s's positives at t), the rest uniform over destinations that are
        neither s's historical ones nor its positives at t; all candidates if too few.
        """
        s = self.stream
        k = self.num_eval_negatives
        pool = self.all_destinations
        train = self._eids["train"]
        train_pairs = np.unique(s.src[train] * self._num_nodes + s.dst[train])
        hist_src, hist_dst = train_pairs // self._num_nodes, train_pairs % self._num_nodes
        hist_ptr = np.searchsorted(hist_src, np.arange(self._num_nodes + 1))
        positives: dict[tuple[int, float], list[int]] = {}
        for u, v, tt in zip(s.src[rows].tolist(), s.dst[rows].tolist(), s.t[rows].tolist()):
            positives.setdefault((u, tt), []).append(v)
        neg = np.zeros((len(rows), k), dtype=np.int64)
        mask = np.zeros((len(rows), k), dtype=bool)
        for i, (u, tt) in enumerate(zip(s.src[rows].tolist(), s.t[rows].tolist())):
            pos = np.asarray(positives[(u, tt)], dtype=np.int64)
            hist = hist_dst[hist_ptr[u] : hist_ptr[u + 1]]
            own = hist[~np.isin(hist, pos)]
            n_hist = min(k // 2, own.size)
            picked = rng.choice(own, n_hist, replace=False) if n_hist < own.size else own
            excluded = np.union1d(hist, pos)
            n_rand = k - picked.size
            if pool.size - np.isin(pool, excluded).sum() <= n_rand:
                rand = np.setdiff1d(pool, excluded)
            else:
                rand = np.zeros(0, dtype=np.int64)
                while rand.size < n_rand:
                    draw = pool[rng.integers(0, pool.size, size=2 * (n_rand - rand.size) + 8)]
                    rand = np.concatenate([rand, draw[~np.isin(draw, excluded)]])
                    _, first = np.unique(rand, return_index=True)
                    rand = rand[np.sort(first)]
                rand = rand[:n_rand]
            row = np.concatenate([picked, rand])
            neg[i, : row.size], mask[i, : row.size] = row, True
        width = max(int(mask.sum(1).max()), 1) if len(rows) else 1
        return neg[:, :width], mask[:, :width]

    def _dyglib_negatives(
        self, rows: np.ndarray, code: int, unique_src: np.ndarray, first: np.ndarray, inverse: np.ndarray
    ) -> dict[str, np.ndarray]:
        """DyGLib's random / historical / inductive AP negatives (one edge per positive), per eval batch.

        ``random`` keeps the source and draws a destination uniformly. ``historical``: distinct edges with time <= the
        batch start minus edges of the batch's time span ``[start, end]``; ``inductive``: the same minus edges
        observed by the end of training. Both are topped up with uniform random edges that are not positives of the
        batch (DyGLib's collision check). Seeds: ``(seed, 1|2, strategy)``.
        """
        s = self.stream
        n_nodes = self._num_nodes
        order = np.argsort(first, kind="stable")  # unique pairs by first occurrence (= first time)
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        event_pos = position[inverse]
        pair_key = (s.src * n_nodes + s.dst)[first[order]]
        first_t = s.t[first[order]]
        n_observed = int(np.searchsorted(first_t, s.t[s.split == 0].max(), side="right"))
        dst_pool = self.all_destinations
        rngs = [np.random.default_rng([self.seed, code, j]) for j in (1, 2, 3)]
        out = {k: np.zeros(len(rows), dtype=np.int64) for k in _AP_KEYS}
        for b0 in range(0, len(rows), self.eval_batch_size):
            batch = rows[b0 : b0 + self.eval_batch_size]
            size = batch.size
            sl = slice(b0, b0 + size)
            out["ap_random_src"][sl] = s.src[batch]
            out["ap_random_dst"][sl] = dst_pool[rngs[0].integers(0, dst_pool.size, size=size)]
            t0, t1 = s.t[batch[0]], s.t[batch[-1]]
            lo, hi = np.searchsorted(s.t, t0, side="left"), np.searchsorted(s.t, t1, side="right")
            current = np.unique(event_pos[lo:hi])
            n_hist = int(np.searchsorted(first_t, t0, side="right"))
            batch_keys = np.unique(s.src[batch] * n_nodes + s.dst[batch])
            for strategy, start, rng in (("historical", 0, rngs[1]), ("inductive", n_observed, rngs[2])):
                picked = pair_key[_sample_range(start, n_hist, current, size, rng)]
                if picked.size < size:
                    extra = self._random_edges(size - picked.size, unique_src, batch_keys, rng)
                    picked = np.concatenate([extra, picked])
                out[f"ap_{strategy}_src"][sl] = picked // n_nodes
                out[f"ap_{strategy}_dst"][sl] = picked % n_nodes
        return out

    def _random_edges(
        self, size: int, unique_src: np.ndarray, forbidden: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """``size`` distinct uniform (src, dst) pair keys over unique sources x destinations, avoiding ``forbidden``."""
        dst_pool = self.all_destinations
        capacity = unique_src.size * dst_pool.size - forbidden.size
        keys = np.zeros(0, dtype=np.int64)
        while keys.size < min(size, capacity):
            m = 2 * (size - keys.size) + 8
            draw = (
                unique_src[rng.integers(0, unique_src.size, m)] * self._num_nodes
                + dst_pool[rng.integers(0, dst_pool.size, m)]
            )
            keys = np.concatenate([keys, draw[~np.isin(draw, forbidden)]])
            _, first = np.unique(keys, return_index=True)
            keys = keys[np.sort(first)]
        keys = keys[:size]
        if keys.size < size:  # tiny graphs: repeat rather than leave positives without a negative
            keys = np.resize(keys, size) if keys.size else np.resize(forbidden, size)
        return keys

    # ---------------------------------------------------------------------------------------------------------
    # public helpers
    # ---------------------------------------------------------------------------------------------------------

    def _require_setup(self) -> TemporalStream:
        """The stream, or an error telling the caller to run setup()."""
        if self.stream is None:
            raise RuntimeError("TemporalLinkDataModule: call setup() first (the trainer does it before fit/test)")
        return self.stream

    def eids(self, split: SplitName) -> np.ndarray:
        """Event ids of a split in chronological order (``train`` = training events, inductive masking applied).

        Args:
            split: ``train``, ``val`` or ``test``.

        Returns:
            int64 event ids (positions in the stream arrays).
        """
        self._require_setup()
        return self._eids[split]

    def query_index(self, split: SplitName) -> TemporalIndex:
        """History index for queries of a split (cached).

        Args:
            split: ``train`` -> training edges only (edges touching masked nodes removed); ``val``/``test`` -> the
                full stream (earlier val/test edges visible, still strictly before t).

        Returns:
            The :class:`TemporalIndex`.
        """
        s = self._require_setup()
        key = "train" if split == "train" else "full"
        if key not in self._indices:
            rows = self._eids["train"] if key == "train" else slice(None)
            self._indices[key] = TemporalIndex(s.src[rows], s.dst[rows], s.t[rows], s.num_nodes)
        return self._indices[key]

    def window_cache(self, split: SplitName, L: int) -> np.ndarray | None:
        """Precomputed source windows of a split's events, indexed by global event id (cached).

        Args:
            split: which split's events (and which graph, see :meth:`query_index`).
            L: window length.

        Returns:
            int32 (E, L) with the rows of that split's events filled (others 0), or ``None`` when E * L exceeds
            :data:`WINDOW_CACHE_ENTRIES` (then call ``query_index(split).window`` per batch).
        """
        s = self._require_setup()
        if len(s) * L > WINDOW_CACHE_ENTRIES or self._num_nodes >= 2**31:
            return None
        key = (split, L)
        if key not in self._window_caches:
            rows = self._eids[split]
            cache = np.zeros((len(s), L), dtype=np.int32)
            cache[rows] = self.query_index(split).window(s.src[rows], s.t[rows], L)
            self._window_caches[key] = cache
        return self._window_caches[key]

    @property
    def has_oracle(self) -> bool:
        """Whether :meth:`oracle_scores` is available (the embedded generator only)."""
        return self.path is None

    def oracle_scores(self, eid: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """Bayes-oracle probability of each candidate (the generator's exact predictive distribution; a ceiling).

        Args:
            eid: int (B,) event ids.
            cand: int (B, C) candidate destination ids.

        Returns:
            float64 (B, C).
        """
        if not self.has_oracle:
            raise RuntimeError(
                f"oracle_scores needs the embedded generator (--data.init_args.path=null); this datamodule reads "
                f"--data.init_args.path={self.path}"
            )
        self.setup()
        return self._oracle.scores(np.asarray(eid), np.asarray(cand))

    def train_negatives(self, eids: np.ndarray, epoch: int) -> np.ndarray:
        """One training negative per event, a deterministic function of (seed, epoch, event id).

        Uniform over the training destinations (``train_neg=train_dst``) or all destinations, drawn by a counter-based
        SplitMix64 hash; with ``collision_check`` a destination the source touches at exactly t is redrawn with the
        next counter (up to 64 rounds).

        Args:
            eids: int (B,) event ids.
            epoch: training epoch.

        Returns:
            int64 (B,) negative destination ids.
        """
        s = self._require_setup()
        eids = np.asarray(eids, dtype=np.int64)
        pool = self.train_destinations if self.train_neg == "train_dst" else self.all_destinations
        size = np.uint64(pool.size)
        neg = pool[(_event_hash(self.seed, epoch, eids, 0) % size).astype(np.int64)]
        if self.collision_check and eids.size:
            index = self.query_index("val")  # the full stream: never draw a true edge at t
            src, t = s.src[eids], s.t[eids]
            bad = np.flatnonzero(index.touches_at(src, t, neg))
            for counter in range(1, _MAX_COLLISION_ROUNDS):
                if not bad.size:
                    break
                neg[bad] = pool[(_event_hash(self.seed, epoch, eids[bad], counter) % size).astype(np.int64)]
                bad = bad[index.touches_at(src[bad], t[bad], neg[bad])]
        return neg

    # ---------------------------------------------------------------------------------------------------------
    # loaders
    # ---------------------------------------------------------------------------------------------------------

    def _epoch(self) -> int:
        """The trainer's current epoch (0 without a trainer)."""
        trainer = getattr(self, "trainer", None)
        return int(getattr(trainer, "current_epoch", 0) or 0) if trainer is not None else 0

    def _collate_train(self, positions: list[int]) -> dict[str, torch.Tensor]:
        """Training batch from row positions into the training events."""
        s = self.stream
        eids = self._eids["train"][np.asarray(positions, dtype=np.int64)]
        return {
            "eid": torch.from_numpy(eids),
            "src": torch.from_numpy(s.src[eids]),
            "dst": torch.from_numpy(s.dst[eids]),
            "t": torch.from_numpy(s.t[eids]),
            "neg": torch.from_numpy(self.train_negatives(eids, self._epoch())),
            "msg": torch.from_numpy(s.msg[eids]),
        }

    def _collate_eval(self, split: str, positions: list[int]) -> dict[str, torch.Tensor]:
        """Evaluation batch from row positions into a split."""
        s = self.stream
        pos = np.asarray(positions, dtype=np.int64)
        eids = self._eids[split][pos]
        batch = {
            "eid": torch.from_numpy(eids),
            "src": torch.from_numpy(s.src[eids]),
            "dst": torch.from_numpy(s.dst[eids]),
            "t": torch.from_numpy(s.t[eids]),
            "msg": torch.from_numpy(s.msg[eids]),
            "neg": torch.from_numpy(s.eval_neg[split][pos]),
            "neg_mask": torch.from_numpy(s.eval_neg_mask[split][pos]),
            "seen": torch.from_numpy(s.seen[eids]),
        }
        batch.update({k: torch.from_numpy(v[pos]) for k, v in self._ap[split].items()})
        return batch

    def _loader(self, split: SplitName) -> DataLoader:
        """DataLoader over a split's rows (training: shuffled iff ``shuffle``)."""
        self.setup()
        train = split == "train"
        collate = self._collate_train if train else _EvalCollate(self, split)
        rows = _Rows(len(self._eids[split]))
        return DataLoader(
            rows,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=self._train_sampler(len(rows), self.seed, self.batch_size) if train and self.shuffle else None,
            collate_fn=collate,
            num_workers=self.num_workers,
            pin_memory=False,
        )


_AP_KEYS = tuple(f"ap_{k}_{e}" for k in ("random", "historical", "inductive") for e in ("src", "dst"))


class _EvalCollate:
    """Picklable collate function bound to one evaluation split."""

    def __init__(self, dm: TemporalLinkDataModule, split: str) -> None:
        self.dm, self.split = dm, split

    def __call__(self, positions: list[int]) -> dict[str, torch.Tensor]:
        return self.dm._collate_eval(self.split, positions)
