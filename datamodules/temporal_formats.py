"""Offline readers for temporal link-prediction data: JODIE, DyGLib ``ml_``, TGB ``tgbl-*`` and TGB-Seq layouts.

Every reader returns a :class:`RawTemporal` in the zoo's internal convention (``src``/``dst`` int64 **1-based**, 0 =
padding; ``t`` float64 in file order, stable-sorted only when ``sort=True``). Nothing here downloads: a missing file
raises :class:`FileNotFoundError` naming the expected path, and every malformed input raises
:class:`TemporalFormatError` naming the file, the 1-based line (or row), what was expected and what was found.

Parsing is vectorised (field counts from the raw bytes, pandas' C parser for the values), so the 4.9M-row
``tgbl-review`` edge list reads in seconds. See the CRAFT card, section "Data", for the layouts.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

#: Format names accepted by :func:`read_temporal`.
FormatName = Literal["auto", "jodie", "dyglib", "tgb", "tgbseq"]
#: DyGLib pads node and edge features to this width.
DYGLIB_FEAT_DIM = 172
#: TGB normalises ``num_words`` of tgbl-comment by this constant.
_TGB_COMMENT_MAX_WORDS = 5000
#: Bumped whenever the cached arrays change meaning.
_CACHE_VERSION = 1
_SPLITS = ("val", "test")


class TemporalFormatError(ValueError):
    """A temporal-graph file does not match its documented layout.

    The message names the file, the 1-based line (or array row), what was expected and what was found.
    """


@dataclass
class RawTemporal:
    """A parsed event stream in the zoo's internal ID convention, before splitting and negative sampling.

    Attributes:
        name: dataset name (``wikipedia``, ``tgbl-review``, ``seen_unseen_cluster`` ...).
        source: human-readable origin (file path(s)) for messages.
        src: int64 (E,) 1-based source ids.
        dst: int64 (E,) 1-based destination ids.
        t: float64 (E,) non-decreasing timestamps.
        msg: float32 (E, F) edge features, F >= 1 (a single 1.0 column when the format has none).
        label: int64 (E,) state labels (0 when the format has none).
        split: int8 (E,) 0/1/2 when the format fixes the split (TGB-Seq, TGB's own 70/15/15), else ``None``.
        eval_neg: shipped evaluation negatives per split name, (n_split, Kmax) int64, 0 = padding, rows in the event
            order of that split.
        eval_neg_mask: same shapes, True = valid negative.
        node_feat: optional (num_nodes, D) float32 node features (DyGLib ``_node.npy``).
    """

    name: str
    source: str
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    msg: np.ndarray
    label: np.ndarray
    split: np.ndarray | None = None
    eval_neg: dict[str, np.ndarray] = field(default_factory=dict)
    eval_neg_mask: dict[str, np.ndarray] = field(default_factory=dict)
    node_feat: np.ndarray | None = None


def missing_file(path: Path | str, what: str) -> FileNotFoundError:
    """Build the zoo's "missing file" error: names the expected path and says that downloads are disabled.

    Args:
        path: the expected file or folder.
        what: what was looked for (``"JODIE csv"``, ``"data path"``, ...).

    Returns:
        The error, to be raised by the caller.
    """
    return FileNotFoundError(
        f"{path}: {what} not found. Downloads are disabled (the zoo never downloads, TGB `download=True` and the "
        "TGB-Seq hub fetch are bypassed): place the file at this path or point --data.init_args.path at it"
    )


def time_quantile_split(t: np.ndarray, val_ratio: float, test_ratio: float) -> np.ndarray:
    """Chronological split by time quantiles (DyGLib / TGB ``generate_splits``); equal timestamps stay together.

    Args:
        t: float64 (E,) timestamps.
        val_ratio: fraction of the time quantiles given to validation.
        test_ratio: fraction given to test.

    Returns:
        int8 (E,): 0 for ``t <= q(1-val-test)``, 1 for ``t <= q(1-test)``, 2 above.
    """
    q_val, q_test = np.quantile(t, [1.0 - val_ratio - test_ratio, 1.0 - test_ratio])
    split = np.zeros(len(t), dtype=np.int8)
    split[t > q_val] = 1
    split[t > q_test] = 2
    return split


# --------------------------------------------------------------------------------------------------------------
# Vectorised CSV parsing with line-accurate errors
# --------------------------------------------------------------------------------------------------------------


@dataclass
class _Table:
    """A parsed CSV body with what is needed to name lines in errors."""

    frame: pd.DataFrame
    header: list[str]
    first_line: int  # 1-based line number of the first data row
    display: str


def _read_table(data: bytes, display: str, *, header_lines: int, str_cols: tuple[int, ...] = ()) -> _Table:
    """Check field counts line by line (vectorised over the raw bytes), then parse with pandas' C engine.

    Args:
        data: the file's bytes.
        display: file name used in error messages.
        header_lines: number of leading lines that are not data (0 or 1).
        str_cols: columns kept as strings (TGB string IDs).

    Returns:
        The parsed table.

    Raises:
        TemporalFormatError: no data row, or a line whose field count differs from the first data row's.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    data = data.rstrip(b"\n")  # trailing blank lines are not rows
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    n_lines = (len(newlines) + 1) if len(buf) else 0
    if n_lines <= header_lines:
        raise TemporalFormatError(
            f"{display}: expected {header_lines} header line(s) and at least one data row, found {n_lines} line(s)"
        )
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(buf)]))
    commas = np.flatnonzero(buf == 44)
    fields = np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1
    del commas
    header = data[: ends[header_lines - 1]].decode("utf-8", "replace").split(",") if header_lines else []
    body = fields[header_lines:]
    expected = int(body[0])
    bad = np.flatnonzero(body != expected)
    if bad.size:
        i = int(bad[0])
        raise TemporalFormatError(
            f"{display}: line {header_lines + i + 1}: expected {expected} comma-separated fields (as in the first "
            f"data row, line {header_lines + 1}), found {int(body[i])}"
        )
    frame = pd.read_csv(
        io.BytesIO(data),
        header=None,
        skiprows=header_lines,
        dtype={c: str for c in str_cols} if str_cols else None,
        keep_default_na=False,
        na_values=[],
        skip_blank_lines=False,
        engine="c",
        low_memory=False,
    )
    return _Table(frame=frame, header=[h.strip() for h in header], first_line=header_lines + 1, display=display)


def _numeric(tab: _Table, col: int, what: str, *, integer: bool = False, minimum: float | None = None) -> np.ndarray:
    """Column ``col`` of ``tab`` as a finite float64/int64 array, or a TemporalFormatError naming the first bad line.

    Args:
        tab: the parsed table.
        col: 0-based column index.
        what: column meaning for the message (``"timestamp"``, ``"user id"`` ...).
        integer: require integer values and return int64.
        minimum: smallest allowed value.

    Returns:
        The column values.
    """
    series = tab.frame.iloc[:, col]
    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        coerced = pd.to_numeric(series.astype(str), errors="coerce")
        values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
        if not np.isfinite(values).all():
            i = int(np.flatnonzero(~np.isfinite(values))[0])
            raise TemporalFormatError(
                f"{tab.display}: line {tab.first_line + i}: expected a number in column {col + 1} ({what}), "
                f"found {series.iloc[i]!r}"
            )
        series = coerced
    values = series.to_numpy(dtype=np.float64)
    if not np.isfinite(values).all():
        i = int(np.flatnonzero(~np.isfinite(values))[0])
        raise TemporalFormatError(
            f"{tab.display}: line {tab.first_line + i}: expected a finite number in column {col + 1} ({what}), "
            f"found {values[i]!r}"
        )
    if integer and pd.api.types.is_float_dtype(series):
        frac = np.flatnonzero(values != np.floor(values))
        if frac.size:
            i = int(frac[0])
            raise TemporalFormatError(
                f"{tab.display}: line {tab.first_line + i}: expected an integer in column {col + 1} ({what}), "
                f"found {values[i]!r}"
            )
    if minimum is not None and values.size and values.min() < minimum:
        i = int(np.flatnonzero(values < minimum)[0])
        raise TemporalFormatError(
            f"{tab.display}: line {tab.first_line + i}: expected {what} >= {minimum:g} in column {col + 1}, "
            f"found {values[i]!r}"
        )
    if integer:
        return series.to_numpy(dtype=np.int64)
    return values


def _features(tab: _Table, first_col: int, what: str) -> np.ndarray:
    """Columns ``first_col:`` as float32 (E, F); a single 1.0 column when there are none (feat0)."""
    n_rows, n_cols = tab.frame.shape
    if n_cols <= first_col:
        return np.ones((n_rows, 1), dtype=np.float32)
    block = tab.frame.iloc[:, first_col:]
    for k, dtype in enumerate(block.dtypes):
        if not pd.api.types.is_numeric_dtype(dtype):
            _numeric(tab, first_col + k, what)  # raises with the line
    msg = block.to_numpy(dtype=np.float32)
    if not np.isfinite(msg).all():
        row, k = (int(x[0]) for x in np.nonzero(~np.isfinite(msg)))
        raise TemporalFormatError(
            f"{tab.display}: line {tab.first_line + row}: expected a finite number in column "
            f"{first_col + k + 1} ({what}), found {msg[row, k]!r}"
        )
    return msg


def _order(t: np.ndarray, display: str, first_line: int, sort: bool) -> np.ndarray | None:
    """Check that timestamps never decrease; return a stable sort permutation when ``sort`` allows fixing them.

    Args:
        t: timestamps in file order.
        display: file name for messages.
        first_line: 1-based line of the first data row.
        sort: stable-sort (with a warning) instead of raising.

    Returns:
        ``None`` when already sorted, else the stable permutation.
    """
    drops = np.flatnonzero(t[1:] < t[:-1])
    if drops.size == 0:
        return None
    i = int(drops[0]) + 1
    where = f"line {first_line + i}: expected non-decreasing timestamps, found {t[i]!r} after {t[i - 1]!r}"
    if not sort:
        raise TemporalFormatError(
            f"{display}: {where} (pass --data.init_args.sort=true to stable-sort the events by time)"
        )
    warnings.warn(
        f"{display}: {drops.size} decreasing timestamp(s), first at {where}; stable-sorting events by time "
        "because sort=True",
        stacklevel=3,
    )
    return np.argsort(t, kind="stable")


def _permute(raw: RawTemporal, perm: np.ndarray | None) -> RawTemporal:
    """Apply an event permutation to every per-event array of ``raw`` (split included)."""
    if perm is None:
        return raw
    raw.src, raw.dst, raw.t, raw.msg, raw.label = (a[perm] for a in (raw.src, raw.dst, raw.t, raw.msg, raw.label))
    if raw.split is not None:
        raw.split = raw.split[perm]
    return raw


# --------------------------------------------------------------------------------------------------------------
# JODIE
# --------------------------------------------------------------------------------------------------------------


def _jodie_arrays(data: bytes, display: str) -> tuple[np.ndarray, ...]:
    """Parse JODIE bytes into (src, dst, t, label, msg) in file order (see :func:`parse_jodie`)."""
    tab = _read_table(data, display, header_lines=1)
    n_cols = tab.frame.shape[1]
    if n_cols < 4:
        raise TemporalFormatError(
            f"{display}: line 2: expected at least 4 fields (user,item,timestamp,state_label[,features]), "
            f"found {n_cols}"
        )
    user = _numeric(tab, 0, "user id", integer=True, minimum=0)
    item = _numeric(tab, 1, "item id", integer=True, minimum=0)
    t = _numeric(tab, 2, "timestamp")
    label = _numeric(tab, 3, "state label", integer=True)
    msg = _features(tab, 4, "edge feature")
    # PyG/TGB map items to item + max(user) + 1 (0-based); +1 for the zoo's 1-based ids (= DyGLib ml_ ids).
    return user + 1, item + int(user.max()) + 2, t, label, msg


def parse_jodie(data: bytes, display: str, *, name: str, sort: bool = False) -> RawTemporal:
    """Parse the JODIE layout ``user_id,item_id,timestamp,state_label,f_1..f_F`` (also TGB ``tgbl-wiki``).

    The header names 5 columns while rows carry 4+F fields, so line 1 is skipped and no header is used. Users and
    items are 0-based in their own spaces: ``src = user + 1``, ``dst = item + max(user) + 2``. ``t`` stays float.

    Args:
        data: the csv bytes (a file's content, or the embedded generator's output).
        display: file name for error messages.
        name: dataset name.
        sort: stable-sort decreasing timestamps (with a warning) instead of raising.

    Returns:
        The parsed stream.
    """
    src, dst, t, label, msg = _jodie_arrays(data, display)
    raw = RawTemporal(name=name, source=display, src=src, dst=dst, t=t, msg=msg, label=label)
    return _permute(raw, _order(t, display, 2, sort))


def read_jodie(path: str | Path, *, name: str | None = None, sort: bool = False) -> RawTemporal:
    """Read a JODIE ``<name>.csv`` file (see :func:`parse_jodie`).

    Args:
        path: the csv file.
        name: dataset name (default: the file stem).
        sort: stable-sort decreasing timestamps instead of raising.

    Returns:
        The parsed stream.
    """
    path = Path(path)
    if not path.is_file():
        raise missing_file(path, "JODIE csv")
    return parse_jodie(path.read_bytes(), str(path), name=name or path.stem, sort=sort)


# --------------------------------------------------------------------------------------------------------------
# DyGLib ml_
# --------------------------------------------------------------------------------------------------------------


def _pad_features(x: np.ndarray, width: int = DYGLIB_FEAT_DIM) -> np.ndarray:
    """Zero-pad feature columns up to ``width`` (DyGLib pads node and edge features to 172)."""
    if x.shape[1] >= width:
        return x
    return np.concatenate([x, np.zeros((x.shape[0], width - x.shape[1]), dtype=x.dtype)], axis=1)


def read_dyglib(path: str | Path, *, name: str | None = None, sort: bool = False) -> RawTemporal:
    """Read DyGLib's processed layout ``ml_<name>.csv`` (+ optional ``ml_<name>.npy``, ``ml_<name>_node.npy``).

    The csv header is ``,u,i,ts,label,idx`` (a pandas index column, also accepted as ``Unnamed: 0``); ``u``, ``i`` are
    already 1-based with items offset by ``max(u)``; ``idx`` must be 1..E. The edge-feature ``.npy`` has E+1 rows
    (row 0 zeros); node features have ``max_id+1`` rows. Features are zero-padded to 172 columns as DyGLib does.

    Args:
        path: the ``ml_<name>.csv`` file.
        name: dataset name (default: the file stem without ``ml_``).
        sort: stable-sort decreasing timestamps instead of raising.

    Returns:
        The parsed stream.
    """
    path = Path(path)
    if not path.is_file():
        raise missing_file(path, "DyGLib ml_ csv")
    stem = path.stem.removeprefix("ml_")
    display = str(path)
    tab = _read_table(path.read_bytes(), display, header_lines=1)
    cols = {h: k for k, h in enumerate(tab.header)}
    if missing := [c for c in ("u", "i", "ts", "label", "idx") if c not in cols]:
        raise TemporalFormatError(
            f"{display}: line 1: expected header ',u,i,ts,label,idx' (pandas index column first), "
            f"found {','.join(tab.header)!r} (missing {missing})"
        )
    src = _numeric(tab, cols["u"], "u", integer=True, minimum=1)
    dst = _numeric(tab, cols["i"], "i", integer=True, minimum=1)
    t = _numeric(tab, cols["ts"], "ts")
    label = _numeric(tab, cols["label"], "label", integer=True)
    idx = _numeric(tab, cols["idx"], "idx", integer=True)
    n = len(src)
    wrong = np.flatnonzero(idx != np.arange(1, n + 1))
    if wrong.size:
        i = int(wrong[0])
        raise TemporalFormatError(
            f"{display}: line {i + 2}: expected idx = {i + 1} (idx must run 1..E), found {idx[i]}"
        )
    edge_path = path.with_name(f"ml_{stem}.npy")
    if edge_path.is_file():
        feat = np.load(edge_path, allow_pickle=False)
        if feat.ndim != 2 or feat.shape[0] != n + 1:
            raise TemporalFormatError(
                f"{edge_path}: expected a 2-d array with E+1 = {n + 1} rows (row 0 zeros, E = {n} events in "
                f"{display}), found shape {feat.shape}"
            )
        msg = _pad_features(feat[1:].astype(np.float32))
    else:
        msg = np.ones((n, 1), dtype=np.float32)
    node_feat = None
    node_path = path.with_name(f"ml_{stem}_node.npy")
    if node_path.is_file():
        node_feat = np.load(node_path, allow_pickle=False)
        max_id = int(max(src.max(), dst.max()))
        if node_feat.ndim != 2 or node_feat.shape[0] != max_id + 1:
            raise TemporalFormatError(
                f"{node_path}: expected a 2-d array with max_id+1 = {max_id + 1} rows, found shape {node_feat.shape}"
            )
        node_feat = _pad_features(node_feat.astype(np.float32))
    raw = RawTemporal(
        name=name or stem, source=display, src=src, dst=dst, t=t, msg=msg, label=label, node_feat=node_feat
    )
    return _permute(raw, _order(t, display, 2, sort))


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
        tab = _read_table(data, display, header_lines=1, str_cols=(1, 2))
        n_cols = tab.frame.shape[1]
        comment = "comment" in name
        want = 5 if comment else 4
        if n_cols != want:
            layout = "ts,src,dst,num_words,score" if comment else "ts,src,dst,weight"
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
    with pkl.open("rb") as handle:
        table = pickle.load(handle)  # the user's own TGB file; pickle is TGB's format
    if not isinstance(table, dict):
        raise TemporalFormatError(f"{pkl}: expected a pickled dict (src, dst, t) -> ndarray, found {type(table)}")
    keys = list(zip((raw.src[rows] - 1).tolist(), (raw.dst[rows] - 1).tolist(), raw.t[rows].astype(np.int64).tolist()))
    values = [table.get(k) for k in keys]
    missing = [i for i, v in enumerate(values) if v is None]
    if missing:
        i = missing[0]
        raise TemporalFormatError(
            f"{pkl}: expected negatives for every {split} event, found {len(missing)} of {len(keys)} keys missing; "
            f"first missing key (src, dst, t) = {keys[i]} (TGB 0-based ids) from {raw.source} line {lines[rows[i]]}"
        )
    arrays = [np.asarray(v, dtype=np.int64).ravel() for v in values]
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
            warnings.warn(
                f"{path.parent}: no {name}_{split}_ns[_v2].pkl; {split} negatives are sampled by the datamodule "
                "instead of TGB's fixed ones",
                stacklevel=2,
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
    tab = _read_table(path.read_bytes(), display, header_lines=1)
    if tab.frame.shape[1] != 4:
        raise TemporalFormatError(
            f"{display}: line 2: expected 4 fields (src,dst,time,split), found {tab.frame.shape[1]}"
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
        warnings.warn(f"{ns_path}: not found; test negatives are sampled by the datamodule", stacklevel=2)
        return raw
    neg = np.load(ns_path, allow_pickle=False)
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


# --------------------------------------------------------------------------------------------------------------
# Dispatch, detection and cache
# --------------------------------------------------------------------------------------------------------------


def _first_line(path: Path) -> str:
    """The first line of a text file, stripped (BOM removed)."""
    with path.open("rb") as handle:
        return handle.readline().decode("utf-8", "replace").lstrip("\ufeff").strip()


def _detect_file(path: Path) -> str:
    """Guess the format of a data file from its name, then its header."""
    if path.name.startswith("ml_") and path.suffix == ".csv":
        return "dyglib"
    if re.search(r"_edgelist(_v2)?\.csv$", path.name):
        return "tgb"
    if _first_line(path).replace(" ", "").lower() == "src,dst,time,split":
        return "tgbseq"
    return "jodie"


def _name_from_file(path: Path, fmt: str) -> str:
    """Dataset name implied by a data file's name."""
    if fmt == "dyglib":
        return path.stem.removeprefix("ml_")
    if fmt == "tgb":
        return path.name.split("_edgelist")[0]
    return path.stem


def _folder_candidates(folder: Path, fmt: str, name: str) -> list[tuple[str, Path]]:
    """Where each format keeps ``name`` inside ``folder``, in lookup order."""
    tgb_dirs = [folder / name.replace("-", "_"), folder]
    by_format = {
        "dyglib": [folder / f"ml_{name}.csv", folder / name / f"ml_{name}.csv"],
        "tgb": [d / f"{name}{s}" for d in tgb_dirs for s in ("_edgelist_v2.csv", "_edgelist.csv")],
        "jodie": [folder / f"{name}.csv"],
        "tgbseq": [folder / f"{name}.csv", folder / name / f"{name}.csv"],
    }
    if fmt != "auto":
        return [(fmt, p) for p in by_format[fmt]]
    auto = [("dyglib", p) for p in by_format["dyglib"]] + [("tgb", p) for p in by_format["tgb"]]
    return auto + [("detect", p) for p in by_format["tgbseq"]]


def resolve_source(path: str, fmt: FormatName = "auto", name: str | None = None) -> tuple[str, str, Path]:
    """Resolve ``path`` (a file or a folder), ``format`` and ``name`` to ``(format, name, data file)``.

    Args:
        path: a data file, or a folder holding ``name``'s files in the format's layout.
        fmt: ``auto`` detects from the file name (``ml_*`` -> dyglib, ``*_edgelist*.csv`` -> tgb) and header.
        name: dataset name; needed for a folder unless it holds exactly one ``.csv``.

    Returns:
        The concrete format, the dataset name and the main data file.

    Raises:
        FileNotFoundError: nothing at the expected path(s); downloads are disabled.
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise missing_file(root, "data path")
    if root.is_file():
        detected = _detect_file(root) if fmt == "auto" else fmt
        return detected, name or _name_from_file(root, detected), root
    if name is None:
        csvs = sorted(root.glob("*.csv"))
        if len(csvs) != 1:
            raise ValueError(
                f"--data.init_args.path={path} is a folder with {len(csvs)} csv files; pass "
                "--data.init_args.name=<dataset> (e.g. wikipedia, tgbl-wiki) or the data file itself"
            )
        detected = _detect_file(csvs[0]) if fmt == "auto" else fmt
        return detected, _name_from_file(csvs[0], detected), csvs[0]
    candidates = _folder_candidates(root, fmt, name)
    for found_fmt, candidate in candidates:
        if candidate.is_file():
            return (_detect_file(candidate) if found_fmt == "detect" else found_fmt), name, candidate
    tried = ", ".join(str(p) for _, p in candidates)
    raise missing_file(root / name, f"{fmt} dataset {name!r} (looked for: {tried})")


def _companions(fmt: str, name: str, data_file: Path) -> list[Path]:
    """Every side file that can change a reader's output (cache key)."""
    folder, stem = data_file.parent, data_file.stem
    match fmt:
        case "dyglib":
            base = stem.removeprefix("ml_")
            return [folder / f"ml_{base}.npy", folder / f"ml_{base}_node.npy"]
        case "tgb":
            return [folder / f"{name}_{s}_ns{v}.pkl" for s in _SPLITS for v in ("_v2", "")]
        case "tgbseq":
            return [folder / f"{stem}_test_ns.npy"]
    return []


_ARRAY_FIELDS = ("src", "dst", "t", "msg", "label")


def _save_cache(target: Path, raw: RawTemporal) -> None:
    """Write ``raw`` to an ``.npz`` (no pickles)."""
    arrays = {k: getattr(raw, k) for k in _ARRAY_FIELDS}
    if raw.split is not None:
        arrays["split"] = raw.split
    if raw.node_feat is not None:
        arrays["node_feat"] = raw.node_feat
    for split, neg in raw.eval_neg.items():
        arrays[f"neg_{split}"] = neg
        arrays[f"mask_{split}"] = raw.eval_neg_mask[split]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(target)


def _load_cache(target: Path, name: str, source: str) -> RawTemporal:
    """Read a stream written by :func:`_save_cache`."""
    with np.load(target, allow_pickle=False) as blob:
        raw = RawTemporal(name=name, source=source, **{k: blob[k] for k in _ARRAY_FIELDS})
        raw.split = blob["split"] if "split" in blob else None
        raw.node_feat = blob["node_feat"] if "node_feat" in blob else None
        for split in _SPLITS:
            if f"neg_{split}" in blob:
                raw.eval_neg[split] = blob[f"neg_{split}"]
                raw.eval_neg_mask[split] = blob[f"mask_{split}"]
    return raw


def read_temporal(
    path: str,
    fmt: FormatName = "auto",
    name: str | None = None,
    *,
    sort: bool = False,
    val_ratio: float = 0.15,
    test_ratio: float = 0.15,
    cache_dir: str | None = None,
) -> RawTemporal:
    """Read any supported on-disk format into a :class:`RawTemporal`; optionally cache the converted arrays.

    Args:
        path: a data file or a folder (see :func:`resolve_source`).
        fmt: ``auto``, ``jodie``, ``dyglib``, ``tgb`` or ``tgbseq``.
        name: dataset name (required for folders holding several datasets).
        sort: stable-sort decreasing timestamps (with a warning) instead of raising.
        val_ratio: validation share (TGB's own split needs it to match its negatives).
        test_ratio: test share.
        cache_dir: user folder for converted ``.npz`` arrays (never site-packages); ``None`` disables caching.

    Returns:
        The parsed stream.
    """
    detected, resolved_name, data_file = resolve_source(path, fmt, name)
    target = None
    if cache_dir is not None:
        files = [data_file, *_companions(detected, resolved_name, data_file)]
        stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.is_file()]
        key = json.dumps([_CACHE_VERSION, detected, resolved_name, sort, val_ratio, test_ratio, stamp])
        digest = hashlib.sha1(key.encode()).hexdigest()[:16]
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", resolved_name)
        target = Path(cache_dir).expanduser() / f"{safe}-{detected}-{digest}.npz"
        if target.is_file():
            return _load_cache(target, resolved_name, str(data_file))
    match detected:
        case "jodie":
            raw = read_jodie(data_file, name=resolved_name, sort=sort)
        case "dyglib":
            raw = read_dyglib(data_file, name=resolved_name, sort=sort)
        case "tgb":
            raw = read_tgb(data_file, name=resolved_name, sort=sort, val_ratio=val_ratio, test_ratio=test_ratio)
        case "tgbseq":
            raw = read_tgbseq(data_file, name=resolved_name, sort=sort)
        case _:
            raise ValueError(f"--data.init_args.format={detected!r}: expected auto, jodie, dyglib, tgb or tgbseq")
    if target is not None:
        _save_cache(target, raw)
    return raw
