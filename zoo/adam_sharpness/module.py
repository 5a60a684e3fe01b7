"""Adam Reduces a Unique Form of Sharpness: Theoretical Insights Near the Minimizer Manifold (Li, Wen, Lyu, 2025).

Near the manifold of minimisers, label-noise SGD drifts to minimise tr(H) while Adam minimises tr(diag(H)^{1/2}); on a
diagonal linear network w = u⊙u − v⊙v for sparse regression that is ‖w‖₁ for SGD and Σ√|w_i| (sparser) for Adam.
``DiagonalLinearNet`` trains R replicas (seeds side by side) full batch with fresh label noise every optimizer step
(``callbacks.label_noise.LabelNoiseCallback``) under one of the ``AdaptiveGM`` presets; ``sharpness_closure`` gives
``callbacks.sharpness.SharpnessLogger`` the clean-label loss.

Example:
    >>> import torch
    >>> from zoo.adam_sharpness.module import DiagonalLinearNet
    >>> net = DiagonalLinearNet(input_dim=3, n_replicas=1, inner_steps=2, optimizer="sgd", lr=0.1)
    >>> float(net.model.weights().detach().abs().max())
    0.0
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from callbacks.label_noise import LabelNoise
from zoo.adam_sharpness.model import (
    DiagNet,
    gauss_newton_diag,
    heldout_mse,
    preconditioner_check,
    replica_losses,
    sparsity,
    support_recovered,
)
from zoo.adam_sharpness.optim import OPTIMIZERS, beta2_schedule, make_optimizer
from zoo.core import checks
from zoo.core.module import ZooModule

Optimizer = Literal["sgd", "adam_nobc", "rmsprop", "adame", "adalayer", "adam_mini", "torch_adam"]


class DiagonalLinearNet(ZooModule):
    """Diagonal linear network on sparse regression, label noise, an adaptive optimizer (card ``adam_sharpness``).

    Args:
        input_dim: d, the input dimension (linked from the datamodule).
        n_replicas: replicas R (linked from the datamodule): seeds side by side, one parameter row each.
        init_scale: u = v = init_scale·g, g ~ N(0, I_d) (w = 0 at init).
        init_seed: seed of replica 0's init draw (replica r: ``init_seed + r``).
        inner_steps: full-batch optimizer steps per ``training_step`` (each with fresh noise).
        optimizer: preset: ``sgd``, ``adam_nobc``, ``rmsprop``, ``adame``, ``adalayer``, ``adam_mini`` (pairs
            {u_i, v_i}), ``torch_adam`` (``torch.optim.Adam``, bias-corrected comparator).
        lr: learning rate.
        beta1: first-moment decay (``null``: the preset's, 0.9 or 0 for rmsprop).
        C: beta2 = 1 − C·lr^scheme.
        scheme: see ``C``.
        exponent: e of ``v^e`` (``null``: the preset's, 0.5; AdamE sets it).
        eps: added outside the power.
    """

    monitor: ClassVar[str] = "val/test_mse"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "adam_sharpness"

    def __init__(self, input_dim: int = 40, n_replicas: int = 1, init_scale: float = 0.1, init_seed: int = 0,
                 inner_steps: int = 100, optimizer: Optimizer = "adam_nobc", lr: float = 0.01,
                 beta1: float | None = None, C: float = 10.0, scheme: float = 2.0, exponent: float | None = None,
                 eps: float = 1e-6) -> None:  # fmt: skip
        for key, value in (("input_dim", input_dim), ("n_replicas", n_replicas), ("inner_steps", inner_steps)):
            checks.integer(checks.model(key), value)
        checks.positive(checks.model("init_scale"), init_scale)
        checks.integer(checks.model("init_seed"), init_seed, low=0)
        checks.choice(checks.model("optimizer"), optimizer, OPTIMIZERS)
        checks.positive(checks.model("lr"), lr)
        if beta1 is not None:
            checks.number(checks.model("beta1"), beta1, 0.0, 1.0, open_high=True)
        checks.positive(checks.model("C"), C)
        checks.positive(checks.model("scheme"), scheme)
        if exponent is not None:
            checks.non_negative(checks.model("exponent"), exponent)
        checks.non_negative(checks.model("eps"), eps)
        if exponent is not None and optimizer in ("sgd", "torch_adam"):
            raise ValueError(f"{checks.model('exponent')}={exponent!r} does not apply to optimizer={optimizer!r} (it "
                             "sets v^e of the AdaptiveGM presets; use adame)")  # fmt: skip
        if beta1 is not None and optimizer == "sgd":
            raise ValueError(f"{checks.model('beta1')}={beta1!r} does not apply to optimizer='sgd' (plain SGD has no "
                             "momentum; use adame with exponent 0 for momentum)")  # fmt: skip
        if optimizer != "sgd":
            try:
                beta2_schedule(lr, C, scheme)
            except ValueError as exc:
                raise ValueError(f"{checks.model('C')}={C!r}, scheme={scheme!r}, lr={lr!r}: {exc}") from None
        self.d, self.n_replicas, self.init_scale, self.init_seed = input_dim, n_replicas, init_scale, init_seed
        self.inner_steps, self.optimizer_name = inner_steps, optimizer
        self.opt_args = {"beta1": beta1, "C": C, "scheme": scheme, "exponent": exponent, "eps": eps}
        super().__init__(lr=lr)
        self.automatic_optimization = False
        #: Label noise installed by ``LabelNoiseCallback`` (``None``: clean labels).
        self.label_noise: LabelNoise | None = None
        #: Optimizer steps taken (``trainer.global_step`` counts batches of ``inner_steps``).
        self.optimizer_steps = 0
        #: Replicas along the parameters' first dimension (read by ``SharpnessLogger``).
        self.sharpness_replicas = n_replicas
        self._clean: tuple[Tensor, Tensor] | None = None
        #: [optimizer steps, clean loss of each replica] after every ``training_step`` (the reproduction's curves).
        self.loss_curve: list[list[float]] = []

    def configure_models(self) -> None:
        """The replica diag-nets."""
        seeds = [self.init_seed + r for r in range(self.n_replicas)]
        self.model = DiagNet(self.d, self.n_replicas, self.init_scale, seeds)

    def pair_blocks(self) -> list[list[int]]:
        """Adam-mini blocks {u_i, v_i} (our choice for the diag-net; see the method page)."""
        return [list(range(self.d)), list(range(self.d))]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """The preset over [u, v] with the replica dimension kept apart."""
        return make_optimizer(self.optimizer_name, [self.model.u, self.model.v], self.lr, blocks=self.pair_blocks(),
                              batch_dims=1, **self.opt_args)  # fmt: skip

    @property
    def beta2(self) -> float | None:
        """beta2 from the initial lr (``None`` for SGD)."""
        return None if self.optimizer_name == "sgd" else beta2_schedule(self.lr, self.opt_args["C"],
                                                                         self.opt_args["scheme"])  # fmt: skip

    def compute_loss(self, batch: Any) -> dict[str, Tensor]:
        """Clean-label loss summed over replicas (logging; training runs in :meth:`training_step`)."""
        Z, y = batch
        return {"loss": replica_losses(self.model(Z), y).sum()}

    def train_chunk(self, Z: Tensor, y: Tensor, optimizer: torch.optim.Optimizer, steps: int) -> Tensor:
        """``steps`` full-batch optimizer steps, each on fresh noisy labels; returns the last noisy loss per replica."""
        noisy = self.label_noise.noisy(y, steps) if self.label_noise is not None else None
        loss = torch.zeros(())
        for t in range(steps):
            target = y if noisy is None else noisy[t]
            optimizer.zero_grad(set_to_none=False)
            losses = replica_losses(self.model(Z), target)
            losses.sum().backward()
            optimizer.step()
            loss = losses.detach()
        self.optimizer_steps += steps
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """``inner_steps`` optimizer steps; the last goes through Lightning (it counts ``global_step``)."""
        Z, y = batch
        self._clean = (Z, y)
        opt = self.optimizers()
        raw = opt.optimizer
        self.train_chunk(Z, y, raw, self.inner_steps - 1)
        target = y if self.label_noise is None else self.label_noise.noisy(y, 1)[0]
        opt.zero_grad()
        losses = replica_losses(self.model(Z), target)
        self.manual_backward(losses.sum())
        opt.step()
        self.optimizer_steps += 1
        with torch.no_grad():
            clean = replica_losses(self.model(Z), y)
        self.loss_curve.append([float(self.optimizer_steps), *clean.tolist()])
        if self._logs_this_step():
            values = {"train/loss": losses.detach().mean(), "train/clean_loss": clean.mean(),
                      "train/optimizer_steps": float(self.optimizer_steps)}  # fmt: skip
            if self.beta2 is not None:  # from the initial lr (card)
                values["train/beta2"] = self.beta2
            self.log_dict(values, batch_size=1)
        return None

    def sharpness_closure(self) -> Tensor:
        """Clean-label training loss summed over replicas (the Hessian is block diagonal over replicas)."""
        if self._clean is None:
            self._clean = self._data_batch()
        Z, y = self._clean
        return replica_losses(self.model(Z), y).sum()

    def _data_batch(self) -> tuple[Tensor, Tensor]:
        dm = self.trainer.datamodule if self._trainer is not None else None
        if dm is None or getattr(dm, "train", None) is None:
            if dm is not None:
                dm.setup("fit")
        if dm is None or dm.train is None:
            raise RuntimeError("DiagonalLinearNet.sharpness_closure: no training data yet (run a step first)")
        return dm.train

    def replica_metrics(self, Z_test: Tensor, y_test: Tensor, w_star: Tensor) -> dict[str, list[float]]:
        """Per replica: test MSE, ‖w−w*‖², Σ√|w|, ‖w‖₁, nbig, support recovery, clean train loss."""
        with torch.no_grad():
            w = self.model.weights()
            out = {"test_mse": heldout_mse(w, Z_test, y_test), **sparsity(w)}
            if not torch.isnan(w_star).any():
                out["w_err"] = (w - w_star).pow(2).sum(-1)
                out["support"] = support_recovered(w, w_star)
            if self._clean is not None:
                out["clean_loss"] = replica_losses(self.model(self._clean[0]), self._clean[1])
        return {k: v.tolist() for k, v in out.items()}

    def preconditioner(self, delta: float) -> list[dict[str, float]]:
        """Per replica: corr and median ratio of the optimizer's v against (δ²/n)·diag(H) (card C3).

        H is the card's (1/n)·Σ_i ∇f_i ∇f_iᵀ (:func:`~zoo.adam_sharpness.model.gauss_newton_diag`).
        """
        opt = self.optimizers().optimizer if self._trainer is not None else None
        if opt is None or not hasattr(opt, "block_v") or self._clean is None:
            return []
        Z, y = self._clean
        with torch.no_grad():
            hu, hv = gauss_newton_diag(self.model.u, self.model.v, Z)
            vu, vv = opt.block_v()
            return [preconditioner_check(torch.cat([vu[r], vv[r]]), torch.cat([hu[r], hv[r]]), delta, Z.shape[1])
                    for r in range(self.n_replicas)]  # fmt: skip

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Test-set metrics (means over replicas)."""
        values = self.replica_metrics(*batch)
        self.log_dict({f"val/{k}": sum(v) / len(v) for k, v in values.items()}, batch_size=1)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """As validation, under ``test/``."""
        values = self.replica_metrics(*batch)
        self.log_dict({f"test/{k}": sum(v) / len(v) for k, v in values.items()}, batch_size=1)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the optimizer-step counter."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["optimizer_steps"] = self.optimizer_steps

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the optimizer-step counter."""
        super().on_load_checkpoint(checkpoint)
        self.optimizer_steps = int(checkpoint.get("optimizer_steps", 0))
