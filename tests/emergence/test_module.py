"""The Lightning module and the OverlapLogger: the Trainer path equals the bare loop, modes, second layers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import QUIET, ROOT

from callbacks.overlap_logger import OverlapLogger
from datamodules.gaussian_teacher.teacher import make_teacher
from zoo.cli import main
from zoo.emergence.model import HermiteStudent, StepConfig, overlaps, population_steps, refit
from zoo.emergence.module import TwoLayerHermiteStudent

CONFIG = str(ROOT / "configs/emergence/default.yaml")
SMALL = ["--data.init_args.d=30", "--data.init_args.P=3", "--data.init_args.n_replicas=2",
         "--model.init_args.m=6", "--model.init_args.inner_steps=25", "--trainer.max_steps=8"]  # fmt: skip


def _fit(tmp_path: Path, *extra: str) -> object:
    return main(["fit", "-c", CONFIG, *QUIET, *SMALL, "--trainer.logger=false", "--trainer.enable_checkpointing=false",
                 f"--trainer.default_root_dir={tmp_path}", *extra])  # fmt: skip


def test_trainer_path_equals_bare_loop_and_logger_passages(tmp_path: Path) -> None:
    """8 training steps × 25 updates under the Trainer give the W of 200 bare population updates, and the logger's
    first passages equal those of the bare trajectory: catches a skipped/duplicated update or an off-by-one t."""
    cli = _fit(tmp_path, "--model.init_args.lr=2.0")
    module = cli.model
    assert module.updates == 200
    V, astar = make_teacher(30, 3, 1.5, [0, 1])
    bare = HermiteStudent(2, 6, 30, {4: 1.0}, 0.3, 0)
    first = torch.full((2, 3), math.inf, dtype=torch.float64)

    def observe(Ms: torch.Tensor, t0: int) -> None:
        steps = torch.arange(t0, t0 + len(Ms), dtype=torch.float64).view(-1, 1)
        for r in range(2):
            first[r] = torch.minimum(first[r], torch.where(Ms[:, r] > 0.3, steps, math.inf).amin(0))

    population_steps(bare, V, astar, StepConfig(2.0, 0.0, {4: 1.0}, {4: 1.0}), 200, 0, [observe])
    torch.testing.assert_close(module.model.W, bare.W, rtol=0, atol=1e-12)
    logger = next(c for c in cli.trainer.callbacks if isinstance(c, OverlapLogger))
    torch.testing.assert_close(torch.tensor(logger.summary()["t_0.3"], dtype=torch.float64), first)
    assert torch.isfinite(first).any()  # lr 2.0: some direction passes 0.3 within 200 updates
    assert [row["t"] for row in logger.history] == [0, 25, 50, 75, 100, 125, 150, 175, 200]


def test_online_mode_runs_on_the_sphere(tmp_path: Path) -> None:
    """Online SGD through the Trainer: one update per minibatch of the chunk, rows stay unit, loss logged."""
    cli = _fit(tmp_path, "--data.init_args.online=true", "--data.init_args.chunk=2", "--data.init_args.batch_size=32",
               "--model.init_args.population_mode=false", "--trainer.max_steps=3")  # fmt: skip
    assert cli.model.updates == 6
    assert (cli.model.model.W.norm(dim=-1) - 1).abs().max() < 1e-6
    assert math.isfinite(float(cli.trainer.callback_metrics["train/loss"]))


def test_second_layer_modes() -> None:
    """trained uses lr_a, two_timescale lr_a_ratio·lr, fixed/refit 0; refit evaluates with the least-squares a."""
    steps = {mode: TwoLayerHermiteStudent(m=3, input_dim=10, second_layer=mode, lr=0.2, lr_a=0.005,
                                          lr_a_ratio=0.1).cfg.lr_a for mode in ("fixed", "trained", "two_timescale",
                                                                                 "refit")}  # fmt: skip
    assert steps == {"fixed": 0.0, "trained": 0.005, "two_timescale": pytest.approx(0.02), "refit": 0.0}
    module = TwoLayerHermiteStudent(m=3, input_dim=10, second_layer="refit", n_replicas=2)
    V, astar = make_teacher(10, 2, 1.5, [0, 1])
    module.set_teacher(V, astar)
    torch.testing.assert_close(module.eval_a(), refit(module.model.W, V, astar, {4: 1.0}))
    losses = module.losses()
    assert (losses["loss_refit"] <= losses["loss_fixed"] + 1e-12).all()


def test_overlap_logger_state_round_trip() -> None:
    """First passages and history survive state_dict/load_state_dict (resume)."""
    logger = OverlapLogger(every_n_steps=1)
    logger._observe(torch.tensor([[[0.1, 0.5]], [[0.95, 0.2]]], dtype=torch.float64), 10)
    assert logger.summary() == {"t_0.3": [[11.0, 10.0]], "t_0.9": [[11.0, math.inf]]}
    other = OverlapLogger()
    other.load_state_dict(logger.state_dict())
    assert other.summary() == logger.summary()
    torch.testing.assert_close(
        overlaps(torch.eye(2, dtype=torch.float64)[None], torch.eye(2)[None].double()),
        torch.eye(2, dtype=torch.float64)[None],
    )
