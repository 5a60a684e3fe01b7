"""The phased (original / retrain / unlearn) datamodule base shared by the unlearning datamodules."""

from __future__ import annotations

import copy
from typing import Literal

from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler, TensorDataset

from zoo.core.datamodule import ZooDataModule

Phase = Literal["original", "retrain", "unlearn"]


class PhasedDataModule(ZooDataModule):
    """Datamodule whose ``train_dataloader`` serves a ``phase``: ``original``, ``retrain`` or ``unlearn``."""

    #: The phase :meth:`train_dataloader` serves.
    phase: Phase = "unlearn"

    def with_phase(self, phase: Phase) -> PhasedDataModule:
        """The same data serving ``phase`` (the callback trains the original and the oracle with it)."""
        other = copy.copy(self)
        other.phase = phase
        other.trainer = None
        return other

    def retrain_oracle(self) -> PhasedDataModule:
        """The datamodule of the Retrain oracle: the original recipe on the retain data only."""
        return self.with_phase("retrain")


def batched_loader(
    dataset: TensorDataset, batch_size: int, shuffle: bool = False, sampler: Sampler | None = None
) -> DataLoader:
    """A loader that indexes the tensors once per batch (no per-sample collation; about 4x faster for tiny nets)."""
    if sampler is None:
        sampler = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
    return DataLoader(dataset, batch_size=None, sampler=BatchSampler(sampler, batch_size, drop_last=False))
