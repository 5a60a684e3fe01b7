"""A loader of one full batch per epoch, for full-batch methods (structure learning, BOPE stages, utility fits)."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, Dataset


class OneItem(Dataset):
    """A dataset of a single item (the whole batch)."""

    def __init__(self, item: Any) -> None:
        self.item = item

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> Any:
        return self.item


def one_batch_loader(batch: Any) -> DataLoader:
    """A ``DataLoader`` that yields ``batch`` unchanged once per epoch (no collation, no workers)."""
    return DataLoader(OneItem(batch), batch_size=None, num_workers=0)
