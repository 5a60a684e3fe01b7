"""The Lightning modules: a BOPE stage per epoch that resumes exactly, the run's files, the utility fit."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from zoo.core.reproduce import config_path, fit

torch.set_num_threads(1)
pytest.importorskip("botorch")

#: A replication in a few seconds: 2 then 1 comparisons, short fits and acquisition searches.
TINY = (
    "--model.init_args.n_pe_first=2",
    "--model.init_args.n_pe=1",
    "--model.init_args.steps=30",
    "--model.init_args.mc_samples=8",
    "--model.init_args.num_restarts=1",
    "--model.init_args.raw_samples_pe=16",
    "--model.init_args.raw_samples_batch=16",
    "--model.init_args.maxiter=10",
    "--data.init_args.n_holdout=100",
)


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def test_a_resumed_run_repeats_the_uninterrupted_one(tmp_path: Path) -> None:
    """Stage 0, a checkpoint, then stage 1 from it give the same designs, DM answers and metrics as stages 0-1 in
    one run (state in the checkpoint, every draw seeded per stage); fails if a stage reuses the global RNG stream.
    """
    cfg = config_path("bope_monne", "default")
    whole = fit(cfg, (*TINY, "--model.init_args.n_batches=2"), seed=3, root=tmp_path / "whole")
    first = fit(cfg, (*TINY, "--model.init_args.n_batches=1"), seed=3, root=tmp_path / "first", checkpoints=True)
    ckpt = first.trainer.checkpoint_callback.best_model_path or first.trainer.checkpoint_callback.last_model_path
    assert ckpt and Path(ckpt).exists()
    state = torch.load(ckpt, weights_only=True)["bope_replication"]
    assert int(state["stages"]) == 1 and state["x"].shape == (8 + 2, 5)
    from zoo.core.reproduce import build

    cli = build(cfg, (*TINY, "--model.init_args.n_batches=2"), seed=3, root=tmp_path / "resumed")
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt)
    resumed = cli.model
    assert resumed.replication.stages == 2
    torch.testing.assert_close(resumed.replication.x, whole.model.replication.x, rtol=0, atol=0)
    torch.testing.assert_close(resumed.replication.comps, whole.model.replication.comps, rtol=0, atol=0)
    assert resumed.history == whole.model.history
    assert _read(tmp_path / "resumed" / "designs.csv") == _read(tmp_path / "whole" / "designs.csv")


def test_the_run_writes_its_designs_and_the_dm_answers_in_the_recorded_format(tmp_path: Path) -> None:
    """``designs.csv`` holds every evaluation with its true utility; ``outcomes.csv``/``comparisons.csv`` are the
    recorded-comparisons format, readable by the reader, each comparison agreeing with the noise-free DM.
    """
    from datamodules.multiobjective.readers import read_comparisons, read_outcomes
    from datamodules.multiobjective.utilities import make_utility

    result = fit(config_path("bope_monne", "default"), (*TINY, "--model.init_args.n_batches=2"), seed=0, root=tmp_path)
    rows = _read(tmp_path / "designs.csv")
    assert rows[0] == [*(f"x{i}" for i in range(5)), "y0", "y1", "y2", "g", "u"] and len(rows) == 1 + 8 + 2 * 2
    assert max(float(r[-1]) for r in rows[1:]) == pytest.approx(
        result.metrics["train/u"], abs=1e-6
    )  # logged as float32
    names, y = read_outcomes(str(tmp_path / "outcomes.csv"), k=3)
    comps = read_comparisons(str(tmp_path / "comparisons.csv"), len(y))
    assert len(comps) == 1 + 2 + 1 == result.metrics["train/comparisons"]
    g = make_utility("vehicle_safety", "pwl")(y)
    assert (g[comps[:, 0]] >= g[comps[:, 1]]).all()


def test_every_arm_runs_a_stage_and_logs_its_metrics(tmp_path: Path) -> None:
    """Each baseline config runs end to end: preference arms log PE diagnostics, oracle and random only U."""
    for arm in ("pairwise_gp", "random_f", "oracle", "random"):
        result = fit(config_path("bope_monne", arm), (*TINY, "--model.init_args.n_batches=1"), seed=1,
                     root=tmp_path / arm)  # fmt: skip
        assert result.metrics["train/evaluations"] == 10
        assert ("train/pe_u" in result.metrics) == (arm in ("pairwise_gp", "random_f"))
        assert -1.0 < result.metrics["train/u"] <= 1.0 + 1e-9


def test_a_failing_pairwise_gp_fit_is_retried_and_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Revision: a ``ModelFittingError`` is caught, the fit retried with BoTorch's torch optimiser, and recorded."""
    from botorch.exceptions.errors import ModelFittingError

    from zoo.bope_monne import loop

    calls: list[object] = []
    real = loop.fit_gpytorch_mll

    def flaky(mll: object, **kwargs: object) -> object:
        calls.append(kwargs.get("optimizer"))
        if len(calls) == 1:
            raise ModelFittingError("All attempts to fit the model have failed.")
        return real(mll, **kwargs)

    monkeypatch.setattr(loop, "fit_gpytorch_mll", flaky)
    y = torch.rand(6, 3, dtype=torch.float64)
    surrogate = loop.PairwiseGPSurrogate(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    surrogate.fit(y, torch.tensor([[0, 1], [2, 3], [4, 5]]), seed=0)
    assert calls == [None, loop.fit_gpytorch_mll_torch]
    assert len(surrogate.failures) == 1 and "3 comparisons" in surrogate.failures[0]
    assert surrogate.score(y).shape == (6,)


def test_the_utility_module_learns_vehicle_safety_pwl_from_300_comparisons(tmp_path: Path) -> None:
    """Card test 2 (last part): MoNNE fitted to 300 noise-free VS-PWL comparisons (Lightning, Adam 1e-2 × 300) has
    held-out pairwise accuracy ≥ 0.9, on the held-out comparisons and on 1000 random outcome pairs; writes
    ``utilities.csv``.
    """
    result = fit(config_path("bope_monne", "utility"), ("--data.init_args.val_fraction=0.2",), seed=0, root=tmp_path)
    assert result.metrics["val/acc"] >= 0.9
    from datamodules.multiobjective.problems import make_problem
    from datamodules.multiobjective.utilities import make_utility
    from zoo.bope_monne.model import pairwise_accuracy

    problem, utility = make_problem("vehicle_safety"), make_utility("vehicle_safety", "pwl")
    x = problem.bounds()[0] + (problem.bounds()[1] - problem.bounds()[0]) * torch.rand(1000, 2, 5, dtype=torch.float64)
    y = problem(x)
    with torch.no_grad():
        assert pairwise_accuracy(result.model.model.mean(y), utility(y)) >= 0.9
    rows = _read(tmp_path / "utilities.csv")
    assert rows[0] == ["row", "utility", "std"] and len(rows) == 1 + len(result.datamodule.y)
