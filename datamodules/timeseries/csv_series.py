"""Reader for ETT-format and custom (Time-Series-Library) CSV series, with its column checks."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

#: The ETT header (ETTh1/ETTh2/ETTm1/ETTm2), in file order.
ETT_COLUMNS = ("date", "HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
#: Columns that hold a row index, not a series (R's ``rownames``, a ``time`` counter, pandas' ``Unnamed: 0``).
INDEX_COLUMNS = ("rownames", "time")
FormatName = Literal["auto", "ett_hour", "ett_minute", "custom"]
_FORMATS = ("auto", "ett_hour", "ett_minute", "custom")


class _Parsed:
    """A parsed series table: dates, float64 values (n, C), channel names, the resolved format, a label."""

    def __init__(self, dates: pd.DatetimeIndex, values: np.ndarray, names: list[str], fmt: str, label: str) -> None:
        self.dates, self.values, self.names, self.format, self.label = dates, values, names, fmt, label


def _row_ref(label: str, row: int, from_file: bool) -> str:
    """``data row r (line l)`` for files (1-based, header = line 1), ``row r`` (0-based) for in-memory frames."""
    return f"data row {row + 1} (line {row + 2})" if from_file else f"row {row}"


def _steps_ns(dates: pd.DatetimeIndex) -> np.ndarray:
    """Int64 nanosecond steps between consecutive dates (pandas 3 parses to microseconds: never use ``asi8``)."""
    return np.diff(dates.to_numpy().astype("datetime64[ns]")).astype(np.int64)


def _parse_dates(label: str, raw: pd.Series, from_file: bool) -> pd.DatetimeIndex:
    """Parse the ``date`` column (any format pandas understands) and check it strictly increases."""
    if isinstance(raw.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_any_dtype(raw):
        dates = pd.DatetimeIndex(raw)
    else:
        try:
            dates = pd.DatetimeIndex(pd.to_datetime(raw))
        except (ValueError, TypeError):
            parsed = pd.to_datetime(raw, format="mixed", errors="coerce")
            bad = np.flatnonzero(parsed.isna().to_numpy())
            if bad.size:
                i = int(bad[0])
                raise ValueError(
                    f"{label}: column 'date' has an unparseable value {raw.iloc[i]!r} at "
                    f"{_row_ref(label, i, from_file)}; expected a date/time pandas can parse"
                ) from None
            dates = pd.DatetimeIndex(parsed)
    if dates.tz is not None:  # compare instants, not wall clocks
        dates = dates.tz_convert("UTC").tz_localize(None)
    if dates.isna().any():
        i = int(np.flatnonzero(dates.isna())[0])
        raise ValueError(f"{label}: column 'date' is empty at {_row_ref(label, i, from_file)}")
    step = _steps_ns(dates)
    if (step <= 0).any():
        i = int(np.flatnonzero(step <= 0)[0]) + 1
        what = "duplicate" if step[i - 1] == 0 else "decreasing"
        raise ValueError(
            f"{label}: column 'date' is {what} at {_row_ref(label, i, from_file)} ({dates[i]} after {dates[i - 1]}); "
            f"expected strictly increasing timestamps"
        )
    return dates


def _numeric(label: str, frame: pd.DataFrame, columns: Sequence[str], from_file: bool) -> np.ndarray:
    """Float64 (n, C) values of ``columns``; a cell that is neither a number nor empty raises naming row and column."""
    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        series = frame[col]
        if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
            out[:, j] = series.to_numpy(dtype=np.float64, na_value=np.nan)
            continue
        conv = pd.to_numeric(series, errors="coerce")
        bad = np.flatnonzero(conv.isna().to_numpy() & series.notna().to_numpy())
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{label}: non-numeric value {series.iloc[i]!r} in column {col!r} at {_row_ref(label, i, from_file)}; "
                f"expected a number (or an empty cell for a missing value)"
            )
        out[:, j] = conv.to_numpy(dtype=np.float64, na_value=np.nan)
    inf = np.isinf(out)
    if inf.any():
        i, j = (int(v[0]) for v in np.nonzero(inf))
        raise ValueError(f"{label}: infinite value in column {columns[j]!r} at {_row_ref(label, i, from_file)}")
    return out


def _is_text_column(series: pd.Series) -> bool:
    """True for a column none of whose non-empty cells is a number (a label column, left out of the default)."""
    if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
        return False
    present = series.dropna()
    return bool(len(present)) and pd.to_numeric(present, errors="coerce").isna().all()


def _drop_index_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Drop ``rownames``, ``time`` and an unnamed first column (an index written by ``to_csv``)."""
    drop = [c for c in frame.columns if str(c) in INDEX_COLUMNS]
    if len(frame.columns) and (str(frame.columns[0]).startswith("Unnamed: ") or str(frame.columns[0]) == ""):
        drop.append(frame.columns[0])
    return frame.drop(columns=drop)


def _detect_format(dates: pd.DatetimeIndex, names: Sequence[str]) -> str:
    """``ett_hour``/``ett_minute`` when the header is exactly the ETT columns and the rows are hourly / 15-minute."""
    if list(names) != list(ETT_COLUMNS) or len(dates) < 2:
        return "custom"
    step = np.unique(_steps_ns(dates))
    if len(step) == 1 and step[0] == pd.Timedelta(hours=1).value:
        return "ett_hour"
    if len(step) == 1 and step[0] == pd.Timedelta(minutes=15).value:
        return "ett_minute"
    return "custom"


def parse_frame(
    frame: pd.DataFrame,
    label: str,
    format: FormatName = "custom",
    columns: Sequence[str] | None = None,
    nan_policy: Literal["ffill", "error"] = "ffill",
    from_file: bool = False,
) -> _Parsed:
    """Validate a raw table (``date`` + numeric columns) into dates, float64 values and channel names.

    Args:
        frame: the table as read (index-like columns are dropped here).
        label: file path or source name, first word of every error.
        format: ``auto``, ``ett_hour``, ``ett_minute`` or ``custom``.
        columns: channels to keep (default: every numeric column; ``OT`` last when present, as Time-Series-Library).
        nan_policy: custom data only: ``ffill`` (causal forward fill, then leading rows with a NaN dropped) or
            ``error``. NaN in an ETT file always raises.
        from_file: rows are reported as file lines (header = line 1).

    Returns:
        The parsed table.
    """
    frame = _drop_index_columns(frame)
    names = [str(c) for c in frame.columns]
    frame.columns = names
    if len(set(names)) != len(names):
        dup = sorted({c for c in names if names.count(c) > 1})
        raise ValueError(f"{label}: duplicate column name(s) {dup}")
    if "date" not in names:
        raise ValueError(f"{label}: no 'date' column (found {names}); expected date first, then numeric columns")
    dates = _parse_dates(label, frame["date"], from_file)
    if format == "auto":
        format = _detect_format(dates, names)
    if format in ("ett_hour", "ett_minute"):
        if missing := [c for c in ETT_COLUMNS if c not in names]:
            raise ValueError(
                f"{label}: missing ETT column(s) {missing}; expected exactly {','.join(ETT_COLUMNS)} "
                f"(format={format}; use format=custom for other columns)"
            )
        if extra := [c for c in names if c not in ETT_COLUMNS]:
            raise ValueError(
                f"{label}: extra column(s) {extra} in an ETT file; expected exactly {','.join(ETT_COLUMNS)} "
                f"(format={format}; use format=custom for other columns)"
            )
        if len(dates) > 1:
            expected = pd.Timedelta(hours=1) if format == "ett_hour" else pd.Timedelta(minutes=15)
            median = pd.Timedelta(int(np.median(_steps_ns(dates))))
            if median != expected:
                warnings.warn(f"{label}: format={format} but the median time step is {median} (expected {expected})")
        available = list(ETT_COLUMNS[1:])
    else:
        available = [c for c in names if c != "date" and not _is_text_column(frame[c])]
        if "OT" in available:  # Time-Series-Library: the target goes last
            available = [c for c in available if c != "OT"] + ["OT"]
    if columns is not None:
        columns = list(columns)
        if not columns:
            raise ValueError(f"{label}: columns=[] selects no channel; expected a non-empty list or null")
        if missing := [c for c in columns if c not in names or c == "date"]:
            raise ValueError(f"{label}: columns={columns}: unknown column(s) {missing}; available: {available}")
        if len(set(columns)) != len(columns):
            raise ValueError(f"{label}: columns={columns} lists a column twice")
    else:
        columns = available
    if not columns:
        raise ValueError(f"{label}: no numeric column besides 'date' (found {names})")
    values = _numeric(label, frame, columns, from_file)
    nan = np.isnan(values)
    if nan.any():
        if format in ("ett_hour", "ett_minute") or nan_policy == "error":
            i, j = (int(v[0]) for v in np.nonzero(nan))
            why = "an ETT file must be complete" if format != "custom" else "nan_policy=error"
            raise ValueError(
                f"{label}: missing value (NaN) in column {columns[j]!r} at {_row_ref(label, i, from_file)} ({why})"
            )
        values = pd.DataFrame(values).ffill().to_numpy()  # causal: only earlier rows fill a gap
        complete = ~np.isnan(values).any(1)  # after the fill, every row after the first complete one is complete
        if not complete.any():
            raise ValueError(f"{label}: every row has a missing value after the forward fill (columns {columns})")
        keep = int(np.argmax(complete))
        values, dates = values[keep:], dates[keep:]
    return _Parsed(dates, values, list(columns), format, label)


def read_series_csv(
    path: str,
    format: FormatName = "auto",
    columns: Sequence[str] | None = None,
    nan_policy: Literal["ffill", "error"] = "ffill",
) -> _Parsed:
    """Read an ETT-format or custom CSV (``date`` column, then numeric columns).

    Args:
        path: CSV file.
        format: ``auto`` (ETT when the header is exactly the ETT columns and rows are hourly / 15-minute), ``ett_hour``,
            ``ett_minute`` or ``custom``.
        columns: channels to keep (default all numeric).
        nan_policy: ``ffill`` or ``error`` (custom data only).

    Returns:
        The parsed table.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"path={path!r}: no such local CSV file (the zoo never downloads)")
    try:
        frame = pd.read_csv(file)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a readable CSV ({err})") from None
    return parse_frame(frame, str(path), format, columns, nan_policy, from_file=True)
