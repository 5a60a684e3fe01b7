"""Non-Asymptotic Guarantees for Average-Reward Q-Learning with Adaptive Stepsizes (NeurIPS 2025).

``AverageRewardQLearning`` runs asynchronous tabular average-reward Q-learning on ``R`` replica trajectories of one
MDP (``datamodules.decision.mdp_datamodule.TabularMDPDataModule``)::

    N[s,a] += 1;   step = α/(N[s,a] + h)            (adaptive: the method's local clock)
                          α_univ/(k + 1 + h)         (universal: one global clock; the published negative result)
                          α                          (constant)
    Q[s,a] += step·(r + max_a' Q[s',a'] − Q[s,a])   (no reward-rate subtraction), then optional centering.

With the adaptive stepsize ``E[sp(Q_k − Q*)²] = Õ(1/k)``; the universal stepsize converges to the wrong target Q̄
(computed exactly by the datamodule). Baselines on the same trajectories: ``rvi_q``, ``differential_q``,
``discounted_q``. Training is simulation: no optimizer, all state in buffers (``model.Q``, ``model.N``, ``model.k``,
``model.rbar``), ``k`` counts transitions (not ``trainer.global_step``, which counts chunks).

Example:
    >>> import torch
    >>> from zoo.avg_reward_q.module import AverageRewardQLearning
    >>> module = AverageRewardQLearning(n_states=2, n_actions=1, n_replicas=1, alpha=1.0, h=0.0)
    >>> chunk = torch.tensor([[[0, 0, 1.0, 1], [1, 0, 0.0, 0], [0, 0, 1.0, 1]]], dtype=torch.float64)
    >>> module.advance(chunk)
    >>> module.model.Q.flatten().tolist(), int(module.model.k)
    ([1.5, 1.0], 3)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from torch import Tensor

from zoo.avg_reward_q.model import (
    ALGORITHMS,
    STEPSIZES,
    Algorithm,
    Centering,
    QConfig,
    RviF,
    TabularQ,
    diagnostics,
    summarise,
)
from zoo.core import checks
from zoo.core.module import ZooModule

KHook = Callable[["AverageRewardQLearning", int], None]


class AverageRewardQLearning(ZooModule):
    """Average-reward Q-learning with adaptive (local-clock) stepsizes and its baselines (card ``avg_reward_q``).

    Args:
        algorithm: ``adaptive`` (the method), ``universal``, ``constant`` (stepsize variants of the method's update),
            or the baselines ``rvi_q``, ``differential_q``, ``discounted_q``.
        stepsize: the baselines' stepsize (``adaptive``, ``universal`` or ``constant``; ``null``: adaptive). For the
            three method variants it must be ``null`` or equal to ``algorithm``.
        alpha: α of the adaptive and constant stepsizes (card 3.0; the paper's constants are unverified).
        h: offset of the clocks (card 10; our reference simulation; ``h: 0`` matches MushroomRL).
        universal_alpha: α of the universal stepsize; ``null`` means ``S·A·alpha`` (the card's comparability rule).
        centering: ``none`` (v1, the NeurIPS algorithm), ``mean`` or ``ref`` (v2-style post-update centering;
            which c(·) the paper uses is unverified).
        ref_state: s0 of the reference pair (``ref`` centering, ``rvi_q`` with ``rvi_f: ref``).
        ref_action: a0 of the reference pair.
        rvi_f: ``rvi_q``'s f(Q): ``ref`` (Q(s0,a0)) or ``mean``.
        eta: ``differential_q``'s reward-rate stepsize ratio η.
        gamma: ``discounted_q``'s discount.
        q0: initial value of every Q entry.
        n_states: S, linked from the datamodule.
        n_actions: A, linked from the datamodule.
        n_replicas: R, linked from the datamodule.
    """

    monitor: ClassVar[str] = "train/span_err"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "avg_reward_q"
    trainable: ClassVar[bool] = False

    def __init__(self, algorithm: Algorithm = "adaptive", stepsize: Literal["adaptive", "universal", "constant"] |
                 None = None, alpha: float = 3.0, h: float = 10.0, universal_alpha: float | None = None,
                 centering: Centering = "none", ref_state: int = 0, ref_action: int = 0, rvi_f: RviF = "ref",
                 eta: float = 1.0, gamma: float = 0.99, q0: float = 0.0, n_states: int = 6, n_actions: int = 2,
                 n_replicas: int = 16) -> None:  # fmt: skip
        checks.choice(checks.model("algorithm"), algorithm, ALGORITHMS)
        if stepsize is not None:
            checks.choice(checks.model("stepsize"), stepsize, STEPSIZES)
        if algorithm in STEPSIZES:
            if stepsize not in (None, algorithm):
                raise ValueError(f"--model.init_args.stepsize={stepsize!r} contradicts algorithm={algorithm!r} "
                                 "(stepsize is for the baselines rvi_q, differential_q, discounted_q)")  # fmt: skip
            stepsize = algorithm
        elif stepsize is None:
            stepsize = "adaptive"
        checks.positive(checks.model("alpha"), alpha)
        checks.non_negative(checks.model("h"), h)
        if universal_alpha is not None:
            checks.positive(checks.model("universal_alpha"), universal_alpha)
        checks.choice(checks.model("centering"), centering, ("none", "mean", "ref"))
        checks.choice(checks.model("rvi_f"), rvi_f, ("ref", "mean"))
        checks.positive(checks.model("eta"), eta)
        checks.probability(checks.model("gamma"), gamma, open_high=True)
        checks.number(checks.model("q0"), q0)
        for key, value in (("n_states", n_states), ("n_actions", n_actions), ("n_replicas", n_replicas)):
            checks.integer(checks.model(key), value)
        checks.integer(checks.model("ref_state"), ref_state, low=0, high=n_states - 1)
        checks.integer(checks.model("ref_action"), ref_action, low=0, high=n_actions - 1)
        self.algorithm, self.stepsize = algorithm, stepsize
        self.n_states, self.n_actions, self.n_replicas = int(n_states), int(n_actions), int(n_replicas)
        self.q0 = float(q0)
        step_alpha = float(alpha)
        if stepsize == "universal":
            step_alpha = float(universal_alpha) if universal_alpha is not None else n_states * n_actions * alpha
        #: The update's settings (checked above, each under its own flag).
        self.cfg = QConfig(
            algorithm=algorithm,
            stepsize=stepsize,
            alpha=step_alpha,
            h=float(h),
            centering=centering,
            ref=(int(ref_state), int(ref_action)),
            rvi_f=rvi_f,
            eta=float(eta),
            gamma=float(gamma),
        )
        super().__init__()
        self.automatic_optimization = False
        #: Ground truths of the datamodule (``setup``), for logging.
        self.truth: dict[str, Any] | None = None
        #: (sorted k values, hook) pairs: the hook runs when the transition counter reaches each k (callbacks).
        self._k_hooks: list[tuple[list[int], KHook]] = []
        self.last_steps: tuple[float, float] = (float("nan"), float("nan"))

    def configure_models(self) -> None:
        """The replica tables as buffers (no parameters)."""
        self.model = TabularQ(self.n_replicas, self.n_states, self.n_actions, self.q0)

    def setup(self, stage: str) -> None:
        """Take the datamodule's ground truths and check its shapes against the buffers."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or not hasattr(dm, "truth"):
            return
        if dm.truth is None:
            dm.setup(stage)
        shape = (getattr(dm, "n_replicas", None), getattr(dm, "n_states", None), getattr(dm, "n_actions", None))
        if shape != tuple(self.model.Q.shape):
            raise ValueError(f"the datamodule has (n_replicas, n_states, n_actions)={shape} but the module's table is "
                             f"{tuple(self.model.Q.shape)} (link them from data or set them equal)")  # fmt: skip
        if getattr(dm, "ref", self.cfg.ref) != self.cfg.ref:
            raise ValueError(f"data ref (ref_state, ref_action)={dm.ref} != model {self.cfg.ref}: set them equal")
        self.truth = dm.truth

    def add_k_hook(self, ks: list[int], hook: KHook) -> None:
        """Call ``hook(module, k)`` when the transition counter reaches each of ``ks`` (chunks are split there)."""
        self._k_hooks.append((sorted({int(k) for k in ks if k > 0}), hook))

    def advance(self, chunk: Tensor) -> None:
        """Run one chunk (R, L, 4) through the update, splitting it at the registered hook points."""
        k = int(self.model.k)
        L = chunk.shape[1]
        stops = sorted({p for ks, _ in self._k_hooks for p in ks if k < p <= k + L})
        lo, hi, start = float("inf"), float("-inf"), 0
        for stop in sorted({*stops, k + L}):
            if stop - k > start:
                a, b = self.model.update(chunk[:, start : stop - k], self.cfg)
                lo, hi = min(lo, a), max(hi, b)
                start = stop - k
                self.last_steps = (lo, hi)  # what a hook at this stop logs: this chunk's steps so far
            for ks, hook in self._k_hooks:
                if stop in ks:
                    hook(self, stop)

    def metrics(self) -> dict[str, float]:
        """Replica aggregates of the span diagnostics, visit counts and the last realised stepsizes."""
        out: dict[str, float] = {"k": float(self.model.k)}
        if self.truth is not None:
            out.update(summarise(diagnostics(self.model.Q, self.truth, self.cfg.centering, self.cfg.ref)))
        out["visits_min"], out["visits_max"] = float(self.model.N.min()), float(self.model.N.max())
        out["step_min"], out["step_max"] = self.last_steps
        if self.algorithm == "differential_q":
            out["rbar"] = float(self.model.rbar.mean())
        return out

    def compute_loss(self, batch: Any) -> None:
        """Nothing to differentiate."""
        return None

    def training_step(self, batch: Tensor, batch_idx: int) -> None:
        """Apply the chunk's transitions sequentially (vectorised over replicas) and log the diagnostics."""
        self.advance(batch)
        self.count_step()  # global_step counts chunks; model.k counts transitions
        if self._logs_this_step():
            values = {f"train/{k}": v for k, v in self.metrics().items() if v == v}  # NaN (no centering) dropped
            self.log_dict(values, batch_size=1)
        return None

    def on_train_epoch_end(self) -> None:
        """Log the diagnostics at the end of every epoch (checkpoint monitors always find ``train/span_err``)."""
        values = {f"train/{k}": v for k, v in self.metrics().items() if v == v}
        self.log_dict(values, batch_size=1)
