"""Datamodules of BOPE on closed-form problems and of utility fitting on recorded comparisons (card ``bope_monne``).

Both build everything in ``__init__`` (cheap, before ``setup``), so ``n_objectives`` (and ``n_dims``) can be linked
into the model and a harness can use the data without a Trainer:

- :class:`BOPEDataModule`: a test problem, its true utility, the decision maker's noise and the oracle, handed to the
  BOPE loop as a :class:`BOPETask`; its training loader yields one placeholder item per epoch (one BOPE stage);
- :class:`ComparisonsDataModule`: outcomes and (winner, loser) comparisons, read from CSV (a real DM,
  :mod:`datamodules.multiobjective.readers`) or generated from a problem and a simulated DM, split into train/val.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from datamodules.common.single import one_batch_loader
from datamodules.multiobjective.decision_maker import ProbitDM
from datamodules.multiobjective.oracle import normalised_utility, optimum, random_median
from datamodules.multiobjective.problems import PROBLEMS, OutcomeProblem, make_problem
from datamodules.multiobjective.readers import read_comparisons, read_outcomes
from datamodules.multiobjective.utilities import PROBIT_SIGMA, UTILITIES, make_utility
from zoo.core import checks
from zoo.core.datamodule import ZooDataModule
from zoo.core.messages import say

#: How the file options are described in their errors.
OUTCOMES_CSV = "outcomes CSV (a header of outcome names, one row of floats per outcome)"
COMPARISONS_CSV = "comparisons CSV (header winner,loser)"
#: The decision maker's noise models.
DM_NOISE: tuple[str, ...] = ("none", "probit")


def _check_problem(problem: str, utility: str, dm_noise: str, sigma: float | None) -> float:
    """Check the problem options; return the DM's probit σ in effect (0 when noise-free)."""
    checks.choice(checks.data("problem"), problem, PROBLEMS)
    if utility not in UTILITIES[problem]:
        checks.fail(checks.data("utility"), utility,
                    f"one of {', '.join(map(repr, UTILITIES[problem]))} for problem={problem!r}")  # fmt: skip
    checks.choice(checks.data("dm_noise"), dm_noise, DM_NOISE)
    if dm_noise == "none":
        if sigma is not None:
            checks.fail(checks.data("sigma"), sigma, "None with dm_noise='none' (set dm_noise=probit to use it)")
        return 0.0
    if sigma is None:
        return PROBIT_SIGMA[(problem, utility)]
    return float(checks.non_negative(checks.data("sigma"), sigma))


def uniform_designs(problem: OutcomeProblem, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Designs uniform in the box, float64 ``(*shape, d)``."""
    lo, hi = problem.bounds()
    return lo + (hi - lo) * torch.rand(*shape, problem.d, generator=generator, dtype=torch.float64)


@dataclass
class BOPETask:
    """Everything the BOPE loop needs about the problem and the simulated decision maker.

    Attributes:
        problem: the outcome function ``f``.
        utility: the true utility ``g``.
        sigma: the DM's probit σ in effect (0.0 when noise-free).
        noise_std: standard deviation of the observation noise of ``f`` (0: noise-free).
        x_star: the oracle's design, float64 ``(d,)``.
        g_star: the oracle's utility ``g(f(x*))``.
        g_rand: the median utility of 1024 fixed Sobol designs.
        holdout: float64 ``(n_holdout, 2, k)`` pairs of outcomes of uniform designs (surrogate diagnostics).
    """

    problem: OutcomeProblem
    utility: nn.Module
    sigma: float
    noise_std: float
    x_star: Tensor
    g_star: float
    g_rand: float
    holdout: Tensor

    def evaluate(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Observe ``y = f(x)`` plus N(0, noise_std²) noise (drawn from ``generator`` only when noise_std > 0)."""
        y = self.problem(x)
        if self.noise_std > 0:
            y = y + self.noise_std * torch.randn(y.shape, generator=generator, dtype=y.dtype)
        return y

    def utility_of(self, x: Tensor) -> Tensor:
        """The true, noise-free ``g(f(x))``, ``(..., d) -> (...)``."""
        return self.utility(self.problem(x))

    def normalised(self, x: Tensor) -> Tensor:
        """``U(x) = (g(f(x)) − g_rand)/(g* − g_rand)``, ``(..., d) -> (...)``."""
        return normalised_utility(self.utility_of(x), self.g_star, self.g_rand)

    def dm(self, generator: torch.Generator) -> ProbitDM:
        """The simulated decision maker, drawing its flips from ``generator``."""
        return ProbitDM(self.utility, self.sigma, generator)


class BOPEDataModule(ZooDataModule):
    """A closed-form BOPE problem with a simulated decision maker (card ``bope_monne``, section Data).

    Args:
        problem: ``vehicle_safety``, ``dtlz2`` or ``car_cab``.
        utility: the DM's true utility; per problem: vehicle_safety ``pwl``/``kumaraswamy``, dtlz2 ``pwl``/
            ``neg_l1``, car_cab ``linear``/``pwl``.
        dm_noise: ``none`` (the DM always prefers the better outcome) or ``probit`` (answers flipped with probability
            ``1 − Φ(|Δg|/σ)``).
        sigma: the probit σ; ``None`` is the card's calibrated value for the (problem, utility) pair. Only with
            ``dm_noise: probit``.
        noise_std: observation noise of ``f`` (the card's noisy setting: 0.05 for vehicle_safety and dtlz2, 0.02
            for car_cab); 0 is noise-free.
        n_holdout: held-out outcome pairs for the surrogate diagnostics.
        seed: seed of the held-out pairs.
    """

    def __init__(
        self, problem: str = "vehicle_safety", utility: str = "pwl", dm_noise: Literal["none", "probit"] = "none",
        sigma: float | None = None, noise_std: float = 0.0, n_holdout: int = 1000, seed: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        self.sigma = _check_problem(problem, utility, dm_noise, sigma)
        self.noise_std = float(checks.non_negative(checks.data("noise_std"), noise_std))
        checks.integer(checks.data("n_holdout"), n_holdout)
        checks.integer(checks.data("seed"), seed, low=0)
        #: The replication seed (held-out pairs here; the BOPE loop draws its designs and answers from it).
        self.seed = int(seed)
        #: The outcome function.
        self.problem: OutcomeProblem = make_problem(problem)
        #: The true utility.
        self.utility: nn.Module = make_utility(problem, utility)
        #: Design dimension d, linked into the model.
        self.n_dims: int = self.problem.d
        #: Number of outcomes k, linked into the model.
        self.n_objectives: int = self.problem.k
        x = uniform_designs(self.problem, (n_holdout, 2), torch.Generator().manual_seed(seed))
        #: Held-out outcome pairs ``(n_holdout, 2, k)``.
        self.holdout: Tensor = self.problem(x)
        self._task: BOPETask | None = None

    def task(self) -> BOPETask:
        """The task, with the oracle's ``x*``, ``g*`` and ``g_rand`` (computed once, then cached)."""
        if self._task is None:
            x_star, g_star = optimum(self.problem, self.utility)
            g_rand = random_median(self.problem, self.utility)
            self._task = BOPETask(self.problem, self.utility, self.sigma, self.noise_std, x_star, g_star, g_rand,
                                  self.holdout)  # fmt: skip
        return self._task

    def train_dataloader(self) -> DataLoader:
        """One placeholder item per epoch, ``{"stage": zeros(1)}``: the BOPE module runs one stage per epoch."""
        return one_batch_loader({"stage": torch.zeros(1)})


class ComparisonsDataModule(ZooDataModule):
    """Outcomes and pairwise comparisons for fitting a utility surrogate, read from CSV or generated.

    With ``outcomes`` and ``comparisons`` it reads a decision maker's records (both files must be given; the generator
    options are then unused and ``truth`` is ``None``). Without them it generates ``n_points`` outcomes ``y = f(x)`` of
    uniform designs of ``problem`` and ``n_comparisons`` random pairs answered by a :class:`ProbitDM` with ``utility``,
    which is kept as ``truth``. The comparisons are split into train and validation by a seeded permutation.

    Args:
        outcomes: outcomes CSV (a header of outcome names, one row of floats per outcome).
        comparisons: comparisons CSV (header ``winner,loser``, 0-based row indices into ``outcomes``).
        lo: surrogate input lower bound per outcome; default: the problem's outcome bounds when generated, the
            columns' minima when read.
        hi: surrogate input upper bound per outcome; default as ``lo`` (the columns' maxima when read).
        val_fraction: share of the comparisons held out for validation (rounded; at least 1 on each side).
        problem: the problem generating the outcomes.
        utility: the simulated DM's true utility (per problem, as in :class:`BOPEDataModule`).
        n_points: generated outcomes.
        n_comparisons: generated comparisons (random pairs of distinct outcomes).
        dm_noise: ``none`` or ``probit``.
        sigma: the probit σ (``None``: the card's calibrated value); only with ``dm_noise: probit``.
        seed: seed of the generated data and of the train/val split.
    """

    def __init__(
        self, outcomes: str | None = None, comparisons: str | None = None, lo: list[float] | None = None,
        hi: list[float] | None = None, val_fraction: float = 0.2, problem: str = "vehicle_safety",
        utility: str = "pwl", n_points: int = 100, n_comparisons: int = 300,
        dm_noise: Literal["none", "probit"] = "none", sigma: float | None = None, seed: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        checks.probability(checks.data("val_fraction"), val_fraction, open_low=True, open_high=True)
        checks.integer(checks.data("seed"), seed, low=0)
        bounds = _check_bounds(lo, hi)
        sigma_used = _check_problem(problem, utility, dm_noise, sigma)  # checked even when the files make them unused
        #: The true utility of generated data, ``None`` for recorded data.
        self.truth: nn.Module | None = None
        if outcomes is None and comparisons is None:
            checks.integer(checks.data("n_points"), n_points, low=2)
            checks.integer(checks.data("n_comparisons"), n_comparisons, low=2)
            source = make_problem(problem)
            if bounds is not None and bounds.shape[1] != source.k:
                checks.fail(checks.data("lo"), lo, f"{source.k} values (problem={problem!r} has k={source.k})")
            self.truth = make_utility(problem, utility)
            names, y, comps = generate_comparisons(source, self.truth, sigma_used, n_points, n_comparisons, seed)
            bounds = source.outcome_bounds() if bounds is None else bounds
        else:
            names, y, comps = _read(outcomes, comparisons, bounds)
            if bounds is None:
                bounds = _column_bounds(outcomes, names, y)
        #: Outcome names in column order.
        self.names: list[str] = names
        #: Outcomes, float64 ``(n, k)``.
        self.y: Tensor = y
        #: Number of outcomes k, linked into the model.
        self.n_objectives: int = y.shape[1]
        self._bounds = bounds
        m = len(comps)
        m_val = math.floor(val_fraction * m + 0.5)
        if not 1 <= m_val <= m - 1:
            checks.fail(checks.data("val_fraction"), val_fraction, f"a share of the {m} comparisons leaving at least 1 "
                        f"for training and 1 for validation (it gives {m_val} for validation)")  # fmt: skip
        order = torch.randperm(m, generator=torch.Generator().manual_seed(seed))
        #: Training comparisons, long ``(m_train, 2)`` (winner, loser) rows of ``y``.
        self.train_comps: Tensor = comps[order[m_val:]]
        #: Validation comparisons, long ``(m_val, 2)``.
        self.val_comps: Tensor = comps[order[:m_val]]

    def bounds(self) -> Tensor:
        """The surrogate input bounds, float64 ``(2, k)``: ``lo``, ``hi``."""
        return self._bounds.clone()

    def train_dataloader(self) -> DataLoader:
        """One full batch per epoch: ``{"y": (n, k), "comps": (m_train, 2)}``."""
        return one_batch_loader({"y": self.y, "comps": self.train_comps})

    def val_dataloader(self) -> DataLoader:
        """One full batch: ``{"y": (n, k), "comps": (m_val, 2)}``."""
        return one_batch_loader({"y": self.y, "comps": self.val_comps})


def generate_comparisons(
    problem: OutcomeProblem, utility: nn.Module, sigma: float, n_points: int, n_comparisons: int, seed: int
) -> tuple[list[str], Tensor, Tensor]:
    """Outcomes of uniform designs and random pairs answered by a :class:`ProbitDM` (one generator, seeded).

    Returns:
        Names ``y1..yk``, outcomes float64 ``(n_points, k)`` and (winner, loser) rows, long ``(n_comparisons, 2)``.
    """
    generator = torch.Generator().manual_seed(seed)
    y = problem(uniform_designs(problem, (n_points,), generator))
    first = torch.randint(n_points, (n_comparisons,), generator=generator)
    second = (first + torch.randint(1, n_points, (n_comparisons,), generator=generator)) % n_points  # ≠ first
    pairs = torch.stack((first, second), dim=-1)
    local = ProbitDM(utility, sigma, generator).compare(y[pairs])
    comps = pairs.gather(1, local)
    return [f"y{j + 1}" for j in range(problem.k)], y, comps


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_bounds(lo: list[float] | None, hi: list[float] | None) -> Tensor | None:
    """``lo``/``hi`` as a float64 ``(2, k)`` tensor, or ``None`` when both are unset."""
    if lo is None and hi is None:
        return None
    if lo is None or hi is None:
        missing = "lo" if lo is None else "hi"
        checks.fail(checks.data(missing), None, "a list of floats when --data.init_args."
                    f"{'hi' if missing == 'lo' else 'lo'} is given (both bounds or neither)")  # fmt: skip
    for name, values in (("lo", lo), ("hi", hi)):
        if not (isinstance(values, list | tuple) and values and all(_finite(v) for v in values)):
            checks.fail(checks.data(name), values, "a non-empty list of finite floats, one per outcome")
    if len(lo) != len(hi):
        checks.fail(checks.data("hi"), hi, f"{len(lo)} values, as many as --data.init_args.lo")
    if bad := [j for j, (a, b) in enumerate(zip(lo, hi, strict=True)) if not a < b]:
        checks.fail(checks.data("hi"), hi, f"every hi > lo (not at outcome {bad[0]}: lo={lo[bad[0]]!r})")
    return torch.tensor((lo, hi), dtype=torch.float64)


def _read(outcomes: str | None, comparisons: str | None, bounds: Tensor | None) -> tuple[list[str], Tensor, Tensor]:
    files = (("outcomes", outcomes, OUTCOMES_CSV), ("comparisons", comparisons, COMPARISONS_CSV))
    for name, value, what in files:
        if value is None:
            other = "comparisons" if name == "outcomes" else "outcomes"
            checks.fail(checks.data(name), None, f"a {what} when --data.init_args.{other} is given (both files or "
                        "neither)")  # fmt: skip
    for name, value, what in files:
        if not Path(value).is_file():
            checks.fail(checks.data(name), value, f"an existing {what}")
    k = None if bounds is None else bounds.shape[1]
    names, y = read_outcomes(outcomes, k, k_from=checks.data("lo"))
    return names, y, read_comparisons(comparisons, len(y), outcomes)


def _column_bounds(path: str, names: list[str], y: Tensor) -> Tensor:
    """The columns' minima and maxima, announced in one line; a constant column is an error."""
    lo, hi = y.min(0).values, y.max(0).values
    if flat := [names[j] for j in range(len(names)) if not lo[j] < hi[j]]:
        raise ValueError(f"{path}: column {flat[0]!r} is constant ({float(lo[names.index(flat[0])])!r}); give "
                         "--data.init_args.lo and --data.init_args.hi (the surrogate input bounds)")  # fmt: skip
    say(f"{path}: surrogate input bounds from the columns' min/max: lo={[round(v, 6) for v in lo.tolist()]}, "
        f"hi={[round(v, 6) for v in hi.tolist()]} (set --data.init_args.lo/hi to fix them)")  # fmt: skip
    return torch.stack((lo, hi))
