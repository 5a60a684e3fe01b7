"""Bad input through the real `zoo` entry (issue #19): each row ends in one line naming the option or the file, exit 2.

`{tmp}` in an argument or a line is the test's folder, where :func:`files` writes the malformed GSM8K-style files and a
callback YAML. Value errors fail at construction; file errors in the datamodule's `setup`, before any generation.
"""

from __future__ import annotations

from pathlib import Path

from conftest import QUIET, ROOT, assert_user_error, bad_inputs

FIT = ["fit", "-c", str(ROOT / "configs/moe_cap/default.yaml"), *QUIET, "--trainer.fast_dev_run=1"]
CALLBACK = "--trainer.callbacks.init_args"  # the last listed callback: MoECAPCallback

#: GSM8K-style files (and a callback YAML) written into the test's folder.
FILES = {
    "malformed.jsonl": '{"question": "1+1?", "answer": "2 #### 2"}\n{"question": "2+2?", oops}\n',
    "empty.jsonl": "",
    "no_answer_key.jsonl": '{"question": "1+1?", "solution": "#### 2"}\n',
    "int_answer.jsonl": '{"question": "1+1?", "answer": 2}\n',
    "no_marker.jsonl": '{"question": "1+1?", "answer": "two"}\n',
    "nothing_after_marker.jsonl": '{"question": "1+1?", "answer": "two ####  "}\n',
    "hardware.yaml": "trainer:\n  callbacks:\n    - class_path: callbacks.moe_cap.MoECAPCallback\n"
                     "      init_args: {hardware: {name: mine, dense_flops: 1.0e12}}\n",
}  # fmt: skip

_PRESETS = ("['A100-PCIe-40GB', 'A100-PCIe-80GB', 'A100-SXM4-40GB', 'A100-SXM4-80GB', 'H100-HBM3-80GB', "
            "'H100-PCIe-80GB', 'H200-141GB', 'RTX-A5000', 'RTX-A6000']")  # fmt: skip
_DTYPES = ("['awq', 'bf16', 'bfloat16', 'float16', 'float32', 'float8_e4m3fn', 'float8_e5m2', 'fp16', 'fp32', 'fp4', "
           "'fp8', 'gptq', 'int4', 'int8']")  # fmt: skip
_GSM8K = "a JSON object with string keys 'question' and 'answer'"
#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # datamodule values
    ("batch_size_0", [*FIT, "--data.init_args.batch_size=0"],
     "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("n_items_0", [*FIT, "--data.init_args.n_items=0"], "--data.init_args.n_items=0: expected an integer >= 1"),
    ("negative_n_train", [*FIT, "--data.init_args.n_train=-1"],
     "--data.init_args.n_train=-1: expected an integer >= 1"),
    ("digits_19", [*FIT, "--data.init_args.digits=19"], "--data.init_args.digits=19: expected an integer in [1, 18]"),
    ("unknown_op", [*FIT, "--data.init_args.ops=[/]"],
     "--data.init_args.ops: unknown operator(s) ['/']; expected a subset of ['+', '-', '*']"),
    ("max_items_0", [*FIT, "--data.init_args.max_items=0"], "--data.init_args.max_items=0: expected an integer >= 1"),
    ("negative_seed", [*FIT, "--data.init_args.seed=-3"], "--data.init_args.seed=-3: expected an integer >= 0"),
    ("template_without_q", [*FIT, "--data.init_args.template=Q"],
     "--data.init_args.template='Q' has no '{q}' where the question goes"),
    # module values
    ("max_new_tokens_0", [*FIT, "--model.init_args.max_new_tokens=0"],
     "--model.init_args.max_new_tokens=0: expected an integer >= 1"),
    ("min_above_max_tokens", [*FIT, "--model.init_args.min_new_tokens=9"],
     "--model.init_args.min_new_tokens=9: expected an integer in [0, 8]"),
    ("sampling_temperature_0", [*FIT, "--model.init_args.do_sample=true", "--model.init_args.temperature=0"],
     "--model.init_args.temperature=0.0: expected a finite number > 0"),
    ("hidden_size_odd_heads", [*FIT, "--model.init_args.hidden_size=60"],
     "--model.init_args.hidden_size=60: expected a multiple of 8 for family=mixtral (4 heads of an even rotary size)"),
    ("negative_lr", [*FIT, "--model.init_args.lr=-0.1"], "--model.init_args.lr=-0.1: expected a finite number >= 0"),
    ("missing_pretrained", [*FIT, "--model.init_args.pretrained={tmp}/no_model"],
     "pretrained='{tmp}/no_model': no such local file or folder (the zoo never downloads)"),
    # callback values
    ("unknown_hardware", [*FIT, f"{CALLBACK}.hardware=H300"],
     f"MoECAPCallback.hardware='H300': expected auto, cpu_measured, a custom dict or one of the presets {_PRESETS}"),
    ("custom_hardware_without_bandwidth", [*FIT, "-c", "{tmp}/hardware.yaml"],
     "MoECAPCallback.hardware: custom hardware: missing key 'bw_Bps' (peak memory bandwidth, bytes/s); got keys "
     "['dense_flops', 'name']"),
    ("n_dev_0", [*FIT, f"{CALLBACK}.n_dev=0"], "MoECAPCallback.n_dev=0: expected an integer >= 1"),
    ("negative_cost_cap", [*FIT, f"{CALLBACK}.cost_cap=-1"],
     "MoECAPCallback.cost_cap=-1.0: expected a finite number > 0"),
    ("negative_energy_scale", [*FIT, f"{CALLBACK}.energy_scale=-1"],
     "MoECAPCallback.energy_scale=-1.0: expected a finite number >= 0"),
    ("unknown_stage", [*FIT, f"{CALLBACK}.stages=[train]"],
     "MoECAPCallback.stages='train': expected one of 'validate', 'test', 'predict'"),
    ("unknown_dtype", [*FIT, f"{CALLBACK}.dtype=fp12"],
     f"MoECAPCallback.dtype='fp12': expected auto or one of {_DTYPES}"),
    ("radar_with_missing_record", [*FIT, f"{CALLBACK}.radar_with=[{{tmp}}/none.json]"],
     "MoECAPCallback.radar_with: {tmp}/none.json: no such record file or run folder"),
    ("radar_with_not_a_record", [*FIT, f"{CALLBACK}.radar_with=[{{tmp}}/empty.jsonl]"],
     "MoECAPCallback.radar_with: {tmp}/empty.jsonl: not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    # GSM8K-style files
    ("gsm8k_missing_file", [*FIT, "--data.init_args.path={tmp}/missing.jsonl"],
     "--data.init_args.path={tmp}/missing.jsonl does not exist; expected a GSM8K-style JSONL file"),
    ("gsm8k_folder", [*FIT, "--data.init_args.path={tmp}"],
     "--data.init_args.path={tmp} is a directory; expected a GSM8K-style JSONL file"),
    ("gsm8k_empty_file", [*FIT, "--data.init_args.path={tmp}/empty.jsonl"],
     f"{{tmp}}/empty.jsonl: no records; expected {_GSM8K}, one per line"),
    ("gsm8k_malformed_line", [*FIT, "--data.init_args.path={tmp}/malformed.jsonl"],
     "{tmp}/malformed.jsonl: line 2: invalid JSON (Expecting property name enclosed in double quotes at column 22); "
     "expected one JSON object per line (JSONL) or a JSON list"),
    ("gsm8k_missing_key", [*FIT, "--data.init_args.path={tmp}/no_answer_key.jsonl"],
     f"{{tmp}}/no_answer_key.jsonl: line 1: missing key 'answer' (--data.init_args.answer_key); expected {_GSM8K}, "
     "found keys ['question', 'solution']"),
    ("gsm8k_wrong_type", [*FIT, "--data.init_args.path={tmp}/int_answer.jsonl"],
     "{tmp}/int_answer.jsonl: line 1: key 'answer': expected str, found int"),
    ("gsm8k_no_marker", [*FIT, "--data.init_args.path={tmp}/no_marker.jsonl"],
     "{tmp}/no_marker.jsonl: line 1: key 'answer' has no '####'; expected a GSM8K answer ending in "
     "'#### <final answer>', found 'two'"),
    ("gsm8k_nothing_after_marker", [*FIT, "--data.init_args.path={tmp}/nothing_after_marker.jsonl"],
     "{tmp}/nothing_after_marker.jsonl: line 1: key 'answer': nothing after the last '####', found 'two ####  '"),
]  # fmt: skip


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str, table_files: Path, capsys) -> None:
    assert_user_error(args, line, capsys, table_files)
