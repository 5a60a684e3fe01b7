"""On-disk binary data and ground truths (card ``binary_dag``, section Data: ``BinaryCSVDataModule``).

Data: a CSV with a header of variable names and one row per sample. Each column holds 0/1, or exactly two distinct
tokens, mapped to 0/1 by sorted order (numeric order when both tokens are numbers, else string order); the mapping
is said in one line. Truth: an edge-list CSV with header ``source,target`` naming header variables, or a
``.bif``/``.bif.gz`` network (read with pgmpy).

Every problem is one line naming the file, the row or column, what was expected and what was found
(:class:`BinaryDataError`). Nothing is coerced, dropped or imputed. A constant column is only a warning line.
"""

from __future__ import annotations

import csv
import gzip
import re
import warnings
from pathlib import Path

import numpy as np

from zoo.core.messages import say

#: Values of a column that are listed in a "too many distinct values" error before it is cut short.
MAX_LISTED = 8
#: Columns spelled out in the one-line token mapping before it is cut short.
MAX_MAPPED = 10


class BinaryDataError(ValueError):
    """A binary data or truth file does not match its documented layout (one line: file, row/column, expectation)."""


def _numeric(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _sorted_tokens(tokens: list[str]) -> list[str]:
    """Numeric order when every token is a number, else string order."""
    values = [_numeric(t) for t in tokens]
    if all(v is not None for v in values):
        return [t for _, t in sorted(zip(values, tokens, strict=True))]
    return sorted(tokens)


def read_header(path: str) -> list[str]:
    """The stripped header names of a CSV; errors on a missing or empty file, an empty or duplicate name."""
    p = Path(path)
    if not p.is_file():
        raise BinaryDataError(f"{path}: no such file (expected a CSV with a header of variable names and one row "
                              "per sample)")  # fmt: skip
    with open(p, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), None)
    if not header:
        raise BinaryDataError(f"{path}: empty file; expected a header of variable names and one row per sample")
    names = [h.strip() for h in header]
    if "" in names:
        raise BinaryDataError(f"{path}: column {names.index('') + 1} has an empty name in the header; expected a "
                              "variable name for every column")  # fmt: skip
    if dups := sorted({v for v in names if names.count(v) > 1}):
        raise BinaryDataError(f"{path}: duplicate column name(s) {dups} in the header; expected unique variable names")
    return names


def read_binary_csv(path: str, min_rows: int = 10) -> tuple[np.ndarray, list[str], dict[str, dict[str, int]]]:
    """Read a binary data matrix.

    Args:
        path: the CSV (header of variable names, one row per sample).
        min_rows: fewest data rows accepted.

    Returns:
        ``x`` uint8 (n, d) of 0/1, the variable names, and per column the token -> 0/1 mapping used.
    """
    import pandas as pd

    names = read_header(path)
    if len(names) < 2:
        raise BinaryDataError(f"{path}: {len(names)} column in the header; expected at least 2 variables")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)  # every row longer than the header
            frame = pd.read_csv(path, dtype=str, index_col=False, encoding="utf-8")
    except (pd.errors.ParserError, pd.errors.ParserWarning) as exc:  # a row with more fields than the header
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        what = f"line {found[2]} has {found[3]} fields" if found else "a row has more fields than the header"
        raise BinaryDataError(f"{path}: {what}; expected {len(names)} fields per row (the header's columns)") from None
    n = len(frame)
    if n < min_rows:
        raise BinaryDataError(f"{path}: {n} data row(s); expected at least min_rows={min_rows}")
    frame = frame.apply(lambda col: col.str.strip())
    cells = frame.to_numpy(dtype=object)
    missing = (frame.isna() | (frame == "")).to_numpy()
    if missing.any():
        r, c = np.argwhere(missing)[0]
        raise BinaryDataError(f"{path}: empty or missing value at data row {r + 1}, column {names[c]!r}; expected "
                              "0/1 (or one of two tokens) in every cell")  # fmt: skip
    x = np.empty((n, len(names)), dtype=np.uint8)
    mapping: dict[str, dict[str, int]] = {}
    said: list[str] = []
    for c, name in enumerate(names):  # a loop over columns; each column is vectorised
        column = cells[:, c].astype(str)
        tokens, inverse = np.unique(column, return_inverse=True)
        tokens = tokens.tolist()
        if len(tokens) > 2:
            shown = _sorted_tokens(tokens)
            listed = ", ".join(map(repr, shown[:MAX_LISTED])) + (", …" if len(shown) > MAX_LISTED else "")
            raise BinaryDataError(f"{path}: column {name!r} has {len(tokens)} distinct values [{listed}]; expected "
                                  "0/1 or exactly two distinct tokens (binarise it first, e.g. first state vs rest, "
                                  "or at the median)")  # fmt: skip
        values = [_numeric(t) for t in tokens]
        if all(v in (0.0, 1.0) for v in values):  # plain 0/1 (also "0.0", "1.0"), constant or not
            index = {t: int(v) for t, v in zip(tokens, values, strict=True)}
        else:
            index = {t: i for i, t in enumerate(_sorted_tokens(tokens))}
            said.append(f"{name} " + " ".join(f"{t}={i}" for t, i in index.items()))
        mapping[name] = index
        x[:, c] = np.array([index[t] for t in tokens], dtype=np.uint8)[inverse]
        if len(tokens) == 1:
            say(f"{path}: warning: column {name!r} is constant ({tokens[0]!r} in all {n} rows); it carries no "
                "information about edges")  # fmt: skip
    if said:
        more = f" (and {len(said) - MAX_MAPPED} more)" if len(said) > MAX_MAPPED else ""
        say(f"{path}: two-token columns mapped by sorted order: {'; '.join(said[:MAX_MAPPED])}{more}")
    return x, names, mapping


def find_cycle(adj: np.ndarray) -> list[int] | None:
    """A directed cycle ``[v0, v1, ..., v0]`` of ``adj`` (iterative DFS), or ``None`` for a DAG."""
    d = adj.shape[0]
    state = np.zeros(d, dtype=np.int8)  # 0 new, 1 on the stack, 2 done
    for root in range(d):
        if state[root]:
            continue
        stack, path = [(root, iter(np.flatnonzero(adj[root]).tolist()))], [root]
        state[root] = 1
        while stack:
            v, children = stack[-1]
            w = next(children, None)
            if w is None:
                state[v] = 2
                stack.pop()
                path.pop()
            elif state[w] == 1:
                return path[path.index(w) :] + [w]
            elif state[w] == 0:
                state[w] = 1
                stack.append((w, iter(np.flatnonzero(adj[w]).tolist())))
                path.append(w)
    return None


def _truth_edges_bif(path: str) -> list[tuple[str, str]]:
    try:
        from pgmpy.readwrite import BIFReader
    except ImportError:
        raise BinaryDataError(f"{path}: reading a .bif truth needs pgmpy (pgmpy>=1.0,<1.3); install the extra: pip "
                              "install 'zoo[binary_dag]', or give the truth as an edge-list CSV source,target"
                              ) from None  # fmt: skip

    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                reader = BIFReader(string=fh.read())
        else:
            reader = BIFReader(path=path)
        variables, edges = [str(v) for v in reader.variable_names], reader.variable_edges
    except Exception as exc:  # pyparsing's and gzip's errors become one line naming the file
        raise BinaryDataError(f"{path}: not a readable BIF network ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:200]})") from None  # fmt: skip
    if not variables:
        raise BinaryDataError(f"{path}: no variable found; expected a BIF network (variable and probability blocks)")
    # a variable without edges is checked against the data too: (v, v) pairs are dropped after the check
    return [(str(a), str(b)) for a, b in edges] + [(v, v) for v in variables]


def _truth_edges_csv(path: str) -> list[tuple[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header = [h.strip() for h in rows[0]] if rows else []
    if header != ["source", "target"]:
        raise BinaryDataError(f"{path}: header {header}; expected source,target (one edge source -> target per row)")
    edges = []
    for r, row in enumerate(rows[1:], start=1):
        if not any(cell.strip() for cell in row):
            continue
        cells = [cell.strip() for cell in row]
        if len(cells) != 2 or not all(cells):
            raise BinaryDataError(f"{path}: edge row {r} is {row}; expected two variable names source,target")
        edges.append((cells[0], cells[1]))
    return edges


def read_truth(path: str, names: list[str]) -> np.ndarray:
    """The ground-truth DAG over ``names`` (column order): ``adj[i, j]`` iff ``names[i] -> names[j]``.

    Args:
        path: an edge-list CSV (header ``source,target``) or a ``.bif``/``.bif.gz`` network.
        names: the data's variable names.
    """
    if not Path(path).is_file():
        raise BinaryDataError(f"{path}: no such file (expected an edge-list CSV source,target or a .bif/.bif.gz)")
    is_bif = path.endswith((".bif", ".bif.gz"))
    edges = _truth_edges_bif(path) if is_bif else _truth_edges_csv(path)
    index = {v: i for i, v in enumerate(names)}
    adj = np.zeros((len(names), len(names)), dtype=bool)
    for r, (a, b) in enumerate(edges, start=1):
        for v in (a, b):
            if v not in index:
                known = ", ".join(names[:MAX_LISTED]) + (", …" if len(names) > MAX_LISTED else "")
                where = "" if is_bif else f" edge row {r}:"
                raise BinaryDataError(f"{path}:{where} unknown variable {v!r}; expected a data column ({known})")
        if not (is_bif and a == b):  # a BIF variable listed as (v, v) above
            adj[index[a], index[b]] = True
    if (cycle := find_cycle(adj)) is not None:
        raise BinaryDataError(f"{path}: the truth graph has a cycle {' -> '.join(names[i] for i in cycle)}; "
                              "expected a DAG")  # fmt: skip
    return adj
