"""The MIMIC-IV reader (``.csv`` or ``.csv.gz``, 2.0 and 2.2+ headers) behind both data sources (card ``rawmed``, Data).

Files under ``root``: ``icu/icustays``, ``hosp/labevents`` + ``hosp/d_labitems``, ``hosp/prescriptions``,
``icu/inputevents`` + ``icu/d_items``. Only the required columns are read (others, e.g. ``order_provider_id`` which
2.0 lacks, are ignored). The official cohort keeps stays with ``first_careunit == last_careunit``. Labs and
prescriptions join their stay on ``hadm_id`` with the time inside the window; inputevents join on ``stay_id``.
Rows outside ``[intime, intime + obs_hours)`` are outside the cohort's window and are not events of the cohort.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from datamodules.ehr.cohort import EHRCohort, p95_cap
from datamodules.ehr.tables import TABLE_SPECS, TABLES, EHRFormatError
from zoo.core.messages import say

__all__ = ["EHRFormatError", "REQUIRED", "load_mimiciv", "mimic_path"]

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
#: file -> the stay key it joins on.
EVENT_FILES = {"labevents": "hosp/labevents", "prescriptions": "hosp/prescriptions", "inputevents": "icu/inputevents"}
KEYS = {"labevents": "hadm_id", "prescriptions": "hadm_id", "inputevents": "stay_id"}
DICTIONARIES = {"labevents": "hosp/d_labitems", "inputevents": "icu/d_items"}
#: Rows per chunk when an event file is read (filtered to the cohort chunk by chunk).
CHUNK_ROWS = 1_000_000
STAY_COLUMNS = ("subject_id", "hadm_id", "stay_id", "first_careunit", "last_careunit", "intime", "outtime", "los")


def _required(table: str) -> tuple[str, ...]:
    spec = TABLE_SPECS[table]
    return (KEYS[table], spec.time, *spec.columns)


#: file (relative, no extension) -> required columns.
REQUIRED: dict[str, tuple[str, ...]] = {
    "icu/icustays": STAY_COLUMNS,
    **{EVENT_FILES[t]: _required(t) for t in TABLES},
    **{d: ("itemid", "label") for d in DICTIONARIES.values()},
}


def mimic_path(root: str | Path, rel: str) -> Path:
    """``root/<rel>.csv`` or ``root/<rel>.csv.gz``.

    Raises:
        FileNotFoundError: neither exists (the zoo never downloads MIMIC-IV).
    """
    for ext in (".csv", ".csv.gz"):
        path = Path(root) / f"{rel}{ext}"
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{Path(root) / rel}.csv: no such file (nor .csv.gz); expected the MIMIC-IV file {rel}.csv[.gz] under "
        f"root={str(root)!r} (downloads are disabled: obtain MIMIC-IV from PhysioNet and place it there)"
    )


def _read(
    root: str | Path, rel: str, keep: Callable[[Path, pd.DataFrame], pd.DataFrame] | None = None
) -> tuple[Path, pd.DataFrame]:
    """The required columns of one file as text (empty cell = NaN) in file order, with ``_row`` = the data row - 1.

    With ``keep``, the file is read in chunks of :data:`CHUNK_ROWS` rows and each chunk is reduced by ``keep`` before
    the next is read, so a full MIMIC-IV ``labevents`` never sits in memory.
    """
    path = mimic_path(root, rel)
    header = list(pd.read_csv(path, nrows=0).columns)
    required = REQUIRED[rel]
    if missing := [c for c in required if c not in header]:
        raise EHRFormatError(
            f"{path}: missing column(s) {missing}; expected {', '.join(required)} (others are ignored), found "
            f"{', '.join(header)}"
        )
    options = {"usecols": list(required), "dtype": str, "keep_default_na": False, "na_values": [""]}
    if keep is None:
        frame = pd.read_csv(path, **options)
        return path, frame[list(required)].assign(_row=np.arange(len(frame)))
    parts = []
    for chunk in pd.read_csv(path, chunksize=CHUNK_ROWS, **options):
        parts.append(keep(path, chunk[list(required)].assign(_row=chunk.index.to_numpy())))
    frame = pd.concat(parts) if parts else pd.DataFrame(columns=[*required, "_row"], dtype=str)
    return path, frame.reset_index(drop=True)


def _data_row(frame: pd.DataFrame, pos: int) -> int:
    """The 1-based data row of the file at position ``pos`` of ``frame``."""
    return int(frame["_row"].iloc[pos]) + 1 if "_row" in frame else pos + 1


def _numbers(path: Path, frame: pd.DataFrame, col: str, integer: bool, non_numeric: str) -> pd.Series:
    raw = frame[col]
    parsed = pd.to_numeric(raw, errors="coerce")
    bad = raw.notna() & parsed.isna()
    if integer and not bad.any():
        bad = parsed.notna() & (parsed != np.floor(parsed))
    if bad.any():
        first = int(np.flatnonzero(bad.to_numpy())[0])
        kind = "an integer" if integer else "a number"
        if integer or non_numeric == "error":
            raise EHRFormatError(
                f"{path}: column {col!r} has {int(bad.sum())} value(s) that are not {kind} (first: "
                f"{raw.iloc[first]!r} at data row {_data_row(frame, first)}); expected {kind} or an empty cell"
            )
        say(f"{path}: column {col!r}: {int(bad.sum())} non-numeric value(s) read as null (non_numeric='null')")
    return parsed.astype(np.float64)


def _times(path: Path, frame: pd.DataFrame, col: str) -> pd.Series:
    raw = frame[col]
    parsed = pd.to_datetime(raw, format=TIME_FORMAT, errors="coerce")
    bad = raw.notna() & parsed.isna()
    if bad.any():
        first = int(np.flatnonzero(bad.to_numpy())[0])
        raise EHRFormatError(
            f"{path}: column {col!r} has {int(bad.sum())} unparseable time(s) (first: {raw.iloc[first]!r} at data row "
            f"{_data_row(frame, first)}); expected YYYY-MM-DD HH:MM:SS"
        )
    return parsed


def _stays(root: str | Path) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """(path, the official cohort (first == last careunit), all stay ids of the file)."""
    path, raw = _read(root, "icu/icustays")
    stays = pd.DataFrame({
        "stay_id": _numbers(path, raw, "stay_id", True, "error"),
        "subject_id": _numbers(path, raw, "subject_id", True, "error"),
        "hadm_id": _numbers(path, raw, "hadm_id", True, "error"),
        "first_careunit": raw["first_careunit"], "last_careunit": raw["last_careunit"],
        "intime": _times(path, raw, "intime"), "los": _numbers(path, raw, "los", False, "error"),
    })  # fmt: skip
    for col in ("stay_id", "subject_id", "hadm_id", "intime"):
        if stays[col].isna().any():
            row = int(np.flatnonzero(stays[col].isna().to_numpy())[0]) + 1
            raise EHRFormatError(f"{path}: column {col!r} is empty at data row {row}; expected a value for every stay")
    for col in ("stay_id", "subject_id", "hadm_id"):
        stays[col] = stays[col].astype(np.int64)
    if stays["stay_id"].duplicated().any():
        dup = int(stays.loc[stays["stay_id"].duplicated(), "stay_id"].iloc[0])
        raise EHRFormatError(f"{path}: stay_id {dup} appears more than once; expected one row per ICU stay")
    every = stays[["stay_id"]]
    same = stays["first_careunit"].eq(stays["last_careunit"]).to_numpy()
    cohort = stays[same].drop(columns="last_careunit").sort_values("stay_id", kind="stable").reset_index(drop=True)
    return path, cohort, every


def _events(
    root: str | Path, table: str, stays: pd.DataFrame, every: pd.DataFrame, stays_path: Path, obs_hours: int,
    non_numeric: str,
) -> pd.DataFrame:  # fmt: skip
    spec = TABLE_SPECS[table]
    key = KEYS[table]
    ids = stays[key].to_numpy(np.int64)
    listed = every["stay_id"].to_numpy(np.int64)

    def keep(path: Path, chunk: pd.DataFrame) -> pd.DataFrame:
        keys = _numbers(path, chunk, key, True, "error")
        if table == "inputevents":
            unknown = keys.notna() & ~keys.isin(listed)
            if unknown.any():
                first = int(np.flatnonzero(unknown.to_numpy())[0])
                raise EHRFormatError(
                    f"{path}: {int(unknown.sum())} row(s) with a stay_id not in {stays_path} (first: "
                    f"{int(keys.iloc[first])} at data row {_data_row(chunk, first)}); expected every event inside a "
                    "listed ICU stay"
                )
        inside = keys.isin(ids).to_numpy()
        return chunk[inside].assign(**{key: keys[inside].astype(np.int64)})

    path, raw = _read(root, EVENT_FILES[table], keep)
    times = _times(path, raw, spec.time)
    if (n_null := int(times.isna().sum())) > 0:
        say(f"{path}: {n_null} row(s) of the cohort's stays without {spec.time} are outside every window (not read)")
    columns = list(dict.fromkeys([key, "stay_id", "intime"]))
    joined = raw.assign(_t=times).merge(stays[columns], on=key, how="inner")
    minutes = np.floor((joined["_t"] - joined["intime"]).dt.total_seconds() / 60.0)
    inside = minutes.notna() & (minutes >= 0) & (minutes < obs_hours * 60)
    joined = joined.assign(time=minutes)[inside.to_numpy()]
    out = pd.DataFrame({"stay_id": joined["stay_id"].to_numpy(np.int64), "time": joined["time"].to_numpy(np.int64)})
    for col in spec.numeric:
        out[col] = _numbers(path, joined, col, False, non_numeric).to_numpy()
    for col in spec.columns:
        if col not in spec.numeric:
            out[col] = pd.array(joined[col].to_numpy(dtype=object), dtype="str")
    out["_row"] = joined["_row"].to_numpy()
    if table in DICTIONARIES:
        out = _labels(root, table, path, out)
    out = out.sort_values(["stay_id", "time", "_row"], kind="stable").drop(columns="_row").reset_index(drop=True)
    return out[["stay_id", "time", *spec.columns]]


def _labels(root: str | Path, table: str, path: Path, events: pd.DataFrame) -> pd.DataFrame:
    """``itemid`` replaced by its dictionary label; unlabelled itemids raise (count and first one)."""
    dpath, d = _read(root, DICTIONARIES[table])
    d = d.dropna(subset=["label"]).drop_duplicates("itemid")
    labels = events["itemid"].map(d.set_index("itemid")["label"])
    missing = labels.isna() & events["itemid"].notna()
    if missing.any():
        ids = events.loc[missing, "itemid"]
        raise EHRFormatError(
            f"{path}: {ids.nunique()} itemid(s) without a label in {dpath} (first: {ids.iloc[0]}); expected every "
            "itemid of the cohort's rows listed with a label"
        )
    return events.assign(itemid=labels.astype("str"))


def load_mimiciv(
    root: str, obs_hours: int = 12, max_events: int | str | None = "p95", split_seed: int = 0,
    non_numeric: Literal["error", "null"] = "error",
) -> EHRCohort:  # fmt: skip
    """Read a MIMIC-IV folder into the cohort of the first ``obs_hours`` hours of each ICU stay.

    Args:
        root: folder holding ``icu/`` and ``hosp/`` (files ``.csv`` or ``.csv.gz``).
        obs_hours: observation window after ``intime``.
        max_events: keep the earliest events per stay: ``"p95"`` (the 95th percentile of the train split's counts,
            split seeded by ``split_seed``), an int cap, or ``None`` (no cap).
        split_seed: the split seed used to fit the ``p95`` cap.
        non_numeric: text in a numeric column (e.g. MIMIC's ``dose_val_rx`` ``"1-2"``): ``error`` raises, ``null``
            reads it as null and says how many.

    Raises:
        FileNotFoundError: a missing file (nothing is downloaded).
        EHRFormatError: a missing required column, an unparseable time or number, an itemid without a label, an
            inputevents row whose stay_id is not in ``icu/icustays``.
    """
    if not (isinstance(obs_hours, int) and not isinstance(obs_hours, bool) and obs_hours >= 1):
        raise ValueError(f"load_mimiciv: obs_hours={obs_hours!r}: expected an integer >= 1")
    if not (max_events is None or max_events == "p95" or (isinstance(max_events, int) and max_events >= 1)):
        raise ValueError(f"load_mimiciv: max_events={max_events!r}: expected an integer >= 1, 'p95' or None")
    if non_numeric not in ("error", "null"):
        raise ValueError(f"load_mimiciv: non_numeric={non_numeric!r}: expected one of 'error', 'null'")
    stays_path, stays, every = _stays(root)
    tables = {t: _events(root, t, stays, every, stays_path, obs_hours, non_numeric) for t in TABLES}
    cohort = EHRCohort(stays=stays, tables=tables, obs_hours=obs_hours)
    if max_events is None:
        return cohort
    cap = p95_cap(cohort, cohort.split(split_seed)["train"]) if max_events == "p95" else int(max_events)
    return cohort.truncate(cap)
