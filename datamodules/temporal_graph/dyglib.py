"""Reader for the DyGLib ``ml_<name>.csv`` / ``.npy`` layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datamodules.temporal_graph.raw import (
    RawTemporal,
    TemporalFormatError,
    _numeric,
    _order,
    _permute,
    _read_table,
    load_npy,
    missing_file,
    real_features,
)

#: DyGLib pads node and edge features to this width.
DYGLIB_FEAT_DIM = 172


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
        feat = load_npy(edge_path, "edge-feature array")
        if feat.ndim != 2 or feat.shape[0] != n + 1:
            raise TemporalFormatError(
                f"{edge_path}: expected a 2-d array with E+1 = {n + 1} rows (row 0 zeros, E = {n} events in "
                f"{display}), found shape {feat.shape}"
            )
        msg = _pad_features(real_features(feat, edge_path)[1:])
    else:
        msg = np.ones((n, 1), dtype=np.float32)
    node_feat = None
    node_path = path.with_name(f"ml_{stem}_node.npy")
    if node_path.is_file():
        node_feat = load_npy(node_path, "node-feature array")
        max_id = int(max(src.max(), dst.max()))
        if node_feat.ndim != 2 or node_feat.shape[0] != max_id + 1:
            raise TemporalFormatError(
                f"{node_path}: expected a 2-d array with max_id+1 = {max_id + 1} rows, found shape {node_feat.shape}"
            )
        node_feat = _pad_features(real_features(node_feat, node_path))
    raw = RawTemporal(
        name=name or stem, source=display, src=src, dst=dst, t=t, msg=msg, label=label, node_feat=node_feat
    )
    return _permute(raw, _order(t, display, 2, sort))
