"""The import layering, checked by import-linter over contracts generated from the manifests.

Layers, top to bottom: ``zoo.cli``/``zoo.launcher``; the method packages ``zoo.<slug>`` (independent of each other,
directly or through a shared datamodule or callback); ``datamodules`` and ``callbacks`` (which never import a method's
Lightning module or protocol); ``zoo.core`` (which imports nothing above it). A new method is covered by its manifest.
Run by hand: ``pytest tests/test_layering.py`` (the failure prints import-linter's report and the contracts).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from zoo.core.registry import manifests


def contracts() -> str:
    """The import-linter configuration (INI) for the zoo as its manifests declare it."""
    methods = [f"zoo.{slug}" for slug in manifests()]
    lightning = [f"zoo.{slug}.{part}" for slug in manifests() for part in ("module", "reproduce")]

    def block(key_: str, **fields: list[str] | str) -> str:
        lines = [f"[importlinter:contract:{key_}]"]
        for key, value in fields.items():
            lines.append(
                f"{key} =" + ("".join(f"\n    {v}" for v in value) if isinstance(value, list) else f" {value}")
            )
        return "\n".join(lines)

    return "\n\n".join([
        "[importlinter]\nroot_packages =\n    zoo\n    datamodules\n    callbacks\ninclude_external_packages = False",
        block("core", name="zoo.core imports nothing above it", type="forbidden", source_modules=["zoo.core"],
              forbidden_modules=["zoo.cli", "zoo.launcher", "datamodules", "callbacks", *methods]),
        block("methods", name="no method package imports another (even indirectly)", type="independence",
              modules=methods),
        block("shared", name="datamodules and callbacks import no method Lightning module or protocol",
              type="forbidden", source_modules=["datamodules", "callbacks"], forbidden_modules=lightning),
    ]) + "\n"  # fmt: skip


def _lint(config: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", str(config), "--no-cache"], cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_import_layering_contracts_hold(tmp_path: Path) -> None:
    pytest.importorskip("importlinter")
    config = tmp_path / "layers.ini"
    config.write_text(contracts())
    out = _lint(config)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:] + "\n" + contracts()


def test_contracts_catch_a_cross_method_import(tmp_path: Path) -> None:
    """The same contracts fail on a copy of the tree where one method imports another (the check is not vacuous)."""
    pytest.importorskip("importlinter")
    import shutil

    tree = tmp_path / "tree"
    for package in ("zoo", "datamodules", "callbacks"):
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "*.png"))
    first, second = list(manifests())[:2]
    (tree / "zoo" / first / "leak.py").write_text(f"import zoo.{second}.manifest\n")
    config = tmp_path / "layers.ini"
    config.write_text(contracts())
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    out = subprocess.run([sys.executable, "-c", code, "--config", str(config), "--no-cache"], cwd=tree,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode != 0 and f"zoo.{first}.leak -> zoo.{second}.manifest" in out.stdout, out.stdout[-3000:]
