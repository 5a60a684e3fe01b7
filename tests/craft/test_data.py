"""Temporal link data: causal lookup, training graph, loaders, negatives and the seen/unseen generator.

Card items 1, 2, 3, 15 (second half) and 16, plus generator checks. Fixture files are written under ``tmp_path``.
"""

from __future__ import annotations

import pickle
import re
import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.temporal_graph.datamodule import TemporalLinkDataModule
from datamodules.temporal_graph.index import TemporalIndex, redraw_excluded, sample_without_replacement
from datamodules.temporal_graph.raw import TemporalFormatError
from datamodules.temporal_graph.readers import read_temporal
from datamodules.temporal_graph.synthetic import seen_unseen_stream

torch.set_num_threads(1)  # 2-core machines: no thread oversubscription

SMALL = {"n_users": 60, "n_items": 120, "n_events": 3000}
JODIE_HEADER = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features"


# ------------------------------------------------------------------------------------------------------------------
# reference implementation (slow, obviously right)
# ------------------------------------------------------------------------------------------------------------------


def reference_history(src, dst, t, q, tq, L):
    """Per query: entries of q strictly before tq, ordered by (time, event, role); last L, last time, count."""
    windows, last, count = [], [], []
    for node, time in zip(q.tolist(), tq.tolist()):
        entries = []
        for e in range(len(t)):
            if t[e] < time:
                if src[e] == node:
                    entries.append((t[e], e, 0, dst[e]))
                if dst[e] == node:
                    entries.append((t[e], e, 1, src[e]))
        entries.sort()
        recent = [n for *_, n in entries[-L:]]
        windows.append(recent + [0] * (L - len(recent)))
        last.append(entries[-1][0] if entries else np.nan)
        count.append(len(entries))
    return np.array(windows, dtype=np.int64).reshape(len(q), L), np.array(last, dtype=np.float64), np.array(count)


# ------------------------------------------------------------------------------------------------------------------
# 1. causality
# ------------------------------------------------------------------------------------------------------------------


def test_edge_at_exactly_t_is_excluded() -> None:
    """Catches `<= t`: an interaction at exactly the query time (the positive itself) must not be visible."""
    src = np.array([1, 1, 4, 1])
    dst = np.array([2, 3, 1, 5])
    t = np.array([1.0, 2.0, 5.0, 5.0])
    index = TemporalIndex(src, dst, t, num_nodes=6)
    np.testing.assert_array_equal(index.window(np.array([1]), np.array([5.0]), 4), [[2, 3, 0, 0]])
    np.testing.assert_array_equal(index.window(np.array([1]), np.array([5.0 + 1e-9]), 4), [[2, 3, 4, 5]])
    np.testing.assert_array_equal(index.window(np.array([1]), np.array([5.1]), 3), [[3, 4, 5]])  # newest last
    np.testing.assert_array_equal(index.window(np.array([3]), np.array([2.0]), 2), [[0, 0]])  # dst role, at t
    np.testing.assert_array_equal(index.window(np.array([3]), np.array([2.5]), 2), [[1, 0]])
    assert index.last_time(np.array([1]), np.array([5.0]))[0] == 2.0
    assert np.isnan(index.last_time(np.array([5]), np.array([5.0]))[0])
    assert index.last_time(np.array([5]), np.array([5.5]))[0] == 5.0  # destination role counts
    assert index.touches_at(np.array([1, 1, 1]), np.array([5.0, 5.0, 2.0]), np.array([4, 5, 2])).tolist() == [
        True,
        True,
        False,
    ]


def test_future_events_do_not_change_the_past() -> None:
    """Catches lookups that peek at events with time >= t_k (appended or edited future events)."""
    rng = np.random.default_rng(0)
    n = 300
    src, dst = rng.integers(1, 20, n), rng.integers(1, 20, n)
    t = np.sort(rng.integers(0, 40, n)).astype(float)
    index = TemporalIndex(src, dst, t, 21)
    for k in range(0, n, 15):
        q, tq = np.array([src[k], dst[k]]), np.array([t[k], t[k]])
        before = t < t[k]
        m = int((~before).sum())
        # edit every event at time >= t_k and append more, some touching the query nodes at exactly t_k
        new_src = np.concatenate([src[before], rng.integers(1, 20, m), [src[k], 7]])
        new_dst = np.concatenate([dst[before], rng.integers(1, 20, m), [3, dst[k]]])
        new_t = np.concatenate([t[before], t[~before] + rng.integers(0, 3, m), [t[k], t[k]]])
        edited = TemporalIndex(new_src, new_dst, new_t, 21)
        np.testing.assert_array_equal(edited.window(q, tq, 6), index.window(q, tq, 6))
        np.testing.assert_array_equal(edited.last_time(q, tq), index.last_time(q, tq))


# ------------------------------------------------------------------------------------------------------------------
# 2. training graph under inductive masking
# ------------------------------------------------------------------------------------------------------------------


def test_training_graph_excludes_masked_nodes_and_eval_edges() -> None:
    """Catches a training graph that leaks val/test edges or edges of inductive-masked nodes."""
    dm = TemporalLinkDataModule(**SMALL, inductive_ratio=0.2, seed=1)
    dm.setup()
    s, masked = dm.stream, dm.masked_nodes
    assert masked.size > 0
    train = dm.eids("train")
    assert (s.split[train] == 0).all()
    assert not np.isin(s.src[train], masked).any() and not np.isin(s.dst[train], masked).any()
    assert len(train) < (s.split == 0).sum()  # masking removed training events
    index = dm.query_index("train")
    assert len(index) == 2 * len(train)
    nodes = np.arange(1, s.num_nodes)
    everything = index.window(nodes, np.full(nodes.shape, np.inf), 200)
    assert not np.isin(everything, masked).any()
    assert np.isnan(index.last_time(masked, np.full(masked.shape, np.inf))).all()
    assert np.nanmax(index.last_time(nodes, np.full(nodes.shape, np.inf))) <= s.t[s.split == 0].max()
    # training queries from every training event see only earlier unmasked training edges
    ref = TemporalIndex(s.src[train], s.dst[train], s.t[train], s.num_nodes)
    np.testing.assert_array_equal(index.window(s.src[train], s.t[train], 20), ref.window(s.src[train], s.t[train], 20))
    # the loader serves exactly the training events
    served = np.concatenate([b["eid"].numpy() for b in dm.train_dataloader()])
    np.testing.assert_array_equal(np.sort(served), train)
    # val/test queries use the full stream: a test query sees earlier test edges
    full, test = dm.query_index("test"), dm.eids("test")
    last = full.last_time(s.src[test], s.t[test])
    assert (last > s.t[dm.eids("val")].max()).any()


# ------------------------------------------------------------------------------------------------------------------
# 3. vectorised lookup = slow reference loop
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["tied", "unix"])
def test_vectorised_lookup_matches_reference(scale: str) -> None:
    """Catches float `node * BIG + t` keys (unix-scale times, 10^6 ids) and unstable tie handling."""
    rng = np.random.default_rng(2)
    n = 1500
    if scale == "tied":
        num_nodes, ids = 41, np.arange(1, 41)
        t = np.sort(rng.integers(0, 25, n)).astype(float)  # ~60 events per timestamp
    else:
        num_nodes, ids = 10**6 + 1, rng.choice(np.arange(1, 10**6 + 1), size=60, replace=False)
        t = 1.7e9 + np.sort(rng.integers(0, 600, n)) * 0.25
    src, dst = rng.choice(ids, n), rng.choice(ids, n)
    dst[:20] = src[:20]  # self-loops appear twice in the undirected history
    shuffled = rng.permutation(n)  # the index must stable-sort by time itself (ties keep the given order)
    src, dst, t = src[shuffled], dst[shuffled], t[shuffled]
    index = TemporalIndex(src, dst, t, num_nodes)
    q = rng.choice(ids, 120)
    tq = np.concatenate([rng.choice(t, 60), rng.choice(t, 60) + (0.125 if scale == "unix" else 0.5)])
    ref_window, ref_last, ref_count = reference_history(src, dst, t, q, tq, 7)
    np.testing.assert_array_equal(index.window(q, tq, 7), ref_window)
    np.testing.assert_array_equal(index.last_time(q, tq), ref_last)
    np.testing.assert_array_equal(index.count(q, tq), ref_count)
    # (B, C) candidates against a (B, 1) time column, as CRAFT's elapsed-time feature queries them
    cand = rng.choice(ids, (30, 5))
    expected = reference_history(src, dst, t, cand.ravel(), np.repeat(tq[:30], 5), 1)[1].reshape(30, 5)
    np.testing.assert_array_equal(index.last_time(cand, tq[:30, None]), expected)


# ------------------------------------------------------------------------------------------------------------------
# 15. statelessness of training inputs
# ------------------------------------------------------------------------------------------------------------------


def _per_event(dm: TemporalLinkDataModule) -> tuple[list[int], dict[int, tuple]]:
    order, rows = [], {}
    for batch in dm.train_dataloader():
        for i, e in enumerate(batch["eid"].tolist()):
            order.append(e)
            rows[e] = tuple(batch[k][i].numpy().tobytes() for k in ("src", "dst", "t", "neg", "msg"))
    return order, rows


def test_training_inputs_identical_shuffled_vs_chronological() -> None:
    """Catches training negatives drawn from a sequential RNG (they would depend on the batch order)."""
    shuffled = TemporalLinkDataModule(**SMALL, shuffle=True)
    chrono = TemporalLinkDataModule(**SMALL, shuffle=False)
    shuffled.setup()
    chrono.setup()
    per_epoch = []
    for epoch in (0, 1):
        shuffled.trainer = SimpleNamespace(current_epoch=epoch)
        chrono.trainer = SimpleNamespace(current_epoch=epoch)
        order_a, rows_a = _per_event(shuffled)
        order_b, rows_b = _per_event(chrono)
        assert order_a != order_b and order_b == sorted(order_b)
        assert rows_a == rows_b
        per_epoch.append(chrono.train_negatives(chrono.eids("train"), epoch))
    assert (per_epoch[0] != per_epoch[1]).mean() > 0.9  # a fresh negative each epoch
    s, train = chrono.stream, chrono.eids("train")
    assert np.isin(per_epoch[0], chrono.train_destinations).all()
    assert not chrono.query_index("val").touches_at(s.src[train], s.t[train], per_epoch[0]).any()


# ------------------------------------------------------------------------------------------------------------------
# 16. loaders
# ------------------------------------------------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _jodie_rows(n: int, seed: int = 0, n_feat: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"u": rng.integers(0, 8, n), "i": rng.integers(0, 12, n)})
    frame["ts"] = np.sort(rng.integers(0, 5 * n, n)).astype(float) + 0.5
    frame["label"] = rng.integers(0, 2, n)
    for k in range(n_feat):
        frame[f"f{k}"] = rng.normal(size=n).round(4)
    return frame


def _jodie_text(frame: pd.DataFrame) -> str:
    return JODIE_HEADER + "\n" + frame.to_csv(header=False, index=False)


def test_jodie_three_rows(tmp_path: Path) -> None:
    """Catches reading the 5-name header as data/names, a wrong item offset, or t cast to int."""
    path = _write(tmp_path / "toy.csv", f"{JODIE_HEADER}\n0,0,0.5,0,0.1,0.2\n2,0,1.5,1,0.3,0.4\n0,3,2.25,0,0.5,0.6\n")
    raw = read_temporal(str(path))
    np.testing.assert_array_equal(raw.src, [1, 3, 1])
    np.testing.assert_array_equal(raw.dst, [0 + 2 + 2, 0 + 2 + 2, 3 + 2 + 2])  # item + max(user) + 2
    assert raw.t.dtype == np.float64 and raw.t.tolist() == [0.5, 1.5, 2.25]
    assert raw.msg.shape == (3, 2) and raw.msg.dtype == np.float32
    assert raw.label.tolist() == [0, 1, 0]


def test_dyglib_ml_csv_matches_its_jodie_source(tmp_path: Path) -> None:
    """Catches an off-by-one between the DyGLib `ml_` ids and the JODIE mapping, or a dropped index column."""
    frame = _jodie_rows(40)
    _write(tmp_path / "raw" / "toy.csv", _jodie_text(frame))
    # DyGLib's preprocess_data.py: reindex(bipartite) then ml_ csv with the pandas index, .npy with a zero row 0
    upper_u = frame.u.max() + 1
    ml = pd.DataFrame({"u": frame.u + 1, "i": frame.i + upper_u + 1, "ts": frame.ts, "label": frame.label})
    ml["idx"] = np.arange(1, len(frame) + 1)
    (tmp_path / "proc").mkdir()
    ml.to_csv(tmp_path / "proc" / "ml_toy.csv")
    feats = frame[["f0", "f1"]].to_numpy()
    np.save(tmp_path / "proc" / "ml_toy.npy", np.vstack([np.zeros((1, 2)), feats]))
    jodie = read_temporal(str(tmp_path / "raw"), "jodie", "toy")
    dyglib = read_temporal(str(tmp_path / "proc"), "auto", "toy")
    np.testing.assert_array_equal(dyglib.src, jodie.src)
    np.testing.assert_array_equal(dyglib.dst, jodie.dst)
    np.testing.assert_array_equal(dyglib.t, jodie.t)
    assert dyglib.msg.shape == (40, 172)  # zero-padded to DyGLib's 172
    np.testing.assert_allclose(dyglib.msg[:, :2], jodie.msg, rtol=1e-6)
    assert not dyglib.msg[:, 2:].any()


def _tgb_coin(root: Path, suffix: str = "", drop_key: bool = False) -> tuple[Path, list, dict]:
    """A tiny tgbl-coin folder: string ids, weights with zeros, pickled (src, dst, t) -> negatives (0-based)."""
    rng = np.random.default_rng(5)
    n = 60
    names = [f"0x{k:040x}" for k in rng.integers(0, 2**40, 25)]
    rows = [
        (1000 + 3 * e, names[rng.integers(25)], names[rng.integers(25)], float(rng.integers(0, 4))) for e in range(n)
    ]
    folder = root / "tgbl_coin"
    lines = ["ts,src,dst,weight"] + [f"{ts},{s},{d},{w}" for ts, s, d, w in rows]
    _write(folder / "tgbl-coin_edgelist_v2.csv", "\n".join(lines) + "\n")
    ids: dict[str, int] = {}  # TGB: one shared space, ids by first appearance (src before dst)
    for _, s, d, _ in rows:
        ids.setdefault(s, len(ids))
        ids.setdefault(d, len(ids))
    ts = np.array([r[0] for r in rows], dtype=float)
    q_val, q_test = np.quantile(ts, [0.7, 0.85])
    tables: dict[str, dict] = {}
    for split, sel in (("val", (ts > q_val) & (ts <= q_test)), ("test", ts > q_test)):
        table = {}
        for e in np.flatnonzero(sel):
            count = 3 if e % 2 else 2  # variable counts -> padding + mask
            table[(ids[rows[e][1]], ids[rows[e][2]], int(rows[e][0]))] = rng.integers(0, len(ids), count)
        if drop_key and split == "test":
            table.pop(next(iter(table)))
        tables[split] = table
        with open(folder / f"tgbl-coin_{split}_ns{suffix}.pkl", "wb") as handle:
            pickle.dump(table, handle)
    return folder, rows, {"ids": ids, **tables}


def test_tgb_string_ids_and_pickled_negatives(tmp_path: Path) -> None:
    """Catches ids not mapped by first appearance, a missing +1 on TGB's 0-based negatives, or w=0 -> log2(0)."""
    folder, rows, info = _tgb_coin(tmp_path)
    dm = TemporalLinkDataModule(path=str(tmp_path), format="tgb", name="tgbl-coin", eval_batch_size=4)
    dm.setup()
    s, ids = dm.stream, info["ids"]
    np.testing.assert_array_equal(s.src, [ids[r[1]] + 1 for r in rows])
    np.testing.assert_array_equal(s.dst, [ids[r[2]] + 1 for r in rows])
    np.testing.assert_allclose(s.msg[:, 0], np.log2([r[3] if r[3] else 1.0 for r in rows]))
    for split in ("val", "test"):
        eids = dm.eids(split)
        neg, mask = s.eval_neg[split], s.eval_neg_mask[split]
        assert neg.shape == (len(eids), 3) and len(info[split]) == len(eids)
        for row, e in enumerate(eids):
            expected = info[split][(int(s.src[e]) - 1, int(s.dst[e]) - 1, int(s.t[e]))] + 1
            np.testing.assert_array_equal(neg[row][mask[row]], expected)
            assert not neg[row][~mask[row]].any()
    batch = next(iter(dm.test_dataloader()))
    assert batch["neg"].shape == (4, 3) and batch["neg_mask"].dtype == torch.bool


def test_tgb_wiki_jodie_layout_and_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches tgbl-wiki keys off by one (TGB items are item + max(user) + 1, 0-based) and a cache that re-parses."""
    frame = _jodie_rows(40, n_feat=3)
    frame["ts"] = np.floor(frame.ts)  # TGB keys negatives by integer t (tgbl-wiki's times are whole seconds)
    folder = tmp_path / "tgbl_wiki"
    _write(folder / "tgbl-wiki_edgelist_v2.csv", _jodie_text(frame))
    q_val, q_test = np.quantile(frame.ts, [0.7, 0.85])
    for split, sel in (("val", (frame.ts > q_val) & (frame.ts <= q_test)), ("test", frame.ts > q_test)):
        rows = frame[sel]
        table = {(u, i + frame.u.max() + 1, int(ts)): np.array([1, 2]) for u, i, ts in zip(rows.u, rows.i, rows.ts)}
        with open(folder / f"tgbl-wiki_{split}_ns_v2.pkl", "wb") as handle:
            pickle.dump(table, handle)
    first = read_temporal(str(tmp_path), "tgb", "tgbl-wiki", cache_dir=str(tmp_path / "cache"))
    assert first.msg.shape == (40, 3) and first.eval_neg["test"].tolist()[0] == [2, 3]
    monkeypatch.setattr("datamodules.temporal_graph.readers.read_tgb", lambda *a, **k: pytest.fail("cache not used"))
    cached = read_temporal(str(tmp_path), "tgb", "tgbl-wiki", cache_dir=str(tmp_path / "cache"))
    for key in ("src", "dst", "t", "msg", "split"):
        np.testing.assert_array_equal(getattr(cached, key), getattr(first, key))
    np.testing.assert_array_equal(cached.eval_neg["val"], first.eval_neg["val"])


def test_tgbseq_csv_and_test_negatives(tmp_path: Path) -> None:
    """Catches a missing +1 shift, negative rows not aligned to split==2 events, or the split not used as given."""
    rng = np.random.default_rng(7)
    n = 80
    frame = pd.DataFrame({"src": rng.integers(0, 30, n), "dst": rng.integers(30, 150, n), "time": np.arange(n) * 2})
    frame["split"] = np.where(np.arange(n) < 50, 0, np.where(np.arange(n) < 65, 1, 2))
    frame.loc[40, "split"] = 1  # as given, not recomputed
    frame.loc[0, "dst"] = 149
    frame.to_csv(tmp_path / "toyseq.csv", index=False)
    n_test = int((frame.split == 2).sum())
    negs = rng.integers(0, 150, (n_test, 100))
    np.save(tmp_path / "toyseq_test_ns.npy", negs)
    dm = TemporalLinkDataModule(path=str(tmp_path / "toyseq.csv"), num_eval_negatives=5)
    dm.setup()
    s = dm.stream
    np.testing.assert_array_equal(s.split, frame.split)
    np.testing.assert_array_equal(s.src, frame.src + 1)
    assert s.eval_neg["test"].shape == (n_test, 100)
    np.testing.assert_array_equal(s.eval_neg["test"], negs + 1)
    assert s.eval_neg["val"].shape == (int((frame.split == 1).sum()), 5)  # val: random, seed 1


def _malformed(tmp_path: Path, case: str) -> tuple[str, dict]:
    """Write one malformed fixture; returns (path, extra reader kwargs)."""
    good = _jodie_rows(12)
    text = _jodie_text(good)
    lines = text.splitlines()
    match case:
        case "field_count":
            lines[3] += ",9.9"
        case "non_numeric_id":
            lines[4] = "abc," + lines[4].split(",", 1)[1]
        case "non_numeric_time":
            parts = lines[5].split(",")
            parts[2] = "yesterday"
            lines[5] = ",".join(parts)
        case "decreasing_time":
            parts = lines[6].split(",")
            parts[2] = "-1.0"
            lines[6] = ",".join(parts)
        case "no_header":
            lines = lines[1:]
        case "dyglib_idx" | "dyglib_npy" | "dyglib_nan" | "dyglib_bool" | "dyglib_junk":
            ml = pd.DataFrame({"u": good.u + 1, "i": good.i + 10, "ts": good.ts, "label": good.label})
            ml["idx"] = np.arange(1, 13)
            if case == "dyglib_idx":
                ml.loc[5, "idx"] = 99
            ml.to_csv(tmp_path / "ml_bad.csv")
            feat = np.zeros((12 if case == "dyglib_npy" else 13, 4))
            feat[3, 2] = np.nan if case == "dyglib_nan" else 0.0
            np.save(tmp_path / "ml_bad.npy", feat.astype(bool) if case == "dyglib_bool" else feat)
            if case == "dyglib_junk":
                (tmp_path / "ml_bad.npy").write_bytes(b"junk")
            return str(tmp_path / "ml_bad.csv"), {}
        case "tgb_float_neg" | "tgb_junk_pkl" | "tgb_fraction_t":
            folder, _, info = _tgb_coin(tmp_path)
            pkl = folder / "tgbl-coin_test_ns.pkl"
            if case == "tgb_float_neg":
                pkl.write_bytes(pickle.dumps({k: v + 0.5 for k, v in info["test"].items()}))
            elif case == "tgb_junk_pkl":
                pkl.write_bytes(b"junk")
            else:
                csv = folder / "tgbl-coin_edgelist_v2.csv"
                rows = csv.read_text().splitlines()
                rows[-1] = rows[-1].replace(rows[-1].split(",")[0], rows[-1].split(",")[0] + ".5", 1)
                csv.write_text("\n".join(rows) + "\n")
            return str(folder / "tgbl-coin_edgelist_v2.csv"), {}
        case "tgb_mixed":
            folder, _, _ = _tgb_coin(tmp_path, suffix="_v2")
            (folder / "tgbl-coin_test_ns.pkl").write_bytes((folder / "tgbl-coin_test_ns_v2.pkl").read_bytes())
            return str(folder / "tgbl-coin_edgelist_v2.csv"), {}
        case "tgb_missing_key":
            folder, _, _ = _tgb_coin(tmp_path, drop_key=True)
            return str(folder / "tgbl-coin_edgelist_v2.csv"), {}
        case "tgbseq_rows" | "tgbseq_range" | "tgbseq_split" | "tgbseq_float" | "tgbseq_header":
            frame = pd.DataFrame({"src": np.arange(20) % 5, "dst": 5 + np.arange(20) % 7, "time": np.arange(20)})
            frame["split"] = [0] * 14 + [1] * 3 + [2] * 3
            if case == "tgbseq_split":
                frame.loc[7, "split"] = 3
            if case == "tgbseq_header":  # the columns in another order: read by position, src and dst would swap
                frame = frame[["dst", "src", "time", "split"]]
            frame.to_csv(tmp_path / "bad.csv", index=False)
            negs = np.ones((4 if case == "tgbseq_rows" else 3, 100), dtype=np.int64)
            if case == "tgbseq_range":
                negs[1, 7] = 12  # max id is 11
            np.save(tmp_path / "bad_test_ns.npy", negs + 0.5 if case == "tgbseq_float" else negs)
            return str(tmp_path / "bad.csv"), {"fmt": "tgbseq"} if case == "tgbseq_header" else {}
    return str(_write(tmp_path / "bad.csv", "\n".join(lines) + "\n")), {}


MALFORMED = {
    "field_count": "line 4",
    "non_numeric_id": "line 5",
    "non_numeric_time": "line 6",
    "decreasing_time": "line 7",
    "dyglib_idx": "line 7",
    "dyglib_npy": "E+1 = 13 rows",
    "tgb_mixed": "mix",
    "tgb_missing_key": "1 of",
    "tgbseq_rows": "3 rows",
    "tgbseq_range": "row 2, column 8",
    "tgbseq_split": "line 9",
    # issue #19: formerly silent changes
    "no_header": "line 1: expected the header (user_id,item_id,timestamp,state_label,features...), found a data row",
    "dyglib_nan": "ml_bad.npy: row 3, column 3: expected a finite feature, found",
    "dyglib_bool": "ml_bad.npy: expected real-valued features, found dtype bool",
    "dyglib_junk": "ml_bad.npy: not a readable .npy edge-feature array",
    "tgb_float_neg": "expected integer node ids, found dtype float64",
    "tgb_junk_pkl": "tgbl-coin_test_ns.pkl: not a readable pickle of TGB negatives",
    "tgb_fraction_t": "line 61: expected an integer timestamp",
    "tgbseq_float": "bad_test_ns.npy: expected integer node ids, found dtype float64",
    "tgbseq_header": "line 1: expected the header 'src,dst,time,split', found 'dst,src,time,split'",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_raises_temporal_format_error(tmp_path: Path, case: str) -> None:
    """Catches silently accepted malformed files; the message names the file and the line (or row).

    Issue #19's formerly silent cases: a file without its header line lost its first event (line 1 is skipped as the
    header); a TGB-Seq file with its columns in another order was read by position; NaN or bool edge features were
    kept or cast to 0/1; float negatives (TGB pickles, TGB-Seq ``_test_ns.npy``) were truncated to node ids; a
    fractional TGB timestamp was truncated to look up its negatives; a junk ``.npy``/``.pkl`` raised numpy's or
    pickle's own error (a traceback)."""
    path, kwargs = _malformed(tmp_path, case)
    with pytest.raises(TemporalFormatError, match=re.escape(MALFORMED[case])) as err:
        read_temporal(path, **kwargs)
    assert Path(path).parent.name in str(err.value)
    assert isinstance(err.value, ValueError)


def test_decreasing_time_is_sorted_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches `sort=True` silently ignored, or an unstable sort of the repaired stream; the sort is said."""
    path, _ = _malformed(tmp_path, "decreasing_time")
    raw = read_temporal(path, sort=True)
    assert "1 decreasing timestamp(s), first at line 7" in capsys.readouterr().err
    assert (np.diff(raw.t) >= 0).all() and raw.t[0] == -1.0


def test_missing_files_raise_without_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a loader that tries to download (any socket raises here) instead of naming the expected path."""

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    (tmp_path / "empty").mkdir()
    cases = [
        (str(tmp_path / "nope" / "wikipedia.csv"), "auto", None, "wikipedia.csv"),
        (str(tmp_path / "empty"), "jodie", "wikipedia", "wikipedia.csv"),
        (str(tmp_path / "empty"), "dyglib", "wikipedia", "ml_wikipedia.csv"),
        (str(tmp_path / "empty"), "tgb", "tgbl-wiki", "tgbl_wiki"),
        (str(tmp_path / "empty"), "tgbseq", "GoogleLocal", "GoogleLocal.csv"),
    ]
    for path, fmt, name, expected in cases:
        dm = TemporalLinkDataModule(path=path, format=fmt, name=name)
        with pytest.raises(FileNotFoundError, match="Downloads are disabled") as err:
            dm.setup()
        assert expected in str(err.value)


# ------------------------------------------------------------------------------------------------------------------
# datamodule: negatives, batches, validation
# ------------------------------------------------------------------------------------------------------------------


def test_eval_negatives_and_batches() -> None:
    """Catches repeated or positive-equal `rnd` negatives, non-fixed seeds, and wrong eval batch contents."""
    dm = TemporalLinkDataModule(**SMALL, num_eval_negatives=50, eval_batch_size=128)
    dm.setup()
    again = TemporalLinkDataModule(**SMALL, num_eval_negatives=50, eval_batch_size=128)
    again.setup()
    s = dm.stream
    for split in ("val", "test"):
        neg, eids = s.eval_neg[split], dm.eids(split)
        assert neg.shape == (len(eids), 50) and s.eval_neg_mask[split].all()
        ordered = np.sort(neg, axis=1)
        assert not (ordered[:, 1:] == ordered[:, :-1]).any()
        assert not (neg == s.dst[eids, None]).any()
        assert np.isin(neg, dm.all_destinations).all()
        np.testing.assert_array_equal(neg, again.stream.eval_neg[split])
    assert not np.array_equal(s.eval_neg["val"][:100], s.eval_neg["test"][:100])
    batches = list(dm.val_dataloader())
    assert [len(b["eid"]) for b in batches][:-1] == [128] * (len(batches) - 1)
    first = batches[0]
    np.testing.assert_array_equal(first["eid"].numpy(), dm.eids("val")[:128])
    np.testing.assert_array_equal(first["ap_random_src"].numpy(), first["src"].numpy())
    assert first["seen"].dtype == torch.bool and first["t"].dtype == torch.float64
    # historical AP negatives: edges seen before the batch and not in its time span (pool is large here)
    t0, t1 = s.t[dm.eids("val")[0]], s.t[dm.eids("val")[127]]
    pairs = set(zip(s.src[s.t <= t0].tolist(), s.dst[s.t <= t0].tolist()))
    span = set(zip(s.src[(s.t >= t0) & (s.t <= t1)].tolist(), s.dst[(s.t >= t0) & (s.t <= t1)].tolist()))
    hist = set(zip(first["ap_historical_src"].tolist(), first["ap_historical_dst"].tolist()))
    assert len(hist) == 128 and hist <= pairs - span
    # window cache = per-batch lookup
    cache = dm.window_cache("val", 10)
    eids = dm.eids("val")
    np.testing.assert_array_equal(cache[eids], dm.query_index("val").window(s.src[eids], s.t[eids], 10))


def test_hist_rnd_negatives() -> None:
    """Catches `hist_rnd` drawing historical negatives from outside the source's training destinations."""
    dm = TemporalLinkDataModule(**SMALL, eval_negatives="hist_rnd", num_eval_negatives=20)
    dm.setup()
    s, train = dm.stream, dm.eids("train")
    eids = dm.eids("test")[:200]
    neg = s.eval_neg["test"][:200]
    for row, e in enumerate(eids):
        hist = set(s.dst[train][s.src[train] == s.src[e]].tolist()) - {int(s.dst[e])}
        picked = neg[row][s.eval_neg_mask["test"][row]]
        assert len(set(picked.tolist())) == len(picked) and int(s.dst[e]) not in picked
        assert sum(v in hist for v in picked.tolist()) == min(10, len(hist))


def _tied_jodie(tmp_path: Path, seed: int = 0) -> str:
    """A JODIE file where users act on several of 12 items at the same integer time (many sources crowded at t)."""
    rng = np.random.default_rng(seed)
    n = 900
    frame = pd.DataFrame({"u": rng.integers(0, 15, n), "i": rng.integers(0, 12, n)})
    frame["ts"] = np.sort(rng.integers(0, 60, n)).astype(float)
    frame["label"], frame["f0"] = 0, 1.0
    return str(_write(tmp_path / "tied.csv", _jodie_text(frame)))


def _neighbours_at(s, e: int) -> set[int]:
    """Slow reference: every node the source of event e interacts with at exactly its time, either direction."""
    u, tt = s.src[e], s.t[e]
    same = s.t == tt
    return set(s.dst[same & (s.src == u)].tolist()) | set(s.src[same & (s.dst == u)].tolist())


def test_index_at_time_matches_reference() -> None:
    """Catches a neighbours-at-t lookup that misses the destination role, a tie, or leaks a neighbouring time."""
    rng = np.random.default_rng(4)
    src, dst = rng.integers(1, 9, 400), rng.integers(1, 9, 400)  # one shared id space: both roles matter
    t = np.sort(rng.integers(0, 40, 400)).astype(float)
    index = TemporalIndex(src, dst, t, num_nodes=9)
    q, tq = rng.integers(0, 9, 300), rng.integers(-1, 42, 300).astype(float) + rng.choice([0.0, 0.5], 300)
    offsets, ids = index.at_time(q, tq)
    for i, (u, tt) in enumerate(zip(q.tolist(), tq.tolist())):
        same = t == tt
        want = sorted(dst[same & (src == u)].tolist() + src[same & (dst == u)].tolist())
        assert sorted(ids[offsets[i] : offsets[i + 1]].tolist()) == want


def test_eval_negatives_avoid_the_sources_neighbours_at_t(tmp_path: Path) -> None:
    """Issue #21: as the public code on small DyGLib sets (``sample_with_time_collision_check``), no `rnd` negative
    and no random AP negative is a node the source interacts with at exactly t, and the AP negative never equals the
    positive. Catches the earlier draw (only the positive excluded; the AP negative unchecked), unseeded redraws and
    a per-row fallback that repeats or drops candidates it could keep."""
    path = _tied_jodie(tmp_path)
    dm = TemporalLinkDataModule(path=path, num_eval_negatives=5, eval_batch_size=64)
    dm.setup()
    s, pool = dm.stream, set(dm.all_destinations.tolist())
    crowded = 0
    for split in ("val", "test"):
        eids, neg, mask = dm.eids(split), s.eval_neg[split], s.eval_neg_mask[split]
        ap = dm._ap[split]["ap_random_dst"]
        for row, e in enumerate(eids.tolist()):
            near = _neighbours_at(s, e)
            crowded += len(near) > 1
            picked = neg[row][mask[row]].tolist()
            assert len(set(picked)) == len(picked) == min(5, len(pool - near))
            assert not near & set(picked), (split, row, near, picked)
            assert int(ap[row]) not in near and int(ap[row]) != s.dst[e]
    assert crowded > 50  # the file really crowds sources at t (else the test proves nothing)
    served = torch.cat([batch["ap_random_dst"] for batch in dm.val_dataloader()]).numpy()
    np.testing.assert_array_equal(served, dm._ap["val"]["ap_random_dst"])  # what the eval batches carry
    again = TemporalLinkDataModule(path=path, num_eval_negatives=5, eval_batch_size=64)
    again.setup()
    other_seed = TemporalLinkDataModule(path=path, num_eval_negatives=5, eval_batch_size=64, seed=1)
    other_seed.setup()
    for split in ("val", "test"):
        np.testing.assert_array_equal(s.eval_neg[split], again.stream.eval_neg[split])
        np.testing.assert_array_equal(dm._ap[split]["ap_random_dst"], again._ap[split]["ap_random_dst"])
        assert not np.array_equal(s.eval_neg[split], other_seed.stream.eval_neg[split])
    # The earlier draw stays available: only the positive is avoided, and the AP negative may hit it.
    old = TemporalLinkDataModule(path=path, num_eval_negatives=5, eval_batch_size=64, eval_collision_check=False)
    old.setup()
    eids = old.eids("val")
    near_hits = sum(
        bool(_neighbours_at(s, e) & set(old.stream.eval_neg["val"][r].tolist())) for r, e in enumerate(eids)
    )
    assert not (old.stream.eval_neg["val"] == s.dst[eids, None]).any() and near_hits > 10
    assert (old._ap["val"]["ap_random_dst"] == s.dst[eids]).sum() > 0


def test_eval_collision_check_keeps_uniform_negatives() -> None:
    """On a tie-free stream the check changes no `rnd` negative (uniform over destinations other than the
    positive, the same draw), and the random AP negative only where it hit the positive (redrawn by a generator of
    its own). Catches a collision check that biases or reshuffles the negatives of rows that did not collide."""
    on = TemporalLinkDataModule(**SMALL, num_eval_negatives=20)
    off = TemporalLinkDataModule(**SMALL, num_eval_negatives=20, eval_collision_check=False)
    on.setup(), off.setup()
    s = on.stream
    for split in ("val", "test"):
        np.testing.assert_array_equal(on.stream.eval_neg[split], off.stream.eval_neg[split])
        eids, ap_on, ap_off = on.eids(split), on._ap[split]["ap_random_dst"], off._ap[split]["ap_random_dst"]
        assert not (ap_on == s.dst[eids]).any()
        hit = ap_off == s.dst[eids]
        assert hit.sum() > 0  # 120 items, ~450 rows: the earlier draw hits the positive a few times
        np.testing.assert_array_equal(ap_on[~hit], ap_off[~hit])  # only the collided draws change


def test_flag_validation() -> None:
    """Catches invalid flags accepted silently; the error names the flag."""
    with pytest.raises(ValueError, match="--data.init_args.val_ratio"):
        TemporalLinkDataModule(val_ratio=0.6, test_ratio=0.5)
    with pytest.raises(ValueError, match="--data.init_args.num_eval_negatives"):
        TemporalLinkDataModule(num_eval_negatives=0)
    with pytest.raises(ValueError, match="--data.init_args.cluster_size"):
        TemporalLinkDataModule(n_items=1000, cluster_size=30)
    dm = TemporalLinkDataModule(path="/nonexistent.csv")
    with pytest.raises(RuntimeError, match="--data.init_args.path"):
        dm.oracle_scores(np.zeros(1, dtype=np.int64), np.zeros((1, 1), dtype=np.int64))


def test_file_decisions_over_the_config_are_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches config values the data overrode without a word (issue #19): TGB-Seq's split column over val_ratio and
    test_ratio, its shipped test negatives over num_eval_negatives/eval_negatives, and K capped by few destinations."""
    frame = pd.DataFrame({"src": np.arange(20) % 5, "dst": 5 + np.arange(20) % 7, "time": np.arange(20)})
    frame["split"] = [0] * 12 + [1] * 4 + [2] * 4  # the 70/15/15 time quantiles would give 14/3/3
    frame.to_csv(tmp_path / "seq.csv", index=False)
    np.save(tmp_path / "seq_test_ns.npy", np.ones((4, 100), dtype=np.int64))
    path = str(tmp_path / "seq.csv")
    dm = TemporalLinkDataModule(path=path, num_eval_negatives=5)
    dm.setup()
    err = capsys.readouterr().err
    assert "seq.csv: the split comes from the file (train/val/test = 12/4/4 events); --data.init_args.val_ratio" in err
    assert "seq.csv ships fixed test negatives (up to 100 per event); --data.init_args.eval_negatives=rnd, " in err
    assert "num_eval_negatives=5 do not apply to test" in err
    assert dm.stream.eval_neg["test"].shape == (4, 100) and dm.stream.eval_neg["val"].shape == (4, 5)
    TemporalLinkDataModule(path=path, num_eval_negatives=50).setup()
    err = capsys.readouterr().err
    assert "num_eval_negatives=50: " in err and "val queries get at most 6 negatives" in err
    (tmp_path / "seq_test_ns.npy").unlink()
    TemporalLinkDataModule(path=path, num_eval_negatives=5).setup()
    assert "seq_test_ns.npy: not found; test negatives are sampled by the datamodule" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"format": "csv"}, "--data.init_args.format='csv': expected one of 'auto', 'jodie', "),
     ({"format": "jodie"}, "--data.init_args.format='jodie': expected auto when path is null (the generator)"),
     ({"batch_size": 0}, "--data.init_args.batch_size=0: expected an integer >= 1"),
     ({"eval_batch_size": 2.5}, "--data.init_args.eval_batch_size=2.5: expected an integer >= 1"),
     ({"num_eval_negatives": 0}, "--data.init_args.num_eval_negatives=0: expected an integer >= 1"),
     ({"val_ratio": 1.5}, "--data.init_args.val_ratio=1.5: expected a number in (0, 1)"),
     ({"val_ratio": 0.6, "test_ratio": 0.5}, "--data.init_args.val_ratio=0.6: expected val_ratio + test_ratio=0.5 < 1"),
     ({"inductive_ratio": 1.0}, "--data.init_args.inductive_ratio=1.0: expected a number in [0, 1)"),
     ({"seed": -1}, "--data.init_args.seed=-1: expected an integer >= 0"),
     ({"num_workers": -1}, "--data.init_args.num_workers=-1: expected an integer >= 0"),
     ({"eval_negatives": "hist"}, "--data.init_args.eval_negatives='hist': expected one of 'rnd', 'hist_rnd'"),
     ({"train_neg": "all"}, "--data.init_args.train_neg='all': expected one of 'train_dst', 'all_dst'"),
     ({"eval_collision_check": "yes"}, "--data.init_args.eval_collision_check='yes': expected true or false"),
     ({"collision_check": 1}, "--data.init_args.collision_check=1: expected true or false"),
     ({"seen_def": "pairs"}, "--data.init_args.seen_def='pairs': expected one of 'stream', 'trainval'"),
     ({"mode": "chain"}, "--data.init_args.mode='chain': expected one of 'cluster', 'succ'"),
     ({"p_repeat": 1.5}, "--data.init_args.p_repeat=1.5: expected a number in [0, 1]"),
     ({"p_repeat": 1.5, "path": "x.csv"}, "--data.init_args.p_repeat=1.5: expected a number in [0, 1]"),
     ({"n_users": -5}, "--data.init_args.n_users=-5: expected an integer >= 1"),
     ({"n_events": 5}, "--data.init_args.n_events=5: expected an integer >= 10"),
     ({"branching": 0}, "--data.init_args.branching=0: expected an integer in [1, 1000]"),
     ({"recency": 0.0}, "--data.init_args.recency=0.0: expected a number in (0, 1]"),
     ({"cluster_size": 30}, "--data.init_args.cluster_size=30: expected a divisor of n_items=1000"),
     ({"zipf": -1.0}, "--data.init_args.zipf=-1.0: expected a finite number >= 0")],
)  # fmt: skip
def test_values_checked_at_construction(kwargs: dict, message: str) -> None:
    """Each value is checked in __init__ naming its flag (issue #19), the generator's even with a path (a typo there
    no longer passes silently); nothing is read or generated first."""
    with pytest.raises(ValueError, match=re.escape(message)):
        TemporalLinkDataModule(**kwargs)


def test_redraw_excluded_is_uniform_over_allowed_subsets() -> None:
    """Catches a biased collision redraw (e.g. shifting a hit to the next free id, or keeping repeats): after it,
    every 3-subset of the 8 allowed ids of a 10-id pool is equally likely and no row holds an excluded id."""
    rng = np.random.default_rng(0)
    n = 60000
    draw = sample_without_replacement(rng, n, 10, 3, exclude=np.full(n, 2))
    rows = np.arange(n)
    excluded = np.sort(np.concatenate([rows * 10 + 2, rows * 10 + 5]))
    redraw_excluded(rng, draw, rows, excluded, 10)
    assert not np.isin(draw, [2, 5]).any() and (np.diff(np.sort(draw, axis=1), axis=1) > 0).all()
    subsets = np.unique(np.sort(draw, axis=1), axis=0, return_counts=True)[1] / n
    assert len(subsets) == 56 and np.allclose(subsets, 1 / 56, atol=0.004)


def test_sample_without_replacement_is_uniform() -> None:
    """Catches a biased distinct-sampling shortcut (e.g. keeping the smallest draws)."""
    rng = np.random.default_rng(0)
    draw = sample_without_replacement(rng, 60000, 8, 3, exclude=np.full(60000, 2))
    freq = np.bincount(draw.ravel(), minlength=8) / draw.size
    assert freq[2] == 0 and np.allclose(np.delete(freq, 2), 1 / 7, atol=0.005)


# ------------------------------------------------------------------------------------------------------------------
# generator
# ------------------------------------------------------------------------------------------------------------------


def test_generator_is_seeded(tmp_path: Path) -> None:
    """Catches hidden global randomness: same seed -> same stream, other seed -> other stream."""
    a, c = (seen_unseen_stream(**SMALL, seed=s) for s in (3, 4))
    b = seen_unseen_stream(**SMALL, seed=3, cache_dir=str(tmp_path))  # written to disk and read back
    assert a.jodie_csv == b.jodie_csv and a.jodie_csv != c.jodie_csv
    assert (tmp_path / "seen_unseen_cluster_seed3_3000.csv").read_bytes() == a.jodie_csv
    np.testing.assert_array_equal(a.raw.dst, b.raw.dst)
    np.testing.assert_array_equal(a.oracle.struct, b.oracle.struct)


@pytest.mark.parametrize(("mode", "p_repeat", "band"), [("cluster", 0.1, (0.45, 0.67)), ("succ", 0.8, (0.75, 0.87))])
def test_generator_seen_fraction_and_oracle(mode: str, p_repeat: float, band: tuple[float, float]) -> None:
    """Catches a generator off the card's measured seen fractions (0.56 / 0.81) or an oracle that is no ceiling."""
    dm = TemporalLinkDataModule(mode=mode, p_repeat=p_repeat)
    dm.setup()
    s = dm.stream
    assert band[0] <= s.stats["seen_frac_test"] <= band[1]
    assert 0.0 < s.stats["surprise"] < 1.0
    generated = seen_unseen_stream(mode=mode, p_repeat=p_repeat)
    np.testing.assert_array_equal(generated.is_seen, s.seen)  # the generator's own seen flag = stream definition
    assert generated.repeat_ratio == pytest.approx(s.stats["repeat_ratio"])
    eids = dm.eids("test")
    cand = np.concatenate([s.dst[eids, None], s.eval_neg["test"]], axis=1)
    scores = dm.oracle_scores(eids, cand)
    assert scores.shape == cand.shape and scores.dtype == np.float64
    assert (scores[:, 0] > 0).all()
    items = np.arange(generated.oracle.item_lo, generated.oracle.item_lo + 1000)
    total = dm.oracle_scores(eids[:50], np.broadcast_to(items, (50, 1000))).sum(1)
    np.testing.assert_allclose(total, 1.0, atol=1e-9)  # an exact predictive distribution over items
    rank = 1 + 0.5 * ((scores[:, 1:] > scores[:, :1]).sum(1) + (scores[:, 1:] >= scores[:, :1]).sum(1))
    assert (1 / rank).mean() > 0.3  # far above the all-tie floor 2/(K+2)
