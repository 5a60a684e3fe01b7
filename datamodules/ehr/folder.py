"""The event-table folder format shared by the real splits, the generator's output and the evaluator.

A folder holds ``stays.csv`` (one column ``stay_id``: every stay, those without events included) and one
``<table>.csv`` per table with the header ``stay_id,time,<spec.columns...>``: ``time`` is integer minutes since the
stay's ``intime`` (real times floored to 10 min like synthetic ones), rows sorted by (stay_id, time), an empty cell is
null, ``itemid`` holds the label text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from datamodules.ehr.tables import TABLE_SPECS, TABLES, EHRFormatError

__all__ = ["EHRFormatError", "read_folder", "write_folder"]


def _header(table: str) -> list[str]:
    return ["stay_id", "time", *TABLE_SPECS[table].columns]


def write_folder(path: str | Path, stays: Iterable[int], tables: dict[str, pd.DataFrame]) -> None:
    """Write ``stays.csv`` and one ``<table>.csv`` per table into ``path`` (created).

    Args:
        path: the folder.
        stays: every stay id of the folder.
        tables: table -> frame with ``stay_id``, ``time`` (integer minutes) and the table's columns (extra columns
            are not written).

    Raises:
        EHRFormatError: a missing table or column, a non-integer time, or an event of a stay not in ``stays``.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    ids = pd.Index(np.asarray(list(stays), dtype=np.int64))
    for table in TABLES:
        if table not in tables:
            raise EHRFormatError(f"{path / f'{table}.csv'}: no frame for table {table!r}; expected {', '.join(TABLES)}")
        frame = tables[table]
        if missing := [c for c in _header(table) if c not in frame.columns]:
            raise EHRFormatError(
                f"{path / f'{table}.csv'}: missing column(s) {missing}; expected {','.join(_header(table))}"
            )
        time = frame["time"].to_numpy()
        if len(frame) and (not np.issubdtype(time.dtype, np.number) or not np.all(np.floor(time) == time)):
            raise EHRFormatError(f"{path / f'{table}.csv'}: column 'time' is not integer minutes; expected integers")
        if (outside := ~frame["stay_id"].isin(ids)).any():
            raise EHRFormatError(
                f"{path / f'{table}.csv'}: stay_id {int(frame.loc[outside, 'stay_id'].iloc[0])} is not among the "
                "folder's stays; expected every event's stay listed in stays"
            )
        out = frame[_header(table)].assign(
            stay_id=frame["stay_id"].astype(np.int64), time=frame["time"].astype(np.int64)
        )
        out = out.sort_values(["stay_id", "time"], kind="stable")
        out.to_csv(path / f"{table}.csv", index=False)
    pd.DataFrame({"stay_id": ids}).to_csv(path / "stays.csv", index=False)


def _integers(file: Path, frame: pd.DataFrame, col: str) -> np.ndarray:
    raw = frame[col]
    parsed = pd.to_numeric(raw, errors="coerce")
    bad = parsed.isna() | (parsed != np.floor(parsed))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise EHRFormatError(
            f"{file}: column {col!r} has {raw.iloc[row]!r} at data row {row + 1}; expected an integer in every row"
        )
    return parsed.to_numpy(np.int64)


def _read_csv(file: Path, expected: list[str]) -> pd.DataFrame:
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file; expected an event-table folder with stays.csv and "
                                f"{', '.join(f'{t}.csv' for t in TABLES)}")  # fmt: skip
    frame = pd.read_csv(file, dtype=str, keep_default_na=False, na_values=[""])
    if list(frame.columns) != expected:
        raise EHRFormatError(f"{file}: header {','.join(frame.columns)}; expected {','.join(expected)}")
    return frame


def read_folder(path: str | Path) -> tuple[list[int], dict[str, pd.DataFrame]]:
    """Read an event-table folder: ``(stays, tables)``.

    Tables have ``stay_id`` and ``time`` int64, numeric columns float64, categorical columns text with NaN for null.

    Raises:
        FileNotFoundError: a missing ``stays.csv`` or ``<table>.csv``.
        EHRFormatError: a header that differs from the format's, a non-integer id or time, a non-numeric value in a
            numeric column, or an event of a stay not listed in ``stays.csv``.
    """
    path = Path(path)
    stays_file = path / "stays.csv"
    stays = _integers(stays_file, _read_csv(stays_file, ["stay_id"]), "stay_id")
    known = pd.Index(stays)
    tables = {}
    for table in TABLES:
        spec, file = TABLE_SPECS[table], path / f"{table}.csv"
        raw = _read_csv(file, _header(table))
        out = pd.DataFrame({"stay_id": _integers(file, raw, "stay_id"), "time": _integers(file, raw, "time")})
        if (outside := ~out["stay_id"].isin(known)).any():
            raise EHRFormatError(
                f"{file}: stay_id {int(out.loc[outside, 'stay_id'].iloc[0])} is not listed in {stays_file}; expected "
                "every event's stay listed there"
            )
        for col in spec.columns:
            if col in spec.numeric:
                parsed = pd.to_numeric(raw[col], errors="coerce")
                if (bad := raw[col].notna() & parsed.isna()).any():
                    row = int(np.flatnonzero(bad.to_numpy())[0])
                    raise EHRFormatError(f"{file}: column {col!r} has {raw[col].iloc[row]!r} at data row {row + 1}; "
                                         "expected a number or an empty cell")  # fmt: skip
                out[col] = parsed.astype(np.float64).to_numpy()
            else:
                out[col] = pd.array(raw[col].to_numpy(dtype=object), dtype="str")
        tables[table] = out
    return stays.tolist(), tables
