"""Post-processing of generated events into per-table CSVs (card ``rawmed``, "Post-processing").

A generated stay is a list of decoded events, each ``(minutes, tokens)`` (``minutes`` from the AR model's time
digits, or ``None`` when the text carries the time: ``time_mode: in_text``). Per the card:

1. parse the ``table col val …`` triples (the column order of the table: a column name is recognised only after the
   previous one, as :func:`datamodules.ehr.serialize.parse_event` reads them);
2. snap a misspelled table or column name to the nearest known one by Levenshtein distance (invalid if > 2:
   reconstruction; the word-level tokenizer cannot misspell, a sub-word one can);
3. strip stray characters from numeric fields (``12.3a`` → 12.3; still not a float → invalid);
4. check that times do not decrease within a stay (and lie in the observation window: a time at or after its end is
   an invalid event);
5. drop every stay with an invalid event; a stay whose times decrease is dropped (``nonmonotone: drop``, default)
   or its events sorted by time (``sort``);
6. return the stays as event tables in the folder format (``stay_id``, ``time``, then the table's columns).

:class:`PostStats` counts what happened: ``invalid_frac`` is per **event** (the revision gates it), the stay drop
rate beside it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from datamodules.ehr.serialize import TIME_WORD, digits_time, join_pieces
from datamodules.ehr.tables import TABLE_SPECS, TABLES

NonMonotone = Literal["drop", "sort"]
#: Largest Levenshtein distance at which a name is snapped to a known one (reconstruction).
MAX_EDITS = 2
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions) between two short strings."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def snap(name: str, known: Sequence[str], max_edits: int = MAX_EDITS) -> str | None:
    """``name`` if known, else the nearest known name within ``max_edits`` edits (ties: the first), else ``None``."""
    if name in known:
        return name
    best = min(known, key=lambda k: levenshtein(name, k), default=None)
    return best if best is not None and levenshtein(name, best) <= max_edits else None


def clean_number(text: str) -> float | None:
    """A numeric field: its text with stray characters stripped (``12.3a`` → 12.3), or ``None`` if no number is left.

    The first signed decimal in the text is kept when stray characters surround it; a text with two numbers in it
    (``1.2.3``, ``12a34``) is not a number.
    """
    found = _NUMBER.findall(text)
    if len(found) != 1:
        return None
    return float(found[0])


def parse_lenient(tokens: Sequence[str]) -> tuple[str, dict[str, Any], int | None] | None:
    """One generated event's tokens to ``(table, fields, minutes | None)``, snapping names; ``None`` if invalid."""
    tokens = [t for t in tokens if t]
    if not tokens:
        return None
    table = snap(tokens[0], TABLES)
    if table is None:
        return None
    spec = TABLE_SPECS[table]
    i, minutes = 1, None
    if i < len(tokens) and snap(tokens[i], (TIME_WORD,), 1) == TIME_WORD:
        i += 1
        digits = []
        while i < len(tokens) and len(tokens[i]) == 1 and tokens[i].isdigit():
            digits.append(int(tokens[i]))
            i += 1
        if not digits:
            return None
        minutes = digits_time(digits)
    order = {c: k for k, c in enumerate(spec.columns)}
    fields: dict[str, Any] = {}
    current, values, last = None, [], -1
    for tok in [*tokens[i:], None]:
        name = None
        if tok is not None:
            later = [c for c in spec.columns if order[c] > last]
            # an exact later column name, or a misspelled one (5+ characters, so short value words are never snapped)
            name = tok if tok in later else (snap(tok, later) if len(tok) >= 5 and not tok.startswith("##") else None)
        if tok is None or name is not None:
            if current is not None:
                if not values:
                    return None
                if current in spec.numeric:  # one token per character
                    number = clean_number("".join(v.removeprefix("##") for v in values))
                    if number is None:
                        return None
                    fields[current] = number
                else:
                    fields[current] = join_pieces(values)
            if tok is None:
                break
            current, values, last = name, [], order[name]
        elif current is None:
            return None
        else:
            values.append(tok)
    if spec.item not in fields:
        return None
    return table, fields, minutes


@dataclass
class PostStats:
    """What post-processing kept and dropped."""

    events: int = 0
    invalid_events: int = 0
    stays: int = 0
    dropped_invalid: int = 0
    dropped_nonmonotone: int = 0
    sorted_nonmonotone: int = 0

    @property
    def invalid_frac(self) -> float:
        """Share of generated events that could not be parsed (per event; the revision's gate)."""
        return self.invalid_events / self.events if self.events else 0.0

    @property
    def stay_drop_rate(self) -> float:
        """Share of generated stays dropped (an invalid event, or decreasing times with ``nonmonotone: drop``)."""
        return (self.dropped_invalid + self.dropped_nonmonotone) / self.stays if self.stays else 0.0

    def as_dict(self) -> dict[str, float]:
        """The counts and rates as floats (``gen/...`` metrics)."""
        counts = ("events", "invalid_events", "stays", "dropped_invalid", "dropped_nonmonotone", "sorted_nonmonotone")
        return {**{k: float(getattr(self, k)) for k in counts}, "invalid_frac": self.invalid_frac,
                "stay_drop_rate": self.stay_drop_rate}  # fmt: skip


def postprocess(stays: Sequence[Sequence[tuple[int | None, Sequence[str]]]], stay_ids: Sequence[int],
                nonmonotone: NonMonotone = "drop",
                window: int | None = None) -> tuple[list[int], dict[str, pd.DataFrame], PostStats]:  # fmt: skip
    """Generated stays to event tables in the folder format.

    Args:
        stays: per stay, its events as ``(minutes | None, tokens)``; ``minutes`` ``None`` means the text carries it.
        stay_ids: the id of each generated stay.
        nonmonotone: ``drop`` (default) or ``sort`` a stay whose times decrease.
        window: the observation window in minutes: an event at or after it is invalid (two time digits can write
            up to 990 minutes in a 720-minute window).

    Returns:
        The kept stay ids, the tables (every table present, possibly empty), and the counts.
    """
    stats = PostStats(stays=len(stays))
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    kept: list[int] = []
    for stay_id, events in zip(stay_ids, stays, strict=True):
        parsed = []
        bad = 0
        for minutes, tokens in events:
            stats.events += 1
            event = parse_lenient(tokens)
            when = minutes if minutes is not None else (event[2] if event is not None else None)
            if event is None or when is None or (window is not None and not 0 <= when < window):
                bad += 1
                continue
            parsed.append((int(when), event[0], event[1]))
        stats.invalid_events += bad
        if bad:
            stats.dropped_invalid += 1
            continue
        times = [p[0] for p in parsed]
        if any(b < a for a, b in zip(times, times[1:], strict=False)):
            if nonmonotone == "drop":
                stats.dropped_nonmonotone += 1
                continue
            stats.sorted_nonmonotone += 1
            parsed.sort(key=lambda p: p[0])
        kept.append(int(stay_id))
        for when, table, fields in parsed:
            rows[table].append({"stay_id": int(stay_id), "time": when, **fields})
    tables = {}
    for table in TABLES:
        spec = TABLE_SPECS[table]
        frame = pd.DataFrame(rows[table], columns=["stay_id", "time", *spec.columns])
        frame["stay_id"] = frame["stay_id"].astype(np.int64)
        frame["time"] = frame["time"].astype(np.int64)
        for column in spec.numeric:
            frame[column] = frame[column].astype(np.float64)
        for column in spec.columns:
            if column not in spec.numeric:
                frame[column] = frame[column].astype(object)
        tables[table] = frame.sort_values(["stay_id", "time"], kind="stable").reset_index(drop=True)
    return kept, tables, stats
