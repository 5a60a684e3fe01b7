"""RepGuardCallback revision 1 (``feature_space: hidden``, kept as the ablation) on a tiny GPT-2 and a small poisoned
set: warm-up, mask sparsity, detach (card test 5), the learning mask, the random control, state round trip and masked
inference after a checkpoint reload. Revision 2 (the token spaces) is tests/repguard/test_callback_tokens.py."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from callbacks.backdoor_defense import RepGuardCallback
from datamodules.instructions.datamodule import BackdoorDataModule
from repguard.helpers import restored_from_checkpoint
from zoo.repguard.module import InstructionLMModule

TINY = {"n_layer": 2, "n_embd": 32, "n_head": 2}


def _setup(**cb_kwargs: object) -> tuple[BackdoorDataModule, InstructionLMModule, RepGuardCallback]:
    dm = BackdoorDataModule(n_train=256, n_clean=64, n_val=32, n_test=32, batch_size=32)
    dm.setup()
    module = InstructionLMModule(vocab_size=dm.vocab_size, max_length=dm.max_length, **TINY)
    return dm, module, RepGuardCallback(**({"feature_space": "hidden"} | cb_kwargs))  # type: ignore[arg-type]


def _fit(
    dm: BackdoorDataModule, module: InstructionLMModule, cb: RepGuardCallback, epochs: int, tmp: Path
) -> pl.Trainer:
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=str(tmp),
                         callbacks=[cb], limit_val_batches=1)  # fmt: skip
    trainer.fit(module, datamodule=dm)
    return trainer


def test_warmup_then_mask_with_card_sparsity(tmp_path: Path) -> None:
    """No mask during warm-up (the loss term is 0); after it, exactly sparsity·d dimensions sit above τ (m > 0.5), one
    history entry per localisation, and the hook stays on the configured layer (n_layer // 2 = 1)."""
    dm, module, cb = _setup(warmup_epochs=1, sparsity=0.125, localize_batches=2)
    _fit(dm, module, cb, 1, tmp_path)
    assert cb.mask is None and cb.history == []
    _fit(dm, module, cb, 3, tmp_path / "b")
    assert cb.mask is not None and cb.layer == 1
    assert [h["epoch"] for h in cb.history] == [1, 2]
    assert int((cb.flagged).sum()) >= 4 and int((cb.mask > 0.5).sum()) >= 4  # 0.125 · 32 = 4 (+ held dimensions)
    assert cb.hook is not None and torch.equal(cb.hook.mask, cb.mask.detach())


def test_mask_takes_no_task_gradient_unless_asked() -> None:
    """Card test 5: after a CE-only backward the mask logits have no gradient (mask_grad_from_task false), even with
    a learning mask; with the knob on they do. A hook that used the graph-carrying mask in the task forward fails."""
    from zoo.repguard import model as rg

    for from_task in (False, True):
        dm, module, cb = _setup(mask_grad_from_task=from_task, learn_mask=True)
        cb.attach(module)
        cb.mu, cb.sigma = rg.clean_statistics(module.model.lm, cb.hook, list(dm.clean_dataloader()))
        cb.logits = torch.randn(32).requires_grad_(True)
        batch = next(iter(dm.train_dataloader()))
        cb.on_train_batch_start(None, module, batch, 0)  # type: ignore[arg-type]  # sets the task forward's mask
        module.compute_loss(batch)["loss"].backward()
        assert (cb.logits.grad is not None) == from_task


def test_random_control_same_construction_different_dims(tmp_path: Path) -> None:
    """localization=random: the same sparsity and mask construction, seeded, but its flagged set differs from
    RepGuard's on the same run (it must not read the data)."""
    dm, module, cb = _setup(warmup_epochs=0, sparsity=0.125, localize_batches=2)
    _fit(dm, module, cb, 1, tmp_path)
    dm2, module2, rnd = _setup(warmup_epochs=0, sparsity=0.125, localize_batches=2, localization="random")
    _fit(dm2, module2, rnd, 1, tmp_path / "r")
    assert int(rnd.flagged.sum()) == int(cb.flagged.sum()) == 4
    assert not torch.equal(rnd.flagged, cb.flagged)
    _, module3, rnd2 = _setup(warmup_epochs=0, sparsity=0.125, localize_batches=2, localization="random")
    _fit(dm2, module3, rnd2, 1, tmp_path / "r2")
    assert torch.equal(rnd2.flagged, rnd.flagged)


def test_state_round_trip_and_masked_test_after_reload(tmp_path: Path) -> None:
    """The mask, statistics and history survive a checkpoint: `trainer.test(ckpt_path=...)` with a fresh callback
    restores them onto a fresh module's hook, and the test forward equals the trained (masked) model's."""
    dm, module, cb = _setup(warmup_epochs=0, localize_batches=2)
    trainer = _fit(dm, module, cb, 1, tmp_path)
    ckpt = tmp_path / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    batch = next(iter(dm.test_dataloader()))
    module.eval()
    with torch.no_grad():
        want = module(batch["input_ids"], batch["attention_mask"])
    fresh_cb = RepGuardCallback(feature_space="hidden", warmup_epochs=0, localize_batches=2)
    fresh = restored_from_checkpoint(fresh_cb, dm, ckpt, tmp_path, **TINY)
    assert torch.equal(fresh_cb.logits, cb.logits.detach()) and fresh_cb.history == cb.history
    with torch.no_grad():
        got = fresh(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(got, want)
    with torch.no_grad(), fresh_cb.hook.disabled():
        unmasked = fresh(batch["input_ids"], batch["attention_mask"])
    assert not torch.allclose(unmasked, want)


def test_bad_arguments_name_the_flag() -> None:
    """Impossible settings fail at construction, naming the argument."""
    cases = (({"sparsity": 0.0}, "sparsity"), ({"top_frac": 2.0}, "top_frac"),
             ({"localize_batches": 0}, "localize_batches"), ({"logit_ema": 0.0}, "logit_ema"))  # fmt: skip
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            RepGuardCallback(**kwargs)  # type: ignore[arg-type]


def test_cli_run_writes_the_evaluation(tmp_path: Path) -> None:
    """`zoo fit -c configs/repguard/no_defense.yaml` ends with backdoor_eval.json in the run dir: the trained model
    and each configured post-hoc baseline with ASR w/t per kind, ASR w/o, CA, CA_avg (and AUROC for the model)."""
    import json

    from conftest import QUIET, ROOT, TINY_BACKDOOR

    from zoo.cli import main

    main(["fit", "-c", str(ROOT / "configs/repguard/no_defense.yaml"), *QUIET, *TINY_BACKDOOR,
          "--trainer.max_epochs=1", "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    blob = json.loads((tmp_path / "backdoor_eval.json").read_text())
    assert set(blob) == {"model", "quant_int8", "quant_int4", "prune", "onion", "clean_finetune"}
    for arm in blob.values():
        assert {"asr_wt", "asr_wo", "ca", "ca_avg", "asr_wt_mean"} <= arm.keys()
        assert set(arm["asr_wt"]) == {"badnets_word"}
    assert 0.0 <= blob["model"]["auroc"]["badnets_word"] <= 1.0


def test_post_hoc_stage_localises_on_suspect_data_and_trains_on_clean_only(tmp_path: Path) -> None:
    """stage=post_hoc: the mask exists from the first epoch (no warm-up), every training batch comes from the trusted
    clean set (no poisoned sample), and a datamodule still serving the poisoned split is refused by name."""
    dm = BackdoorDataModule(n_train=256, n_clean=64, n_val=32, n_test=32, batch_size=32, train_on="clean")
    dm.setup()
    module = InstructionLMModule(vocab_size=dm.vocab_size, max_length=dm.max_length, **TINY)
    cb = RepGuardCallback(feature_space="hidden", stage="post_hoc", warmup_epochs=5, localize_batches=2)
    seen: list[torch.Tensor] = []

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, pl_module: object, batch: dict, batch_idx: int) -> None:
            seen.append(batch["poisoned"])
            assert cb.mask is not None  # localised before the first step

    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=1,
                         default_root_dir=str(tmp_path), callbacks=[cb, Spy()])  # fmt: skip
    trainer.fit(module, datamodule=dm)
    assert len(seen) == 2 and not torch.cat(seen).any() and [h["epoch"] for h in cb.history] == [0]
    poisoned = BackdoorDataModule(n_train=256, n_clean=64, n_val=32, n_test=32, batch_size=32)
    fresh = InstructionLMModule(vocab_size=poisoned.vocab_size, max_length=poisoned.max_length, **TINY)
    with pytest.raises(ValueError, match="train_on=clean"):
        _fit(poisoned, fresh, RepGuardCallback(stage="post_hoc"), 1, tmp_path / "p")


def test_token_dimension_mask_is_per_input_detached_and_restored(tmp_path: Path) -> None:
    """mask_granularity=token_dimension: the hook's mask is [B, T, d] and differs across positions; it carries no
    task gradient (detached state); it survives a checkpoint (same masked outputs after `trainer.test(ckpt_path=...)`);
    random localisation refuses it."""
    dm, module, cb = _setup(warmup_epochs=0, localize_batches=2, mask_granularity="token_dimension", sparsity=0.1)
    trainer = _fit(dm, module, cb, 1, tmp_path)
    assert cb.token_mask is not None and cb.hook.mask is cb.token_mask
    batch = next(iter(dm.test_dataloader()))
    module.eval()
    with torch.no_grad():
        want = module(batch["input_ids"], batch["attention_mask"])
    m = cb.hook.m
    assert m is not None and m.shape[:2] == batch["input_ids"].shape and m.shape[-1] == 32
    assert not torch.allclose(m[:, 1], m[:, 2])
    h = torch.randn(2, 5, 32, requires_grad=True)
    assert cb.token_mask(h).grad_fn is None
    trainer.save_checkpoint(tmp_path / "tok.ckpt")
    fresh_cb = RepGuardCallback(
        feature_space="hidden", warmup_epochs=0, localize_batches=2, mask_granularity="token_dimension", sparsity=0.1
    )
    fresh = restored_from_checkpoint(fresh_cb, dm, tmp_path / "tok.ckpt", tmp_path, **TINY)
    with torch.no_grad():
        torch.testing.assert_close(fresh(batch["input_ids"], batch["attention_mask"]), want)
    with pytest.raises(ValueError, match="localization=random"):
        RepGuardCallback(mask_granularity="token_dimension", localization="random")


def test_values_are_checked_by_name_and_overrides_are_said(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #19: every value is checked at construction (one line naming `RepGuardCallback.<arg>`); stage=post_hoc
    replacing warmup_epochs by 0 was silent (now said); a layer beyond the model's blocks is named at setup."""
    import re

    from callbacks.backdoor_defense import BackdoorEvaluation

    for kwargs, message in [({"sparsity": 1.0}, "sparsity=1.0: expected a number in (0, 1)"),
                            ({"layer": 0}, "layer=0: expected an integer >= 1"),
                            ({"lambda_keep": -1.0}, "lambda_keep=-1.0: expected a finite number >= 0"),
                            ({"warmup_epochs": -1}, "warmup_epochs=-1: expected an integer >= 0")]:  # fmt: skip
        with pytest.raises(ValueError, match="^RepGuardCallback." + re.escape(message) + "$"):
            RepGuardCallback(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("BackdoorEvaluation.baselines=['prune', 'onoin']: expected a")):
        BackdoorEvaluation(baselines=["prune", "onoin"])
    assert RepGuardCallback(stage="post_hoc", warmup_epochs=2).warmup_epochs == 0
    assert "stage=post_hoc has no warm-up; warmup_epochs=2 ignored (0)" in capsys.readouterr().err
    dm, module, cb = _setup(layer=3)
    with pytest.raises(ValueError, match=re.escape("RepGuardCallback.layer=3: expected an integer in [1, 2]")):
        cb.attach(module)
