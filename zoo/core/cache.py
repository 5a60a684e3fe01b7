"""The zoo's user cache folder, resolved in one place."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$ZOO_CACHE`` (default ``~/.cache/zoo``), not created."""
    return Path(os.environ.get("ZOO_CACHE", Path.home() / ".cache" / "zoo"))


def cache_dir(*parts: str) -> Path:
    """``$ZOO_CACHE/<parts>`` (default ``~/.cache/zoo``), created."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
