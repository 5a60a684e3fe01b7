"""Bad input through the real `zoo` entry (issue #19): each row ends in one line naming the option or the file, exit 2.

`{tmp}` in an argument or a line is the test's folder, where :func:`files` writes the malformed MATH-style files. Every
case fails at construction (or, for the position check, in `setup`), before any training step.
"""

from __future__ import annotations

from pathlib import Path

from conftest import QUIET, ROOT, assert_user_error, bad_inputs

KANSWER = ["fit", "-c", str(ROOT / "configs/dco/default.yaml"), *QUIET, "--trainer.fast_dev_run=1"]
ADDITION = ["fit", "-c", str(ROOT / "configs/dco/addition.yaml"), *QUIET, "--trainer.fast_dev_run=1"]
JSONL = [*ADDITION, "--data.init_args.source=jsonl"]

#: MATH-style files written into the test's folder.
FILES = {
    "malformed.jsonl": '{"problem": "1+1", "solution": "\\\\boxed{2}"}\n{"problem": "2+2", oops}\n',
    "empty.jsonl": "",
    "no_problem.jsonl": '{"solution": "\\\\boxed{2}"}\n',
    "int_answer.jsonl": '{"problem": "1+1", "solution": "two", "answer": 2}\n',
    "no_box.jsonl": '{"problem": "1+1", "solution": "two"}\n',
    "not_objects.json": "[1, 2]\n",
    "long.jsonl": '{"problem": "what is one plus one, in words?", "solution": "two", "answer": "two"}\n' * 4,
}

_RECORD = "a JSON object with 'problem' (non-empty str), 'solution' (str) and optional 'answer' (str)"
#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # values, K-answer task
    ("n_train_0", [*KANSWER, "--data.init_args.n_train=0"], "--data.init_args.n_train=0: expected an integer >= 1"),
    ("negative_steps", [*KANSWER, "--data.init_args.steps_per_epoch=-5"],
     "--data.init_args.steps_per_epoch=-5: expected an integer >= 1"),
    ("one_class", [*KANSWER, "--data.init_args.num_classes=1"],
     "--data.init_args.num_classes=1: expected an integer >= 2"),
    ("label_smoothing_1.5", [*KANSWER, "--model.init_args.label_smoothing=1.5"],
     "--model.init_args.label_smoothing=1.5: expected a number in [0, 1)"),
    ("threshold_1.5", [*KANSWER, "--model.init_args.threshold=1.5"],
     "--model.init_args.threshold=1.5: expected a number in [0, 1)"),
    ("dco_n_0", [*KANSWER, "--model.init_args.dco_n=0"], "--model.init_args.dco_n=0: expected an integer >= 1"),
    ("temperature_0", [*KANSWER, "--model.init_args.temperatures=[0.0]"],
     "--model.init_args.temperatures=[0.0]: expected a list of finite numbers > 0"),
    ("eval_step_0", [*KANSWER, "--model.init_args.eval_steps=[0, 100]"],
     "--model.init_args.eval_steps=[0, 100]: expected a list of optimizer steps >= 1"),
    ("negative_lr", [*KANSWER, "--model.init_args.lr=-0.5"],
     "--model.init_args.lr=-0.5: expected a finite number >= 0"),
    # values, LM task
    ("batch_size_0", [*ADDITION, "--data.init_args.batch_size=0"],
     "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("train_frac_1.5", [*ADDITION, "--data.init_args.train_frac=1.5"],
     "--data.init_args.train_frac=1.5: expected a number in (0, 1)"),
    ("empty_train_split", [*ADDITION, "--data.init_args.train_frac=0.0001"],
     "--data.init_args.train_frac=0.0001: 0 of the 2209 pairs of modulus 47 would train; expected a fraction leaving "
     "both splits non-empty"),
    ("modulus_101", [*ADDITION, "--data.init_args.modulus=101"],
     "--data.init_args.modulus=101: expected an integer in [2, 100]"),
    ("negative_seed", [*ADDITION, "--data.init_args.seed=-1"], "--data.init_args.seed=-1: expected an integer >= 0"),
    ("dropout_1.5", [*ADDITION, "--model.init_args.dropout=1.5"],
     "--model.init_args.dropout=1.5: expected a number in [0, 1)"),
    ("n_embd_not_heads", [*ADDITION, "--model.init_args.n_embd=30"],
     "--model.init_args.n_embd=30: expected a multiple of --model.init_args.n_head=4"),
    ("p_samples_0", [*ADDITION, "--model.init_args.p_samples=0"],
     "--model.init_args.p_samples=0: expected an integer >= 1"),
    ("sampled_warmup_negative", [*ADDITION, "--model.init_args.sampled_warmup_steps=-1"],
     "--model.init_args.sampled_warmup_steps=-1: expected an integer >= 0"),
    ("sampled_needs_collect", [*ADDITION, "--model.init_args.p_source=sampled", "--model.init_args.filter_mode=batch"],
     "--model.init_args.filter_mode='batch': expected 'collect' with --model.init_args.p_source=sampled (p̂_est is "
     "re-estimated for each candidate batch, as in the public code)"),
    ("template_field", [*ADDITION, "--data.init_args.prompt_template={problem} {answer}"],
     "--data.init_args.prompt_template='{problem} {answer}': expected '{problem}' as its only field (write a literal "
     "brace as '{{' or '}}')"),
    ("path_ignored_by_addition", [*ADDITION, "--data.init_args.path={tmp}/no_box.jsonl"],
     "--data.init_args.path={tmp}/no_box.jsonl: read only with --data.init_args.source=jsonl; the addition task would "
     "ignore it"),
    ("jsonl_without_path", JSONL, "--data.init_args.source=jsonl needs --data.init_args.path=<MATH-style jsonl>"),
    # MATH-style files
    ("jsonl_missing_file", [*JSONL, "--data.init_args.path={tmp}/missing.jsonl"],
     "{tmp}/missing.jsonl: no such file or folder; expected a MATH-style JSONL/JSON file of problem, solution[, "
     "answer] records or a Hugging Face arrow folder"),
    ("jsonl_empty_file", [*JSONL, "--data.init_args.path={tmp}/empty.jsonl"],
     "{tmp}/empty.jsonl: no records; expected JSON objects with problem, solution[, answer]"),
    ("jsonl_malformed_line", [*JSONL, "--data.init_args.path={tmp}/malformed.jsonl"],
     "{tmp}/malformed.jsonl: line 2: invalid JSON (Expecting property name enclosed in double quotes at column 20); "
     "expected one JSON object per line (JSONL) or a JSON list"),
    ("jsonl_missing_key", [*JSONL, "--data.init_args.path={tmp}/no_problem.jsonl"],
     f"{{tmp}}/no_problem.jsonl: line 1: missing field 'problem'; expected {_RECORD}, found keys ['solution']"),
    ("jsonl_wrong_type", [*JSONL, "--data.init_args.path={tmp}/int_answer.jsonl"],
     "{tmp}/int_answer.jsonl: line 1: field 'answer': expected str, found int"),
    ("jsonl_no_answer", [*JSONL, "--data.init_args.path={tmp}/no_box.jsonl"],
     "{tmp}/no_box.jsonl: line 1: no 'answer' field and no \\boxed{...} in 'solution'; expected an 'answer' string or "
     "a solution containing a balanced \\boxed{answer}"),
    ("json_list_of_numbers", [*JSONL, "--data.init_args.path={tmp}/not_objects.json"],
     f"{{tmp}}/not_objects.json: record 0: expected {_RECORD}, found int"),
    ("jsonl_longer_than_positions", [*JSONL, "--data.init_args.path={tmp}/long.jsonl"],
     "the data's longest sequence (45 tokens) exceeds the model's 16 positions: raise --model.init_args.n_positions"),
]  # fmt: skip


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str, table_files: Path, capsys) -> None:
    assert_user_error(args, line, capsys, table_files)
