"""The ``zoo`` command: LightningCLI in subclass mode, plus the zoo's own ``list`` and ``reproduce`` verbs.

Everything method-specific comes from the manifests (``zoo.core.registry``): short class names, shape links, the
optional dependencies a config needs. A ``pretrained`` recipe (a ``.yaml``) is trained here, before the module is
built, never inside a constructor.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn

from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

import zoo
from zoo.core.config import RunDirSaveConfig, assign_run_folder, checkpoints_into_run_folder, write_metrics
from zoo.core.datamodule import ZooDataModule, shape_names
from zoo.core.messages import is_global_zero, parse_error_line, say
from zoo.core.module import ZooModule
from zoo.core.pretrained import find_source, is_recipe, recipe_cache_path
from zoo.core.registry import manifests, owners, short_names
from zoo.core.rng import preserved_rng

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
#: Trainer callbacks whose ``monitor: auto`` means the module's :attr:`ZooModule.monitor` and ``mode``.
_MONITORED = ("ModelCheckpoint", "EarlyStopping")


#: Known-harmless third-party notices every run printed (issue #19), dropped by message, never by blanket filter: no
#: TensorBoard (the zoo logs to CSV or W&B), a torch-internal deprecation inside Lightning, the optimizer-free steps
#: of training-free methods, streaming datasets with ``num_workers=0``, LightningCLI's in-process ``args`` notice.
NOISE_WARNINGS = (
    r"Starting from v1\.9\.0, `tensorboardX` has been removed",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    r"`LightningModule\.configure_optimizers` returned `None`, this fit will run with no optimizer",
    r"Your `IterableDataset` has `__len__` defined",
    r"LightningCLI's args parameter is intended to run from within Python",
)
#: Log lines of Lightning's that advertise other products, and the loggers that emit them (``rank_zero_info``).
NOISE_LOGS = ("💡 Tip:",)
NOISE_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(NOISE_LOGS)


def quiet_known_noise() -> None:
    """Drop :data:`NOISE_WARNINGS` and :data:`NOISE_LOGS`; every other warning and log line stays."""
    for pattern in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    for name in NOISE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise())


class ZooArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors are one line, ``zoo: error: <option>=<value>: <expectation>``, exit code 2.

    jsonargparse prints the usage of every flag and a nested report (the real problem second to last);
    ``ZOO_DEBUG=1`` keeps that full report.
    """

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """Print the condensed message and exit 2.

        jsonargparse's own handling stays under ``ZOO_DEBUG=1``, or when an error handler or ``exit_on_error=False``
        asks for an exception.
        """
        if os.environ.get("ZOO_DEBUG") == "1" or not self.exit_on_error or callable(self._error_handler):
            super().error(message, ex)
        print(f"zoo: error: {parse_error_line(message)}", file=sys.stderr)
        self.exit(2)


class ZooCLI(LightningCLI):
    """LightningCLI over :class:`ZooModule` and :class:`ZooDataModule`; shapes come from the data."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Link the datamodule's shape attributes into the model (a model never asks which dataset it is on)."""
        for name in shape_names():
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")
        parser.add_argument(
            "--threads",
            type=int | None,
            default=None,
            help="torch intra-op threads (None: torch's default). Tiny models on 2 cores ran about 6x faster with 1.",
        )

    def before_instantiate_classes(self) -> None:
        """Prepare the parsed config before anything is built.

        Gives a subcommand's run its folder (:func:`zoo.core.config.assign_run_folder`), applies ``--threads``,
        drops listed progress bars when ``enable_progress_bar`` is false, resolves ``monitor: auto`` of
        checkpoint/early-stopping callbacks to the module's metric, and trains a ``pretrained`` recipe that is not
        cached.
        """
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        if config is None:
            return
        if self.subcommand and config.get("trainer") is not None:
            say(f"run folder: {assign_run_folder(config, self.subcommand)}")
        if config.get("threads") is not None:
            import torch

            torch.set_num_threads(int(config["threads"]))
        trainer = config.get("trainer")
        if trainer is not None:
            _default_monitors(trainer, config.get("model"))
            if trainer.get("enable_progress_bar", True) is False:
                callbacks = trainer.get("callbacks") or []
                trainer["callbacks"] = [c for c in callbacks if "ProgressBar" not in str(getattr(c, "class_path", c))]
        _resolve_recipe(config)

    def instantiate_classes(self) -> None:
        """Build the classes, then point checkpoints and the saved config into the run folder.

        The config is saved also under ``fast_dev_run`` (LightningCLI skips it then; a smoke run's folder should say
        what ran).
        """
        super().instantiate_classes()
        if self.subcommand:
            checkpoints_into_run_folder(self.trainer)
            if self.trainer.fast_dev_run and not any(isinstance(c, RunDirSaveConfig) for c in self.trainer.callbacks):
                config = self.config.get(self.subcommand, self.config)
                saver = RunDirSaveConfig(self._parser(self.subcommand), config, **self.save_config_kwargs)
                self.trainer.callbacks.append(saver)

    def after_fit(self) -> None:
        """Print the final logged metrics, so the main job shows what it achieved, and keep them in the run folder."""
        name = f"{getattr(self.model, 'name', 'zoo')} ({type(self.model).__name__})"
        print_metrics(self.trainer.callback_metrics, header=f"zoo fit: {name} metrics")
        write_metrics(self.trainer)

    def after_validate(self) -> None:
        """Keep the validation metrics in the run folder."""
        write_metrics(self.trainer)

    def after_test(self) -> None:
        """Keep the test metrics in the run folder."""
        write_metrics(self.trainer)


def _default_monitors(trainer: Any, model: Any) -> None:
    """Resolve ``monitor: auto`` of listed ModelCheckpoint/EarlyStopping callbacks to the module's metric and mode.

    A callback without ``monitor`` keeps Lightning's meaning (ModelCheckpoint keeps the last epoch); ``auto`` asks for
    the module class's :attr:`ZooModule.monitor` and :attr:`ZooModule.mode`.
    """
    callbacks = [c for c in trainer.get("callbacks") or [] if getattr(c, "init_args", None) is not None]
    auto = [c for c in callbacks if getattr(c, "class_path", "").rsplit(".", 1)[-1] in _MONITORED
            and c.init_args.get("monitor") == "auto"]  # fmt: skip
    if not auto:
        return
    cls = _import_class(getattr(model, "class_path", "") or "") if model is not None else None
    if cls is None or not issubclass(cls, ZooModule):
        raise ValueError(f"monitor: auto needs a zoo module class, found model.class_path={model!r}")
    for callback in auto:
        callback.init_args["monitor"], callback.init_args["mode"] = cls.monitor, cls.mode


def _import_class(class_path: str) -> type | None:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _resolve_recipe(config: Any) -> None:
    """Train a ``model.init_args.pretrained`` recipe once (announced), so the constructor only loads a file.

    Under ``fast_dev_run`` an uncached recipe is smoke-run for one batch into the run's folder instead (its untrained
    weights are used and never cached), so a smoke run never starts minutes of hidden work.
    """
    model = config.get("model")
    args = getattr(model, "init_args", None) if model is not None else None
    source = args.get("pretrained") if args is not None else None
    if not isinstance(source, str) or not is_recipe(source):
        return
    cached = recipe_cache_path(source)
    if cached.exists():
        say(f"pretrained={source}: the recipe's cached checkpoint {cached}")
        return
    trainer = config.get("trainer") or {}
    if trainer.get("fast_dev_run"):
        root = Path(trainer.get("default_root_dir") or ".") / "recipe_smoke"
        say(f"pretrained={source}: not trained yet; fast_dev_run smoke-runs the recipe for one batch (untrained "
             f"weights, not cached) into {root}")  # fmt: skip
        args["pretrained"] = str(train_recipe(source, smoke_root=root))
        return
    train_recipe(source)


def train_recipe(recipe: str | Path, smoke_root: str | Path | None = None) -> Path:
    """The checkpoint a training recipe produces: ``zoo fit -c <recipe>`` run once in-process, then cached.

    The cache key is the recipe's text (``$ZOO_CACHE/pretrained/<stem>-<sha256[:16]>.ckpt``); the file is written
    then renamed, so parallel jobs never read a partial one. Global RNG states and the torch thread count are
    restored afterwards, so the calling run is the same whether the checkpoint was cached or not.

    Args:
        recipe: a zoo YAML config (e.g. ``configs/prune_finetune/pretrain.yaml``).
        smoke_root: run the recipe with ``fast_dev_run`` into this folder and return its checkpoint uncached.

    Returns:
        Path of the Lightning checkpoint (the weights at the end of the fit).
    """
    path, out = find_source(str(recipe)), recipe_cache_path(recipe)
    if smoke_root is None and out.exists():
        return out
    args = ["-c", str(path), "--trainer.logger=false", "--trainer.enable_model_summary=false"]
    if smoke_root is not None:
        Path(smoke_root).mkdir(parents=True, exist_ok=True)
        with preserved_rng():
            cli = main([*args, "--trainer.fast_dev_run=1", f"--trainer.default_root_dir={smoke_root}"], run=False)
            cli.trainer.fit(cli.model, datamodule=cli.datamodule)
            target = Path(smoke_root) / f"{path.stem}-smoke.ckpt"
            cli.trainer.save_checkpoint(target)
        return target
    with preserved_rng(), tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        cli = main([*args, f"--trainer.default_root_dir={tmp}"], run=False)
        limits = {k: cli.trainer.max_epochs if k == "max_epochs" else cli.trainer.max_steps
                  for k in ("max_epochs", "max_steps")}  # fmt: skip
        say(f"pretrained={recipe}: training the recipe once: {type(cli.model).__name__} on "
             f"{type(cli.datamodule).__name__}, max_epochs={limits['max_epochs']}, max_steps={limits['max_steps']} "
             f"(minutes on 2 CPU cores); caching {out}")  # fmt: skip
        start = time.perf_counter()
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        part = Path(tmp) / "last.ckpt"
        cli.trainer.save_checkpoint(part)
        os.replace(part, out)
    say(f"pretrained={recipe}: trained in {time.perf_counter() - start:.0f} s; cached {out}")
    return out


def print_metrics(metrics: dict, header: str) -> None:
    """Print ``metrics`` (name -> scalar tensor or number) as an aligned two-column table."""
    rows = sorted((k, float(v)) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1)
    if not rows or not is_global_zero():
        return
    width = max(len(k) for k, _ in rows)
    print(header)
    for key, value in rows:
        print(f"  {key:<{width}}  {value:.4f}")


def _config_texts(argv: list[str]) -> list[tuple[str, str]]:
    """``(where, text)`` for the command line and each config file it names."""
    texts = [("the command line", " ".join(argv))]
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg in ("-c", "--config") and i + 1 < len(argv) else None
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        if path is not None:
            texts.append((path, _read(path)))
    return texts


def _import_named_classes(texts: list[tuple[str, str]]) -> None:
    """Import the modules of short class names used in ``argv`` or its config files (lazy, name-only imports)."""
    words, names = {w for _, text in texts for w in _WORD.findall(text)}, short_names()
    for short in words & names.keys():
        importlib.import_module(names[short].rsplit(".", 1)[0])


def missing_extras(texts: list[tuple[str, str]]) -> list[str]:
    """One line per method a config uses whose optional dependencies are not installed, with the pip command.

    A class several methods declare (a shared callback) counts for the method whose own classes the config names.
    """
    words, names = {(where, w) for where, text in texts for w in _DOTTED.findall(text)}, short_names()
    found = {names.get(w, w): where for where, w in words}
    owned = {path: owners(path) for path in sorted(found)}
    sole = {ms[0].slug for ms in owned.values() if len(ms) == 1}
    problems: dict[str, str] = {}
    for path, manifests_ in sorted(owned.items(), key=lambda item: (len(item[1]) > 1, item[0])):
        for manifest in [m for m in manifests_ if m.slug in sole] or manifests_:
            if manifest.extra is None or manifest.slug in problems:
                continue
            if absent := _absent_requirements(manifest.extra):
                problems[manifest.slug] = (
                    f"{found[path]}: {path} belongs to `{manifest.slug}`, whose optional dependencies are not "
                    f'installed ({", ".join(absent)}); run: pip install -e ".[{manifest.extra}]"'
                    + (f" ({manifest.install_note})" if manifest.install_note else "")
                )
    return list(problems.values())


def _absent_requirements(extra: str) -> list[str]:
    """Requirements of the installed ``zoo`` distribution's ``extra`` that are not installed (empty if unknown)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        requires = metadata.requires("zoo") or []
    except metadata.PackageNotFoundError:  # running from a source tree without an install
        return []
    absent = []
    for line in requires:
        req = Requirement(line)
        if req.marker is None or not req.marker.evaluate({"extra": extra}) or req.name == "zoo":
            continue
        try:
            metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            absent.append(req.name)
    return absent


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def main(args: ArgsType = None, run: bool = True) -> ZooCLI | int | None:
    """Entry point of ``zoo`` and ``python -m zoo``.

    Args:
        args: command-line arguments (``sys.argv[1:]`` when ``None``).
        run: run the subcommand (``False`` only parses and instantiates, as in tests).
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] in (["reproduce"], ["list"]):  # our verbs, dispatched before the CLI is built
        code = _verb(argv)
        if args is None:
            sys.exit(code)
        return code
    texts = _config_texts(argv)
    if problems := missing_extras(texts):
        print("\n".join(f"zoo: {p}" for p in problems), file=sys.stderr)
        if args is None:
            sys.exit(2)
        return 2
    _import_named_classes(texts)
    quiet_known_noise()
    try:
        return ZooCLI(
            ZooModule,
            ZooDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            seed_everything_default=0,
            auto_configure_optimizers=False,
            save_config_callback=RunDirSaveConfig,
            save_config_kwargs={"save_to_log_dir": False, "overwrite": True},
            parser_kwargs={"version": zoo.__version__},
            parser_class=ZooArgumentParser,
            args=args,
            run=run,
        )
    finally:
        _destroy_process_group()


def _verb(argv: list[str]) -> int:
    """``zoo list`` (the registry) or ``zoo reproduce`` (the reproduction harness)."""
    if argv[0] == "list":
        from zoo.core.registry import list_command

        return list_command(argv[1:])
    from zoo.core.reproduce import dispatch

    return dispatch(argv)


def _destroy_process_group() -> None:
    """Tear down the process group a ``ddp`` run left behind (Lightning does not).

    Without it, gloo's worker threads are still joinable at interpreter exit and the process aborts with "terminate
    called without an active exception" (exit -6) after a fit that succeeded, intermittently and on every rank.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["ZooCLI", "main", "manifests", "missing_extras", "print_metrics", "train_recipe"]
