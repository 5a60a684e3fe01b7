"""Pretraining windows over the synthetic corpus and the per-epoch seeded window sampler."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from datamodules.timeseries.windows import gather_windows


class CorpusWindows(Dataset):
    """Windows of length L + H over corpus rows, addressed by flat ids ``series * n_starts + start``.

    With ``flat=None`` index i is the flat id itself (the training set, sampled by :class:`EpochWindowSampler`);
    otherwise index i maps to ``flat[i]`` (the fixed validation windows).

    Args:
        series: float32 (N, T) corpus tensor.
        n_starts: valid starts per series (T - L - H + 1).
        L: context length.
        H: horizon.
        first_series: series id of flat id 0.
        n_series: series covered.
        flat: optional int64 fixed flat ids.
    """

    def __init__(
        self,
        series: torch.Tensor,
        n_starts: int,
        L: int,
        H: int,
        first_series: int,
        n_series: int,
        flat: np.ndarray | None = None,
    ) -> None:
        self.series, self.n_starts, self.L, self.H = series, n_starts, L, H
        self.first_series, self.n_series = first_series, n_series
        self.flat = None if flat is None else torch.as_tensor(flat, dtype=torch.int64)

    def __len__(self) -> int:
        return self.n_series * self.n_starts if self.flat is None else len(self.flat)

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        if self.flat is not None:
            idx = self.flat[idx]
        rel = torch.div(idx, self.n_starts, rounding_mode="floor")
        start = idx - rel * self.n_starts
        channel = rel + self.first_series
        x, y = gather_windows(self.series, channel, start, self.L, self.H)
        return {"x": x, "y": y, "channel": channel, "start": start}

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}


class EpochWindowSampler(Sampler[int]):
    """``num_samples`` uniform window ids (with replacement) drawn from ``(seed, epoch)``.

    The same seed gives the same windows for an epoch; every epoch gets a fresh set. Lightning calls
    :meth:`set_epoch` before each epoch.

    Args:
        n: number of window ids.
        num_samples: windows per epoch.
        seed: base seed.
    """

    def __init__(self, n: int, num_samples: int, seed: int) -> None:
        self.n, self.num_samples, self.seed, self.epoch = n, num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's windows."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, 0x7E, self.epoch])
        return iter(rng.integers(0, self.n, self.num_samples).tolist())
