"""The embedded default ``mimic_like_icu``: a seeded ICU cohort written as MIMIC-IV files (card ``rawmed``, Data).

Every number below is the card's. The generator writes ``icu/icustays.csv``, ``icu/inputevents.csv``,
``icu/d_items.csv``, ``hosp/labevents.csv``, ``hosp/d_labitems.csv`` and ``hosp/prescriptions.csv`` with MIMIC-IV
2.2 column names and ``YYYY-MM-DD HH:MM:SS`` times, then reads them back through the real loader
(:func:`datamodules.ehr.mimic.load_mimiciv`), so the loader is exercised on every run. Events after the window (KCl
orders and rechecks triggered late, infusion records) are written too; the loader drops them.

Planted structure: a latent severity s ~ N(0, 1) shifts labs, vasopressor and magnesium use; low potassium (< 3.6)
triggers a KCl order (p 0.8) at +U(20, 90) min and a potassium recheck (p 0.9) at +U(60, 180) min after the order;
potassium drawn within [+60, +180] min of an order is raised by 0.6 mEq/L. Infusion ``amount`` is
``rate * patientweight * duration / 1000``.
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from datamodules.ehr.cohort import EHRCohort
from datamodules.ehr.mimic import load_mimiciv

#: (itemid, label, unit, lo, hi, m, sigma, beta, panel, decimals) of the eight labs.
LABS: tuple[tuple[int, str, str, float, float, float, float, float, str, int], ...] = (
    (50001, "Creatinine", "mg/dL", 0.5, 1.2, 1.1, 0.45, 0.35, "chem", 2),
    (50002, "Platelet Count", "K/uL", 150.0, 440.0, 190.0, 0.5, -0.3, "cbc", 1),
    (50003, "White Blood Cells", "K/uL", 4.0, 11.0, 9.0, 0.4, 0.25, "cbc", 1),
    (50004, "Hemoglobin", "g/dL", 12.0, 16.0, 10.5, 0.18, -0.08, "cbc", 1),
    (50005, "Bicarbonate", "mEq/L", 22.0, 29.0, 24.0, 0.12, -0.05, "chem", 1),
    (50006, "Sodium", "mEq/L", 135.0, 145.0, 139.0, 0.025, 0.0, "chem", 1),
    (50007, "Potassium", "mEq/L", 3.5, 5.1, 4.1, 0.08, 0.0, "chem", 2),
    (50008, "Glucose", "mg/dL", 70.0, 100.0, 130.0, 0.3, 0.1, "chem", 1),
)
POTASSIUM = 50007
#: Potassium drawn within [+60, +180] min of a KCl order is raised by this much (mEq/L).
KCL_EFFECT = 0.6
#: KCl rule: a potassium below this triggers an order.
KCL_TRIGGER = 3.6
#: drug -> (prod_strength, route, dose_unit_rx).
DRUGS: dict[str, tuple[str, str, str]] = {
    "Potassium Chloride": ("20mEq Packet", "PO/NG", "mEq"),
    "Heparin": ("5000 Unit / mL Vial", "SC", "UNIT"),
    "Magnesium Sulfate": ("2 g / 50 mL Premix Bag", "IV", "gm"),
}
#: itemid -> (label, amountuom, rateuom, ordercategoryname, secondaryordercategoryname,
#: ordercomponenttypedescription, ordercategorydescription, totalamountuom, unitname).
INPUT_ITEMS: dict[int, tuple[str, ...]] = {
    22001: ("Norepinephrine", "mg", "mcg/kg/min", "01-Drips", "02-Fluids (Crystalloids)", "Main order parameter",
            "Continuous Med", "mL", "mg"),
    22002: ("Propofol", "mg", "mcg/kg/min", "01-Drips", "02-Fluids (Crystalloids)", "Main order parameter",
            "Continuous Med", "mL", "mg"),
    22003: ("NaCl 0.9%", "mL", None, "03-IV Fluid Bolus", None, "Main order parameter", "Bolus", "mL", "mL"),
    22004: ("Dextrose 5%", "mL", None, "03-IV Fluid Bolus", None, "Main order parameter", "Bolus", "mL", "mL"),
}  # fmt: skip
CAREUNITS = (
    "Medical Intensive Care Unit (MICU)",
    "Surgical Intensive Care Unit (SICU)",
    "Cardiac Vascular Intensive Care Unit (CVICU)",
)
CAREUNIT_P = (0.5, 0.3, 0.2)
#: bag size (mL) of the drips: the infusion's ``totalamount``.
DRIP_BAG = {22001: 250.0, 22002: 100.0}
EPOCH = pd.Timestamp("2150-01-01")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def _stamp(intime: pd.Series | pd.DatetimeIndex, minutes: np.ndarray) -> pd.Series:
    return (
        pd.Series(pd.to_datetime(intime)).reset_index(drop=True) + pd.to_timedelta(minutes, unit="min")
    ).dt.strftime(TIME_FORMAT)


def _simulate_stay(rng: np.random.Generator, s: float, u_k: float, obs_min: int) -> dict[str, list]:
    """Lab draws, KCl orders and potassium rechecks of one stay, in time order (the rule is sequential)."""
    labs: list[tuple[int, int, float]] = []  # (minute, itemid, value)
    orders: list[tuple[int, int]] = []  # (order minute, trigger minute)
    queue: list[tuple[int, int, int]] = []  # (minute, kind 0=chem 1=cbc 2=recheck, seq)
    t, seq = int(rng.uniform(0, 60)), 0
    while t < obs_min:
        heapq.heappush(queue, (t, 0, seq))
        cbc = t if rng.random() < 0.7 else t + int(rng.uniform(10, 30))
        heapq.heappush(queue, (cbc, 1, seq + 1))
        seq += 2
        t += int(rng.uniform(240, 480))
    by_id = {lab[0]: lab for lab in LABS}
    while queue:
        t, kind, _ = heapq.heappop(queue)
        items = [lab[0] for lab in LABS if lab[8] == ("chem" if kind == 0 else "cbc")] if kind < 2 else [POTASSIUM]
        for itemid in items:
            _, _, _, _, _, m, sigma, beta, _, _ = by_id[itemid]
            u = u_k if itemid == POTASSIUM else 0.0
            v = float(np.exp(np.log(m) + beta * s + u + sigma * rng.standard_normal()))
            if itemid == POTASSIUM:
                if any(60 <= t - o <= 180 for o, _ in orders):
                    v += KCL_EFFECT
                if v < KCL_TRIGGER and rng.random() < 0.8:
                    order = t + int(rng.uniform(20, 90))
                    orders.append((order, t))
                    if rng.random() < 0.9:
                        heapq.heappush(queue, (order + int(rng.uniform(60, 180)), 2, seq))
                        seq += 1
            labs.append((t, itemid, v))
    return {"labs": labs, "orders": orders}


def _infusion(rng: np.random.Generator, obs_min: int) -> tuple[np.ndarray, np.ndarray]:
    """Record start minutes and durations of one drip: a burst of 2-5 within 30 min, then one every U(60, 120)."""
    t0 = int(rng.uniform(0, obs_min))
    starts = [t0, *sorted(t0 + int(x) for x in rng.uniform(0, 30, size=int(rng.integers(2, 6)) - 1))]
    t = starts[-1] + int(rng.uniform(60, 120))
    while t < obs_min:
        starts.append(t)
        t += int(rng.uniform(60, 120))
    starts_a = np.asarray(starts, dtype=np.int64)
    durations = np.append(np.diff(starts_a), 60)
    return starts_a, durations


def generate_mimic_like(root: str | Path, n_stays: int = 1500, obs_hours: int = 12, seed: int = 0) -> dict[str, Any]:
    """Write the MIMIC-IV-shaped files of ``n_stays`` seeded ICU stays under ``root``; return the ground truth.

    Args:
        root: folder that receives ``icu/`` and ``hosp/``.
        n_stays: ICU stays (one per admission and subject).
        obs_hours: observation window in hours (the KCl task labels split it in halves).
        seed: ``numpy.random.default_rng`` seed.

    Returns:
        ``{"stays": DataFrame(stay_id, severity, potassium_offset, patientweight, kcl_first_half, kcl_second_half,
        norepinephrine, propofol, heparin, magnesium_sulfate), "kcl": DataFrame(stay_id, trigger_minute,
        order_minute)}`` with minutes since ``intime`` (not floored), orders inside the window only.
    """
    root = Path(root)
    rng = np.random.default_rng(seed)
    obs_min = obs_hours * 60
    i = np.arange(n_stays)
    subject, hadm, stay = 10_000_000 + i, 20_000_000 + i, 30_000_000 + i
    unit = np.asarray(CAREUNITS)[rng.choice(3, size=n_stays, p=CAREUNIT_P)]
    intime = EPOCH + pd.to_timedelta(rng.integers(0, 365 * 24 * 60, size=n_stays), unit="min")
    los = 0.5 + rng.exponential(2.0, size=n_stays)
    severity = rng.standard_normal(n_stays)
    weight = np.round(np.clip(rng.normal(80, 15, size=n_stays), 40, 150), 1)
    u_k = rng.normal(0, 0.10, size=n_stays)
    outtime = intime + pd.to_timedelta(np.round(los * 24 * 60), unit="min")

    labs, orders, drugs, inputs = [], [], [], []
    for k in range(n_stays):
        sim = _simulate_stay(rng, float(severity[k]), float(u_k[k]), obs_min)
        labs += [(k, t, item, v) for t, item, v in sim["labs"]]
        orders += [(k, o, trig) for o, trig in sim["orders"]]
        drugs += [(k, o, "Potassium Chloride", float(rng.choice([20.0, 40.0]))) for o, _ in sim["orders"]]
        if rng.random() < 0.5:
            drugs.append((k, int(rng.uniform(0, obs_min)), "Heparin", 5000.0))
        if rng.random() < 0.2 + 0.2 * (severity[k] > 0):
            drugs.append((k, int(rng.uniform(0, obs_min)), "Magnesium Sulfate", 2.0))
        for itemid, p in ((22001, 0.8 if severity[k] > 0.8 else 0.05), (22002, 0.35)):
            if rng.random() < p:
                starts, durations = _infusion(rng, obs_min)
                eps = rng.standard_normal(len(starts))
                rate = 0.05 * np.exp(0.5 * eps + 0.3 * severity[k]) if itemid == 22001 else 20 * np.exp(0.3 * eps)
                inputs += [(k, int(t), itemid, float(r), int(d), DRIP_BAG[itemid])
                           for t, r, d in zip(starts, rate, durations, strict=True)]  # fmt: skip
        for itemid in (22003, 22004):
            for _ in range(int(rng.integers(0, 4))):
                inputs.append(
                    (
                        k,
                        int(rng.uniform(0, obs_min)),
                        itemid,
                        float("nan"),
                        1,
                        float(rng.choice([250.0, 500.0, 1000.0])),
                    )
                )

    stays = pd.DataFrame({
        "subject_id": subject, "hadm_id": hadm, "stay_id": stay, "first_careunit": unit, "last_careunit": unit,
        "intime": intime.strftime(TIME_FORMAT), "outtime": outtime.strftime(TIME_FORMAT), "los": np.round(los, 4),
    })  # fmt: skip
    (root / "icu").mkdir(parents=True, exist_ok=True)
    (root / "hosp").mkdir(parents=True, exist_ok=True)
    stays.to_csv(root / "icu" / "icustays.csv", index=False)

    # labevents (2.2 header, with order_provider_id)
    lab = pd.DataFrame(labs, columns=["k", "t", "itemid", "v"]).sort_values(["k", "t", "itemid"], kind="stable")
    meta = pd.DataFrame(LABS, columns=["itemid", "label", "unit", "lo", "hi", "m", "sigma", "beta", "panel", "dp"])
    lab = lab.merge(meta[["itemid", "unit", "lo", "hi", "dp"]], on="itemid", how="left")
    k = lab["k"].to_numpy()
    valuenum = np.where(lab["dp"] == 2, np.round(lab["v"], 2), np.round(lab["v"], 1))
    stat_p = np.where(severity[k] > 1, 0.5, 0.3)
    charttime = _stamp(intime[k], lab["t"].to_numpy())
    labevents = pd.DataFrame({
        "labevent_id": np.arange(1, len(lab) + 1), "subject_id": subject[k], "hadm_id": hadm[k],
        "specimen_id": np.arange(1, len(lab) + 1), "itemid": lab["itemid"].to_numpy(), "order_provider_id": None,
        "charttime": charttime, "storetime": charttime, "value": pd.Series(valuenum).astype(str).to_numpy(),
        "valuenum": valuenum, "valueuom": lab["unit"].to_numpy(), "ref_range_lower": lab["lo"].to_numpy(),
        "ref_range_upper": lab["hi"].to_numpy(),
        # reconstruction: see README -- the flag is set on the recorded (rounded) value, so the file is self-consistent
        "flag": np.where((valuenum < lab["lo"]) | (valuenum > lab["hi"]), "abnormal", None),
        "priority": np.where(rng.random(len(lab)) < stat_p, "STAT", "ROUTINE"),
        "comments": np.where(rng.random(len(lab)) < 0.05, "___", None),
    })  # fmt: skip
    labevents.to_csv(root / "hosp" / "labevents.csv", index=False)
    d_lab = meta[["itemid", "label"]].assign(
        fluid="Blood", category=np.where(meta["panel"] == "cbc", "Hematology", "Chemistry")
    )
    d_lab.to_csv(root / "hosp" / "d_labitems.csv", index=False)

    # prescriptions
    rx = pd.DataFrame(drugs, columns=["k", "t", "drug", "dose"]).sort_values(["k", "t"], kind="stable")
    k = rx["k"].to_numpy()
    fixed = pd.DataFrame.from_dict(DRUGS, orient="index", columns=["prod_strength", "route", "dose_unit_rx"])
    fixed = fixed.loc[rx["drug"]].reset_index(drop=True)
    start = _stamp(intime[k], rx["t"].to_numpy())
    prescriptions = pd.DataFrame({
        "subject_id": subject[k], "hadm_id": hadm[k], "pharmacy_id": np.arange(1, len(rx) + 1), "poe_id": None,
        "order_provider_id": None, "starttime": start, "stoptime": _stamp(intime[k], rx["t"].to_numpy() + 24 * 60),
        "drug_type": "MAIN", "drug": rx["drug"].to_numpy(), "prod_strength": fixed["prod_strength"],
        "dose_val_rx": rx["dose"].to_numpy(), "dose_unit_rx": fixed["dose_unit_rx"],
        "form_val_disp": rx["dose"].to_numpy(), "form_unit_disp": fixed["dose_unit_rx"],
        "doses_per_24_hrs": rng.integers(1, 3, size=len(rx)).astype(float), "route": fixed["route"],
    })  # fmt: skip
    prescriptions.to_csv(root / "hosp" / "prescriptions.csv", index=False)

    # inputevents
    inp = pd.DataFrame(inputs, columns=["k", "t", "itemid", "rate", "duration", "total"])
    inp = inp.sort_values(["k", "t", "itemid"], kind="stable").reset_index(drop=True)
    k = inp["k"].to_numpy()
    items = pd.DataFrame.from_dict(INPUT_ITEMS, orient="index", columns=[
        "label", "amountuom", "rateuom", "ordercategoryname", "secondaryordercategoryname",
        "ordercomponenttypedescription", "ordercategorydescription", "totalamountuom", "unitname",
    ])  # fmt: skip
    fixed = items.loc[inp["itemid"]].reset_index(drop=True)
    drip = inp["rate"].notna().to_numpy()
    amount = np.where(drip, inp["rate"] * weight[k] * inp["duration"] / 1000.0, inp["total"])
    inputevents = pd.DataFrame({
        "subject_id": subject[k], "hadm_id": hadm[k], "stay_id": stay[k], "caregiver_id": None,
        "starttime": _stamp(intime[k], inp["t"].to_numpy()),
        "endtime": _stamp(intime[k], inp["t"].to_numpy() + inp["duration"].to_numpy()),
        "storetime": _stamp(intime[k], inp["t"].to_numpy()), "itemid": inp["itemid"].to_numpy(),
        "amount": amount, "amountuom": fixed["amountuom"], "rate": inp["rate"].to_numpy(), "rateuom": fixed["rateuom"],
        "orderid": np.arange(1, len(inp) + 1), "linkorderid": np.arange(1, len(inp) + 1),
        "ordercategoryname": fixed["ordercategoryname"],
        "secondaryordercategoryname": fixed["secondaryordercategoryname"],
        "ordercomponenttypedescription": fixed["ordercomponenttypedescription"],
        "ordercategorydescription": fixed["ordercategorydescription"], "patientweight": weight[k],
        "totalamount": inp["total"].to_numpy(), "totalamountuom": fixed["totalamountuom"], "isopenbag": 0,
        "continueinnextdept": 0, "statusdescription": "FinishedRunning", "originalamount": amount,
        "originalrate": inp["rate"].to_numpy(),
    })  # fmt: skip
    inputevents.to_csv(root / "icu" / "inputevents.csv", index=False)
    d_items = items.reset_index(names="itemid")[["itemid", "label", "unitname"]].assign(
        abbreviation=lambda f: f["label"], linksto="inputevents", category="Medications", param_type="Solution"
    )
    d_items.to_csv(root / "icu" / "d_items.csv", index=False)

    # ground truth
    kcl = pd.DataFrame(orders, columns=["k", "order_minute", "trigger_minute"])
    kcl = kcl[kcl["order_minute"] < obs_min]
    half = obs_min // 2
    truth_stays = pd.DataFrame(
        {"stay_id": stay, "severity": severity, "potassium_offset": u_k, "patientweight": weight}
    )
    truth_stays["kcl_first_half"] = np.isin(i, kcl.loc[kcl["order_minute"] < half, "k"])
    truth_stays["kcl_second_half"] = np.isin(i, kcl.loc[kcl["order_minute"] >= half, "k"])
    in_window = inp[inp["t"] < obs_min]
    truth_stays["norepinephrine"] = np.isin(i, in_window.loc[in_window["itemid"] == 22001, "k"])
    truth_stays["propofol"] = np.isin(i, in_window.loc[in_window["itemid"] == 22002, "k"])
    truth_stays["heparin"] = np.isin(i, rx.loc[rx["drug"] == "Heparin", "k"])
    truth_stays["magnesium_sulfate"] = np.isin(i, rx.loc[rx["drug"] == "Magnesium Sulfate", "k"])
    kcl_out = pd.DataFrame({"stay_id": stay[kcl["k"].to_numpy()], "trigger_minute": kcl["trigger_minute"].to_numpy(),
                            "order_minute": kcl["order_minute"].to_numpy()})  # fmt: skip
    return {"stays": truth_stays, "kcl": kcl_out.reset_index(drop=True)}


#: The marker written last into a generated folder: the arguments that produced it.
MARKER = "mimic_like_icu.json"


def mimic_like_icu(
    root: str, n_stays: int = 1500, obs_hours: int = 12, max_events: int | str | None = 64, seed: int = 0
) -> EHRCohort:
    """Write the seeded MIMIC-IV-shaped files into ``root`` and return the cohort read back, with its ``truth``.

    The files, the truth (``truth_stays.csv``, ``truth_kcl.csv``) and a marker naming the arguments are written
    once: a folder whose marker matches ``(n_stays, obs_hours, seed)`` is re-read, not regenerated.

    Args:
        root: folder receiving ``icu/``, ``hosp/`` and the truth.
        n_stays: ICU stays.
        obs_hours: observation window (hours).
        max_events: per-stay cap: an int, ``"p95"`` (fitted on the seed-``seed`` train split) or ``None``.
        seed: generator seed (also the split seed of the ``p95`` cap).
    """
    folder = Path(root)
    args = {"n_stays": n_stays, "obs_hours": obs_hours, "seed": seed}
    marker = folder / MARKER
    if marker.is_file() and json.loads(marker.read_text()) == args:
        truth = {"stays": pd.read_csv(folder / "truth_stays.csv"), "kcl": pd.read_csv(folder / "truth_kcl.csv")}
    else:
        # written into a private folder, then moved file by file (each move atomic): two processes generating the
        # same (deterministic) folder at once never read a half-written file
        folder.mkdir(parents=True, exist_ok=True)
        marker.unlink(missing_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".generating-", dir=folder))
        try:
            truth = generate_mimic_like(scratch, n_stays, obs_hours, seed)
            truth["stays"].to_csv(scratch / "truth_stays.csv", index=False)
            truth["kcl"].to_csv(scratch / "truth_kcl.csv", index=False)
            (scratch / MARKER).write_text(json.dumps(args))
            for src in sorted(p for p in scratch.rglob("*") if p.is_file() and p.name != MARKER):
                (folder / src.relative_to(scratch)).parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, folder / src.relative_to(scratch))
            os.replace(scratch / MARKER, marker)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    cohort = load_mimiciv(str(folder), obs_hours=obs_hours, max_events=max_events, split_seed=seed)
    cohort.truth = truth
    return cohort
