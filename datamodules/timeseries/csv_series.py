"""Reader for ETT-format and custom (Time-Series-Library) CSV series, with its column checks."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from zoo.core.messages import say

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


def _row_ref(label: str, row: int, from_file: bool | Sequence[int]) -> str:
    """``data row r (line l)`` for files (1-based, header = line 1), ``row r`` (0-based) for in-memory frames.

    ``from_file`` may be the file line of every data row (:func:`_scan_csv`), which blank lines shift.
    """
    if isinstance(from_file, bool):
        return f"data row {row + 1} (line {row + 2})" if from_file else f"row {row}"
    return f"data row {row + 1} (line {from_file[row]})"


def _steps_ns(dates: pd.DatetimeIndex) -> np.ndarray:
    """Int64 nanosecond steps between consecutive dates (pandas 3 parses to microseconds: never use ``asi8``)."""
    return np.diff(dates.to_numpy().astype("datetime64[ns]")).astype(np.int64)


def _strict_dates(label: str, raw: pd.Series, from_file: bool | Sequence[int]) -> pd.DatetimeIndex:
    """Parse a date column in one format: the one pandas infers from the first value, or ISO 8601 throughout.

    ISO 8601 throughout admits dates at different precisions (``2020-01-01`` beside ``2020-01-01 01:00``). A value in
    another format is an error naming its row: per-value guessing (pandas' ``format="mixed"``) would read
    ``01/02/2020`` month first and ``13/02/2020`` day first in one column. Offsets that differ between rows (daylight
    saving) are read as UTC.
    """
    for kwargs in ({}, {"format": "ISO8601"}):
        try:
            return pd.DatetimeIndex(pd.to_datetime(raw, **kwargs))
        except (ValueError, TypeError) as err:
            if "timezone" in str(err).lower() or "offset" in str(err).lower():
                try:
                    return pd.DatetimeIndex(pd.to_datetime(raw, utc=True, **kwargs))
                except (ValueError, TypeError):
                    pass
    present = raw.dropna()
    first = str(present.iloc[0]) if len(present) else ""
    fmt = pd.tseries.api.guess_datetime_format(first)
    parsed = pd.to_datetime(raw, format=fmt, errors="coerce") if fmt else pd.Series(pd.NaT, index=raw.index)
    bad = np.flatnonzero(parsed.isna().to_numpy() & raw.notna().to_numpy())
    i = int(bad[0]) if bad.size else 0
    expected = f"the format {fmt!r} of the first value {first!r}" if fmt else "a date/time pandas can parse"
    raise ValueError(
        f"{label}: column 'date' has the value {raw.iloc[i]!r} at {_row_ref(label, i, from_file)}; expected "
        f"{expected} (one format for the whole column, or ISO 8601)"
    ) from None


def _parse_dates(label: str, raw: pd.Series, from_file: bool | Sequence[int]) -> pd.DatetimeIndex:
    """Parse the ``date`` column (any format pandas understands) and check it strictly increases."""
    if isinstance(raw.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_any_dtype(raw):
        dates = pd.DatetimeIndex(raw)
    else:
        dates = _strict_dates(label, raw, from_file)
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


def _numeric(label: str, frame: pd.DataFrame, columns: Sequence[str], from_file: bool | Sequence[int]
             ) -> np.ndarray:  # fmt: skip
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


def _drop_index_columns(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Drop ``rownames``, ``time`` and an unnamed first column (an index written by ``to_csv``); also their names."""
    drop = [c for c in frame.columns if str(c) in INDEX_COLUMNS]
    if len(frame.columns) and (str(frame.columns[0]).startswith("Unnamed: ") or str(frame.columns[0]) == ""):
        drop.append(frame.columns[0])
    return frame.drop(columns=drop), [str(c) for c in drop]


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
    from_file: bool | Sequence[int] = False,
) -> _Parsed:
    """Validate a raw table (``date`` + numeric columns) into dates, float64 values and channel names.

    Args:
        frame: the table as read (index-like columns are dropped here).
        label: file path or source name, first word of every error.
        format: ``auto``, ``ett_hour``, ``ett_minute`` or ``custom``.
        columns: channels to keep (default: every numeric column; ``OT`` last when present, as Time-Series-Library).
        nan_policy: custom data only: ``ffill`` (causal forward fill, then leading rows with a NaN dropped) or
            ``error``. NaN in an ETT file always raises.
        from_file: rows are reported as file lines (header = line 1), or the file line of every row.

    Every change to the table is announced in one ``zoo: <label>: ...`` line on stderr: index and text columns left
    out of the default channels, ``OT`` moved last, an ETT header whose time steps make ``auto`` read it as
    ``custom``, and the cells a forward fill wrote (with the leading rows it dropped).

    Returns:
        The parsed table.
    """
    notes: list[str] = []
    frame, dropped = _drop_index_columns(frame)
    if dropped:
        notes.append(f"index column(s) {dropped} left out")
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
        if format == "custom" and names == list(ETT_COLUMNS) and len(dates) > 1:
            notes.append("the ETT columns but not one hourly / 15-minute step throughout, so format=auto reads it as "
                         "custom (7:1:2 split); pass --data.init_args.format=ett_hour|ett_minute for the ETT "
                         "borders")  # fmt: skip
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
        if text := [c for c in names if c != "date" and c not in available]:
            if columns is None:
                notes.append(f"text column(s) {text} left out of the channels")
        if "OT" in available and available[-1] != "OT":  # Time-Series-Library: the target goes last
            available = [c for c in available if c != "OT"] + ["OT"]
            if columns is None:
                notes.append("OT moved last (Time-Series-Library's target column)")
    if columns is not None:
        columns = list(columns)
        if not columns:
            raise ValueError(f"{label}: --data.init_args.columns=[] selects no channel; expected a non-empty list or "
                             f"null")  # fmt: skip
        if missing := [c for c in columns if c not in names or c == "date"]:
            raise ValueError(f"{label}: --data.init_args.columns={columns}: unknown column(s) {missing}; available: "
                             f"{available}")  # fmt: skip
        if len(set(columns)) != len(columns):
            raise ValueError(f"{label}: --data.init_args.columns={columns} lists a column twice")
    else:
        columns = available
    if not columns:
        raise ValueError(f"{label}: no numeric column besides 'date' (found {names})")
    if flags := [c for c in columns if pd.api.types.is_bool_dtype(frame[c])]:
        notes.append(f"True/False column(s) {flags} read as 1/0")
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
        filled = int(nan[keep:].sum())
        i, j = (int(v[0]) for v in np.nonzero(nan[keep:])) if filled else (0, 0)
        where = f" (first: column {columns[j]!r} at {_row_ref(label, i + keep, from_file)})" if filled else ""
        lead = f"; dropped the first {keep} row(s), which no earlier value fills" if keep else ""
        notes.append(f"forward-filled {filled} missing value(s){where}{lead} (--data.init_args.nan_policy=ffill; "
                     f"'error' refuses missing values)")  # fmt: skip
        values, dates = values[keep:], dates[keep:]
    if notes:
        say(f"{label}: " + "; ".join(notes))
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
    lines = _scan_csv(file)
    try:
        frame = pd.read_csv(file)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a readable CSV ({err})") from None
    if len(frame) != len(lines):  # the scan and pandas disagree on the rows (a quoting corner): plain row numbers
        lines = [r + 2 for r in range(len(frame))]
    return parse_frame(frame, str(path), format, columns, nan_policy, from_file=lines)


def _scan_csv(file: Path) -> list[int]:
    """The file line of every data row, after checking the rows pandas would silently bend.

    pandas fills a row with too few fields with NaN (which the forward fill then hides), takes a first column without
    a header name as the index, renames a repeated column ``x`` to ``x.1`` and reads a header-only file as an empty
    table; each is an error here naming the file and the line. Blank lines are skipped, as pandas does.
    """
    import csv

    problem = None
    try:
        with open(file, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            while header is not None and len(header) <= 1 and not "".join(header).strip():
                header = next(reader, None)
            if header is None:
                raise ValueError(f"{file}: empty file; expected a header line (date, then the series' columns) and "
                                 f"data rows")  # fmt: skip
            if dup := sorted({name for name in header if header.count(name) > 1}):
                raise ValueError(f"{file}: line {reader.line_num}: column name(s) {dup} appear twice in the header")
            lines = []
            for row in reader:
                if len(row) <= 1 and not "".join(row).strip():  # a blank line
                    continue
                if len(row) != len(header):
                    raise ValueError(f"{file}: line {reader.line_num}: {len(row)} fields; expected {len(header)}, "
                                     f"one per header column ({','.join(header)})")  # fmt: skip
                lines.append(reader.line_num)
    except UnicodeDecodeError as err:
        problem = f"not UTF-8 text ({err.reason} at byte {err.start}); expected a UTF-8 CSV"
    except csv.Error as err:
        problem = f"not a readable CSV ({err})"
    if problem is not None:
        raise ValueError(f"{file}: {problem}")
    if not lines:
        raise ValueError(f"{file}: no data rows after the header; expected one row per time step")
    return lines
