"""The pretraining datamodule of the tiny time-series foundation model (prune_finetune)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader

from datamodules.timeseries.corpus_windows import CorpusWindows, EpochWindowSampler
from datamodules.timeseries.synthetic_corpus import make_corpus
from datamodules.timeseries.windows import collate_windows
from zoo.core import ZooDataModule, checks


class TSFMPretrainDataModule(ZooDataModule):
    """Random ``(series, start)`` windows of the synthetic corpus for TSFM pretraining (raw values, not scaled).

    Batches match :class:`datamodules.timeseries.ltsf_datamodule.LTSFDataModule`: ``x`` float32 (B, L), ``y`` float32
    (B, H), ``channel`` int64 (B,) (the corpus series index) and ``start`` int64 (B,). Values are raw: the model
    (PatchTST with ``scaling="std"``) normalises each window itself. The last ``val_series`` series are held out;
    validation uses ``val_windows`` fixed windows of them.

    Args:
        num_series: corpus size N.
        length: series length T (>= L + H).
        seed: corpus seed, also the seed of the window draws.
        context_length: L.
        horizon: H.
        batch_size: windows per batch (training and validation).
        steps_per_epoch: training batches per epoch (a fresh seeded set of windows each epoch).
        val_series: held-out series at the end of the corpus.
        val_windows: fixed validation windows drawn from the held-out series.
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        num_series: int = 4096,
        length: int = 512,
        seed: int = 0,
        context_length: int = 336,
        horizon: int = 96,
        batch_size: int = 64,
        steps_per_epoch: int = 500,
        val_series: int = 128,
        val_windows: int = 512,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        checks.integer(checks.data("num_series"), num_series, low=2)
        checks.integer(checks.data("context_length"), context_length)
        checks.integer(checks.data("horizon"), horizon)
        if not (isinstance(length, int) and length >= context_length + horizon):
            checks.fail(checks.data("length"), length, f"an integer >= context_length + horizon = "
                        f"{context_length + horizon}")  # fmt: skip
        checks.integer(checks.data("val_series"), val_series, 1, num_series - 1)
        for name, value in (("val_windows", val_windows), ("batch_size", batch_size),
                            ("steps_per_epoch", steps_per_epoch)):  # fmt: skip
            checks.integer(checks.data(name), value)
        checks.integer(checks.data("num_workers"), num_workers, low=0)
        checks.integer(checks.data("seed"), seed, low=0)  # numpy's generators take no negative seed
        self.num_series, self.length, self.seed = num_series, length, seed
        self.context_length, self.horizon = context_length, horizon
        self.batch_size, self.steps_per_epoch = batch_size, steps_per_epoch
        self.val_series, self.val_windows, self.num_workers = val_series, val_windows, num_workers
        #: Starts per series, ``length - L - H + 1``.
        self.n_starts = length - context_length - horizon + 1
        #: Training series ``[0, num_series - val_series)``.
        self.n_train_series = num_series - val_series
        #: The corpus tensor float32 (N, T), after :meth:`setup`.
        self.corpus: torch.Tensor | None = None
        self.train_dataset: CorpusWindows | None = None
        self.val_dataset: CorpusWindows | None = None

    def setup(self, stage: str | None = None) -> None:
        """Load (or generate and cache) the corpus once and fix the validation windows.

        Args:
            stage: Lightning stage (unused).
        """
        if self.corpus is not None:
            return
        self.corpus = torch.from_numpy(make_corpus(self.num_series, self.length, self.seed))
        L, H = self.context_length, self.horizon
        self.train_dataset = CorpusWindows(self.corpus, self.n_starts, L, H, 0, self.n_train_series)
        rng = np.random.default_rng([self.seed, 0x7F])
        flat = rng.integers(0, self.val_series * self.n_starts, self.val_windows)
        self.val_dataset = CorpusWindows(self.corpus, self.n_starts, L, H, self.n_train_series, self.val_series, flat)

    def train_dataloader(self) -> DataLoader:
        """``steps_per_epoch`` batches of uniform (series, start) windows drawn from ``(seed, epoch)``."""
        self.setup()
        sampler = EpochWindowSampler(len(self.train_dataset), self.steps_per_epoch * self.batch_size, self.seed)
        return DataLoader(
            self.train_dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            collate_fn=collate_windows,
            num_workers=self.num_workers,
            pin_memory=False,
        )

    def val_dataloader(self) -> DataLoader:
        """The fixed validation windows of the held-out series, in draw order."""
        self.setup()
        return DataLoader(
            self.val_dataset,
            batch_size=self.batch_size,
            collate_fn=collate_windows,
            num_workers=self.num_workers,
            pin_memory=False,
        )
