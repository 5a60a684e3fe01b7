"""Sliding (lookback, horizon) windows over a normalised series: gather, dataset and collate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate


def gather_windows(
    series: torch.Tensor, channel: torch.Tensor, start: torch.Tensor, L: int, H: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x = series[c, s:s+L]``, ``y = series[c, s+L:s+L+H]`` for a whole batch in one advanced-indexing gather.

    Args:
        series: float32 (C, n) contiguous.
        channel: int64 (B,) row of ``series``.
        start: int64 (B,) first column of each window.
        L: context length.
        H: horizon.

    Returns:
        ``x`` float32 (B, L) and ``y`` float32 (B, H) (fresh tensors, not views).
    """
    windows = series.unfold(1, L + H, 1)[channel, start]  # a view of (C, n-L-H+1, L+H), gathered to (B, L+H)
    return windows[:, :L], windows[:, L:]


class WindowDataset(Dataset):
    """Channel-independent forecasting windows of one split, addressed by index arithmetic (nothing materialised).

    Window ``i`` is channel ``i // per_channel`` and start ``first + (i % per_channel) * stride``.
    ``dataset[i]`` gives one window; ``dataset.__getitems__(indices)`` (what the DataLoader fetcher calls) gathers a
    whole batch at once, and :func:`collate_windows` passes it through.

    Args:
        series: float32 (C, n) normalised series (shared, not copied).
        first: first start row of the split.
        per_channel: windows per channel.
        stride: rows between consecutive starts.
        L: context length.
        H: horizon.
    """

    def __init__(self, series: torch.Tensor, first: int, per_channel: int, stride: int, L: int, H: int) -> None:
        self.series, self.first, self.per_channel, self.stride = series, first, per_channel, stride
        self.L, self.H = L, H

    def __len__(self) -> int:
        return self.series.shape[0] * self.per_channel

    def locate(self, index: np.ndarray | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(channel, start)`` int64 tensors of window indices."""
        idx = torch.as_tensor(np.asarray(index, dtype=np.int64))
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            raise IndexError(f"WindowDataset: index outside [0, {len(self)})")
        channel = torch.div(idx, self.per_channel, rounding_mode="floor")
        return channel, self.first + (idx - channel * self.per_channel) * self.stride

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        channel, start = self.locate(indices)
        x, y = gather_windows(self.series, channel, start, self.L, self.H)
        return {"x": x, "y": y, "channel": channel, "start": start}

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}


def collate_windows(batch: Any) -> dict[str, torch.Tensor]:
    """Pass a batch gathered by ``__getitems__`` through; stack a list of single windows otherwise."""
    return batch if isinstance(batch, dict) else default_collate(batch)
