"""Readers for the real LM-unlearning formats: MCQ JSONL and text JSONL, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datamodules.text.facts import MCQItem


def _jsonl_objects(path: str | Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """``(line_no, object)`` for each non-blank line of a jsonl file holding ``what``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: text that is not UTF-8, bad JSON, a non-object or no records, naming the file (and the line).
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file; expected a jsonl of {what}")
    out = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{line_no}: invalid JSON ({err.msg} at column {err.colno})") from None
                if not isinstance(obj, dict):
                    raise ValueError(f"{path}:{line_no}: expected a JSON object, found {type(obj).__name__}")
                out.append((line_no, obj))
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); expected a jsonl of {what}"
        ) from None
    if not out:
        raise ValueError(f"{path}: no records; expected a jsonl of {what}")
    return out


def _require(path: str | Path, line_no: int, obj: dict[str, Any], key: str, expected: str) -> Any:
    """Return ``obj[key]`` or raise ``ValueError`` naming the line, the key and what was expected."""
    if key not in obj:
        raise ValueError(f"{path}:{line_no}: missing key {key!r}; expected {expected}, found keys {sorted(obj)}")
    return obj[key]


def _type_name(value: Any) -> str:
    return type(value).__name__


def read_mcq_jsonl(path: str | Path) -> list[MCQItem]:
    """Read a WMDP-style multiple-choice jsonl file.

    One JSON object per line: ``question`` (non-empty str), ``choices`` (list of exactly 4 distinct non-empty str),
    ``answer`` (int 0-3), optional ``subject`` (str). Blank lines are skipped; other keys are ignored.

    Args:
        path: the jsonl file.

    Returns:
        The items in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``"{path}:{line_no}: ..."`` naming the key and what was expected vs found (bad JSON, missing key,
            wrong type, an empty question or choice, not 4 distinct choices, answer outside 0-3), or no records.
    """
    items = []
    for line_no, obj in _jsonl_objects(path, "MCQ items (question, choices, answer)"):
        where = f"{path}:{line_no}"
        question = _require(path, line_no, obj, "question", "str")
        if not isinstance(question, str):
            raise ValueError(f"{where}: key 'question': expected str, found {_type_name(question)}")
        if not question.strip():  # the stem is the scored context: an empty one has no token to condition on
            raise ValueError(f"{where}: key 'question': expected a non-empty str, found {question!r}")
        choices = _require(path, line_no, obj, "choices", "a list of exactly 4 str")
        if not isinstance(choices, list):
            raise ValueError(f"{where}: key 'choices': expected a list of exactly 4 str, found {_type_name(choices)}")
        if len(choices) != 4:
            raise ValueError(f"{where}: key 'choices': expected exactly 4 choices, found {len(choices)}")
        if bad := [_type_name(c) for c in choices if not isinstance(c, str)]:
            raise ValueError(f"{where}: key 'choices': expected 4 str, found element type(s) {bad}")
        if empty := [c for c in choices if not c.strip()]:  # scores as no token: an error only after training
            raise ValueError(f"{where}: key 'choices': expected non-empty str, found {empty[0]!r}")
        if len(set(choices)) != 4:  # two equal options tie, and argmax silently picks the first
            dupes = sorted({c for c in choices if choices.count(c) > 1})
            raise ValueError(f"{where}: key 'choices': expected 4 distinct choices, found {dupes[0]!r} twice")
        answer = _require(path, line_no, obj, "answer", "int 0-3")
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise ValueError(f"{where}: key 'answer': expected int 0-3, found {_type_name(answer)} {answer!r}")
        if not 0 <= answer <= 3:
            raise ValueError(f"{where}: key 'answer': expected int 0-3, found {answer}")
        subject = obj.get("subject", "")
        if not isinstance(subject, str):
            raise ValueError(f"{where}: key 'subject': expected str, found {_type_name(subject)}")
        items.append(MCQItem(question=question, choices=list(choices), answer=answer, subject=subject))
    return items


def read_text_jsonl(path: str | Path) -> list[str]:
    """Read a ``{"text": str}`` jsonl corpus (RMU forget/retain corpora).

    Args:
        path: the jsonl file; blank lines are skipped, other keys ignored.

    Returns:
        The texts in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``"{path}:{line_no}: ..."`` for bad JSON, a missing ``text`` key, a non-str or empty value, or no
            records.
    """
    texts = []
    for line_no, obj in _jsonl_objects(path, 'texts ({"text": str} per line)'):
        text = _require(path, line_no, obj, "text", "str")
        if not isinstance(text, str):
            raise ValueError(f"{path}:{line_no}: key 'text': expected str, found {_type_name(text)}")
        if not text.strip():  # it would train on the lone BOS token
            raise ValueError(f"{path}:{line_no}: key 'text': expected a non-empty str, found {text!r}")
        texts.append(text)
    return texts
