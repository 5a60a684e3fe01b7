"""Atomic writes into the zoo cache (a reader never sees a half-written file)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


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
