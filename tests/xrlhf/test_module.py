"""xrlhf Part 2 through the shared UnlearningCallback (card tests 4 and 5; the datamodule's forget set and phases)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch import Trainer

import callbacks.unlearning as unlearning
from callbacks.unlearning import UnlearningCallback
from datamodules.preferences import PreferenceDataModule
from zoo.xrlhf.module import XRLHFModule
from zoo.xrlhf.world import fit_bt

QUIET: dict[str, Any] = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False,
                         "enable_model_summary": False, "enable_checkpointing": False, "limit_val_batches": 0,
                         "num_sanity_val_steps": 0}  # fmt: skip


@pytest.fixture(scope="module")
def world_dm() -> PreferenceDataModule:
    """The card's world (seed 0) with the convex forget set, set up once."""
    dm = PreferenceDataModule(seed=0)
    dm.setup()
    return dm


def _unlearn(dm: PreferenceDataModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             strategy: str = "neggrad_plus") -> tuple[XRLHFModule, UnlearningCallback, dict[str, Any]]:  # fmt: skip
    """One fit with the callback; also returns the original and oracle state dicts it trained."""
    states: dict[str, Any] = {}
    train_phase = unlearning.UnlearningCallback._train_phase

    def keep(self: UnlearningCallback, trainer: Trainer, module: Any, phase: str, epochs: int) -> dict:
        states[phase] = train_phase(self, trainer, module, phase, epochs)
        return states[phase]

    monkeypatch.setattr(unlearning.UnlearningCallback, "_train_phase", keep)
    module = XRLHFModule(input_dim=dm.input_dim)
    cb = UnlearningCallback(strategy=strategy, beta=0.9, original_epochs=20, retrain_epochs=20, cache=False)
    Trainer(max_epochs=1, callbacks=[cb], default_root_dir=str(tmp_path), **QUIET).fit(module, datamodule=dm)
    return module, cb, states


def test_forget_set_is_the_explained_union(world_dm: PreferenceDataModule) -> None:
    """The forget set is the union of the per-item convex selections; the phases serve D, D∖S and {forget, retain}."""
    dm = world_dm
    union = np.unique(np.concatenate([e["indices"] for e in dm.explanations]))
    np.testing.assert_array_equal(dm.forget_idx, union)
    assert len(dm.explanations) == int(dm.unsatisfactory.sum()) > 0
    n = len(dm.delta_phi)
    (full,) = next(iter(dm.with_phase("original").train_dataloader()))
    (retain,) = next(iter(dm.with_phase("retrain").train_dataloader()))
    both = next(iter(dm.with_phase("unlearn").train_dataloader()))
    assert full.shape[0] == n and retain.shape[0] == n - len(union)
    assert both["forget"][0].shape[0] == len(union) and both["retain"][0].shape[0] == n - len(union)
    info = dm.split_info()
    assert info["n_forget"] == len(union) and 0.0 < info["union_recall"] <= 1.0


def test_callback_original_and_oracle_equal_the_exact_fits(world_dm: PreferenceDataModule, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Test 5: the callback's original RM is the numpy fit the explanations used, and its retrain oracle equals a
    fresh BT fit on D∖S_all (θ within 1e-5); NegGrad+ then fixes most unsatisfactory prompts (claim 3, seed 0)."""  # noqa: D205
    dm = world_dm
    module, cb, states = _unlearn(dm, tmp_path, monkeypatch)
    original = states["original"]["model.head.weight"][0].numpy()
    oracle = states["retrain"]["model.head.weight"][0].numpy()
    np.testing.assert_allclose(original, dm.theta_original, atol=1e-5)
    np.testing.assert_allclose(oracle, fit_bt(dm.delta_phi[dm.retain_mask]), atol=1e-5)
    assert cb.before["original/win_unsatisfactory_higher_is_better"] == 0.0  # by definition of the split
    assert cb.before["original/win_satisfactory_higher_is_better"] == 1.0
    assert cb.final["win_unsatisfactory_higher_is_better"] >= 0.55
    assert cb.final["win_satisfactory_higher_is_better"] >= 0.93
    assert cb.final["reward_on_unsatisfactory_lower_is_better"] < cb.before[
        "original/reward_on_unsatisfactory_lower_is_better"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="card test 4's bound on satisfactory rewards does not hold here: NegGrad+ on "
                   "one item's S moves them by 0.09-1.2 std (3 seeds); see zoo/xrlhf/README.md")  # fmt: skip
def test_unlearning_direction_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Test 4: unlearning S(x̄) of one item drops r̂(φ̄) by ≥ 0.5·std(r̂ over test candidates) while the mean |Δr̂|
    over the satisfactory (x, y_rl) pairs stays ≤ 0.1·std."""  # noqa: D205
    dm = PreferenceDataModule(seed=0, max_items=1)
    module, _, states = _unlearn(dm, tmp_path, monkeypatch)
    before = states["original"]["model.head.weight"][0].numpy()
    after = module.model.theta.numpy()
    std = float((dm.test_phi @ before).std())
    rows = np.arange(len(dm.rl))
    sat = ~dm.unsatisfactory
    phi_sat = dm.test_phi[rows[sat], dm.rl[sat]]
    assert float(dm.targets[0] @ before - dm.targets[0] @ after) >= 0.5 * std
    assert float(np.abs(phi_sat @ after - phi_sat @ before).mean()) <= 0.1 * std


def test_invalid_arguments_are_named() -> None:
    """Impossible settings fail at construction, naming the flag."""
    with pytest.raises(ValueError, match="selector"):
        PreferenceDataModule(selector="oracle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="input_dim"):
        XRLHFModule(input_dim=0)
    with pytest.raises(FileNotFoundError, match="no such feature file"):
        PreferenceDataModule(path="/nonexistent/features.npz")


def test_npz_path_runs_the_same_pipeline(tmp_path: Path) -> None:
    """A precomputed-feature npz written from the world gives the same forget set as the world itself."""
    from zoo.xrlhf.world import make_world

    world = make_world(3, n_train=400, n_test=200)
    np.savez(tmp_path / "f.npz", delta_phi=world.delta_phi, corrupted=world.corrupted,
             phi_candidates=world.test_phi, sft_logits=world.sft_logits, r_eval=world.r_star)  # fmt: skip
    from_file = PreferenceDataModule(path=str(tmp_path / "f.npz"), seed=3, k_cand=30)
    from_world = PreferenceDataModule(seed=3, n_train=400, n_test=200, k_cand=30)
    from_file.setup()
    from_world.setup()
    np.testing.assert_array_equal(from_file.forget_idx, from_world.forget_idx)
    assert from_file.input_dim == 20 and torch.is_tensor(from_file.train_dataloader().dataset.batch["forget"][0])
