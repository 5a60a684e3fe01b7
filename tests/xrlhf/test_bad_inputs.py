"""xrlhf: bad input through the real `zoo` entry point, one clear line and exit code 2 each (issue #19).

Every on-disk format xrlhf reads (the precomputed-feature `.npz`; on the tiny-LM path the HH-RLHF-style preference
jsonl and the test-candidate jsonl) and the values of its datamodules, modules and the unlearning callback. Each case
fails while the run is built, in the datamodule's `setup` or in the callback's `check_data`, before the original RM is
trained. `{tmp}` stands for the folder of the fixture's malformed files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_user_error, bad_inputs

DEFAULT = str(ROOT / "configs/xrlhf/default.yaml")
TINY_LM = str(ROOT / "configs/xrlhf/tiny_lm.yaml")
CB = "--trainer.callbacks.init_args."  # the last listed callback: UnlearningCallback
PAIRS = "['prompt', 'chosen', 'rejected']"
CANDS = "['prompt', 'responses', 'sft_logits', 'r_eval']"


def fit(config: str, *flags: str) -> list[str]:
    return ["fit", "-c", config, *flags, "--trainer.fast_dev_run=1"]


def npz(name: str, *flags: str) -> list[str]:
    return fit(DEFAULT, f"--data.init_args.path={{tmp}}/{name}", *flags)


def lm(train: str = "train.jsonl", test: str = "test.jsonl", *flags: str) -> list[str]:
    return fit(TINY_LM, "--data.init_args.source=jsonl", f"--data.init_args.path={{tmp}}/{train}",
               f"--data.init_args.test_path={{tmp}}/{test}", *flags)  # fmt: skip


#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # values: datamodule, module, callback
    ("steps_per_epoch_0", fit(DEFAULT, "--data.init_args.steps_per_epoch=0"),
     "--data.init_args.steps_per_epoch=0: expected an integer >= 1"),
    ("n_train_0", fit(DEFAULT, "--data.init_args.n_train=0"), "--data.init_args.n_train=0: expected an integer >= 1"),
    ("data_beta_0", fit(DEFAULT, "--data.init_args.beta=0"), "--data.init_args.beta=0.0: expected a finite number > 0"),
    ("original_lr_negative", fit(DEFAULT, "--model.init_args.original_lr=-0.5"),
     "--model.init_args.original_lr=-0.5: expected a finite number >= 0"),
    ("k_cand_0", fit(DEFAULT, "--model.init_args.k_cand=0"), "--model.init_args.k_cand=0: expected an integer >= 1"),
    ("solver_qp", fit(DEFAULT, "--model.init_args.solver=qp"),
     "--model.init_args.solver='qp': expected one of 'greedy', 'exact' (zoo.xrlhf.module.XRLHFModule)"),
    ("infeasible_skip", fit(DEFAULT, "--model.init_args.infeasible=skip"),
     "--model.init_args.infeasible='skip': expected one of 'keep', 'drop' (zoo.xrlhf.module.XRLHFModule)"),
    ("selector_representer_dropped", fit(DEFAULT, "--model.init_args.selector=representer"),
     "--model.init_args.selector='representer': expected one of 'convex', 'knn', 'knn_union', 'random', 'tracin', "
     "'planted', 'random_set' (zoo.xrlhf.module.XRLHFModule)"),
    ("lm_solver_qp", fit(TINY_LM, "--model.init_args.solver=qp"),
     "--model.init_args.solver='qp': expected one of 'greedy', 'exact' (zoo.xrlhf.module.XRLHFLMModule)"),
    ("neggrad_beta_1.5", fit(DEFAULT, f"{CB}beta=1.5"), "UnlearningCallback.beta=1.5: expected a number in [0, 1]"),
    ("original_epochs_negative", fit(DEFAULT, f"{CB}original_epochs=-1"),
     "UnlearningCallback.original_epochs=-1: expected an integer >= 0"),
    ("rho_negative", fit(DEFAULT, f"{CB}strategy=uam", f"{CB}rho=-1"),
     "UnlearningCallback.rho=-1.0: expected a finite number >= 0"),
    # the precomputed-feature .npz
    ("npz_missing_file", npz("nope.npz"),
     "{tmp}/nope.npz: no such feature file (expected .npz with delta_phi[, test arrays])"),
    ("npz_empty_file", npz("empty.npz"),
     "{tmp}/empty.npz: empty file; expected a .npz archive of named numeric arrays"),
    ("npz_text_file", npz("text.npz"),
     "{tmp}/text.npz: not a .npz archive of named numeric arrays (This file contains pickled (object) data)"),
    ("npz_missing_key", npz("nokey.npz"), "{tmp}/nokey.npz: missing key 'delta_phi' (n, d); found keys ['phi']"),
    ("npz_bool_features", npz("bool.npz"), "{tmp}/bool.npz: delta_phi: expected real numbers, found dtype bool"),
    ("npz_corrupted_not_flags", npz("flags.npz"),
     "{tmp}/flags.npz: corrupted: expected bool or 0/1 flags, found dtype float64"),
    ("npz_nan", npz("nan.npz"), "{tmp}/nan.npz: sft_logits: contains NaN or inf"),
    ("npz_shape_mismatch", npz("shape.npz"),
     "{tmp}/shape.npz: r_eval: expected shape (3, 4) (m, M) to match phi_candidates (3, 4, 5), found (3, 5)"),
    ("npz_no_test_side", npz("train_only.npz"),
     "{tmp}/train_only.npz: xrlhf needs the test side (phi_candidates, sft_logits, r_eval)"),
    ("npz_one_candidate", npz("one_cand.npz"),
     "{tmp}/one_cand.npz: phi_candidates: expected m >= 1 test prompts with M >= 2 candidates each, found shape "
     "(3, 1, 5)"),
    ("npz_planted_without_ground_truth", npz("no_truth.npz", "--model.init_args.selector=planted"),
     "--model.init_args.selector=planted needs the planted ground truth ('corrupted' in {tmp}/no_truth.npz); it has "
     "none"),
    # the tiny-LM path: values
    ("lm_batch_size_0", lm("train.jsonl", "test.jsonl", "--data.init_args.batch_size=0"),
     "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("lm_max_length_beyond_positions", lm("train.jsonl", "test.jsonl", "--data.init_args.max_length=100"),
     "--data.init_args.max_length=100 exceeds --model.init_args.n_positions=64 (the GPT-2 position count); raise "
     "the model's"),
    ("lm_pairs_equal_once_cut", lm("tails.jsonl", "test.jsonl", "--data.init_args.max_length=3"),
     "{tmp}/tails.jsonl: pair 1: chosen and rejected are equal once cut to --data.init_args.max_length=3 tokens; "
     "raise it"),
    ("lm_path_ignored_by_world", fit(TINY_LM, "--data.init_args.path={tmp}/train.jsonl"),
     "--data.init_args.path='{tmp}/train.jsonl': expected null for source=world (set --data.init_args.source=jsonl)"),
    # preference jsonl
    ("pairs_missing_file", lm("nope.jsonl"),
     "{tmp}/nope.jsonl: no such preference file (expected jsonl with prompt, chosen, rejected)"),
    ("pairs_empty_file", lm("empty.jsonl"),
     f"{{tmp}}/empty.jsonl: no records; expected one JSON object per line with {PAIRS}"),
    ("pairs_malformed_line", lm("malformed.jsonl"),
     "{tmp}/malformed.jsonl: line 2: invalid JSON (Expecting ',' delimiter at column 23); expected one JSON object "
     "per line (JSONL) or a JSON list"),
    ("pairs_missing_key", lm("nokey.jsonl"),
     "{tmp}/nokey.jsonl: line 2: missing key 'rejected'; expected ['prompt', 'chosen', 'rejected'], found keys "
     "['chosen', 'prompt']"),
    ("pairs_wrong_type", lm("type.jsonl"), "{tmp}/type.jsonl: line 1: key 'chosen': expected str, found int"),
    ("pairs_not_an_object", lm("list.jsonl"),
     "{tmp}/list.jsonl: line 2: expected a JSON object with ['prompt', 'chosen', 'rejected'], found list"),
    ("pairs_chosen_equals_rejected", lm("same.jsonl"),
     "{tmp}/same.jsonl: line 2: chosen == rejected; a comparison needs two different responses"),
    ("pairs_corrupted_partial", lm("flag_partial.jsonl"),
     "{tmp}/flag_partial.jsonl: line 2: key 'corrupted' is missing here but present on other lines; give it on every "
     "line or on none"),
    # test-candidate jsonl
    ("candidates_missing_file", lm("train.jsonl", "nope.jsonl"),
     f"{{tmp}}/nope.jsonl: no such test file (expected jsonl with {CANDS})"),
    ("candidates_missing_key", lm("train.jsonl", "c_nokey.jsonl"),
     f"{{tmp}}/c_nokey.jsonl: line 1: missing key 'r_eval'; expected {CANDS}, found keys ['prompt', 'responses', "
     "'sft_logits']"),
    ("candidates_one_response", lm("train.jsonl", "c_one.jsonl"),
     "{tmp}/c_one.jsonl: line 1: key 'responses': expected at least 2 candidates, found 1"),
    ("candidates_length_mismatch", lm("train.jsonl", "c_len.jsonl"),
     "{tmp}/c_len.jsonl: line 1: key 'sft_logits': expected 3 values (one per response), found 2"),
    ("candidates_string_number", lm("train.jsonl", "c_str.jsonl"),
     "{tmp}/c_str.jsonl: line 1: key 'r_eval': expected a list of 3 numbers, found [1.0, '0.5', -1.0]"),]  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The good and malformed files of the table, written once."""
    tmp = tmp_path_factory.mktemp("xrlhf_bad_inputs")
    rng = np.random.default_rng(0)

    def arrays(**change: object) -> dict:
        return {"delta_phi": rng.standard_normal((12, 5)), "corrupted": np.zeros(12, bool),
                "phi_candidates": rng.standard_normal((3, 4, 5)), "sft_logits": rng.standard_normal((3, 4)),
                "r_eval": rng.standard_normal((3, 4)), **change}  # fmt: skip

    (tmp / "empty.npz").write_bytes(b"")
    (tmp / "text.npz").write_text("delta_phi,0.1,0.2\n")
    np.savez(tmp / "nokey.npz", phi=np.zeros((3, 5)))
    np.savez(tmp / "bool.npz", **arrays(delta_phi=np.ones((12, 5), bool)))
    np.savez(tmp / "flags.npz", **arrays(corrupted=np.full(12, 0.5)))
    np.savez(tmp / "nan.npz", **arrays(sft_logits=np.full((3, 4), np.nan)))
    np.savez(tmp / "shape.npz", **arrays(r_eval=np.zeros((3, 5))))
    np.savez(tmp / "train_only.npz", delta_phi=rng.standard_normal((12, 5)))
    np.savez(tmp / "one_cand.npz", **arrays(phi_candidates=np.zeros((3, 1, 5)), sft_logits=np.zeros((3, 1)),
                                            r_eval=np.zeros((3, 1))))  # fmt: skip
    np.savez(tmp / "no_truth.npz", **{k: v for k, v in arrays().items() if k != "corrupted"})

    def jsonl(name: str, *lines: object) -> None:
        (tmp / name).write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))

    pair = {"prompt": "Human: hi", "chosen": "hello there", "rejected": "go away"}
    cand = {"prompt": "Human: hi", "responses": ["hello", "go away", "hm"], "sft_logits": [0.1, 0.3, 0.0],
            "r_eval": [1.0, -2.0, 0.0]}  # fmt: skip
    jsonl("train.jsonl", pair, {**pair, "chosen": "sure"})
    jsonl("test.jsonl", cand, cand)
    jsonl("tails.jsonl", pair, {**pair, "chosen": "yes the end", "rejected": "no the end"})
    jsonl("empty.jsonl", "")
    jsonl("malformed.jsonl", pair, '{"prompt": "Human: x" "chosen": "a", "rejected": "b"}')
    jsonl("nokey.jsonl", pair, {"prompt": "x", "chosen": "a"})
    jsonl("type.jsonl", {**pair, "chosen": 3})
    jsonl("list.jsonl", pair, list(pair.values()))
    jsonl("same.jsonl", pair, {**pair, "rejected": pair["chosen"]})
    jsonl("flag_partial.jsonl", {**pair, "corrupted": True}, pair)
    jsonl("c_nokey.jsonl", {k: v for k, v in cand.items() if k != "r_eval"})
    jsonl("c_one.jsonl", {**cand, "responses": ["hello"], "sft_logits": [0.1], "r_eval": [1.0]})
    jsonl("c_len.jsonl", {**cand, "sft_logits": [0.1, 0.3]})
    jsonl("c_str.jsonl", {**cand, "r_eval": [1.0, "0.5", -1.0]})
    return tmp


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str, files: Path, capsys) -> None:
    assert_user_error(args, line, capsys, files)
