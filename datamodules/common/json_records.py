"""Raw records of a JSON list or JSONL file, each with a location for error messages (shared by the zoo's readers).

Used by the instruction reader (``datamodules.instructions.readers``), the MATH-style reader
(``datamodules.math_text.math_records``), the GSM8K reader and the preference readers; each validates the fields of
the records itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_json_records(path: Path, jsonl_where: Callable[[int, int], str]) -> list[tuple[str, Any]]:
    """``(where, object)`` per record of a JSON list (``where`` = ``record i``) or a JSONL file (blank lines skipped).

    Args:
        path: the file.
        jsonl_where: ``(line number, record index) -> where`` for JSONL records (1-based line, 0-based index).

    Raises:
        ValueError: invalid JSON, naming the file and the line (and column); a pretty-printed single object, the
            common mistake, is named as such.
    """
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path}: line {err.lineno}, column {err.colno}: invalid JSON ({err.msg}); expected a JSON list of "
                f"records or one JSON object per line"
            ) from None
        return [(f"record {i}", obj) for i, obj in enumerate(data)]
    out: list[tuple[str, Any]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = jsonl_where(line_no, len(out))
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            hint = "one JSON object per line (JSONL) or a JSON list"
            try:
                if isinstance(json.loads(text), dict):
                    hint += ", found one JSON object spanning several lines"
            except json.JSONDecodeError:
                pass
            message = f"{path}: {where}: invalid JSON ({err.msg} at column {err.colno}); expected {hint}"
            raise ValueError(message) from None
        out.append((where, obj))
    return out
