"""Emergence and scaling laws in SGD learning of shallow neural networks (Ren, Nichani, Wu, Lee; arXiv 2504.19983).

``TwoLayerHermiteStudent`` trains f(x) = Σ_j a_j·σ(⟨w_j, x⟩) with unit rows w_j by Riemannian (projected and
renormalised) gradient steps on the additive Hermite teacher of
``datamodules.gaussian_teacher.datamodule.GaussianAdditiveTeacherDataModule``: the exact population loss (default,
float64) or online/finite-sample minibatches. Each direction v_p is picked up at a sharp time τ_p ∝ p^β; their
juxtaposition gives a smooth scaling law. Seeds are vectorised (a leading replica dimension R); optimisation is
manual (no torch optimizer): each ``training_step`` runs ``inner_steps`` population updates (or one per minibatch of
the batch's chunk). The second layer is ``fixed`` (default), ``trained`` (``lr_a``), ``two_timescale``
(``lr_a_ratio``·lr) or ``refit`` (fixed in training, least squares at evaluation).

Example:
    >>> import torch
    >>> from datamodules.gaussian_teacher.teacher import make_teacher
    >>> from zoo.emergence.module import TwoLayerHermiteStudent
    >>> student = TwoLayerHermiteStudent(m=4, input_dim=20, n_replicas=2, inner_steps=10)
    >>> V, a_star = make_teacher(20, 2, 1.5, [0, 1])
    >>> student.set_teacher(V, a_star)
    >>> loss = student.advance(None)  # 10 population updates; the exact loss per replica
    >>> unit = bool(torch.allclose(student.model.W.norm(dim=-1), torch.ones(2, 4, dtype=torch.float64)))
    >>> student.updates, tuple(student.model.W.shape), unit
    (10, (2, 4, 20), True)
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from datamodules.gaussian_teacher.hermite import ACTIVATIONS, Activation, check_mix, coefficients
from zoo.core import checks
from zoo.core.module import ZooModule
from zoo.emergence.model import (
    SECOND_LAYERS,
    HermiteStudent,
    Observer,
    StepConfig,
    degree,
    minibatch_step,
    overlaps,
    population_loss,
    population_steps,
    refit,
    refit_on_data,
)

SecondLayer = Literal["fixed", "trained", "two_timescale", "refit"]


class TwoLayerHermiteStudent(ZooModule):
    """Two-layer Hermite student on the sphere (card ``emergence``).

    Args:
        m: width (number of neurons).
        input_dim: d, linked from the datamodule.
        activation: the student's σ; must equal the datamodule's (``he4``, ``he6``, ``hermite_mix``, ``raw_z4``).
        mix_coeffs: c_k on h_k for ``hermite_mix`` (index = degree), as the datamodule's.
        second_layer: ``fixed`` | ``trained`` (step ``lr_a``) | ``two_timescale`` (step ``lr_a_ratio``·lr) | ``refit``
            (fixed in training; least squares at evaluation and in the reported ``loss_refit``).
        lr: first-layer step size (card 0.2).
        lr_a: second-layer step of ``trained`` (card's collapse ablation: 0.01·lr = 0.002).
        lr_a_ratio: lr_a/lr of ``two_timescale`` (reconstruction: see README).
        a_init: initial a_j (card 0.3).
        population_mode: exact population GD (datamodule in population mode) or minibatch SGD (online/finite).
        inner_steps: population updates per ``training_step``.
        n_replicas: R, linked from the datamodule.
        init_seed: replica r draws W uniformly on the sphere from ``init_seed + r``.
        ridge: ridge of the refit least squares (card 1e-8).
    """

    monitor: ClassVar[str] = "train/loss"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "emergence"
    trainable: ClassVar[bool] = False

    def __init__(self, m: int = 16, input_dim: int = 400, activation: Activation = "he4",
                 mix_coeffs: list[float] | None = None, second_layer: SecondLayer = "fixed", lr: float = 0.2,
                 lr_a: float = 0.002, lr_a_ratio: float = 0.01, a_init: float = 0.3, population_mode: bool = True,
                 inner_steps: int = 100, n_replicas: int = 1, init_seed: int = 0,
                 ridge: float = 1e-8) -> None:  # fmt: skip
        checks.integer(checks.model("m"), m)
        checks.integer(checks.model("input_dim"), input_dim)
        checks.choice(checks.model("activation"), activation, ACTIVATIONS)
        if activation == "hermite_mix":
            check_mix(checks.model("mix_coeffs"), mix_coeffs)
        checks.choice(checks.model("second_layer"), second_layer, SECOND_LAYERS)
        checks.positive(checks.model("lr"), lr)
        checks.positive(checks.model("lr_a"), lr_a)
        checks.positive(checks.model("lr_a_ratio"), lr_a_ratio)
        checks.number(checks.model("a_init"), a_init)
        checks.integer(checks.model("inner_steps"), inner_steps)
        checks.integer(checks.model("n_replicas"), n_replicas)
        checks.integer(checks.model("init_seed"), init_seed, low=0)
        checks.non_negative(checks.model("ridge"), ridge)
        self.m, self.input_dim, self.n_replicas, self.init_seed = m, input_dim, n_replicas, init_seed
        self.activation, self.mix_coeffs, self.second_layer = activation, mix_coeffs, second_layer
        self.coeffs = coefficients(activation, mix_coeffs)
        self.a_init, self.population_mode, self.inner_steps, self.ridge = a_init, population_mode, inner_steps, ridge
        step_a = {"trained": lr_a, "two_timescale": lr_a_ratio * lr}.get(second_layer, 0.0)
        #: The update's settings (the teacher's activation is checked equal to the student's in ``setup``).
        self.cfg = StepConfig(lr=float(lr), lr_a=float(step_a), coeffs=self.coeffs, teacher_coeffs=self.coeffs)
        #: k*, the information exponent (the power of r_p and τ̂).
        self.degree = degree(self.coeffs)
        super().__init__(lr=lr)
        self.automatic_optimization = False
        #: Called with the overlaps M after every update, in blocks (``zoo.emergence.model.Observer``).
        self.update_observers: list[Observer] = []
        self._teacher: tuple[Tensor, Tensor] | None = None
        self._sample: dict[str, Tensor] | None = None
        self._last_loss: Tensor | None = None

    def configure_models(self) -> None:
        """W uniform on the sphere (R, m, d), a = a_init, and the update counter, all in float64 buffers."""
        self.model = HermiteStudent(self.n_replicas, self.m, self.input_dim, self.coeffs, self.a_init, self.init_seed)
        self.model.register_buffer("t", torch.zeros((), dtype=torch.int64))

    @property
    def updates(self) -> int:
        """Updates applied so far (population steps or minibatch steps)."""
        return int(self.model.t)

    def set_teacher(self, V: Tensor | None, a_star: Tensor | None) -> None:
        """Use the teacher (V (R, P, d), a* (R, P)); ``None`` when only a sample is known."""
        if V is None or a_star is None:
            self._teacher = None
            return
        if tuple(V.shape[::2]) != (self.n_replicas, self.input_dim):
            raise ValueError(f"teacher V has shape {tuple(V.shape)}; the module expects (n_replicas, P, input_dim) = "
                             f"({self.n_replicas}, P, {self.input_dim}) (link them from data or set them "
                             "equal)")  # fmt: skip
        self._teacher = (V.to(self.model.W), a_star.to(self.model.W))

    def teacher(self) -> tuple[Tensor, Tensor] | None:
        """(V, a*) or ``None``."""
        return self._teacher

    def setup(self, stage: str) -> None:
        """Take the datamodule's teacher (and sample), checking activation and mode against this module."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or not hasattr(dm, "mode"):
            return
        if (dm.activation, dm.mix_coeffs if dm.activation == "hermite_mix" else None) != (
                self.activation, self.mix_coeffs if self.activation == "hermite_mix" else None):  # fmt: skip
            raise ValueError(f"--model.init_args.activation={self.activation!r} differs from the data's "
                             f"activation={dm.activation!r} (and mix_coeffs): set them equal")  # fmt: skip
        if self.population_mode and dm.mode != "population":
            raise ValueError(f"--model.init_args.population_mode=true needs population data; the datamodule is "
                             f"{dm.mode} (set --data.init_args.online=false, n_train=null, no "
                             "dataset_path)")  # fmt: skip
        if not self.population_mode and dm.mode == "population":
            raise ValueError("--model.init_args.population_mode=false needs samples: set --data.init_args.online=true "
                             "or n_train")  # fmt: skip
        self.set_teacher(dm.V, dm.a_star)
        self._sample = dm.sample

    def advance(self, batch: Any) -> Tensor | None:
        """Apply one batch's updates (``inner_steps`` population steps, or one per minibatch); return the loss (R,).

        In population mode the loss is the exact L(W, a) after the updates, computed only on logging steps (``None``
        otherwise).
        """
        t = self.updates
        with torch.no_grad():
            if self.population_mode:
                if self._teacher is None:
                    raise RuntimeError("population_mode needs a teacher (V, a*): the datamodule has none")
                V, a_star = self._teacher
                population_steps(self.model, V, a_star, self.cfg, self.inner_steps, t, self.update_observers)
                self.model.t += self.inner_steps
                if not self._logs_this_step():
                    return None
                return population_loss(self.model.W, self.model.a, V, a_star, self.coeffs)
        x, y = batch["x"].to(self.model.W), batch["y"].to(self.model.W)
        losses = []
        for i in range(x.shape[0]):
            self._observe(t + i)
            losses.append(minibatch_step(self.model, x[i], y[i], self.cfg))
        self.model.t += x.shape[0]
        self._observe(t + x.shape[0])
        return torch.stack(losses).mean(0)

    def _observe(self, t: int) -> None:
        if self.update_observers and self._teacher is not None:
            M = overlaps(self.model.W, self._teacher[0]).abs().amax(-2).unsqueeze(0)
            for obs in self.update_observers:
                obs(M, t)

    def eval_a(self) -> Tensor:
        """The second layer used at evaluation: the refit one for ``second_layer: refit``, else the current a."""
        if self.second_layer != "refit":
            return self.model.a
        return self.refit_a()

    def refit_a(self) -> Tensor:
        """Least-squares a for the current W: population closed form with a teacher, else on the training sample."""
        if self._teacher is not None:
            return refit(self.model.W, *self._teacher, self.coeffs, ridge=self.ridge)
        if self._sample is not None:
            return refit_on_data(self.model.W, self._sample["X"], self._sample["y"], self.coeffs, self.ridge)
        raise RuntimeError("refit needs a teacher or a training sample")

    def losses(self) -> dict[str, Tensor]:
        """Exact population losses per replica (R,): ``loss_fixed`` (current a) and ``loss_refit`` (least-squares a)."""
        if self._teacher is None:
            return {}
        V, a_star = self._teacher
        with torch.no_grad():
            return {"loss_fixed": population_loss(self.model.W, self.model.a, V, a_star, self.coeffs),
                    "loss_refit": population_loss(self.model.W, self.refit_a(), V, a_star, self.coeffs)}  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        """f(x) (R, B) for x (R, B, d), with the evaluation second layer."""
        return self.model(x.to(self.model.W), self.eval_a())

    def compute_loss(self, batch: Any) -> None:
        """Nothing for a torch optimizer (manual updates in ``training_step``)."""
        return None

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """Run the batch's updates; on logging steps log the objective and the exact losses (teacher known)."""
        loss = self.advance(batch)
        self.count_step()
        if loss is not None:
            self._last_loss = loss
        if self._logs_this_step():
            self._log_values()
        return None

    def _log_values(self) -> None:
        losses = self.losses()
        loss = losses["loss_fixed"] if self.population_mode and losses else self._last_loss
        values = {"train/updates": float(self.updates)}
        if loss is not None:
            values["train/loss"] = float(loss.mean())
        values.update({f"train/{k}": float(v.mean()) for k, v in losses.items()})
        self.log_dict(values, batch_size=1)

    def on_train_epoch_end(self) -> None:
        """Log the objective and the exact losses at the end of the run (``monitor`` is always found)."""
        self._log_values()
