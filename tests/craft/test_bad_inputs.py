"""Bad input through the real `zoo` entry (issue #19): every CRAFT on-disk format and value, one line, exit code 2.

Each row runs `zoo fit -c configs/craft/default.yaml <tiny flags> <args> --trainer.fast_dev_run=1` in this process and
expects `zoo: error: <line>` as the last stderr line, before any training step. The JODIE, DyGLib, TGB and TGB-Seq
files are written by the `files` fixture into the test's folder, which is the working directory (conftest), so paths
are relative. An unknown enum value (`--data.init_args.format=csv`) is refused by jsonargparse against the Literal type
before the zoo's code runs, so it has no row here.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_user_error, bad_inputs, tiny

CONFIG = ["fit", "-c", str(ROOT / "configs/craft/default.yaml"), *tiny("craft")]
JODIE = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features"
LAYOUT = "user_id,item_id,timestamp,state_label,features..."
NO_DOWNLOAD = ("Downloads are disabled (the zoo never downloads, TGB `download=True` and the TGB-Seq hub fetch are "
               "bypassed): place the file at this path or point --data.init_args.path at it")  # fmt: skip


def _path(name: str, *more: str) -> list[str]:
    return [f"--data.init_args.path={name}", *more]


#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # any format
    ("missing_file", _path("missing.csv"), f"missing.csv: data path not found. {NO_DOWNLOAD}"),
    ("ambiguous_folder", _path("data"),
     "--data.init_args.path=data is a folder with 2 csv files; pass --data.init_args.name=<dataset> (e.g. wikipedia, "
     "tgbl-wiki) or the data file itself"),
    # JODIE csv
    ("jodie_empty_file", _path("empty.csv"),
     "empty.csv: expected 1 header line(s) and at least one data row, found 0 line(s)"),
    ("jodie_no_header", _path("no_header.csv"),
     f"no_header.csv: line 1: expected the header ({LAYOUT}), found a data row '0,0,1.0,0,0.5' (the first line is "
     "never read as an event: add the header line)"),
    ("jodie_malformed_line", _path("fields.csv"),
     "fields.csv: line 4: expected 5 comma-separated fields (as in the first data row, line 2), found 6"),
    ("jodie_missing_column", _path("three.csv"),
     "three.csv: line 2: expected at least 4 fields (user,item,timestamp,state_label[,features]), found 3"),
    ("jodie_wrong_type", _path("word.csv"), "word.csv: line 3: expected a number in column 1 (user id), found 'abc'"),
    ("jodie_fractional_id", _path("frac.csv"),
     "frac.csv: line 3: expected an integer in column 2 (item id), found 1.5"),
    ("jodie_negative_id", _path("neg.csv"), "neg.csv: line 3: expected user id >= 0 in column 1, found -1.0"),
    ("jodie_infinite_feature", _path("inf.csv"),
     "inf.csv: line 3: expected a finite number in column 5 (edge feature), found inf"),
    ("jodie_decreasing_time", _path("order.csv"),
     "order.csv: line 4: expected non-decreasing timestamps, found 1.0 after 5.0 (pass --data.init_args.sort=true to "
     "stable-sort the events by time)"),
    ("jodie_one_time", _path("flat.csv"),
     "flat.csv: the val split is empty (--data.init_args.val_ratio=0.15, --data.init_args.test_ratio=0.15; 40 events, "
     "1 distinct times)"),
    # DyGLib ml_<name>.csv (+ .npy)
    ("dyglib_missing_column", _path("ml_nocol.csv"),
     "ml_nocol.csv: line 1: expected header ',u,i,ts,label,idx' (pandas index column first), found ',u,i,ts,label' "
     "(missing ['idx'])"),
    ("dyglib_idx", _path("ml_idx.csv"), "ml_idx.csv: line 7: expected idx = 6 (idx must run 1..E), found 99"),
    ("dyglib_feature_rows", _path("ml_rows.csv"),
     "ml_rows.npy: expected a 2-d array with E+1 = 41 rows (row 0 zeros, E = 40 events in ml_rows.csv), found shape "
     "(40, 4)"),
    ("dyglib_feature_nan", _path("ml_nan.csv"), "ml_nan.npy: row 3, column 3: expected a finite feature, found nan"),
    ("dyglib_feature_type", _path("ml_bool.csv"), "ml_bool.npy: expected real-valued features, found dtype bool"),
    ("dyglib_feature_unreadable", _path("ml_junk.csv"),
     "ml_junk.npy: not a readable .npy edge-feature array (no .npy header; write it with numpy.save)"),
    # TGB-Seq <name>.csv (+ _test_ns.npy)
    ("tgbseq_split_value", _path("seq_split.csv"), "seq_split.csv: line 9: expected split in {0, 1, 2}, found 3"),
    ("tgbseq_header", _path("seq_order.csv", "--data.init_args.format=tgbseq"),
     "seq_order.csv: line 1: expected the header 'src,dst,time,split', found 'dst,src,time,split'"),
    ("tgbseq_negative_rows", _path("seq_rows.csv"),
     "seq_rows_test_ns.npy: expected a 2-d array with one row per split==2 event of seq_rows.csv (3 rows), found "
     "shape (4, 100)"),
    ("tgbseq_negative_type", _path("seq_float.csv"),
     "seq_float_test_ns.npy: expected integer node ids, found dtype float64"),
    ("tgbseq_negative_range", _path("seq_range.csv"),
     "seq_range_test_ns.npy: row 2, column 8: expected a node id in [0, 11] (the ids of seq_range.csv), found 12"),
    ("id_space_on_unipartite", _path("seq_ok.csv", "--model.init_args.id_space=dst_only"),
     "--model.init_args.id_space=dst_only needs bipartite data (the datamodule found none)"),
    # TGB tgbl-<name> folder (edge list + _{val,test}_ns[_v2].pkl)
    ("tgb_field_count", _path("tgb_fields/tgbl-coin_edgelist_v2.csv"),
     "tgb_fields/tgbl-coin_edgelist_v2.csv: line 2: expected 4 fields (ts,src,dst,weight), found 3"),
    ("tgb_mixed_versions", _path("tgb_mixed/tgbl-coin_edgelist_v2.csv"),
     "tgb_mixed: expected negative files of one version (all `_v2` or all unsuffixed), found a mix: "
     "['tgbl-coin_test_ns.pkl', 'tgbl-coin_test_ns_v2.pkl', 'tgbl-coin_val_ns_v2.pkl'] (TGB #108: negatives of "
     "another dataset version do not match its edges)"),
    ("tgb_missing_key", _path("tgb_key/tgbl-coin_edgelist_v2.csv"),
     "tgb_key/tgbl-coin_test_ns_v2.pkl: expected negatives for every test event, found 1 of 6 keys missing; first "
     "missing key (src, dst, t) = (3, 4, 1102) (TGB 0-based ids) from tgb_key/tgbl-coin_edgelist_v2.csv line 36"),
    ("tgb_pickle_unreadable", _path("tgb_junk/tgbl-coin_edgelist_v2.csv"),
     "tgb_junk/tgbl-coin_test_ns_v2.pkl: not a readable pickle of TGB negatives (UnpicklingError: pickle data was "
     "truncated)"),
    ("tgb_negative_type", _path("tgb_float/tgbl-coin_edgelist_v2.csv"),
     "tgb_float/tgbl-coin_test_ns_v2.pkl: key (3, 4, 1102): expected integer node ids, found dtype float64 ([1.5, "
     "2.5] ...)"),
    ("tgb_fractional_time", _path("tgb_frac/tgbl-coin_edgelist_v2.csv"),
     "tgb_frac/tgbl-coin_edgelist_v2.csv: line 41: expected an integer timestamp (TGB keys its negatives by (src, "
     "dst, int t)), found 1117.5"),
    # values
    ("batch_size_0", ["--data.init_args.batch_size=0"], "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("negatives_0", ["--data.init_args.num_eval_negatives=0"],
     "--data.init_args.num_eval_negatives=0: expected an integer >= 1"),
    ("fraction_1.5", ["--data.init_args.val_ratio=1.5"], "--data.init_args.val_ratio=1.5: expected a number in (0, 1)"),
    ("fractions_sum_1", ["--data.init_args.val_ratio=0.5", "--data.init_args.test_ratio=0.5"],
     "--data.init_args.val_ratio=0.5: expected val_ratio + test_ratio=0.5 < 1 (training needs a share)"),
    ("probability_1.5", ["--data.init_args.p_repeat=1.5"],
     "--data.init_args.p_repeat=1.5: expected a number in [0, 1]"),
    ("negative_users", ["--data.init_args.n_users=-5"], "--data.init_args.n_users=-5: expected an integer >= 1"),
    ("format_without_path", ["--data.init_args.format=jodie"],
     "--data.init_args.format='jodie': expected auto when path is null (the generator)"),
    ("window_0", ["--model.init_args.L=0"], "--model.init_args.L=0: expected an integer >= 1"),
    ("heads_3", ["--model.init_args.heads=3"], "--model.init_args.d=64 must be divisible by --model.init_args.heads=3"),
    ("dropout_1.5", ["--model.init_args.emb_dropout=1.5"],
     "--model.init_args.emb_dropout=1.5: expected a number in [0, 1]"),
]  # fmt: skip


def _jodie(rows: list[str]) -> str:
    return JODIE + "\n" + "\n".join(rows) + "\n"


def _tgb(folder: Path, tamper: str = "") -> None:
    """A tiny tgbl-coin folder (string ids; 0-based pickled negatives keyed by (src, dst, int t)), then ``tamper``."""
    folder.mkdir()
    names = [f"0x{k:02x}" for k in range(8)]
    rows = [(1000 + 3 * e, names[e % 8], names[(3 * e + 1) % 8]) for e in range(40)]
    width = 3 if tamper == "fields" else 4
    lines = ["ts,src,dst,weight"] + [",".join([str(t), s, d, "1.0"][:width]) for t, s, d in rows]
    if tamper == "frac":
        lines[-1] = lines[-1].replace("1117", "1117.5", 1)  # a test event
    (folder / "tgbl-coin_edgelist_v2.csv").write_text("\n".join(lines) + "\n")
    ids: dict[str, int] = {}
    for _, s, d in rows:
        ids.setdefault(s, len(ids))
        ids.setdefault(d, len(ids))
    ts = np.array([t for t, _, _ in rows], dtype=float)
    q_val, q_test = np.quantile(ts, [0.7, 0.85])
    for split, sel in (("val", (ts > q_val) & (ts <= q_test)), ("test", ts > q_test)):
        neg = np.array([1.5, 2.5]) if tamper == "float" and split == "test" else np.array([1, 2])
        table = {(ids[rows[e][1]], ids[rows[e][2]], rows[e][0]): neg for e in np.flatnonzero(sel)}
        if tamper == "key" and split == "test":
            table.pop(next(iter(table)))
        data = b"junk" if tamper == "junk" and split == "test" else pickle.dumps(table)
        (folder / f"tgbl-coin_{split}_ns_v2.pkl").write_bytes(data)
    if tamper == "mixed":
        (folder / "tgbl-coin_test_ns.pkl").write_bytes((folder / "tgbl-coin_test_ns_v2.pkl").read_bytes())


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    """The malformed files of :data:`BAD_INPUTS`, in the working directory."""
    good = [f"{e % 5},{e % 7},{float(e)},0,0.5" for e in range(40)]
    texts = {
        "empty.csv": "", "no_header.csv": "0,0,1.0,0,0.5\n" + "\n".join(good[1:]) + "\n",
        "fields.csv": _jodie(good[:2] + [good[2] + ",0.7"] + good[3:]), "three.csv": _jodie(["0,0,1.0"] * 3),
        "word.csv": _jodie(good[:1] + ["abc,0,1.0,0,0.5"] + good[2:]),
        "frac.csv": _jodie(good[:1] + ["1,1.5,1.0,0,0.5"] + good[2:]),
        "neg.csv": _jodie(good[:1] + ["-1,0,1.0,0,0.5"] + good[2:]),
        "inf.csv": _jodie(good[:1] + ["1,1,1.0,0,inf"] + good[2:]),
        "order.csv": _jodie(["0,0,0.0,0,0.5", "1,1,5.0,0,0.5", "2,2,1.0,0,0.5"]),
        "flat.csv": _jodie([f"{e % 5},{e % 7},3.0,0,0.5" for e in range(40)]),
        "data/a.csv": _jodie(good), "data/b.csv": _jodie(good),
    }  # fmt: skip
    (tmp_path / "data").mkdir()
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    ml = [",u,i,ts,label,idx"] + [f"{e},{e % 5 + 1},{e % 7 + 6},{float(e)},0,{e + 1}" for e in range(40)]
    (tmp_path / "ml_nocol.csv").write_text("\n".join(line.rsplit(",", 1)[0] for line in ml) + "\n")
    (tmp_path / "ml_idx.csv").write_text("\n".join(ml[:6] + [ml[6].rsplit(",", 1)[0] + ",99"] + ml[7:]) + "\n")
    features = {"rows": np.zeros((40, 4)), "nan": np.zeros((41, 4)), "bool": np.zeros((41, 4), dtype=bool)}
    features["nan"][3, 2] = np.nan
    for name, feat in features.items():
        (tmp_path / f"ml_{name}.csv").write_text("\n".join(ml) + "\n")
        np.save(tmp_path / f"ml_{name}.npy", feat)
    (tmp_path / "ml_junk.csv").write_text("\n".join(ml) + "\n")
    (tmp_path / "ml_junk.npy").write_text("junk")
    split = [0] * 14 + [1] * 3 + [2] * 3
    seq = [f"{e % 5},{5 + e % 7},{e},{split[e]}" for e in range(20)]  # sources 0..4, destinations 5..11
    for name, negatives in (("split", None), ("rows", np.ones((4, 100), dtype=np.int64)),
                            ("float", np.full((3, 100), 1.5)), ("range", np.ones((3, 100), dtype=np.int64)),
                            ("ok", None)):  # fmt: skip
        rows = seq[:7] + ["2,7,7,3"] + seq[8:] if name == "split" else seq
        (tmp_path / f"seq_{name}.csv").write_text("src,dst,time,split\n" + "\n".join(rows) + "\n")
        if negatives is not None:
            if name == "range":
                negatives[1, 7] = 12  # the largest id is 11
            np.save(tmp_path / f"seq_{name}_test_ns.npy", negatives)
    shared = [f"{e % 5},{e % 4},{e},{split[e]}" for e in range(20)]  # one id space: not bipartite
    (tmp_path / "seq_ok.csv").write_text("src,dst,time,split\n" + "\n".join(shared) + "\n")
    head, *body = (tmp_path / "seq_rows.csv").read_text().splitlines()
    (tmp_path / "seq_order.csv").write_text("dst,src,time,split\n" + "\n".join(body) + "\n")
    for tamper in ("fields", "mixed", "key", "junk", "float", "frac"):
        _tgb(tmp_path / f"tgb_{tamper}", tamper)
    return tmp_path


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(files: Path, args: list[str], line: str, capsys) -> None:
    assert_user_error([*CONFIG, *args, "--trainer.fast_dev_run=1"], line, capsys)
