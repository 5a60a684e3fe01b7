"""Stop a diverged run with one line (issue #21): a non-finite loss or weight names the step, who trained and the knobs.

A loss or weight that became ``nan``/``inf`` is a user error (the step sizes of the recipe are too large for the
data), so the run stops at once with a :class:`Diverged` error, a ``ValueError`` that the ``zoo`` entry point prints as
``zoo: error: <who>: the training loss became non-finite (nan) at step 12 (epoch 0); the run diverged: lower
--model.init_args.lr=0.5``. Without it the run went on with ``nan`` weights until a library failed far from the cause
(scikit-learn's ``Input X contains NaN`` inside the unlearning MIA).

:class:`LossGuard` watches one loss a step. On the CPU it checks at once; on an accelerator it records the first bad
step on the device and reads it back only when asked (``sync=True``, e.g. at the steps the loggers write), so the check
adds no host synchronisation per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NoReturn

import torch
from torch import Tensor


class Diverged(ValueError):
    """A run whose loss or weights became non-finite: lower the step sizes the message names."""


def stop(who: str, what: str, step: int | None, epoch: int | None, knobs: str, value: float | None = None) -> NoReturn:
    """Raise :class:`Diverged`: ``<who>: the <what> became non-finite (<value>) at step <step> (epoch <e>); ...``.

    ``step=None``: found after the training (``at the end of training``).
    """
    shown = "nan or inf" if value is None else repr(float(value))
    where = "the end of training" if step is None else f"step {step}"
    where += "" if epoch is None else f" (epoch {epoch})"
    raise Diverged(f"{who}: the {what} became non-finite ({shown}) at {where}; the run diverged: lower {knobs}")


def first_nonfinite(tensors: Iterable[Tensor]) -> int | None:
    """Index of the first tensor holding a ``nan`` or ``inf`` (``None`` when all are finite); one host sync."""
    tensors = list(tensors)
    if not tensors:
        return None
    flags = torch.stack([torch.isfinite(t.detach()).all().to(tensors[0].device) for t in tensors])
    if bool(flags.all()):
        return None
    return int((~flags).nonzero()[0, 0])


Knobs = str | Callable[[], str]


class LossGuard:
    """The first step whose loss was non-finite, checked per step on the CPU and at ``sync`` points elsewhere.

    Args:
        defer: record on the device and check at ``sync`` points (``None``: on every device but the CPU).
    """

    def __init__(self, defer: bool | None = None) -> None:
        self.defer = defer
        self._bad: Tensor | None = None  # device (step, epoch) of the first bad loss, -1 while none (deferred)

    def observe(self, loss: Tensor, step: int, epoch: int, who: str, knobs: Knobs, sync: bool = False) -> None:
        """Record ``loss`` of ``step``; raise :class:`Diverged` once a non-finite loss is seen (at once on the CPU).

        ``knobs`` (the options to lower, or a function giving them) is only formatted when the run stops.
        """
        loss = loss.detach()
        if not (loss.device.type != "cpu" if self.defer is None else self.defer):
            if loss.numel() == 1:  # the usual scalar: one float read (about 1 us) instead of isfinite + all
                value = float(loss)
                if not math.isfinite(value):
                    stop(who, "training loss", step, epoch, _text(knobs), value)
            elif not bool(torch.isfinite(loss).all()):
                stop(who, "training loss", step, epoch, _text(knobs))
            return
        if self._bad is None:
            self._bad = torch.full((2,), -1, dtype=torch.long, device=loss.device)
        first = (~torch.isfinite(loss).all()) & (self._bad[0] < 0)
        here = torch.tensor([step, epoch], dtype=torch.long).to(loss.device, non_blocking=True)
        self._bad = torch.where(first, here, self._bad)
        if sync:
            self.flush(who, knobs)

    def flush(self, who: str, knobs: Knobs) -> None:
        """Raise :class:`Diverged` for a non-finite loss recorded on an accelerator (one host sync; CPU: no-op)."""
        if self._bad is None:
            return
        bad_step, bad_epoch = (int(v) for v in self._bad.tolist())
        if bad_step >= 0:
            stop(who, "training loss", bad_step, bad_epoch, _text(knobs))


def _text(knobs: Knobs) -> str:
    return knobs if isinstance(knobs, str) else knobs()
