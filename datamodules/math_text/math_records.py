r"""MATH-style answer formats for the DCO card (card ``dco``, "Real formats"; ``shared/methods/dco.md``).

The card's real format is a MATH-style JSONL file: one JSON object per line with ``problem`` (str), ``solution`` (str)
and an optional ``answer`` (str). When ``answer`` is absent it is the content of the last balanced ``\boxed{...}`` in
``solution``, and a record with neither is an error naming the line (:func:`read_math_records`). A JSON list of such
objects and, when ``datasets`` is installed, a Hugging Face arrow folder (``datasets.load_from_disk``) are read too.

Answers are compared after :func:`normalize_answer` (the card: "strip whitespace, ``$``, the ``\boxed{}`` wrapper and
a trailing period", plus a few conservative LaTeX spellings from lm-evaluation-harness' minerva MATH task) either as
strings (``answer_equivalence: string``, the card's default) or, failing that, as sympy expressions
(``answer_equivalence: sympy``) through a small, safe LaTeX subset (:func:`answers_equivalent`).

This module imports only the standard library; sympy and datasets are imported on demand.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from datamodules.common.json_records import read_json_records
from datamodules.math_text.answers import last_boxed

#: Fields of a returned record.
RECORD_FIELDS: tuple[str, ...] = ("problem", "solution", "answer")
_EXPECTED = "expected a JSON object with 'problem' (non-empty str), 'solution' (str) and optional 'answer' (str)"


def _raw_records(path: Path) -> list[tuple[str, Any]]:
    """``(where, object)`` per record (``datamodules.json_records``)."""
    return read_json_records(path, lambda line, i: f"line {line}")


def _record(source: Path, where: str, obj: Any, none_is_absent: bool = False) -> dict[str, str]:
    r"""Validate one raw record and fill ``answer`` from the solution's last ``\boxed{...}`` when absent."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"{source}: {where}: {_EXPECTED}, found {type(obj).__name__}")
    for key in ("problem", "solution"):
        if key not in obj or (none_is_absent and obj[key] is None):
            raise ValueError(f"{source}: {where}: missing field {key!r}; {_EXPECTED}, found keys {sorted(obj)}")
        if not isinstance(obj[key], str):
            raise ValueError(f"{source}: {where}: field {key!r}: expected str, found {type(obj[key]).__name__}")
    if not obj["problem"].strip():
        raise ValueError(f"{source}: {where}: field 'problem': expected a non-empty string, found {obj['problem']!r}")
    answer = obj.get("answer")
    if "answer" in obj and not (none_is_absent and answer is None):
        if not isinstance(answer, str):
            raise ValueError(f"{source}: {where}: field 'answer': expected str, found {type(answer).__name__}")
        if not answer.strip():
            raise ValueError(f"{source}: {where}: field 'answer': expected a non-empty string, found {answer!r}")
    else:
        answer = last_boxed(obj["solution"])
        if answer is None:
            raise ValueError(
                f"{source}: {where}: no 'answer' field and no \\boxed{{...}} in 'solution'; expected an 'answer' "
                f"string or a solution containing a balanced \\boxed{{answer}}"
            )
    return {"problem": obj["problem"], "solution": obj["solution"], "answer": answer}


def _arrow_records(path: Path) -> list[dict[str, str]]:
    """Rows of a Hugging Face arrow folder saved with ``Dataset.save_to_disk``."""
    try:
        import datasets
    except ImportError:
        raise ImportError(
            f"{path} is a directory, read as a Hugging Face arrow dataset (datasets.load_from_disk), which needs the "
            f"`datasets` package: pip install datasets (or pass a MATH-style .jsonl/.json file)"
        ) from None
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, Mapping):  # a DatasetDict (a dict of splits)
        raise ValueError(f"{path}: a DatasetDict with splits {sorted(ds)}; expected one split, pass {path}/<split>")
    if missing := {"problem", "solution"} - set(ds.column_names):
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}; expected problem, solution[, answer], found "
                         f"{list(ds.column_names)}")  # fmt: skip
    if len(ds) == 0:
        raise ValueError(f"{path}: no rows; expected rows with problem, solution[, answer]")
    # an arrow column cannot be absent per row: a null `answer` means "take it from the solution"
    return [_record(path, f"row {i}", row, none_is_absent=True) for i, row in enumerate(ds)]


def read_math_records(path: str | Path) -> list[dict[str, str]]:
    r"""Read MATH-style records: JSONL, a JSON list, or a Hugging Face arrow folder (card "Real formats").

    A file whose first non-blank character is ``[`` is one JSON list (errors name the 0-based ``record i``); any
    other file is JSONL, one object per line, blank lines skipped (errors name the 1-based ``line n``). A directory is
    loaded with ``datasets.load_from_disk`` (errors name the 0-based ``row i``; a null ``answer`` counts as absent).
    Each record needs ``problem`` (non-empty str) and ``solution`` (str); ``answer`` (non-empty str) is optional and,
    when absent, is the content of the last balanced ``\boxed{...}`` in ``solution``. Extra keys are ignored.

    Args:
        path: the ``.jsonl``/``.json`` file or the arrow folder.

    Returns:
        Records with exactly ``problem``, ``solution`` and ``answer``, in file order; ``answer`` is raw (normalisation
        happens at comparison, :func:`answers_equivalent`).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ImportError: ``path`` is a directory and ``datasets`` is not installed.
        ValueError: invalid JSON, no records, a record that is not an object, a missing or non-string field, an empty
            ``problem`` or ``answer``, or no ``answer`` and no ``\boxed{...}`` (naming the file, the line or record,
            and the field).
    """
    path = Path(path)
    if path.is_dir():
        return _arrow_records(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file or folder; expected a MATH-style JSONL/JSON file of problem, "
                                "solution[, answer] records or a Hugging Face arrow folder")  # fmt: skip
    raw = _raw_records(path)
    if not raw:
        raise ValueError(f"{path}: no records; expected JSON objects with problem, solution[, answer]")
    return [_record(path, where, obj) for where, obj in raw]


def write_math_jsonl(records: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write records as MATH-style JSONL (``problem``, ``solution`` and, when present, ``answer``; UTF-8).

    Args:
        records: mappings with ``problem`` and ``solution`` and optionally ``answer``; other keys are not written.
        path: the output file (parent folders are created).

    Returns:
        The path written.

    Raises:
        ValueError: a record without ``problem`` or ``solution`` (naming its index).
    """
    path = Path(path)
    lines = []
    for i, rec in enumerate(records):
        if missing := {"problem", "solution"} - set(rec):
            raise ValueError(f"write_math_jsonl: record {i}: missing field(s) {sorted(missing)}; expected problem, "
                             f"solution[, answer]")  # fmt: skip
        lines.append(json.dumps({k: rec[k] for k in RECORD_FIELDS if k in rec}, ensure_ascii=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
