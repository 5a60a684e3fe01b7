"""The Lightning modules end to end on a tiny cohort: stage 1, stage 2 on its checkpoint, generation, evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zoo.core.reproduce import config_path, fit

torch.set_num_threads(1)
pytest.importorskip("vector_quantize_pytorch")

DATA = ("--data.init_args.n_stays=60", "--data.init_args.max_events=8")
AR = ("--trainer.max_epochs=1", "--model.init_args.layers=1", "--model.init_args.d=16", "--model.init_args.ffn=32",
      "--model.init_args.n_generate=6", "--model.init_args.eval_parts=[fidelity,temporal]")  # fmt: skip


@pytest.fixture(scope="module")
def stage1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stage-1 checkpoint trained for one epoch on 60 stays."""
    root = tmp_path_factory.mktemp("stage1")
    result = fit(config_path("rawmed", "rqvae"), (*DATA, "--trainer.max_epochs=1", "--data.init_args.batch_size=128"),
                 seed=0, root=root)  # fmt: skip
    path = root / "rqvae.ckpt"
    result.trainer.save_checkpoint(str(path))
    assert result.model.model.vocab_fingerprint.any()
    return path


def test_stage2_generates_writes_and_evaluates(stage1: Path, tmp_path: Path) -> None:
    """Stage 2 on the checkpoint: the run folder holds synthetic/ and real/ folders, metrics.json and report.md, and
    the end-of-fit metrics reach the CLI (gen/*, eval/*)."""
    result = fit(config_path("rawmed", "default"), (*DATA, *AR, f"--model.init_args.pretrained={stage1}"), seed=0,
                 root=tmp_path)  # fmt: skip
    for name in ("synthetic/stays.csv", "synthetic/labevents.csv", "real/train/stays.csv", "real/test/labevents.csv",
                 "real/holdout/inputevents.csv", "metrics.json", "report.md"):  # fmt: skip
        assert (tmp_path / name).exists(), name
    blob = json.loads((tmp_path / "metrics.json").read_text())
    assert blob["generation"]["requested"] == 6 and "cde/mean" in blob["evaluation"]
    assert "gen/invalid_frac" in result.metrics and "eval/time_gap_ks/all" in result.metrics
    assert result.model.evaluation["gen/stays"] == 6


def test_stage2_refuses_a_checkpoint_of_another_vocabulary(stage1: Path, tmp_path: Path) -> None:
    """A stage-1 checkpoint fitted on other data (another vocabulary) stops with one line, never mixes ids."""
    with pytest.raises(ValueError, match="another vocabulary"):
        other = ("--data.init_args.n_stays=70", "--data.init_args.max_events=8")
        fit(
            config_path("rawmed", "default"),
            (*other, *AR, f"--model.init_args.pretrained={stage1}"),
            seed=0,
            root=tmp_path,
        )


def test_the_frozen_rqvae_stays_frozen(stage1: Path, tmp_path: Path) -> None:
    """Stage 2 trains the transformer only: the RQ-VAE's weights and codebook equal the checkpoint's after a fit."""
    flags = (*DATA, *AR, f"--model.init_args.pretrained={stage1}", "--model.init_args.eval_parts=[fidelity]")
    result = fit(config_path("rawmed", "default"), flags, seed=0, root=tmp_path)
    saved = torch.load(stage1, weights_only=True)["state_dict"]
    for key, value in result.model.model.state_dict().items():
        torch.testing.assert_close(value, saved[f"model.{key}"], rtol=0, atol=0, msg=key)


def test_baselines_copy_and_marginal_run_through_the_same_end(tmp_path: Path) -> None:
    """Copy reproduces the train split (MIA of the copy is the sanity case); marginal draws as many stays."""
    parts = "--model.init_args.eval_parts=[fidelity,privacy]"
    copy = fit(config_path("rawmed", "copy"), (*DATA, parts), seed=0, root=tmp_path / "copy")
    marginal = fit(config_path("rawmed", "marginal"), (*DATA, parts), seed=0, root=tmp_path / "marginal")
    assert copy.model.evaluation["gen/stays"] == len(copy.datamodule.splits["train"])
    assert marginal.model.evaluation["gen/stays"] == len(marginal.datamodule.splits["train"])
    assert copy.model.evaluation["eval/mia/accuracy"] > marginal.model.evaluation["eval/mia/accuracy"]
