"""Scale: the prune phase under Lightning's own `ddp` strategy on 2 CPU processes (mask gradients all-reduced)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from .test_callback import TINY, _csv


@pytest.mark.slow
@pytest.mark.ci
def test_prune_phase_ddp_two_cpu_processes(tmp_path: Path) -> None:
    """Both ranks prune the same entries (same schedule history and mask digest), and the merged checkpoint is
    written once. Catches mask scores that are not all-reduced across ranks (each rank would prune its own set)."""
    csv = _csv(tmp_path / "series.csv", rows=900)
    model = [f"--model.init_args.{k}={v}" for k, v in TINY.items() if k not in ("context_length", "horizon")]
    cmd = [
        sys.executable, "-m", "zoo", "fit", "-c", str(ROOT / "configs/prune_finetune/default.yaml"), *model,
        "--model.init_args.pretrained=null", f"--data.init_args.path={csv}", "--data.init_args.context_length=32",
        "--data.init_args.horizon=8", "--data.init_args.batch_size=16", "--trainer.accelerator=cpu",
        "--trainer.devices=2", "--trainer.strategy=ddp", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false", "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}",
        "--trainer.callbacks.init_args.macro_batch_size=64", "--trainer.callbacks.init_args.finetune=false",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rank0 = json.loads((tmp_path / "prune_finetune.json").read_text())
    rank1 = json.loads((tmp_path / "prune_finetune.rank1.json").read_text())
    assert rank0["history"] == rank1["history"] and len(rank0["history"]) >= 2
    assert rank0["summary"]["mask_sha256"] == rank1["summary"]["mask_sha256"]
    assert (tmp_path / "pruned.ckpt").exists()
