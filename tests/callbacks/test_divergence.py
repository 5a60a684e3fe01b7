"""The divergence guard (issue #21): a non-finite loss or weight stops the run with one ``zoo: error:`` line.

The line names the step, who trained (the module, or the unlearning callback and its strategy) and the options to
lower. Before the guard, a diverged unlearning run went on with ``nan`` weights until scikit-learn's SVC in the MIA
raised ``ValueError: Input X contains NaN`` (a traceback from a library, far from the cause).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, zoo_entry
from lightning.pytorch import Trainer
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from zoo.core.module import ZooModule
from zoo.uam.module import UnlearnClassifierModule

torch.set_num_threads(1)


class Toy(ZooModule):
    """A linear regression whose loss becomes ``nan`` at ``bad_step``."""

    def __init__(self, bad_step: int = 3, lr: float = 0.1) -> None:
        self.bad_step = bad_step
        super().__init__(lr=lr)

    def configure_models(self) -> None:
        self.model = nn.Linear(2, 1)

    def compute_loss(self, batch: Any) -> dict[str, Tensor]:
        x, y = batch
        loss = ((self.model(x).squeeze(-1) - y) ** 2).mean()
        if self.global_step == self.bad_step:
            loss = loss * float("nan")
        return {"loss": loss}


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(64, 2, generator=g), torch.randn(64, generator=g)), batch_size=8)


def test_core_training_step_stops_at_the_nan_step(tmp_path: Path) -> None:
    """ZooModule.training_step raises at the step whose loss is nan, naming the class, the step, the epoch and the
    learning rate to lower (catches a run that trains on with nan weights)."""
    trainer = Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    from zoo.core.divergence import Diverged

    module = Toy(bad_step=11)
    message = ("Toy: the training loss became non-finite (nan) at step 11 (epoch 1); the run diverged: lower "
               "--model.init_args.lr=0.1")  # fmt: skip
    with pytest.raises(Diverged, match="^" + re.escape(message) + "$"):
        trainer.fit(module, train_dataloaders=_loader())
    assert module.global_step == 11  # no step was taken with the nan loss


def test_loss_guard_and_weight_scan() -> None:
    """The guard passes finite losses, stops on inf as on nan, and the weight scan names the first bad tensor."""
    from zoo.core.divergence import Diverged, LossGuard, first_nonfinite

    guard = LossGuard()
    guard.observe(torch.tensor(1.0), 0, 0, "M", "k")
    with pytest.raises(Diverged, match=r"^M: the training loss became non-finite \(-inf\) at step 4 \(epoch 2\)"):
        guard.observe(torch.tensor(float("-inf")), 4, 2, "M", lambda: "k")
    weights = [torch.zeros(3), torch.tensor([1.0, float("inf")]), torch.tensor([float("nan")])]
    assert first_nonfinite(weights) == 1 and first_nonfinite(weights[:1]) is None and first_nonfinite([]) is None


def test_deferred_guard_reports_the_first_bad_step_at_the_sync_point() -> None:
    """On an accelerator the guard records the first non-finite step on the device and raises at the next sync
    (the logged steps, the epoch end), naming that first step, not the sync step nor a later bad one."""
    from zoo.core.divergence import Diverged, LossGuard

    guard = LossGuard(defer=True)
    for step in range(3):
        guard.observe(torch.tensor(0.5), step, 0, "M", "k")
    guard.flush("M", "k")  # all finite: nothing raised
    guard.observe(torch.tensor(float("nan")), 3, 1, "M", "k")
    guard.observe(torch.tensor(float("inf")), 4, 1, "M", "k")
    guard.observe(torch.tensor(1.0), 5, 1, "M", "k")
    with pytest.raises(Diverged, match=r"^M: the training loss became non-finite \(nan or inf\) at step 3 \(epoch 1\)"):
        guard.observe(torch.tensor(1.0), 6, 1, "M", "k", sync=True)


UNLEARN = ["fit", "-c", str(ROOT / "configs" / "uam" / "finetune.yaml"), "--trainer.accelerator=cpu",
           "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false",
           "--trainer.enable_checkpointing=false", "--trainer.max_epochs=2",
           "--trainer.callbacks.init_args.original_epochs=2", "--trainer.callbacks.init_args.oracle=false"]  # fmt: skip


def _one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``zoo <args>`` in process; it must exit 2 without a traceback. Its last stderr line."""
    code, err = zoo_entry(args, capsys)
    assert code == 2 and "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def test_unlearning_step_with_an_injected_nan_stops_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A nan retain loss at unlearning step 5 stops ``zoo fit`` with exit code 2 and one line naming the strategy,
    the step and the learning rate (catches sklearn's "Input X contains NaN" traceback from the SVC MIA)."""
    calls = {"n": 0}
    retain_loss = UnlearnClassifierModule.retain_loss

    def poisoned(self: UnlearnClassifierModule, batch: Any) -> Tensor:
        loss = retain_loss(self, batch)
        if self.unlearning is not None:
            calls["n"] += 1
            if calls["n"] == 6:  # the loss of step 5 (0-based)
                return loss * float("nan")
        return loss

    monkeypatch.setattr(UnlearnClassifierModule, "retain_loss", poisoned)
    assert _one_line([*UNLEARN, f"--trainer.default_root_dir={tmp_path}"], capsys) == (
        "zoo: error: UnlearningCallback(strategy=finetune): the training loss became non-finite (nan) at step 5 "
        "(epoch 0); the run diverged: lower --model.init_args.lr=0.02"
    )


def test_nan_weights_after_the_last_step_stop_before_the_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Weights that turn nan in the last step of an epoch (finite loss) stop the run before the MIA reads them."""
    from callbacks.unlearning import UnlearningCallback

    step = UnlearningCallback._loss_step

    def poison_last(self: UnlearningCallback, module: Any, *args: Any) -> Tensor:
        loss = step(self, module, *args)
        if self.step_count == 17:  # the last of 18 digits steps in epoch 0
            with torch.no_grad():
                module.model.layers[1].weight[0, 0] = float("nan")
        return loss

    monkeypatch.setattr(UnlearningCallback, "_loss_step", poison_last)
    assert _one_line([*UNLEARN, f"--trainer.default_root_dir={tmp_path}"], capsys) == (
        "zoo: error: UnlearningCallback(strategy=finetune): the weights (model.layers.1.weight first) became "
        "non-finite (nan or inf) at step 18 (epoch 0); the run diverged: lower --model.init_args.lr=0.02"
    )


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        # NegGrad at a huge learning rate: the ascent blows up; lower the lr or the epochs
        (["--trainer.callbacks.init_args.strategy=neggrad", "--model.init_args.lr=1e30"],
         r"zoo: error: UnlearningCallback\(strategy=neggrad\): the (training loss|weights \(\S+ first\)) became "
         r"non-finite \(\S+\) at step \d+ \(epoch \d\); the run diverged: lower --model\.init_args\.lr=1e\+30 or "
         r"--trainer\.max_epochs \(gradient ascent is unbounded\)"),
        # the callback's inner training of the original model diverges: which inner run, which learning rates
        (["--model.init_args.original_lr=1e30", "--trainer.callbacks.init_args.cache=false"],
         r"zoo: error: UnlearningCallback: training the original model \(the original recipe, 2 epochs\): "
         r"UnlearnClassifierModule: the training loss became non-finite \(\S+\) at step \d+ \(epoch \d\); the run "
         r"diverged: lower --model\.init_args\.lr=0\.02 or --model\.init_args\.original_lr=1e\+30"),
    ],
    ids=["neggrad", "original_recipe"],
)  # fmt: skip
def test_real_divergence_through_zoo_fit_is_one_line(
    extra: list[str], pattern: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs that diverge on their own (no injection) stop with the one line naming who diverged and the knobs."""
    line = _one_line([*UNLEARN, f"--trainer.default_root_dir={tmp_path}", *extra], capsys)
    assert re.fullmatch(pattern, line), line
