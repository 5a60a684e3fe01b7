"""Bayesian Optimisation with Preference Exploration using a Monotone Neural Network Ensemble (NeurIPS 2025).

Two LightningModules:

- :class:`BOPEModule`: one BOPE replication (``zoo.bope_monne.loop``) as a Lightning run, **one stage per epoch**:
  stage 0 draws the ``n0`` Sobol designs and makes the first random comparison; every stage then makes its PE
  comparisons (``n_pe_first`` at stage 0, ``n_pe`` later), refitting the utility model after each, and evaluates one
  qNEIUU batch of ``q`` designs; the run stops after ``n_batches`` stages. ``arm`` picks the utility model:
  ``monne`` (the method; ``monotone: false`` is the non-monotone ablation, ``members: 1`` the single network,
  ``pe_acqf: random_f`` random PE pairs), ``pairwise_gp`` (Lin et al.'s BOPE: PairwiseGP + analytic EUBO),
  ``oracle`` (qLogNEI on the true utility) or ``random`` (Sobol designs, same budget). The state (designs, outcomes,
  shown outcomes, comparisons, the ensemble's weights) is in the checkpoint and every draw of a stage is seeded from
  ``(seed, stage)``, so a resumed run repeats the uninterrupted one.
- :class:`MoNNEUtilityModule`: the ensemble fitted to a decision maker's recorded comparisons (hinge loss, full-batch
  Adam, one step per epoch), validated by held-out pairwise accuracy; writes ``utilities.csv``.

Logged per stage (``train/``): ``u`` (the monitor: normalised utility U of the best evaluated design), ``regret``,
``evaluations`` and, for the preference arms, ``pe_u`` (U of the PE-stage recommendation ``argmax score(μ_f(x))``),
``acc``/``tau`` (pairwise accuracy and Kendall τ of the surrogate on the task's held-out pairs), ``comparisons``,
``dm_errors`` (answers so far that contradict the true utility), ``pair_gap`` (median true-utility gap of the stage's
PE pairs), ``fit_failures`` (PairwiseGP fits that needed the fallback).

Example:
    >>> from datamodules.multiobjective.datamodule import BOPEDataModule
    >>> from zoo.bope_monne.module import BOPEModule
    >>> module = BOPEModule(arm="random", n_objectives=3)
    >>> module.name
    'bope_monne'
"""

from __future__ import annotations

import csv
import os
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from zoo.bope_monne.model import MonotoneEnsemble, fit_ensemble, hinge_loss, pairwise_accuracy
from zoo.core import checks
from zoo.core.config import run_dir
from zoo.core.datamodule import require
from zoo.core.module import ZooModule

Arm = Literal["monne", "pairwise_gp", "oracle", "random"]
PEAcquisition = Literal["eubo_zeta", "eubo_mean_outcome", "random_f"]
Shown = Literal["posterior_mean", "sample"]
Activation = Literal["tanh", "sigmoid", "relu"]
Positivity = Literal["exp", "softplus", "square"]
STATE_KEY = "bope_replication"


def _check_ensemble(members: int, hidden: list[int], activation: str, positivity: str, margin: float,
                    steps: int) -> None:  # fmt: skip
    checks.integer(checks.model("members"), members)
    if not isinstance(hidden, list | tuple) or not hidden or any(isinstance(h, bool) or not isinstance(h, int)
                                                                 or h < 1 for h in hidden):  # fmt: skip
        checks.fail(checks.model("hidden"), hidden, "a non-empty list of positive integers")
    checks.choice(checks.model("activation"), activation, ("tanh", "sigmoid", "relu"))
    checks.choice(checks.model("positivity"), positivity, ("exp", "softplus", "square"))
    checks.positive(checks.model("margin"), margin)
    checks.integer(checks.model("steps"), steps)


class BOPEModule(ZooModule):
    """One BOPE replication, a stage per epoch (card ``bope_monne``).

    Args:
        n_objectives: number of outcomes k (linked from the datamodule).
        arm: ``monne`` | ``pairwise_gp`` | ``oracle`` | ``random``.
        pe_acqf: ``eubo_zeta`` (EUBO on one outcome-posterior sample path; default), ``eubo_mean_outcome`` (on the
            posterior mean) or ``random_f`` (random design pairs: isolates the acquisition). The paper's "modified
            EUBO" is unverified (reconstruction).
        shown_outcome: what the DM sees for a design: ``posterior_mean`` (default) or one posterior ``sample``.
        members: ensemble size M (card 8; 1 = the single-network ablation).
        hidden: hidden widths (card two layers of 32).
        activation: ``tanh`` (default; reconstruction), ``sigmoid``; ``relu`` makes every member convex (ablation).
        positivity: ``exp`` (published), ``softplus``, ``square``.
        monotone: ``false`` = the non-monotone ablation (raw weights, Kaiming initialisation).
        margin: hinge margin (card 1.0, unverified).
        steps: Adam steps per refit (card 300).
        lr: Adam learning rate of the refits (card 1e-2).
        bootstrap: each member fits a bootstrap resample of the comparisons (unverified; default off).
        warm_start: continue each refit from the last weights (default off: from scratch).
        n0: initial Sobol designs.
        n_pe_first: PE comparisons of the first stage (card 15).
        n_pe: PE comparisons of every later stage (card 5).
        n_batches: stages (experimentation batches; card 3).
        q: designs per batch (card 2).
        mc_samples: qNEIUU outcome samples S (card 64).
        num_restarts: ``optimize_acqf`` restarts (card 4).
        raw_samples_pe: raw samples of the PE pair search and the recommendation (card 64).
        raw_samples_batch: raw samples of the batch search (card 128).
        maxiter: L-BFGS iterations per restart (card 100).
    """

    name: ClassVar[str] = "bope_monne"
    monitor: ClassVar[str] = "train/u"
    mode: ClassVar[Literal["min", "max"]] = "max"
    trainable: ClassVar[bool] = False

    def __init__(self, n_objectives: int = 3, arm: Arm = "monne", pe_acqf: PEAcquisition = "eubo_zeta",
                 shown_outcome: Shown = "posterior_mean", members: int = 8, hidden: list[int] | None = None,
                 activation: Activation = "tanh", positivity: Positivity = "exp", monotone: bool = True,
                 margin: float = 1.0, steps: int = 300, lr: float = 1e-2, bootstrap: bool = False,
                 warm_start: bool = False, n0: int = 8, n_pe_first: int = 15, n_pe: int = 5, n_batches: int = 3,
                 q: int = 2, mc_samples: int = 64, num_restarts: int = 4, raw_samples_pe: int = 64,
                 raw_samples_batch: int = 128, maxiter: int = 100) -> None:  # fmt: skip
        hidden = [32, 32] if hidden is None else hidden
        checks.integer(checks.model("n_objectives"), n_objectives)
        checks.choice(checks.model("arm"), arm, ("monne", "pairwise_gp", "oracle", "random"))
        checks.choice(checks.model("pe_acqf"), pe_acqf, ("eubo_zeta", "eubo_mean_outcome", "random_f"))
        checks.choice(checks.model("shown_outcome"), shown_outcome, ("posterior_mean", "sample"))
        _check_ensemble(members, hidden, activation, positivity, margin, steps)
        checks.integer(checks.model("n0"), n0, low=2)
        checks.integer(checks.model("n_pe_first"), n_pe_first, low=0)
        checks.integer(checks.model("n_pe"), n_pe, low=0)
        for key, value in (("n_batches", n_batches), ("q", q), ("mc_samples", mc_samples),
                           ("num_restarts", num_restarts), ("raw_samples_pe", raw_samples_pe),
                           ("raw_samples_batch", raw_samples_batch), ("maxiter", maxiter)):  # fmt: skip
            checks.integer(checks.model(key), value)
        self.n_objectives, self.arm, self.pe_acqf, self.shown_outcome = int(n_objectives), arm, pe_acqf, shown_outcome
        self.members, self.hidden, self.activation, self.positivity = int(members), list(hidden), activation, positivity
        self.monotone, self.margin, self.steps = bool(monotone), float(margin), int(steps)
        self.bootstrap, self.warm_start = bool(bootstrap), bool(warm_start)
        self.protocol = {"n0": n0, "n_pe_first": n_pe_first, "n_pe": n_pe, "q": q, "mc_samples": mc_samples,
                         "num_restarts": num_restarts, "raw_samples_pe": raw_samples_pe,
                         "raw_samples_batch": raw_samples_batch, "maxiter": maxiter}  # fmt: skip
        self.n_batches = int(n_batches)
        super().__init__(lr=lr)
        self.automatic_optimization = False
        #: One dict of metrics per finished stage (the reproduction reads it).
        self.history: list[dict[str, float]] = []
        self.replication: Any = None
        self._resumed: dict[str, Any] | None = None

    def configure_models(self) -> None:
        """The ensemble (``monne`` arm; its weights are in checkpoints) or an empty module."""
        if self.arm == "monne":
            self.model = MonotoneEnsemble(self.n_objectives, self.members, self.hidden, self.activation,  # type: ignore[arg-type]
                                          self.positivity, self.monotone)  # type: ignore[arg-type]  # fmt: skip
        else:
            self.model = nn.Module()

    def setup(self, stage: str) -> None:
        """Build the replication on the datamodule's task (the problem's outcome bounds scale the ensemble)."""
        from zoo.bope_monne.loop import MoNNESurrogate, PairwiseGPSurrogate, Replication, Settings

        datamodule = getattr(self.trainer, "datamodule", None)
        task = require(datamodule, "task", type(self).__name__)()
        if task.problem.k != self.n_objectives:
            raise ValueError(f"the problem has {task.problem.k} outcomes but --model.init_args.n_objectives="
                             f"{self.n_objectives} (link it from the data)")  # fmt: skip
        bounds = task.problem.outcome_bounds().to(torch.float64)
        surrogate: Any = None
        if self.arm == "monne":
            with torch.no_grad():
                self.model.lo.copy_(bounds[0])
                self.model.scale.copy_(bounds[1] - bounds[0])
            surrogate = MoNNESurrogate(self.model, self.steps, self.lr, self.margin, self.bootstrap, self.warm_start)
        elif self.arm == "pairwise_gp":
            surrogate = PairwiseGPSurrogate(bounds[0], bounds[1])
        settings = Settings(arm=self.arm, pe_acqf=self.pe_acqf, shown_outcome=self.shown_outcome,  # type: ignore[arg-type]
                            **self.protocol)  # fmt: skip
        self.replication = Replication(
            task, settings, surrogate, seed=int(getattr(datamodule, "seed", None) or datamodule.hparams["seed"])
        )
        if self._resumed is not None:
            self._restore(self._resumed)

    def compute_loss(self, batch: Any) -> None:
        """No gradient loss: :meth:`training_step` runs a stage."""
        return None

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """Run the next stage and log its metrics; stop after ``n_batches`` stages."""
        if self.replication.stages >= self.n_batches:
            self.trainer.should_stop = True
            return None
        metrics = self.replication.stage()
        self.history.append(metrics)
        self.log_dict({f"train/{k}": float(v) for k, v in metrics.items()}, batch_size=1)
        self.count_step()
        if self.replication.stages >= self.n_batches:
            self.trainer.should_stop = True
        return None

    def on_train_end(self) -> None:
        """Write the run's designs and its DM answers (``outcomes.csv``/``comparisons.csv``, the recorded format)."""
        if self.replication is not None and self._trainer is not None and not self.trainer.sanity_checking:
            self.write_run(run_dir(self.trainer))

    def write_run(self, folder: str) -> None:
        """``designs.csv`` (x, y, true g, U per evaluation), ``outcomes.csv`` and ``comparisons.csv`` in ``folder``."""
        rep = self.replication
        os.makedirs(folder, exist_ok=True)
        d, k = rep.x.shape[1], rep.y.shape[1]
        with torch.no_grad():
            g, u = rep.task.utility_of(rep.x), rep.task.normalised(rep.x)
        with open(os.path.join(folder, "designs.csv"), "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow([*(f"x{i}" for i in range(d)), *(f"y{i}" for i in range(k)), "g", "u"])
            for row in torch.cat([rep.x, rep.y, g.view(-1, 1), u.view(-1, 1)], 1).tolist():
                writer.writerow([f"{v:.10g}" for v in row])
        if len(rep.comps):
            with open(os.path.join(folder, "outcomes.csv"), "w", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                writer.writerow([f"y{i}" for i in range(k)])
                writer.writerows([[f"{v:.10g}" for v in row] for row in rep.shown.tolist()])
            with open(os.path.join(folder, "comparisons.csv"), "w", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                writer.writerow(["winner", "loser"])
                writer.writerows(rep.comps.tolist())

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The replication's tensors and the stage history (primitives)."""
        super().on_save_checkpoint(checkpoint)
        if self.replication is not None:
            checkpoint[STATE_KEY] = {**self.replication.state(), "history": [dict(h) for h in self.history]}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the replication state for :meth:`setup` (Lightning restores after ``setup`` when resuming)."""
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get(STATE_KEY)
        if state is not None:
            self._resumed = state
            if self.replication is not None:
                self._restore(state)

    def _restore(self, state: dict[str, Any]) -> None:
        self.replication.load({k: v for k, v in state.items() if k != "history"})
        self.history = [dict(h) for h in state["history"]]
        if self.replication.surrogate is not None and hasattr(self.replication.surrogate, "fitted"):
            self.replication.surrogate.fitted = len(self.replication.comps) > 0


class MoNNEUtilityModule(ZooModule):
    """The MoNNE ensemble fitted to recorded comparisons (``ComparisonsDataModule``): hinge loss, full-batch Adam.

    One training step per epoch on every training comparison (card: Adam 1e-2 × 300 steps, i.e. ``max_epochs:
    300``); validation logs ``val/acc`` (pairwise accuracy of the ensemble mean on the held-out comparisons; the
    monitor) and ``val/loss``. At the end ``utilities.csv`` holds each outcome row's mean and std over members.

    Args:
        n_objectives: number of outcomes k (linked from the datamodule).
        members: ensemble size M.
        hidden: hidden widths.
        activation: ``tanh`` | ``sigmoid`` | ``relu``.
        positivity: ``exp`` | ``softplus`` | ``square``.
        monotone: ``false`` = the non-monotone ablation.
        margin: hinge margin.
        steps: unused by Lightning training (``max_epochs`` counts the steps); kept for :meth:`refit`.
        lr: Adam learning rate (card 1e-2).
        seed: the members' initialisation seed.
    """

    name: ClassVar[str] = "monne_utility"
    monitor: ClassVar[str] = "val/acc"
    mode: ClassVar[Literal["min", "max"]] = "max"

    def __init__(self, n_objectives: int = 3, members: int = 8, hidden: list[int] | None = None,
                 activation: Activation = "tanh", positivity: Positivity = "exp", monotone: bool = True,
                 margin: float = 1.0, steps: int = 300, lr: float = 1e-2, seed: int = 0) -> None:  # fmt: skip
        hidden = [32, 32] if hidden is None else hidden
        checks.integer(checks.model("n_objectives"), n_objectives)
        _check_ensemble(members, hidden, activation, positivity, margin, steps)
        checks.integer(checks.model("seed"), seed, low=0)
        self.n_objectives, self.members, self.hidden = int(n_objectives), int(members), list(hidden)
        self.activation, self.positivity, self.monotone = activation, positivity, bool(monotone)
        self.margin, self.steps, self.seed = float(margin), int(steps), int(seed)
        super().__init__(lr=lr)

    def configure_models(self) -> None:
        """The ensemble."""
        self.model = MonotoneEnsemble(self.n_objectives, self.members, self.hidden, self.activation,  # type: ignore[arg-type]
                                      self.positivity, self.monotone, seed=self.seed)  # type: ignore[arg-type]  # fmt: skip

    def setup(self, stage: str) -> None:
        """Scale the ensemble's inputs by the datamodule's outcome bounds (``lo``/``hi``)."""
        bounds = require(getattr(self.trainer, "datamodule", None), "bounds", type(self).__name__)()
        if bounds.shape[-1] != self.n_objectives:
            raise ValueError(f"the data has {bounds.shape[-1]} outcomes but --model.init_args.n_objectives="
                             f"{self.n_objectives} (link it from the data)")  # fmt: skip
        with torch.no_grad():
            self.model.lo.copy_(bounds[0])
            self.model.scale.copy_(bounds[1] - bounds[0])

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The members' hinge losses, summed (independent members: each gets its own gradient)."""
        losses = hinge_loss(self.model(batch["y"]), batch["comps"], self.margin)
        return {"loss": losses.sum(), "hinge": losses.mean().detach()}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Held-out pairwise accuracy of the ensemble mean (a tie counts as wrong) and the mean hinge loss."""
        g = self.model(batch["y"])
        mean = g.mean(0)
        comps = batch["comps"]
        scores = torch.stack([mean[comps[:, 0]], mean[comps[:, 1]]], -1)
        truth = torch.stack([torch.ones(len(comps)), torch.zeros(len(comps))], -1).to(scores)
        self.log("val/acc", pairwise_accuracy(scores, truth), batch_size=len(comps))
        self.log("val/loss", hinge_loss(g, comps, self.margin).mean(), batch_size=len(comps))

    def refit(self, y: Tensor, comps: Tensor) -> Tensor:
        """Fit outside Lightning (``steps`` full-batch Adam steps from scratch); returns the per-member losses."""
        return fit_ensemble(self.model, y, comps, self.steps, self.lr, self.margin, seed=self.seed)

    def on_train_end(self) -> None:
        """``utilities.csv``: every outcome row's ensemble-mean utility and the members' std."""
        datamodule = getattr(self.trainer, "datamodule", None)
        y = getattr(datamodule, "y", None)
        if y is None or self.trainer.sanity_checking:
            return
        folder = run_dir(self.trainer)
        os.makedirs(folder, exist_ok=True)
        with torch.no_grad():
            g = self.model(y.to(torch.float64))
        with open(os.path.join(folder, "utilities.csv"), "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["row", "utility", "std"])
            for i, (m, s) in enumerate(zip(g.mean(0).tolist(), g.std(0, unbiased=False).tolist(), strict=True)):
                writer.writerow([i, f"{m:.10g}", f"{s:.10g}"])
