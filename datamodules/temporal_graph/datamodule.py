"""Temporal link prediction data: one stream, causal history lookup, fixed evaluation negatives, loaders.

``TemporalLinkDataModule`` serves every temporal link model of the zoo (CRAFT, EdgeBank, TGN, ...) from one
:class:`TemporalStream`, so one run gives one comparable table. ``path=None`` generates the seeded seen/unseen stream
(:mod:`datamodules.temporal_graph.synthetic`, written in the JODIE layout and read back by the real reader); ``path=``
reads JODIE, DyGLib ``ml_``, TGB or TGB-Seq files offline (:mod:`datamodules.temporal_graph.readers`). Nothing
downloads.

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

from typing import Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.temporal_graph.index import (
    _MAX_COLLISION_ROUNDS,
    WINDOW_CACHE_ENTRIES,
    TemporalIndex,
    _event_hash,
    _sample_range,
    redraw_excluded,
    sample_without_replacement,
)
from datamodules.temporal_graph.raw import RawTemporal, time_quantile_split
from datamodules.temporal_graph.readers import read_temporal
from datamodules.temporal_graph.stream import TemporalStream
from datamodules.temporal_graph.synthetic import BayesOracle, seen_unseen_stream, validate_generator_args
from zoo.core import checks
from zoo.core.datamodule import SplitLoaders, ZooDataModule
from zoo.core.messages import say

SplitName = Literal["train", "val", "test"]
_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}


class _Rows(Dataset):
    """Dataset of row positions; the collate function gathers whole batches vectorised."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


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
        num_eval_negatives: K, evaluation negatives per positive for ``rnd``/``hist_rnd``, capped at the destinations
            available (said); shipped TGB/TGB-Seq negatives keep their own count (said when it differs).
        eval_negatives: ``rnd`` (K distinct uniform destinations, not the positive) or ``hist_rnd`` (TGB: up to half
            from the source's training destinations).
        train_neg: training negatives uniform over ``train_dst`` (unique training destinations, official) or
            ``all_dst``.
        collision_check: resample a training negative that the source touches at exactly t.
        eval_collision_check: evaluation negatives as the public code draws them on the small DyGLib sets
            (``sample_with_time_collision_check``): ``rnd`` negatives and the random AP negative avoid every node the
            source interacts with at exactly t (the positive included). ``False`` keeps the zoo's earlier draw:
            ``rnd`` avoids only the positive and the random AP negative is unchecked (it can equal the positive).
        val_ratio: validation share of the chronological time-quantile split (a file's own split, TGB-Seq's column,
            takes precedence, which is said).
        test_ratio: test share.
        inductive_ratio: fraction of the nodes of val/test masked out of the training graph and events.
        shuffle: shuffle training batches (memory models such as TGN refuse ``True``).
        sort: stable-sort files with decreasing timestamps (said on stderr) instead of raising.
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
        eval_collision_check: bool = True,
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
        checks.choice(checks.data("format"), format, ("auto", "jodie", "dyglib", "tgb", "tgbseq"))
        if path is None and format != "auto":
            raise ValueError(f"--data.init_args.format={format!r}: expected auto when path is null (the generator)")
        checks.choice(checks.data("eval_negatives"), eval_negatives, ("rnd", "hist_rnd"))
        checks.choice(checks.data("train_neg"), train_neg, ("train_dst", "all_dst"))
        checks.choice(checks.data("seen_def"), seen_def, ("stream", "trainval"))
        for key, flag in (("collision_check", collision_check), ("eval_collision_check", eval_collision_check)):
            if not isinstance(flag, bool):
                checks.fail(checks.data(key), flag, "true or false")
        checks.probability(checks.data("val_ratio"), val_ratio, open_low=True, open_high=True)
        checks.probability(checks.data("test_ratio"), test_ratio, open_low=True, open_high=True)
        if val_ratio + test_ratio >= 1.0:
            raise ValueError(
                f"--data.init_args.val_ratio={val_ratio!r}: expected val_ratio + test_ratio={test_ratio} "
                "< 1 (training needs a share)"
            )
        checks.probability(checks.data("inductive_ratio"), inductive_ratio, open_high=True)
        checks.integer(checks.data("num_eval_negatives"), num_eval_negatives)
        checks.integer(checks.data("batch_size"), batch_size)
        checks.integer(checks.data("eval_batch_size"), eval_batch_size)
        checks.integer(checks.data("seed"), seed, low=0)
        checks.integer(checks.data("num_workers"), num_workers, low=0)
        # The generator's options are checked even with a path (where they do not apply): a typo still fails.
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
        self.eval_collision_check = eval_collision_check
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
        split = time_quantile_split(t, self.val_ratio, self.test_ratio)
        if raw.split is not None and not np.array_equal(raw.split, split):  # the file fixes the split (TGB-Seq)
            counts = np.bincount(raw.split, minlength=3)
            say(
                f"{raw.source}: the split comes from the file (train/val/test = {counts[0]}/{counts[1]}/{counts[2]} "
                f"events); --data.init_args.val_ratio={self.val_ratio}, test_ratio={self.test_ratio} do not apply"
            )
        split = raw.split if raw.split is not None else split
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
                if self.eval_negatives != "rnd" or self.num_eval_negatives != neg.shape[1]:
                    say(
                        f"{raw.source} ships fixed {name} negatives (up to {neg.shape[1]} per event); "
                        f"--data.init_args.eval_negatives={self.eval_negatives}, num_eval_negatives="
                        f"{self.num_eval_negatives} do not apply to {name}"
                    )
            elif self.eval_negatives == "rnd":
                neg, mask = self._rnd_negatives(rows, np.random.default_rng([self.seed, code]))
            else:
                neg, mask = self._hist_rnd_negatives(rows, np.random.default_rng([self.seed, code]))
            if name not in raw.eval_neg and neg.shape[1] < self.num_eval_negatives:  # too few destinations: capped
                say(
                    f"--data.init_args.num_eval_negatives={self.num_eval_negatives}: {raw.source} has too few "
                    f"destinations; {name} queries get at most {neg.shape[1]} negatives"
                )
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

    def _neighbours_at_t(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(offsets, ids)`` of every node the source of each row interacts with at exactly its time.

        Over the full stream, in either direction, as the public code's ``full_neighbor_sampler`` answers
        ``find_neighbors_at_time`` (luyi256/CRAFT ``utils/utils.py``); the positive is always among them.
        """
        s = self.stream
        return self.query_index("val").at_time(s.src[rows], s.t[rows])

    def _rnd_negatives(self, rows: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``rnd``: K distinct destinations per positive, uniform without replacement.

        With ``eval_collision_check`` (default) they avoid every node the source interacts with at exactly t, as the
        public code's ``NegativeEdgeSampler.sample_with_time_collision_check`` (luyi256/CRAFT ``utils/utils.py``,
        called from ``evaluate_models_utils.py`` on the small DyGLib sets): rows whose only such node is the positive
        keep the vectorised draw; in the others, entries that hit such a node are redrawn (rejection rounds,
        uniform over the destinations left), or, where fewer than 2K destinations are left, the row is drawn exactly
        from them (fewer than K when too few are left: masked, and said). Without it only the positive is avoided.
        """
        pool = self.all_destinations
        positive = np.searchsorted(pool, self.stream.dst[rows])
        draw = sample_without_replacement(rng, len(rows), len(pool), self.num_eval_negatives, exclude=positive)
        neg, mask = pool[draw], np.ones(draw.shape, dtype=bool)
        if not self.eval_collision_check or not len(rows):
            return neg, mask
        offsets, ids = self._neighbours_at_t(rows)
        width = np.diff(offsets)
        row_of = np.repeat(np.arange(len(rows)), width)
        crowded = np.unique(row_of[ids != np.repeat(self.stream.dst[rows], width)])
        if not crowded.size:
            return neg, mask
        # the crowded rows' excluded pool positions, as sorted keys row * |pool| + position
        at = np.isin(row_of, crowded)
        position = np.minimum(np.searchsorted(pool, ids[at]), len(pool) - 1)
        member = pool[position] == ids[at]
        keys = np.unique(row_of[at][member] * len(pool) + position[member])
        n_excluded = np.bincount(keys // len(pool), minlength=len(rows))[crowded]
        k = neg.shape[1]
        roomy, tight = crowded[len(pool) - n_excluded >= 2 * k], crowded[len(pool) - n_excluded < 2 * k]
        sub = draw[roomy]
        redraw_excluded(rng, sub, roomy, keys, len(pool))
        neg[roomy] = pool[sub]
        short = 0
        for i in tight.tolist():  # few destinations left: an exact draw from them (fewer than K if need be)
            allowed = np.setdiff1d(pool, ids[offsets[i] : offsets[i + 1]])
            picked = rng.choice(allowed, size=min(k, allowed.size), replace=False)
            neg[i], mask[i] = 0, False
            neg[i, : picked.size], mask[i, : picked.size] = picked, True
            short += picked.size < k
        if short:
            say(
                f"--data.init_args.eval_collision_check=true: {short} evaluation queries get fewer than "
                f"{neg.shape[1]} negatives (their source interacts with too many destinations at the same time)"
            )
        return neg, mask

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

        ``random`` keeps the source and draws a destination uniformly; with ``eval_collision_check`` (default) a draw
        the source interacts with at exactly t (the positive included) is redrawn uniformly from the destinations
        left (by a generator of its own, so the two settings differ only where a draw collided), as the public
        code's ``sample_with_time_collision_check(num_negs=1, ...)`` (luyi256/CRAFT ``evaluate_models_utils.py``,
        ``evaluate_model_link_prediction``) on the small DyGLib sets.
        ``historical``: distinct edges with time <= the batch start minus edges of the batch's time span
        ``[start, end]``; ``inductive``: the same minus edges observed by the end of training. Both are topped up
        with uniform random edges that are not positives of the batch (DyGLib's collision check). Seeds:
        ``(seed, 1|2, strategy)``.
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
        if self.eval_collision_check:  # redraws use their own generator: every other row keeps its negative
            full, (offsets, ids) = self.query_index("val"), self._neighbours_at_t(rows)
            redraw = np.random.default_rng([self.seed, code, 1, 1])
        for b0 in range(0, len(rows), self.eval_batch_size):
            batch = rows[b0 : b0 + self.eval_batch_size]
            size = batch.size
            sl = slice(b0, b0 + size)
            out["ap_random_src"][sl] = s.src[batch]
            neg = dst_pool[rngs[0].integers(0, dst_pool.size, size=size)]
            if self.eval_collision_check:  # a draw that collides is redrawn from the destinations left (uniform)
                for i in np.flatnonzero(full.touches_at(s.src[batch], s.t[batch], neg)).tolist():
                    allowed = np.setdiff1d(dst_pool, ids[offsets[b0 + i] : offsets[b0 + i + 1]])
                    if allowed.size:  # else the source touches every destination at t: nothing to avoid it with
                        neg[i] = allowed[redraw.integers(0, allowed.size)]
            out["ap_random_dst"][sl] = neg
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
