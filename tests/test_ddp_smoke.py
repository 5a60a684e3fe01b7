"""Scale: every gradient-trained method's main config fits under Lightning's own `ddp` strategy on 2 CPU processes.

Driven by the manifests (`ddp`, `tiny`, `short`): a new method is covered by declaring itself. Slow; CI runs
the methods with a dedicated DDP test through those tests and, here, one of the others per day in rotation.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from zoo.core.registry import manifests

DDP = [m for m in manifests().values() if m.ddp is not None]
ROTATION = sorted(m.slug for m in DDP if not m.dedicated_ddp_test)
TODAY = ROTATION[datetime.date.today().toordinal() % len(ROTATION)] if ROTATION else None


def _marks(slug: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.slow, *([pytest.mark.ci] if slug == TODAY else [])]


@pytest.mark.parametrize("slug", [pytest.param(m.slug, marks=_marks(m.slug)) for m in DDP])
def test_main_config_ddp_two_cpu_processes(slug: str, tmp_path: Path) -> None:
    """Both ranks finish, see a world of 2, and end with the same weights and the same logged metrics (catches
    gradients that are not all-reduced, e.g. in a manual-optimisation step, and per-rank metrics)."""
    manifest = manifests()[slug]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "zoo", "fit", "-c", str(ROOT / manifest.config), "--trainer.accelerator=cpu",
           "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false",
           "--trainer.max_steps=2", "--trainer.limit_val_batches=1", "--trainer.num_sanity_val_steps=0",
           *manifest.tiny_overrides(manifest.config), *manifest.short, *manifest.ddp,
           "--trainer.callbacks+=callbacks.metrics_json.MetricsJSON", f"--trainer.callbacks.dirpath={tmp_path / 'm'}",
           "--trainer.callbacks.weights=true", f"--trainer.default_root_dir={tmp_path}", "--trainer.strategy=ddp",
           "--trainer.devices=2"]  # fmt: skip
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "m").glob("metrics_rank*.json"))]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["weights_sum"] == ranks[1]["weights_sum"]
    shared = ranks[0]["metrics"].keys() & ranks[1]["metrics"].keys()
    assert {k: ranks[0]["metrics"][k] for k in shared if not k.startswith("train/")} == {
        k: ranks[1]["metrics"][k] for k in shared if not k.startswith("train/")
    }
