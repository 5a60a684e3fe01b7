"""``SparseRegressionDataModule``: R replica problems (seeds ``seed + r``) served as one full batch per step.

Default: the seeded generator (:mod:`datamodules.sparse_regression.synthetic`), replica r drawn from ``seed + r``.
``path``: an ``.npz`` or CSV problem (:mod:`datamodules.sparse_regression.readers`), the same for every replica.
A file without ``Z_test``/``y_test`` gets ``n_test`` fresh inputs labelled by its ``w_star`` (seeded by ``seed``), or,
without ``w_star``, a seeded 20% hold-out of its rows (``holdout``), said in one line.

Training batches are ``(Z, y)`` with shapes (R, n, d), (R, n), float64, the same tensors every step (full batch; the
module adds fresh label noise). The validation batch is ``(Z_test, y_test, w_star)`` ((R, m, d), (R, m), (R, d);
``w_star`` NaN when unknown).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from datamodules.sparse_regression.readers import load
from datamodules.sparse_regression.synthetic import ZMode, inputs, sparse_problem
from zoo.core import checks
from zoo.core.datamodule import ZooDataModule
from zoo.core.messages import say


class _Repeat(Dataset):
    """The same item ``length`` times (a full-batch epoch of ``length`` steps)."""

    def __init__(self, item: Any, length: int) -> None:
        self.item, self.length = item, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        return self.item


class SparseRegressionDataModule(ZooDataModule):
    """Sparse linear regression for the diagonal linear network (card ``adam_sharpness``).

    Args:
        d: input dimension (generator; a file decides its own).
        k: non-zeros of w*.
        n: training samples.
        z_mode: ``rademacher`` (±1 inputs) or ``gaussian``.
        n_test: fresh test samples (generator, or a file with ``w_star`` and no test set).
        seed: data seed of replica 0 (replica r: ``seed + r``).
        n_replicas: problems served side by side (linked into the module).
        batches_per_epoch: training batches per epoch (each is the full batch).
        path: an ``.npz`` (Z, y, optional w_star, Z_test, y_test) or CSV (z_0..z_{d-1}, y) problem.
        holdout: fraction of a file's rows held out as the test set when it has neither a test set nor w_star.
    """

    def __init__(self, d: int = 40, k: int = 3, n: int = 20, z_mode: ZMode = "rademacher", n_test: int = 10000,
                 seed: int = 0, n_replicas: int = 1, batches_per_epoch: int = 100, path: str | None = None,
                 holdout: float = 0.2) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        for key, value in (("d", d), ("n", n), ("n_test", n_test), ("n_replicas", n_replicas),
                           ("batches_per_epoch", batches_per_epoch)):  # fmt: skip
            checks.integer(checks.data(key), value)
        checks.integer(checks.data("k"), k, low=0, high=d)
        checks.integer(checks.data("seed"), seed, low=0)
        checks.choice(checks.data("z_mode"), z_mode, ("rademacher", "gaussian"))
        checks.probability(checks.data("holdout"), holdout, open_low=True, open_high=True)
        self.k, self.n, self.z_mode, self.n_test, self.seed = k, n, z_mode, n_test, seed
        self.n_replicas, self.batches_per_epoch, self.path, self.holdout = n_replicas, batches_per_epoch, path, holdout
        self._file: dict[str, np.ndarray] | None = load(path) if path is not None else None
        #: Feature dimension, linked into the module's ``d``.
        self.input_dim = int(self._file["Z"].shape[1]) if self._file is not None else d
        self.problems: list[dict[str, np.ndarray]] | None = None
        self.train: tuple[Tensor, Tensor] | None = None
        self.test: tuple[Tensor, Tensor, Tensor] | None = None

    def problem(self, r: int) -> dict[str, np.ndarray]:
        """Replica r's arrays (Z, y, w_star, Z_test, y_test; w_star NaN when unknown)."""
        if self._file is None:
            return sparse_problem(self.input_dim, self.k, self.n, self.n_test, self.z_mode, self.seed + r)
        f = dict(self._file)
        d = f["Z"].shape[1]
        if "Z_test" not in f and "w_star" in f:
            Zt = inputs(np.random.default_rng(self.seed), self.n_test, d, self.z_mode)
            f["Z_test"], f["y_test"] = Zt, Zt @ f["w_star"]
        elif "Z_test" not in f:
            m = max(1, int(round(self.holdout * f["Z"].shape[0])))
            if m >= f["Z"].shape[0]:
                raise ValueError(f"{self.path}: {f['Z'].shape[0]} row(s) are too few to hold out a test set "
                                 "(add Z_test/y_test or w_star)")  # fmt: skip
            order = np.random.default_rng(self.seed).permutation(f["Z"].shape[0])
            test, train = order[:m], order[m:]
            f["Z_test"], f["y_test"] = f["Z"][test], f["y"][test]
            f["Z"], f["y"] = f["Z"][train], f["y"][train]
        f.setdefault("w_star", np.full(d, np.nan))
        return f

    def setup(self, stage: str | None = None) -> None:
        """Build the replica problems once."""
        if self.problems is not None:
            return
        if self._file is not None and "Z_test" not in self._file:
            how = "labelled by its w_star" if "w_star" in self._file else f"a seeded {self.holdout:.0%} hold-out"
            say(f"{self.path}: no Z_test/y_test; the test set is {how}")
        self.problems = [self.problem(r) for r in range(self.n_replicas)]

        def stack(key: str) -> Tensor:
            return torch.from_numpy(np.stack([p[key] for p in self.problems]))

        self.train = (stack("Z"), stack("y"))
        self.test = (stack("Z_test"), stack("y_test"), stack("w_star"))

    def train_dataloader(self) -> DataLoader:
        """``batches_per_epoch`` copies of the full batch (Z, y)."""
        self.setup()
        return DataLoader(_Repeat(self.train, self.batches_per_epoch), batch_size=None, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        """One batch: the test set and w*."""
        self.setup()
        return DataLoader(_Repeat(self.test, 1), batch_size=None, num_workers=0)

    def test_dataloader(self) -> DataLoader:
        """The same batch as validation."""
        return self.val_dataloader()
