"""Bad input through the real `zoo` entry (issue #19): each row ends in one line naming the option or the file, exit 2.

`{tmp}` in an argument or a line is the test's folder, where :func:`files` writes the malformed CSVs. The manifest's
tiny flag (`pretrained=null`) keeps the pretraining recipe out: value errors fail at construction, file errors in the
datamodule's `setup`, before any step.
"""

from __future__ import annotations

from pathlib import Path

from conftest import QUIET, ROOT, assert_user_error, bad_inputs, tiny

FIT = ["fit", "-c", str(ROOT / "configs/prune_finetune/default.yaml"), *tiny("prune_finetune"), *QUIET,
       "--trainer.fast_dev_run=1"]  # fmt: skip
PRETRAIN = ["fit", "-c", str(ROOT / "configs/prune_finetune/pretrain.yaml"), *QUIET, "--trainer.fast_dev_run=1"]
CALLBACK = "--trainer.callbacks.init_args"  # the last listed callback: PruneThenFinetune
CSV = "--data.init_args.path={tmp}/"


def _csv(rows: int = 120, header: str = "date,a,b", edit: dict[int, str] | None = None) -> str:
    """An hourly CSV of ``rows`` data rows; ``edit`` replaces data row ``i`` (0-based; line ``i + 2``)."""
    lines = [f"2020-01-{1 + i // 24:02d} {i % 24:02d}:00:00,{i}.0,{2 * i}.0" for i in range(rows)]
    for i, text in (edit or {}).items():
        lines[i] = text
    return "\n".join([header, *lines]) + "\n"


#: CSVs written into the test's folder.
FILES = {
    "good.csv": _csv(),
    "empty.csv": "",
    "header_only.csv": "date,a,b\n",
    "short_row.csv": _csv(edit={4: "2020-01-01 04:00:00,4.0"}),
    "no_date.csv": "when,a\n1,2\n",
    "text_cell.csv": _csv(edit={4: "2020-01-01 04:00:00,four,8.0"}),
    "mixed_dates.csv": _csv(edit={4: "01/05/2020 04:00,4.0,8.0"}),
    "duplicate_date.csv": _csv(edit={4: "2020-01-01 03:00:00,4.0,8.0"}),
    "gap.csv": _csv(edit={4: "2020-01-01 04:00:00,,8.0"}),
    "infinite.csv": _csv(edit={4: "2020-01-01 04:00:00,inf,8.0"}),
    "duplicate_header.csv": _csv(header="date,a,a"),
    "ett_without_ot.csv": "date,HUFL,HULL,MUFL,MULL,LUFL,LULL\n2016-07-01 00:00:00,1,1,1,1,1,1\n",
}

#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # values
    ("batch_size_0", [*FIT, "--data.init_args.batch_size=0"],
     "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("negative_horizon", [*FIT, "--data.init_args.horizon=-1"],
     "--data.init_args.horizon=-1: expected an integer >= 1"),
    ("negative_seed", [*FIT, "--data.init_args.seed=-1"], "--data.init_args.seed=-1: expected an integer >= 0"),
    ("ema_1.5", [*FIT, f"{CALLBACK}.prune_ema=1.5"], "PruneThenFinetune.prune_ema=1.5: expected a number in (0, 1]"),
    ("max_prune_ratio_1.5", [*FIT, f"{CALLBACK}.max_prune_ratio=1.5"],
     "PruneThenFinetune.max_prune_ratio=1.5: expected a number in (0, 1)"),
    ("negative_ft_epochs", [*FIT, f"{CALLBACK}.ft_epochs=-1"],
     "PruneThenFinetune.ft_epochs=-1: expected an integer >= 1"),
    ("negative_ft_lr", [*FIT, f"{CALLBACK}.ft_lr=-0.1"], "PruneThenFinetune.ft_lr=-0.1: expected a finite number >= 0"),
    ("dropout_1.5", [*FIT, "--model.init_args.dropout=1.5"],
     "--model.init_args.dropout=1.5: expected a number in [0, 1)"),
    ("patch_longer_than_context", [*FIT, "--model.init_args.patch_length=400"],
     "--model.init_args.patch_length=400: expected an integer <= context_length=336"),
    ("eval_horizon_past_horizon", [*FIT, "--model.init_args.eval_horizons=[200]"],
     "--model.init_args.eval_horizons=[200]: expected a non-empty list of integers in [1, horizon=96]"),
    ("negative_warmup", [*FIT, "--model.init_args.warmup_steps=-1"],
     "--model.init_args.warmup_steps=-1: expected an integer >= 0"),
    ("lora_rank_0", [*FIT, "--model.init_args.lora_rank=0"], "--model.init_args.lora_rank=0: expected an integer >= 1"),
    ("lora_alpha_negative", [*FIT, "--model.init_args.lora_rank=8", "--model.init_args.lora_alpha=-1"],
     "--model.init_args.lora_alpha=-1.0: expected a finite number > 0"),
    ("pretrain_series_too_short", [*PRETRAIN, "--data.init_args.length=100"],
     "--data.init_args.length=100: expected an integer >= context_length + horizon = 432"),
    ("pretrain_all_series_held_out", [*PRETRAIN, "--data.init_args.val_series=4096"],
     "--data.init_args.val_series=4096: expected an integer in [1, 4095]"),
    # CSV files
    ("csv_missing_file", [*FIT, f"{CSV}missing.csv"],
     "--data.init_args.path={tmp}/missing.csv: no such local CSV file (the zoo never downloads)"),
    ("csv_empty_file", [*FIT, f"{CSV}empty.csv"],
     "{tmp}/empty.csv: empty file; expected a header line (date, then the series' columns) and data rows"),
    ("csv_header_only", [*FIT, f"{CSV}header_only.csv"],
     "{tmp}/header_only.csv: no data rows after the header; expected one row per time step"),
    ("csv_short_row", [*FIT, f"{CSV}short_row.csv"],
     "{tmp}/short_row.csv: line 6: 2 fields; expected 3, one per header column (date,a,b)"),
    ("csv_no_date_column", [*FIT, f"{CSV}no_date.csv"],
     "{tmp}/no_date.csv: no 'date' column (found ['when', 'a']); expected date first, then numeric columns"),
    ("csv_text_cell", [*FIT, f"{CSV}text_cell.csv"],
     "{tmp}/text_cell.csv: non-numeric value 'four' in column 'a' at data row 5 (line 6); expected a number (or an "
     "empty cell for a missing value)"),
    ("csv_mixed_date_formats", [*FIT, f"{CSV}mixed_dates.csv"],
     "{tmp}/mixed_dates.csv: column 'date' has the value '01/05/2020 04:00' at data row 5 (line 6); expected the "
     "format '%Y-%m-%d %H:%M:%S' of the first value '2020-01-01 00:00:00' (one format for the whole column, or ISO "
     "8601)"),
    ("csv_duplicate_date", [*FIT, f"{CSV}duplicate_date.csv"],
     "{tmp}/duplicate_date.csv: column 'date' is duplicate at data row 5 (line 6) (2020-01-01 03:00:00 after "
     "2020-01-01 03:00:00); expected strictly increasing timestamps"),
    ("csv_gap_with_nan_policy_error", [*FIT, f"{CSV}gap.csv", "--data.init_args.nan_policy=error"],
     "{tmp}/gap.csv: missing value (NaN) in column 'a' at data row 5 (line 6) (nan_policy=error)"),
    ("csv_infinite_value", [*FIT, f"{CSV}infinite.csv"],
     "{tmp}/infinite.csv: infinite value in column 'a' at data row 5 (line 6)"),
    ("csv_duplicate_header", [*FIT, f"{CSV}duplicate_header.csv"],
     "{tmp}/duplicate_header.csv: line 1: column name(s) ['a'] appear twice in the header"),
    ("ett_missing_column", [*FIT, f"{CSV}ett_without_ot.csv", "--data.init_args.format=ett_hour"],
     "{tmp}/ett_without_ot.csv: missing ETT column(s) ['OT']; expected exactly date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT "
     "(format=ett_hour; use format=custom for other columns)"),
    ("csv_unknown_column", [*FIT, f"{CSV}good.csv", "--data.init_args.columns=[c]"],
     "{tmp}/good.csv: --data.init_args.columns=['c']: unknown column(s) ['c']; available: ['a', 'b']"),
    ("csv_too_short_for_windows", [*FIT, f"{CSV}good.csv"],
     "{tmp}/good.csv: the train split has 84 rows (rows [0, 84) of 120), shorter than context_length + horizon = "
     "336+96 = 432; use a smaller --data.init_args.context_length/horizon or more data"),
]  # fmt: skip


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str, table_files: Path, capsys) -> None:
    assert_user_error(args, line, capsys, table_files)
