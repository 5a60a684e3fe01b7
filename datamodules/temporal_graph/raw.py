"""The raw temporal edge stream every reader returns, its error type and the shared table parsing."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from zoo.core.messages import say


class TemporalFormatError(ValueError):
    """A temporal-graph file does not match its documented layout.

    The message names the file, the 1-based line (or array row), what was expected and what was found.
    """


@dataclass
class RawTemporal:
    """A parsed event stream in the zoo's internal ID convention, before splitting and negative sampling.

    Attributes:
        name: dataset name (``wikipedia``, ``tgbl-review``, ``seen_unseen_cluster`` ...).
        source: human-readable origin (file path(s)) for messages.
        src: int64 (E,) 1-based source ids.
        dst: int64 (E,) 1-based destination ids.
        t: float64 (E,) non-decreasing timestamps.
        msg: float32 (E, F) edge features, F >= 1 (a single 1.0 column when the format has none).
        label: int64 (E,) state labels (0 when the format has none).
        split: int8 (E,) 0/1/2 when the format fixes the split (TGB-Seq, TGB's own 70/15/15), else ``None``.
        eval_neg: shipped evaluation negatives per split name, (n_split, Kmax) int64, 0 = padding, rows in the event
            order of that split.
        eval_neg_mask: same shapes, True = valid negative.
        node_feat: optional (num_nodes, D) float32 node features (DyGLib ``_node.npy``).
    """

    name: str
    source: str
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    msg: np.ndarray
    label: np.ndarray
    split: np.ndarray | None = None
    eval_neg: dict[str, np.ndarray] = field(default_factory=dict)
    eval_neg_mask: dict[str, np.ndarray] = field(default_factory=dict)
    node_feat: np.ndarray | None = None


def missing_file(path: Path | str, what: str) -> FileNotFoundError:
    """Build the zoo's "missing file" error: names the expected path and says that downloads are disabled.

    Args:
        path: the expected file or folder.
        what: what was looked for (``"JODIE csv"``, ``"data path"``, ...).

    Returns:
        The error, to be raised by the caller.
    """
    return FileNotFoundError(
        f"{path}: {what} not found. Downloads are disabled (the zoo never downloads, TGB `download=True` and the "
        "TGB-Seq hub fetch are bypassed): place the file at this path or point --data.init_args.path at it"
    )


def load_npy(path: Path, what: str = "array") -> np.ndarray:
    """``np.load`` of a side ``.npy`` (no pickles) whose failure names the file (a truncated or foreign file)."""
    with path.open("rb") as fh:
        if fh.read(6) != b"\x93NUMPY":  # numpy would try it as a pickle and suggest allow_pickle
            raise TemporalFormatError(f"{path}: not a readable .npy {what} (no .npy header; write it with numpy.save)")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    raise TemporalFormatError(f"{path}: not a readable .npy {what} ({problem})")


def real_features(x: np.ndarray, path: Path) -> np.ndarray:
    """A 2-d feature array as float32; its dtype must be real numbers and every value finite (else naming the row)."""
    if x.dtype.kind not in "iuf":  # astype(float32) would read bools as 0/1 and strings such as '0.5' as numbers
        raise TemporalFormatError(f"{path}: expected real-valued features, found dtype {x.dtype}")
    bad = np.argwhere(~np.isfinite(x))
    if bad.size:
        row, col = (int(v) for v in bad[0])
        raise TemporalFormatError(
            f"{path}: row {row}, column {col + 1}: expected a finite feature, found {x[row, col].item()!r}"
        )
    return x.astype(np.float32)


def time_quantile_split(t: np.ndarray, val_ratio: float, test_ratio: float) -> np.ndarray:
    """Chronological split by time quantiles (DyGLib / TGB ``generate_splits``); equal timestamps stay together.

    Args:
        t: float64 (E,) timestamps.
        val_ratio: fraction of the time quantiles given to validation.
        test_ratio: fraction given to test.

    Returns:
        int8 (E,): 0 for ``t <= q(1-val-test)``, 1 for ``t <= q(1-test)``, 2 above.
    """
    q_val, q_test = np.quantile(t, [1.0 - val_ratio - test_ratio, 1.0 - test_ratio])
    split = np.zeros(len(t), dtype=np.int8)
    split[t > q_val] = 1
    split[t > q_test] = 2
    return split


# --------------------------------------------------------------------------------------------------------------
# Vectorised CSV parsing with line-accurate errors
# --------------------------------------------------------------------------------------------------------------


@dataclass
class _Table:
    """A parsed CSV body with what is needed to name lines in errors."""

    frame: pd.DataFrame
    header: list[str]
    first_line: int  # 1-based line number of the first data row
    display: str


def _read_table(
    data: bytes, display: str, *, header_lines: int, str_cols: tuple[int, ...] = (), layout: str = ""
) -> _Table:
    """Check field counts line by line (vectorised over the raw bytes), then parse with pandas' C engine.

    Args:
        data: the file's bytes.
        display: file name used in error messages.
        header_lines: number of leading lines that are not data (0 or 1).
        str_cols: columns kept as strings (TGB string IDs).
        layout: the expected header, for the message when line 1 is a data row.

    Returns:
        The parsed table.

    Raises:
        TemporalFormatError: no data row, a header line that is all numbers (a file without its header: the first
            event would be skipped as the header), or a line whose field count differs from the first data row's.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    data = data.rstrip(b"\n")  # trailing blank lines are not rows
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    n_lines = (len(newlines) + 1) if len(buf) else 0
    if n_lines <= header_lines:
        raise TemporalFormatError(
            f"{display}: expected {header_lines} header line(s) and at least one data row, found {n_lines} line(s)"
        )
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(buf)]))
    commas = np.flatnonzero(buf == 44)
    fields = np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1
    del commas
    header = data[: ends[header_lines - 1]].decode("utf-8", "replace").split(",") if header_lines else []
    if header_lines and all(_is_number(h) for h in header):
        raise TemporalFormatError(
            f"{display}: line 1: expected the header{f' ({layout})' if layout else ''}, found a data row "
            f"{','.join(header)!r} (the first line is never read as an event: add the header line)"
        )
    body = fields[header_lines:]
    expected = int(body[0])
    bad = np.flatnonzero(body != expected)
    if bad.size:
        i = int(bad[0])
        raise TemporalFormatError(
            f"{display}: line {header_lines + i + 1}: expected {expected} comma-separated fields (as in the first "
            f"data row, line {header_lines + 1}), found {int(body[i])}"
        )
    frame = pd.read_csv(
        io.BytesIO(data),
        header=None,
        skiprows=header_lines,
        dtype={c: str for c in str_cols} if str_cols else None,
        keep_default_na=False,
        na_values=[],
        skip_blank_lines=False,
        engine="c",
        low_memory=False,
    )
    return _Table(frame=frame, header=[h.strip() for h in header], first_line=header_lines + 1, display=display)


def _is_number(field: str) -> bool:
    """Whether a CSV field reads as a number (a header name never does)."""
    try:
        float(field)
    except ValueError:
        return False
    return True


def _numeric(tab: _Table, col: int, what: str, *, integer: bool = False, minimum: float | None = None) -> np.ndarray:
    """Column ``col`` of ``tab`` as a finite float64/int64 array, or a TemporalFormatError naming the first bad line.

    An ``integer`` column takes whole numbers, also written as floats (``3.0``: DyGLib writes its labels so); a
    fraction, a word, an empty field or a non-finite value is an error.

    Args:
        tab: the parsed table.
        col: 0-based column index.
        what: column meaning for the message (``"timestamp"``, ``"user id"`` ...).
        integer: require integer values and return int64.
        minimum: smallest allowed value.

    Returns:
        The column values.
    """
    series = tab.frame.iloc[:, col]
    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        coerced = pd.to_numeric(series.astype(str), errors="coerce")
        values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
        if not np.isfinite(values).all():
            i = int(np.flatnonzero(~np.isfinite(values))[0])
            raise TemporalFormatError(
                f"{tab.display}: line {tab.first_line + i}: expected a number in column {col + 1} ({what}), "
                f"found {series.iloc[i]!r}"
            )
        series = coerced
    values = series.to_numpy(dtype=np.float64)
    if not np.isfinite(values).all():
        i = int(np.flatnonzero(~np.isfinite(values))[0])
        raise TemporalFormatError(
            f"{tab.display}: line {tab.first_line + i}: expected a finite number in column {col + 1} ({what}), "
            f"found {values[i].item()!r}"
        )
    if integer and pd.api.types.is_float_dtype(series):
        frac = np.flatnonzero(values != np.floor(values))
        if frac.size:
            i = int(frac[0])
            raise TemporalFormatError(
                f"{tab.display}: line {tab.first_line + i}: expected an integer in column {col + 1} ({what}), "
                f"found {values[i].item()!r}"
            )
    if minimum is not None and values.size and values.min() < minimum:
        i = int(np.flatnonzero(values < minimum)[0])
        raise TemporalFormatError(
            f"{tab.display}: line {tab.first_line + i}: expected {what} >= {minimum:g} in column {col + 1}, "
            f"found {values[i].item()!r}"
        )
    if integer:
        return series.to_numpy(dtype=np.int64)
    return values


def _features(tab: _Table, first_col: int, what: str) -> np.ndarray:
    """Columns ``first_col:`` as float32 (E, F); a single 1.0 column when there are none (feat0)."""
    n_rows, n_cols = tab.frame.shape
    if n_cols <= first_col:
        return np.ones((n_rows, 1), dtype=np.float32)
    block = tab.frame.iloc[:, first_col:]
    for k, dtype in enumerate(block.dtypes):
        if not pd.api.types.is_numeric_dtype(dtype):
            _numeric(tab, first_col + k, what)  # raises with the line
    msg = block.to_numpy(dtype=np.float32)
    if not np.isfinite(msg).all():
        row, k = (int(x[0]) for x in np.nonzero(~np.isfinite(msg)))
        raise TemporalFormatError(
            f"{tab.display}: line {tab.first_line + row}: expected a finite number in column "
            f"{first_col + k + 1} ({what}), found {msg[row, k].item()!r}"
        )
    return msg


def _order(t: np.ndarray, display: str, first_line: int, sort: bool) -> np.ndarray | None:
    """Check that timestamps never decrease; return a stable sort permutation when ``sort`` allows fixing them.

    Args:
        t: timestamps in file order.
        display: file name for messages.
        first_line: 1-based line of the first data row.
        sort: stable-sort (said on stderr) instead of raising.

    Returns:
        ``None`` when already sorted, else the stable permutation.
    """
    drops = np.flatnonzero(t[1:] < t[:-1])
    if drops.size == 0:
        return None
    i = int(drops[0]) + 1
    where = (
        f"line {first_line + i}: expected non-decreasing timestamps, found {t[i].item()!r} after {t[i - 1].item()!r}"
    )
    if not sort:
        raise TemporalFormatError(
            f"{display}: {where} (pass --data.init_args.sort=true to stable-sort the events by time)"
        )
    say(
        f"{display}: {drops.size} decreasing timestamp(s), first at {where}; stable-sorting events by time because "
        "--data.init_args.sort=true"
    )
    return np.argsort(t, kind="stable")


def _permute(raw: RawTemporal, perm: np.ndarray | None) -> RawTemporal:
    """Apply an event permutation to every per-event array of ``raw`` (split included)."""
    if perm is None:
        return raw
    raw.src, raw.dst, raw.t, raw.msg, raw.label = (a[perm] for a in (raw.src, raw.dst, raw.t, raw.msg, raw.label))
    if raw.split is not None:
        raw.split = raw.split[perm]
    return raw
