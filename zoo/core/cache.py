"""The zoo's user cache folder, resolved in one place: ``$ZOO_CACHE`` (default ``~/.cache/zoo``)."""

from __future__ import annotations

import hashlib
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


def fingerprint(path: str | os.PathLike[str]) -> str:
    """A cache key part that changes when the data at ``path`` changes.

    The SHA-256 of a file's bytes, or of a folder's sorted (relative name, size, mtime) listing.
    """
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_file():
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    else:
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            stat = item.stat()
            digest.update(f"{item.relative_to(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()
