"""Old path ``datamodules.ltsf``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.timeseries.cache``
- ``datamodules.timeseries.csv_series``
- ``datamodules.timeseries.ltsf_datamodule``
- ``datamodules.timeseries.packaged``
- ``datamodules.timeseries.synthetic_ett``
- ``datamodules.timeseries.windows``
"""

# ruff: noqa: F401

from datamodules.timeseries.cache import atomic_write
from datamodules.timeseries.csv_series import ETT_COLUMNS, INDEX_COLUMNS, FormatName, parse_frame, read_series_csv
from datamodules.timeseries.ltsf_datamodule import ETT_HOUR_BORDERS, SPLITS, LTSFDataModule, SplitName
from datamodules.timeseries.packaged import SourceName, load_source
from datamodules.timeseries.synthetic_ett import (
    ETT_HOUR_ROWS,
    synthetic_ett_frame,
    synthetic_ett_path,
    write_synthetic_ett,
)
from datamodules.timeseries.windows import WindowDataset, collate_windows, gather_windows
from zoo.core.cache import cache_root

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
