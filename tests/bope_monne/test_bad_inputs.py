"""Bad BOPE data files and values: each is one line naming the option or the file, raised before any data is used.

Rows are calls of the datamodule constructors, ``(id, class, kwargs, the exact one-line message)``: each kwarg is the
flag ``--data.init_args.<key>=<value>`` of a ``zoo fit`` run, so a row becomes a CLI row of ``assert_user_error`` once
the method's configs exist. ``{tmp}`` is the folder the shared ``table_files`` fixture writes :data:`FILES` into.
The raised error must also be one the ``zoo`` entry point reports as a user error (``zoo: error: <line>``, exit 2):
raised by the zoo's own code with a ``ValueError``. Card ``bope_monne`` test 8 (recorded-comparisons loader).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, assert_user_error

from datamodules.multiobjective.datamodule import BOPEDataModule, ComparisonsDataModule
from datamodules.multiobjective.readers import read_comparisons, read_outcomes
from zoo.launcher import user_error

_ROWS10 = "".join(f"{0.1 * i:.1f},{1 - 0.1 * i:.1f},{0.05 * i:.2f}\n" for i in range(10))

#: name -> text, written into {tmp} by the `table_files` fixture.
FILES = {
    "outcomes.csv": "a,b,c\n" + _ROWS10,
    "comparisons.csv": "winner,loser\n0,1\n2,3\n4,5\n9,8\n6,7\n",
    "empty.csv": "",
    "blank.csv": "\n\n",
    "blank_name.csv": "a,,c\n" + _ROWS10,
    "dup.csv": "a,b,a\n" + _ROWS10,
    "two_columns.csv": "a,b\n0.1,0.2\n0.3,0.4\n0.5,0.6\n",
    "short_row.csv": "a,b,c\n0.1,0.2,0.3\n0.4,0.5\n",
    "long_row.csv": "a,b,c\n0.1,0.2,0.3\n\n0.4,0.5,0.6,0.7\n",
    "text_cell.csv": "a,b,c\n0.1,0.2,0.3\n0.4,high,0.6\n",
    "empty_cell.csv": "a,b,c\n0.1,0.2,0.3\n0.4,,0.6\n",
    "underscore.csv": "a,b,c\n0.1,0.2,0.3\n0.4,1_0,0.6\n",
    "nan.csv": "a,b,c\n0.1,0.2,0.3\n0.4,0.5,NaN\n",
    "inf.csv": "a,b,c\n0.1,0.2,0.3\n-inf,0.5,0.6\n",
    "huge.csv": "a,b,c\n0.1,0.2,0.3\n0.4,1e400,0.6\n",
    "one_row.csv": "a,b,c\n0.1,0.2,0.3\n",
    "header_only.csv": "a,b,c\n",
    "constant.csv": "a,b,c\n0.1,0.5,0.3\n0.4,0.5,0.6\n0.2,0.5,0.1\n",
    "comps_header.csv": "win,lose\n0,1\n",
    "comps_three_columns.csv": "winner,loser,weight\n0,1,1\n",
    "comps_float.csv": "winner,loser\n0,1\n1.0,2\n",
    "comps_text.csv": "winner,loser\n0,first\n",
    "comps_range.csv": "winner,loser\n0,1\n12,1\n",
    "comps_negative.csv": "winner,loser\n0,-1\n",
    "comps_self.csv": "winner,loser\n0,1\n\n3,3\n",
    "comps_short.csv": "winner,loser\n0,1\n2\n",
    "comps_none.csv": "winner,loser\n\n",
    "comps_two.csv": "winner,loser\n0,1\n1,2\n",
}

BOPE, COMPS = BOPEDataModule, ComparisonsDataModule
OUT, CMP = "{tmp}/outcomes.csv", "{tmp}/comparisons.csv"
OUTCOMES_CSV = "outcomes CSV (a header of outcome names, one row of floats per outcome)"


def _files(outcomes: str = OUT, comparisons: str = CMP, **more: object) -> dict:
    return {"outcomes": outcomes, "comparisons": comparisons, **more}


#: (id, datamodule class, constructor kwargs, the exact one-line message)
BAD_INPUTS = [
    # BOPEDataModule values
    ("bope_problem", BOPE, {"problem": "zdt1"},
     "--data.init_args.problem='zdt1': expected one of 'vehicle_safety', 'dtlz2', 'car_cab'"),
    ("bope_utility_of_other_problem", BOPE, {"utility": "linear"},
     "--data.init_args.utility='linear': expected one of 'pwl', 'kumaraswamy' for problem='vehicle_safety'"),
    ("bope_utility_car_cab", BOPE, {"problem": "car_cab", "utility": "neg_l1"},
     "--data.init_args.utility='neg_l1': expected one of 'linear', 'pwl' for problem='car_cab'"),
    ("bope_dm_noise", BOPE, {"dm_noise": "logit"},
     "--data.init_args.dm_noise='logit': expected one of 'none', 'probit'"),
    ("bope_sigma_without_probit", BOPE, {"sigma": 0.1},
     "--data.init_args.sigma=0.1: expected None with dm_noise='none' (set dm_noise=probit to use it)"),
    ("bope_sigma_negative", BOPE, {"dm_noise": "probit", "sigma": -0.1},
     "--data.init_args.sigma=-0.1: expected a finite number >= 0"),
    ("bope_noise_std_negative", BOPE, {"noise_std": -0.05},
     "--data.init_args.noise_std=-0.05: expected a finite number >= 0"),
    ("bope_n_holdout_0", BOPE, {"n_holdout": 0}, "--data.init_args.n_holdout=0: expected an integer >= 1"),
    ("bope_seed_negative", BOPE, {"seed": -1}, "--data.init_args.seed=-1: expected an integer >= 0"),
    # ComparisonsDataModule values (generated data)
    ("comps_problem", COMPS, {"problem": "osy"},
     "--data.init_args.problem='osy': expected one of 'vehicle_safety', 'dtlz2', 'car_cab'"),
    ("comps_utility", COMPS, {"problem": "dtlz2", "utility": "kumaraswamy"},
     "--data.init_args.utility='kumaraswamy': expected one of 'pwl', 'neg_l1' for problem='dtlz2'"),
    ("comps_sigma_without_probit", COMPS, {"sigma": 0.2},
     "--data.init_args.sigma=0.2: expected None with dm_noise='none' (set dm_noise=probit to use it)"),
    ("comps_n_points_1", COMPS, {"n_points": 1}, "--data.init_args.n_points=1: expected an integer >= 2"),
    ("comps_n_comparisons_1", COMPS, {"n_comparisons": 1},
     "--data.init_args.n_comparisons=1: expected an integer >= 2"),
    ("comps_val_fraction_0", COMPS, {"val_fraction": 0.0},
     "--data.init_args.val_fraction=0.0: expected a number in (0, 1)"),
    ("comps_val_fraction_1", COMPS, {"val_fraction": 1.0},
     "--data.init_args.val_fraction=1.0: expected a number in (0, 1)"),
    ("comps_val_fraction_none_left", COMPS, {"n_comparisons": 4, "val_fraction": 0.1},
     "--data.init_args.val_fraction=0.1: expected a share of the 4 comparisons leaving at least 1 for training and "
     "1 for validation (it gives 0 for validation)"),
    ("comps_val_fraction_no_training", COMPS, {"n_comparisons": 4, "val_fraction": 0.9},
     "--data.init_args.val_fraction=0.9: expected a share of the 4 comparisons leaving at least 1 for training and "
     "1 for validation (it gives 4 for validation)"),
    ("comps_seed_negative", COMPS, {"seed": -3}, "--data.init_args.seed=-3: expected an integer >= 0"),
    ("comps_lo_without_hi", COMPS, {"lo": [0.0, 0.0, 0.0]},
     "--data.init_args.hi=None: expected a list of floats when --data.init_args.lo is given (both bounds or neither)"),
    ("comps_hi_without_lo", COMPS, {"hi": [1.0, 1.0, 1.0]},
     "--data.init_args.lo=None: expected a list of floats when --data.init_args.hi is given (both bounds or neither)"),
    ("comps_lo_empty", COMPS, {"lo": [], "hi": []},
     "--data.init_args.lo=[]: expected a non-empty list of finite floats, one per outcome"),
    ("comps_lo_inf", COMPS, {"lo": [0.0, float("-inf"), 0.0], "hi": [1.0, 1.0, 1.0]},
     "--data.init_args.lo=[0.0, -inf, 0.0]: expected a non-empty list of finite floats, one per outcome"),
    ("comps_lo_hi_lengths", COMPS, {"lo": [0.0, 0.0, 0.0], "hi": [1.0, 1.0]},
     "--data.init_args.hi=[1.0, 1.0]: expected 3 values, as many as --data.init_args.lo"),
    ("comps_hi_not_above_lo", COMPS, {"lo": [0.0, 1.0, 0.0], "hi": [1.0, 1.0, 1.0]},
     "--data.init_args.hi=[1.0, 1.0, 1.0]: expected every hi > lo (not at outcome 1: lo=1.0)"),
    ("comps_bounds_of_other_k", COMPS, {"problem": "dtlz2", "lo": [0.0, 0.0, 0.0], "hi": [1.0, 1.0, 1.0]},
     "--data.init_args.lo=[0.0, 0.0, 0.0]: expected 4 values (problem='dtlz2' has k=4)"),
    # ComparisonsDataModule: which files
    ("outcomes_without_comparisons", COMPS, {"outcomes": OUT},
     "--data.init_args.comparisons=None: expected a comparisons CSV (header winner,loser) when "
     "--data.init_args.outcomes is given (both files or neither)"),
    ("comparisons_without_outcomes", COMPS, {"comparisons": CMP},
     f"--data.init_args.outcomes=None: expected a {OUTCOMES_CSV} when --data.init_args.comparisons is given (both "
     "files or neither)"),
    ("outcomes_missing_file", COMPS, _files("{tmp}/missing.csv"),
     f"--data.init_args.outcomes='{{tmp}}/missing.csv': expected an existing {OUTCOMES_CSV}"),
    ("comparisons_missing_file", COMPS, _files(comparisons="{tmp}/missing.csv"),
     "--data.init_args.comparisons='{tmp}/missing.csv': expected an existing comparisons CSV (header winner,loser)"),
    # the outcomes file
    ("outcomes_empty", COMPS, _files("{tmp}/empty.csv"),
     "{tmp}/empty.csv: empty file; expected a header of outcome names, then one row of floats per outcome"),
    ("outcomes_blank", COMPS, _files("{tmp}/blank.csv"),
     "{tmp}/blank.csv: empty file; expected a header of outcome names, then one row of floats per outcome"),
    ("outcomes_blank_name", COMPS, _files("{tmp}/blank_name.csv"),
     "{tmp}/blank_name.csv: column 2 has an empty name in the header; expected an outcome name for every column"),
    ("outcomes_duplicate_name", COMPS, _files("{tmp}/dup.csv"),
     "{tmp}/dup.csv: duplicate outcome name(s) ['a'] in the header; expected unique names"),
    ("outcomes_columns_not_k", COMPS, _files("{tmp}/two_columns.csv", lo=[0.0] * 3, hi=[1.0] * 3),
     "{tmp}/two_columns.csv: the header has 2 outcome columns but --data.init_args.lo has k=3"),
    ("outcomes_short_row", COMPS, _files("{tmp}/short_row.csv"),
     "{tmp}/short_row.csv: line 3 has 2 cells; expected 3 (one per outcome name in the header)"),
    ("outcomes_long_row_after_blank", COMPS, _files("{tmp}/long_row.csv"),
     "{tmp}/long_row.csv: line 4 has 4 cells; expected 3 (one per outcome name in the header)"),
    ("outcomes_text_cell", COMPS, _files("{tmp}/text_cell.csv"),
     "{tmp}/text_cell.csv: line 3, column 'b': 'high' is not a number; expected a float in every cell"),
    ("outcomes_empty_cell", COMPS, _files("{tmp}/empty_cell.csv"),
     "{tmp}/empty_cell.csv: line 3, column 'b': '' is not a number; expected a float in every cell"),
    ("outcomes_underscore", COMPS, _files("{tmp}/underscore.csv"),
     "{tmp}/underscore.csv: line 3, column 'b': '1_0' is not a number; expected a float in every cell"),
    ("outcomes_nan", COMPS, _files("{tmp}/nan.csv"),
     "{tmp}/nan.csv: line 3, column 'c': 'NaN' is not finite; expected a finite float (no NaN or inf)"),
    ("outcomes_inf", COMPS, _files("{tmp}/inf.csv"),
     "{tmp}/inf.csv: line 3, column 'a': '-inf' is not finite; expected a finite float (no NaN or inf)"),
    ("outcomes_overflow", COMPS, _files("{tmp}/huge.csv"),
     "{tmp}/huge.csv: line 3, column 'b': '1e400' is not finite; expected a finite float (no NaN or inf)"),
    ("outcomes_one_row", COMPS, _files("{tmp}/one_row.csv"),
     "{tmp}/one_row.csv: 1 outcome row(s); expected at least 2 (a comparison needs two outcomes)"),
    ("outcomes_header_only", COMPS, _files("{tmp}/header_only.csv"),
     "{tmp}/header_only.csv: 0 outcome row(s); expected at least 2 (a comparison needs two outcomes)"),
    ("outcomes_constant_column_no_bounds", COMPS, _files("{tmp}/constant.csv", "{tmp}/comps_two.csv"),
     "{tmp}/constant.csv: column 'b' is constant (0.5); give --data.init_args.lo and --data.init_args.hi (the "
     "surrogate input bounds)"),
    # the comparisons file
    ("comparisons_empty", COMPS, _files(comparisons="{tmp}/empty.csv"),
     "{tmp}/empty.csv: empty file; expected header winner,loser, then one comparison per row as 0-based row indices "
     "into the outcomes file"),
    ("comparisons_header", COMPS, _files(comparisons="{tmp}/comps_header.csv"),
     "{tmp}/comps_header.csv: header ['win', 'lose']; expected winner,loser (0-based row indices into the outcomes "
     "file)"),
    ("comparisons_extra_column", COMPS, _files(comparisons="{tmp}/comps_three_columns.csv"),
     "{tmp}/comps_three_columns.csv: header ['winner', 'loser', 'weight']; expected winner,loser (0-based row indices "
     "into the outcomes file)"),
    ("comparisons_float_index", COMPS, _files(comparisons="{tmp}/comps_float.csv"),
     "{tmp}/comps_float.csv: line 3: winner='1.0' is not an integer; expected a 0-based row index into the outcomes "
     "file"),
    ("comparisons_text_index", COMPS, _files(comparisons="{tmp}/comps_text.csv"),
     "{tmp}/comps_text.csv: line 2: loser='first' is not an integer; expected a 0-based row index into the outcomes "
     "file"),
    ("comparisons_out_of_range", COMPS, _files(comparisons="{tmp}/comps_range.csv"),
     "{tmp}/comps_range.csv: line 3: winner=12 is out of range for the 10 rows of {tmp}/outcomes.csv"),
    ("comparisons_negative", COMPS, _files(comparisons="{tmp}/comps_negative.csv"),
     "{tmp}/comps_negative.csv: line 2: loser=-1 is out of range for the 10 rows of {tmp}/outcomes.csv"),
    ("comparisons_winner_is_loser", COMPS, _files(comparisons="{tmp}/comps_self.csv"),
     "{tmp}/comps_self.csv: line 4: winner=loser=3; expected two different rows"),
    ("comparisons_short_row", COMPS, _files(comparisons="{tmp}/comps_short.csv"),
     "{tmp}/comps_short.csv: line 3 has 1 cells; expected 2 (winner,loser)"),
    ("comparisons_none", COMPS, _files(comparisons="{tmp}/comps_none.csv"),
     "{tmp}/comps_none.csv: no comparisons after the header; expected at least one row winner,loser"),
    ("comparisons_too_few_to_split", COMPS, _files(comparisons="{tmp}/comps_two.csv", val_fraction=0.2),
     "--data.init_args.val_fraction=0.2: expected a share of the 2 comparisons leaving at least 1 for training and 1 "
     "for validation (it gives 0 for validation)"),
]  # fmt: skip

#: Reader calls outside the datamodules: (id, reader, kwargs, the exact one-line message).
BAD_READS = [
    ("read_outcomes_k", read_outcomes, {"path": OUT, "k": 4},
     "{tmp}/outcomes.csv: the header has 3 outcome columns but the problem has k=4"),
    ("read_outcomes_missing", read_outcomes, {"path": "{tmp}/missing.csv"},
     "{tmp}/missing.csv: no such file (expected a CSV: a header of outcome names, then one row of floats per "
     "outcome)"),
    ("read_comparisons_range_default_name", read_comparisons, {"path": "{tmp}/comps_range.csv", "n_outcomes": 10},
     "{tmp}/comps_range.csv: line 3: winner=12 is out of range for the 10 rows of outcomes.csv"),
]  # fmt: skip


def _table(rows: list) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("call", "kwargs", "line"), [r[1:] for r in rows], ids=[r[0] for r in rows])


def _check(call: object, kwargs: dict, line: str, tmp: Path) -> None:
    kwargs = {k: v.replace("{tmp}", str(tmp)) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(ValueError) as info:
        call(**kwargs)
    assert str(info.value) == line.replace("{tmp}", str(tmp))
    assert "\n" not in str(info.value)
    assert user_error(info.value) is info.value, "not raised by the zoo's own code: the entry point would trace back"


@_table(BAD_INPUTS)
def test_bad_input_is_one_line(table_files: Path, call: type, kwargs: dict, line: str) -> None:
    """Catches a bad value or file that is coerced, dropped or clipped, or reported as a traceback or a vague line."""
    _check(call, kwargs, line, table_files)


@_table(BAD_READS)
def test_bad_read_is_one_line(table_files: Path, call: object, kwargs: dict, line: str) -> None:
    """Catches a reader whose messages lose the file, the line or the field when called outside a datamodule."""
    _check(call, kwargs, line, table_files)


def test_rows_are_flags() -> None:
    """Catches a row that no command line could express (a kwarg that is not an init argument of its class)."""
    import inspect

    for row_id, cls, kwargs, _ in BAD_INPUTS:
        assert set(kwargs) <= set(inspect.signature(cls.__init__).parameters), row_id


def test_good_files_of_the_table_load(table_files: Path) -> None:
    """The rows fail for the reason they name: the valid files next to them load (10 outcomes, 5 comparisons)."""
    dm = ComparisonsDataModule(str(table_files / "outcomes.csv"), str(table_files / "comparisons.csv"))
    assert dm.y.shape == (10, 3) and dm.names == ["a", "b", "c"]
    assert len(dm.train_comps) == 4 and len(dm.val_comps) == 1


# --- through the real entry point: `zoo fit -c configs/bope_monne/<config>.yaml <args> --trainer.fast_dev_run=1` -----

#: jsonargparse names the class after a bad ``Literal`` choice.
BOPE_CLASS, UTILITY_CLASS = " (zoo.bope_monne.module.BOPEModule)", " (zoo.bope_monne.module.MoNNEUtilityModule)"
LO_HI = ["--data.init_args.lo=[0.0,0.0,0.0]", "--data.init_args.hi=[1.0,1.0,1.0]"]

CLI_ROWS = [
    # data rows end to end (the constructor table above has them all)
    ("cli_comparisons_out_of_range", "utility", ["--data.init_args.outcomes={tmp}/outcomes.csv",
                                                 "--data.init_args.comparisons={tmp}/comps_range.csv"],
     "{tmp}/comps_range.csv: line 3: winner=12 is out of range for the 10 rows of {tmp}/outcomes.csv"),
    ("cli_outcomes_nan", "utility", ["--data.init_args.outcomes={tmp}/nan.csv",
                                     "--data.init_args.comparisons={tmp}/comparisons.csv"],
     "{tmp}/nan.csv: line 3, column 'c': 'NaN' is not finite; expected a finite float (no NaN or inf)"),
    ("cli_outcomes_columns_not_k", "utility", ["--data.init_args.outcomes={tmp}/two_columns.csv",
                                               "--data.init_args.comparisons={tmp}/comps_two.csv",
                                               *LO_HI],
     "{tmp}/two_columns.csv: the header has 2 outcome columns but --data.init_args.lo has k=3"),
    ("cli_utility_of_other_problem", "default", ["--data.init_args.problem=car_cab",
                                                 "--data.init_args.utility=kumaraswamy"],
     "--data.init_args.utility='kumaraswamy': expected one of 'linear', 'pwl' for problem='car_cab'"),
    # module values
    ("arm", "default", ["--model.init_args.arm=pbo"],
     "--model.init_args.arm='pbo': expected one of 'monne', 'pairwise_gp', 'oracle', 'random'" + BOPE_CLASS),
    ("pe_acqf", "default", ["--model.init_args.pe_acqf=bald"],
     "--model.init_args.pe_acqf='bald': expected one of 'eubo_zeta', 'eubo_mean_outcome', 'random_f'" + BOPE_CLASS),
    ("members_0", "default", ["--model.init_args.members=0"], "--model.init_args.members=0: expected an integer >= 1"),
    ("hidden_empty", "default", ["--model.init_args.hidden=[]"],
     "--model.init_args.hidden=[]: expected a non-empty list of positive integers"),
    ("hidden_zero", "utility", ["--model.init_args.hidden=[32,0]"],
     "--model.init_args.hidden=[32, 0]: expected a non-empty list of positive integers"),
    ("activation", "default", ["--model.init_args.activation=gelu"],
     "--model.init_args.activation='gelu': expected one of 'tanh', 'sigmoid', 'relu'" + BOPE_CLASS),
    ("positivity", "utility", ["--model.init_args.positivity=abs"],
     "--model.init_args.positivity='abs': expected one of 'exp', 'softplus', 'square'" + UTILITY_CLASS),
    ("margin_0", "default", ["--model.init_args.margin=0.0"],
     "--model.init_args.margin=0.0: expected a finite number > 0"),
    ("n0_1", "default", ["--model.init_args.n0=1"], "--model.init_args.n0=1: expected an integer >= 2"),
    ("n_batches_0", "default", ["--model.init_args.n_batches=0"],
     "--model.init_args.n_batches=0: expected an integer >= 1"),
    ("q_0", "pairwise_gp", ["--model.init_args.q=0"], "--model.init_args.q=0: expected an integer >= 1"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "args", "line"), [r[1:] for r in CLI_ROWS], ids=[r[0] for r in CLI_ROWS])
def test_bad_input_through_zoo_fit(table_files: Path, capsys: pytest.CaptureFixture[str], config: str,
                                   args: list[str], line: str) -> None:  # fmt: skip
    """Catches an error that reaches the user as a traceback, or as a line without the option, file or field."""
    cli = ["fit", "-c", str(ROOT / f"configs/bope_monne/{config}.yaml"), *args, "--trainer.fast_dev_run=1"]
    assert_user_error(cli, line, capsys, table_files)
