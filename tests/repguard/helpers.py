"""Shared pieces of the repguard callback tests."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl

from callbacks.backdoor_defense import RepGuardCallback
from datamodules.instructions.datamodule import BackdoorDataModule
from zoo.repguard.module import InstructionLMModule


def restored_from_checkpoint(
    callback: RepGuardCallback, dm: BackdoorDataModule, ckpt: Path, root: Path, **model: object
) -> InstructionLMModule:
    """A fresh module restored from ``ckpt`` by ``Trainer.test`` with ``callback`` (one test batch), in eval mode.

    What ``zoo test --ckpt_path`` does: the callback's state (mask, scorer, history) comes from the checkpoint.
    """
    fresh = InstructionLMModule(vocab_size=dm.vocab_size, max_length=dm.max_length, **model)  # type: ignore[arg-type]
    tester = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback], default_root_dir=str(root), limit_test_batches=1)  # fmt: skip
    tester.test(fresh, datamodule=dm, ckpt_path=str(ckpt), verbose=False)
    return fresh.eval()
