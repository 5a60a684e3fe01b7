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
import json
import re
from pathlib import Path
from typing import Literal

import numpy as np

from datamodules.temporal_graph.dyglib import read_dyglib
from datamodules.temporal_graph.jodie import read_jodie
from datamodules.temporal_graph.raw import RawTemporal, missing_file
from datamodules.temporal_graph.tgb import _SPLITS, read_tgb, read_tgbseq

#: Format names accepted by :func:`read_temporal`.
FormatName = Literal["auto", "jodie", "dyglib", "tgb", "tgbseq"]
#: Bumped whenever the cached arrays change meaning.
_CACHE_VERSION = 1


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
        sort: stable-sort decreasing timestamps (said on stderr) instead of raising.
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
