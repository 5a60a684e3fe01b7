"""The run folder: one folder per run holding its config, checkpoints, metrics, logger files and method artefacts.

``zoo fit``/``validate``/``test``/``predict`` without ``--trainer.default_root_dir`` runs in a fresh
``runs/<slug>/<YYYYmmdd-HHMMSS>[-N]`` (:func:`assign_run_folder`); with it, that folder is the run folder. Every method
artefact (``unlearning.json``, ``backdoor_eval.json``, ``moecap_*.json``, ``prune_finetune.json``, ...) is written to
:func:`run_dir`, the resolved config to ``<run>/config.yaml``, checkpoints to ``<run>/checkpoints``, the final
metrics to ``<run>/metrics.json``, and a logger left without ``save_dir`` (W&B, TensorBoard, CSV) writes inside it.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger

from zoo.core.messages import say

#: Environment variable through which DDP ranks launched by Lightning inherit rank 0's run folder.
RUN_DIR_ENV = "ZOO_RUN_DIR"
#: Logger classes whose ``save_dir`` the CLI points into the run folder when the config leaves it unset.
_FOLDER_LOGGERS = ("WandbLogger", "TensorBoardLogger", "CSVLogger", "MLFlowLogger", "CometLogger", "NeptuneLogger")


def run_dir(trainer: Trainer) -> str:
    """The run folder, ``trainer.default_root_dir`` (``zoo`` sets it per run; the same on every DDP rank)."""
    return str(trainer.default_root_dir)


def assign_run_folder(config: Any, subcommand: str) -> str:
    """Give the parsed ``config`` its run folder and point checkpoint-free loggers into it; returns the folder.

    An explicit ``trainer.default_root_dir`` is the run folder as given. Otherwise a new ``runs/<slug>/<date-time>``
    is created (``-1``, ``-2``, ... when taken; ``-<subcommand>`` for validate/test/predict). DDP ranks that
    Lightning launches inherit it through ``$ZOO_RUN_DIR``; a scheduler's job id (``SLURM_JOB_ID``,
    ``TORCHELASTIC_RUN_ID``) names the folder so independently started ranks agree.
    """
    trainer = config.get("trainer")
    folder = trainer.get("default_root_dir")
    child = os.environ.get("LOCAL_RANK", "0") != "0" or os.environ.get("NODE_RANK", "0") != "0"
    if not folder and child and os.environ.get(RUN_DIR_ENV):
        folder = trainer["default_root_dir"] = os.environ[RUN_DIR_ENV]
    elif not folder:
        class_path = str(getattr(config.get("model"), "class_path", "") or "")
        parts = class_path.split(".")
        slug = parts[1] if len(parts) > 2 and parts[0] == "zoo" else "run"
        job = os.environ.get("SLURM_JOB_ID") or os.environ.get("TORCHELASTIC_RUN_ID", "").replace("none", "")
        stem = f"job{job}" if job else time.strftime("%Y%m%d-%H%M%S")
        stem += "" if subcommand == "fit" else f"-{subcommand}"
        folder = _fresh_folder(Path("runs") / slug, stem, reuse=bool(job))
        trainer["default_root_dir"] = folder
    if not child and (Path(folder) / "config.yaml").is_file():  # an explicit or a job-named folder reused
        say(f"run folder {folder} already holds a run (config.yaml); its files are overwritten (leave "
            "--trainer.default_root_dir unset for a fresh runs/<slug>/<date-time>)")  # fmt: skip
    os.environ[RUN_DIR_ENV] = str(folder)
    for logger in _logger_configs(trainer.get("logger")):
        if logger.init_args.get("save_dir") in (None, ""):
            logger.init_args["save_dir"] = str(folder)
    return str(folder)


def _fresh_folder(parent: Path, stem: str, reuse: bool) -> str:
    """Create ``parent/stem`` (or ``stem-1``, ``stem-2``, ... when taken) exclusively, so parallel runs never share."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(10_000):
        path = parent / (stem if n == 0 else f"{stem}-{n}")
        try:
            path.mkdir(exist_ok=reuse)
            return str(path)
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run folder under {parent}")


def _logger_configs(logger: Any) -> list[Any]:
    """The listed logger configs (``class_path``/``init_args``) of a folder-writing logger class."""
    items = logger if isinstance(logger, list) else [logger]
    return [item for item in items
            if getattr(item, "init_args", None) is not None
            and str(getattr(item, "class_path", "")).rsplit(".", 1)[-1] in _FOLDER_LOGGERS]  # fmt: skip


def checkpoints_into_run_folder(trainer: Trainer) -> None:
    """Checkpoint callbacks without a ``dirpath`` save to ``<run>/checkpoints`` whatever the logger."""
    for callback in trainer.checkpoint_callbacks:
        if callback.dirpath is None:
            callback.dirpath = os.path.join(run_dir(trainer), "checkpoints")


def write_metrics(trainer: Trainer, name: str = "metrics.json") -> Path | None:
    """Write the final ``callback_metrics`` (numbers only) as ``<run>/<name>`` on global rank 0."""
    if not trainer.is_global_zero:
        return None
    metrics = {}
    for key, value in sorted(trainer.callback_metrics.items()):
        number = float(value.item() if hasattr(value, "item") else value)
        metrics[key] = number if math.isfinite(number) else str(number)
    path = Path(run_dir(trainer)) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
    return path


class RunDirSaveConfig(SaveConfigCallback):
    """Write the resolved config as ``config.yaml`` into the run folder and into the W&B run config.

    The stock callback writes ``./config.yaml`` under ``WandbLogger`` and a second run then fails (torchgeo #1621,
    Lightning #17168); every run here has its own folder, so nothing collides.
    """

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Dump ``self.config`` into the run folder and update ``experiment.config`` when W&B is on."""
        directory = run_dir(trainer)
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
