"""A decision maker's recorded comparisons on disk (card ``bope_monne``, section Recorded-comparisons loader).

- ``outcomes.csv``: a header of outcome names, then one row of floats per outcome;
- ``comparisons.csv``: header ``winner,loser``, then one row per comparison: 0-based row indices into
  ``outcomes.csv`` (row 0 is the first line after its header).

Every problem is one line naming the file, the line (as numbered in the file, the header being line 1) and the field,
what was expected and what was found (:class:`RecordedDataError`). Nothing is coerced, clipped or dropped; fully
blank lines carry nothing and are skipped.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor

#: The comparisons file's header.
COMPARISONS_HEADER = ("winner", "loser")
_INTEGER = re.compile(r"[+-]?[0-9]+")


class RecordedDataError(ValueError):
    """An outcomes or comparisons file does not match its documented layout (one line: file, line, field)."""


def _float(cell: str) -> float | None:
    """The float spelled by ``cell``, or ``None`` (also for ``1_0``, which ``float`` would read as 10)."""
    if "_" in cell:
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def _rows(path: str, what: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped cells) of every non-blank line, the header first."""
    if not Path(path).is_file():
        raise RecordedDataError(f"{path}: no such file (expected a CSV: {what})")
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        for row in reader:
            if any(cell.strip() for cell in row):
                yield reader.line_num, [cell.strip() for cell in row]


def read_outcomes(path: str, k: int | None = None, k_from: str = "the problem") -> tuple[list[str], Tensor]:
    """Read the outcomes table.

    Args:
        path: the CSV (a header of outcome names, one row of floats per outcome).
        k: the number of outcome columns expected, or ``None`` for any.
        k_from: what sets ``k``, as named in the column-count message.

    Returns:
        The outcome names and the outcomes, float64 ``(n, k)``.
    """
    what = "a header of outcome names, then one row of floats per outcome"
    rows = _rows(path, what)
    first = next(rows, None)
    if first is None:
        raise RecordedDataError(f"{path}: empty file; expected {what}")
    names = first[1]
    if "" in names:
        raise RecordedDataError(f"{path}: column {names.index('') + 1} has an empty name in the header; expected an "
                                "outcome name for every column")  # fmt: skip
    if dups := sorted({v for v in names if names.count(v) > 1}):
        raise RecordedDataError(f"{path}: duplicate outcome name(s) {dups} in the header; expected unique names")
    if k is not None and len(names) != k:
        raise RecordedDataError(f"{path}: the header has {len(names)} outcome columns but {k_from} has k={k}")
    values: list[list[float]] = []
    for line, cells in rows:
        if len(cells) != len(names):
            raise RecordedDataError(f"{path}: line {line} has {len(cells)} cells; expected {len(names)} (one per "
                                    "outcome name in the header)")  # fmt: skip
        row = []
        for name, cell in zip(names, cells, strict=True):
            value = _float(cell)
            if value is None:
                raise RecordedDataError(f"{path}: line {line}, column {name!r}: {cell!r} is not a number; expected a "
                                        "float in every cell")  # fmt: skip
            if not math.isfinite(value):
                raise RecordedDataError(f"{path}: line {line}, column {name!r}: {cell!r} is not finite; expected a "
                                        "finite float (no NaN or inf)")  # fmt: skip
            row.append(value)
        values.append(row)
    if len(values) < 2:
        raise RecordedDataError(f"{path}: {len(values)} outcome row(s); expected at least 2 (a comparison needs two "
                                "outcomes)")  # fmt: skip
    return names, torch.tensor(values, dtype=torch.float64)


def read_comparisons(path: str, n_outcomes: int, outcomes: str = "outcomes.csv") -> Tensor:
    """Read the comparisons table.

    Args:
        path: the CSV (header ``winner,loser``, one comparison per row).
        n_outcomes: rows of the outcomes table (indices must lie in ``[0, n_outcomes)``).
        outcomes: the outcomes file, as named in the out-of-range message.

    Returns:
        Long ``(m, 2)``: (winner, loser) row indices.
    """
    what = "header winner,loser, then one comparison per row as 0-based row indices into the outcomes file"
    rows = _rows(path, what)
    first = next(rows, None)
    if first is None:
        raise RecordedDataError(f"{path}: empty file; expected {what}")
    if tuple(first[1]) != COMPARISONS_HEADER:
        raise RecordedDataError(f"{path}: header {first[1]}; expected winner,loser (0-based row indices into the "
                                "outcomes file)")  # fmt: skip
    pairs: list[tuple[int, int]] = []
    for line, cells in rows:
        if len(cells) != 2:
            raise RecordedDataError(f"{path}: line {line} has {len(cells)} cells; expected 2 (winner,loser)")
        pair = []
        for field, cell in zip(COMPARISONS_HEADER, cells, strict=True):
            if not _INTEGER.fullmatch(cell):
                raise RecordedDataError(f"{path}: line {line}: {field}={cell!r} is not an integer; expected a 0-based "
                                        "row index into the outcomes file")  # fmt: skip
            index = int(cell)
            if not 0 <= index < n_outcomes:
                raise RecordedDataError(f"{path}: line {line}: {field}={index} is out of range for the {n_outcomes} "
                                        f"rows of {outcomes}")  # fmt: skip
            pair.append(index)
        if pair[0] == pair[1]:
            raise RecordedDataError(f"{path}: line {line}: winner=loser={pair[0]}; expected two different rows")
        pairs.append((pair[0], pair[1]))
    if not pairs:
        raise RecordedDataError(f"{path}: no comparisons after the header; expected at least one row winner,loser")
    return torch.tensor(pairs, dtype=torch.long)


def write_outcomes(path: str, names: Sequence[str], y: Tensor) -> None:
    """Write ``y`` ``(n, k)`` as an outcomes CSV (exact: floats written with ``repr``)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(names)
        writer.writerows([repr(float(v)) for v in row] for row in y.tolist())


def write_comparisons(path: str, comps: Tensor) -> None:
    """Write (winner, loser) rows ``(m, 2)`` as a comparisons CSV."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(COMPARISONS_HEADER)
        writer.writerows(comps.tolist())
