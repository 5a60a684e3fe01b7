"""The RawMed data side: generator (card test 11), MIMIC-IV loader (test 10), cohort, splits, folders, datamodule."""

from __future__ import annotations

import gzip
import shutil
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.ehr import mimic, synthetic
from datamodules.ehr.cohort import EHRCohort, p95_cap
from datamodules.ehr.datamodule import EHRDataModule
from datamodules.ehr.folder import read_folder, write_folder
from datamodules.ehr.mimic import REQUIRED, load_mimiciv
from datamodules.ehr.serialize import EventTokenizer, frame_tokens, parse_event, time_digits
from datamodules.ehr.synthetic import LABS, generate_mimic_like, mimic_like_icu
from datamodules.ehr.tables import TABLE_SPECS, TABLES, EHRFormatError

torch.set_num_threads(1)

FILES = ("icu/icustays", "hosp/labevents", "hosp/d_labitems", "hosp/prescriptions", "icu/inputevents", "icu/d_items")


@pytest.fixture(scope="module")
def gen300(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, EHRCohort]:
    """300 generated stays (no event cap), with their files."""
    root = tmp_path_factory.mktemp("gen300")
    return root, mimic_like_icu(str(root), n_stays=300, obs_hours=12, max_events=None, seed=0)


@pytest.fixture(scope="module")
def gen30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files of 30 generated stays (to be copied and edited)."""
    root = tmp_path_factory.mktemp("gen30")
    generate_mimic_like(root, n_stays=30, obs_hours=12, seed=3)
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _frames_equal(a: EHRCohort, b: EHRCohort) -> None:
    pd.testing.assert_frame_equal(a.stays, b.stays)
    for t in TABLES:
        pd.testing.assert_frame_equal(a.tables[t], b.tables[t])


def _potassium_after_kcl(cohort: EHRCohort) -> tuple[float, float]:
    """(mean potassium in [+60, +180] min after a KCl order, mean of the other potassium of the stays with an order)."""
    lab = cohort.tables["labevents"]
    k = lab.loc[lab["itemid"] == "Potassium", ["stay_id", "time", "valuenum"]].reset_index(names="row")
    rx = cohort.tables["prescriptions"]
    orders = rx.loc[rx["drug"] == "Potassium Chloride", ["stay_id", "time"]].rename(columns={"time": "order"})
    pairs = k.merge(orders, on="stay_id")
    after = pairs.loc[pairs["time"].sub(pairs["order"]).between(60, 180), "row"].unique()
    ordered = k["stay_id"].isin(orders["stay_id"])
    is_after = k["row"].isin(after)
    return float(k.loc[is_after, "valuenum"].mean()), float(k.loc[ordered & ~is_after, "valuenum"].mean())


# --- generator (card test 11) ----------------------------------------------------------------------------------------


def test_generator_one_unit_per_item(gen300: tuple[Path, EHRCohort]) -> None:
    """Exactly one unit per item: each lab its card unit, each drug one dose unit, each input one amount unit and at
    most one rate unit. Catches units drawn per row or a shifted lookup table."""
    _, c = gen300
    lab, rx, inp = (c.tables[t] for t in TABLES)
    units = lab.groupby("itemid")["valueuom"].agg(lambda s: sorted(s.unique()))
    assert units.to_dict() == {label: [unit] for _, label, unit, *_ in LABS}
    assert (rx.groupby("drug")["dose_unit_rx"].nunique() == 1).all() and rx["dose_unit_rx"].notna().all()
    assert (inp.groupby("itemid")["amountuom"].nunique() == 1).all() and inp["amountuom"].notna().all()
    assert (inp.groupby("itemid")["rateuom"].nunique() <= 1).all()
    assert set(inp["itemid"]) == {"Norepinephrine", "Propofol", "NaCl 0.9%", "Dextrose 5%"}


def test_generator_flag_iff_out_of_range(gen300: tuple[Path, EHRCohort]) -> None:
    """`flag` is 'abnormal' exactly when valuenum is outside [ref_range_lower, ref_range_upper], else null; value is
    str(valuenum). Catches a flag on one side only, inverted, or set from the unrounded draw."""
    lab = gen300[1].tables["labevents"]
    out = (lab["valuenum"] < lab["ref_range_lower"]) | (lab["valuenum"] > lab["ref_range_upper"])
    assert out.any() and (~out).any()
    assert (lab["flag"].eq("abnormal") == out).all() and lab.loc[~out, "flag"].isna().all()
    assert (lab["value"].astype(float) == lab["valuenum"]).all()


def test_generator_patientweight_constant_per_stay(gen300: tuple[Path, EHRCohort]) -> None:
    """patientweight is one value per stay (the truth's), in [40, 150] with one decimal. Catches a weight per row."""
    _, c = gen300
    inp = c.tables["inputevents"]
    per_stay = inp.groupby("stay_id")["patientweight"]
    assert (per_stay.nunique() == 1).all() and inp["stay_id"].nunique() > 50
    truth = c.truth["stays"].set_index("stay_id")["patientweight"]
    assert np.allclose(per_stay.first(), truth.loc[per_stay.first().index])
    w = inp["patientweight"]
    assert w.between(40, 150).all() and np.allclose(w, np.round(w, 1))


def test_generator_potassium_rises_after_kcl(gen300: tuple[Path, EHRCohort], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Mean potassium in [+60, +180] min after a KCl order minus the mean of the other potassium values (of the stays
    with an order) >= 0.4; with the +0.6 effect switched off the same statistic stays < 0.4, so a generator that forgets
    the effect fails. See the report: the pooled reading (all other potassium) gives about 0.15 by construction."""
    after, other = _potassium_after_kcl(gen300[1])
    assert after - other >= 0.4
    monkeypatch.setattr(synthetic, "KCL_EFFECT", 0.0)
    without = mimic_like_icu(str(tmp_path / "no_effect"), n_stays=300, obs_hours=12, max_events=None, seed=0)
    after0, other0 = _potassium_after_kcl(without)
    assert after0 - other0 < 0.4


def test_generator_kcl_orders_follow_low_potassium(gen300: tuple[Path, EHRCohort]) -> None:
    """Every KCl order of the truth follows a potassium < 3.6 by 20-90 min, and the orders inside the window are the
    file's KCl prescriptions. Catches orders drawn independently of potassium."""
    _, c = gen300
    kcl = c.truth["kcl"]
    assert len(kcl) > 20 and kcl["order_minute"].sub(kcl["trigger_minute"]).between(20, 90).all()
    lab = c.tables["labevents"]
    k = lab[lab["itemid"] == "Potassium"].set_index(["stay_id", "time"])["valuenum"]
    triggers = k.loc[list(zip(kcl["stay_id"], kcl["trigger_minute"], strict=True))]
    assert (triggers < 3.6 + 0.005).all()
    rx = c.tables["prescriptions"]
    files = rx.loc[rx["drug"] == "Potassium Chloride", ["stay_id", "time"]].to_numpy()
    assert sorted(map(tuple, files.tolist())) == sorted(zip(kcl["stay_id"], kcl["order_minute"], strict=True))


def test_generator_lab_panels_and_timing(gen300: tuple[Path, EHRCohort]) -> None:
    """Panel items share one charttime: every (stay, time) holds whole panels (Chem, CBC, both) or a Potassium
    recheck; the first draw is before 60 min. Catches items timed independently."""
    lab = gen300[1].tables["labevents"]
    chem = frozenset({"Creatinine", "Bicarbonate", "Sodium", "Potassium", "Glucose"})
    cbc = frozenset({"Platelet Count", "White Blood Cells", "Hemoglobin"})
    sets = lab.groupby(["stay_id", "time"])["itemid"].agg(frozenset)
    allowed = {chem, cbc, chem | cbc, frozenset({"Potassium"}), chem | {"Potassium"}, cbc | {"Potassium"},
               chem | cbc | {"Potassium"}}  # fmt: skip
    assert set(sets) <= allowed and chem | cbc in set(sets) and cbc in set(sets)
    assert (lab.groupby("stay_id")["time"].min() < 60).all()


def test_generator_weight_based_amount(gen300: tuple[Path, EHRCohort]) -> None:
    """Drip amount = rate * patientweight * (endtime - starttime) / 1000 in the raw file, boluses have no rate and a
    bag-size amount. Catches a dependency on the wrong columns or a duration not taken from the next record."""
    root, _ = gen300
    raw = pd.read_csv(root / "icu" / "inputevents.csv", parse_dates=["starttime", "endtime"])
    minutes = (raw["endtime"] - raw["starttime"]).dt.total_seconds() / 60
    drip = raw["rate"].notna()
    assert drip.any() and (~drip).any()
    assert np.allclose(raw.loc[drip, "amount"], (raw["rate"] * raw["patientweight"] * minutes / 1000)[drip])
    assert raw.loc[~drip, "amount"].isin([250.0, 500.0, 1000.0]).all()
    starts = raw[drip].groupby(["stay_id", "itemid"])["starttime"]
    first_gap = starts.apply(lambda s: (s.iloc[1] - s.iloc[0]).total_seconds() / 60 if len(s) > 1 else 0.0)
    assert (first_gap <= 30).all()


def test_generator_stays_and_seed(tmp_path: Path, gen300: tuple[Path, EHRCohort]) -> None:
    """Ids 1e7+i / 2e7+i / 3e7+i, first = last careunit among three units, whole-minute intime in 2150, los >= 0.5;
    the same seed rewrites identical files and another seed differs. Catches unseeded draws."""
    root, c = gen300
    stays = pd.read_csv(root / "icu" / "icustays.csv")
    assert (stays["stay_id"] - stays["subject_id"] == 20_000_000).all() and (stays["first_careunit"] == stays[
        "last_careunit"]).all()  # fmt: skip
    assert stays["first_careunit"].nunique() == 3 and (stays["los"] >= 0.5).all()
    assert pd.to_datetime(stays["intime"]).dt.year.eq(2150).all() and stays["intime"].str.endswith(":00").all()
    generate_mimic_like(tmp_path / "a", 300, 12, 0)
    generate_mimic_like(tmp_path / "b", 300, 12, 1)
    for rel in FILES:
        assert (tmp_path / "a" / f"{rel}.csv").read_bytes() == (root / f"{rel}.csv").read_bytes()
    assert (tmp_path / "b" / "hosp/labevents.csv").read_bytes() != (root / "hosp/labevents.csv").read_bytes()


# --- MIMIC-IV loader (card test 10) -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", [r for r in REQUIRED])
def test_loader_missing_required_column_is_listed(gen30: Path, tmp_path: Path, rel: str) -> None:
    """Dropping any required column raises EHRFormatError whose one line names the file and lists that column.
    Catches a loader that reads a missing column as null or fails with a KeyError."""
    for col in REQUIRED[rel]:
        root = tmp_path / col
        _copy(gen30, root)
        path = root / f"{rel}.csv"
        pd.read_csv(path, dtype=str).drop(columns=col).to_csv(path, index=False)
        with pytest.raises(EHRFormatError) as info:
            load_mimiciv(str(root), max_events=None)
        msg = str(info.value)
        assert "\n" not in msg and msg.startswith(f"{path}: missing column(s) ['{col}']")


@pytest.mark.parametrize("rel", FILES)
def test_loader_missing_file_opens_no_socket(gen30: Path, tmp_path: Path, rel: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A missing file raises FileNotFoundError naming the expected path and that downloads are disabled, with no
    socket opened. Catches a loader that tries to fetch the file."""

    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("a socket was opened")

    root = _copy(gen30, tmp_path / "root")
    (root / f"{rel}.csv").unlink()
    monkeypatch.setattr(socket, "socket", no_socket)
    with pytest.raises(FileNotFoundError) as info:
        load_mimiciv(str(root), max_events=None)
    assert str(root / rel) + ".csv" in str(info.value) and "downloads are disabled" in str(info.value)


def test_loader_extra_columns_gz_2_0_headers_chunks(
    gen30: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extra columns change nothing, `.csv.gz` reads the same, 2.0 headers (no order_provider_id, no caregiver_id)
    load the same cohort, and reading in 7-row chunks gives the same cohort. Catches positional column access, a hard
    requirement on 2.2-only columns, and rows lost or reordered between chunks."""
    base = load_mimiciv(str(gen30), max_events=None)
    monkeypatch.setattr(mimic, "CHUNK_ROWS", 7)
    _frames_equal(load_mimiciv(str(gen30), max_events=None), base)
    monkeypatch.undo()
    extra = _copy(gen30, tmp_path / "extra")
    for rel in FILES:
        f = pd.read_csv(extra / f"{rel}.csv", dtype=str)
        f.insert(0, "zz_extra", "junk")
        f.to_csv(extra / f"{rel}.csv", index=False)
    _frames_equal(load_mimiciv(str(extra), max_events=None), base)
    old = _copy(gen30, tmp_path / "v20")
    for rel, col in (("hosp/labevents", "order_provider_id"), ("hosp/prescriptions", "order_provider_id"),
                     ("icu/inputevents", "caregiver_id")):  # fmt: skip
        pd.read_csv(old / f"{rel}.csv", dtype=str).drop(columns=col).to_csv(old / f"{rel}.csv", index=False)
    _frames_equal(load_mimiciv(str(old), max_events=None), base)
    gz = _copy(gen30, tmp_path / "gz")
    for rel in FILES:
        data = (gz / f"{rel}.csv").read_bytes()
        (gz / f"{rel}.csv").unlink()
        (gz / f"{rel}.csv.gz").write_bytes(gzip.compress(data))
    _frames_equal(load_mimiciv(str(gz), max_events=None), base)


def test_loader_window_join_labels_and_cohort_filter(gen30: Path, tmp_path: Path) -> None:
    """Rows at intime + 0 and + 719 min are kept, at - 1 and + 720 min dropped (card test 3: t = 720 at 12 h is
    dropped); labs of an admission outside the cohort are dropped; a stay whose careunit changed is excluded with its
    events; itemids become labels. Catches an inclusive window end, a join on subject, or raw itemids."""
    root = _copy(gen30, tmp_path / "root")
    stays = pd.read_csv(root / "icu/icustays.csv", dtype=str)
    stays.loc[1, "last_careunit"] = "Trauma SICU (TSICU)"
    stays.to_csv(root / "icu/icustays.csv", index=False)
    intime = pd.Timestamp(stays.loc[0, "intime"])
    lab = pd.read_csv(root / "hosp/labevents.csv", dtype=str)
    probe = lab.iloc[[0] * 5].copy()
    offsets = [0, 719, -1, 720, 100]
    probe["charttime"] = [(intime + pd.Timedelta(minutes=m)).strftime("%Y-%m-%d %H:%M:%S") for m in offsets]
    probe["hadm_id"] = [stays.loc[0, "hadm_id"]] * 4 + ["99999999"]
    probe["valuenum"] = ["101", "102", "103", "104", "105"]
    pd.concat([lab, probe]).to_csv(root / "hosp/labevents.csv", index=False)
    c = load_mimiciv(str(root), max_events=None)
    assert int(stays.loc[1, "stay_id"]) not in c.stay_ids and int(stays.loc[0, "stay_id"]) in c.stay_ids
    for t in TABLES:
        assert int(stays.loc[1, "stay_id"]) not in set(c.tables[t]["stay_id"])
        assert c.tables[t]["time"].between(0, 719).all()
    got = c.tables["labevents"]
    probes = got[got["valuenum"].isin([101.0, 102.0, 103.0, 104.0, 105.0])]
    assert sorted(probes["valuenum"]) == [101.0, 102.0] and sorted(probes["time"]) == [0, 719]
    assert set(got["itemid"]) == {label for _, label, *_ in LABS}
    assert "Norepinephrine" in set(c.tables["inputevents"]["itemid"]) or "Propofol" in set(c.tables["inputevents"][
        "itemid"])  # fmt: skip


def test_loader_unparseable_time_unlabelled_item_and_unknown_stay(gen30: Path, tmp_path: Path) -> None:
    """An unparseable time, an itemid without a label (count and first one) and an inputevents stay_id not in
    icustays raise one-line EHRFormatErrors naming the file. Catches silent NaT rows, raw itemids, orphan events."""
    root = _copy(gen30, tmp_path / "t")
    rx = pd.read_csv(root / "hosp/prescriptions.csv", dtype=str)
    rx.loc[2, "starttime"] = "yesterday"
    rx.to_csv(root / "hosp/prescriptions.csv", index=False)
    with pytest.raises(EHRFormatError, match=r"prescriptions.csv: column 'starttime' has 1 unparseable time\(s\) "
                                             r"\(first: 'yesterday' at data row 3\)"):  # fmt: skip
        load_mimiciv(str(root), max_events=None)
    root = _copy(gen30, tmp_path / "l")
    d = pd.read_csv(root / "hosp/d_labitems.csv", dtype=str)
    d[d["itemid"] != "50004"].to_csv(root / "hosp/d_labitems.csv", index=False)
    with pytest.raises(EHRFormatError, match=r"labevents.csv: 1 itemid\(s\) without a label in .*d_labitems.csv "
                                             r"\(first: 50004\)"):  # fmt: skip
        load_mimiciv(str(root), max_events=None)
    root = _copy(gen30, tmp_path / "s")
    inp = pd.read_csv(root / "icu/inputevents.csv", dtype=str)
    inp.loc[0, "stay_id"] = "123"
    inp.to_csv(root / "icu/inputevents.csv", index=False)
    with pytest.raises(EHRFormatError, match=r"inputevents.csv: 1 row\(s\) with a stay_id not in .*icustays.csv"):
        load_mimiciv(str(root), max_events=None)


# --- cohort, splits, truncation, folders ------------------------------------------------------------------------------


def test_splits_disjoint_complete_seeded(gen300: tuple[Path, EHRCohort]) -> None:
    """Splits by stay are disjoint, cover every stay, have 60/10/15/15 sizes, repeat per seed and change with it.
    Catches overlapping or missing stays and an unseeded permutation."""
    c = gen300[1]
    s = c.split(0)
    ids = [i for part in s.values() for i in part]
    assert sorted(ids) == sorted(c.stay_ids) and len(set(ids)) == len(ids)
    assert [len(s[k]) for k in ("train", "val", "test", "holdout")] == [180, 30, 45, 45]
    assert c.split(0) == s and c.split(1)["train"] != s["train"]


def test_events_order_and_truncation(gen300: tuple[Path, EHRCohort]) -> None:
    """events() is sorted by (stay, time, table order) and holds every row; truncate(k) keeps each stay's earliest k
    events of that order; p95 is the ceiling of the train counts' 95th percentile. Catches a per-table cap or a cap
    that keeps the last events."""
    c = gen300[1]
    ev = c.events()
    assert len(ev) == sum(len(f) for f in c.tables.values())
    key = pd.DataFrame(
        {"s": ev["stay_id"], "t": ev["time"], "k": ev["table"].map({t: i for i, t in enumerate(TABLES)})}
    )
    assert key.apply(tuple, axis=1).is_monotonic_increasing
    cut = c.truncate(10)
    ev10 = cut.events()
    expected = ev.groupby("stay_id").head(10).reset_index(drop=True)
    pd.testing.assert_frame_equal(ev10, expected)
    assert cut.max_events == 10 and cut.counts().max() == 10
    train = c.split(0)["train"]
    assert p95_cap(c, train) == int(np.ceil(np.percentile(c.counts().loc[train], 95)))


def test_folder_round_trip(gen300: tuple[Path, EHRCohort], tmp_path: Path) -> None:
    """write_folder then read_folder returns the same stays (with an event-less stay) and tables: int64 ids and
    times, float64 numbers, text with NaN nulls, exact headers. Catches nulls written as 'nan', float times, or text
    columns parsed as numbers (isopenbag '0')."""
    c = gen300[1]
    stays = [*c.stay_ids, 99]
    tables = {t: f.assign(time=10 * (f["time"] // 10)) for t, f in c.tables.items()}
    write_folder(tmp_path / "f", stays, tables)
    for t in TABLES:
        header = (tmp_path / "f" / f"{t}.csv").read_text().splitlines()[0]
        assert header == ",".join(["stay_id", "time", *TABLE_SPECS[t].columns])
    got_stays, got = read_folder(tmp_path / "f")
    assert got_stays == stays
    for t in TABLES:
        pd.testing.assert_frame_equal(got[t], tables[t][["stay_id", "time", *TABLE_SPECS[t].columns]])
    assert got["inputevents"]["isopenbag"].eq("0").all()


# --- datamodule ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dm60() -> EHRDataModule:
    return EHRDataModule(n_stays=60, batch_size=64, seed=0)


def test_datamodule_shapes_and_order(dm60: EHRDataModule) -> None:
    """event_tensors follow cohort.events() of the split (stay, time, table index) with (N, L) ids that decode and
    parse back to the rows; vocab_size is the tokenizer's. Catches events shuffled against their metadata."""
    dm = dm60
    assert dm.vocab_size == len(dm.tokenizer) and dm.time_len == 2 and dm.obs_hours == 12
    for split in ("train", "val"):
        e = dm.event_tensors(split)
        ev = dm.cohort.subset(dm.splits[split]).events()
        n = len(ev)
        assert all(e[k].shape == (n, 64) and e[k].dtype == torch.long for k in ("input_ids", "type_ids", "dpe_ids"))
        assert e["stay"].tolist() == ev["stay_id"].tolist() and e["time"].tolist() == ev["time"].tolist()
        assert [TABLES[i] for i in e["table"].tolist()] == ev["table"].tolist()
    e = dm.event_tensors("train")
    short = np.flatnonzero((e["input_ids"] != 0).sum(1).numpy() < 64)
    for k in short[:50]:
        parsed = parse_event(dm.tokenizer.decode(e["input_ids"][k]))
        assert parsed is not None and parsed[0] == TABLES[int(e["table"][k])]


def test_datamodule_fits_on_train(dm60: EHRDataModule) -> None:
    """The vocabulary is fitted on the train events only and max_events='p95' is the train counts' 95th percentile of
    the uncapped cohort. Catches a vocabulary or cap fitted on all stays (a leak from test/holdout)."""
    train_events = dm60.cohort.subset(dm60.splits["train"]).events()
    assert dm60.tokenizer.vocab == EventTokenizer().fit(frame_tokens(train_events)).vocab
    p95 = EHRDataModule(n_stays=60, max_events="p95", seed=0)
    uncapped = load_mimiciv(p95.root, max_events=None)
    cap = p95_cap(uncapped, p95.splits["train"])
    assert p95.cohort.max_events == cap and p95.cohort.counts().max() <= cap
    assert cap < uncapped.counts().max()


def test_datamodule_loaders_seeded(dm60: EHRDataModule) -> None:
    """Train batches are a (seed, epoch) permutation: the same per epoch, different across epochs, covering every
    event once; val is in order; stage 'stays' serves positions into the split. Catches unseeded shuffling."""
    dm = dm60
    e = dm.event_tensors("train")

    def epoch(k: int) -> torch.Tensor:
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(k)
        return torch.cat([b["input_ids"] for b in loader])

    a, b, c = epoch(0), epoch(0), epoch(1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert sorted(map(tuple, a.tolist())) == sorted(map(tuple, e["input_ids"].tolist()))
    val = torch.cat([b["input_ids"] for b in dm.val_dataloader()])
    assert torch.equal(val, dm.event_tensors("val")["input_ids"])
    stays = EHRDataModule(n_stays=60, stage="stays", batch_size=8, seed=0)
    got = torch.cat([b["stay"] for b in stays.val_dataloader()])
    assert got.tolist() == list(range(len(stays.splits["val"])))
    first = next(iter(stays.train_dataloader()))["stay"]
    assert first.shape == (8,) and first.max() < len(stays.splits["train"])


def test_datamodule_seeds_and_in_text(dm60: EHRDataModule, tmp_path: Path) -> None:
    """Same seed, same tensors; another seed, other splits; time_mode in_text puts `time <digits>` after the table
    token (time_len 0); write_split writes a readable folder with times floored to 10 min."""
    again = EHRDataModule(n_stays=60, batch_size=64, seed=0)
    assert again.splits == dm60.splits
    assert torch.equal(again.event_tensors("train")["input_ids"], dm60.event_tensors("train")["input_ids"])
    assert EHRDataModule(n_stays=60, seed=1).splits["train"] != dm60.splits["train"]
    text = EHRDataModule(n_stays=60, time_mode="in_text", L=128, seed=0)
    assert text.time_len == 0
    e = text.event_tensors("val")
    for k in range(0, len(e["time"]), 7):
        table, _, minutes = parse_event(text.tokenizer.decode(e["input_ids"][k]))
        assert minutes == 10 * (int(e["time"][k]) // 10) and e["type_ids"][k][2:5].tolist() == [4, 4, 4]
        assert text.tokenizer.decode(e["input_ids"][k])[2:4] == [str(d) for d in time_digits(int(e["time"][k]), 12)]
    path = dm60.write_split("test", str(tmp_path / "test"))
    stays, tables = read_folder(path)
    assert stays == dm60.splits["test"]
    for t in TABLES:
        src = dm60.cohort.subset(dm60.splits["test"]).tables[t]
        assert (tables[t]["time"] % 10 == 0).all() and tables[t]["time"].tolist() == (10 * (src["time"] // 10)).tolist()
