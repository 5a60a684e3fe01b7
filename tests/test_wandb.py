"""W&B: configs/logger/wandb.yaml logs offline into its own run directory, with the resolved config."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
from conftest import QUIET, ROOT, TINY_CRAFT, TINY_DATA

from zoo.cli import main


def test_offline_run_directory_with_metrics_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    main(["fit", "-c", str(ROOT / "configs/craft/default.yaml"), "-c", str(ROOT / "configs/logger/wandb.yaml"),
          *QUIET, *TINY_DATA, *TINY_CRAFT, "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
          "--trainer.limit_val_batches=1", "--trainer.num_sanity_val_steps=0", "--trainer.log_every_n_steps=1",
          f"--trainer.logger.init_args.save_dir={tmp_path}"])  # fmt: skip
    runs = glob.glob(f"{tmp_path}/wandb/offline-run-*")
    assert len(runs) == 1, runs
    run = Path(runs[0])
    import wandb

    wandb.finish()  # flush the offline run
    records = b"".join(p.read_bytes() for p in run.glob("*.wandb"))
    assert b"val/mrr" in records and b"train/loss" in records  # logged metrics are in the offline run
    assert b"CRAFTModule" in records  # the resolved config went into the W&B run config
    assert "CRAFTModule" in (run / "config.yaml").read_text()  # and into the run folder as config.yaml
    assert not Path("config.yaml").exists()  # never ./config.yaml
