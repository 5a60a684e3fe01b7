"""Old path ``datamodules.bandit_graph``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.decision.arms``
- ``datamodules.decision.bandit_datamodule``
- ``datamodules.decision.graphs``
"""

from datamodules.decision.arms import ArmsKind, check_arms, load_arms
from datamodules.decision.bandit_datamodule import BanditGraphDataModule, ChunkStarts
from datamodules.decision.graphs import (
    ER_ATTEMPTS,
    GraphKind,
    build_graph,
    check_connected,
    hop_distances,
    load_graph,
    log,
)

__all__ = [
    "ArmsKind",
    "BanditGraphDataModule",
    "build_graph",
    "check_arms",
    "check_connected",
    "ChunkStarts",
    "ER_ATTEMPTS",
    "GraphKind",
    "hop_distances",
    "load_arms",
    "load_graph",
    "log",
]
