"""TSFMModule: per-horizon metrics, pretrained sources (recipe, Hugging Face folder), and the CLI flow of the
method (prune -> merge -> fine-tune in `zoo fit`, then `zoo test` on the fine-tuned checkpoint)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import QUIET, ROOT
from lightning.pytorch import Trainer

from datamodules.timeseries.ltsf_datamodule import LTSFDataModule
from zoo.cli import main
from zoo.core.cli import train_recipe
from zoo.prune_finetune.module import TSFMModule

from .test_callback import TINY, _csv

TINY_ARGS = [f"--model.init_args.{k}={v}" for k, v in TINY.items() if k not in ("context_length", "horizon")]


def test_horizon_metrics_match_a_manual_computation(tmp_path: Path) -> None:
    """val/mse@h and val/mae@h are the errors over the first h steps of every window, val/mse their mean over the
    horizons. Catches scoring all H steps for every h, or a per-batch mean of means."""
    torch.manual_seed(0)
    module = TSFMModule(**TINY).eval()
    dm = LTSFDataModule(path=_csv(tmp_path / "s.csv"), context_length=32, horizon=8, eval_batch_size=50)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(module, datamodule=dm, verbose=False)
    preds, ys = [], []
    with torch.no_grad():
        for batch in dm.val_dataloader():
            preds.append(module.model(batch["x"]))
            ys.append(batch["y"])
    pred, y = torch.cat(preds).double(), torch.cat(ys).double()
    expected = {h: float(((pred[:, :h] - y[:, :h]) ** 2).mean()) for h in (4, 8)}
    for h, value in expected.items():
        assert float(trainer.callback_metrics[f"val/mse@{h}"]) == pytest.approx(value, rel=1e-5)
    assert float(trainer.callback_metrics["val/mse"]) == pytest.approx(np.mean(list(expected.values())), rel=1e-5)
    mae8 = float((pred - y).abs().mean())
    assert float(trainer.callback_metrics["val/mae@8"]) == pytest.approx(mae8, rel=1e-5)


def test_bad_horizons_are_named() -> None:
    """An eval horizon beyond the forecast length raises naming the flag."""
    with pytest.raises(ValueError, match="eval_horizons"):
        TSFMModule(**{**TINY, "eval_horizons": [4, 16]})


def _tiny_recipe(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "configs/prune_finetune/pretrain_quick.yaml").read_text())
    config["model"]["init_args"].update({k: v for k, v in TINY.items()})
    config["data"]["init_args"].update({"num_series": 48, "length": 64, "context_length": 32, "horizon": 8,
                                        "steps_per_epoch": 3, "val_series": 8, "val_windows": 16})  # fmt: skip
    config["trainer"].update({"max_epochs": 1, "enable_progress_bar": False, "enable_model_summary": False})
    config["trainer"]["callbacks"] = None
    config["threads"] = 1
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_recipe_is_trained_once_cached_and_leaves_the_rng_alone(tmp_path: Path) -> None:
    """A YAML recipe as `pretrained` is fitted once and cached by its text; the caller's RNG and thread count are
    the same as without the fit, and a second use loads the cached weights. Catches a recipe refitted on every
    run (slow, and a second run would differ) or a caller whose initialisation depends on the cache state."""
    recipe = _tiny_recipe(tmp_path)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    path = train_recipe(recipe)
    after = torch.rand(3)
    torch.manual_seed(123)
    control = torch.rand(3)
    torch.testing.assert_close(after, control)
    assert torch.get_num_threads() == threads
    stamp = path.stat().st_mtime_ns
    assert train_recipe(recipe) == path and path.stat().st_mtime_ns == stamp
    module = TSFMModule(**TINY, pretrained=str(recipe))
    state = torch.load(path, weights_only=True)["state_dict"]
    for key, value in module.model.state_dict().items():
        torch.testing.assert_close(value, state[f"model.{key}"])


def test_hugging_face_folder_loads_and_mismatch_is_named(tmp_path: Path) -> None:
    """A local `PatchTSTForPrediction.save_pretrained` folder loads through `pretrained`; a folder with another
    context length raises naming the key."""
    torch.manual_seed(0)
    source = TSFMModule(**TINY)
    source.model.net.save_pretrained(tmp_path / "hf")
    loaded = TSFMModule(**TINY, pretrained=str(tmp_path / "hf"))
    x = torch.randn(4, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval().model(x), source.eval().model(x))
    with pytest.raises(ValueError, match="context_length"):
        TSFMModule(**{**TINY, "context_length": 48}, pretrained=str(tmp_path / "hf"))


def test_cli_prune_merge_finetune_then_test_the_checkpoint(tmp_path: Path) -> None:
    """`zoo fit -c configs/prune_finetune/default.yaml` prunes, merges and fine-tunes; `zoo test` with the
    fine-tuned checkpoint rebuilds the merged shapes before loading (on_load_checkpoint) and scores it."""
    csv = _csv(tmp_path / "series.csv")
    config = str(ROOT / "configs/prune_finetune/default.yaml")
    data = [f"--data.init_args.path={csv}", "--data.init_args.context_length=32", "--data.init_args.horizon=8",
            "--data.init_args.batch_size=16"]  # fmt: skip
    common = [
        "-c",
        config,
        *QUIET,
        *TINY_ARGS,
        *data,
        "--model.init_args.pretrained=null",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.callbacks.init_args.macro_batch_size=64",
    ]  # fmt: skip (the last callback: PruneThenFinetune)
    cli = main([*common], run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    run = Path(cli.trainer.default_root_dir)
    best = run / "finetune" / "best.ckpt"
    assert (run / "pruned.ckpt").exists() and best.exists() and (run / "prune_finetune.json").exists()
    assert cli.model.structure is not None
    tested = main(["test", *common, f"--ckpt_path={best}"])
    assert tested is not None
    assert float(tested.trainer.callback_metrics["test/mse"]) > 0
