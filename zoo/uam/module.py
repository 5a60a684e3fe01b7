"""Unlearning-Aware Minimization (Kim, Kim, Chae, Yoon, NeurIPS 2025): the classifier side.

UAM unlearns a forget set by a SAM-like two-pass step: perturb the weights to raise the forget loss
(``w + rho g_f / ||g_f||``), take the retain gradient there, project it with ``[I - gamma P_f]`` and step from the
unperturbed weights. The mechanism and its baselines live in :class:`callbacks.unlearning.UnlearningCallback`; this
module is the classifier that exposes the forget/retain protocol, its original training recipe and the metrics
(RA / FA / TA, SVC MIA-efficacy, gaps to the Retrain oracle).

Example:
    zoo fit -c configs/uam/default.yaml      # digits, mislabeled forget set, UAM + projection, oracle in the run
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.core.module import ZooModule
from zoo.uam.metrics import label_probabilities, svc_mia_efficacy
from zoo.uam.model import build_classifier, random_other_labels


class UnlearnClassifierModule(ZooModule):
    """Image classifier with the unlearning protocol of :class:`callbacks.unlearning.UnlearningCallback`.

    Without an unlearning callback it trains with the *original* recipe (SGD ``original_lr``,
    ``original_momentum``, ``original_weight_decay``) on whatever the datamodule serves; with one, the callback
    drives manual optimisation with the *unlearning* recipe (``lr``, ``momentum``, ``weight_decay``).

    Args:
        input_dim: flattened input size (linked from the datamodule).
        num_classes: number of classes (linked from the datamodule).
        arch: ``mlp`` (card default, 64-64-10 on digits) | ``cnn`` | ``resnet18`` (CIFAR backbone).
        hidden: MLP hidden widths.
        in_channels: image channels of the conv architectures.
        lr: unlearning learning rate (plain SGD 0.02 in the digits protocol).
        momentum: unlearning SGD momentum.
        weight_decay: unlearning weight decay.
        original_lr: learning rate of the original / Retrain recipe.
        original_momentum: momentum of the original recipe.
        original_weight_decay: weight decay of the original recipe.
        mia_seed: seed of the SVC membership-inference subsample.
        pretrained: the original model (checkpoint or state dict); ``None`` lets the callback train it.
    """

    monitor: ClassVar[str] = "val/acc"
    mode: ClassVar[Literal["min", "max"]] = "max"
    name: ClassVar[str] = "uam"
    #: Metrics averaged into the gap to the Retrain oracle (RA, FA, TA, MIA).
    gap_metrics: ClassVar[tuple[str, ...]] = (
        "retain_acc_higher_is_better",
        "forget_acc_lower_is_better_vs_retrain",
        "test_acc_higher_is_better",
        "mia_efficacy_higher_is_better_vs_retrain",
    )

    def __init__(
        self,
        input_dim: int = 64,
        num_classes: int = 10,
        arch: Literal["mlp", "cnn", "resnet18"] = "mlp",
        hidden: list[int] | None = None,
        in_channels: int = 1,
        lr: float = 0.02,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        original_lr: float = 0.1,
        original_momentum: float = 0.9,
        original_weight_decay: float = 5e-4,
        mia_seed: int = 0,
        pretrained: str | None = None,
    ) -> None:
        if arch not in ("mlp", "cnn", "resnet18"):
            raise ValueError(f"--model.init_args.arch={arch!r}: expected mlp, cnn or resnet18")
        self.input_dim, self.num_classes, self.arch = input_dim, num_classes, arch
        self.hidden, self.in_channels = list(hidden) if hidden is not None else [64], in_channels
        self.momentum = momentum
        self.original_lr, self.original_momentum = original_lr, original_momentum
        self.original_weight_decay, self.mia_seed = original_weight_decay, mia_seed
        #: The attached :class:`~callbacks.unlearning.UnlearningCallback` (set by its ``setup``), else ``None``.
        self.unlearning: Any = None
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

    def configure_models(self) -> None:
        """Build the classifier network."""
        self.model = build_classifier(self.arch, self.input_dim, self.num_classes, self.hidden, self.in_channels)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(N, classes)``."""
        return self.model(x)

    # ------------------------------------------------------------------------------------------------------------
    # Training.
    # ------------------------------------------------------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD with the unlearning recipe when a callback unlearns, else the original recipe."""
        params = [p for p in self.parameters() if p.requires_grad]
        if self.unlearning is not None:
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        return torch.optim.SGD(
            params, lr=self.original_lr, momentum=self.original_momentum, weight_decay=self.original_weight_decay
        )

    def compute_loss(self, batch: Any) -> dict[str, Tensor]:
        """Cross-entropy of an ``(x, y)`` batch (the original and Retrain recipes)."""
        x, y = batch
        logits = self.model(x)
        return {"loss": F.cross_entropy(logits, y), "acc": (logits.argmax(-1) == y).float().mean()}

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        """Delegate to the unlearning callback when one is attached, else the supervised step."""
        if self.unlearning is not None:
            return self.unlearning.unlearning_step(self, batch)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """``val/acc`` and ``val/loss`` on the test split."""
        x, y = batch
        logits = self.model(x)
        self.log("val/acc", 100.0 * (logits.argmax(-1) == y).float().mean(), batch_size=len(y), prog_bar=True)
        self.log("val/loss", F.cross_entropy(logits, y), batch_size=len(y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """``test/acc`` on the test split."""
        x, y = batch
        self.log("test/acc", 100.0 * (self.model(x).argmax(-1) == y).float().mean(), batch_size=len(y))

    # ------------------------------------------------------------------------------------------------------------
    # The unlearning protocol.
    # ------------------------------------------------------------------------------------------------------------
    def forget_loss(self, batch: Any) -> Tensor:
        """Mean CE on a forget batch, with the labels the original was trained on."""
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def retain_loss(self, batch: Any) -> Tensor:
        """Mean CE on a retain batch."""
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def concat_losses(self, forget: Any, retain: Any) -> tuple[Tensor, Tensor]:
        """One forward on ``[x_f; x_r]`` (BN statistics mixed, as in the library); mean CE of each part."""
        (xf, yf), (xr, yr) = forget, retain
        per = F.cross_entropy(self.model(torch.cat([xf, xr])), torch.cat([yf, yr]), reduction="none")
        return per[: len(yf)].mean(), per[len(yf) :].mean()

    def random_label_loss(self, batch: Any) -> Tensor:
        """SalUn: CE of a forget batch against uniform random labels different from the training labels."""
        x, y = batch
        return F.cross_entropy(self.model(x), random_other_labels(y, self.num_classes))

    def distill_loss(self, batch: Any, teacher: torch.nn.Module, temperature: float) -> Tensor:
        """SCRUB's ``KL(teacher || student)`` at temperature ``T``, scaled by ``T^2`` (batch mean)."""
        x, _ = batch
        with torch.no_grad():
            target = F.softmax(teacher(x) / temperature, -1)
        log_student = F.log_softmax(self.model(x) / temperature, -1)
        return F.kl_div(log_student, target, reduction="batchmean") * temperature**2

    def unlearning_metrics(self, datamodule: Any) -> dict[str, float]:
        """RA / FA / TA (%, top-1), ``FA_true`` (mislabeled mode), MIA-efficacy; directions in the names."""
        was_training = self.training
        loaders = datamodule.eval_dataloaders()
        out = {name: label_probabilities(self.model, loader, self.device) for name, loader in loaders.items()}
        self.train(was_training)
        acc = {name: 100.0 * float(c.float().mean()) for name, (_, c) in out.items()}
        metrics = {
            "retain_acc_higher_is_better": acc["retain"],
            "forget_acc_lower_is_better_vs_retrain": acc["forget"],
            "test_acc_higher_is_better": acc["test"],
            "mia_efficacy_higher_is_better_vs_retrain": svc_mia_efficacy(
                out["retain"][0], out["test"][0], out["forget"][0], seed=self.mia_seed
            ),
        }
        if "forget_true" in acc:
            metrics["forget_acc_true_labels_higher_is_better"] = acc["forget_true"]
        if "test_forget_class" in acc:
            metrics["test_forget_class_acc_lower_is_better_vs_retrain"] = acc["test_forget_class"]
        return metrics
