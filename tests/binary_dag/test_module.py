"""The Lightning modules of binary_dag: the AL outer loop per epoch, the estimate, its outputs and their checks."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import Trainer

from datamodules.binary.datamodule import BinaryMVBDataModule, PgmpyBIFDataModule
from zoo.binary_dag import graphs
from zoo.binary_dag.module import BaselineDAGModule, MVBNotearsModule, TwoStageModule


def _trainer(tmp_path: Path, epochs: int = 1) -> Trainer:
    return Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
                   num_sanity_val_steps=0, limit_val_batches=0)  # fmt: skip


def test_mvb_notears_runs_one_inner_solve_per_epoch_and_stops_at_convergence(tmp_path):
    """Each epoch is one L-BFGS solve; on_train_epoch_end applies the NOTEARS decision; the run stops by itself once
    h ≤ h_tol, the estimate buffer holds the post-processed DAG and graph.csv names its edges."""
    dm = BinaryMVBDataModule(graph="interaction5", d=5, n=3000, seed=0)
    module = MVBNotearsModule(n_vars=5, max_order=1, penalty="mcp", lam=0.05, inner_max_iter=100)
    trainer = _trainer(tmp_path, epochs=80)
    trainer.fit(module, datamodule=dm)
    rho, alpha, h, solves, done, _ = module.al.tolist()
    assert done == 1.0 and h <= 1e-8 and trainer.current_epoch == int(solves) < 80
    est = module.estimate.numpy()
    assert graphs.is_dag(est) and (est == module.estimate_graph()).all()
    metrics = trainer.callback_metrics
    assert {"train/bic", "train/h", "train/rho", "final/cpdag_shd", "final/skel_f1"} <= set(metrics)
    assert float(metrics["final/cpdag_shd"]) == graphs.cpdag_shd(dm.truth, est)
    rows = list(csv.reader(open(tmp_path / "graph.csv")))
    assert rows[0] == ["source", "target"] and len(rows) - 1 == int(est.sum())
    assert {(s, t) for s, t in rows[1:]} == {(f"X{i}", f"X{j}") for i, j in zip(*np.nonzero(est), strict=True)}


def test_rejected_solve_restarts_from_the_accepted_theta(tmp_path):
    """A rejected inner solve (too little progress) must not move θ: the next epoch starts from the accepted one."""
    dm = BinaryMVBDataModule(graph="interaction5", d=5, n=2000, seed=1)
    module = MVBNotearsModule(n_vars=5, max_order=1, inner_max_iter=50)
    trainer = _trainer(tmp_path, epochs=1)
    trainer.fit(module, datamodule=dm)
    accepted = module.accepted.clone()
    module.model.theta.data.add_(1.0)  # the rejected solve's θ
    state = module.outer_step(10.0 * float(module.al[2]))  # it made h worse
    assert state.rho == 10.0 and module.al[0] == 10.0 and state.h == float(module.al[2])
    torch.testing.assert_close(module.accepted, accepted)
    torch.testing.assert_close(module.model.theta.detach(), accepted)


@pytest.mark.slow
def test_two_stage_recovers_interaction5_where_first_order_fails():
    """Claim 1 at seed 0 (n = 20k): the two-stage CPDAG-SHD is ≤ 1 while first-order NOTEARS is ≥ 2."""
    problem = BinaryMVBDataModule(graph="interaction5", d=5, n=20000, seed=0).problem()
    two = TwoStageModule(n_vars=5).learn(problem)
    first = MVBNotearsModule(n_vars=5, max_order=1).learn(problem)
    assert graphs.cpdag_shd(problem["truth"], two) <= 1 < 2 <= graphs.cpdag_shd(problem["truth"], first)


def test_oracle_recovers_the_mec_at_100k():
    """Claim 2 at seed 0: the exact DP-BIC oracle finds the true CPDAG."""
    problem = BinaryMVBDataModule(graph="interaction5", d=5, n=100000, seed=0).problem()
    adj = BaselineDAGModule(n_vars=5, algorithm="oracle").learn(problem)
    assert graphs.cpdag_shd(problem["truth"], adj) == 0


def test_mvb_learners_refuse_native_multistate_data():
    """A saturated logistic conditional is for 0/1 data: native sachs states stop with the binarize flag named."""
    problem = PgmpyBIFDataModule(name="sachs", n=200, seed=0, binarize=None).problem()
    for module in (TwoStageModule(n_vars=11), MVBNotearsModule(n_vars=11, max_order=1)):
        with pytest.raises(ValueError, match="binarize=first_vs_rest"):
            module.learn(problem)
    adj = BaselineDAGModule(n_vars=11, algorithm="hc_bic").learn(problem)  # the classical tools take native states
    assert adj.shape == (11, 11) and graphs.is_dag(adj)


def test_n_vars_must_match_the_data():
    problem = BinaryMVBDataModule(graph="interaction5", d=5, n=200, seed=0).problem()
    with pytest.raises(ValueError, match="n_vars=6"):
        TwoStageModule(n_vars=6).learn(problem)


def test_checkpoint_carries_the_estimate_and_the_al_state(tmp_path):
    """The estimate buffer and the outer-loop state round-trip through a weights_only checkpoint."""
    dm = BinaryMVBDataModule(graph="interaction5", d=5, n=1000, seed=0)
    module = MVBNotearsModule(n_vars=5, max_order=1, inner_max_iter=50)
    trainer = _trainer(tmp_path, epochs=3)
    trainer.fit(module, datamodule=dm)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    loaded = MVBNotearsModule.load_from_checkpoint(str(path))
    torch.testing.assert_close(loaded.al, module.al)
    assert torch.equal(loaded.estimate, module.estimate)
    torch.testing.assert_close(loaded.accepted, module.accepted)
