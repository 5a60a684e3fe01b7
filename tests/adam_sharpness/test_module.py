"""The Lightning module: vectorised replicas equal sequential runs, noise off means clean labels, the step counter."""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch import Trainer

from callbacks.label_noise import LabelNoiseCallback
from datamodules.sparse_regression.datamodule import SparseRegressionDataModule
from zoo.adam_sharpness.module import DiagonalLinearNet


def _fit(tmp: Path, seed: int, replicas: int, optimizer: str, delta: float = 0.5, steps: int = 3) -> DiagonalLinearNet:
    dm = SparseRegressionDataModule(d=12, k=2, n=8, n_test=20, seed=seed, n_replicas=replicas, batches_per_epoch=10)
    net = DiagonalLinearNet(input_dim=12, n_replicas=replicas, init_seed=seed, inner_steps=20, optimizer=optimizer)
    trainer = Trainer(max_steps=steps, callbacks=[LabelNoiseCallback(delta, noise_seed=1000 + seed)], logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      limit_val_batches=0, default_root_dir=str(tmp))  # fmt: skip
    trainer.fit(net, datamodule=dm)
    return net


def test_vectorised_replicas_equal_sequential_runs(tmp_path: Path) -> None:
    """Catches replica mixing in the optimizer, data, init or noise: replica r of 3 = a one-replica run with seed r."""
    for optimizer in ("adam_nobc", "adam_mini"):
        batched = _fit(tmp_path, 0, 3, optimizer)
        assert batched.optimizer_steps == 60
        for r in (0, 2):
            alone = _fit(tmp_path, r, 1, optimizer)
            torch.testing.assert_close(batched.model.u.detach()[r], alone.model.u.detach()[0], rtol=0, atol=1e-13)


def test_without_noise_training_is_deterministic_gradient_descent(tmp_path: Path) -> None:
    """δ = 0 trains on the clean labels: SGD then equals a plain full-batch gradient-descent loop."""
    net = _fit(tmp_path, 0, 1, "sgd", delta=0.0, steps=2)
    dm = SparseRegressionDataModule(d=12, k=2, n=8, n_test=20, seed=0)
    dm.setup()
    Z, y = dm.train
    ref = DiagonalLinearNet(input_dim=12, n_replicas=1, init_seed=0).model
    for _ in range(40):
        ref.zero_grad()
        (0.5 * (ref(Z) - y).pow(2).mean(-1)).sum().backward()
        with torch.no_grad():
            ref.u -= 0.01 * ref.u.grad
            ref.v -= 0.01 * ref.v.grad
    torch.testing.assert_close(net.model.u.detach(), ref.u.detach(), rtol=0, atol=1e-14)
