"""The card's synthetic K-answer task (``dco``, "Data"): one correct answer among K, random features, a linear head.

A fixed random teacher labels ``x ~ N(0, I_10)`` with ``y* = argmax(tanh(x W1) W2)`` (``W1`` 10x64, ``W2`` 64xK, entries
N(0, 1), K = 100). The student sees 300 fixed random ReLU features ``relu(x R)`` (``R`` 10x300, N(0, 1)/√10 entries),
standardised by the training mean and std. 600 training and 2000 test points; training is full-batch gradient descent,
so one Lightning step is the whole training set: the training loader yields that one batch ``steps_per_epoch`` times
(one epoch = the card's 6000 steps by default), without re-collating it.

Ours: a validation split (``n_val``, drawn after the test points, so train and test do not depend on it) on which the
early-stopped CE baseline is selected; the card's protocol has no validation set and never selects on test.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from datamodules.classification.kanswer_synthetic import kanswer_data
from zoo.core import checks
from zoo.core.datamodule import ZooDataModule


class _RepeatedBatch(Dataset):
    """The same full batch ``times`` times (``DataLoader(batch_size=None)`` hands it over as it is)."""

    def __init__(self, batch: dict[str, Tensor], times: int) -> None:
        self.batch, self.times = batch, times

    def __len__(self) -> int:
        return self.times

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return self.batch


class KAnswerDataModule(ZooDataModule):
    """Full-batch K-answer classification (card ``dco``, "Synthetic K-answer task").

    Args:
        seed: draws the teacher, the features and every split.
        n_train: training points (card: 600).
        n_test: test points (card: 2000).
        n_val: validation points (ours: the early-stopped CE baseline reads these only).
        input_dim: input dimension of ``x`` (card: 10).
        teacher_hidden: teacher width (card: 64).
        num_classes: ``K`` (card: 100).
        num_features: random ReLU features (card: 300), linked into the model's ``input_dim``.
        steps_per_epoch: full-batch steps per Lightning epoch (card: 6000 steps in all, so 1 epoch).
    """

    def __init__(self, seed: int = 0, n_train: int = 600, n_test: int = 2000, n_val: int = 500, input_dim: int = 10,
                 teacher_hidden: int = 64, num_classes: int = 100, num_features: int = 300,
                 steps_per_epoch: int = 6000) -> None:  # fmt: skip
        super().__init__()
        checks.integer(checks.data("seed"), seed, low=0)  # numpy's generators take no negative seed
        for name, value in (("n_train", n_train), ("n_test", n_test), ("n_val", n_val), ("input_dim", input_dim),
                            ("teacher_hidden", teacher_hidden), ("num_features", num_features),
                            ("steps_per_epoch", steps_per_epoch)):  # fmt: skip
            checks.integer(checks.data(name), value)
        checks.integer(checks.data("num_classes"), num_classes, low=2)
        self.seed, self.n_train, self.n_test, self.n_val = seed, n_train, n_test, n_val
        self.teacher_input_dim, self.teacher_hidden = input_dim, teacher_hidden
        self.num_classes, self.input_dim, self.steps_per_epoch = num_classes, num_features, steps_per_epoch
        self.splits: dict[str, dict[str, Tensor]] = {}

    def setup(self, stage: str | None = None) -> None:
        """Draw every split (once)."""
        if self.splits:
            return
        data = kanswer_data(self.seed, self.n_train, self.n_test, self.n_val, self.teacher_input_dim,
                            self.teacher_hidden, self.num_classes, self.input_dim)  # fmt: skip
        self.splits = {k: {"x": torch.from_numpy(x), "y": torch.from_numpy(y)} for k, (x, y) in data.items()}

    def split(self, name: str) -> dict[str, Tensor]:
        """One whole split as ``{"x": [n, num_features], "y": [n]}``."""
        if not self.splits:
            self.setup()
        if name not in self.splits:
            raise KeyError(f"KAnswerDataModule: unknown split {name!r}; known: {sorted(self.splits)}")
        return self.splits[name]

    def _full(self, name: str, times: int) -> DataLoader:
        return DataLoader(_RepeatedBatch(self.split(name), times), batch_size=None)

    def train_dataloader(self) -> DataLoader:
        """The whole training set, ``steps_per_epoch`` times (full-batch gradient descent)."""
        return self._full("train", self.steps_per_epoch)

    def val_dataloader(self) -> DataLoader:
        """The validation split as one batch."""
        return self._full("val", 1)

    def test_dataloader(self) -> DataLoader:
        """The test split as one batch."""
        return self._full("test", 1)

    def describe(self) -> dict[str, Any]:
        """Sizes and the label histogram's spread (a sanity line for logs)."""
        y = self.split("train")["y"]
        return {"n_train": self.n_train, "n_test": self.n_test, "classes_seen": int(y.unique().numel())}
