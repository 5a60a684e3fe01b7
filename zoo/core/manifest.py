"""What a method declares about itself: the ``MANIFEST`` of ``zoo/<slug>/manifest.py``.

A manifest holds strings only (class paths, file names, CLI overrides), so listing the zoo imports neither torch nor
lightning nor any method. Everything shared that used to be edited per method derives from the manifests: ``zoo
list``, the short class names of the CLI, the shape links, the config tests and their tiny overrides, the checkpoint
round trip and DDP smoke tests, the import-layering contracts, the optional-dependency check and the README's table of
methods (``zoo list --markdown``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Literal

#: A method's state in the README table.
Status = Literal["done", "in progress", "blocked", "specified"]


@dataclass(frozen=True)
class Manifest:
    """One method's declaration (strings only; see ``CONTRIBUTING.md``).

    Args:
        slug: the package name under ``zoo/`` and the folder under ``configs/`` (lowercase).
        paper: the paper's title and venue.
        module: class path of the main ``LightningModule`` (the one ``config`` trains).
        datamodule: class path of the main ``LightningDataModule``.
        config: the main job, relative to the repository root (``configs/<slug>/default.yaml``).
        status: ``done`` | ``in progress`` | ``blocked`` | ``specified``.
        status_note: the README status cell after the status word (claims, measured figures, what blocks it).
        summary: the README "module" cell: the classes a user runs and the baselines beside them.
        real_data: the README "real data" cell: formats read and the flags that point the method at them.
        modules: every other ``LightningModule`` class path of the method (baselines, second tracks).
        datamodules: every other datamodule class path it ships.
        callbacks: callback class paths it ships or relies on (shared callbacks included).
        extra: its optional-dependency group in ``pyproject.toml`` (``pip install -e ".[<extra>]"``), or ``None``.
        install_note: appended to the missing-extra error after the pip line, e.g. a Python version the group needs.
        evaluate: ``"module:function"`` of the method's evaluation tool on files, ``main(argv) -> exit code``, which
            ``zoo evaluate <slug> ARGS`` runs (``None``: the method has none).
        tiny: config file glob (matched on the file name) -> CLI overrides that make a config run in seconds in
            tests; every matching entry applies, in order.
        shapes: data -> model link names beyond :data:`zoo.core.datamodule.SHAPES` that its datamodules declare.
        structures: checkpoint structure kind -> ``"module:function"`` that rebuilds the changed network
            (``zoo.core.structure``).
        ddp: ``None`` when the main config is not gradient-trained; else the CLI flags the DDP smoke test (2 CPU
            processes) adds for it (``()`` for none).
        short: CLI overrides a short real run (the checkpoint round trip, the DDP smoke run) adds to ``tiny``, e.g. a
            shorter inner fit.
        dedicated_ddp_test: whether ``tests/<slug>/`` has its own stronger DDP test that CI runs (the smoke test's CI
            rotation then covers the other methods).
    """

    slug: str
    paper: str
    module: str
    datamodule: str
    config: str
    status: Status
    status_note: str = ""
    summary: str = ""
    real_data: str = ""
    modules: tuple[str, ...] = ()
    datamodules: tuple[str, ...] = ()
    callbacks: tuple[str, ...] = ()
    extra: str | None = None
    install_note: str = ""
    evaluate: str | None = None
    tiny: dict[str, tuple[str, ...]] = field(default_factory=dict)
    shapes: tuple[str, ...] = ()
    structures: dict[str, str] = field(default_factory=dict)
    ddp: tuple[str, ...] | None = None
    short: tuple[str, ...] = ()
    dedicated_ddp_test: bool = False

    def __post_init__(self) -> None:
        if not self.slug.isidentifier() or self.slug != self.slug.lower():
            raise ValueError(f"manifest slug={self.slug!r}: expected a lowercase Python identifier")
        for path in self.class_paths():
            if path.count(".") < 1 or not all(part.isidentifier() for part in path.split(".")):
                raise ValueError(f"manifest {self.slug}: {path!r} is not a dotted class path")
        if not self.config.startswith(f"configs/{self.slug}/"):
            raise ValueError(f"manifest {self.slug}: config={self.config!r} must live under configs/{self.slug}/")

    def class_paths(self) -> tuple[str, ...]:
        """Every class path the method declares: modules, datamodules and callbacks, the main ones first."""
        return (self.module, *self.modules, self.datamodule, *self.datamodules, *self.callbacks)

    def tiny_overrides(self, config: str) -> list[str]:
        """The test overrides for ``config`` (a path or file name): every ``tiny`` entry whose glob matches."""
        name = config.replace("\\", "/").rsplit("/", 1)[-1]
        return [flag for pattern, flags in self.tiny.items() if fnmatch.fnmatch(name, pattern) for flag in flags]
