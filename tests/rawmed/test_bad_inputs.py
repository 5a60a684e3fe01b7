"""Bad RawMed data files and values: each is one line naming the file or option, raised before any data is used.

Rows are ``(id, call, kwargs, the exact one-line message)``. ``{tmp}`` is the folder the shared ``table_files``
fixture writes :data:`FILES` into; a name ``<folder>~<sub>~<file>`` is moved to ``<folder>/<sub>/<file>`` and each
folder is completed from its base (``ok`` for MIMIC-IV folders, ``fold_ok`` for event-table folders) except the
files :data:`ABSENT` names. Each error must be one the ``zoo`` entry point reports as a user error (raised by the zoo's
own code as a ``ValueError`` subclass, or ``FileNotFoundError`` for a missing file).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ROOT, assert_user_error

from datamodules.ehr.datamodule import EHRDataModule
from datamodules.ehr.folder import read_folder
from datamodules.ehr.mimic import load_mimiciv
from datamodules.ehr.serialize import serialize_event, time_digits
from zoo.launcher import user_error

STAYS = ("subject_id,hadm_id,stay_id,first_careunit,last_careunit,intime,outtime,los\n"
         "1,11,101,MICU,MICU,2150-01-01 00:00:00,2150-01-03 00:00:00,2.0\n"
         "2,12,102,SICU,SICU,2150-02-01 00:00:00,2150-02-03 00:00:00,2.0\n")  # fmt: skip
LAB_HEAD = (
    "subject_id,hadm_id,itemid,charttime,value,valuenum,valueuom,ref_range_lower,ref_range_upper,flag,priority,"
    "comments\n"
)
LAB_ROW = "1,11,50001,2150-01-01 01:00:00,1.3,1.3,mg/dL,0.5,1.2,abnormal,ROUTINE,\n"
RX_HEAD = ("subject_id,hadm_id,starttime,drug,drug_type,prod_strength,dose_val_rx,dose_unit_rx,form_val_disp,"
           "form_unit_disp,doses_per_24_hrs,route\n")  # fmt: skip
RX_ROW = "2,12,2150-02-01 02:00:00,Heparin,MAIN,5000 Unit / mL Vial,5000,UNIT,5000,UNIT,2,SC\n"
INP_HEAD = ("subject_id,hadm_id,stay_id,starttime,itemid,amount,amountuom,rate,rateuom,ordercategoryname,"
            "secondaryordercategoryname,ordercomponenttypedescription,ordercategorydescription,patientweight,"
            "totalamount,totalamountuom,isopenbag,originalamount,originalrate\n")  # fmt: skip
INP_ROW = (
    "1,11,101,2150-01-01 03:00:00,22003,500,mL,,,03-IV Fluid Bolus,,Main order parameter,Bolus,80.5,500,mL,0,500,\n"
)
FOLD_LAB = "stay_id,time,itemid,valuenum,ref_range_lower,ref_range_upper,value,valueuom,flag,priority,comments\n"

#: name -> text, written into {tmp} by the `table_files` fixture (then moved into folders, see the module docstring).
FILES = {
    "ok~icu~icustays.csv": STAYS,
    "ok~hosp~labevents.csv": LAB_HEAD + LAB_ROW,
    "ok~hosp~d_labitems.csv": "itemid,label,fluid,category\n50001,Creatinine,Blood,Chemistry\n",
    "ok~hosp~prescriptions.csv": RX_HEAD + RX_ROW,
    "ok~icu~inputevents.csv": INP_HEAD + INP_ROW,
    "ok~icu~d_items.csv": "itemid,label\n22003,NaCl 0.9%\n",
    "no_los~icu~icustays.csv": STAYS.replace(",los\n", "\n").replace(",2.0\n", "\n"),
    "no_valuenum_flag~hosp~labevents.csv": LAB_HEAD.replace("valuenum,", "").replace("flag,", "") + "1,11,50001,"
    "2150-01-01 01:00:00,1.3,mg/dL,0.5,1.2,ROUTINE,\n",
    "bad_intime~icu~icustays.csv": STAYS.replace("2150-02-01 00:00:00", "02/01/2150 00:00"),
    "empty_intime~icu~icustays.csv": STAYS.replace("2150-02-01 00:00:00", ""),
    "bad_stay_id~icu~icustays.csv": STAYS.replace(",102,", ",10x,"),
    "dup_stay~icu~icustays.csv": STAYS.replace(",102,", ",101,"),
    "bad_charttime~hosp~labevents.csv": LAB_HEAD + LAB_ROW + LAB_ROW.replace("2150-01-01 01:00:00", "2150-13-01 01:00"),
    "text_valuenum~hosp~labevents.csv": LAB_HEAD + LAB_ROW.replace("1,11,", "9,99,") + LAB_ROW
    + LAB_ROW.replace(",1.3,mg", ",high,mg"),
    "text_dose~hosp~prescriptions.csv": RX_HEAD + RX_ROW + RX_ROW.replace(",5000,UNIT,5000", ",1-2,UNIT,5000"),
    "no_label~hosp~labevents.csv": LAB_HEAD + LAB_ROW + LAB_ROW.replace("50001", "50009") + LAB_ROW.replace("50001",
                                                                                                            "50007"),
    "orphan~icu~inputevents.csv": INP_HEAD + INP_ROW + INP_ROW.replace(",101,", ",109,"),
    "fold_ok~stays.csv": "stay_id\n101\n102\n",
    "fold_ok~labevents.csv": FOLD_LAB + "101,60,Creatinine,1.3,0.5,1.2,1.3,mg/dL,abnormal,ROUTINE,\n",
    "fold_ok~prescriptions.csv": "stay_id,time,drug,doses_per_24_hrs,dose_val_rx,form_val_disp,drug_type,"
    "prod_strength,dose_unit_rx,form_unit_disp,route\n102,120,Heparin,2,5000,5000,MAIN,5000 Unit,UNIT,UNIT,SC\n",
    "fold_ok~inputevents.csv": "stay_id,time,itemid,amount,rate,patientweight,totalamount,originalamount,originalrate,"
    "amountuom,rateuom,ordercategoryname,secondaryordercategoryname,ordercomponenttypedescription,"
    "ordercategorydescription,totalamountuom,isopenbag\n101,180,NaCl 0.9%,500,,80.5,500,500,,mL,,03-IV Fluid Bolus,,"
    "Main order parameter,Bolus,mL,0\n",
    "fold_header~labevents.csv": FOLD_LAB.replace("valuenum,", "") + "101,60,Creatinine,0.5,1.2,1.3,mg/dL,,ROUTINE,\n",
    "fold_time~labevents.csv": FOLD_LAB + "101,60.5,Creatinine,1.3,0.5,1.2,1.3,mg/dL,abnormal,ROUTINE,\n",
    "fold_number~labevents.csv": FOLD_LAB + "101,60,Creatinine,1.3x,0.5,1.2,1.3,mg/dL,abnormal,ROUTINE,\n",
    "fold_stay~labevents.csv": FOLD_LAB + "105,60,Creatinine,1.3,0.5,1.2,1.3,mg/dL,abnormal,ROUTINE,\n",
}  # fmt: skip

#: folder -> files left out of it (not completed from the base).
ABSENT = {"no_d_items": ("icu/d_items.csv",), "fold_no_stays": ("stays.csv",)}


@pytest.fixture
def folders(table_files: Path) -> Path:
    """The FILES moved into their folders, each completed from its base."""
    for name in list(FILES):
        if "~" in name:
            target = table_files / Path(*name.split("~"))
            target.parent.mkdir(parents=True, exist_ok=True)
            (table_files / name).rename(target)
    for folder in ("no_d_items", "fold_no_stays"):
        (table_files / folder).mkdir()
    for folder in [p for p in table_files.iterdir() if p.is_dir()]:
        base = table_files / ("fold_ok" if folder.name.startswith("fold") else "ok")
        for src in base.rglob("*.csv"):
            rel = src.relative_to(base)
            dst = folder / rel
            if not dst.exists() and str(rel) not in ABSENT.get(folder.name, ()):
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, dst)
    return table_files


DM = EHRDataModule
DM_ROOT = "--data.init_args.root"

#: (id, call, kwargs, the exact one-line message)
BAD_INPUTS = [
    # MIMIC-IV files
    ("mimic_missing_file", load_mimiciv, {"root": "{tmp}/no_d_items"},
     "{tmp}/no_d_items/icu/d_items.csv: no such file (nor .csv.gz); expected the MIMIC-IV file icu/d_items.csv[.gz] "
     "under root='{tmp}/no_d_items' (downloads are disabled: obtain MIMIC-IV from PhysioNet and place it there)"),
    ("mimic_missing_root", load_mimiciv, {"root": "{tmp}/nowhere"},
     "{tmp}/nowhere/icu/icustays.csv: no such file (nor .csv.gz); expected the MIMIC-IV file icu/icustays.csv[.gz] "
     "under root='{tmp}/nowhere' (downloads are disabled: obtain MIMIC-IV from PhysioNet and place it there)"),
    ("mimic_missing_los", load_mimiciv, {"root": "{tmp}/no_los"},
     "{tmp}/no_los/icu/icustays.csv: missing column(s) ['los']; expected subject_id, hadm_id, stay_id, first_careunit, "
     "last_careunit, intime, outtime, los (others are ignored), found subject_id, hadm_id, stay_id, first_careunit, "
     "last_careunit, intime, outtime"),
    ("mimic_missing_two_columns", load_mimiciv, {"root": "{tmp}/no_valuenum_flag"},
     "{tmp}/no_valuenum_flag/hosp/labevents.csv: missing column(s) ['valuenum', 'flag']; expected hadm_id, charttime, "
     "itemid, valuenum, ref_range_lower, ref_range_upper, value, valueuom, flag, priority, comments (others are "
     "ignored), found subject_id, hadm_id, itemid, charttime, value, valueuom, ref_range_lower, ref_range_upper, "
     "priority, comments"),
    ("mimic_bad_intime", load_mimiciv, {"root": "{tmp}/bad_intime"},
     "{tmp}/bad_intime/icu/icustays.csv: column 'intime' has 1 unparseable time(s) (first: '02/01/2150 00:00' at data "
     "row 2); expected YYYY-MM-DD HH:MM:SS"),
    ("mimic_empty_intime", load_mimiciv, {"root": "{tmp}/empty_intime"},
     "{tmp}/empty_intime/icu/icustays.csv: column 'intime' is empty at data row 2; expected a value for every stay"),
    ("mimic_bad_stay_id", load_mimiciv, {"root": "{tmp}/bad_stay_id"},
     "{tmp}/bad_stay_id/icu/icustays.csv: column 'stay_id' has 1 value(s) that are not an integer (first: '10x' at "
     "data row 2); expected an integer or an empty cell"),
    ("mimic_duplicate_stay", load_mimiciv, {"root": "{tmp}/dup_stay"},
     "{tmp}/dup_stay/icu/icustays.csv: stay_id 101 appears more than once; expected one row per ICU stay"),
    ("mimic_bad_charttime", load_mimiciv, {"root": "{tmp}/bad_charttime"},
     "{tmp}/bad_charttime/hosp/labevents.csv: column 'charttime' has 1 unparseable time(s) (first: '2150-13-01 01:00' "
     "at data row 2); expected YYYY-MM-DD HH:MM:SS"),
    ("mimic_text_valuenum", load_mimiciv, {"root": "{tmp}/text_valuenum"},
     "{tmp}/text_valuenum/hosp/labevents.csv: column 'valuenum' has 1 value(s) that are not a number (first: 'high' "
     "at data row 3); expected a number or an empty cell"),
    ("mimic_text_dose", load_mimiciv, {"root": "{tmp}/text_dose"},
     "{tmp}/text_dose/hosp/prescriptions.csv: column 'dose_val_rx' has 1 value(s) that are not a number (first: '1-2' "
     "at data row 2); expected a number or an empty cell"),
    ("mimic_unlabelled_items", load_mimiciv, {"root": "{tmp}/no_label"},
     "{tmp}/no_label/hosp/labevents.csv: 2 itemid(s) without a label in {tmp}/no_label/hosp/d_labitems.csv (first: "
     "50009); expected every itemid of the cohort's rows listed with a label"),
    ("mimic_orphan_input", load_mimiciv, {"root": "{tmp}/orphan"},
     "{tmp}/orphan/icu/inputevents.csv: 1 row(s) with a stay_id not in {tmp}/orphan/icu/icustays.csv (first: 109 at "
     "data row 2); expected every event inside a listed ICU stay"),
    ("mimic_max_events", load_mimiciv, {"root": "{tmp}/ok", "max_events": "p90"},
     "load_mimiciv: max_events='p90': expected an integer >= 1, 'p95' or None"),
    ("mimic_obs_hours", load_mimiciv, {"root": "{tmp}/ok", "obs_hours": 0},
     "load_mimiciv: obs_hours=0: expected an integer >= 1"),
    ("mimic_non_numeric", load_mimiciv, {"root": "{tmp}/ok", "non_numeric": "drop"},
     "load_mimiciv: non_numeric='drop': expected one of 'error', 'null'"),
    # event-table folders
    ("folder_no_stays", read_folder, {"path": "{tmp}/fold_no_stays"},
     "{tmp}/fold_no_stays/stays.csv: no such file; expected an event-table folder with stays.csv and labevents.csv, "
     "prescriptions.csv, inputevents.csv"),
    ("folder_header", read_folder, {"path": "{tmp}/fold_header"},
     "{tmp}/fold_header/labevents.csv: header stay_id,time,itemid,ref_range_lower,ref_range_upper,value,valueuom,flag,"
     "priority,comments; expected stay_id,time,itemid,valuenum,ref_range_lower,ref_range_upper,value,valueuom,flag,"
     "priority,comments"),
    ("folder_time", read_folder, {"path": "{tmp}/fold_time"},
     "{tmp}/fold_time/labevents.csv: column 'time' has '60.5' at data row 1; expected an integer in every row"),
    ("folder_number", read_folder, {"path": "{tmp}/fold_number"},
     "{tmp}/fold_number/labevents.csv: column 'valuenum' has '1.3x' at data row 1; expected a number or an empty cell"),
    ("folder_stay", read_folder, {"path": "{tmp}/fold_stay"},
     "{tmp}/fold_stay/labevents.csv: stay_id 105 is not listed in {tmp}/fold_stay/stays.csv; expected every event's "
     "stay listed there"),
    # serialization values
    ("time_negative", time_digits, {"minutes": -5, "obs_hours": 12},
     "time -5 min: expected 0 <= minutes // 10 < 100 (2 digits at obs_hours=12)"),
    ("value_too_big", serialize_event, {"table": "labevents", "row": {"itemid": "x", "valuenum": 2e9}},
     "labevents.valuenum: value 2000000000.0: expected a finite number with |value| < 1e9"),
    ("value_infinite", serialize_event, {"table": "inputevents", "row": {"itemid": "x", "rate": float("inf")}},
     "inputevents.rate: value inf: expected a finite number with |value| < 1e9"),
    ("unknown_table", serialize_event, {"table": "chartevents", "row": {}},
     "table 'chartevents': expected one of labevents, prescriptions, inputevents"),
    # datamodule options (checked before any data is built)
    ("dm_source", DM, {"source": "eicu"},
     "--data.init_args.source='eicu': expected one of 'mimic_like_icu', 'mimiciv'"),
    ("dm_mimiciv_no_root", DM, {"source": "mimiciv"},
     "--data.init_args.root=None: expected the MIMIC-IV folder (icu/ and hosp/) with source='mimiciv'"),
    ("dm_mimiciv_missing", DM, {"source": "mimiciv", "root": "{tmp}/no_d_items"},
     "{tmp}/no_d_items/icu/d_items.csv: no such file (nor .csv.gz); expected the MIMIC-IV file icu/d_items.csv[.gz] "
     "under root='{tmp}/no_d_items' (downloads are disabled: obtain MIMIC-IV from PhysioNet and place it there)"),
    ("dm_n_stays", DM, {"n_stays": 5}, "--data.init_args.n_stays=5: expected an integer >= 20"),
    ("dm_obs_hours", DM, {"obs_hours": 0}, "--data.init_args.obs_hours=0: expected an integer in [1, 168]"),
    ("dm_max_events_text", DM, {"max_events": "p90"}, "--data.init_args.max_events='p90': expected an integer >= 1 or "
     "'p95'"),
    ("dm_max_events_0", DM, {"max_events": 0}, "--data.init_args.max_events=0: expected an integer >= 1"),
    ("dm_L", DM, {"L": 2}, "--data.init_args.L=2: expected an integer >= 4"),
    ("dm_time_mode", DM, {"time_mode": "inline"},
     "--data.init_args.time_mode='inline': expected one of 'separate', 'in_text'"),
    ("dm_stage", DM, {"stage": "codes"}, "--data.init_args.stage='codes': expected one of 'events', 'stays'"),
    ("dm_batch_size", DM, {"batch_size": 0}, "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("dm_seed", DM, {"seed": -1}, "--data.init_args.seed=-1: expected an integer >= 0"),
    ("dm_non_numeric", DM, {"non_numeric": "drop"},
     "--data.init_args.non_numeric='drop': expected one of 'error', 'null'"),
    ("dm_text_dose", DM, {"source": "mimiciv", "root": "{tmp}/text_dose"},
     "{tmp}/text_dose/hosp/prescriptions.csv: column 'dose_val_rx' has 1 value(s) that are not a number (first: '1-2' "
     "at data row 2); expected a number or an empty cell"),
]  # fmt: skip


def _sub(value: object, tmp: Path) -> object:
    return value.replace("{tmp}", str(tmp)) if isinstance(value, str) else value


@pytest.mark.parametrize(("call", "kwargs", "line"), [r[1:] for r in BAD_INPUTS], ids=[r[0] for r in BAD_INPUTS])
def test_bad_input_is_one_line(folders: Path, call: object, kwargs: dict, line: str) -> None:
    """Each bad file or value raises the row's exact one-line message, as a user error of the zoo's own code."""
    kwargs = {k: _sub(v, folders) for k, v in kwargs.items()}
    with pytest.raises((ValueError, FileNotFoundError)) as info:
        call(**kwargs)
    assert str(info.value) == _sub(line, folders)
    assert user_error(info.value) is info.value, "not raised by the zoo's own code: the entry point would trace back"


def test_good_files_of_the_table_load(folders: Path) -> None:
    """The rows fail for the reason they name: the valid folders next to them load (2 stays, one event per table;
    the 'null' option reads the text dose as null)."""
    c = load_mimiciv(str(folders / "ok"), max_events=None)
    assert c.stay_ids == [101, 102] and [len(c.tables[t]) for t in c.tables] == [1, 1, 1]
    assert c.tables["labevents"]["itemid"].tolist() == ["Creatinine"]
    c = load_mimiciv(str(folders / "text_dose"), max_events=None, non_numeric="null")
    assert c.tables["prescriptions"]["dose_val_rx"].isna().tolist() == [False, True]
    dm = EHRDataModule(source="mimiciv", root=str(folders / "text_dose"), n_stays=20, non_numeric="null", L=32)
    assert dm.cohort.tables["prescriptions"]["dose_val_rx"].isna().tolist() == [False, True]
    stays, tables = read_folder(folders / "fold_ok")
    assert stays == [101, 102] and tables["inputevents"]["itemid"].tolist() == ["NaCl 0.9%"]


# --- through the real entry point: `zoo fit -c configs/rawmed/<config>.yaml <args> --trainer.fast_dev_run=1` ---------

#: jsonargparse names the class after a bad ``Literal`` choice.
RQVAE, AR, BASE = (" (zoo.rawmed.module.RawMedRQVAE)", " (zoo.rawmed.module.RawMedAR)",
                   " (zoo.rawmed.module.SyntheticBaseline)")  # fmt: skip
TINY = ["--data.init_args.n_stays=40", "--data.init_args.max_events=8"]
SMOKE = [*TINY, "--model.init_args.pretrained=configs/rawmed/rqvae_tiny.yaml"]  # the stage-1 smoke recipe

CLI_ROWS = [
    # data rows end to end (the table above has them all)
    ("cli_missing_file", "rqvae", ["--data.init_args.source=mimiciv", "--data.init_args.root={tmp}/no_d_items"],
     "{tmp}/no_d_items/icu/d_items.csv: no such file (nor .csv.gz); expected the MIMIC-IV file icu/d_items.csv[.gz] "
     "under root='{tmp}/no_d_items' (downloads are disabled: obtain MIMIC-IV from PhysioNet and place it there)"),
    ("cli_missing_columns", "copy", ["--data.init_args.source=mimiciv", "--data.init_args.root={tmp}/no_los"],
     "{tmp}/no_los/icu/icustays.csv: missing column(s) ['los']; expected subject_id, hadm_id, stay_id, first_careunit, "
     "last_careunit, intime, outtime, los (others are ignored), found subject_id, hadm_id, stay_id, first_careunit, "
     "last_careunit, intime, outtime"),
    # module values
    ("rqvae_L_not_power_of_two", "rqvae", [*TINY, "--model.init_args.L=48"],
     "--model.init_args.L=48: expected L / L_z (L_z=4) to be a power of 2 >= 2 (one stride-2 stage each)"),
    ("rqvae_decay_1", "rqvae", [*TINY, "--model.init_args.decay=1.0"],
     "--model.init_args.decay=1.0: expected a number in (0, 1)"),
    ("rqvae_recon_loss", "rqvae", [*TINY, "--model.init_args.recon_loss=mse"],
     "--model.init_args.recon_loss='mse': expected one of 'ce', 'mse_embed'" + RQVAE),
    ("ar_no_pretrained", "default", [*TINY, "--model.init_args.pretrained=null"],
     "--model.init_args.pretrained=None: expected the stage-1 checkpoint or recipe (configs/rawmed/rqvae.yaml)"),
    ("ar_missing_checkpoint", "default", [*TINY, "--model.init_args.pretrained={tmp}/missing.ckpt"],
     "--model.init_args.pretrained='{tmp}/missing.ckpt': no such checkpoint"),
    ("ar_top_k_0", "default", [*SMOKE, "--model.init_args.top_k=0"],
     "--model.init_args.top_k=0: expected an integer >= 1"),
    ("ar_nonmonotone", "default", [*SMOKE, "--model.init_args.nonmonotone=keep"],
     "--model.init_args.nonmonotone='keep': expected one of 'drop', 'sort'" + AR),
    ("ar_eval_part", "default", [*SMOKE, "--model.init_args.eval_parts=[fidelity,speed]"],
     "--model.init_args.eval_parts='speed': expected one of 'fidelity', 'temporal', 'utility', 'privacy', "
     "'predictive', 'next_event'"),
    ("baseline_kind", "marginal", [*TINY, "--model.init_args.kind=sdv"],
     "--model.init_args.kind='sdv': expected one of 'marginal', 'copy'" + BASE),
]  # fmt: skip


@pytest.mark.parametrize(("config", "args", "line"), [r[1:] for r in CLI_ROWS], ids=[r[0] for r in CLI_ROWS])
def test_bad_input_through_zoo_fit(folders: Path, capsys: pytest.CaptureFixture[str], config: str, args: list[str],
                                   line: str) -> None:  # fmt: skip
    """Catches an error that reaches the user as a traceback, or as a line without the option, file or field."""
    cli = ["fit", "-c", str(ROOT / f"configs/rawmed/{config}.yaml"), *args, "--trainer.fast_dev_run=1"]
    assert_user_error(cli, line, capsys, folders)
