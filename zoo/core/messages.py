"""The zoo's own one-line messages on stderr, said once per run (global rank 0 under DDP)."""

from __future__ import annotations

import os
import sys


def is_global_zero() -> bool:
    """Whether this process is global rank 0 (Lightning's launcher sets ``LOCAL_RANK``/``NODE_RANK`` for the others)."""
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"


def say(message: str) -> None:
    """Print ``zoo: <message>`` on stderr from global rank 0."""
    if is_global_zero():
        print(f"zoo: {message}", file=sys.stderr, flush=True)
