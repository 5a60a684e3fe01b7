"""The zoo's own one-line messages on stderr, said once per run (global rank 0 under DDP)."""

from __future__ import annotations

import os
import re
import sys


def is_global_zero() -> bool:
    """Whether this process is global rank 0 (Lightning's launcher sets ``LOCAL_RANK``/``NODE_RANK`` for the others)."""
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"


def say(message: str) -> None:
    """Print ``zoo: <message>`` on stderr from global rank 0."""
    if is_global_zero():
        print(f"zoo: {message}", file=sys.stderr, flush=True)


def parse_error_line(message: str) -> str:
    """One line naming the option for jsonargparse's multi-line report of a bad command line or config.

    ``Parser key "model": Does not validate against any of the Union subtypes ... Problem with given class_path
    'zoo.uam.module.UnlearnClassifierModule': Parser key "arch": Expected a typing.Literal['mlp', 'cnn']. Got value:
    xx`` becomes ``--model.init_args.arch='xx': expected one of 'mlp', 'cnn' (zoo.uam.module.UnlearnClassifierModule)``.
    A report of another shape keeps its first line.
    """
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return "invalid command line"
    head = re.match(r'Parser key "([^"]+)":\s*(.*)', lines[0])
    if head is None:
        return lines[0]
    top, rest = head.group(1), head.group(2)
    if top == "config":
        return f"-c/--config: {rest or ' '.join(lines[1:2])}".strip()
    given = _given_value(lines)
    blocks = _error_bullets(lines)
    if not blocks:  # a plain key error: 'Parser key "x": <detail>'
        detail = rest or (lines[1].strip().lstrip("- ") if len(lines) > 1 else "invalid value")
        return f"--{top}{_value(given)}: {_expectation(detail)}"
    class_paths = [b for b in blocks if b[0].startswith("Problem with given class_path")]
    chosen = [b for b in class_paths if "is not accepted" not in " ".join(b)] or class_paths
    if chosen:
        block = chosen[0]
        cls = re.search(r"class_path '([^']+)'", block[0])
        keys = [m.group(1) for line in block[1:] if (m := re.match(r'Parser key "([^"]+)"', line.strip()))]
        detail = block[-1].strip()
        unknown = re.match(r"Option '([^']+)' is not accepted", detail)
        if unknown:
            keys.append(unknown.group(1))
        option = f"--{top}" + (".init_args." + ".".join(keys) if keys else "")
        where = f" ({cls.group(1)})" if cls else ""
        if unknown:
            return f"{option}: not an option of {cls.group(1) if cls else top}"
        value = _value(given) if keys or not cls else f"={cls.group(1)!r}"
        return f"{option}{value}: {_expectation(detail)}{where if keys else ''}"
    expected = [b[0] for b in blocks if "NoneType" not in b[0]]
    return f"--{top}{_value(given)}: " + " or ".join(_expectation(e) for e in expected or [blocks[0][0]])


def _given_value(lines: list[str]) -> str | None:
    for line in reversed(lines):
        found = re.match(r"\s*Given value: (.*)", line)
        if found:
            nested = re.match(r"NestedArg\(key='[^']*', val=(.*)\)$", found.group(1))
            return nested.group(1).strip("'\"") if nested else found.group(1)
    return None


def _error_bullets(lines: list[str]) -> list[list[str]]:
    """The ``- ...`` bullets under ``Errors:`` with their indented detail lines."""
    if not any(line.strip() == "Errors:" for line in lines):
        return []
    start = next(i for i, line in enumerate(lines) if line.strip() == "Errors:")
    indent = len(lines[start + 1]) - len(lines[start + 1].lstrip()) if start + 1 < len(lines) else 0
    blocks: list[list[str]] = []
    for line in lines[start + 1 :]:
        depth = len(line) - len(line.lstrip())
        if depth < indent:
            break
        if depth == indent and line.strip().startswith("- "):
            blocks.append([line.strip()[2:]])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def _value(given: str | None) -> str:
    return "" if given is None else f"={given!r}"


def _expectation(detail: str) -> str:
    detail = re.sub(r"\. Got value: .*$", "", detail.strip())
    literal = re.match(r"Expected a typing\.Literal\[(.*)\]$", detail)
    if literal:
        return f"expected one of {literal.group(1)}"
    plain = re.match(r"Expected a <class '([^']+)'>$", detail)
    if plain:
        return f"expected {'an' if plain.group(1)[0] in 'aeiou' else 'a'} {plain.group(1)}"
    return detail[:1].lower() + detail[1:] if detail.startswith("Expected") else detail
