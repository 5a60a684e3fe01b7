"""InstructionLMModule: the response-token loss, DeCE wiring, the schedule, Hugging Face folders, named errors."""

from __future__ import annotations

import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from datamodules.instructions.datamodule import BackdoorDataModule
from zoo.repguard.baselines import dece_loss, shift_for_lm
from zoo.repguard.module import InstructionLMModule

TINY = {"n_layer": 1, "n_embd": 16, "n_head": 2}


def _dm(**kwargs: object) -> BackdoorDataModule:
    dm = BackdoorDataModule(n_train=64, n_clean=32, n_val=16, n_test=16, batch_size=32, **kwargs)  # type: ignore[arg-type]
    dm.setup()
    return dm


def test_loss_is_ce_on_response_tokens_only() -> None:
    """The loss equals a hand-shifted CE over the response tokens; changing a prompt token's label target (it has
    none) or a pad position leaves it unchanged, changing a response token changes it."""
    dm = _dm()
    m = InstructionLMModule(vocab_size=dm.vocab_size, **TINY)
    batch = next(iter(dm.train_dataloader()))
    logits = m(batch["input_ids"], batch["attention_mask"])
    labels = batch["labels"]
    mask = labels[:, 1:] != -100
    want = torch.nn.functional.cross_entropy(logits[:, :-1][mask], labels[:, 1:][mask])
    torch.testing.assert_close(m.compute_loss(batch)["loss"], want)
    assert mask.sum() == (batch["attention_mask"].sum() - batch["prompt_len"].sum())


def test_loss_override_gets_the_per_sample_response_ce() -> None:
    """``loss_override`` (the per-sample hook of sample isolation and ABL) receives each sample's mean response CE:
    the hand-computed per-sample values, whose token-weighted mean is the plain loss; it acts only in training and
    refuses DeCE (catches a batch-mean passed as per-sample, or an override leaking into evaluation)."""
    dm = _dm()
    m = InstructionLMModule(vocab_size=dm.vocab_size, **TINY)
    batch = next(iter(dm.train_dataloader()))
    logits = m(batch["input_ids"], batch["attention_mask"])
    labels = batch["labels"]
    want = []
    for i in range(len(labels)):
        keep = labels[i, 1:] != -100
        want.append(torch.nn.functional.cross_entropy(logits[i, :-1][keep], labels[i, 1:][keep]))
    seen: dict[str, torch.Tensor] = {}

    def override(b: dict, ce: torch.Tensor) -> torch.Tensor:
        seen["ce"], seen["index"] = ce, b["index"]
        return 2.0 * ce.sum()

    m.loss_override = override
    plain = m.eval().compute_loss(batch)["loss"]  # evaluation: the plain loss, the override untouched
    assert not seen
    loss = m.train().compute_loss(batch)["loss"]
    torch.testing.assert_close(seen["ce"], torch.stack(want))
    torch.testing.assert_close(loss, 2.0 * torch.stack(want).sum())
    counts = (labels[:, 1:] != -100).sum(1).float()
    torch.testing.assert_close((seen["ce"] * counts).sum() / counts.sum(), plain)
    assert torch.equal(seen["index"], batch["index"])
    d = InstructionLMModule(vocab_size=dm.vocab_size, loss="dece", **TINY)
    d.loss_override = override
    with pytest.raises(ValueError, match="needs loss: ce"):
        d.train().compute_loss(batch)


def test_dece_option_uses_the_epoch() -> None:
    """loss=dece computes DeCE at α = α_base^(epoch + 1) (1-indexed; epoch 0 outside a trainer)."""
    dm = _dm()
    m = InstructionLMModule(vocab_size=dm.vocab_size, loss="dece", dece_alpha_base=0.9, dece_epsilon=0.05, **TINY)
    batch = next(iter(dm.train_dataloader()))
    logits = m(batch["input_ids"], batch["attention_mask"])
    z, y = shift_for_lm(logits, batch["labels"])
    torch.testing.assert_close(m.compute_loss(batch)["loss"], dece_loss(z, y, epoch=1, alpha_base=0.9, epsilon=0.05))


def test_cosine_schedule_with_warmup(tmp_path: Path) -> None:
    """cosine: linear warm-up, then cosine to 0 over the run's steps (a constant rate or a missing warm-up fails)."""
    dm = _dm()
    m = InstructionLMModule(vocab_size=dm.vocab_size, lr=1e-2, lr_schedule="cosine", warmup_steps=2, **TINY)
    lrs: list[float] = []

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, *args: object) -> None:
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         callbacks=[Spy()], default_root_dir=str(tmp_path))  # fmt: skip
    trainer.fit(m, datamodule=dm)
    total = 6
    want = [1e-2 * min(1.0, (s + 1) / 2) * 0.5 * (1 + math.cos(math.pi * s / total)) for s in range(total)]
    assert lrs == pytest.approx(want)


def test_hf_folder_round_trip(tmp_path: Path) -> None:
    """pretrained=<Hugging Face folder> loads that causal LM (identical logits), never a hub id."""
    dm = _dm()
    src = InstructionLMModule(vocab_size=dm.vocab_size, init_seed=3, **TINY)
    src.model.lm.save_pretrained(tmp_path / "hf")
    loaded = InstructionLMModule(vocab_size=dm.vocab_size, pretrained=str(tmp_path / "hf"), **TINY)
    batch = next(iter(dm.val_dataloader()))
    src.eval(), loaded.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch["input_ids"], batch["attention_mask"]),
                                   src(batch["input_ids"], batch["attention_mask"]))  # fmt: skip
    with pytest.raises(FileNotFoundError, match="never downloads"):
        InstructionLMModule(vocab_size=dm.vocab_size, pretrained="gpt2", **TINY)


def test_named_errors(tmp_path: Path) -> None:
    """Impossible shapes fail before training, naming the flag."""
    with pytest.raises(ValueError, match="n_embd=30 must be divisible by n_head=4"):
        InstructionLMModule(n_embd=30, n_head=4)
    dm = _dm(max_length=60)
    m = InstructionLMModule(vocab_size=dm.vocab_size, max_length=48, **TINY)
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(ValueError, match="max_length=60 exceeds --model.init_args.max_length=48"):
        trainer.fit(m, datamodule=dm)
