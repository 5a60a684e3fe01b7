"""The zoo's methods, discovered from their manifests (``zoo/<slug>/manifest.py``): strings only, nothing heavy.

Adding a method adds a package with a ``manifest.py``; nothing here is edited. ``METHODS`` and ``CLASSES`` keep the
shapes older code and users read (``slug -> {module, datamodule, paper, status, config}``, ``short name -> path``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from pathlib import Path
from typing import Any

from zoo.core.manifest import Manifest

#: The repository root: ``configs/`` and ``README.md`` live here.
ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def manifests() -> dict[str, Manifest]:
    """Every method's manifest by slug, in slug order (each ``zoo/<slug>/manifest.py`` defines ``MANIFEST``)."""
    import zoo

    found: dict[str, Manifest] = {}
    for info in sorted(pkgutil.iter_modules(zoo.__path__), key=lambda i: i.name):
        if not info.ispkg or info.name == "core" or importlib.util.find_spec(f"zoo.{info.name}.manifest") is None:
            continue
        manifest = getattr(importlib.import_module(f"zoo.{info.name}.manifest"), "MANIFEST", None)
        if not isinstance(manifest, Manifest):
            raise TypeError(f"zoo/{info.name}/manifest.py: expected `MANIFEST = Manifest(...)`")
        if manifest.slug != info.name:
            raise ValueError(f"zoo/{info.name}/manifest.py: slug={manifest.slug!r} differs from its package name")
        found[manifest.slug] = manifest
    return found


def short_names() -> dict[str, str]:
    """Short class name -> full class path over every manifest; a name two methods use is an error."""
    names: dict[str, str] = {}
    for manifest in manifests().values():
        for path in manifest.class_paths():
            short = path.rsplit(".", 1)[1]
            if names.get(short, path) != path:
                raise ValueError(f"short class name {short!r} is declared as {names[short]} and {path}")
            names[short] = path
    return names


def owners(class_path: str) -> list[Manifest]:
    """The manifests that declare ``class_path`` (a shared callback has several)."""
    return [m for m in manifests().values() if class_path in m.class_paths()]


def structure_rebuilders() -> dict[str, str]:
    """Checkpoint structure kind -> ``"module:function"``, over every manifest."""
    return {kind: target for m in manifests().values() for kind, target in m.structures.items()}


def __getattr__(name: str) -> Any:
    """``METHODS`` and ``CLASSES``, derived from the manifests on first use."""
    if name == "METHODS":
        keys = ("module", "datamodule", "paper", "status", "config")
        return {slug: {k: getattr(m, k) for k in keys} for slug, m in manifests().items()}
    if name == "CLASSES":
        return short_names()
    raise AttributeError(f"module 'zoo.core.registry' has no attribute {name!r}")


def markdown_table() -> str:
    """The README's table of methods (``zoo list --markdown``), one row per manifest."""
    lines = ["| slug | paper | module | status | real data |", "|---|---|---|---|---|"]
    for slug, m in manifests().items():
        status = f"{m.status}; {m.status_note}" if m.status_note else m.status
        summary = m.summary or f"`{m.module}`"
        lines.append(f"| [{slug}](zoo/{slug}/README.md) | {m.paper} | {summary} | {status} | {m.real_data} |")
    return "\n".join(lines)


def list_command(argv: list[str]) -> int:
    """``zoo list [--json | --markdown]``: the methods, their classes, papers and status."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="zoo list", description="List the zoo's methods.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print a JSON list of objects")
    group.add_argument("--markdown", action="store_true", help="print the README's table of methods")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    if args.markdown:
        print(markdown_table())
        return 0
    fields = ("module", "datamodule", "paper", "status")
    rows = [{"slug": slug, **{k: getattr(m, k) for k in fields}} for slug, m in manifests().items()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(f"{row['slug']:<16} {row['status']:<12} {row['module']}  {row['datamodule']}")
        print(f"{'':<16} {row['paper']}")
    return 0
