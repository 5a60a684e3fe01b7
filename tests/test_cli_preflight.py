"""What the CLI settles before anything is built: missing optional dependencies, `pretrained` recipes (trained by the
CLI, never inside a constructor), and the checkpoint monitor taken from the module."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import yaml
from conftest import QUIET, ROOT, TINY_CRAFT, TINY_DATA

from zoo.cli import main
from zoo.core.pretrained import load_pretrained, recipe_cache_path

CRAFT = str(ROOT / "configs/craft/default.yaml")


def test_missing_extra_stops_with_the_pip_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A config of a method whose optional group is not installed fails at once (exit 2), naming the config, the
    method and the exact `pip install` command; the real distribution lookup is only faked for networkx."""
    real = metadata.distribution

    def fake(name: str):
        if name == "networkx":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", fake)
    config = str(ROOT / "configs/coop_se/default.yaml")
    assert main(["fit", "-c", config, *QUIET]) == 2
    err = capsys.readouterr().err
    assert config in err and "`coop_se`" in err and "networkx" in err and 'pip install -e ".[coop_se]"' in err
    assert main(["fit", "-c", CRAFT, *QUIET, *TINY_DATA, "--trainer.fast_dev_run=1"]) is not None  # others unaffected


def _recipe(tmp_path: Path) -> Path:
    """A tiny CRAFT training recipe (a complete zoo config) written outside the repository."""
    config = yaml.safe_load(Path(CRAFT).read_text())
    config["data"]["init_args"].update({"n_events": 1500, "n_users": 40, "n_items": 80, "num_eval_negatives": 20})
    config["model"]["init_args"].update({"d": 16, "L": 8, "num_layers": 1})
    config["trainer"].update({"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1})
    config["trainer"]["callbacks"] = []
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_constructor_never_trains_a_recipe(tmp_path: Path) -> None:
    """Building weights from an untrained recipe is an error that says who trains it, not minutes of hidden work."""
    import torch

    recipe = _recipe(tmp_path)
    with pytest.raises(FileNotFoundError, match="has not been trained yet: `zoo fit` trains"):
        load_pretrained(torch.nn.Linear(1, 1), str(recipe))
    assert not recipe_cache_path(recipe).exists()


def test_fast_dev_run_smoke_runs_an_uncached_recipe(tmp_path: Path, capsys) -> None:
    """Under fast_dev_run an uncached recipe runs for one batch into the run folder, announced, and is not cached."""
    recipe = _recipe(tmp_path)
    root = tmp_path / "run"
    cli = main(["fit", "-c", CRAFT, *QUIET, *TINY_DATA, *TINY_CRAFT, f"--model.init_args.pretrained={recipe}",
                "--trainer.fast_dev_run=1", f"--trainer.default_root_dir={root}"])  # fmt: skip
    assert cli.trainer.global_step == 1
    assert (root / "recipe_smoke" / "recipe-smoke.ckpt").is_file()
    assert not recipe_cache_path(recipe).exists()
    assert "fast_dev_run smoke-runs the recipe" in capsys.readouterr().err


def test_cli_trains_an_uncached_recipe_once(tmp_path: Path, capsys) -> None:
    """A real run announces the recipe, trains and caches it before the module is built; the next run reuses it."""
    recipe = _recipe(tmp_path)
    args = ["-c", CRAFT, *QUIET, *TINY_DATA, *TINY_CRAFT, f"--model.init_args.pretrained={recipe}",
            f"--trainer.default_root_dir={tmp_path / 'run'}"]  # fmt: skip
    main(args, run=False)
    cached = recipe_cache_path(recipe)
    assert cached.is_file()
    assert "training the recipe once: CRAFTModule" in capsys.readouterr().err
    stamp = cached.stat().st_mtime_ns
    main(args, run=False)
    assert cached.stat().st_mtime_ns == stamp and "cached checkpoint" in capsys.readouterr().err


def test_monitor_auto_is_the_modules(tmp_path: Path) -> None:
    """`monitor: auto` on a listed EarlyStopping/ModelCheckpoint watches the module's declared metric in its direction;
    an explicit monitor stays, and a checkpoint without one keeps Lightning's meaning (the last epoch), as
    configs/uam/original.yaml relies on."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from zoo.craft.module import CRAFTModule

    cli = main(["-c", CRAFT, *QUIET, *TINY_DATA, "--trainer.callbacks+=EarlyStopping",
                "--trainer.callbacks.monitor=auto", f"--trainer.default_root_dir={tmp_path}"], run=False)  # fmt: skip
    stop = next(c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping))
    assert (stop.monitor, stop.mode) == (CRAFTModule.monitor, CRAFTModule.mode)
    assert next(c for c in cli.trainer.callbacks if type(c) is ModelCheckpoint).monitor == "val/mrr"  # explicit
    cli = main(["-c", str(ROOT / "configs/uam/original.yaml"), *QUIET, f"--trainer.default_root_dir={tmp_path}"],
               run=False)  # fmt: skip
    assert next(c for c in cli.trainer.callbacks if type(c) is ModelCheckpoint).monitor is None


def test_shared_callback_counts_for_the_configs_own_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """UnlearningCallback is declared by uam and xrlhf; a uam config with transformers missing names uam only."""
    from zoo.core.cli import _config_texts, missing_extras

    real = metadata.distribution

    def fake(name: str):
        if name == "transformers":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", fake)
    lines = missing_extras(_config_texts(["fit", "-c", str(ROOT / "configs/uam/default.yaml")]))
    assert len(lines) == 1 and "`uam`" in lines[0] and "xrlhf" not in lines[0], lines


def test_missing_extra_line_carries_the_manifest_install_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """bope_monne's line says BoTorch 0.18 needs Python >= 3.11 (its `install_note`) after the pip command."""
    from zoo.core.cli import _config_texts, missing_extras

    real = metadata.distribution

    def fake(name: str):
        if name == "botorch":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", fake)
    lines = missing_extras(_config_texts(["fit", "-c", str(ROOT / "configs/bope_monne/default.yaml")]))
    assert lines == [lines[0]] and lines[0].endswith(
        'run: pip install -e ".[bope_monne]" (BoTorch 0.18 needs Python >= 3.11)'
    ), lines
