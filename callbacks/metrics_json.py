"""Write the final logged metrics of every process to JSON (for scripts, sweeps and DDP checks)."""

from __future__ import annotations

import json
import os

from lightning.pytorch import Callback, LightningModule, Trainer

from zoo.core.config import run_dir


class MetricsJSON(Callback):
    """Dump ``trainer.callback_metrics`` after fit, validate and test, one file per global rank.

    Args:
        dirpath: output folder; ``None`` means the run folder (:func:`zoo.core.config.run_dir`).
        filename: file name; ``{rank}`` is replaced by the global rank.
        weights: also write ``weights_sum``, the float64 sum of every parameter (equal on every DDP rank when the
            gradients were all-reduced).
    """

    def __init__(
        self, dirpath: str | None = None, filename: str = "metrics_rank{rank}.json", weights: bool = False
    ) -> None:
        self.dirpath, self.filename, self.weights = dirpath, filename, weights

    def _dump(self, trainer: Trainer) -> None:
        folder = self.dirpath or run_dir(trainer)
        os.makedirs(folder, exist_ok=True)
        values = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        blob = {"rank": trainer.global_rank, "world_size": trainer.world_size, "metrics": values}
        if self.weights and trainer.lightning_module is not None:
            params = trainer.lightning_module.parameters()
            blob["weights_sum"] = float(sum(p.detach().double().sum() for p in params))
        path = os.path.join(folder, self.filename.format(rank=trainer.global_rank))
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(blob, handle)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Write after fit."""
        self._dump(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Write after a standalone validate."""
        if not trainer.training and trainer.state.fn == "validate":
            self._dump(trainer)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Write after test."""
        self._dump(trainer)
