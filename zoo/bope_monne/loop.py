"""The BOPE loop of one replication (card ``bope_monne``, "BOPE loop"; Lin et al. 2022, BoTorch's BOPE tutorial).

BoTorch and GPyTorch do the Bayesian-optimisation work: the outcome model is a ``SingleTaskGP`` fitted with the exact
marginal likelihood, acquisitions are maximised by ``optimize_acqf``, experimentation is
``qLogNoisyExpectedImprovement`` under a learned utility objective (qNEIUU).
The utility surrogates share one face (:class:`Surrogate`):

- :class:`MoNNESurrogate`: the monotone ensemble (``zoo.bope_monne.model``), refit from scratch after every comparison;
  PE acquisition the exact ensemble EUBO (:class:`~zoo.bope_monne.acquisition.EnsembleEUBO`), objective
  :class:`~zoo.bope_monne.acquisition.EnsembleLearnedObjective`. ``monotone=False`` is the non-monotone ablation,
  ``members=1`` the single network.
- :class:`PairwiseGPSurrogate`: Lin et al.'s BOPE: ``PairwiseGP`` with ``PairwiseLaplaceMarginalLogLikelihood``,
  BoTorch's analytic EUBO and ``LearnedObjective``. A fit that raises ``ModelFittingError`` is retried with BoTorch's
  torch optimiser and recorded (:attr:`Surrogate.failures`); the arm is never dropped.

:class:`Replication` holds the state (designs, outcomes, shown outcomes and comparisons: tensors only, so a checkpoint
carries it) and runs one stage at a time (:meth:`Replication.stage`); every random draw of stage ``s`` comes from
seeds derived from ``(seed, s)``, so a run resumed from a checkpoint repeats the uninterrupted run exactly.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.objective import GenericMCObjective, LearnedObjective
from botorch.acquisition.preference import AnalyticExpectedUtilityOfBestOption
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.deterministic import FixedSingleSampleModel, PosteriorMeanModel
from botorch.models.pairwise_gp import PairwiseGP, PairwiseLaplaceMarginalLogLikelihood
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from botorch.optim.fit import fit_gpytorch_mll_torch
from botorch.sampling.normal import SobolQMCNormalSampler
from gpytorch.mlls import ExactMarginalLogLikelihood
from linear_operator.utils.warnings import NumericalWarning
from torch import Tensor

from zoo.bope_monne.acquisition import EnsembleEUBO, EnsembleLearnedObjective, UtilityOfMean
from zoo.bope_monne.model import MonotoneEnsemble, fit_ensemble, kendall_tau, pairwise_accuracy

Arm = Literal["monne", "pairwise_gp", "oracle", "random"]
PEAcquisition = Literal["eubo_zeta", "eubo_mean_outcome", "random_f"]
Shown = Literal["posterior_mean", "sample"]
DTYPE = torch.float64


class Surrogate(Protocol):
    """A utility model fitted to comparisons of outcomes."""

    #: One line per fit that needed a fallback (kept in the run's metrics).
    failures: list[str]

    def fit(self, y: Tensor, comps: Tensor, seed: int) -> None:
        """Fit to outcomes ``y`` (n, k) and ``(winner, loser)`` rows ``comps`` (m, 2)."""

    def pe_acquisition(self, outcome_model: Any) -> Any:
        """The preference-exploration acquisition of design pairs through a deterministic outcome model."""

    def objective(self) -> Any:
        """QNEIUU's MC objective (outcome samples to utilities)."""

    def score(self, y: Tensor) -> Tensor:
        """Mean utility ``(..., n, k) -> (..., n)``."""


@dataclass
class MoNNESurrogate:
    """The MoNNE utility surrogate: a :class:`MonotoneEnsemble` refit on the comparisons (card: Adam 1e-2 × 300).

    Args:
        ensemble: the ensemble (its ``lo``/``hi`` scale the outcomes; ``monotone=False`` is the ablation).
    """

    ensemble: MonotoneEnsemble
    steps: int = 300
    lr: float = 1e-2
    margin: float = 1.0
    bootstrap: bool = False
    warm_start: bool = False
    fitted: bool = False
    failures: list[str] = field(default_factory=list)

    def fit(self, y: Tensor, comps: Tensor, seed: int) -> None:
        """Refit every member (from scratch unless ``warm_start`` and fitted before)."""
        fit_ensemble(self.ensemble, y, comps, self.steps, self.lr, self.margin, self.bootstrap, seed,
                     warm_start=self.warm_start and self.fitted)  # fmt: skip
        self.fitted = True

    def pe_acquisition(self, outcome_model: Any) -> Any:
        """The exact ensemble EUBO."""
        return EnsembleEUBO(self.ensemble, outcome_model)

    def objective(self) -> Any:
        """:class:`EnsembleLearnedObjective`."""
        return EnsembleLearnedObjective(self.ensemble)

    def score(self, y: Tensor) -> Tensor:
        """The ensemble-mean utility."""
        return self.ensemble.mean(y)


@dataclass
class PairwiseGPSurrogate:
    """Lin et al.'s preference model: ``PairwiseGP(Y, comps, input_transform=Normalize(k, bounds))``.

    Args:
        lo: outcome lower bounds of ``Normalize`` (k,).
        hi: outcome upper bounds (k,).
    """

    lo: Tensor
    hi: Tensor
    failures: list[str] = field(default_factory=list)

    def fit(self, y: Tensor, comps: Tensor, seed: int) -> None:
        """Laplace-MLL fit; on ``ModelFittingError`` one retry with BoTorch's torch optimiser, recorded."""
        bounds = torch.stack([self.lo, self.hi]).to(DTYPE)
        with torch.random.fork_rng(), warnings.catch_warnings():
            torch.manual_seed(seed)
            self.model = PairwiseGP(y.to(DTYPE), comps, input_transform=Normalize(y.shape[-1], bounds=bounds))
            mll = PairwiseLaplaceMarginalLogLikelihood(self.model.likelihood, self.model)
            warnings.simplefilter("ignore", NumericalWarning)  # the Laplace fit's jitter notices (fork_rng scope)
            try:
                fit_gpytorch_mll(mll)
            except ModelFittingError as err:
                self.failures.append(f"{len(comps)} comparisons: {str(err).splitlines()[0][:120]}")
                try:
                    fit_gpytorch_mll(mll, optimizer=fit_gpytorch_mll_torch)
                except ModelFittingError as again:
                    self.failures.append(f"{len(comps)} comparisons, torch retry: {str(again).splitlines()[0][:120]}")
        self.model.eval()

    def pe_acquisition(self, outcome_model: Any) -> Any:
        """BoTorch's analytic EUBO."""
        return AnalyticExpectedUtilityOfBestOption(pref_model=self.model, outcome_model=outcome_model)

    def objective(self) -> Any:
        """BoTorch's ``LearnedObjective``."""
        return LearnedObjective(pref_model=self.model)

    def score(self, y: Tensor) -> Tensor:
        """The posterior-mean utility."""
        return self.model.posterior(y).mean.squeeze(-1)


@dataclass
class Settings:
    """One replication's protocol (card defaults: ``n0 = 8``, 15 then 5 comparisons per stage, q = 2)."""

    arm: Arm = "monne"
    pe_acqf: PEAcquisition = "eubo_zeta"
    shown_outcome: Shown = "posterior_mean"
    n0: int = 8
    n_pe_first: int = 15
    n_pe: int = 5
    q: int = 2
    mc_samples: int = 64
    num_restarts: int = 4
    raw_samples_pe: int = 64
    raw_samples_batch: int = 128
    maxiter: int = 100


def _seed(seed: int, stage: int, salt: int) -> int:
    return (int(seed) * 1_000_003 + stage * 1009 + salt) % (2**31 - 1)


class Replication:
    """One BOPE replication on a task (``datamodules.multiobjective.datamodule.BOPETask``).

    Args:
        task: the problem, true utility, DM noise, oracle optimum and held-out pairs.
        settings: the protocol.
        surrogate: the utility model (``None`` for the oracle and random arms).
        seed: the replication seed (initial design, DM answers, fits, acquisitions).
    """

    def __init__(self, task: Any, settings: Settings, surrogate: Surrogate | None, seed: int) -> None:
        self.task, self.settings, self.surrogate, self.seed = task, settings, surrogate, int(seed)
        d, k = task.problem.d, task.problem.k
        self.bounds = task.problem.bounds().to(DTYPE)
        self.x = torch.zeros(0, d, dtype=DTYPE)  #: evaluated designs
        self.y = torch.zeros(0, k, dtype=DTYPE)  #: their observed outcomes
        self.shown = torch.zeros(0, k, dtype=DTYPE)  #: outcomes shown to the DM
        self.comps = torch.zeros(0, 2, dtype=torch.long)  #: (winner, loser) rows into ``shown``
        self.stages = 0

    # state --------------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Tensor]:
        """Tensors only (a ``weights_only`` checkpoint carries them)."""
        return {"x": self.x, "y": self.y, "shown": self.shown, "comps": self.comps,
                "stages": torch.tensor(self.stages)}  # fmt: skip

    def load(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`state`."""
        self.x, self.y = state["x"].to(DTYPE), state["y"].to(DTYPE)
        self.shown, self.comps = state["shown"].to(DTYPE), state["comps"].long()
        self.stages = int(state["stages"])

    # pieces -------------------------------------------------------------------------------------------------------
    def sobol(self, n: int, skip: int = 0) -> Tensor:
        """Designs ``skip .. skip+n`` of the replication's scrambled Sobol sequence, in the box."""
        engine = torch.quasirandom.SobolEngine(self.task.problem.d, scramble=True, seed=self.seed)
        if skip:
            engine.fast_forward(skip)
        unit = engine.draw(n, dtype=DTYPE)
        return self.bounds[0] + (self.bounds[1] - self.bounds[0]) * unit

    def evaluate(self, x: Tensor, stage: int) -> None:
        """Evaluate ``f`` (with the task's observation noise) and append."""
        gen = torch.Generator().manual_seed(_seed(self.seed, stage, 11))
        self.x = torch.cat([self.x, x.to(DTYPE)])
        self.y = torch.cat([self.y, self.task.evaluate(x.to(DTYPE), gen).to(DTYPE)])

    def ask(self, pair: Tensor, stage: int, i: int) -> None:
        """Show the DM a pair of outcomes ``(2, k)``, append them and its answer."""
        dm = self.task.dm(torch.Generator().manual_seed(_seed(self.seed, stage, 100 + i)))
        local = dm.compare(pair.unsqueeze(0).to(DTYPE))[0]
        n = self.shown.shape[0]
        self.shown = torch.cat([self.shown, pair.to(DTYPE)])
        self.comps = torch.cat([self.comps, (local + n).view(1, 2)])

    def outcome_model(self) -> SingleTaskGP:
        """``SingleTaskGP`` on the evaluated designs (``Normalize`` inputs, ``Standardize`` outcomes, exact MLL)."""
        k = self.y.shape[-1]
        gp = SingleTaskGP(self.x, self.y, input_transform=Normalize(self.x.shape[-1], bounds=self.bounds),
                          outcome_transform=Standardize(k))  # fmt: skip
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
        gp.eval()
        return gp

    def _optimize(self, acqf: Any, q: int, raw: int) -> Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BoTorch's optimisation-restart notices
            x, _ = optimize_acqf(acqf, bounds=self.bounds, q=q, num_restarts=self.settings.num_restarts,
                                 raw_samples=raw, options={"maxiter": self.settings.maxiter})  # fmt: skip
        return x.detach()

    def shown_outcomes(self, gp: SingleTaskGP, x: Tensor) -> Tensor:
        """What the DM sees for designs ``x``: the posterior mean (default) or one joint posterior sample."""
        with torch.no_grad():
            post = gp.posterior(x)
            if self.settings.shown_outcome == "sample":
                return post.rsample(torch.Size([1]))[0]
            return post.mean

    def pe_pair(self, gp: SingleTaskGP, stage: int, i: int) -> Tensor:
        """The next PE design pair ``(2, d)``: EUBO maximised over the joint 2d space, or a random Sobol pair."""
        s = self.settings
        if s.pe_acqf == "random_f":
            engine = torch.quasirandom.SobolEngine(
                self.bounds.shape[1], scramble=True, seed=_seed(self.seed, stage, 200 + i)
            )
            return self.bounds[0] + (self.bounds[1] - self.bounds[0]) * engine.draw(2, dtype=DTYPE)
        assert self.surrogate is not None
        model = FixedSingleSampleModel(gp) if s.pe_acqf == "eubo_zeta" else PosteriorMeanModel(gp)
        return self._optimize(self.surrogate.pe_acquisition(model), 2, s.raw_samples_pe)

    def fit_surrogate(self, stage: int) -> None:
        """Refit the utility model on every comparison so far."""
        assert self.surrogate is not None
        self.surrogate.fit(self.shown, self.comps, _seed(self.seed, stage, 50_000 + len(self.comps)))

    def recommend(self, gp: SingleTaskGP) -> Tensor:
        """The PE-stage recommendation ``x̂ = argmax_x score(μ_f(x))`` (``(1, d)``)."""
        assert self.surrogate is not None
        return self._optimize(
            UtilityOfMean(PosteriorMeanModel(gp), self.surrogate.score), 1, self.settings.raw_samples_pe
        )

    def batch(self, gp: SingleTaskGP, objective: Any) -> Tensor:
        """qNEIUU: ``q`` designs maximising qLogNEI under ``objective`` (``q × d``)."""
        s = self.settings
        acqf = qLogNoisyExpectedImprovement(
            model=gp,
            X_baseline=self.x,
            objective=objective,
            prune_baseline=True,
            sampler=SobolQMCNormalSampler(sample_shape=torch.Size([s.mc_samples])),
        )
        return self._optimize(acqf, s.q, s.raw_samples_batch)

    # one stage ----------------------------------------------------------------------------------------------------
    def stage(self) -> dict[str, float]:
        """Run the next stage (initial design and first comparison at stage 0; PE comparisons; one batch).

        Returns:
            The stage's metrics: ``u`` (normalised utility of the best evaluated design), ``regret``, and for the
            preference arms ``pe_u`` (U of the PE-stage recommendation), ``acc``/``tau`` (held-out pairs),
            ``comparisons``, ``dm_errors`` (answers so far that contradict the true utility), ``pair_gap`` (median
            true-utility gap |Δg| of this stage's PE pairs), ``fit_failures``.
        """
        s, t = self.settings, self.stages
        torch.manual_seed(_seed(self.seed, t, 0))
        metrics: dict[str, float] = {}
        if t == 0:
            self.evaluate(self.sobol(s.n0), t)
            if s.arm in ("monne", "pairwise_gp"):
                gen = torch.Generator().manual_seed(_seed(self.seed, t, 1))
                i, j = torch.randperm(self.y.shape[0], generator=gen)[:2].tolist()
                self.ask(self.y[[i, j]], t, 0)
        if s.arm == "random":
            self.evaluate(self.sobol(s.q, skip=self.x.shape[0]), t + 1)
        else:
            gp = self.outcome_model()
            if s.arm == "oracle":
                utility = self.task.utility
                objective = GenericMCObjective(lambda samples, X=None: utility(samples))  # noqa: N803
            else:
                metrics.update(self.explore(gp, s.n_pe_first if t == 0 else s.n_pe, t))
                objective = self.surrogate.objective()  # type: ignore[union-attr]
            self.evaluate(self.batch(gp, objective), t + 1)
        self.stages += 1
        g_best = float(self.task.utility_of(self.x).max())
        metrics["u"] = float(self.task.normalised(self.x).max())
        metrics["regret"] = self.task.g_star - g_best
        metrics["evaluations"] = float(self.x.shape[0])
        return metrics

    def explore(self, gp: SingleTaskGP, n: int, t: int) -> dict[str, float]:
        """``n`` PE comparisons (refit, choose a pair, ask), then the stage's PE diagnostics."""
        for i in range(n):
            self.fit_surrogate(t)
            x_pair = self.pe_pair(gp, t, i)
            self.ask(self.shown_outcomes(gp, x_pair), t, 1 + i)
        self.fit_surrogate(t)
        assert self.surrogate is not None
        x_hat = self.recommend(gp)
        with torch.no_grad():
            holdout = self.task.holdout.to(DTYPE)
            scores = self.surrogate.score(holdout)
            truth = self.task.utility(holdout)
            g = self.task.utility(self.shown)
            gap = g[self.comps[:, 0]] - g[self.comps[:, 1]]  # true utility of each answer's winner minus its loser
        return {"pe_u": float(self.task.normalised(x_hat).max()), "acc": pairwise_accuracy(scores, truth),
                "tau": kendall_tau(scores, truth), "comparisons": float(len(self.comps)),
                "dm_errors": float((gap < 0).sum()), "pair_gap": float(gap[-n:].abs().median()) if n else 0.0,
                "fit_failures": float(len(self.surrogate.failures))}  # fmt: skip
