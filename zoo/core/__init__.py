"""Shared machinery of the zoo: base classes, pretrained loading, reproduction utilities.

Exports are lazy so that ``zoo list`` and ``zoo --help`` import neither torch nor lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ZooDataModule": "zoo.core.datamodule",
    "require": "zoo.core.datamodule",
    "LossTerm": "zoo.core.module",
    "ZooModule": "zoo.core.module",
    "load_pretrained": "zoo.core.pretrained",
    "Claim": "zoo.core.reproduce",
    "Report": "zoo.core.reproduce",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'zoo.core' has no attribute {name!r}")
