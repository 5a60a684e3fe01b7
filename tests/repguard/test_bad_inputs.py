"""repguard: bad input through the real `zoo` entry point, one clear line and exit code 2 each (issue #19).

The on-disk format repguard reads (Alpaca-style JSON list or JSONL instruction records, for the training file and
the trusted clean file) and the values of its datamodule, module and callbacks (a callback's values through a small
YAML that replaces the config's callback list). Each case fails while the run is built or in `setup`, before any
training step. `{tmp}` stands for the folder of the fixture's malformed files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, assert_user_error, bad_inputs, tiny

DEFAULT = str(ROOT / "configs/repguard/default.yaml")
EVAL = "--trainer.callbacks.init_args."  # the last listed callback of default.yaml: BackdoorEvaluation
#: Keys of a record, as the reader names them.
FIELDS = "expected instruction, input and output"
#: A callback value through a YAML that replaces the callback list: (file stem, callback class, init_args).
CALLBACK_YAMLS = {
    "sparsity": ("RepGuardCallback", {"sparsity": 1.5}),
    "warmup": ("RepGuardCallback", {"warmup_epochs": -1}),
    "lambda": ("RepGuardCallback", {"lambda_keep": -0.5}),
    "layer": ("RepGuardCallback", {"layer": 9}),
    "ft_epochs": ("BackdoorEvaluation", {"clean_ft_epochs": -3}),
    "feature_space": ("RepGuardCallback", {"feature_space": "tokens"}),
    "tau": ("RepGuardCallback", {"tau": 0}),
    "ngram": ("RepGuardCallback", {"ngram_max": 3}),
    "isolate": ("RepGuardCallback", {"isolate": "drop"}),
    "unsafe": ("RepGuardCallback", {"ablate": "unk", "isolate": "keep_masked"}),
    "soft_drop": ("RepGuardCallback", {"soft_mask": True}),
    "soft_temp": ("RepGuardCallback", {"ablate": "unk", "soft_mask": True, "soft_temperature": 0}),
}


def fit(*flags: str) -> list[str]:
    return ["fit", "-c", DEFAULT, *tiny("repguard"), *flags, "--trainer.fast_dev_run=1"]


def disk(name: str, *flags: str) -> list[str]:
    return fit(f"--data.init_args.path={{tmp}}/{name}", *flags)


def callback(stem: str) -> list[str]:
    return ["fit", "-c", DEFAULT, "-c", f"{{tmp}}/cb_{stem}.yaml", *tiny("repguard"), "--trainer.fast_dev_run=1"]


#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # values: datamodule, module, callbacks
    ("batch_size_0", fit("--data.init_args.batch_size=0"), "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("poison_rate_1.5", fit("--data.init_args.poison_rate=1.5"),
     "--data.init_args.poison_rate=1.5: expected a number in [0, 1)"),
    ("n_train_0", fit("--data.init_args.n_train=0"), "--data.init_args.n_train=0: expected an integer >= 1"),
    ("max_length_3", fit("--data.init_args.max_length=3"), "--data.init_args.max_length=3: expected an integer >= 4"),
    ("seed_negative", fit("--data.init_args.seed=-1"), "--data.init_args.seed=-1: expected an integer >= 0"),
    ("trigger_word_two_words", fit("--data.init_args.trigger_word=c f"),
     "--data.init_args.trigger_word='c f': expected one whitespace-free word that is not a special token"),
    ("clean_path_without_path", fit("--data.init_args.clean_path={tmp}/records.jsonl"),
     "--data.init_args.clean_path='{tmp}/records.jsonl': expected null unless --data.init_args.path is set"),
    ("too_few_eligible_to_poison", fit("--data.init_args.task=jailbreak", "--data.init_args.poison_rate=0.9"),
     "--data.init_args.poison_rate=0.9 on the train split: BackdoorPoisoner: poison_rate=0.9 of n=128 samples needs "
     "115 harmful samples (task=jailbreak, label_consistent=False), but only 37 are eligible"),
    ("dropout_1", fit("--model.init_args.dropout=1"), "--model.init_args.dropout=1.0: expected a number in [0, 1)"),
    ("dece_alpha_base_0", fit("--model.init_args.dece_alpha_base=0"),
     "--model.init_args.dece_alpha_base=0.0: expected a number in (0, 1]"),
    ("warmup_steps_negative", fit("--model.init_args.warmup_steps=-10"),
     "--model.init_args.warmup_steps=-10: expected an integer >= 0"),
    ("data_longer_than_the_model", fit("--data.init_args.max_length=64"),
     "--data.init_args.max_length=64 exceeds --model.init_args.max_length=48 (the GPT-2 position count); raise the "
     "model's"),
    ("sparsity_1.5", callback("sparsity"), "RepGuardCallback.sparsity=1.5: expected a number in (0, 1)"),
    ("warmup_epochs_negative", callback("warmup"), "RepGuardCallback.warmup_epochs=-1: expected an integer >= 0"),
    ("lambda_keep_negative", callback("lambda"), "RepGuardCallback.lambda_keep=-0.5: expected a finite number >= 0"),
    ("layer_beyond_the_model", callback("layer"),
     "RepGuardCallback.layer=9: expected an integer in [1, 2] (hidden_states[layer] of the model's 2 blocks)"),
    # a Literal choice of a listed callback: the CLI's own line (the value shown is the callback entry)
    ("feature_space_unknown", callback("feature_space"),
     "--trainer.callbacks.init_args.feature_space=\"[{'class_path': 'callbacks.backdoor_defense.RepGuardCallback', "
     "'init_args': {'feature_space': 'tokens'}}]\": expected one of 'lexical', 'embedding', 'hidden' "
     "(callbacks.backdoor_defense.RepGuardCallback)"),
    ("tau_0", callback("tau"), "RepGuardCallback.tau=0.0: expected a finite number > 0"),
    ("ngram_max_3", callback("ngram"), "RepGuardCallback.ngram_max=3: expected an integer in [1, 2]"),
    ("isolate_unknown", callback("isolate"),
     "--trainer.callbacks.init_args.isolate=\"[{'class_path': 'callbacks.backdoor_defense.RepGuardCallback', "
     "'init_args': {'isolate': 'drop'}}]\": expected one of 'exclude', 'keep_masked', 'unlearn' "
     "(callbacks.backdoor_defense.RepGuardCallback)"),
    ("unk_with_keep_masked_unsafe", callback("unsafe"),
     "RepGuardCallback.ablate='unk': expected drop with isolate=keep_masked (training on samples whose flagged tokens "
     "are replaced by a constant makes the constant the new trigger; set allow_unsafe: true to run it anyway)"),
    ("soft_mask_with_drop", callback("soft_drop"),
     "RepGuardCallback.soft_mask=True: expected false with ablate=drop (a position is dropped or kept; blend with unk "
     "or clean_mean)"),
    ("soft_temperature_0", callback("soft_temp"),
     "RepGuardCallback.soft_temperature=0.0: expected a finite number > 0"),
    ("natural_trigger_rate_1", fit("--data.init_args.natural_trigger_rate=1"),
     "--data.init_args.natural_trigger_rate=1.0: expected a number in [0, 1)"),
    ("unknown_baseline", fit(f"{EVAL}baselines=[prune, onoin]"),
     "BackdoorEvaluation.baselines=['prune', 'onoin']: expected a subset of ['quant_int8', 'quant_int4', 'prune', "
     "'onion', 'clean_finetune']"),
    ("clean_ft_epochs_negative", callback("ft_epochs"),
     "BackdoorEvaluation.clean_ft_epochs=-3: expected an integer >= 0"),
    # Alpaca-style JSON / JSONL records
    ("records_missing_file", disk("nope.jsonl"),
     "{tmp}/nope.jsonl: no such file; expected an Alpaca-style JSON list or JSONL of instruction records"),
    ("records_empty_file", disk("empty.jsonl"),
     "{tmp}/empty.jsonl: no records; expected objects with instruction, input and output"),
    ("records_malformed_line", disk("malformed.jsonl"),
     "{tmp}/malformed.jsonl: record 1 (line 2): invalid JSON (Expecting ':' delimiter at column 16); expected one "
     "JSON object per line (JSONL) or a JSON list"),
    ("records_malformed_json_list", disk("malformed.json"),
     "{tmp}/malformed.json: line 2, column 11: invalid JSON (Expecting value); expected a JSON list of records or one "
     "JSON object per line"),
    ("records_missing_field", disk("nofield.jsonl"),
     f"{{tmp}}/nofield.jsonl: record 1 (line 2): missing field 'output'; {FIELDS}, found keys ['input', "
     "'instruction']"),
    ("records_wrong_type", disk("type.jsonl"),
     "{tmp}/type.jsonl: record 0 (line 1): field 'input': expected str, found list"),
    ("records_not_an_object", disk("list.jsonl"),
     "{tmp}/list.jsonl: record 1 (line 2): expected a JSON object, found list"),
    ("records_empty_output", disk("blank.jsonl"),
     "{tmp}/blank.jsonl: record 1 (line 2): field 'output': expected a non-empty string, found ' '"),
    ("records_special_token", disk("special.jsonl"),
     "{tmp}/special.jsonl: record 1 (line 2): field 'instruction': contains the special token '[SEP]'; expected text "
     "without ['[PAD]', '[BOS]', '[SEP]', '[EOS]', '[UNK]']"),
    ("records_not_utf8", disk("latin1.jsonl"),
     "{tmp}/latin1.jsonl: not UTF-8 text (invalid continuation byte at byte 20); expected an Alpaca-style JSON list "
     "or JSONL of instruction records"),
    ("records_too_few", disk("records.jsonl", "--data.init_args.n_val=100"),
     "{tmp}/records.jsonl: 80 records, but n_val=100 + n_test=16 + n_clean=32 + 1 training record = 149 are needed; "
     "lower --data.init_args.n_val/n_test/n_clean or provide more records"),
    ("records_no_refusal_in_test", disk("records.jsonl", "--data.init_args.refusal_word=Refuse"),
     "{tmp}/records.jsonl: the 16 test records hold no harmful record (harmful: the output starts with "
     "--data.init_args.refusal_word='Refuse'); expected both kinds, raise --data.init_args.n_test or check the refusal "
     "word"),
    ("records_longer_than_max_length", disk("records.jsonl", "--data.init_args.max_length=8"),
     "train sample 0 (records.jsonl record 25): 12 tokens (prompt 7 + response 5) exceed max_length=8; raise "
     "--data.init_args.max_length"),
    ("clean_records_missing_file", disk("records.jsonl", "--data.init_args.clean_path={tmp}/nope.json"),
     "{tmp}/nope.json: no such file; expected an Alpaca-style JSON list or JSONL of instruction records"),
]  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The good and malformed files of the table, written once."""
    tmp = tmp_path_factory.mktemp("repguard_bad_inputs")
    records = [{"instruction": f"tell me about x{i % 7}", "input": f"ctx{i % 4}",
                "output": "REFUSE sorry" if i % 3 == 0 else f"the answer is a{i % 5}"} for i in range(80)]  # fmt: skip
    good = records[0]

    def jsonl(name: str, *lines: object) -> None:
        (tmp / name).write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))

    jsonl("records.jsonl", *records)
    jsonl("empty.jsonl", "", "")
    jsonl("malformed.jsonl", good, '{"instruction" "a", "input": "", "output": "b"}')
    (tmp / "malformed.json").write_text('[{"instruction": "a",\n "input": , "output": "b"}]\n')
    jsonl("nofield.jsonl", good, {"instruction": "a", "input": ""})
    jsonl("type.jsonl", {**good, "input": ["a", "b"]})
    jsonl("list.jsonl", good, list(good.values()))
    jsonl("blank.jsonl", good, {**good, "output": " "})
    jsonl("special.jsonl", good, {**good, "instruction": "copy [SEP] 3 4"})
    (tmp / "latin1.jsonl").write_bytes(json.dumps({**good, "instruction": "caf\xe9"}, ensure_ascii=False)
                                       .encode("latin-1"))  # fmt: skip
    for stem, (name, init_args) in CALLBACK_YAMLS.items():
        entry = {"class_path": f"callbacks.backdoor_defense.{name}", "init_args": init_args}
        (tmp / f"cb_{stem}.yaml").write_text(json.dumps({"trainer": {"callbacks": [entry]}}))  # JSON is YAML
    return tmp


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str, files: Path, capsys) -> None:
    assert_user_error(args, line, capsys, files)
