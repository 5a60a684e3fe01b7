"""Embedded seeded seen/unseen temporal stream (the CRAFT card's ``seen_unseen_stream``) with its Bayes oracle.

Users interact with items; each event either **repeats** one of the user's recent items (recency-weighted), picks a
**uniform** item, or follows a hidden **structure** (``cluster``: unseen members of the user's home community;
``succ``: unseen successors of the user's last structured item). ``p_repeat`` sets how much of the stream is seen
(recurring pairs) vs unseen (novel pairs). The rows are written in the JODIE layout and parsed back by the real JODIE
reader, so the default data path exercises the on-disk loader. The oracle knows the hidden state and returns the
exact predictive probability of every candidate: a ceiling for any model.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Literal

import numpy as np

from datamodules.temporal_graph.jodie import parse_jodie, read_jodie
from datamodules.temporal_graph.raw import RawTemporal, time_quantile_split
from zoo.core import checks

#: JODIE header: 5 names whatever the feature count.
JODIE_HEADER = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features"


@dataclass
class BayesOracle:
    """Per-event hidden state of the generator, enough to score any candidate exactly.

    ``score(c) = p * sum_{window slots holding c} w + (1-p)(1-eps) * 1[c in S] / |S| + (1-p) * eps / n_items`` where
    ``p = p_repeat`` if the user has history (else 0), ``w`` the normalised recency weights of the last
    ``repeat_window`` history entries and ``S`` the structured set at that event.

    Attributes:
        p: float64 (E,) repeat probability of each event.
        window: int64 (E, W) destination ids of the repeat window (oldest first, 0 = padding).
        weight: float64 (E, W) normalised recency weights (0 on padding).
        struct: int64 (E, S) destination ids of the structured set (0 = padding).
        struct_size: int64 (E,) size of the structured set.
        eps: uniform-item probability of a non-repeat event.
        n_items: number of items.
        item_lo: destination id of item 0 (items occupy ``item_lo .. item_lo + n_items - 1``).
    """

    p: np.ndarray
    window: np.ndarray
    weight: np.ndarray
    struct: np.ndarray
    struct_size: np.ndarray
    eps: float
    n_items: int
    item_lo: int

    def scores(self, eid: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """Exact predictive probability of each candidate destination, vectorised.

        Args:
            eid: int (B,) event ids (0-based positions in the stream).
            cand: int (B, C) candidate destination ids (1-based stream ids).

        Returns:
            float64 (B, C); each row sums to 1 over all items.
        """
        eid = np.asarray(eid, dtype=np.int64)
        cand = np.asarray(cand, dtype=np.int64)
        p = self.p[eid][:, None]
        repeat = ((cand[:, :, None] == self.window[eid][:, None, :]) * self.weight[eid][:, None, :]).sum(-1)
        struct = self.struct[eid]
        in_set = ((cand[:, :, None] == struct[:, None, :]) & (struct[:, None, :] > 0)).any(-1)
        structured = in_set / self.struct_size[eid][:, None]
        is_item = (cand >= self.item_lo) & (cand < self.item_lo + self.n_items)
        uniform = is_item * (self.eps / self.n_items)
        return p * repeat + (1.0 - p) * ((1.0 - self.eps) * structured + uniform)


@dataclass
class SeenUnseenStream:
    """The generated stream as parsed by the JODIE reader, plus the generator's own bookkeeping.

    Attributes:
        raw: the stream exactly as the JODIE reader returns it.
        jodie_csv: the JODIE-layout bytes that were parsed.
        is_seen: bool (E,) the user had interacted with the item before this event.
        repeat_ratio: mean of ``is_seen``.
        surprise: distinct test pairs absent from train+val, over the number of test events.
        oracle: the Bayes oracle.
    """

    raw: RawTemporal
    jodie_csv: bytes
    is_seen: np.ndarray
    repeat_ratio: float
    surprise: float
    oracle: BayesOracle


def validate_generator_args(
    *,
    mode: str,
    p_repeat: float,
    n_users: int,
    n_items: int,
    n_events: int,
    branching: int,
    eps: float,
    repeat_window: int,
    recency: float,
    cluster_size: int,
    p_switch: float,
    zipf: float,
) -> None:
    """Validate the generator's arguments; each error names its ``--data.init_args`` flag.

    Args:
        mode: ``cluster`` or ``succ``.
        p_repeat: repeat probability.
        n_users: number of users.
        n_items: number of items.
        n_events: number of events.
        branching: successors per item.
        eps: uniform-item probability.
        repeat_window: repeat window length.
        recency: recency decay of repeat weights.
        cluster_size: community size.
        p_switch: per-event community switch probability.
        zipf: user-activity exponent.
    """
    checks.choice(checks.data("mode"), mode, ("cluster", "succ"))
    checks.probability(checks.data("p_repeat"), p_repeat)
    checks.integer(checks.data("n_users"), n_users)
    checks.integer(checks.data("n_items"), n_items, low=2)
    checks.integer(checks.data("n_events"), n_events, low=10)
    checks.integer(checks.data("branching"), branching, high=n_items)
    checks.probability(checks.data("eps"), eps)
    checks.integer(checks.data("repeat_window"), repeat_window)
    checks.probability(checks.data("recency"), recency, open_low=True)
    checks.integer(checks.data("cluster_size"), cluster_size, high=n_items)
    if n_items % cluster_size:
        expected = f"a divisor of n_items={n_items} (communities are blocks of exactly cluster_size items)"
        checks.fail(checks.data("cluster_size"), cluster_size, expected)
    checks.probability(checks.data("p_switch"), p_switch)
    checks.non_negative(checks.data("zipf"), zipf)


def seen_unseen_stream(
    *,
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
    val_ratio: float = 0.15,
    test_ratio: float = 0.15,
    cache_dir: str | None = None,
) -> SeenUnseenStream:
    """Generate the seeded seen/unseen stream (card "Embedded default", steps 1-4) with one ``default_rng(seed)``.

    Args:
        mode: hidden structure, ``cluster`` (communities) or ``succ`` (successor table).
        p_repeat: probability that a user with history repeats a recent item.
        n_users: number of users.
        n_items: number of items.
        n_events: number of events.
        branching: distinct successors per item (``succ``).
        eps: probability of a uniform item on a non-repeat event.
        repeat_window: number of most recent history entries a repeat draws from (duplicates kept).
        recency: repeat weight ``recency ** age`` (age 0 = newest).
        cluster_size: items per community (``cluster``).
        p_switch: per-event probability that a user moves to a uniform community (``cluster``).
        zipf: user activity proportional to ``rank ** -zipf``.
        seed: the single seed of the generator.
        val_ratio: validation share of the time-quantile split (for ``surprise``).
        test_ratio: test share.
        cache_dir: when given, the JODIE csv is written there and read back from the file.

    Returns:
        The parsed stream, per-event ``is_seen``, repeat ratio, surprise and the Bayes oracle.
    """
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
    rng = np.random.default_rng(seed)
    # 1. hidden structure
    communities = rng.permutation(n_items).reshape(-1, cluster_size).tolist()
    n_comm = len(communities)
    successors = [sorted(rng.choice(n_items, size=branching, replace=False).tolist()) for _ in range(n_items)]
    # 2. users, times and per-user state
    activity = np.arange(1, n_users + 1, dtype=np.float64) ** -zipf
    users = rng.choice(n_users, size=n_events, p=activity / activity.sum()).tolist()
    t = np.cumsum(rng.exponential(1.0, size=n_events))
    last = rng.integers(n_items, size=n_users).tolist()
    home = rng.integers(n_comm, size=n_users).tolist()
    uniforms = rng.random((n_events, 5)).tolist()  # switch, new home, repeat, eps, pick
    history: list[list[int]] = [[] for _ in range(n_users)]
    seen: list[set[int]] = [set() for _ in range(n_users)]
    # normalised recency weights and their cumulative sums, per window length (oldest first)
    weight_table = [[]] + [
        [w / sum(recency**a for a in range(n)) for w in (recency ** (n - 1 - j) for j in range(n))]
        for n in range(1, repeat_window + 1)
    ]
    cum_table = [list(accumulate(ws)) for ws in weight_table]
    s_max = cluster_size if mode == "cluster" else branching
    p_event = np.zeros(n_events)
    win = np.full((n_events, repeat_window), -1, dtype=np.int64)
    win_w = np.zeros((n_events, repeat_window))
    struct = np.full((n_events, s_max), -1, dtype=np.int64)
    struct_size = np.zeros(n_events, dtype=np.int64)
    items = np.zeros(n_events, dtype=np.int64)
    is_seen = np.zeros(n_events, dtype=bool)
    cluster = mode == "cluster"
    # 3. events
    for e, u in enumerate(users):
        r_switch, r_home, r_repeat, r_eps, r_pick = uniforms[e]
        if cluster and r_switch < p_switch:
            home[u] = min(int(r_home * n_comm), n_comm - 1)
        hist, seen_u = history[u], seen[u]
        pool = communities[home[u]] if cluster else successors[last[u]]
        structured = [c for c in pool if c not in seen_u] or pool
        struct[e, : len(structured)] = structured
        struct_size[e] = len(structured)
        window = hist[-repeat_window:]
        if window:
            p_event[e] = p_repeat
            win[e, : len(window)] = window
            win_w[e, : len(window)] = weight_table[len(window)]
        if window and r_repeat < p_repeat:
            cum = cum_table[len(window)]
            item = window[min(bisect_right(cum, r_pick * cum[-1]), len(window) - 1)]
        elif r_eps < eps:
            item = min(int(r_pick * n_items), n_items - 1)
        else:
            item = structured[min(int(r_pick * len(structured)), len(structured) - 1)]
            if not cluster:
                last[u] = item
        items[e] = item
        is_seen[e] = item in seen_u
        hist.append(item)
        seen_u.add(item)
    # 4. JODIE layout, parsed back by the real reader
    user_arr = np.asarray(users, dtype=np.int64)
    body = "\n".join(f"{u},{i},{ts!r},0,1.0" for u, i, ts in zip(users, items.tolist(), t.tolist()))
    jodie_csv = f"{JODIE_HEADER}\n{body}\n".encode()
    name = f"seen_unseen_{mode}"
    if cache_dir is not None:
        target = Path(cache_dir).expanduser() / f"{name}_seed{seed}_{n_events}.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(jodie_csv)
        raw = read_jodie(target, name=name)
    else:
        raw = parse_jodie(jodie_csv, f"<seen_unseen_stream(mode={mode}, seed={seed})>", name=name)
    item_lo = int(user_arr.max()) + 2  # the JODIE mapping dst = item + max(user) + 2
    if not (np.array_equal(raw.src, user_arr + 1) and np.array_equal(raw.dst, items + item_lo)):
        raise RuntimeError("seen_unseen_stream: the JODIE round trip changed the ids (reader/generator mismatch)")
    to_dst = np.where(win >= 0, win + item_lo, 0), np.where(struct >= 0, struct + item_lo, 0)
    oracle = BayesOracle(
        p=p_event,
        window=to_dst[0],
        weight=win_w,
        struct=to_dst[1],
        struct_size=struct_size,
        eps=eps,
        n_items=n_items,
        item_lo=item_lo,
    )
    split = time_quantile_split(raw.t, val_ratio, test_ratio)
    keys = raw.src * (int(raw.dst.max()) + 1) + raw.dst
    test_pairs = np.unique(keys[split == 2])
    n_test = max(int((split == 2).sum()), 1)
    surprise = float((~np.isin(test_pairs, keys[split < 2])).sum() / n_test)
    return SeenUnseenStream(
        raw=raw,
        jodie_csv=jodie_csv,
        is_seen=is_seen,
        repeat_ratio=float(is_seen.mean()),
        surprise=surprise,
        oracle=oracle,
    )
