"""W&B: configs/logger/wandb.yaml logs offline into its own run directory, with the resolved config."""

from __future__ import annotations

import glob
import json
import time
from pathlib import Path

import pytest
from conftest import QUIET, ROOT, TINY_CRAFT, TINY_DATA

from zoo.cli import main


def test_offline_run_inside_the_run_folder_with_metrics_and_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --trainer.default_root_dir the run gets runs/craft/<date-time>; W&B (save_dir unset) writes its offline
    run inside it, beside config.yaml, checkpoints/ and metrics.json; nothing else lands in the working directory."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    cli = main(["fit", "-c", str(ROOT / "configs/craft/default.yaml"), "-c", str(ROOT / "configs/logger/wandb.yaml"),
          *QUIET, *TINY_DATA, *TINY_CRAFT, "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
          "--trainer.limit_val_batches=1", "--trainer.num_sanity_val_steps=0",
          "--trainer.log_every_n_steps=1"])  # fmt: skip
    folder = Path(cli.trainer.default_root_dir)
    assert folder.parent == Path("runs/craft") and sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    runs = glob.glob(f"{folder}/wandb/offline-run-*")
    assert len(runs) == 1, runs
    run = Path(runs[0])
    cli.trainer.logger.experiment.finish()  # flush the offline run (its records are written asynchronously)
    for _ in range(100):  # wandb-core may still be writing after finish() returns
        records = b"".join(p.read_bytes() for p in run.glob("*.wandb"))
        if b"val/mrr" in records and b"CRAFTModule" in records:
            break
        time.sleep(0.1)
    assert b"val/mrr" in records and b"train/loss" in records  # logged metrics are in the offline run
    assert b"CRAFTModule" in records  # the resolved config went into the W&B run config
    assert "CRAFTModule" in (folder / "config.yaml").read_text()  # and into the run folder as config.yaml
    assert list((folder / "checkpoints").glob("*.ckpt"))  # checkpoints beside it, not under a W&B project folder
    assert "val/mrr" in json.loads((folder / "metrics.json").read_text())
