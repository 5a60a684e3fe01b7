"""Event serialization: a table row becomes ``<table> <col> <val> ...`` tokens with type and digit-place ids.

Card ``rawmed`` (Serialization, Time). Token types: pad 0, table 1, column 2, value 3, time 4, cls 5, sep 6. Digit-place
(DPE) ids: a digit at place 10^p (p in [-4, 8]) gets p + 4, ``.`` gets 13, everything else 14.

Numbers (numeric columns, and number runs inside categorical text) are written one token per character of their
shortest decimal form after rounding to 4 dp. Categorical text is split into words, single digits, ``.`` and ``-``;
a piece glued to the previous one (no whitespace between) carries a ``##`` prefix (reconstruction: see README), so the
text is rebuilt exactly up to whitespace runs, which become single spaces.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from datamodules.ehr.tables import TABLE_SPECS, TABLES

PAD_TYPE, TABLE_TYPE, COLUMN_TYPE, VALUE_TYPE, TIME_TYPE, CLS_TYPE, SEP_TYPE = range(7)
#: DPE id of ``.`` and of every non-digit token.
DPE_DOT, DPE_OTHER = 13, 14
#: Places p of 10^p a digit may have (values >= 1e9 raise).
MIN_PLACE, MAX_PLACE = -4, 8
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID = range(4)
#: Tokens that follow the specials in every vocabulary.
BASE_TOKENS = (*(str(d) for d in range(10)), ".", "-")
#: The word that opens the time of an event with ``time_mode: in_text``.
TIME_WORD = "time"
GLUE = "##"

_PIECES = re.compile(r"\d|[.\-]|[^\s\d.\-]+")
_NUMBER_CHARS = frozenset("0123456789.")


class SerializationError(ValueError):
    """A value that cannot be serialized (not finite, or >= 1e9 in magnitude), or a time outside the window."""


def time_len(obs_hours: int) -> int:
    """Number of time digits: ``len(str(obs_hours * 6 - 1))`` (2 for 6 or 12 h, 3 for 24 h)."""
    return len(str(obs_hours * 6 - 1))


def time_digits(minutes: int, obs_hours: int) -> list[int]:
    """τ = ``minutes // 10`` as ``time_len(obs_hours)`` zero-padded digits (725 -> [7, 2] at 12 h, decoded as 720).

    The window itself (``0 <= minutes < obs_hours * 60``) is the cohort's job; here τ only has to fit the digits.

    Raises:
        SerializationError: a negative time or a τ with more than ``time_len(obs_hours)`` digits.
    """
    n = time_len(obs_hours)
    tau = int(minutes) // 10
    if not 0 <= tau < 10**n:
        raise SerializationError(
            f"time {minutes} min: expected 0 <= minutes // 10 < {10**n} ({n} digits at obs_hours={obs_hours})"
        )
    return [int(c) for c in str(tau).zfill(n)]


def digits_time(digits: Sequence[int]) -> int:
    """Minutes of time digits: ``10 * int(digits)`` ([7, 2] -> 720)."""
    return 10 * int("".join(str(int(d)) for d in digits)) if len(digits) else 0


def format_number(value: float) -> str:
    """The shortest decimal form of ``value`` rounded to 4 dp (``95.25``, ``3``, ``-0.0001``).

    Raises:
        SerializationError: a non-finite value or ``|value| >= 1e9``.
    """
    value = float(value)
    if not math.isfinite(value) or abs(value) >= 1e9:
        raise SerializationError(f"value {value!r}: expected a finite number with |value| < 1e9")
    text = repr(round(value, 4) + 0.0)  # + 0.0 turns -0.0 into 0.0
    return text[:-2] if text.endswith(".0") else text


def number_dpe(text: str) -> list[int]:
    """DPE ids of a number's characters: a digit at place 10^p gets p + 4, ``.`` 13, ``-`` 14."""
    dot = text.find(".")
    end = len(text) if dot < 0 else dot
    out = []
    for j, ch in enumerate(text):
        if ch.isdigit():
            place = end - 1 - j if j < end else end - j
            out.append(place - MIN_PLACE if MIN_PLACE <= place <= MAX_PLACE else DPE_OTHER)
        else:
            out.append(DPE_DOT if ch == "." else DPE_OTHER)
    return out


def text_pieces(text: str) -> list[tuple[str, int]]:
    """Categorical text as (token, dpe id) pieces; a piece glued to the previous one carries the ``##`` prefix."""
    out: list[tuple[str, int]] = []
    prev_end = -1
    matches = list(_PIECES.finditer(str(text)))
    # DPE of number runs (digits with at most one '.') inside the text
    dpe = [DPE_OTHER] * len(matches)
    i = 0
    while i < len(matches):
        j = i
        while (
            j < len(matches)
            and matches[j].group() in _NUMBER_CHARS
            and (j == i or matches[j].start() == matches[j - 1].end())
        ):
            j += 1
        if (
            j > i
            and any(m.group().isdigit() for m in matches[i:j])
            and sum(m.group() == "." for m in matches[i:j]) <= 1
        ):
            dpe[i:j] = number_dpe("".join(m.group() for m in matches[i:j]))
            i = j
        else:
            i += 1
    for k, m in enumerate(matches):
        token = m.group()
        out.append((GLUE + token if m.start() == prev_end else token, dpe[k]))
        prev_end = m.end()
    return out


def join_pieces(tokens: Sequence[str]) -> str:
    """Inverse of :func:`text_pieces`: ``##`` pieces are glued, the others joined by one space."""
    parts: list[str] = []
    for t in tokens:
        if t.startswith(GLUE) and parts:
            parts[-1] += t[len(GLUE) :]
        else:
            parts.append(t.removeprefix(GLUE))
    return " ".join(parts)


def _is_null(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, pd.NA-safe for floats
    except (TypeError, ValueError):
        return False


def serialize_event(
    table: str, row: Mapping[str, Any], time_digits: Sequence[int] | None = None
) -> list[tuple[str, int, int]]:
    """One event as ``(token, type id, dpe id)`` triples over its non-null columns in ``spec.columns`` order.

    Args:
        table: one of :data:`~datamodules.ehr.tables.TABLES`.
        row: column -> value (missing keys and NaN/None are null).
        time_digits: with ``time_mode: in_text``, the τ digits written as ``time <digits>`` after the table token.

    Raises:
        SerializationError: an unknown table or a numeric value that cannot be written.
    """
    if table not in TABLE_SPECS:
        raise SerializationError(f"table {table!r}: expected one of {', '.join(TABLES)}")
    spec = TABLE_SPECS[table]
    out = [(table, TABLE_TYPE, DPE_OTHER)]
    if time_digits is not None:
        out.append((TIME_WORD, TIME_TYPE, DPE_OTHER))
        out.extend((str(int(d)), TIME_TYPE, DPE_OTHER) for d in time_digits)
    numeric = set(spec.numeric)
    for col in spec.columns:
        value = row.get(col)
        if _is_null(value):
            continue
        out.append((col, COLUMN_TYPE, DPE_OTHER))
        if col in numeric:
            try:
                text = format_number(value)
            except SerializationError as exc:
                raise SerializationError(f"{table}.{col}: {exc}") from None
            out.extend(zip(text, [VALUE_TYPE] * len(text), number_dpe(text), strict=True))
        else:
            out.extend((tok, VALUE_TYPE, dpe) for tok, dpe in text_pieces(str(value)))
    return out


def parse_event(tokens: Sequence[str]) -> tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], int | None] | None:
    """Inverse of :func:`serialize_event` on tokens: ``(table, fields)``, or ``None`` when unparseable.

    With ``time <digits>`` after the table token (``time_mode: in_text``) the result is ``(table, fields, minutes)``.
    Numeric fields are floats; categorical fields are text. A column name is recognised only after the previous
    column in ``spec.columns`` order, so a value word equal to an earlier column name is read as text.
    """
    tokens = list(tokens)
    if not tokens or tokens[0] not in TABLE_SPECS:
        return None
    spec = TABLE_SPECS[tokens[0]]
    i, minutes, has_time = 1, None, False
    if i < len(tokens) and tokens[i] == TIME_WORD:
        has_time, i = True, i + 1
        digits = []
        while i < len(tokens) and tokens[i].isdigit() and len(tokens[i]) == 1:
            digits.append(int(tokens[i]))
            i += 1
        minutes = digits_time(digits) if digits else None
    fields: dict[str, Any] = {}
    order = {c: k for k, c in enumerate(spec.columns)}
    current, values, last = None, [], -1
    for tok in [*tokens[i:], None]:
        if tok is None or (tok in order and order[tok] > last):
            if current is not None:
                if not values:
                    return None
                if current in spec.numeric:
                    try:
                        fields[current] = float("".join(values))
                    except ValueError:
                        return None
                else:
                    fields[current] = join_pieces(values)
            if tok is None:
                break
            current, values, last = tok, [], order[tok]
        elif current is None:
            return None
        else:
            values.append(tok)
    return (spec.name, fields, minutes) if has_time else (spec.name, fields)


class EventTokenizer:
    """Word-level vocabulary fitted on train text: ``[PAD] [UNK] [CLS] [SEP]``, digits, ``.``, ``-``, sorted words.

    Example:
        >>> tok = EventTokenizer().fit([[t for t, _, _ in serialize_event("labevents", {"itemid": "Sodium"})]])
        >>> ids, types, dpe = tok.encode(serialize_event("labevents", {"itemid": "Sodium"}), L=8)
    """

    def __init__(self, vocab: Sequence[str] | None = None) -> None:
        self.vocab: list[str] = list(vocab) if vocab is not None else [*SPECIALS, *BASE_TOKENS]
        self.index: dict[str, int] = {t: k for k, t in enumerate(self.vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    def fit(self, texts: Iterable[Iterable[str]]) -> EventTokenizer:
        """Build the vocabulary from token sequences (the train events' tokens); returns ``self``."""
        fixed = [*SPECIALS, *BASE_TOKENS]
        words = set()
        for text in texts:
            words.update(text)
        words.difference_update(fixed)
        self.vocab = [*fixed, *sorted(words)]
        self.index = {t: k for k, t in enumerate(self.vocab)}
        return self

    def state_dict(self) -> dict[str, list[str]]:
        """The vocabulary as primitives (``{"vocab": [...]}``)."""
        return {"vocab": list(self.vocab)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> EventTokenizer:
        """Rebuild from :meth:`state_dict`."""
        return cls(state["vocab"])

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """Token ids (``[UNK]`` for unknown tokens)."""
        return [self.index.get(t, UNK_ID) for t in tokens]

    def encode(self, tokens: Sequence[tuple[str, int, int]], L: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: N803
        """``(input_ids, type_ids, dpe_ids)``, each ``LongTensor (L,)``: ``[CLS]``, the tokens, ``[SEP]``, padding.

        An event longer than ``L - 2`` tokens is truncated before ``[SEP]``.
        """
        body = list(tokens)[: max(L - 2, 0)]
        ids = [CLS_ID, *self.ids(t for t, _, _ in body), SEP_ID]
        types = [CLS_TYPE, *(ty for _, ty, _ in body), SEP_TYPE]
        dpe = [DPE_OTHER, *(d for _, _, d in body), DPE_OTHER]
        pad = L - len(ids)
        return (
            torch.tensor(ids + [PAD_ID] * pad, dtype=torch.long),
            torch.tensor(types + [PAD_TYPE] * pad, dtype=torch.long),
            torch.tensor(dpe + [DPE_OTHER] * pad, dtype=torch.long),
        )

    def decode(self, input_ids: Sequence[int] | torch.Tensor) -> list[str]:
        """Tokens up to ``[SEP]`` (a leading ``[CLS]`` and any ``[PAD]`` are skipped)."""
        out = []
        for k, i in enumerate(input_ids.tolist() if isinstance(input_ids, torch.Tensor) else input_ids):
            if i == SEP_ID:
                break
            if (k == 0 and i == CLS_ID) or i == PAD_ID:
                continue
            out.append(self.vocab[i] if 0 <= i < len(self.vocab) else SPECIALS[UNK_ID])
        return out


def _column_pieces(events: pd.DataFrame, table: str, rows: np.ndarray) -> list[tuple[np.ndarray, list]]:
    """Per column of ``table`` in ``spec.columns`` order: (codes, pieces).

    ``codes`` index the rows into the column's distinct values (-1 = null); ``pieces`` are each distinct value's
    triples (the column token, then the value tokens).
    """
    out = []
    for col in TABLE_SPECS[table].columns:
        codes, uniques = pd.factorize(events[col].to_numpy()[rows], use_na_sentinel=True)
        out.append((codes, [serialize_event(table, {col: u})[1:] for u in uniques]))
    return out


def frame_tokens(events: pd.DataFrame, obs_hours: int | None = None) -> list[list[str]]:
    """Token lists whose union is the token set of every event of ``events`` (for :meth:`EventTokenizer.fit`).

    One list per table present and per distinct (column, value), so fitting costs per distinct value, not per row.
    """
    texts: list[list[str]] = []
    tables = events["table"].to_numpy()
    for table in TABLES:
        rows = np.flatnonzero(tables == table)
        if len(rows):
            texts.append([table, *([TIME_WORD] if obs_hours is not None else [])])
            texts.extend(
                [t for t, _, _ in piece] for _, pieces in _column_pieces(events, table, rows) for piece in pieces
            )
    return texts


def encode_frame(
    tokenizer: EventTokenizer,
    events: pd.DataFrame,
    L: int,
    obs_hours: int | None = None,  # noqa: N803
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """:func:`serialize_event` then :meth:`EventTokenizer.encode` of every row of a pooled events frame, vectorised.

    Each distinct (column, value) is serialized once; the rows' segments are scattered into the ``(N, L)`` arrays by
    token position, so no Python loop runs over the rows.

    Args:
        tokenizer: the fitted vocabulary.
        events: rows of :meth:`~datamodules.ehr.cohort.EHRCohort.events` (``table``, ``time`` and the columns).
        L: tokens per event (``[CLS]`` and ``[SEP]`` included).
        obs_hours: given, each event carries ``time <digits>`` of its ``time`` (``time_mode: in_text``).

    Returns:
        ``(input_ids, type_ids, dpe_ids)``, each ``LongTensor (N, L)``, and the number of events longer than
        ``L - 2`` tokens (truncated before ``[SEP]``).
    """
    n = len(events)
    ids = np.full((n, L), PAD_ID, dtype=np.int64)
    types = np.full((n, L), PAD_TYPE, dtype=np.int64)
    dpe = np.full((n, L), DPE_OTHER, dtype=np.int64)
    length = np.zeros(n, dtype=np.int64)  # body tokens written so far (before truncation)
    tables = events["table"].to_numpy()
    times = events["time"].to_numpy(np.int64)

    def put(rows: np.ndarray, start: np.ndarray, mats: tuple[np.ndarray, np.ndarray, np.ndarray], codes: np.ndarray,
            lens: np.ndarray) -> None:  # fmt: skip
        for j in range(mats[0].shape[1]):
            pos = 1 + start + j
            ok = (lens > j) & (pos < L - 1)
            r, c = rows[ok], codes[ok]
            ids[r, pos[ok]], types[r, pos[ok]], dpe[r, pos[ok]] = mats[0][c, j], mats[1][c, j], mats[2][c, j]

    for table in TABLES:
        rows = np.flatnonzero(tables == table)
        if not len(rows):
            continue
        head = [(table, TABLE_TYPE, DPE_OTHER)]
        if obs_hours is not None:
            head.append((TIME_WORD, TIME_TYPE, DPE_OTHER))
        segments = [(np.zeros(len(rows), dtype=np.int64), [head])]
        if obs_hours is not None:
            n_digits = time_len(obs_hours)
            tau = times[rows] // 10
            if (tau < 0).any() or (tau >= 10**n_digits).any():
                bad = int(times[rows][(tau < 0) | (tau >= 10**n_digits)][0])
                time_digits(bad, obs_hours)  # raises the one-line SerializationError
            for p in range(n_digits - 1, -1, -1):
                digit = (tau // 10**p) % 10
                segments.append((digit, [[(str(d), TIME_TYPE, DPE_OTHER)] for d in range(10)]))
        segments += _column_pieces(events, table, rows)
        start = np.zeros(len(rows), dtype=np.int64)
        for codes, pieces in segments:
            width = max((len(p) for p in pieces), default=0)
            lens_u = np.asarray([len(p) for p in pieces], dtype=np.int64)
            mats = tuple(np.zeros((max(len(pieces), 1), max(width, 1)), dtype=np.int64) for _ in range(3))
            for u, piece in enumerate(pieces):
                mats[0][u, : len(piece)] = tokenizer.ids(t for t, _, _ in piece)
                mats[1][u, : len(piece)] = [ty for _, ty, _ in piece]
                mats[2][u, : len(piece)] = [d for _, _, d in piece]
            lens = np.where(codes >= 0, lens_u[np.maximum(codes, 0)] if len(lens_u) else 0, 0)
            put(rows, start, mats, np.maximum(codes, 0), lens)
            start = start + lens
        length[rows] = start
    body = np.minimum(length, L - 2)
    ids[:, 0], types[:, 0] = CLS_ID, CLS_TYPE
    ids[np.arange(n), body + 1], types[np.arange(n), body + 1] = SEP_ID, SEP_TYPE
    return torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(dpe), int((length > L - 2).sum())
