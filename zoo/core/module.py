"""Base LightningModule of the zoo."""

from __future__ import annotations

import importlib
import inspect
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import torch
from lightning.pytorch import LightningModule
from torch import Tensor

from zoo.core import checks
from zoo.core.divergence import LossGuard
from zoo.core.pretrained import load_pretrained
from zoo.core.structure import STRUCTURE_KEY, apply_structure

# ZooModule overrides transfer_batch_to_device only to skip the CPU walk; Lightning's notice about it is noise.
warnings.filterwarnings("ignore", message=r"You have overridden `transfer_batch_to_device`")

#: An extra objective term added by a callback: ``term(module, batch, out) -> scalar``.
LossTerm = Callable[["ZooModule", Any, dict[str, Tensor]], Tensor]


class ZooModule(LightningModule, ABC):
    """Base class of every zoo method.

    Subclasses implement :meth:`configure_models` (build ``self.model``), optionally :meth:`configure_losses` and
    :meth:`configure_metrics`, and :meth:`compute_loss`. The inherited :meth:`training_step` sums the method's loss
    and the extra terms callbacks register in ``self.extra_loss_terms``, logging each under ``train/``.

    Args:
        lr: learning rate of the default Adam optimiser.
        weight_decay: weight decay of the default optimiser.
        pretrained: a local Lightning checkpoint, plain state dict or Hugging Face folder to fine-tune from.
    """

    #: Metric watched by checkpoints, early stopping and schedulers.
    monitor: ClassVar[str] = "val/loss"
    #: "min" or "max" for ``monitor``.
    mode: ClassVar[Literal["min", "max"]] = "min"
    #: Short name of the method or baseline (``zoo fit`` prints it over the final metrics).
    name: ClassVar[str] = "zoo"
    #: False for training-free methods: ``configure_optimizers`` then returns ``None``.
    trainable: ClassVar[bool] = True

    def __init__(self, *, lr: float = 1e-3, weight_decay: float = 0.0, pretrained: str | None = None) -> None:
        # Checked here, naming the option, before any data is built (torch would say "Invalid learning rate" later).
        checks.non_negative(checks.model("lr"), lr)
        checks.non_negative(checks.model("weight_decay"), weight_decay)
        super().__init__()
        # Collects the init args of the whole subclass chain; every one of them must be a primitive.
        self.save_hyperparameters()
        # Kept as attributes too: under LightningCLI, hparams hold only the subclass's own signature.
        self.lr, self.weight_decay = lr, weight_decay
        self._drop_foreign_hparams()
        self.extra_loss_terms: dict[str, LossTerm] = {}
        #: Set by a callback that drives the step itself (manual optimisation, e.g. pruning scores): when not ``None``,
        #: :meth:`training_step` returns ``step_override(self, batch, batch_idx)``.
        self.step_override: Callable[[ZooModule, Any, int], Tensor | None] | None = None
        #: Bookkeeping of a structural change of ``self.model`` (e.g. a pruned-and-merged network), primitives only;
        #: written into checkpoints so loading rebuilds the changed shapes first (see ``zoo.core.structure``).
        self.structure: dict[str, Any] | None = None
        #: Stops the run with one line when the training loss becomes non-finite (``zoo.core.divergence``).
        self._divergence = LossGuard()
        self.configure_models()
        self.configure_losses()
        self.configure_metrics()
        if pretrained is not None:
            load_pretrained(self.model, pretrained, on_structure=lambda s: setattr(self, "structure", s))

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls, checkpoint_path: str, *args: Any, **kwargs: Any
    ) -> ZooModule:
        """Load a checkpoint, rebuilding the subclass it was saved from (``ZooModule.load_from_checkpoint`` works).

        The checkpoint carries the weights, so the ``pretrained`` source it was fine-tuned from (a file on another
        machine, a recipe not trained here) is not read again unless ``pretrained=`` is passed explicitly.
        """
        target = _checkpoint_class(checkpoint_path, cls)
        if target is not cls:
            return target.load_from_checkpoint(checkpoint_path, *args, **kwargs)
        kwargs.setdefault("weights_only", True)
        if _saved_hparams(checkpoint_path).get("pretrained") is not None:
            kwargs.setdefault("pretrained", None)
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    def _drop_foreign_hparams(self) -> None:
        """Drop linked values this class does not take (e.g. ``input_dim``), so checkpoints re-instantiate it."""
        params = inspect.signature(type(self).__init__).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        for key in [k for k in self.hparams if not k.startswith("_") and k not in params]:
            del self.hparams[key]

    @abstractmethod
    def configure_models(self) -> None:
        """Build ``self.model`` (a plain ``nn.Module`` from the method's ``model.py``)."""

    def configure_losses(self) -> None:
        """Build loss objects (most methods use plain functions from ``model.py``)."""

    def configure_metrics(self) -> None:
        """Build metric objects."""

    @abstractmethod
    def compute_loss(self, batch: Any) -> dict[str, Tensor] | None:
        """Return ``{"loss": scalar, ...}`` for a training batch, or ``None`` to skip the batch."""

    def batch_size_of(self, batch: Any) -> int:
        """Number of examples in ``batch``, for logging."""
        if isinstance(batch, dict):
            batch = next(iter(batch.values()))
        if isinstance(batch, list | tuple):
            batch = batch[0]
        return int(batch.shape[0]) if isinstance(batch, Tensor) else 1

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        """Sum the method's loss and the callbacks' extra terms, logging each (or run ``step_override``)."""
        if self.step_override is not None:
            return self.step_override(self, batch, batch_idx)
        out = self.compute_loss(batch)
        if out is None:
            return None
        size = self.batch_size_of(batch)
        loss = out["loss"]
        logged = {}
        for key, term in self.extra_loss_terms.items():
            logged[f"train/{key}"] = value = term(self, batch, out)
            loss = loss + value
        logs = self._logs_this_step()
        self._divergence.observe(loss, self.global_step, self.current_epoch, type(self).__name__,
                                 self.divergence_knobs, sync=logs)  # fmt: skip
        if logs:
            for key, value in out.items():
                if key != "loss" and isinstance(value, Tensor) and value.numel() == 1:
                    logged[f"train/{key}"] = value
            self.log_dict(logged, batch_size=size)
            self.log("train/loss", loss, batch_size=size, prog_bar=True)
        return loss

    def divergence_knobs(self) -> str:
        """What to lower when the training loss diverges: the learning-rate options of this module, as set."""
        names = [k for k in self.hparams if k == "lr" or k.endswith(("_lr", "learning_rate"))]
        if not names:
            return f"{checks.model('lr')}={self.lr!r}"
        return " or ".join(f"{checks.model(k)}={self.hparams[k]!r}" for k in names)

    def on_train_epoch_end(self) -> None:
        """Read back a non-finite loss recorded on an accelerator since the last logged step (see ``training_step``)."""
        self._divergence.flush(type(self).__name__, self.divergence_knobs)

    def _logs_this_step(self) -> bool:
        """Whether the loggers write this step (every ``log_every_n_steps``).

        ``self.log`` costs about 1 ms a call, so per-step training values are handed over only when written.
        """
        connector = getattr(getattr(self, "_trainer", None), "_logger_connector", None)
        return bool(getattr(connector, "should_update_logs", True))

    def count_step(self) -> None:
        """Advance ``global_step`` by one from a manual, optimizer-free ``training_step``.

        For ``trainable = False`` with ``automatic_optimization = False``: a no-op step of Lightning's mock optimizer,
        so ``max_steps``, checkpoints and logging intervals count training steps. Nothing happens outside a Trainer.
        """
        if self._trainer is not None:
            self.optimizers().step()

    def configure_optimizers(self) -> Any:
        """Adam over the trainable parameters with the primitive ``lr`` and ``weight_decay``."""
        if not self.trainable:
            return None
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay, **adam_kernel(params))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store :attr:`structure` (when set) so a load rebuilds the changed shapes before the weights."""
        if self.structure is not None:
            checkpoint[STRUCTURE_KEY] = self.structure

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Rebuild a structurally changed ``self.model`` (Lightning calls this before ``load_state_dict``)."""
        structure = checkpoint.get(STRUCTURE_KEY)
        if structure is None or structure == self.structure:
            return
        if self.structure is not None:  # another change already applied: back to the configured network first
            self.configure_models()
        apply_structure(self.model, structure)
        self.structure = structure

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Skip Lightning's recursive walk over the batch when it already lives on the CPU device."""
        if device.type == "cpu":
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)


def adam_kernel(params: list[Tensor]) -> dict[str, bool]:
    """``{"fused": True}`` when every tensor is a float on CPU/CUDA, else ``{"foreach": True}`` (Adam/AdamW kwargs).

    One fused kernel over all tensors: on one CPU thread, CRAFT's 146k parameters took 0.39 ms per step fused,
    1.12 ms with foreach and 2.09 ms with the default per-tensor loop.
    """
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return {"fused": True} if fused else {"foreach": True}


def _saved_hparams(checkpoint_path: str) -> dict[str, Any]:
    """The ``hyper_parameters`` a checkpoint stores (empty when it has none)."""
    blob = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    return dict(blob.get("hyper_parameters") or {})


def _checkpoint_class(checkpoint_path: str, base: type[ZooModule]) -> type[ZooModule]:
    """The class named by a checkpoint's ``_class_path`` hparam (LightningCLI writes it), checked against ``base``."""
    class_path = _saved_hparams(checkpoint_path).get("_class_path")
    if not class_path:
        return base
    module_name, _, name = class_path.rpartition(".")
    target = getattr(importlib.import_module(module_name), name, None)
    if not (isinstance(target, type) and issubclass(target, base)):
        raise ValueError(f"{checkpoint_path}: _class_path={class_path!r} is not a subclass of {base.__name__}")
    return target
