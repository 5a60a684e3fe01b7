"""Bad binary data files and values: each is one line naming the option or file, raised before any data is used.

Rows are calls of the datamodule constructors, ``(id, class, kwargs, the exact one-line message)``: each kwarg is the
flag ``--data.init_args.<key>=<value>`` of a ``zoo fit`` run, so a row becomes a CLI row of ``assert_user_error`` once
the method's configs exist. ``{tmp}`` is the folder the shared ``table_files`` fixture writes :data:`FILES` into.
The raised error must also be one the ``zoo`` entry point reports as a user error (``zoo: error: <line>``, exit 2):
raised by the zoo's own code with a ``ValueError``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, assert_user_error, installed

from datamodules.binary.datamodule import BinaryCSVDataModule, BinaryMVBDataModule, PgmpyBIFDataModule
from zoo.launcher import user_error


def _rows(body: str, n: int = 12) -> str:
    return body * n


#: name -> text, written into {tmp} by the `table_files` fixture.
FILES = {
    "ok.csv": "a,b,c\n" + _rows("0,1,1\n1,0,1\n", 6),
    "empty.csv": "",
    "dup.csv": "a,b,a\n" + _rows("0,1,1\n"),
    "blank_name.csv": "a,,c\n" + _rows("0,1,1\n"),
    "one_column.csv": "a\n" + _rows("0\n1\n", 6),
    "few.csv": "a,b\n" + _rows("0,1\n", 9),
    "empty_cell.csv": "a,b\n" + _rows("0,1\n", 4) + "1,\n" + _rows("1,0\n", 7),
    "na_cell.csv": "a,b\n" + _rows("0,1\n", 2) + "NA,1\n" + _rows("1,0\n", 9),
    "three.csv": "a,b\n" + _rows("0,low\n1,mid\n0,high\n", 4),
    "many.csv": "a,b\n" + "".join(f"{i % 2},{i}\n" for i in range(12)),
    "long_row.csv": "a,b\n" + _rows("0,1\n", 4) + "1,0,1\n" + _rows("1,0\n", 7),
    "long_rows.csv": "a,b\n" + _rows("0,1,1\n"),
    "truth_unknown.csv": "source,target\na,b\nb,z\n",
    "truth_cycle.csv": "source,target\na,b\nb,c\nc,a\n",
    "truth_self.csv": "source,target\nb,b\n",
    "truth_header.csv": "from,to\na,b\n",
    "truth_row.csv": "source,target\na,b\nc\n",
    "truth_junk.bif": "network junk {\nvariable a {\n",
    "truth_unknown.bif": "network n {\n}\nvariable a {\n  type discrete [ 2 ] { no, yes };\n}\nvariable z {\n  type "
    "discrete [ 2 ] { no, yes };\n}\nprobability ( a ) {\n  table 0.5, 0.5;\n}\nprobability ( z | a ) {\n  (no) 0.5,"
    " 0.5;\n  (yes) 0.5, 0.5;\n}\n",
}

MVB, BIF, CSV = BinaryMVBDataModule, PgmpyBIFDataModule, BinaryCSVDataModule
OK = "{tmp}/ok.csv"

#: (id, datamodule class, constructor kwargs, the exact one-line message)
BAD_INPUTS = [
    # BinaryMVBDataModule values
    ("mvb_d_1", MVB, {"d": 1}, "--data.init_args.d=1: expected an integer >= 2"),
    ("mvb_graph", MVB, {"graph": "tree"}, "--data.init_args.graph='tree': expected one of 'er', 'sf', 'interaction5'"),
    ("mvb_interaction5_d", MVB, {"graph": "interaction5"},
     "--data.init_args.d=10: expected 5 with graph='interaction5' (the fixture has 5 nodes)"),
    ("mvb_k_0", MVB, {"k": 0}, "--data.init_args.k=0: expected an integer in [1, 9]"),
    ("mvb_k_d", MVB, {"k": 10}, "--data.init_args.k=10: expected an integer in [1, 9]"),
    ("mvb_n_0", MVB, {"n": 0}, "--data.init_args.n=0: expected an integer >= 1"),
    ("mvb_seed", MVB, {"seed": -1}, "--data.init_args.seed=-1: expected an integer >= 0"),
    ("mvb_conditional", MVB, {"conditional": "noisy_or"},
     "--data.init_args.conditional='noisy_or': expected one of 'interaction', 'random_cpt', 'logistic_linear'"),
    ("mvb_order_0", MVB, {"max_interaction_order": 0},
     "--data.init_args.max_interaction_order=0: expected an integer >= 1"),
    ("mvb_in_degree_0", MVB, {"max_in_degree": 0}, "--data.init_args.max_in_degree=0: expected an integer in [1, 16]"),
    ("mvb_sf_k_above_in_degree", MVB, {"graph": "sf", "k": 5},
     "--data.init_args.k=5: expected <= max_in_degree=4 with graph='sf' (every later node gets k parents)"),
    ("mvb_er_no_graph", MVB, {"k": 3, "max_in_degree": 1},
     "--data.init_args.k=3, max_in_degree=1: no 'er' graph with d=10, k=3 and every in-degree <= 1 in 1000 draws; "
     "lower k or raise max_in_degree"),
    # PgmpyBIFDataModule values (checked before pgmpy is imported)
    ("bif_name", BIF, {"name": "barley"},
     "--data.init_args.name='barley': expected one of 'asia', 'cancer', 'earthquake', 'win95pts', 'andes', 'sachs', "
     "'child', 'alarm', 'insurance', 'survey'"),
    ("bif_n_0", BIF, {"n": 0}, "--data.init_args.n=0: expected an integer >= 1"),
    ("bif_seed", BIF, {"seed": -2}, "--data.init_args.seed=-2: expected an integer >= 0"),
    ("bif_binarize", BIF, {"binarize": "mean"},
     "--data.init_args.binarize='mean': expected one of 'first_vs_rest', 'median', None"),
    # BinaryCSVDataModule: the data file
    ("csv_missing_file", CSV, {"path": "{tmp}/missing.csv"},
     "--data.init_args.path='{tmp}/missing.csv': expected an existing CSV file (a header of variable names, one row "
     "per sample)"),
    ("csv_min_rows_0", CSV, {"path": OK, "min_rows": 0}, "--data.init_args.min_rows=0: expected an integer >= 1"),
    ("csv_empty", CSV, {"path": "{tmp}/empty.csv"},
     "{tmp}/empty.csv: empty file; expected a header of variable names and one row per sample"),
    ("csv_duplicate_header", CSV, {"path": "{tmp}/dup.csv"},
     "{tmp}/dup.csv: duplicate column name(s) ['a'] in the header; expected unique variable names"),
    ("csv_blank_name", CSV, {"path": "{tmp}/blank_name.csv"},
     "{tmp}/blank_name.csv: column 2 has an empty name in the header; expected a variable name for every column"),
    ("csv_one_column", CSV, {"path": "{tmp}/one_column.csv"},
     "{tmp}/one_column.csv: 1 column in the header; expected at least 2 variables"),
    ("csv_too_few_rows", CSV, {"path": "{tmp}/few.csv"},
     "{tmp}/few.csv: 9 data row(s); expected at least min_rows=10"),
    ("csv_too_few_rows_min", CSV, {"path": OK, "min_rows": 13},
     "{tmp}/ok.csv: 12 data row(s); expected at least min_rows=13"),
    ("csv_empty_cell", CSV, {"path": "{tmp}/empty_cell.csv"},
     "{tmp}/empty_cell.csv: empty or missing value at data row 5, column 'b'; expected 0/1 (or one of two tokens) "
     "in every cell"),
    ("csv_na_cell", CSV, {"path": "{tmp}/na_cell.csv"},
     "{tmp}/na_cell.csv: empty or missing value at data row 3, column 'a'; expected 0/1 (or one of two tokens) in "
     "every cell"),
    ("csv_three_values", CSV, {"path": "{tmp}/three.csv"},
     "{tmp}/three.csv: column 'b' has 3 distinct values ['high', 'low', 'mid']; expected 0/1 or exactly two distinct "
     "tokens (binarise it first, e.g. first state vs rest, or at the median)"),
    ("csv_many_values", CSV, {"path": "{tmp}/many.csv"},
     "{tmp}/many.csv: column 'b' has 12 distinct values ['0', '1', '2', '3', '4', '5', '6', '7', …]; expected 0/1 or "
     "exactly two distinct tokens (binarise it first, e.g. first state vs rest, or at the median)"),
    ("csv_long_row", CSV, {"path": "{tmp}/long_row.csv"},
     "{tmp}/long_row.csv: line 6 has 3 fields; expected 2 fields per row (the header's columns)"),
    ("csv_long_rows", CSV, {"path": "{tmp}/long_rows.csv"},
     "{tmp}/long_rows.csv: a row has more fields than the header; expected 2 fields per row (the header's columns)"),
    # BinaryCSVDataModule: the truth file
    ("truth_missing_file", CSV, {"path": OK, "truth": "{tmp}/missing_truth.csv"},
     "--data.init_args.truth='{tmp}/missing_truth.csv': expected an existing edge-list CSV (source,target) or "
     ".bif/.bif.gz file"),
    ("truth_unknown_variable", CSV, {"path": OK, "truth": "{tmp}/truth_unknown.csv"},
     "{tmp}/truth_unknown.csv: edge row 2: unknown variable 'z'; expected a data column (a, b, c)"),
    ("truth_cycle", CSV, {"path": OK, "truth": "{tmp}/truth_cycle.csv"},
     "{tmp}/truth_cycle.csv: the truth graph has a cycle a -> b -> c -> a; expected a DAG"),
    ("truth_self_loop", CSV, {"path": OK, "truth": "{tmp}/truth_self.csv"},
     "{tmp}/truth_self.csv: the truth graph has a cycle b -> b; expected a DAG"),
    ("truth_header", CSV, {"path": OK, "truth": "{tmp}/truth_header.csv"},
     "{tmp}/truth_header.csv: header ['from', 'to']; expected source,target (one edge source -> target per row)"),
    ("truth_short_row", CSV, {"path": OK, "truth": "{tmp}/truth_row.csv"},
     "{tmp}/truth_row.csv: edge row 2 is ['c']; expected two variable names source,target"),
]  # fmt: skip

#: Rows that read a .bif truth (pgmpy, the `binary_dag` extra).
BAD_BIF = [
    ("truth_bif_junk", CSV, {"path": OK, "truth": "{tmp}/truth_junk.bif"},
     "{tmp}/truth_junk.bif: no variable found; expected a BIF network (variable and probability blocks)"),
    ("truth_bif_unknown_variable", CSV, {"path": OK, "truth": "{tmp}/truth_unknown.bif"},
     "{tmp}/truth_unknown.bif: unknown variable 'z'; expected a data column (a, b, c)"),
]  # fmt: skip


def _table(rows: list) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("cls", "kwargs", "line"), [r[1:] for r in rows], ids=[r[0] for r in rows])


def _check(cls: type, kwargs: dict, line: str, tmp: Path) -> None:
    kwargs = {k: v.replace("{tmp}", str(tmp)) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(ValueError) as info:
        cls(**kwargs)
    assert str(info.value) == line.replace("{tmp}", str(tmp))
    assert user_error(info.value) is info.value, "not raised by the zoo's own code: the entry point would trace back"


@_table(BAD_INPUTS)
def test_bad_input_is_one_line(table_files: Path, cls: type, kwargs: dict, line: str) -> None:
    _check(cls, kwargs, line, table_files)


@pytest.mark.skipif(not installed("pgmpy"), reason="needs pgmpy (the binary_dag extra)")
@_table(BAD_BIF)
def test_bad_bif_truth_is_one_line(table_files: Path, cls: type, kwargs: dict, line: str) -> None:
    _check(cls, kwargs, line, table_files)


def test_good_file_of_the_table_loads(table_files: Path) -> None:
    """The rows fail for the reason they name: the valid file next to them loads (12 rows, 3 columns)."""
    dm = BinaryCSVDataModule(str(table_files / "ok.csv"))
    assert dm.x.shape == (12, 3) and dm.names == ["a", "b", "c"]


# --- through the real entry point: `zoo fit -c configs/binary_dag/<config>.yaml <args> --trainer.fast_dev_run=1` -----

CLI_ROWS = [
    # a few data rows end to end (the constructor table above has them all)
    ("cli_csv_three_values", "default", ["--data=BinaryCSVDataModule", "--data.init_args.path={tmp}/three.csv"],
     "{tmp}/three.csv: column 'b' has 3 distinct values ['high', 'low', 'mid']; expected 0/1 or exactly two distinct "
     "tokens (binarise it first, e.g. first state vs rest, or at the median)"),
    ("cli_truth_cycle", "hc_bic", ["--data=BinaryCSVDataModule", "--data.init_args.path={tmp}/ok.csv",
                                   "--data.init_args.truth={tmp}/truth_cycle.csv"],
     "{tmp}/truth_cycle.csv: the truth graph has a cycle a -> b -> c -> a; expected a DAG"),
    ("cli_interaction5_d", "interaction5", ["--data.init_args.d=6"],
     "--data.init_args.d=6: expected 5 with graph='interaction5' (the fixture has 5 nodes)"),
    # module values
    ("max_order_0", "mvb_notears", ["--model.init_args.max_order=0"],
     "--model.init_args.max_order=0: expected an integer >= 1"),
    ("lam_negative", "mvb_notears", ["--model.init_args.lam=-0.1"],
     "--model.init_args.lam=-0.1: expected a finite number >= 0"),
    ("gamma_1", "first_order_mcp", ["--model.init_args.gamma=1.0"],
     "--model.init_args.gamma=1.0: expected a finite number > 1"),
    ("s_0", "mvb_notears_dagma", ["--model.init_args.s=0.0"], "--model.init_args.s=0.0: expected a finite number > 0"),
    ("rho_max_1", "mvb_notears", ["--model.init_args.rho_max=1.0"],
     "--model.init_args.rho_max=1.0: expected a finite number > 1"),
    ("threshold_negative", "default", ["--model.init_args.threshold=-0.3"],
     "--model.init_args.threshold=-0.3: expected a finite number >= 0"),
    ("max_parents_negative", "default", ["--model.init_args.max_parents=-1"],
     "--model.init_args.max_parents=-1: expected an integer >= 0"),
    ("mi_candidates_0", "default", ["--model.init_args.mi_candidates=0"],
     "--model.init_args.mi_candidates=0: expected an integer >= 1"),
    ("alpha_1", "pc", ["--model.init_args.alpha=1.0"], "--model.init_args.alpha=1.0: expected a number in (0, 1)"),
    ("oracle_d_10", "oracle", ["--data.init_args.graph=er", "--data.init_args.d=10"],
     "--model.init_args.algorithm='oracle': expected the exact oracle for d ≤ 8 variables (the data has 10): use "
     "two_stage or hc_bic"),
    ("native_states_for_mvb", "default", ["--data=PgmpyBIFDataModule", "--data.init_args.name=sachs",
                                          "--data.init_args.binarize=null", "--data.init_args.n=100"],
     "TwoStageModule needs binary data but Akt, Erk, Jnk, Mek, P38 have more than two states: set "
     "--data.init_args.binarize=first_vs_rest (or median)"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "args", "line"), [r[1:] for r in CLI_ROWS], ids=[r[0] for r in CLI_ROWS])
def test_bad_input_through_zoo_fit(table_files: Path, capsys: pytest.CaptureFixture[str], config: str,
                                   args: list[str], line: str) -> None:  # fmt: skip
    cli = ["fit", "-c", str(ROOT / f"configs/binary_dag/{config}.yaml"), *args, "--trainer.fast_dev_run=1"]
    assert_user_error(cli, line, capsys, table_files)
