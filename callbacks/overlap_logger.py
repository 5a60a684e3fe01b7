"""Per-direction overlaps of a student with a known teacher (``emergence``): M_p(t), first passages, residuals.

``OverlapLogger`` registers an observer with the module (protocol :class:`OverlapSource`), which hands it
M_p = max_j |⟨w_j, v_p⟩| after *every* update (in blocks (n, R, P) per training step):
first-passage times t_θ,p (the first update count with
M_p > θ, ∞ while not reached) are therefore exact, not rounded to the logging interval. Every ``every_n_steps``
training steps it records a row of the curve: the update count, M (R, P), the residuals r_p = a*_p²·(1 − M_p^k)
(k the information exponent), the exact losses with the current and the refit second layer, and the number of learned
directions (M_p > the largest threshold); it logs their replica means as ``overlap/*``.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor

from zoo.core import checks
from zoo.core.protocols import check


@runtime_checkable
class OverlapSource(Protocol):
    """What :class:`OverlapLogger` needs of the module (``TwoLayerHermiteStudent``)."""

    #: Callables ``(Ms (n, R, P), t0)`` the module calls with the overlaps after every update, in blocks.
    update_observers: list[Any]
    #: The information exponent k (the power in r_p).
    degree: int

    def teacher(self) -> tuple[Tensor, Tensor] | None:
        """(V (R, P, d), a* (R, P)) or ``None``."""
        ...

    def losses(self) -> dict[str, Tensor]:
        """Exact losses per replica (R,), e.g. ``loss_fixed`` and ``loss_refit``."""
        ...


class OverlapLogger(Callback):
    """Record M_p(t), first-passage times and residuals of every replica and direction.

    Args:
        every_n_steps: training steps between recorded rows (>= 1).
        thresholds: overlap levels of the first-passage times, increasing in (0, 1) (card 0.3 and 0.9).
    """

    def __init__(self, every_n_steps: int = 10, thresholds: list[float] | tuple[float, ...] = (0.3, 0.9)) -> None:
        checks.integer(checks.callback(self, "every_n_steps"), every_n_steps)
        thresholds = list(thresholds)
        if not thresholds or any(not (0 < th < 1) for th in thresholds) or thresholds != sorted(set(thresholds)):
            checks.fail(checks.callback(self, "thresholds"), thresholds, "increasing values in (0, 1)")
        self.every_n_steps, self.thresholds = every_n_steps, [float(th) for th in thresholds]
        #: First passages (len(thresholds), R, P): update counts, ∞ while not reached.
        self.first: Tensor | None = None
        #: Recorded rows: ``t``, ``M`` (R×P lists), ``r`` (R×P), ``loss_fixed``/``loss_refit`` (R), ``n_learned`` (R).
        self.history: list[dict[str, Any]] = []
        self._module: Any = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Check the module and register the per-update observer."""
        check(pl_module, OverlapSource, "OverlapLogger")
        if self._observe not in pl_module.update_observers:
            pl_module.update_observers.append(self._observe)
        self._module = pl_module

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Unregister the observer."""
        if self._observe in getattr(pl_module, "update_observers", []):
            pl_module.update_observers.remove(self._observe)

    def _observe(self, Ms: Tensor, t0: int) -> None:
        """Ms (n, R, P): row i holds M after t0 + i updates."""
        Ms = Ms.detach().cpu()
        if self.first is None:
            self.first = torch.full((len(self.thresholds), *Ms.shape[1:]), math.inf, dtype=torch.float64)
        steps = torch.arange(t0, t0 + Ms.shape[0], dtype=torch.float64).view(-1, 1, 1)
        for i, th in enumerate(self.thresholds):
            above = Ms > th
            when = torch.where(above, steps, math.inf).amin(0)  # first row above th (∞: none)
            self.first[i] = torch.minimum(self.first[i], when)

    def record(self, pl_module: Any, t: int) -> dict[str, Any] | None:
        """Append (and return) the row of the current state (``None`` without a teacher)."""
        teacher = pl_module.teacher()
        if teacher is None:
            return None
        V, a_star = teacher
        M = (pl_module.model.W @ V.transpose(-1, -2)).abs().amax(-2).detach().cpu()
        r = a_star.cpu() ** 2 * (1 - M**pl_module.degree)
        row = {"t": int(t), "M": M.tolist(), "r": r.tolist(),
               "n_learned": (M > self.thresholds[-1]).sum(-1).tolist()}  # fmt: skip
        row.update({k: v.detach().cpu().tolist() for k, v in pl_module.losses().items()})
        self.history.append(row)
        return row

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Record the initial state (a resumed run keeps its history)."""
        if not self.history:
            self.record(pl_module, pl_module.updates)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:  # fmt: skip
        """Every ``every_n_steps`` training steps: a row, logged as replica means."""
        if trainer.global_step % self.every_n_steps:
            return
        row = self.record(pl_module, pl_module.updates)
        if row is None:
            return
        values = {"overlap/n_learned": sum(row["n_learned"]) / len(row["n_learned"]),
                  "overlap/M_min": float(torch.tensor(row["M"]).min(-1).values.mean())}  # fmt: skip
        for key in ("loss_fixed", "loss_refit"):
            if key in row:
                values[f"overlap/{key}"] = sum(row[key]) / len(row[key])
        pl_module.log_dict(values, batch_size=1)

    def summary(self) -> dict[str, Any]:
        """First passages as lists (R × P; ``inf`` for not reached), keyed ``t_<threshold>``."""
        if self.first is None:
            return {}
        return {f"t_{th:g}": self.first[i].tolist() for i, th in enumerate(self.thresholds)}

    def state_dict(self) -> dict[str, Any]:
        """History and first passages (a resumed run continues them)."""
        return {"history": self.history, "first": None if self.first is None else self.first.tolist()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.history = list(state_dict.get("history", []))
        first = state_dict.get("first")
        self.first = None if first is None else torch.tensor(first, dtype=torch.float64)
