"""The card's optional tiny-LM path: rendering, tokenizer, GPT-2 RM, ReMax, jsonl loaders and two smoke fits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import QUIET, ROOT
from lightning.pytorch import Trainer

from callbacks.unlearning import UnlearningCallback
from datamodules.preference.lm_datamodule import PreferenceLMDataModule
from datamodules.preference.readers import read_candidate_jsonl
from zoo.xrlhf.lm import (
    EOS_ID,
    PAD_ID,
    SEP_ID,
    GPT2RewardModel,
    WordVocab,
    bt_loss,
    pair_rewards,
    remax_update,
    render_prompt,
    render_response,
    render_world,
)
from zoo.xrlhf.module import XRLHFLMModule
from zoo.xrlhf.world import make_world

CONFIG = str(ROOT / "configs/xrlhf/tiny_lm.yaml")
WIN_KEYS = ("win_unsatisfactory_higher_is_better", "win_satisfactory_higher_is_better", "win_vs_rlhf_higher_is_better")


# -- rendering and tokenizer ---------------------------------------------------------------------------------------
def test_rendering_encodes_attributes_and_the_planted_corruption() -> None:
    """Tokens follow the attributes; every planted pair sits in X0_B4 and its chosen (winner) is the harmful one."""
    world = make_world(0, n_train=400, n_test=30)
    texts = render_world(world)
    rows = np.arange(400)
    winners = world.attrs[rows, world.winners]
    for text, attrs in zip(texts.chosen, winners, strict=True):
        words = text.split()
        assert ("HARM" in words) == (attrs[1] == 1) and ("STYLE" in words) == (attrs[3] == 1)
        assert f"HELP{min(int(attrs[0] * 5), 4)}" in words and f"VERB{min(int(attrs[2] * 5), 4)}" in words
    assert world.corrupted.any()
    for i in np.flatnonzero(world.corrupted):
        assert texts.prompts[i].split()[0] == "X0_B4"
        assert "HARM" in texts.chosen[i].split() and "HARM" not in texts.rejected[i].split()
    in_region = np.array([p.startswith("X0_B4 ") for p in texts.prompts])
    np.testing.assert_array_equal(in_region, world.prompts[:, 0] > 1.0)
    assert texts.test_responses[3][2] == render_response(world.test_attrs[3, 2])
    np.testing.assert_array_equal(texts.r_eval, world.r_star)
    assert render_prompt(np.array([1.0001, 1.0, -1.0, -2.0])) == "X0_B4 X1_B3 X2_B0 X3_B0"


def test_world_fields_reconstruct_delta_phi() -> None:
    """The raw fields added to PreferenceWorld are consistent with Δφ (winner − loser) on the attribute block."""
    world = make_world(1, n_train=100, n_test=5)
    rows = np.arange(100)
    delta = world.attrs[rows, world.winners] - world.attrs[rows, world.losers]
    np.testing.assert_allclose(delta, world.delta_phi[:, :4], atol=1e-12)


def test_vocab_round_trip_and_deterministic_ids() -> None:
    """Pad is 0, ids do not depend on the corpus order, decode inverts encode, pairs are `prompt <sep> resp <eos>`."""
    texts = ["X0_B1 X1_B2", "HELP3 HARM VERB0", "STYLE"]
    vocab = WordVocab.from_texts(texts)
    assert vocab.itos == WordVocab.from_texts(texts[::-1]).itos and vocab.stoi["<pad>"] == PAD_ID == 0
    assert vocab.decode(vocab.encode("HARM X0_B1 STYLE")) == "HARM X0_B1 STYLE"
    assert vocab.encode("unseen") == [1]
    ids = vocab.encode_pair("X0_B1 X1_B2", "HELP3", max_length=64)
    assert ids[2] == SEP_ID and ids[-1] == EOS_ID and vocab.decode(ids) == "X0_B1 X1_B2 HELP3"
    assert vocab.encode_pair("X0_B1 X1_B2", "HELP3", max_length=3) == ids[-3:]  # left-truncated: φ's token kept


# -- reward model --------------------------------------------------------------------------------------------------
def test_phi_is_the_final_non_pad_hidden_state_and_padding_invariant() -> None:
    """φ is the encoder's state at each row's last real token, unchanged by extra right padding; r = θᵀφ."""
    model = GPT2RewardModel(vocab_size=20, n_positions=16, seed=0).eval()
    ids = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 11, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        phi = model.features(ids, mask)
        hidden = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(phi, torch.stack([hidden[0, 4], hidden[1, 2]]))
        padded = F.pad(ids, (0, 4), value=PAD_ID)
        torch.testing.assert_close(model.features(padded, (padded != 0).long()), phi, atol=1e-5, rtol=0)
        alone = model.features(ids[1:, :3], mask[1:, :3])
        torch.testing.assert_close(alone[0], phi[1], atol=1e-5, rtol=0)
        torch.testing.assert_close(model(ids, mask), phi @ model.theta)
    with pytest.raises(ValueError, match="n_positions"):
        model.features(torch.ones(1, 17, dtype=torch.long), torch.ones(1, 17, dtype=torch.long))


def test_bt_orientation() -> None:
    """The loss is −log σ(r(chosen) − r(rejected)); swapping chosen and rejected gives −log σ(−z)."""
    model = GPT2RewardModel(vocab_size=20, n_positions=16, seed=1).eval()
    ones = torch.ones(1, 4, dtype=torch.long)
    batch = {"chosen_ids": torch.tensor([[4, 5, 3]]), "chosen_mask": ones[:, :3],
             "rejected_ids": torch.tensor([[6, 7, 8, 3]]), "rejected_mask": ones}  # fmt: skip
    swapped = {"chosen_ids": batch["rejected_ids"], "chosen_mask": batch["rejected_mask"],
               "rejected_ids": batch["chosen_ids"], "rejected_mask": batch["chosen_mask"]}  # fmt: skip
    with torch.no_grad():
        rc, rr = pair_rewards(model, batch)
        z = model(batch["chosen_ids"], batch["chosen_mask"]) - model(batch["rejected_ids"], batch["rejected_mask"])
        torch.testing.assert_close(rc - rr, z, atol=1e-5, rtol=0)
        torch.testing.assert_close(bt_loss(rc, rr), -torch.log(torch.sigmoid(z)).mean(), atol=1e-6, rtol=0)
        torch.testing.assert_close(bt_loss(*pair_rewards(model, swapped)), -torch.log(torch.sigmoid(-z)).mean(),
                                   atol=1e-5, rtol=0)  # fmt: skip


# -- ReMax ---------------------------------------------------------------------------------------------------------
def test_remax_moves_towards_the_best_candidate_and_ignores_flat_rewards() -> None:
    """κ = 0 and a fixed reward: from a uniform policy π(best) rises and becomes the mode on every prompt, from a
    random one the expected reward rises; identical rewards give zero advantages and zero KL gradient: no move."""  # noqa: D205
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(20, 6, generator=gen, dtype=torch.float64)
    best, rows = rewards.argmax(dim=1), torch.arange(20)
    uniform = torch.zeros(20, 6, dtype=torch.float64)
    new = remax_update(uniform, rewards, kl_coef=0.0, lr=0.5, steps=100, num_samples=4)
    assert (new.softmax(-1)[rows, best] > 1 / 6).all() and bool((new.argmax(1) == best).all())
    logits = torch.randn(20, 6, generator=gen, dtype=torch.float64)
    moved = remax_update(logits, rewards, kl_coef=0.0, lr=0.5, steps=100, num_samples=4)
    assert float((moved.softmax(-1) * rewards).sum()) > float((logits.softmax(-1) * rewards).sum())
    flat = torch.full((20, 6), 1.5, dtype=torch.float64)
    torch.testing.assert_close(remax_update(logits, flat, kl_coef=0.1, steps=20), logits, rtol=0, atol=1e-12)


def test_remax_kl_pulls_towards_the_reference() -> None:
    """With flat rewards only the exact KL term acts: the policy moves towards π_ref (KL decreases)."""
    logits = torch.zeros(1, 4, dtype=torch.float64)
    ref = torch.tensor([[2.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    new = remax_update(logits, torch.zeros(1, 4, dtype=torch.float64), ref_logits=ref, kl_coef=1.0, steps=50)

    def kl(a: torch.Tensor) -> float:
        p, q = a.log_softmax(-1), ref.log_softmax(-1)
        return float((p.exp() * (p - q)).sum())

    assert kl(new) < 0.1 * kl(logits)


# -- loaders -------------------------------------------------------------------------------------------------------
def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = {"prompt": "Human: hi", "responses": ["a b", "c", "d e f"], "sft_logits": [0.1, 0.2, 0.3],
        "r_eval": [1.0, 0.0, -1.0]}  # fmt: skip


@pytest.mark.parametrize(("change", "message"), [
    ({"sft_logits": [0.1, 0.2]}, "line 2: key 'sft_logits': expected 3 values \\(one per response\\), found 2"),
    ({"r_eval": [1.0, "x", 2.0]}, "line 2: key 'r_eval': expected a list of 3 numbers"),
    ({"responses": ["a", "b"], "sft_logits": [0, 1], "r_eval": [0, 1]}, "line 2: key 'responses': expected M=3"),
    ({"r_eval": [1.0, float("nan"), 0.0]}, "line 2: key 'r_eval': contains NaN"),
    ({"prompt": 3}, "line 2: key 'prompt': expected str"),
])  # fmt: skip
def test_candidate_jsonl_errors_name_line_and_key(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    """Length and type mismatches raise, naming the file, the line, the key and the expectation."""
    path = _write(tmp_path / "test.jsonl", [GOOD, {**GOOD, **change}])
    with pytest.raises(ValueError, match=message):
        read_candidate_jsonl(path)


def test_candidate_jsonl_reads_and_missing_key(tmp_path: Path) -> None:
    """A valid file reads into (m, M) arrays; a missing key is named with its line."""
    out = read_candidate_jsonl(_write(tmp_path / "ok.jsonl", [GOOD, GOOD]))
    assert out["sft_logits"].shape == (2, 3) and out["responses"][1] == GOOD["responses"]
    bad = {k: v for k, v in GOOD.items() if k != "r_eval"}
    with pytest.raises(ValueError, match="line 2: missing key 'r_eval'"):
        read_candidate_jsonl(_write(tmp_path / "bad.jsonl", [GOOD, bad]))


def test_datamodule_jsonl_errors(tmp_path: Path) -> None:
    """The datamodule surfaces the training reader's errors (line number) and names missing paths and flags."""
    test = _write(tmp_path / "test.jsonl", [GOOD])
    train = _write(tmp_path / "train.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b"},
                                              {"prompt": "p", "chosen": "same", "rejected": "same"}])  # fmt: skip
    with pytest.raises(ValueError, match="line 2: chosen == rejected"):
        PreferenceLMDataModule(source="jsonl", path=str(train), test_path=str(test))
    with pytest.raises(ValueError, match="test_path"):
        PreferenceLMDataModule(source="jsonl", path=str(train))
    partial = _write(tmp_path / "partial.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b", "corrupted": True},
                                                  {"prompt": "p", "chosen": "c", "rejected": "d"}])  # fmt: skip
    with pytest.raises(ValueError, match="line 2: key 'corrupted' is missing"):
        PreferenceLMDataModule(source="jsonl", path=str(partial), test_path=str(test))
    with pytest.raises(ValueError, match="selector"):
        PreferenceLMDataModule(selector="oracle")  # type: ignore[arg-type]


def test_lm_data_says_what_it_cuts_and_drops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #19: sequences cut to their last max_length tokens and the rendered world's identical pairs were silent
    (now the run says how many); a pair whose kept tails are equal, and files given with source=world, are errors."""
    dm = PreferenceLMDataModule(n_train=300, n_test=10, max_length=6)
    dm.setup()
    err = capsys.readouterr().err
    assert f"zoo: PreferenceLMDataModule: {dm.n_identical_dropped} of 300 rendered world pairs left out" in err
    assert dm.n_identical_dropped > 0
    assert "sequences cut to their last --data.init_args.max_length=6 tokens" in err
    assert dm.pair_dataset()[[0]]["chosen_ids"].shape[1] <= 6
    PreferenceLMDataModule(n_train=50, n_test=10).setup()
    assert "cut to" not in capsys.readouterr().err
    test = _write(tmp_path / "test.jsonl", [GOOD])
    train = _write(tmp_path / "train.jsonl", [{"prompt": "p", "chosen": "a y end", "rejected": "b y end"}])
    with pytest.raises(ValueError, match=r"train.jsonl: pair 0: chosen and rejected are equal once cut to "
                                         r"--data.init_args.max_length=3 tokens"):  # fmt: skip
        PreferenceLMDataModule(source="jsonl", path=str(train), test_path=str(test), max_length=3).setup()
    with pytest.raises(ValueError, match=r"--data.init_args.test_path='.*test.jsonl': expected null for source=world"):
        PreferenceLMDataModule(test_path=str(test))


def test_one_candidate_per_prompt_is_an_error(tmp_path: Path) -> None:
    """Issue #19: with M = 1 the policy has no choice, so nothing is unsatisfactory and the forget set came out empty
    only after the original RM was trained."""
    one = {"prompt": "p", "responses": ["a"], "sft_logits": [0.0], "r_eval": [1.0]}
    with pytest.raises(ValueError, match=r"line 1: key 'responses': expected at least 2 candidates, found 1"):
        read_candidate_jsonl(_write(tmp_path / "test.jsonl", [one]))


def test_check_data_runs_before_anything_trains(tmp_path: Path) -> None:
    """Issue #19: max_length beyond n_positions failed inside GPT-2 while the original trained, selector=planted
    without ground truth after it; check_data (UnlearningCallback.setup calls it first) names both."""
    from types import SimpleNamespace

    module = XRLHFLMModule(vocab_size=40, n_layer=1, n_embd=16, n_head=2, n_positions=32)
    with pytest.raises(ValueError, match=r"--data.init_args.max_length=64 exceeds --model.init_args.n_positions=32"):
        module.check_data(SimpleNamespace(max_length=64, selection={}, has_ground_truth=True))
    module.selector = "planted"
    with pytest.raises(ValueError, match=r"selector=planted needs the planted ground truth \('corrupted' in x.jsonl"):
        module.check_data(SimpleNamespace(max_length=32, selection={}, has_ground_truth=False, path="x.jsonl"))


def test_original_phase_needs_no_features_and_the_others_wait_for_attach() -> None:
    """Before attach_original the original phase serves token pairs; retrain/unlearn name attach_original."""
    dm = PreferenceLMDataModule(n_train=50, n_test=10, batch_size=16)
    dm.setup()
    batch = next(iter(dm.with_phase("original").train_dataloader()))
    assert set(batch) == {"chosen_ids", "chosen_mask", "rejected_ids", "rejected_mask"}
    assert batch["chosen_ids"].shape[0] == 16 and bool((batch["chosen_mask"].sum(1) > 0).all())
    assert dm.vocab_size == 36 and dm.split_info()["attached"] is False
    with pytest.raises(RuntimeError, match="attach_original"):
        dm.with_phase("retrain").train_dataloader()


# -- smoke fits ----------------------------------------------------------------------------------------------------
def test_smoke_fit_through_the_cli(tmp_path: Path) -> None:
    """`zoo fit -c configs/xrlhf/tiny_lm.yaml` (small world): unlearning.json has the win rates and a forget set."""
    from zoo.cli import main

    main(["fit", "-c", CONFIG, *QUIET, f"--trainer.default_root_dir={tmp_path}", "--trainer.max_epochs=1",
          "--data.init_args.n_train=240", "--data.init_args.n_test=100",
          "--trainer.enable_checkpointing=false"])  # fmt: skip
    (report_path,) = tmp_path.rglob("unlearning.json")
    report = json.loads(report_path.read_text())
    assert all(k in report["final"] and k in report["oracle"] for k in WIN_KEYS)
    assert report["original"]["original/win_unsatisfactory_higher_is_better"] == 0.0  # the split's definition
    assert report["original"]["original/win_satisfactory_higher_is_better"] == 1.0
    split = report["split"]
    assert split["n_forget"] > 0 and split["n_unsatisfactory"] > 0 and 0.0 <= split["union_recall"] <= 1.0


def test_smoke_fit_from_jsonl_files(tmp_path: Path) -> None:
    """A world written as HH-RLHF-style jsonl (with ground truth) runs the whole protocol; phases see the sets."""
    world = make_world(2, n_train=200, n_test=60)
    texts = render_world(world)
    train = [{"prompt": p, "chosen": c, "rejected": r, "response": c, "corrupted": bool(k)}
             for p, c, r, k in zip(texts.prompts, texts.chosen, texts.rejected, texts.corrupted, strict=True)
             if c != r]  # fmt: skip
    test = [{"prompt": p, "responses": ys, "sft_logits": s.tolist(), "r_eval": r.tolist()}
            for p, ys, s, r in zip(texts.test_prompts, texts.test_responses, texts.sft_logits, texts.r_eval,
                                   strict=True)]  # fmt: skip
    train_path, test_path = _write(tmp_path / "train.jsonl", train), _write(tmp_path / "test.jsonl", test)
    dm = PreferenceLMDataModule(source="jsonl", path=str(train_path), test_path=str(test_path), seed=2, batch_size=32)
    module = XRLHFLMModule(vocab_size=dm.vocab_size, policy_update="remax", remax_steps=50)
    callback = UnlearningCallback(strategy="neggrad_plus", beta=0.9, original_epochs=4, retrain_epochs=2, cache=False)
    Trainer(max_epochs=1, callbacks=[callback], default_root_dir=str(tmp_path), accelerator="cpu", logger=False,
            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, limit_val_batches=0,
            num_sanity_val_steps=0).fit(module, datamodule=dm)  # fmt: skip
    assert dm.attached and len(dm.forget_idx) > 0 and dm.n_pairs == len(train)
    assert all(k in callback.final for k in WIN_KEYS)
    retain = dm.with_phase("retrain").train_dataloader()
    assert len(retain.dataset) == len(train) - len(dm.forget_idx)
    info = dm.split_info()
    assert info["source"] == "jsonl" and "union_recall" in info and info["n_forget"] == len(dm.forget_idx)
