"""PruneThenFinetune through Lightning: frozen weights (card test 6), real-pruning merge equivalence, resume
(card test 9), merged checkpoints, and the fine-tuning phase."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from callbacks.prune_finetune import PruneThenFinetune
from datamodules.timeseries.ltsf_datamodule import LTSFDataModule
from zoo.prune_finetune.merge import param_count
from zoo.prune_finetune.module import TSFMModule
from zoo.prune_finetune.spec import masked

TINY = {"context_length": 32, "horizon": 8, "d_model": 8, "num_layers": 2, "heads": 2, "ffn_dim": 16,
        "patch_length": 8, "patch_stride": 8, "eval_horizons": [4, 8]}  # fmt: skip


def _csv(path: Path, rows: int = 700, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    frame = pd.DataFrame({
        "date": pd.date_range("2020-01-01", periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S"),
        "a": np.sin(2 * np.pi * t / 24) + 0.1 * rng.standard_normal(rows),
        "b": np.cos(2 * np.pi * t / 12) + 0.1 * rng.standard_normal(rows),
    })  # fmt: skip
    frame.to_csv(path, index=False)
    return str(path)


def _data(tmp_path: Path) -> LTSFDataModule:
    return LTSFDataModule(path=_csv(tmp_path / "series.csv"), context_length=32, horizon=8, batch_size=16,
                          eval_batch_size=64, seed=0)  # fmt: skip


def _trainer(tmp_path: Path, callbacks: list[Callback], epochs: int = 1, **kwargs: object) -> Trainer:
    return Trainer(accelerator="cpu", devices=1, max_epochs=epochs, callbacks=callbacks, logger=False,
                   enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                   default_root_dir=str(tmp_path), **kwargs)  # fmt: skip


class _Snapshot(Callback):
    """State at the end of the prune phase's training (before ``on_fit_end`` merges)."""

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.state = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.optimizers = list(trainer.optimizers)


def test_prune_phase_freezes_weights_and_merge_matches_masked(tmp_path: Path) -> None:
    """After real pruning every weight and BatchNorm buffer is bit-identical and no optimizer exists; the merged
    model equals the pretrained one under the final masks, with fewer block parameters. Catches a prune phase that
    trains or moves BatchNorm statistics, and a merge that disagrees with the masks it was given."""
    torch.manual_seed(0)
    module = TSFMModule(**TINY)
    module.train()  # a prune step must itself switch to eval mode
    before = {k: v.detach().clone() for k, v in module.state_dict().items()}
    reference = TSFMModule(**TINY)
    reference.load_state_dict(before)
    cb = PruneThenFinetune(prune_ratio_per_epoch=0.7, macro_batch_size=64, finetune=False)
    snap = _Snapshot()
    dm = _data(tmp_path)
    _trainer(tmp_path, [cb, snap]).fit(module, datamodule=dm)
    assert [type(o).__name__ for o in snap.optimizers] in ([], ["_MockOptimizer"])  # no optimizer was built
    assert set(snap.state) == set(before)
    assert all(torch.equal(snap.state[k], before[k]) for k in before)
    assert cb.step >= 1 and 0.3 < cb.remaining_fraction() < 0.8
    assert module.structure is not None and module.structure["kind"] == "prune_finetune.merge"
    assert param_count(module.model, blocks_only=True) < param_count(reference.model, blocks_only=True)
    x = next(iter(dm.test_dataloader()))["x"]
    module.eval()
    reference.eval()
    with torch.no_grad(), masked(reference.model, {k: m.float() for k, m in cb.mask.items()}):
        expected = reference.model(x)
    with torch.no_grad():
        torch.testing.assert_close(module.model(x), expected, atol=1e-5, rtol=0)
    blob = torch.load(Path(tmp_path) / "pruned.ckpt", weights_only=True)
    again = TSFMModule(**TINY, pretrained=str(Path(tmp_path) / "pruned.ckpt"))
    assert blob["zoo_structure"] == module.structure == again.structure
    with torch.no_grad():
        torch.testing.assert_close(again.eval().model(x), expected, atol=1e-5, rtol=0)


def test_resume_between_prune_epochs_is_identical(tmp_path: Path) -> None:
    """Two prune epochs in one go vs one epoch, a checkpoint, and a resumed second epoch: masks, importances and
    history are identical. Catches callback state that does not survive ``--ckpt_path`` (masks, EMA, step)."""

    def run(epochs: int, root: Path, ckpt: str | None = None) -> PruneThenFinetune:
        root.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        module = TSFMModule(**TINY)
        cb = PruneThenFinetune(prune_ratio_per_epoch=0.5, prune_ema=0.5, macro_batch_size=48, finetune=False)
        saver = ModelCheckpoint(dirpath=str(root / "ckpt"), save_top_k=-1, filename="{epoch}")
        _trainer(root, [cb, saver], epochs=epochs).fit(module, datamodule=_data(root), ckpt_path=ckpt)
        return cb

    full = run(2, tmp_path / "a")
    run(1, tmp_path / "b")
    resumed = run(2, tmp_path / "c", ckpt=str(tmp_path / "b" / "ckpt" / "epoch=0.ckpt"))
    assert full.step == resumed.step >= 2
    assert full.history == resumed.history
    for k in full.mask:
        assert torch.equal(full.mask[k], resumed.mask[k])
        assert torch.equal(full.imp[k], resumed.imp[k])


def test_resume_mid_prune_epoch_is_identical(tmp_path: Path) -> None:
    """Card test 9: stop mid-prune (a checkpoint after prune step 5 of 18, inside the only prune epoch), resume:
    masks, importances and history equal the uninterrupted run's. Lightning restarts a plain loader at the epoch's
    first batch; without the callback's consumed count (``resume_train_at``) the resumed run re-scores the first
    15 micro-batches and takes 19 prune steps instead of 18."""

    def run(root: Path, ckpt: str | None = None) -> PruneThenFinetune:
        root.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        module = TSFMModule(**TINY)
        cb = PruneThenFinetune(prune_ratio_per_epoch=0.5, prune_ema=0.5, macro_batch_size=48, finetune=False)
        saver = ModelCheckpoint(dirpath=str(root / "ckpt"), save_top_k=-1, every_n_train_steps=5, filename="{step}")
        _trainer(root, [cb, saver]).fit(module, datamodule=_data(root), ckpt_path=ckpt)
        return cb

    full = run(tmp_path / "a")
    resumed = run(tmp_path / "b", ckpt=str(tmp_path / "a" / "ckpt" / "step=5.ckpt"))
    assert full.step == resumed.step == 18
    assert full.history == resumed.history
    for k in full.mask:
        assert torch.equal(full.mask[k], resumed.mask[k])
        assert torch.equal(full.imp[k], resumed.imp[k])


def test_finetune_phase_trains_the_merged_model_and_checkpoint_reloads(tmp_path: Path) -> None:
    """The fine-tuning fit starts from the merged weights, changes them, keeps the smaller shapes, and its best
    checkpoint reloads (``weights_only=True``) into the merged shape with identical forecasts."""
    torch.manual_seed(0)
    module = TSFMModule(**TINY)
    cb = PruneThenFinetune(prune_ratio_per_epoch=0.7, macro_batch_size=64, ft_lr=1e-3, ft_epochs=2, ft_patience=1)
    dm = _data(tmp_path)
    _trainer(tmp_path, [cb]).fit(module, datamodule=dm)
    assert cb.phase == "finetuned"
    merged = torch.load(Path(tmp_path) / "pruned.ckpt", weights_only=True)["state_dict"]
    now = module.state_dict()
    assert set(now) == set(merged)
    assert any(not torch.equal(now[k], merged[k]) for k in merged if k.endswith("weight"))
    path = Path(cb.summary["finetune_checkpoint"])
    assert path.exists()
    loaded = TSFMModule.load_from_checkpoint(str(path))
    assert loaded.structure == module.structure
    x = next(iter(dm.test_dataloader()))["x"]
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval().model(x), module.eval().model(x))
    summary = cb.summary
    assert summary["block_params_after"] < summary["block_params_before"]
    assert summary["finetune_best_val"] is not None


def test_bad_settings_are_named() -> None:
    """Impossible settings raise naming the argument."""
    with pytest.raises(ValueError, match="prune_ema"):
        PruneThenFinetune(prune_ema=0.0)
    with pytest.raises(ValueError, match="target_channel_fraction"):
        PruneThenFinetune(target_channel_fraction=1.5)
    with pytest.raises(ValueError, match="ft_epochs"):
        PruneThenFinetune(ft_epochs=0)
