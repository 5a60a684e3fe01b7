"""Checkpoint round trip: weights_only loading, subclass rebuild, fine-tuning, exact resume, saved config."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch
from conftest import QUIET, ROOT, TINY_CRAFT, TINY_DATA

from zoo.cli import main
from zoo.core import ZooModule, load_pretrained
from zoo.core.registry import manifests

CONFIG = str(ROOT / "configs/craft/craft.yaml")
NO_DROPOUT = [f"--model.init_args.{k}=0.0" for k in ("emb_dropout", "attn_dropout", "hidden_dropout")]
BASE = ["-c", CONFIG, *QUIET, *TINY_DATA, *TINY_CRAFT, *NO_DROPOUT, "--trainer.limit_val_batches=1",
        "--trainer.limit_train_batches=2", "--trainer.num_sanity_val_steps=0"]  # fmt: skip


def _fit(root: Path, *extra: str) -> tuple[object, str]:
    cli = main(["fit", *BASE, f"--trainer.default_root_dir={root}", *extra])
    ckpts = sorted(glob.glob(f"{root}/**/*.ckpt", recursive=True))
    return cli, ckpts[-1]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str, Path]:
    root = tmp_path_factory.mktemp("fit")
    cli, ckpt = _fit(root, "--trainer.max_epochs=1")
    return cli, ckpt, root


def test_weights_only_load(fitted) -> None:
    """Hyperparameters are primitives: the checkpoint loads with weights_only=True."""
    _, ckpt, _ = fitted
    blob = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert blob["hyper_parameters"]["_class_path"] == "zoo.craft.module.CRAFTModule"
    assert "input_dim" not in blob["hyper_parameters"]  # links the class does not take are dropped


def test_base_class_rebuilds_subclass_with_identical_predictions(fitted) -> None:
    cli, ckpt, _ = fitted
    model = ZooModule.load_from_checkpoint(ckpt)
    assert type(model).__name__ == "CRAFTModule"
    original = cli.model.eval()
    model.eval()
    hist = torch.randint(0, original.model.num_embeddings, (4, 8))
    cand = torch.randint(1, original.model.num_embeddings, (4, 5))
    elapsed = torch.rand(4, 5)
    torch.testing.assert_close(model.model(hist, cand, elapsed), original.model(hist, cand, elapsed))


def test_config_saved_in_run_dir(fitted) -> None:
    _, ckpt, root = fitted
    run_dir = Path(ckpt).parents[1]
    assert (run_dir / "config.yaml").is_file()
    assert "CRAFTModule" in (run_dir / "config.yaml").read_text()
    assert not Path("config.yaml").exists()


def test_runs_get_their_own_folders_and_a_reused_one_is_announced(
    fitted, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --trainer.default_root_dir two runs started in the same second get runs/craft/<date-time> and
    <date-time>-1; a run into an explicit folder that holds a run says it overwrites that run's files."""
    first, second = (main(["fit", *BASE, "--trainer.max_epochs=1"]) for _ in range(2))
    folders = [Path(cli.trainer.default_root_dir) for cli in (first, second)]
    assert folders[0] != folders[1] and {f.parent for f in folders} == {Path("runs/craft")}
    assert all((f / "config.yaml").is_file() and list((f / "checkpoints").glob("*.ckpt")) for f in folders)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    _, _, root = fitted
    capsys.readouterr()
    _fit(root, "--trainer.max_epochs=1")
    assert (
        f"zoo: run folder {root} already holds a run (config.yaml); its files are overwritten"
        in capsys.readouterr().err
    )


def test_pretrained_fine_tunes(fitted, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`pretrained=<ckpt>` starts from the checkpoint's weights (not a fresh init) and says what it loaded."""
    _, ckpt, _ = fitted
    cli = main([*BASE, f"--model.init_args.pretrained={ckpt}", f"--trainer.default_root_dir={tmp_path}",
                "--trainer.max_epochs=1"], run=False)  # fmt: skip
    total = len(cli.model.model.state_dict())
    assert f"zoo: pretrained={ckpt}: loaded {total} of {total} tensors from {ckpt}" in capsys.readouterr().err
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    for key, value in cli.model.model.state_dict().items():
        torch.testing.assert_close(value, state[f"model.{key}"])


def test_pretrained_state_dict_and_mismatch_warns(fitted, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plain state dict loads; a changed layer is dropped with a warning naming the key and both shapes."""
    cli, _, _ = fitted
    state = {k: v.clone() for k, v in cli.model.model.state_dict().items()}
    key = next(k for k in state if k.endswith("weight") and state[k].ndim == 2)
    state[key] = torch.zeros(3, 3)
    path = tmp_path / "plain.pt"
    torch.save(state, path)
    with pytest.warns(UserWarning, match=key.replace(".", r"\.")):
        load_pretrained(cli.model.model, str(path), prefix="")
    total = len(state)
    assert f"loaded {total - 1} of {total} tensors from {path}; 1 dropped (shape); 1 missing" in capsys.readouterr().err


def test_pretrained_missing_file_never_downloads() -> None:
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_pretrained(torch.nn.Linear(1, 1), "org/some-hub-model")


def test_resume_is_exact(tmp_path: Path) -> None:
    """fit 4 steps == fit 2 steps + resume 2 via --ckpt_path (weights, optimizer state and step counter)."""
    straight, _ = _fit(tmp_path / "a", "--trainer.max_epochs=2")
    _, ckpt = _fit(tmp_path / "b", "--trainer.max_epochs=1")
    resumed = main(["fit", *BASE, f"--trainer.default_root_dir={tmp_path / 'b'}", "--trainer.max_epochs=2",
                    f"--ckpt_path={ckpt}"])  # fmt: skip
    assert resumed.trainer.global_step == straight.trainer.global_step == 4
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("slug", sorted(manifests()))
def test_main_module_checkpoint_round_trip(slug: str, tmp_path: Path) -> None:
    """Every method's main module, after a short fit of its main config: the checkpoint loads with weights_only=True,
    names its class, and `ZooModule.load_from_checkpoint` rebuilds that class with identical weights and buffers
    (catches a non-primitive hyperparameter, a link the class does not take, or state kept outside the state dict's
    reach that a rebuild would lose)."""
    manifest = manifests()[slug]
    cli = main(["fit", "-c", str(ROOT / manifest.config), *QUIET, *manifest.tiny_overrides(manifest.config),
                *manifest.short, "--trainer.max_steps=2", "--trainer.limit_val_batches=1", "--trainer.logger=false",
                "--trainer.num_sanity_val_steps=0",
                f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    path = tmp_path / "round_trip.ckpt"
    cli.trainer.save_checkpoint(path)
    blob = torch.load(path, map_location="cpu", weights_only=True)
    assert blob["hyper_parameters"]["_class_path"] == manifest.module
    loaded = ZooModule.load_from_checkpoint(str(path))
    assert type(loaded) is type(cli.model)
    expected = cli.model.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    for key, value in loaded.state_dict().items():
        torch.testing.assert_close(value, expected[key], rtol=0, atol=0, msg=key)


def test_fine_tuned_checkpoint_loads_without_its_pretrained_source(fitted, tmp_path: Path) -> None:
    """A checkpoint of a fine-tuned run loads after its `pretrained` source is gone (the weights are in the
    checkpoint; re-reading the source would fail on another machine or train a recipe again)."""
    import shutil

    _, ckpt, _ = fitted
    source = tmp_path / "source.ckpt"
    shutil.copy(ckpt, source)
    cli = main(["fit", *BASE, f"--model.init_args.pretrained={source}", f"--trainer.default_root_dir={tmp_path}",
                "--trainer.max_epochs=1"])  # fmt: skip
    tuned = sorted(glob.glob(f"{tmp_path}/**/checkpoints/*.ckpt", recursive=True))[-1]
    source.unlink()
    loaded = ZooModule.load_from_checkpoint(tuned)
    for key, value in loaded.model.state_dict().items():
        torch.testing.assert_close(value, cli.model.model.state_dict()[key], rtol=0, atol=0)
