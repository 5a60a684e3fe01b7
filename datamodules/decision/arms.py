"""Arm sets for cooperative bandits: the arm-means file reader and its validation."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Literal

ArmsKind = Literal["bernoulli", "gaussian", "file"]


def load_arms(path: str) -> tuple[str, list[float], list[float] | None]:
    """Read an arms CSV: column ``mean`` (Bernoulli) or columns ``mean,std`` (Gaussian); returns kind, means, stds.

    Every row has exactly the header's fields, each a decimal number (``nan``/``inf`` pass here and are refused by
    :func:`check_arms`); anything else is an error naming the file and the line. Blank lines hold no arm.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--data.init_args.arms_path={path!r}: no such file (expected a CSV with mean[,std])")
    with file.open(newline="", encoding="utf-8-sig") as fh:  # utf-8-sig: a BOM is not part of the header
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        if header not in (["mean"], ["mean", "std"]):
            raise ValueError(f"{path}: expected the column 'mean' (Bernoulli) or 'mean,std' (Gaussian), found "
                             f"{','.join(header) or 'nothing'}")  # fmt: skip
        columns: list[list[float]] = [[] for _ in header]
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) != len(header):
                raise ValueError(f"{path}: line {line}: expected {len(header)} field(s) ({','.join(header)}), found "
                                 f"{len(row)}: {','.join(row)!r}")  # fmt: skip
            for name, cell, column in zip(header, row, columns):
                value = _number(cell)
                if value is None:
                    raise ValueError(f"{path}: line {line}: {name} {cell.strip()!r} is not a number")
                column.append(value)
    means = columns[0]
    return ("gaussian" if len(header) == 2 else "bernoulli"), means, (columns[1] if len(header) == 2 else None)


def _number(cell: str) -> float | None:
    """``float(cell)``, or None when it is not a number (the caller raises the message naming the line)."""
    try:
        return float(cell) if "_" not in cell else None  # Python's float() reads '1_0' as 10
    except ValueError:
        return None


def check_arms(kind: str, means: list[float], stds: list[float] | None, source: str) -> None:
    """Validate an arm set: ``A >= 2``, Bernoulli means in [0, 1], Gaussian stds >= 0 and one per arm."""
    if len(means) < 2:
        raise ValueError(f"{source}: {len(means)} arm(s); a bandit needs A >= 2 arms")
    if any(not math.isfinite(x) for x in means):
        raise ValueError(f"{source}: arm means must be finite, found {means}")
    if kind == "bernoulli":
        bad = [x for x in means if not 0.0 <= x <= 1.0]
        if bad:
            raise ValueError(f"{source}: Bernoulli means must lie in [0, 1], found {bad}")
    else:
        if stds is None or len(stds) != len(means):
            raise ValueError(f"{source}: Gaussian arms need one std per mean ({len(means)} means, stds={stds})")
        if any(not (math.isfinite(s) and s >= 0) for s in stds):
            raise ValueError(f"{source}: Gaussian stds must be finite and >= 0, found {stds}")
