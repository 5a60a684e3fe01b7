"""Fresh label noise at every optimizer step, shared by the cards that train with label noise (``adam_sharpness``).

RNG contract (card ``adam_sharpness``, "Label noise"): replica ``r`` owns one ``torch.Generator`` seeded
``noise_seed + r``; each optimizer step draws one vector ξ of the replica's n labels from it, in step order, so the
same ``noise_seed`` gives the same sequence in every run, and replica r of a vectorised run sees what a one-replica run
with ``noise_seed + r`` sees. A block of T steps is drawn as one (T, n) tensor, row t being step t (the same numbers
as T draws of n: checked by ``tests/adam_sharpness/test_callback_label_noise.py``).

Kinds: ``rademacher`` adds δ·ξ with ξ = ±1 (ỹ = y + δξ); ``flip`` negates each ±1 label with probability δ
(classification labels).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor

from zoo.core import checks
from zoo.core.protocols import check

Kind = Literal["rademacher", "flip"]


class LabelNoise:
    """Per-replica label-noise streams (see the module docstring).

    Args:
        delta: δ (``rademacher``: noise amplitude; ``flip``: flip probability).
        kind: ``rademacher`` or ``flip``.
        noise_seed: seed of replica 0 (replica r uses ``noise_seed + r``).
        n_replicas: number of streams.
    """

    def __init__(self, delta: float, kind: Kind = "rademacher", noise_seed: int = 1000, n_replicas: int = 1) -> None:
        self.delta, self.kind, self.noise_seed = float(delta), kind, int(noise_seed)
        self.generators = [torch.Generator().manual_seed(self.noise_seed + r) for r in range(n_replicas)]

    def draw(self, steps: int, n: int) -> Tensor:
        """ξ for ``steps`` consecutive steps: (steps, R, n) of ±1 (float64), each replica from its own stream."""
        xi = [torch.randint(0, 2, (steps, n), generator=g) for g in self.generators]
        return torch.stack(xi, dim=1).to(torch.float64).mul_(2).sub_(1)

    def draw_flips(self, steps: int, n: int) -> Tensor:
        """``flip``: (steps, R, n) of ±1, −1 with probability δ."""
        u = [torch.rand((steps, n), generator=g, dtype=torch.float64) for g in self.generators]
        return 1.0 - 2.0 * (torch.stack(u, dim=1) < self.delta).to(torch.float64)

    def noisy(self, y: Tensor, steps: int) -> Tensor:
        """ỹ for ``steps`` consecutive steps from clean ``y`` (R, n): (steps, R, n)."""
        if self.kind == "flip":
            return y.unsqueeze(0) * self.draw_flips(steps, y.shape[-1]).to(y.dtype)
        return y.unsqueeze(0) + self.delta * self.draw(steps, y.shape[-1]).to(y.dtype)

    def state_dict(self) -> dict[str, Any]:
        """The generators' states (exact resume)."""
        return {"states": [g.get_state() for g in self.generators]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the generators' states."""
        for g, s in zip(self.generators, state["states"], strict=True):
            g.set_state(s)


@runtime_checkable
class NoisyLabels(Protocol):
    """What :class:`LabelNoiseCallback` needs of the module: a slot for the noise and its replica count."""

    #: The installed noise (``None`` until the callback sets it); the module draws from it at every optimizer step.
    label_noise: LabelNoise | None
    #: Independent replicas (one noise stream each).
    n_replicas: int


class LabelNoiseCallback(Callback):
    """Install fresh per-step label noise in a module (protocol :class:`NoisyLabels`).

    Args:
        delta: δ (``rademacher``: ỹ = y + δξ; ``flip``: flip probability). 0 trains on clean labels.
        kind: ``rademacher`` or ``flip``.
        noise_seed: seed of replica 0's stream (replica r: ``noise_seed + r``).
    """

    def __init__(self, delta: float = 0.5, kind: Kind = "rademacher", noise_seed: int = 1000) -> None:
        checks.non_negative(checks.callback(self, "delta"), delta)
        checks.choice(checks.callback(self, "kind"), kind, ("rademacher", "flip"))
        if kind == "flip":
            checks.probability(checks.callback(self, "delta"), delta)
        checks.integer(checks.callback(self, "noise_seed"), noise_seed, low=0)
        self.delta, self.kind, self.noise_seed = float(delta), kind, int(noise_seed)
        self._pending: dict[str, Any] | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Check the module and give it the noise streams."""
        check(pl_module, NoisyLabels, "LabelNoiseCallback")
        noise = LabelNoise(self.delta, self.kind, self.noise_seed, int(pl_module.n_replicas))
        if self._pending is not None:
            noise.load_state_dict(self._pending)
            self._pending = None
        pl_module.label_noise = noise

    def state_dict(self) -> dict[str, Any]:
        """The streams' states, so ``--ckpt_path`` resumes the same noise sequence."""
        return {} if self._noise is None else self._noise.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the streams (applied at ``setup`` or at once if already installed)."""
        if state_dict:
            self._pending = state_dict

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Keep a handle on the installed noise (checkpoints save its state); apply a state loaded after setup."""
        self._noise = pl_module.label_noise
        if self._pending is not None and self._noise is not None:
            self._noise.load_state_dict(self._pending)
            self._pending = None

    _noise: LabelNoise | None = None
