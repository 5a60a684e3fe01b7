"""The MTTSeval-style metrics (card rawmed, Metrics; card tests 1, 2, 7, 8, 13, 14) and the evaluator command."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import ks_2samp

from zoo.rawmed import metrics as M
from zoo.rawmed.evaluate import main

torch.set_num_threads(1)

LABS = {  # label: (unit, lo, hi, median, sd of log, severity slope)
    "Creatinine": ("mg/dL", 0.5, 1.2, 1.1, 0.3, 0.35),
    "Potassium": ("mEq/L", 3.5, 5.1, 4.1, 0.08, 0.0),
    "Sodium": ("mEq/L", 135.0, 145.0, 139.0, 0.025, 0.0),
    "Platelet Count": ("K/uL", 150.0, 440.0, 190.0, 0.5, -0.3),
}


def _frame(table: str, data: dict) -> pd.DataFrame:
    spec = M.TABLE_SPECS[table]
    frame = pd.DataFrame(data)
    for col in spec.columns:
        if col not in frame:
            frame[col] = np.nan
    for col in spec.numeric:
        frame[col] = frame[col].astype(float)
    for col in spec.columns:
        if col not in spec.numeric:
            frame[col] = frame[col].astype(object).where(frame[col].notna(), np.nan)
    frame["time"] = frame["time"].astype(np.int64)
    frame["stay_id"] = frame["stay_id"].astype(np.int64)
    return frame[["stay_id", "time", *spec.columns]].sort_values(["stay_id", "time"], kind="mergesort")


def make_folder(n: int, seed: int, first_id: int = 0) -> M.Folder:
    """A small folder-format cohort with planted dependencies.

    Labs come in panels (shared times: zero gaps); creatinine rises and platelets fall with a latent severity; a
    per-stay potassium offset makes a low first-half potassium predict a second-half KCl order; norepinephrine goes
    with severity and its amount = rate · weight · 60 / 1000.
    """
    rng = np.random.default_rng(seed)
    stays = np.arange(first_id, first_id + n, dtype=np.int64)
    sev, k_off = rng.normal(size=n), rng.normal(0, 0.1, size=n)
    weight = np.round(np.clip(rng.normal(80, 15, size=n), 40, 150), 1)
    draws = rng.integers(3, 7, size=n)
    d_stay = np.repeat(np.arange(n), draws)
    d_time = 10 * rng.integers(0, 72, size=d_stay.size)
    d_cbc = rng.random(d_stay.size) < 0.6
    labs = []
    for label, (unit, lo, hi, med, sd, beta) in LABS.items():
        keep = d_cbc if label == "Platelet Count" else np.ones(d_stay.size, bool)
        idx = d_stay[keep]
        offset = k_off[idx] if label == "Potassium" else 0.0
        v = np.exp(np.log(med) + beta * sev[idx] + offset + sd * rng.normal(size=idx.size))
        v = np.round(v, 2 if label in ("Creatinine", "Potassium") else 1)
        labs.append(
            pd.DataFrame(
                {
                    "stay_id": stays[idx], "time": d_time[keep], "itemid": label, "valuenum": v,
                    "ref_range_lower": lo, "ref_range_upper": hi, "value": pd.Series(v).astype(str).to_numpy(),
                    "valueuom": unit, "flag": np.where((v < lo) | (v > hi), "abnormal", None),
                    "priority": np.where(rng.random(idx.size) < 0.3 + 0.2 * (sev[idx] > 1), "STAT", "ROUTINE"),
                    "comments": np.where(rng.random(idx.size) < 0.05, "___", None),
                }
            )
        )  # fmt: skip
    labs = pd.concat(labs, ignore_index=True)
    first = labs[(labs["itemid"] == "Potassium") & (labs["time"] < 360)].groupby("stay_id")["valuenum"].min()
    low = pd.Series(stays).map(first).fillna(9.0).to_numpy() < 4.05
    kcl = low & (rng.random(n) < 0.8) | (rng.random(n) < 0.05)
    hep = rng.random(n) < 0.5
    rx = pd.concat(
        [
            pd.DataFrame({"stay_id": stays[kcl], "time": 10 * rng.integers(36, 72, kcl.sum()),
                          "drug": "Potassium Chloride", "dose_val_rx": rng.choice([20.0, 40.0], kcl.sum()),
                          "prod_strength": "20mEq Tablet", "dose_unit_rx": "mEq", "route": "PO"}),
            pd.DataFrame({"stay_id": stays[hep], "time": 10 * rng.integers(0, 72, hep.sum()), "drug": "Heparin",
                          "dose_val_rx": 5000.0, "prod_strength": "5000 Unit/mL", "dose_unit_rx": "UNIT",
                          "route": "SC"}),
        ],
        ignore_index=True,
    )  # fmt: skip
    rx = rx.assign(
        doses_per_24_hrs=rng.choice([1.0, 2.0], len(rx)), form_val_disp=rx["dose_val_rx"], drug_type="MAIN",
        form_unit_disp="TAB",
    )  # fmt: skip
    norepi = rng.random(n) < np.where(sev > 0.5, 0.8, 0.05)
    recs = rng.integers(1, 4, size=n) * norepi
    i_stay = np.repeat(np.arange(n), recs)
    rate = 0.05 * np.exp(0.5 * rng.normal(size=i_stay.size) + 0.3 * sev[i_stay])
    inputs = pd.DataFrame(
        {
            "stay_id": stays[i_stay], "time": 10 * rng.integers(0, 72, i_stay.size), "itemid": "Norepinephrine",
            "amount": np.round(rate * weight[i_stay] * 60 / 1000, 4), "rate": np.round(rate, 4),
            "patientweight": weight[i_stay], "totalamount": 250.0, "amountuom": "mg", "rateuom": "mcg/kg/min",
            "ordercategoryname": "01-Drips", "totalamountuom": "mL", "isopenbag": "0",
        }
    )  # fmt: skip
    tables = {"labevents": _frame("labevents", labs), "prescriptions": _frame("prescriptions", rx)}
    tables["inputevents"] = _frame("inputevents", inputs)
    return list(stays), tables


@pytest.fixture(scope="module")
def splits() -> dict[str, M.Folder]:
    """One population of 1000 stays: train 400, test 200, holdout 200, and 200 unseen stays (an ideal generator)."""
    folder = make_folder(1000, seed=7)
    bounds = {"train": (0, 400), "test": (400, 600), "holdout": (600, 800), "fresh": (800, 1000)}
    return {name: subset(folder, range(a, b)) for name, (a, b) in bounds.items()}


def subset(folder: M.Folder, stays: range | list[int]) -> M.Folder:
    keep = list(stays)
    return keep, {t: f[f["stay_id"].isin(keep)].reset_index(drop=True) for t, f in folder[1].items()}


# --- card test 1: the distances -------------------------------------------------------------------------------------


def test_js_of_disjoint_supports_is_the_natural_log_distance() -> None:
    """Card test 1: disjoint supports give √ln 2 = 0.8326; JSD (0.693) or a base-2 log (1.0) would fail."""
    value = M.js_distance(pd.Series(["a", "a", "b"]), pd.Series(["c", "d"]))
    assert value == pytest.approx(math.sqrt(math.log(2)), abs=1e-4)
    assert value == pytest.approx(0.8326, abs=1e-4)


def test_ks_of_identical_samples_is_zero_and_js_of_identical_frequencies_too() -> None:
    """Card test 1: identical samples give KS 0 (and JS 0 for the same frequencies in another order)."""
    x = np.random.default_rng(0).normal(size=300)
    assert M.ks_distance(x, x.copy()) == 0.0
    assert M.js_distance(pd.Series(list("aab")), pd.Series(list("baa"))) == pytest.approx(0.0, abs=1e-12)


def test_grouped_distances_equal_scipy_within_each_group() -> None:
    """The vectorised per-item KS and JS equal scipy's per group (ties, unequal sizes): a wrong tie or group fails."""
    rng = np.random.default_rng(1)
    real = pd.DataFrame({"g": rng.choice(list("xyz"), 400), "v": rng.integers(0, 6, 400).astype(float)})
    syn = pd.DataFrame({"g": rng.choice(list("xyw"), 250), "v": rng.integers(1, 8, 250).astype(float)})
    real.loc[::7, "v"] = np.nan
    real["c"], syn["c"] = real["v"].astype(str), (syn["v"] // 2).astype(str)
    ks, js = M.grouped_ks(real, syn, "g", "v"), M.grouped_js(real, syn, "g", "c")
    assert sorted(ks.index) == ["x", "y"] and sorted(js.index) == ["x", "y"]
    for g in ("x", "y"):
        a, b = real.loc[real.g == g, "v"].dropna(), syn.loc[syn.g == g, "v"]
        assert ks[g] == pytest.approx(ks_2samp(a, b).statistic, abs=1e-12)
        p, q = real.loc[real.g == g, "c"].value_counts(), syn.loc[syn.g == g, "c"].value_counts()
        idx = p.index.union(q.index)
        assert js[g] == pytest.approx(jensenshannon(p.reindex(idx, fill_value=0), q.reindex(idx, fill_value=0)))


# --- card test 2: CorAcc bins and the association measures -------------------------------------------------------


def test_coracc_bins_follow_the_card_closures() -> None:
    """Card test 2: 0.1 → none, 0.1 + 1e-9 → weak+, −0.5 → medium−; every other closure as the card writes it."""
    values = [0.1, 0.1 + 1e-9, -0.5, -0.1, -0.1 - 1e-9, 0.3, 0.3 + 1e-9, 0.5, 0.5 + 1e-9, -0.3, -0.3 - 1e-9, -0.9]
    assert M.corr_bins(np.array(values)).tolist() == [0, 1, -2, 0, -1, 1, 2, 2, 3, -1, -2, -3]


def test_theils_u_is_asymmetric_on_a_many_to_one_pair() -> None:
    """Card test 2: x determines y but not back: U(y|x) = 1, U(x|y) = 0.5 (a symmetric measure fails)."""
    x, y = np.array([0, 1, 2, 3]), np.array([0, 0, 1, 1])
    assert M.theils_u(y, x) == pytest.approx(1.0)
    assert M.theils_u(x, y) == pytest.approx(0.5)
    assert M.theils_u(np.zeros(5, int), x[:1].repeat(5)) == 1.0  # H(x) = 0


def test_correlation_ratio_is_one_for_constant_distinct_groups() -> None:
    """Card test 2: values constant within groups and distinct across them give η = 1."""
    assert M.correlation_ratio(np.array([0, 0, 1, 1, 2]), np.array([3.0, 3.0, 5.0, 5.0, -1.0])) == pytest.approx(1.0)


def test_association_measures_match_hand_computations() -> None:
    """Pearson, η and U(x|y) against hand computations; a mis-weighted conditional entropy or a missing root fails."""
    r = M.pearson(np.array([1.0, 2, 3, 4]), np.array([2.0, 4, 5, 4]))
    assert r == pytest.approx(3.5 / math.sqrt(5 * 4.75))
    assert M.correlation_ratio(np.array([0, 0, 1, 1]), np.array([1.0, 2, 4, 5])) == pytest.approx(math.sqrt(9 / 10))
    h3 = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))  # H(x | y=0) with x = a, a, b
    expected = (math.log(2) - 0.75 * h3) / math.log(2)
    assert M.theils_u(np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1])) == pytest.approx(expected)


def test_association_matrix_places_each_measure_and_zeroes_nan() -> None:
    """C[x, y] = U(x|y) (not transposed), η in both cat–num cells, Pearson for num–num, NaN (constant) → 0."""
    frame = pd.DataFrame(
        {"a": [1.0, 2, 3, 4], "b": [2.0, 4, 5, 4], "k": [7.0] * 4, "x": list("pqrs"), "y": list("uuvv")}
    )
    c = M.association_matrix(frame, ["a", "b", "k"], ["x", "y"])
    assert c.loc["x", "y"] == pytest.approx(0.5) and c.loc["y", "x"] == pytest.approx(1.0)
    assert c.loc["a", "b"] == c.loc["b", "a"] == pytest.approx(3.5 / math.sqrt(5 * 4.75))
    eta = M.correlation_ratio(np.array([0, 0, 1, 1]), frame["a"].to_numpy())
    assert c.loc["a", "y"] == c.loc["y", "a"] == pytest.approx(eta)
    assert c.loc["k", "a"] == 0.0 and c.loc["k", "y"] == 0.0
    assert np.diag(c.to_numpy()).tolist() == [1.0] * 5


def test_pcc_is_zero_for_a_copy_and_detects_a_broken_dependency(splits: dict) -> None:
    """μ_abs 0 and CorAcc 1 for a copy; shuffling valuenum across rows breaks its η with the item: μ_abs grows."""
    real = splits["test"][1]
    same = M.pcc(real, {t: f.copy() for t, f in real.items()})
    assert same["pcc/mean"] == 0.0 and same["corr_acc/mean"] == 1.0
    broken = {t: f.copy() for t, f in real.items()}
    labs = broken["labevents"]
    labs["valuenum"] = labs["valuenum"].sample(frac=1.0, random_state=0).to_numpy()
    out = M.pcc(real, broken)
    assert out["pcc/labevents/mu_abs"] > 0.05 and out["corr_acc/labevents"] < 1.0


# --- card test 7: column marginals kept, items scrambled ---------------------------------------------------------


def test_permuting_values_across_items_keeps_cde_but_not_icde(splits: dict) -> None:
    """Card test 7: shuffled item labels keep every column marginal (CDE ≈ 0) but I-CDE ≥ 0.3 (a column-only I-CDE
    would give 0)."""
    real = {t: f if t == "labevents" else f.iloc[:0] for t, f in splits["test"][1].items()}  # the 4 lab items
    syn = {t: f.copy() for t, f in real.items()}
    labs = syn["labevents"]
    labs["itemid"] = labs["itemid"].sample(frac=1.0, random_state=1).to_numpy()
    assert M.cde(real, syn)["cde/mean"] == pytest.approx(0.0, abs=1e-12)
    icde = M.item_cde(real, syn)
    assert icde["icde/all"] >= 0.3 and icde["icde/coverage"] == 1.0
    assert M.item_scores(real["labevents"], labs, "labevents")["score"].min() >= 0.3


def test_icde_scores_an_absent_item_one_and_logs_coverage(splits: dict) -> None:
    """A real item missing from the synthetic data scores 1 and lowers the coverage (a skipped item would not)."""
    real = splits["test"][1]
    syn = {t: f.copy() for t, f in real.items()}
    syn["inputevents"] = syn["inputevents"].iloc[:0]
    out = M.item_cde(real, syn)
    n_items = out["icde/n_items"]
    assert out["icde/coverage"] == pytest.approx((n_items - 1) / n_items)
    assert out["icde/all"] == pytest.approx(1.0 / n_items)


def test_item_pcc_needs_min_rows_in_both(splits: dict) -> None:
    """I-PCC averages only items with ≥ min_rows rows in both frames; a copy scores 0."""
    real = splits["test"][1]
    out = M.item_pcc(real, {t: f.copy() for t, f in real.items()}, min_rows=100)
    counts = pd.concat([real[t][M.TABLE_SPECS[t].item].value_counts() for t in M.TABLES])
    assert out["ipcc/mean"] == 0.0 and out["ipcc/n_items"] == float((counts >= 100).sum())
    assert M.item_pcc(real, {t: f.copy() for t, f in real.items()}, min_rows=10_000)["ipcc/n_items"] == 0.0


# --- card test 8: time gaps -------------------------------------------------------------------------------------


def test_time_gap_ks_is_zero_for_copied_times_and_large_for_uniform_times(splits: dict) -> None:
    """Card test 8: copied timestamps give KS 0; uniform random times lose the zero gaps of panels: KS ≥ 0.3."""
    real = splits["test"][1]
    copied = {t: f.assign(valuenum=0.0) if t == "labevents" else f for t, f in real.items()}
    assert M.time_gap_ks(real, copied)["time_gap_ks/all"] == 0.0
    rng = np.random.default_rng(3)
    uniform = {t: f.assign(time=10 * rng.integers(0, 72, len(f))) for t, f in real.items()}
    out = M.time_gap_ks(real, uniform)
    assert out["time_gap_ks/all"] >= 0.3


def test_event_count_ks_counts_stays_without_events(splits: dict) -> None:
    """Stays listed without events count 0: a synthetic folder with half its stays empty has a large KS."""
    stays, tables = splits["test"]
    more = (stays + [10_000 + i for i in range(len(stays))], tables)
    out = M.event_count_ks(splits["test"], more)
    assert out["event_count_ks"] == pytest.approx(0.5)
    assert out["event_count/median_synthetic"] < out["event_count/median_real"]


# --- card test 13: predictive similarity -----------------------------------------------------------------------


def test_smape_edge_cases() -> None:
    """Card test 13: SMAPE(a, a) = 0, SMAPE(0, p) = 200, and 0/0 counts 0."""
    a = np.array([1.0, -2.0, 3.5])
    assert M.smape(a, a) == 0.0
    assert M.smape(np.zeros(3), a) == 200.0
    assert M.smape(np.zeros(2), np.zeros(2)) == 0.0


def test_dedup_drops_test_rows_equal_to_train_rows() -> None:
    """Card test 13: test rows equal to a train row (nulls equal) are dropped; the others are kept."""
    train = pd.DataFrame({"a": [1.0, 2.0, np.nan], "b": ["x", "y", "z"]})
    test = pd.DataFrame({"a": [1.0, 2.0, np.nan, 3.0], "b": ["x", "q", "z", "x"]})
    kept = M.dedup_against(test, train, ["a", "b"])
    assert kept.index.tolist() == [1, 3]


def test_real_train_as_synthetic_gives_tstr_equal_to_trtr(splits: dict) -> None:
    """Card test 13: the real train passed as synthetic gives TSTR == TRTR exactly (predictive and utility)."""
    train, test = splits["train"], splits["test"]
    small = {t: f.groupby("stay_id").head(3) for t, f in train[1].items()}
    small_test = {t: f.groupby("stay_id").head(3) for t, f in test[1].items()}
    only = {"labevents": small["labevents"].iloc[:300]}
    frames = {t: (only.get(t, small[t].iloc[:0])) for t in M.TABLES}
    targets = ("labevents/valuenum", "labevents/flag", "labevents/valueuom", "labevents/ref_range_upper")
    pred = M.predictive_similarity(frames, small_test, {t: f.copy() for t, f in frames.items()}, targets=targets)
    trtr = {k.removesuffix("_trtr"): v for k, v in pred.items() if k.endswith("_trtr")}
    tstr = {k.removesuffix("_tstr"): v for k, v in pred.items() if k.endswith("_tstr")}
    assert trtr and trtr == tstr
    assert "predictive/labevents/valuenum/smape" in trtr and "predictive/labevents/flag/er" in trtr


def test_predictive_similarity_is_worse_for_scrambled_synthetic_rows(splits: dict) -> None:
    """TSTR on rows whose item labels are shuffled predicts the item (from its unit and ranges) worse than TRTR."""
    train, test = splits["train"][1], splits["test"][1]
    labs = train["labevents"].iloc[:200]
    scrambled = labs.assign(itemid=labs["itemid"].sample(frac=1.0, random_state=2).to_numpy())
    empty = {t: train[t].iloc[:0] for t in ("prescriptions", "inputevents")}
    test_small = {"labevents": test["labevents"].iloc[:300], **empty}
    out = M.predictive_similarity(
        {"labevents": labs, **empty}, test_small, {"labevents": scrambled, **empty}, targets=("labevents/itemid",)
    )
    assert out["predictive/labevents/itemid/er_trtr"] < 5.0
    assert out["predictive/labevents/itemid/er_tstr"] > out["predictive/labevents/itemid/er_trtr"] + 20.0
    assert out["predictive/labevents/itemid/f1_tstr"] < out["predictive/labevents/itemid/f1_trtr"] - 0.2


# --- utility ----------------------------------------------------------------------------------------------------


def test_utility_labels_use_the_first_second_half_value_and_case_insensitive_presence() -> None:
    """Lab classes come from the first value at t ≥ obs/2 (a threshold value goes up a class); presence matches
    ``potassium chloride|kcl`` in any case and ignores first-half events."""
    labs = _frame(
        "labevents",
        {"stay_id": [1, 1, 1, 2], "time": [0, 360, 400, 500],
         "itemid": ["Creatinine", "creatinine", "Creatinine", "Sodium"], "valuenum": [9.0, 2.0, 0.1, 150.0]},
    )  # fmt: skip
    rx = _frame("prescriptions", {"stay_id": [1, 2, 3], "time": [370, 10, 700], "drug": ["KCL 20", "KCl", "heparin"]})
    folder = ([1, 2, 3], {"labevents": labs, "prescriptions": rx, "inputevents": _frame("inputevents", {"stay_id": [],
              "time": []})})  # fmt: skip
    y = M.utility_labels(folder, obs_hours=12)
    assert y.loc[1, "creatinine"] == 2.0 and math.isnan(y.loc[2, "creatinine"]) and y.loc[2, "sodium"] == 2.0
    assert y["kcl"].tolist() == [1.0, 0.0, 0.0] and y["heparin"].tolist() == [0.0, 0.0, 1.0]


def test_utility_learns_the_planted_kcl_rule_and_not_from_shuffled_labels(splits: dict) -> None:
    """TRTR on the planted cohort predicts second-half KCl from first-half potassium (AUROC > 0.7); a synthetic set
    whose KCl orders are moved to random stays scores lower."""
    train, test = splits["train"], splits["test"]
    trtr = M.utility(train, test, tasks=("kcl", "creatinine"))
    assert trtr["kcl"] > 0.7 and trtr["creatinine"] > 0.6
    rx = train[1]["prescriptions"]
    rng = np.random.default_rng(5)
    is_kcl = rx["drug"] == "Potassium Chloride"
    moved = rx.assign(stay_id=np.where(is_kcl, rng.choice(train[0], len(rx)), rx["stay_id"]))
    broken = (train[0], {**train[1], "prescriptions": moved.sort_values(["stay_id", "time"])})
    assert M.utility(broken, test, tasks=("kcl",))["kcl"] < trtr["kcl"] - 0.1


# --- card test 14: membership inference ---------------------------------------------------------------------------


def test_mia_flags_a_copy_and_not_an_ideal_generator(splits: dict) -> None:
    """Card test 14 at n = 200: copying the train stays gives accuracy ≥ 0.9; unseen real stays from the same
    population (the holdout-like ideal) give |acc − 0.5| ≤ 0.1; returning the very non-member stays inverts the
    attack (≤ 0.1), so the score is a real distance ranking."""
    train, holdout, fresh = splits["train"], splits["holdout"], splits["fresh"]
    assert M.mia(train, holdout, train, n=200)["mia/accuracy"] >= 0.9
    assert abs(M.mia(train, holdout, fresh, n=200)["mia/accuracy"] - 0.5) <= 0.1
    assert M.mia(train, holdout, holdout, n=200)["mia/accuracy"] <= 0.1


# --- next event -------------------------------------------------------------------------------------------------


def test_next_event_f1_prefers_real_training_to_a_synthetic_set_without_labs(splits: dict) -> None:
    """TSTR from a synthetic folder without lab rows never predicts the lab panels the real test is made of: its F1
    is far below TRTR's (a model that ignored its training data would score the same)."""
    train, test = splits["train"][1], splits["test"][1]
    no_labs = {**train, "labevents": train["labevents"].iloc[:0]}
    vocab = sorted(set(M.item_keys(train)["key"]))
    real = M.next_event_f1(train, test, vocab, epochs=8, lr=1e-2, hidden=32)
    other = M.next_event_f1(no_labs, test, vocab, epochs=8, lr=1e-2, hidden=32)
    assert 0.5 < real <= 1.0 and other < real - 0.3


# --- the evaluator ----------------------------------------------------------------------------------------------


def test_check_folder_names_file_column_and_expectation(splits: dict) -> None:
    """Bad folders stop with one line naming the file and column: a dropped column, an unfloored time, an unlisted
    stay."""
    stays, tables = splits["test"]
    with pytest.raises(M.MetricsInputError, match=r"--synthetic/labevents.csv: missing column\(s\) \['flag'\]"):
        M.check_folder((stays, {**tables, "labevents": tables["labevents"].drop(columns="flag")}), "--synthetic")
    late = tables["prescriptions"].assign(time=725)
    with pytest.raises(M.MetricsInputError, match=r"prescriptions.csv: column time: .*\[0, 720\).* found 725"):
        M.check_folder((stays, {**tables, "prescriptions": late}), "x")
    with pytest.raises(M.MetricsInputError, match="column stay_id: .* not listed in stays.csv"):
        M.check_folder((stays[1:], tables), "x")


def test_evaluate_skips_what_needs_missing_folders(splits: dict) -> None:
    """Without a real train or holdout, TRTR, predictive similarity and MIA are listed as skipped, not run."""
    out = M.evaluate(splits["test"], splits["fresh"], parts=("fidelity", "temporal", "privacy", "predictive"))
    assert out["skipped"] == ["privacy (needs --real-train and --holdout)", "predictive (needs --real-train)"]
    for key in ("cde/labevents", "cde/mean", "icde/all", "icde/top50", "pcc/labevents/mu_abs", "corr_acc/mean",
                "time_gap_ks/nonzero", "event_count_ks", "ipcc/mean"):  # fmt: skip
        assert key in out and not math.isnan(out[key]), key
    assert not any(k.startswith(("mia", "predictive/")) for k in out)


def test_evaluator_command_writes_metrics_report_and_plots(splits: dict, tmp_path, capsys) -> None:
    """``main`` reads the folders through the reader, prints the table, writes metrics.json, report.md and 3 plots
    without a warning (``save_figure``'s PlotWarning: title, axis labels, distinct legend styles); a bad folder stops
    with one line and exit code 2."""
    folders = {"test": splits["test"], "syn": splits["fresh"], "train": splits["train"], "hold": splits["holdout"]}
    argv = ["--real-test", "test", "--synthetic", "syn", "--real-train", "train", "--holdout", "hold",
            "--parts", "fidelity", "temporal", "privacy", "--out", str(tmp_path / "out")]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=Warning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        assert main(argv, reader=folders.__getitem__) == 0
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert {"cde/mean", "icde/top50", "time_gap_ks/nonzero", "event_count_ks", "mia/accuracy"} <= set(saved)
    for name in ("report.md", "marginals.png", "correlations.png", "temporal.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "| cde/mean |" in capsys.readouterr().out

    bad = {**folders, "syn": (folders["syn"][0], {**folders["syn"][1], "labevents": folders["syn"][1]["labevents"]
           .drop(columns="valuenum")})}  # fmt: skip
    assert main(argv, reader=bad.__getitem__) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["zoo evaluate: error: --synthetic/labevents.csv: missing column(s) ['valuenum']; expected header "
                   + ",".join(["stay_id", "time", *M.TABLE_SPECS["labevents"].columns])]  # fmt: skip


@pytest.mark.slow
def test_evaluate_every_part_with_real_train_as_synthetic(splits: dict) -> None:
    """Card test 13 through the entry point: with the real train as synthetic, every TSTR equals its TRTR (utility,
    predictive similarity, next event), and the copy's MIA accuracy is ≥ 0.9."""
    train = splits["train"]
    out = M.evaluate(splits["test"], train, real_train=train, holdout=splits["holdout"], next_event_epochs=3)
    assert out["skipped"] == []
    pairs = [(k, k.replace("tstr", "trtr")) for k in out if "tstr" in k]
    assert len(pairs) > 20 and all(out[a] == out[b] or (math.isnan(out[a]) and math.isnan(out[b])) for a, b in pairs)
    assert {"utility/kcl/tstr", "utility/kcl_test_holdout/tstr", "utility/tstr_mean", "predictive/er_tstr"} <= set(out)
    assert out["mia/accuracy"] >= 0.9 and out["utility/trtr_mean"] > 0.55
