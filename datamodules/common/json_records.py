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


def read_json_records(
    path: Path, jsonl_where: Callable[[int, int], str], expected: str = "a UTF-8 JSON list or JSONL file"
) -> list[tuple[str, Any]]:
    """``(where, object)`` per record of a JSON list (``where`` = ``record i``) or a JSONL file (blank lines skipped).

    Args:
        path: the file.
        jsonl_where: ``(line number, record index) -> where`` for JSONL records (1-based line, 0-based index).
        expected: what the file should be, for the message on a file that is not UTF-8.

    Raises:
        ValueError: invalid JSON, naming the file and the line (and column); a pretty-printed single object, the
            common mistake, is named as such; a file that is not UTF-8; a key repeated within one object (JSON keeps
            the last value silently).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); expected {expected}") from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys(path, None))
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
            obj = json.loads(line, object_pairs_hook=_unique_keys(path, where))
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


def _unique_keys(path: Path, where: str | None) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json`` ``object_pairs_hook`` that refuses a key repeated within one object, naming the file and record."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            place = f"{path}: {where}" if where else str(path)
            raise ValueError(f"{place}: key {repeated[0]!r} appears twice in one object; expected each key once (JSON "
                             "would keep the last value silently)")  # fmt: skip
        return dict(pairs)

    return hook
