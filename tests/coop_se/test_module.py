"""Lightning plumbing: a CLI fit through zoo.cli.main, checkpoint round trip with weights_only=True, exact resume."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch
from conftest import QUIET, ROOT

from zoo.cli import main
from zoo.core import ZooModule

CONFIG = str(ROOT / "configs/coop_se/default.yaml")
SMALL = ["--data.init_args.T=600", "--data.init_args.n_replicas=2", "--model.init_args.rounds_per_step=200"]


def _fit(root: Path, *extra: str):
    cli = main(["fit", "-c", CONFIG, *QUIET, *SMALL, f"--trainer.default_root_dir={root}", *extra])
    return cli, sorted(glob.glob(f"{root}/**/*.ckpt", recursive=True))


def test_cli_fit_reaches_horizon_and_logs(tmp_path: Path) -> None:
    """The fit plays exactly T rounds for both replicas and logs regret, communication and elimination metrics."""
    cli, _ = _fit(tmp_path)
    sim = cli.model.sim
    assert int(sim.t) == 600 and sim.R == 2 and sim.m == 8
    metrics = cli.trainer.callback_metrics
    for key in (
        "regret_mean",
        "regret_max",
        "regret_group",
        "messages_per_agent",
        "bits_per_message_max",
        "bits_total",
        "comm_rounds",
        "active_size",
        "best_arm_eliminations",
        "elim_round_arm4",
    ):
        assert f"final/{key}" in metrics, key
    assert float(metrics["final/regret_mean"]) == pytest.approx(float(sim.regret.mean()), rel=1e-6)  # float32 log
    assert float(sim.regret.mean()) > 0
    assert float(metrics["final/comm_rounds"]) == 600


def test_checkpoint_round_trip_and_resume(tmp_path: Path) -> None:
    """weights_only=True loads; ZooModule.load_from_checkpoint rebuilds the module with the state; fit 2 steps +
    resume 1 step equals 3 steps straight (the simulator state lives in buffers). The max_steps=2 checkpoint closes
    epoch 0, so the resume allows a second epoch; the module plays from its restored round, not from the batch."""
    _, ckpts = _fit(tmp_path / "a", "--trainer.max_steps=2")
    blob = torch.load(ckpts[-1], map_location="cpu", weights_only=True)
    assert blob["hyper_parameters"]["_class_path"] == "zoo.coop_se.module.CooperativeBanditModule"
    model = ZooModule.load_from_checkpoint(ckpts[-1])
    assert type(model).__name__ == "CooperativeBanditModule" and int(model.sim.t) == 400
    model.sim.advance(200)  # continues without a datamodule
    straight, _ = _fit(tmp_path / "b", "--trainer.max_steps=3")
    resumed = main(["fit", "-c", CONFIG, *QUIET, *SMALL, f"--trainer.default_root_dir={tmp_path / 'a'}",
                    "--trainer.max_steps=3", "--trainer.max_epochs=2", f"--ckpt_path={ckpts[-1]}"])  # fmt: skip
    for sim in (resumed.model.sim, model.sim):
        assert int(sim.t) == 600
        torch.testing.assert_close(sim.regret, straight.model.sim.regret, rtol=0, atol=0)
        torch.testing.assert_close(sim.ring, straight.model.sim.ring, rtol=0, atol=0)
