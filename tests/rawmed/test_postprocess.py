"""Post-processing of generated events (card test 9) and the training-free baselines."""

from __future__ import annotations

import numpy as np
import pandas as pd

from datamodules.ehr.serialize import serialize_event
from datamodules.ehr.tables import TABLE_SPECS, TABLES
from zoo.rawmed.baselines import SYNTHETIC_STAY0, copy_tables, marginal_tables
from zoo.rawmed.postprocess import clean_number, levenshtein, parse_lenient, postprocess, snap

LAB = {"itemid": "Potassium", "valuenum": 3.4, "ref_range_lower": 3.5, "ref_range_upper": 5.1, "value": "3.4",
       "valueuom": "mEq/L", "flag": "abnormal", "priority": "STAT"}  # fmt: skip


def _tokens(table: str, row: dict) -> list[str]:
    return [t for t, _, _ in serialize_event(table, row)]


def test_levenshtein_and_snapping_follow_the_card() -> None:
    """Card test 9: ``valeuom`` → ``valueuom`` (2 edits); a name 3 edits away is not snapped."""
    assert levenshtein("valeuom", "valueuom") == 1 and levenshtein("kitten", "sitting") == 3
    assert snap("valeuom", TABLE_SPECS["labevents"].columns) == "valueuom"
    assert snap("labevnts", TABLES) == "labevents"
    assert snap("xyzevents", TABLES) is None


def test_a_misspelled_column_and_stray_characters_are_repaired() -> None:
    """Card test 9: the event parses with ``valeuom`` snapped and ``12.3a`` read as 12.3."""
    tokens = _tokens("labevents", {**LAB, "valuenum": 12.3})
    tokens[tokens.index("valueuom")] = "valeuom"
    where = tokens.index("ref_range_lower")
    tokens.insert(where, "a")  # a stray character at the end of the valuenum digits
    table, fields, minutes = parse_lenient(tokens)
    assert (table, minutes) == ("labevents", None)
    assert fields["valuenum"] == 12.3 and fields["valueuom"] == "mEq/L" and fields["flag"] == "abnormal"
    assert clean_number("12.3a") == 12.3 and clean_number("1.2.3") is None and clean_number("abc") is None


def test_round_trip_of_serialized_events_is_exact() -> None:
    """Every table's serialized event parses back to the same fields (no snapping needed)."""
    rows = {"labevents": LAB,
            "prescriptions": {"drug": "Potassium Chloride", "doses_per_24_hrs": 1.0, "dose_val_rx": 20.0,
                              "form_val_disp": 20.0, "drug_type": "MAIN", "prod_strength": "20mEq Packet",
                              "dose_unit_rx": "mEq", "route": "PO/NG"},
            "inputevents": {"itemid": "Norepinephrine", "amount": 1.2345, "rate": 0.05, "patientweight": 81.5,
                            "amountuom": "mg", "rateuom": "mcg/kg/min", "isopenbag": "0"}}  # fmt: skip
    for table, row in rows.items():
        assert parse_lenient(_tokens(table, row)) == (table, row, None)


def test_an_unparseable_number_drops_the_stay_and_is_counted() -> None:
    """Card test 9 and the revision: invalid_frac is per event; the stay with the bad event is dropped whole."""
    good = _tokens("labevents", LAB)
    bad = _tokens("labevents", LAB)
    i = bad.index("valuenum") + 1
    bad[i : i + 3] = ["x", "y", "z"]  # no digit left in the number
    stays = [[(0, good), (10, good)], [(0, good), (20, bad)], [(30, good), (10, good)]]
    kept, tables, stats = postprocess(stays, [1, 2, 3], "drop")
    assert kept == [1] and stats.events == 6 and stats.invalid_events == 1
    assert stats.invalid_frac == 1 / 6 and stats.dropped_invalid == 1 and stats.dropped_nonmonotone == 1
    assert stats.stay_drop_rate == 2 / 3
    kept, tables, stats = postprocess(stays, [1, 2, 3], "sort")
    assert kept == [1, 3] and stats.sorted_nonmonotone == 1
    assert tables["labevents"].loc[tables["labevents"]["stay_id"] == 3, "time"].tolist() == [10, 30]


def test_tables_have_the_exact_headers_and_types() -> None:
    """Card test 9: every table is present with ``stay_id, time`` and its columns in order, numeric as float."""
    kept, tables, _ = postprocess([[(0, _tokens("labevents", LAB))]], [7])
    for table in TABLES:
        assert list(tables[table].columns) == ["stay_id", "time", *TABLE_SPECS[table].columns]
    lab = tables["labevents"]
    assert lab["valuenum"].dtype == np.float64 and lab["stay_id"].tolist() == [7] and pd.isna(lab["comments"][0])


def _train() -> tuple[list[int], dict[str, pd.DataFrame]]:
    rng = np.random.default_rng(0)
    stays = [1, 2, 3, 4]
    lab = pd.DataFrame({"stay_id": [1, 1, 2, 3, 3, 3], "time": [5, 17, 40, 0, 200, 650],
                        "itemid": ["A", "B", "A", "C", "A", "B"], "valuenum": rng.normal(size=6)})  # fmt: skip
    tables = {"labevents": lab.reindex(columns=["stay_id", "time", *TABLE_SPECS["labevents"].columns])}
    return stays, tables


def test_copy_returns_the_train_stays_with_new_ids() -> None:
    """The copy baseline: the same rows (times floored to 10 min) under ids from ``SYNTHETIC_STAY0``."""
    stays, tables = _train()
    new, out = copy_tables(stays, tables)
    assert new == [SYNTHETIC_STAY0 + i for i in range(4)]
    lab = out["labevents"]
    assert lab["time"].tolist() == [0, 10, 40, 0, 200, 650] and lab["itemid"].tolist() == list("ABACAB")
    assert lab["stay_id"].tolist() == [SYNTHETIC_STAY0 + i for i in (0, 0, 1, 2, 2, 2)]


def test_marginal_draws_counts_times_and_columns_from_the_train_marginals() -> None:
    """The marginal baseline: counts from the per-stay distribution (a stay with no event included), values and times
    only from the train values, columns drawn independently (the item-value pairing is broken)."""
    stays, tables = _train()
    new, out = marginal_tables(stays, tables, n_stays=4000, seed=1)
    lab = out["labevents"]
    counts = lab.groupby("stay_id").size().reindex(new, fill_value=0)
    assert set(counts.unique()) <= {0, 1, 2, 3} and abs((counts == 0).mean() - 0.25) < 0.03
    assert set(lab["time"]) <= {0, 10, 40, 200, 650} and set(lab["itemid"]) == {"A", "B", "C"}
    assert set(lab["valuenum"]) <= set(tables["labevents"]["valuenum"])
    pairs = lab.groupby("itemid")["valuenum"].nunique()
    assert (pairs > 2).all()  # each item takes values of the other items: independent columns


def test_a_time_outside_the_window_is_an_invalid_event() -> None:
    """Two time digits can write 990 minutes; at 12 h an event at 720 or later is invalid and drops its stay."""
    good = _tokens("labevents", LAB)
    kept, _, stats = postprocess([[(0, good), (790, good)], [(710, good)]], [1, 2], window=720)
    assert kept == [2] and stats.invalid_events == 1 and stats.dropped_invalid == 1
