"""Old path ``datamodules.temporal_formats``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.temporal_graph.dyglib``
- ``datamodules.temporal_graph.jodie``
- ``datamodules.temporal_graph.raw``
- ``datamodules.temporal_graph.readers``
- ``datamodules.temporal_graph.tgb``
"""

from datamodules.temporal_graph.dyglib import DYGLIB_FEAT_DIM, read_dyglib
from datamodules.temporal_graph.jodie import parse_jodie, read_jodie
from datamodules.temporal_graph.raw import RawTemporal, TemporalFormatError, missing_file, time_quantile_split
from datamodules.temporal_graph.readers import FormatName, read_temporal, resolve_source
from datamodules.temporal_graph.tgb import read_tgb, read_tgbseq, tgb_negative_files

__all__ = [
    "DYGLIB_FEAT_DIM",
    "FormatName",
    "missing_file",
    "parse_jodie",
    "RawTemporal",
    "read_dyglib",
    "read_jodie",
    "read_temporal",
    "read_tgb",
    "read_tgbseq",
    "resolve_source",
    "TemporalFormatError",
    "tgb_negative_files",
    "time_quantile_split",
]
