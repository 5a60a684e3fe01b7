"""Span-seminorm diagnostics of tabular average-reward Q-learning on a grid of transition counts (``avg_reward_q``).

``SpanSeminormLogger`` asks ``AverageRewardQLearning`` (protocol :class:`KGridModule`, checked in ``setup``) to stop
at each grid point ``k`` (the module splits its chunks
there, which does not change the updates) and records: span error sp(Q−Q*) (and its MSE over replicas), sp(Q−Q̄),
greedy agreement with π* and with greedy(Q̄), gain regret, drift mean(Q), the pointwise error ‖Q−Q*_c‖∞ (with
centering), visit counts and realised stepsizes. The curve is kept in :attr:`curve` (lists keyed by metric) and sent
to every logger with ``step=k``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from lightning.pytorch import Callback, LightningModule, Trainer

from zoo.core import checks
from zoo.core.messages import say
from zoo.core.protocols import check


def k_grid(kind: str, n_points: int, k_min: int, k_max: int) -> list[int]:
    """``n_points`` transition counts in ``[k_min, k_max]``: ``geometric`` or ``linear`` (rounded, unique)."""
    if kind not in ("geometric", "linear"):
        raise ValueError(f"SpanSeminormLogger grid={kind!r}: expected geometric or linear")
    if n_points < 2 or k_min < 1 or k_max < k_min:
        raise ValueError(f"SpanSeminormLogger: need n_points >= 2 and 1 <= k_min <= k_max; got {n_points}, "
                         f"{k_min}, {k_max}")  # fmt: skip
    pts = np.geomspace(k_min, k_max, n_points) if kind == "geometric" else np.linspace(k_min, k_max, n_points)
    return sorted({int(round(p)) for p in pts})


@runtime_checkable
class KGridModule(Protocol):
    """What :class:`SpanSeminormLogger` needs of the module (``AverageRewardQLearning``)."""

    def add_k_hook(self, ks: list[int], hook: Callable[[Any, int], None]) -> None:
        """Call ``hook(module, k)`` when the transition counter reaches each of ``ks``."""
        ...

    def metrics(self) -> dict[str, float]:
        """The span diagnostics at the current transition count."""
        ...


@runtime_checkable
class StepsData(Protocol):
    """What :class:`SpanSeminormLogger` needs of the datamodule when ``k_max`` is not given."""

    #: Transitions per epoch.
    steps: int


class SpanSeminormLogger(Callback):
    """Record the span diagnostics at a grid of transition counts k.

    Args:
        reference: which error ``span/error`` reports: ``Q*`` (the method's target) or ``Qbar`` (the universal
            stepsize's predicted wrong target); both are recorded anyway.
        grid: ``geometric`` (default) or ``linear`` spacing of k.
        n_points: grid size (>= 2; rounding to whole transition counts can merge points, which is said).
        k_min: first grid point (lowered to a derived ``k_max`` below it, which is said).
        k_max: last grid point, >= ``k_min`` (``null``: the datamodule's ``steps`` × ``trainer.max_epochs``).
    """

    def __init__(self, reference: Literal["Q*", "Qbar"] = "Q*", grid: Literal["geometric", "linear"] = "geometric",
                 n_points: int = 40, k_min: int = 100, k_max: int | None = None) -> None:  # fmt: skip
        checks.choice(checks.callback(self, "reference"), reference, ("Q*", "Qbar"))
        checks.choice(checks.callback(self, "grid"), grid, ("geometric", "linear"))
        checks.integer(checks.callback(self, "n_points"), n_points, low=2)
        checks.integer(checks.callback(self, "k_min"), k_min)
        checks.optional_integer(checks.callback(self, "k_max"), k_max, low=k_min)
        self.reference, self.grid, self.n_points, self.k_min, self.k_max = reference, grid, n_points, k_min, k_max
        #: metric -> values at the recorded k (``curve["k"]``).
        self.curve: dict[str, list[float]] = {}
        self._trainer: Trainer | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Register the grid with the module (which needs ``add_k_hook``)."""
        if stage != "fit":
            return
        check(pl_module, KGridModule, "SpanSeminormLogger", "module")
        k_max = self.k_max
        if k_max is None:
            steps = check(trainer.datamodule, StepsData, "SpanSeminormLogger(k_max=None)", "datamodule").steps
            k_max = int(steps) * max(1, trainer.max_epochs or 1)
        self._trainer = trainer
        k_min = self.k_min
        if k_min > k_max:  # only a derived k_max can be below k_min (__init__ checks a given one)
            say(f"SpanSeminormLogger.k_min={k_min} is beyond the run's {k_max} transitions (steps x max_epochs); "
                f"the grid starts at k_min={k_max}")  # fmt: skip
            k_min = k_max
        grid = k_grid(self.grid, self.n_points, k_min, k_max)
        if len(grid) < self.n_points:  # rounding to whole transition counts merged grid points
            say(f"SpanSeminormLogger.n_points={self.n_points}: {len(grid)} distinct transition counts in "
                f"[{k_min}, {k_max}] (the {self.grid} grid is rounded to whole counts)")  # fmt: skip
        pl_module.add_k_hook(grid, self.record)

    def record(self, module: Any, k: int) -> None:
        """Compute the diagnostics at ``k``, append them to :attr:`curve` and send them to the loggers."""
        values = module.metrics()
        values["k"] = float(k)
        values["error"] = values.get("span_err" if self.reference == "Q*" else "span_err_bar", math.nan)
        for key, value in values.items():
            self.curve.setdefault(key, []).append(value)
        if self._trainer is not None:
            clean = {f"span/{key}": v for key, v in values.items() if v == v and key != "k"}
            for logger in self._trainer.loggers:
                logger.log_metrics(clean, step=k)

    def state_dict(self) -> dict[str, Any]:
        """The curve so far (primitives)."""
        return {"curve": {k: list(v) for k, v in self.curve.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the curve on resume."""
        self.curve = {k: list(v) for k, v in state_dict.get("curve", {}).items()}
