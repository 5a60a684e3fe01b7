"""Event serialization (card rawmed, tests 3 and 4): time digits, DPE and type ids, tokenizer, lossless round trip."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.ehr.serialize import (
    BASE_TOKENS,
    SPECIALS,
    EventTokenizer,
    SerializationError,
    digits_time,
    encode_frame,
    format_number,
    frame_tokens,
    number_dpe,
    parse_event,
    serialize_event,
    time_digits,
    time_len,
)
from datamodules.ehr.tables import TABLE_SPECS, TABLES

torch.set_num_threads(1)


def _random_rows(table: str, n: int, rng: np.random.Generator) -> list[dict]:
    """Rows with every column, random nulls, numbers of up to 6 dp and both signs, text with digits and glue."""
    spec = TABLE_SPECS[table]
    words = ["Potassium Chloride", "NaCl 0.9%", "01-Drips", "5000 Unit / mL Vial", "4.1", "-3", "mcg/kg/min", "___",
             "20mEq Packet", "a-b.c", "x 1.2.3 y"]  # fmt: skip
    rows = []
    for _ in range(n):
        row = {}
        for col in spec.columns:
            if rng.random() < 0.3 and col != spec.item:
                continue
            if col in spec.numeric:
                row[col] = float(np.round(rng.choice([-1, 1]) * 10 ** rng.uniform(-5, 8.5), rng.integers(0, 7)))
            else:
                row[col] = str(rng.choice(words))
        rows.append(row)
    return rows


def _expected(table: str, row: dict) -> dict:
    numeric = TABLE_SPECS[table].numeric
    return {c: round(v, 4) + 0.0 if c in numeric else v for c, v in row.items()}


def test_time_digits_examples() -> None:
    """725 -> [7, 2] -> 720; 0 -> [0, 0]; 2 digits at 6 and 12 h, 3 at 24 h. Catches rounding τ instead of flooring
    (725 -> 73), no zero padding, or a digit count from obs_hours * 60 instead of obs_hours * 6 - 1."""
    assert time_digits(725, 12) == [7, 2] and digits_time([7, 2]) == 720
    assert time_digits(0, 12) == [0, 0] and digits_time([0, 0]) == 0
    assert time_digits(9, 12) == [0, 0] and time_digits(10, 12) == [0, 1]
    assert (time_len(6), time_len(12), time_len(24)) == (2, 2, 3)
    assert time_digits(1439, 24) == [1, 4, 3] and digits_time([1, 4, 3]) == 1430
    for minutes in range(0, 720, 7):
        assert digits_time(time_digits(minutes, 12)) == 10 * (minutes // 10)


def test_time_digits_reject_negative_and_overflow() -> None:
    """A negative time or a τ needing more digits raises instead of writing a wrong or wider sequence."""
    with pytest.raises(SerializationError):
        time_digits(-1, 12)
    with pytest.raises(SerializationError):
        time_digits(1000, 12)


def test_dpe_of_95_25_and_words() -> None:
    """'95.25' -> DPE [5, 4, 13, 3, 2]; words, '-' and the table/column tokens -> 14. Catches places counted from the
    left, the '.' given a digit id, or places shifted by one."""
    assert number_dpe("95.25") == [5, 4, 13, 3, 2]
    assert number_dpe("-0.0001") == [14, 4, 13, 3, 2, 1, 0]
    assert number_dpe("123456789") == [12, 11, 10, 9, 8, 7, 6, 5, 4]
    tokens = serialize_event("labevents", {"itemid": "Sodium", "valuenum": 95.25, "valueuom": "mEq/L"})
    assert [t for t, _, _ in tokens] == ["labevents", "itemid", "Sodium", "valuenum", "9", "5", ".", "2", "5",
                                         "valueuom", "mEq/L"]  # fmt: skip
    assert [d for _, _, d in tokens] == [14, 14, 14, 14, 5, 4, 13, 3, 2, 14, 14]
    assert [ty for _, ty, _ in tokens] == [1, 2, 3, 2, 3, 3, 3, 3, 3, 2, 3]


def test_numbers_rounded_to_4dp_shortest_form() -> None:
    """Numbers are rounded to 4 dp and written in the shortest decimal form; >= 1e9 and non-finite raise.
    Catches a fixed-width format ('3.0000'), '-0', exponent notation, or a silent clip of big values."""
    assert format_number(3.0) == "3" and format_number(1.23456) == "1.2346" and format_number(-0.00001) == "0"
    assert format_number(0.0001) == "0.0001" and format_number(123456789.12341) == "123456789.1234"
    assert format_number(12345.678911) == "12345.6789"
    for bad in (1e9, -2e9, math.inf, math.nan):
        with pytest.raises(SerializationError):
            format_number(bad)
    with pytest.raises(SerializationError):
        serialize_event("labevents", {"itemid": "x", "valuenum": 1e9})


@pytest.mark.parametrize("table", TABLES)
def test_round_trip_table_text_ids_text_table(table: str) -> None:
    """table -> text -> ids -> text -> table is lossless at 4 dp with nulls (card test 4). Catches dropped nulls
    written as 'nan', numbers not rounded, lost spaces or glue inside text, and a decode that stops early."""
    rng = np.random.default_rng(0)
    rows = _random_rows(table, 200, rng)
    texts = [serialize_event(table, r) for r in rows]
    tok = EventTokenizer().fit([t for t, _, _ in ev] for ev in texts)
    for row, ev in zip(rows, texts, strict=True):
        ids, types, dpe = tok.encode(ev, L=256)
        parsed = parse_event(tok.decode(ids))
        assert parsed == (table, _expected(table, row))
        assert "nan" not in [t.lower() for t, _, _ in ev]


def test_round_trip_in_text_time() -> None:
    """With time_mode in_text the event reads `<table> time <digits> ...` (type 4) and parses back to the minutes.
    Catches the time put after the columns, typed as a value, or lost in parsing."""
    row = {"drug": "Heparin", "dose_val_rx": 5000.0, "route": "SC"}
    ev = serialize_event("prescriptions", row, time_digits=time_digits(725, 12))
    assert [(t, ty) for t, ty, _ in ev[:4]] == [("prescriptions", 1), ("time", 4), ("7", 4), ("2", 4)]
    assert parse_event([t for t, _, _ in ev]) == ("prescriptions", row, 720)
    assert parse_event([t for t, _, _ in serialize_event("prescriptions", row)]) == ("prescriptions", row)


def test_tokenizer_layout_encode_decode() -> None:
    """Vocabulary [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3, digits, '.', '-', sorted words; [CLS] first, [SEP] last before
    padding (type 5, 6, pad 0); unknown words -> [UNK]; truncation keeps [SEP]; state round trip. Catches a vocabulary
    order that depends on data order, a missing [SEP] after truncation, or pads typed as values."""
    ev = serialize_event("labevents", {"itemid": "Sodium", "valuenum": 95.25, "flag": "abnormal"})
    tok = EventTokenizer().fit([["zeta", "alpha"], [t for t, _, _ in ev]])
    assert tok.vocab[:4] == list(SPECIALS) and tok.vocab[4:16] == list(BASE_TOKENS)
    assert tok.vocab[16:] == sorted(tok.vocab[16:]) and "alpha" in tok.vocab
    ids, types, dpe = tok.encode(ev, L=16)
    n = len(ev)
    assert ids[0] == 2 and ids[n + 1] == 3 and (ids[n + 2 :] == 0).all()
    assert types[0] == 5 and types[n + 1] == 6 and (types[n + 2 :] == 0).all()
    assert tok.decode(ids) == [t for t, _, _ in ev]
    short = tok.encode(ev, L=6)[0]
    assert short.tolist()[0] == 2 and short.tolist()[-1] == 3 and tok.decode(short) == [t for t, _, _ in ev][:4]
    assert tok.encode([("never-seen", 3, 14)], L=4)[0].tolist() == [2, 1, 3, 0]
    again = EventTokenizer.from_state(tok.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(again.encode(ev, L=16), tok.encode(ev, L=16), strict=True))
    assert all(isinstance(w, str) for w in tok.state_dict()["vocab"])


def test_parse_event_rejects_malformed_text() -> None:
    """Unparseable text gives None: unknown table, value before any column, a column without a value, letters in a
    numeric column. Catches a parser that invents fields or raises."""
    assert parse_event(["labevent", "itemid", "x"]) is None
    assert parse_event(["labevents", "Sodium"]) is None
    assert parse_event(["labevents", "itemid", "valuenum", "1"]) is None
    assert parse_event(["labevents", "itemid", "Na", "valuenum", "1", "a"]) is None
    assert parse_event([]) is None


@pytest.mark.parametrize("obs", [None, 12])
def test_encode_frame_equals_encode_of_serialize_event(obs: int | None) -> None:
    """The vectorised frame encoder (one serialization per distinct value, scattered by position) equals
    tokenizer.encode(serialize_event(row)) row by row, truncation included, in both time modes; frame_tokens yields
    the vocabulary of the per-row tokens. Catches rows mixed up between tables, segments misaligned after nulls, a
    [SEP] misplaced after truncation, or time digits in the wrong order."""
    rng = np.random.default_rng(1)
    frames = []
    for table in TABLES:
        rows = _random_rows(table, 30, rng)
        frames.append(pd.DataFrame(rows).assign(table=table, time=rng.integers(0, 720, len(rows))))
    events = pd.concat(frames, ignore_index=True).sample(frac=1.0, random_state=0).reset_index(drop=True)
    reference = []
    for _, row in events.iterrows():
        fields = {c: v for c, v in row.items() if c not in ("table", "time")}
        digits = None if obs is None else time_digits(int(row["time"]), obs)
        reference.append(serialize_event(row["table"], fields, time_digits=digits))
    tok = EventTokenizer().fit(frame_tokens(events, obs))
    assert tok.vocab == EventTokenizer().fit([t for t, _, _ in ev] for ev in reference).vocab
    for L in (40, 128):
        ids, types, dpe, truncated = encode_frame(tok, events, L, obs)
        assert truncated == sum(len(ev) > L - 2 for ev in reference)
        for k, ev in enumerate(reference):
            ref = tok.encode(ev, L)
            assert torch.equal(ids[k], ref[0]) and torch.equal(types[k], ref[1]) and torch.equal(dpe[k], ref[2])
    assert 0 < sum(len(ev) > 38 for ev in reference) < len(reference)
