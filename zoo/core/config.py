"""Saving the resolved config into the run's own directory (never ``./config.yaml``)."""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger


def run_dir(trainer: Trainer, log_dir: str | None = None) -> str:
    """The run's own directory: the W&B run folder under ``WandbLogger``, else ``trainer.log_dir``.

    The W&B run folder is the parent of ``experiment.dir`` (``files/``, where W&B writes its own ``config.yaml``).
    """
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            return os.path.dirname(os.path.normpath(str(logger.experiment.dir)))
    return str(log_dir or trainer.log_dir or trainer.default_root_dir)


class RunDirSaveConfig(SaveConfigCallback):
    """Write the resolved config as ``config.yaml`` into the run directory and into the W&B run config.

    The stock callback writes ``./config.yaml`` under ``WandbLogger`` and a second run then fails (torchgeo #1621,
    Lightning #17168); every run here has its own directory, so nothing collides.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Read ``trainer.log_dir`` on every rank first: it broadcasts, and ``save_config`` runs on rank 0 only."""
        self._log_dir = trainer.log_dir
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Dump ``self.config`` into the run directory and update ``experiment.config`` when W&B is on."""
        directory = run_dir(trainer, getattr(self, "_log_dir", None))
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, self.config_filename)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(self.parser.dump(self.config, skip_none=False))
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                config: Any = self.config.clone().as_dict()
                config.pop("config", None)
                logger.experiment.config.update(_flatten(config), allow_val_change=True)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts into ``a/b/c`` keys with primitive values (W&B's config table)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}/"))
        elif isinstance(value, int | float | str | bool) or value is None:
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat
