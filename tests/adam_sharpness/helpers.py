"""Shared runner of the adam_sharpness tests: the module's own training loop without a Trainer (fast)."""

from __future__ import annotations

from statistics import median

from callbacks.label_noise import LabelNoise
from datamodules.sparse_regression.datamodule import SparseRegressionDataModule
from zoo.adam_sharpness.module import DiagonalLinearNet


def run_core(optimizer: str, replicas: int, steps: int, delta: float = 0.5, d: int = 40, k: int = 3,
             n: int = 20) -> tuple[DiagonalLinearNet, object, SparseRegressionDataModule]:  # fmt: skip
    """``steps`` optimizer steps of ``optimizer`` on seeds 0..replicas-1 (noise seeds 1000+seed), CI-scale data."""
    dm = SparseRegressionDataModule(d=d, k=k, n=n, n_test=2000, seed=0, n_replicas=replicas)
    dm.setup()
    net = DiagonalLinearNet(input_dim=d, n_replicas=replicas, optimizer=optimizer)
    opt = net.configure_optimizers()
    net.label_noise = LabelNoise(delta, noise_seed=1000, n_replicas=replicas)
    Z, y = dm.train
    net._clean = (Z, y)
    for _ in range(steps // 100):
        net.train_chunk(Z, y, opt, 100)
    return net, opt, dm


def separation(adam: dict, sgd: dict) -> tuple[int, float, float]:
    """(#seeds where Adam's Σ√|w| is lower, median test MSE Adam, median test MSE SGD)."""
    lower = sum(a < s for a, s in zip(adam["l_half"], sgd["l_half"], strict=True))
    return lower, median(adam["test_mse"]), median(sgd["test_mse"])
