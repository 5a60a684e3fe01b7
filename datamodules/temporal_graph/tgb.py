"""Readers for the TGB ``tgbl-*`` and TGB-Seq layouts, with their fixed evaluation negatives."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd

from datamodules.temporal_graph.jodie import _jodie_arrays
from datamodules.temporal_graph.raw import (
    RawTemporal,
    TemporalFormatError,
    _numeric,
    _order,
    _permute,
    _read_table,
    load_npy,
    missing_file,
    time_quantile_split,
)
from zoo.core.messages import say

#: TGB normalises ``num_words`` of tgbl-comment by this constant.
_TGB_COMMENT_MAX_WORDS = 5000
_SPLITS = ("val", "test")


# --------------------------------------------------------------------------------------------------------------
# TGB
# --------------------------------------------------------------------------------------------------------------


def _first_appearance_ids(src: pd.Series, dst: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """TGB's string-ID mapping: one shared space, ids by first appearance row by row (src before dst), +1."""
    both = np.column_stack([src.to_numpy(dtype=object), dst.to_numpy(dtype=object)]).ravel()
    codes, _ = pd.factorize(both)
    codes = codes.astype(np.int64).reshape(-1, 2) + 1
    return codes[:, 0].copy(), codes[:, 1].copy()


def _tgb_edgelist(path: Path, name: str, sort: bool) -> tuple[RawTemporal, np.ndarray]:
    """Parse a TGB edge list; returns the stream and each event's 1-based file line (for key errors)."""
    display = str(path)
    data = path.read_bytes()
    if "wiki" in name:
        src, dst, t, label, msg = _jodie_arrays(data, display)
    else:
        comment = "comment" in name
        want = 5 if comment else 4
        layout = "ts,src,dst,num_words,score" if comment else "ts,src,dst,weight"
        tab = _read_table(data, display, header_lines=1, str_cols=(1, 2), layout=layout)
        n_cols = tab.frame.shape[1]
        if n_cols != want:
            raise TemporalFormatError(f"{display}: line 2: expected {want} fields ({layout}), found {n_cols}")
        t = _numeric(tab, 0, "timestamp")
        src, dst = _first_appearance_ids(tab.frame.iloc[:, 1], tab.frame.iloc[:, 2])
        label = np.zeros(len(t), dtype=np.int64)
        if comment:
            # best effort [unverified]: TGB's parser reads num_words (normalised by 5000) and score.
            words = _numeric(tab, 3, "num_words")
            score = _numeric(tab, 4, "score")
            msg = np.column_stack([words / _TGB_COMMENT_MAX_WORDS, score]).astype(np.float32)
        else:
            w = _numeric(tab, 3, "weight", minimum=0.0)
            msg = np.log2(np.where(w == 0, 1.0, w))[:, None].astype(np.float32)  # TGB: w=0 -> 1, then log2
    lines = np.arange(2, len(t) + 2, dtype=np.int64)
    raw = RawTemporal(name=name, source=display, src=src, dst=dst, t=t, msg=msg, label=label)
    perm = _order(t, display, 2, sort)
    raw = _permute(raw, perm)
    return raw, (lines if perm is None else lines[perm])


def tgb_negative_files(folder: Path, name: str) -> dict[str, Path]:
    """Locate TGB's ``<name>_{val,test}_ns[_v2].pkl`` files; refuse a mix of ``_v2`` and unsuffixed files (TGB #108).

    Args:
        folder: the dataset folder (holding the edge list).
        name: the TGB dataset name (``tgbl-wiki``).

    Returns:
        ``{"val": path, "test": path}`` for the splits that have a file.
    """
    found: dict[str, dict[str, Path]] = {}
    for split in _SPLITS:
        for suffix in ("_v2", ""):
            candidate = folder / f"{name}_{split}_ns{suffix}.pkl"
            if candidate.is_file():
                found.setdefault(suffix or "unsuffixed", {})[split] = candidate
    if len(found) > 1:
        names = sorted(p.name for group in found.values() for p in group.values())
        raise TemporalFormatError(
            f"{folder}: expected negative files of one version (all `_v2` or all unsuffixed), found a mix: {names} "
            "(TGB #108: negatives of another dataset version do not match its edges)"
        )
    return next(iter(found.values()), {})


def _tgb_negatives(
    pkl: Path, raw: RawTemporal, rows: np.ndarray, lines: np.ndarray, split: str
) -> tuple[np.ndarray, np.ndarray]:
    """Look up each event of a split in TGB's pickled ``{(src, dst, t): negatives}`` (0-based ids) and shift +1."""
    try:
        with pkl.open("rb") as handle:
            table, problem = pickle.load(handle), ""  # the user's own TGB file; pickle is TGB's format
    except Exception as exc:  # a truncated or foreign file: name it
        table, problem = None, f"{type(exc).__name__}: {exc}"
    if problem:
        raise TemporalFormatError(f"{pkl}: not a readable pickle of TGB negatives ({problem})")
    if not isinstance(table, dict):
        raise TemporalFormatError(f"{pkl}: expected a pickled dict (src, dst, t) -> ndarray, found {type(table)}")
    t = raw.t[rows]
    fraction = np.flatnonzero(t != np.floor(t))
    if fraction.size:  # TGB keys negatives by integer timestamps: a truncated t could find another event's row
        i = int(fraction[0])
        raise TemporalFormatError(
            f"{raw.source}: line {lines[rows[i]]}: expected an integer timestamp (TGB keys its negatives by (src, dst, "
            f"int t)), found {t[i].item()!r}"
        )
    keys = list(zip((raw.src[rows] - 1).tolist(), (raw.dst[rows] - 1).tolist(), t.astype(np.int64).tolist()))
    values = [table.get(k) for k in keys]
    missing = [i for i, v in enumerate(values) if v is None]
    if missing:
        i = missing[0]
        raise TemporalFormatError(
            f"{pkl}: expected negatives for every {split} event, found {len(missing)} of {len(keys)} keys missing; "
            f"first missing key (src, dst, t) = {keys[i]} (TGB 0-based ids) from {raw.source} line {lines[rows[i]]}"
        )
    arrays = [np.asarray(v).ravel() for v in values]
    wrong = next((i for i, a in enumerate(arrays) if a.size and a.dtype.kind not in "iu"), None)
    if wrong is not None:  # int64 casting would truncate 3.7 to node 3
        raise TemporalFormatError(
            f"{pkl}: key {keys[wrong]}: expected integer node ids, found dtype {arrays[wrong].dtype} "
            f"({arrays[wrong][:3].tolist()} ...)"
        )
    arrays = [a.astype(np.int64) for a in arrays]
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    k_max = max(int(lengths.max()), 1)
    flat = np.concatenate(arrays) + 1 if arrays else np.zeros(0, dtype=np.int64)
    num_nodes = int(max(raw.src.max(), raw.dst.max())) + 1
    out = np.flatnonzero((flat < 1) | (flat >= num_nodes))
    if out.size:
        row = int(np.searchsorted(np.cumsum(lengths), out[0], side="right"))
        raise TemporalFormatError(
            f"{pkl}: key {keys[row]}: expected negative ids in the node-ID range [0, {num_nodes - 2}] (0-based), "
            f"found {int(flat[out[0]]) - 1}"
        )
    neg = np.zeros((len(arrays), k_max), dtype=np.int64)
    mask = np.arange(k_max)[None, :] < lengths[:, None]
    neg[mask] = flat
    return neg, mask


def read_tgb(
    path: str | Path, *, name: str, sort: bool = False, val_ratio: float = 0.15, test_ratio: float = 0.15
) -> RawTemporal:
    """Read a TGB link-prediction dataset folder's edge list and its fixed evaluation negatives.

    ``tgbl-wiki`` uses the JODIE layout; ``tgbl-review``/``tgbl-coin`` are ``ts,src,dst,weight`` with string IDs
    mapped by first appearance into one shared space and feature ``log2(w)`` (w=0 -> 1); ``tgbl-comment``
    (``ts,src,dst,num_words,score``) is best effort. The split is TGB's own time-quantile split; negatives come from
    ``<name>_{val,test}_ns[_v2].pkl`` (0-based keys and values, shifted +1), padded to the largest count with a mask.

    Args:
        path: the ``<name>_edgelist[_v2].csv`` file.
        name: TGB dataset name, e.g. ``tgbl-wiki``.
        sort: stable-sort decreasing timestamps instead of raising.
        val_ratio: validation share of TGB's time-quantile split.
        test_ratio: test share.

    Returns:
        The stream with ``split`` and the shipped ``eval_neg`` of every split that has a pickle.
    """
    path = Path(path)
    if not path.is_file():
        raise missing_file(path, "TGB edge list")
    raw, lines = _tgb_edgelist(path, name, sort)
    raw.split = time_quantile_split(raw.t, val_ratio, test_ratio)
    files = tgb_negative_files(path.parent, name)
    for code, split in enumerate(_SPLITS, start=1):
        if split not in files:
            say(
                f"{path.parent}: no {name}_{split}_ns[_v2].pkl; {split} negatives are sampled by the datamodule "
                "instead of TGB's fixed ones"
            )
            continue
        rows = np.flatnonzero(raw.split == code)
        raw.eval_neg[split], raw.eval_neg_mask[split] = _tgb_negatives(files[split], raw, rows, lines, split)
    return raw


# --------------------------------------------------------------------------------------------------------------
# TGB-Seq
# --------------------------------------------------------------------------------------------------------------


def read_tgbseq(path: str | Path, *, name: str | None = None, sort: bool = False) -> RawTemporal:
    """Read TGB-Seq's ``<name>.csv`` (``src,dst,time,split``) and ``<name>_test_ns.npy`` ((n_test, 100) int64).

    The ID base is not recorded, so events and negatives get the same +1 shift; the split column is used as given.
    Validation negatives are not shipped: the datamodule samples them (100 random, seed 1).

    Args:
        path: the ``<name>.csv`` file.
        name: dataset name (default: the file stem).
        sort: stable-sort decreasing timestamps instead of raising (negative rows follow their events).

    Returns:
        The stream with ``split`` and, when the file exists, the shipped test negatives.
    """
    path = Path(path)
    if not path.is_file():
        raise missing_file(path, "TGB-Seq csv")
    display = str(path)
    tab = _read_table(path.read_bytes(), display, header_lines=1, layout="src,dst,time,split")
    if tab.frame.shape[1] != 4:
        raise TemporalFormatError(
            f"{display}: line 2: expected 4 fields (src,dst,time,split), found {tab.frame.shape[1]}"
        )
    if [h.replace(" ", "").lower() for h in tab.header] != ["src", "dst", "time", "split"]:  # columns by name
        raise TemporalFormatError(
            f"{display}: line 1: expected the header 'src,dst,time,split', found {','.join(tab.header)!r}"
        )
    src = _numeric(tab, 0, "src", integer=True, minimum=0)
    dst = _numeric(tab, 1, "dst", integer=True, minimum=0)
    t = _numeric(tab, 2, "time")
    split = _numeric(tab, 3, "split", integer=True)
    bad = np.flatnonzero((split < 0) | (split > 2))
    if bad.size:
        i = int(bad[0])
        raise TemporalFormatError(f"{display}: line {i + 2}: expected split in {{0, 1, 2}}, found {split[i]}")
    split = split.astype(np.int8)
    file_rank = np.cumsum(split == 2) - 1  # row of each test event in _test_ns.npy (file order)
    n = len(src)
    raw = RawTemporal(
        name=name or path.stem,
        source=display,
        src=src + 1,
        dst=dst + 1,
        t=t,
        msg=np.ones((n, 1), dtype=np.float32),
        label=np.zeros(n, dtype=np.int64),
        split=split,
    )
    perm = _order(t, display, 2, sort)
    raw = _permute(raw, perm)
    if perm is not None:
        file_rank = file_rank[perm]
    ns_path = path.with_name(f"{path.stem}_test_ns.npy")
    if not ns_path.is_file():
        say(f"{ns_path}: not found; test negatives are sampled by the datamodule")
        return raw
    neg = load_npy(ns_path)
    if neg.size and neg.dtype.kind not in "iu":  # int64 casting would truncate 3.7 to node 3
        raise TemporalFormatError(f"{ns_path}: expected integer node ids, found dtype {neg.dtype}")
    n_test = int((split == 2).sum())
    if neg.ndim != 2 or neg.shape[0] != n_test:
        raise TemporalFormatError(
            f"{ns_path}: expected a 2-d array with one row per split==2 event of {display} ({n_test} rows), "
            f"found shape {neg.shape}"
        )
    max_id = int(max(src.max(), dst.max()))
    out = np.argwhere((neg < 0) | (neg > max_id))
    if out.size:
        row, col = (int(x) for x in out[0])
        raise TemporalFormatError(
            f"{ns_path}: row {row + 1}, column {col + 1}: expected a node id in [0, {max_id}] (the ids of "
            f"{display}), found {int(neg[row, col])}"
        )
    neg = neg.astype(np.int64)[file_rank[raw.split == 2]] + 1
    raw.eval_neg["test"] = neg
    raw.eval_neg_mask["test"] = np.ones(neg.shape, dtype=bool)
    return raw
