"""Test 8 (Lightning path = pure core, k counts transitions), the span logger, checkpoints and the CLI."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest
import torch
from conftest import QUIET, ROOT
from lightning.pytorch import Trainer

from avg_reward_q.helpers import run_core
from callbacks.span_logger import SpanSeminormLogger, k_grid
from datamodules.decision.mdp_datamodule import TabularMDPDataModule
from zoo.avg_reward_q.model import QConfig, span
from zoo.avg_reward_q.module import AverageRewardQLearning
from zoo.cli import main
from zoo.core import ZooModule


def _trainer(root: Path, callbacks: list | None = None) -> Trainer:
    return Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks or [],
                   default_root_dir=str(root))  # fmt: skip


@pytest.mark.parametrize("algorithm,centering", [("adaptive", "none"), ("universal", "none"), ("adaptive", "mean"),
                                                 ("differential_q", "none")])  # fmt: skip
def test_trainer_fit_equals_pure_core(tmp_path: Path, algorithm: str, centering: str) -> None:
    """Test 8: Trainer.fit over chunks of 250 reproduces the pure loop bit for bit; k = transitions, not chunks."""
    kw = {"n_replicas": 4, "steps": 2300, "chunk_len": 250}
    dm = TabularMDPDataModule(**kw)
    module = AverageRewardQLearning(algorithm=algorithm, centering=centering, n_states=6, n_actions=2, n_replicas=4)
    logger = SpanSeminormLogger(n_points=12, k_min=10)
    trainer = _trainer(tmp_path, [logger])
    trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 10  # Lightning counts chunks (ceil(2300 / 250)); the module's k counts transitions
    assert int(module.model.k) == 2300 and int(module.model.N.sum()) == 4 * 2300
    ref_dm = TabularMDPDataModule(**kw)
    ref_dm.setup()
    pure = run_core(ref_dm, module.cfg, 2300, [], chunk_len=1000)  # other chunk boundaries: same result
    assert torch.equal(module.model.Q, pure["Q"]) and torch.equal(module.model.N, pure["N"])
    assert torch.equal(module.model.rbar, pure["rbar"])
    # The logger split the chunks at its grid and recorded the diagnostics there.
    assert logger.curve["k"] == [float(k) for k in k_grid("geometric", 12, 10, 2300)]
    assert logger.curve["k"][-1] == 2300.0
    final = span(module.model.Q - dm.truth["Q_star"])
    assert logger.curve["span_mse"][-1] == pytest.approx(float((final**2).mean()), rel=1e-12)


def test_span_logger_reference_and_errors() -> None:
    assert k_grid("geometric", 5, 10, 100000) == [10, 100, 1000, 10000, 100000]
    assert k_grid("linear", 3, 10, 30) == [10, 20, 30]
    with pytest.raises(ValueError, match="reference"):
        SpanSeminormLogger(reference="Q")
    with pytest.raises(ValueError, match="grid"):
        SpanSeminormLogger(grid="log")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"stepsize": "fast", "algorithm": "rvi_q"}, "--model.init_args.stepsize='fast': expected one of 'adaptive', "),
     ({"alpha": 0.0}, "--model.init_args.alpha=0.0: expected a finite number > 0"),
     ({"h": -1.0}, "--model.init_args.h=-1.0: expected a finite number >= 0"),
     ({"algorithm": "universal", "universal_alpha": 0.0},
      "--model.init_args.universal_alpha=0.0: expected a finite number > 0"),
     ({"centering": "median"}, "--model.init_args.centering='median': expected one of 'none', 'mean', 'ref'"),
     ({"rvi_f": "max"}, "--model.init_args.rvi_f='max': expected one of 'ref', 'mean'"),
     ({"eta": 0.0}, "--model.init_args.eta=0.0: expected a finite number > 0"),
     ({"gamma": 1.5}, "--model.init_args.gamma=1.5: expected a number in [0, 1)"),
     ({"q0": float("nan")}, "--model.init_args.q0=nan: expected a finite number"),
     ({"n_replicas": 0}, "--model.init_args.n_replicas=0: expected an integer >= 1"),
     ({"n_states": 2.5}, "--model.init_args.n_states=2.5: expected an integer >= 1"),
     ({"ref_action": 2}, "--model.init_args.ref_action=2: expected an integer in [0, 1]")],
)  # fmt: skip
def test_module_values_checked_at_construction(kwargs: dict, message: str) -> None:
    """Each value is checked under its own flag (issue #19): the universal α is no longer reported as 'alpha'."""
    with pytest.raises(ValueError, match=re.escape(message)):
        AverageRewardQLearning(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"reference": "Q"}, "SpanSeminormLogger.reference='Q': expected one of 'Q*', 'Qbar'"),
     ({"grid": "log"}, "SpanSeminormLogger.grid='log': expected one of 'geometric', 'linear'"),
     ({"n_points": 1}, "SpanSeminormLogger.n_points=1: expected an integer >= 2"),
     ({"k_min": 0}, "SpanSeminormLogger.k_min=0: expected an integer >= 1"),
     ({"k_min": 100, "k_max": 50}, "SpanSeminormLogger.k_max=50: expected an integer >= 100")],
)  # fmt: skip
def test_span_logger_values_checked_at_construction(kwargs: dict, message: str) -> None:
    """Formerly n_points, k_min and k_max were checked only in setup, after the data was built."""
    with pytest.raises(ValueError, match=re.escape(message)):
        SpanSeminormLogger(**kwargs)


def test_span_logger_says_when_its_grid_shrinks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches k_min silently clipped to a derived k_max, and grid points silently merged by rounding."""
    dm = TabularMDPDataModule(n_replicas=2, steps=60, chunk_len=30)
    module = AverageRewardQLearning(n_replicas=2)
    logger = SpanSeminormLogger(n_points=40, k_min=100)
    _trainer(tmp_path, [logger]).fit(module, datamodule=dm)
    err = capsys.readouterr().err
    assert "SpanSeminormLogger.k_min=100 is beyond the run's 60 transitions" in err
    assert "SpanSeminormLogger.n_points=40: 1 distinct transition counts in [60, 60]" in err
    assert logger.curve["k"] == [60.0]


def test_module_init_errors() -> None:
    with pytest.raises(ValueError, match="stepsize"):
        AverageRewardQLearning(algorithm="adaptive", stepsize="universal")
    with pytest.raises(ValueError, match="algorithm"):
        AverageRewardQLearning(algorithm="sarsa")
    with pytest.raises(ValueError, match="ref_state"):
        AverageRewardQLearning(ref_state=6)
    with pytest.raises(ValueError, match=r"--model.init_args.alpha=-1.0: expected a finite number > 0"):
        AverageRewardQLearning(alpha=-1.0)
    with pytest.raises(ValueError, match=r"--model.init_args.gamma=1.0"):
        AverageRewardQLearning(algorithm="discounted_q", gamma=1.0)
    assert AverageRewardQLearning(algorithm="universal").cfg.alpha == 36.0  # S·A·α
    assert AverageRewardQLearning(algorithm="universal", universal_alpha=12.0).cfg.alpha == 12.0
    assert AverageRewardQLearning(algorithm="rvi_q").cfg.stepsize == "adaptive"


def test_module_rejects_mismatched_datamodule(tmp_path: Path) -> None:
    module = AverageRewardQLearning(n_states=6, n_actions=2, n_replicas=3)
    with pytest.raises(ValueError, match="n_replicas"):
        _trainer(tmp_path).fit(module, datamodule=TabularMDPDataModule(n_replicas=4, steps=100, chunk_len=50))


def test_cli_fit_and_checkpoint_round_trip(tmp_path: Path) -> None:
    """`zoo fit` on the default config (shapes linked from data); the checkpoint loads with weights_only=True."""
    config = str(ROOT / "configs/avg_reward_q/default.yaml")
    cli = main(["fit", "-c", config, *QUIET, "--data.init_args.steps=3000", "--data.init_args.n_replicas=3",
                "--data.init_args.S=4", "--data.init_args.A=3", f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    model = cli.model
    assert tuple(model.model.Q.shape) == (3, 4, 3) and int(model.model.k) == 3000
    ckpt = sorted(glob.glob(f"{tmp_path}/**/*.ckpt", recursive=True))[-1]
    blob = torch.load(ckpt, map_location="cpu", weights_only=True)
    hp = blob["hyper_parameters"]
    assert hp["_class_path"] == "zoo.avg_reward_q.module.AverageRewardQLearning"
    assert (hp["n_states"], hp["n_actions"], hp["n_replicas"]) == (4, 3, 3)
    loaded = ZooModule.load_from_checkpoint(ckpt)
    assert type(loaded) is AverageRewardQLearning
    for name in ("Q", "N", "k", "rbar"):
        assert torch.equal(getattr(loaded.model, name), getattr(model.model, name)), name


def test_pure_core_runner_matches_module_advance() -> None:
    """module.advance (no Trainer) on the datamodule's chunks equals the pure runner."""
    dm = TabularMDPDataModule(n_replicas=2, steps=1500, chunk_len=400)
    dm.setup()
    module = AverageRewardQLearning(algorithm="rvi_q", rvi_f="mean", n_replicas=2)
    for chunk in dm.chunks():
        module.advance(chunk)
    pure = run_core(dm, QConfig(algorithm="rvi_q", rvi_f="mean"), 1500, [], chunk_len=700)
    assert torch.equal(module.model.Q, pure["Q"]) and int(module.model.k) == 1500


def test_resume_continues_the_trajectories(tmp_path: Path) -> None:
    """fit 2 chunks + resume equals one straight fit: the stream is fast-forwarded to k and the resumed epoch serves
    only the 1000 transitions left (the max_steps checkpoint closes epoch 0, so the resume allows a second epoch)."""
    config = str(ROOT / "configs/avg_reward_q/default.yaml")
    small = [*QUIET, "--data.init_args.steps=3000", "--data.init_args.n_replicas=2"]
    straight = main(["fit", "-c", config, *small, f"--trainer.default_root_dir={tmp_path / 'b'}"])
    main(["fit", "-c", config, *small, f"--trainer.default_root_dir={tmp_path / 'a'}", "--trainer.max_steps=2"])
    ckpt = sorted(glob.glob(f"{tmp_path / 'a'}/**/*.ckpt", recursive=True))[-1]
    assert int(torch.load(ckpt, weights_only=True)["state_dict"]["model.k"]) == 2000
    resumed = main(["fit", "-c", config, *small, f"--trainer.default_root_dir={tmp_path / 'a'}",
                    "--trainer.max_epochs=2", f"--ckpt_path={ckpt}"])  # fmt: skip
    assert int(resumed.model.model.k) == 3000
    assert torch.equal(resumed.model.model.Q, straight.model.model.Q)
