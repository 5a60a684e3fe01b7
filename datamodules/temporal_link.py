"""Old path ``datamodules.temporal_link``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.temporal_graph.datamodule``
- ``datamodules.temporal_graph.index``
- ``datamodules.temporal_graph.stream``
"""

# ruff: noqa: F401

from datamodules.temporal_graph.datamodule import SplitName, TemporalLinkDataModule
from datamodules.temporal_graph.index import WINDOW_CACHE_ENTRIES, TemporalIndex, sample_without_replacement, splitmix64
from datamodules.temporal_graph.raw import TemporalFormatError
from datamodules.temporal_graph.stream import TemporalStream

__all__ = [
    "TemporalFormatError",
    "TemporalIndex",
    "TemporalLinkDataModule",
    "TemporalStream",
    "sample_without_replacement",
    "splitmix64",
]
