"""Sharpness of the training loss during training: tr(H), tr(diag(H)^{1/2}) and block/exponent variants.

``SharpnessLogger`` works on any zoo module that follows :class:`SharpnessModule` (checked in ``setup``): a
``sharpness_closure()`` returning the scalar loss whose Hessian H is measured (``adam_sharpness``: the clean-label
training loss). H is taken over the module's trainable parameters:

- ``exact``: ``torch.autograd.functional.hessian`` of the closure through ``torch.func.functional_call`` on the
  flattened parameters (at most ``max_exact_params`` of them);
- ``hutchinson``: ``n_probes`` Rademacher probes z, Hessian-vector products by double backward (all probes in one
  batched call): tr(H) ≈ mean_k zᵀHz, diag(H) ≈ mean_k z⊙Hz;
- ``auto``: exact up to ``max_exact_params`` parameters, else Hutchinson.

Logged (mean over replicas; per replica in :attr:`history`): ``sharpness/trH``, ``sharpness/tr_sqrt_diagH`` =
Σ_i √max(H_ii, 0), ``sharpness/block_sqrt`` = Σ_B |B|·√mean_B max(H_ii, 0) (with ``blocks``),
``sharpness/tr_diagH_pow`` = Σ_i max(H_ii, 0)^{1−e} (with ``exponent``), ``sharpness/n_clamped`` (diagonal entries
below 0 set to 0 before the root; Hutchinson's noisy diagonals bias the root downward, and a warning says so).

A module whose parameters carry a leading replica dimension declares ``sharpness_replicas: int`` (the Hessian is then
block diagonal over replicas and each replica gets its own values). The closure runs with the module in eval mode
(BatchNorm in train mode breaks Hessian-vector products: pytorch/functorch#986). ``every_n_steps`` counts optimizer
steps: the module's ``optimizer_steps`` when it has one (modules that take several steps per batch), else
``trainer.global_step``.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor, nn

from zoo.core import checks
from zoo.core.protocols import check

Method = Literal["auto", "exact", "hutchinson", "backpack"]


@runtime_checkable
class SharpnessModule(Protocol):
    """What :class:`SharpnessLogger` needs of the module."""

    def sharpness_closure(self) -> Tensor:
        """The scalar loss, computed from the module's current trainable parameters, whose Hessian is logged."""
        ...


class _Closure(nn.Module):
    """Wraps a module so ``torch.func.functional_call`` can swap its parameters under ``sharpness_closure``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.m = module

    def forward(self) -> Tensor:
        return self.m.sharpness_closure()


def sharpness_values(diag: list[Tensor], replicas: int, blocks: list[list[int]] | str | None = None,
                     exponent: float | None = None) -> dict[str, Tensor]:  # fmt: skip
    """The logged measures from each parameter's Hessian diagonal (shaped like the parameter), per replica (R,)."""
    flat = torch.cat([d.reshape(replicas, -1) if replicas > 1 else d.reshape(1, -1) for d in diag], dim=1)
    pos = flat.clamp_min(0)
    out = {"trH": flat.sum(1), "tr_sqrt_diagH": pos.sqrt().sum(1), "n_clamped": (flat < 0).sum(1).to(flat.dtype)}
    if blocks is not None:
        if blocks == "tensor":
            sizes = [d.numel() // replicas for d in diag]
            ids = torch.cat([torch.full((s,), i, dtype=torch.long) for i, s in enumerate(sizes)])
        else:
            ids = torch.tensor([i for b in blocks for i in b], dtype=torch.long)
        if ids.numel() != flat.shape[1]:
            raise ValueError(f"SharpnessLogger.blocks: {ids.numel()} block ids for {flat.shape[1]} parameters "
                             "(per replica); expected one id per element")  # fmt: skip
        ids = ids.to(flat.device)
        count = torch.bincount(ids).to(flat.dtype)
        sums = torch.zeros(flat.shape[0], count.numel(), dtype=flat.dtype, device=flat.device).index_add_(1, ids, flat)
        out["block_sqrt"] = (count * (sums / count).clamp_min(0).sqrt()).sum(1)
    if exponent is not None:
        out["tr_diagH_pow"] = pos.pow(1 - exponent).sum(1)
    return out


class SharpnessLogger(Callback):
    """Log tr(H) and tr(diag(H)^{1/2}) of the module's ``sharpness_closure`` every ``every_n_steps`` optimizer steps.

    Args:
        method: ``auto`` | ``exact`` | ``hutchinson`` | ``backpack`` (not available in v1: BackPACK does not support
            custom parameterisations such as the diagonal net; the option is refused with that reason).
        every_n_steps: optimizer steps between measurements (a last one is taken when training ends).
        n_probes: Hutchinson probes.
        max_exact_params: the exact Hessian's limit on trainable parameters (``auto`` switches to Hutchinson above
            it, ``exact`` raises).
        labels: which labels the closure uses (``clean``, the card's default; recorded, the module decides).
        blocks: ``tensor`` (one block per parameter tensor) or per parameter a flat list of block ids (per replica)
            for ``sharpness/block_sqrt``.
        exponent: e for ``sharpness/tr_diagH_pow`` = Σ H_ii^{1−e}.
        seed: seed of the Hutchinson probes.
    """

    def __init__(self, method: Method = "auto", every_n_steps: int = 1000, n_probes: int = 64,
                 max_exact_params: int = 4096, labels: Literal["clean", "noisy"] = "clean",
                 blocks: list[list[int]] | Literal["tensor"] | None = None, exponent: float | None = None,
                 seed: int = 0) -> None:  # fmt: skip
        checks.choice(checks.callback(self, "method"), method, ("auto", "exact", "hutchinson", "backpack"))
        if method == "backpack":
            raise ValueError("SharpnessLogger.method='backpack': not available in v1 (BackPACK's DiagHessian "
                             "covers standard layers only, not the diagonal net's u⊙u − v⊙v); use exact or "
                             "hutchinson")  # fmt: skip
        checks.integer(checks.callback(self, "every_n_steps"), every_n_steps)
        checks.integer(checks.callback(self, "n_probes"), n_probes)
        checks.integer(checks.callback(self, "max_exact_params"), max_exact_params)
        checks.choice(checks.callback(self, "labels"), labels, ("clean", "noisy"))
        if exponent is not None:
            checks.number(checks.callback(self, "exponent"), exponent, 0.0, 1.0, open_high=True)
        if isinstance(blocks, str) and blocks != "tensor":
            checks.fail(checks.callback(self, "blocks"), blocks, "'tensor', a list of block-id lists or null")
        checks.integer(checks.callback(self, "seed"), seed, low=0)
        self.method, self.every_n_steps, self.n_probes = method, every_n_steps, n_probes
        self.max_exact_params, self.labels, self.blocks, self.exponent = max_exact_params, labels, blocks, exponent
        self.seed = seed
        #: One entry per measurement: ``step`` and each measure as a per-replica list.
        self.history: list[dict[str, Any]] = []
        self.seconds = 0.0
        self._last = -1
        self._warned = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Check the module's protocol and, for ``exact``, its parameter count."""
        check(pl_module, SharpnessModule, "SharpnessLogger")
        n = sum(p.numel() for p in pl_module.parameters() if p.requires_grad)
        if self.method == "exact" and n > self.max_exact_params:
            raise ValueError(f"SharpnessLogger.method='exact': the module has {n} trainable parameters > "
                             f"max_exact_params={self.max_exact_params}; use method=auto or hutchinson")  # fmt: skip
        self._generator = torch.Generator().manual_seed(self.seed)

    def resolved_method(self, pl_module: nn.Module) -> str:
        """``exact`` or ``hutchinson`` for this module."""
        if self.method != "auto":
            return self.method
        n = sum(p.numel() for p in pl_module.parameters() if p.requires_grad)
        return "exact" if n <= self.max_exact_params else "hutchinson"

    def measure(self, pl_module: nn.Module) -> dict[str, Tensor]:
        """The measures now, per replica (module in eval mode during the computation)."""
        import time

        start = time.perf_counter()
        named = [(k, p) for k, p in pl_module.named_parameters() if p.requires_grad]
        was_training = pl_module.training
        pl_module.eval()
        try:
            if self.resolved_method(pl_module) == "exact":
                diag = exact_diag(pl_module, named)
            else:
                diag = hutchinson_diag(pl_module, [p for _, p in named], self.n_probes, self._gen())
        finally:
            pl_module.train(was_training)
        replicas = int(getattr(pl_module, "sharpness_replicas", 1) or 1)
        out = sharpness_values(diag, replicas, self.blocks, self.exponent)
        if self.resolved_method(pl_module) == "hutchinson" and float(out["n_clamped"].sum()) > 0 and not self._warned:
            warnings.warn("SharpnessLogger: Hutchinson diagonal estimates below 0 were clamped to 0 before the "
                          "square root; noisy diagonals bias tr(diag(H)^{1/2}) downward (raise n_probes)",
                          stacklevel=2)  # fmt: skip
            self._warned = True
        self.seconds += time.perf_counter() - start
        return out

    def _gen(self) -> torch.Generator:
        if not hasattr(self, "_generator"):
            self._generator = torch.Generator().manual_seed(self.seed)
        return self._generator

    def _steps(self, trainer: Trainer, pl_module: LightningModule) -> int:
        return int(getattr(pl_module, "optimizer_steps", trainer.global_step))

    def _record(self, trainer: Trainer, pl_module: LightningModule, log: bool) -> None:
        step = self._steps(trainer, pl_module)
        values = self.measure(pl_module)
        self.history.append({"step": step, **{k: v.tolist() for k, v in values.items()}})
        self._last = step
        if log:
            pl_module.log_dict({f"sharpness/{k}": float(v.mean()) for k, v in values.items()}, batch_size=1)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:  # fmt: skip
        """Measure when the optimizer-step count crosses a multiple of ``every_n_steps``."""
        step = self._steps(trainer, pl_module)
        if step // self.every_n_steps > self._last // self.every_n_steps:
            self._record(trainer, pl_module, log=True)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A first measurement before training (kept in :attr:`history`; Lightning does not log here)."""
        if self._last < 0:
            self._record(trainer, pl_module, log=False)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A final measurement at the end of training (kept in :attr:`history`, not logged)."""
        if self._steps(trainer, pl_module) != self._last:
            self._record(trainer, pl_module, log=False)

    @property
    def final(self) -> dict[str, Any]:
        """The last measurement (empty before any)."""
        return self.history[-1] if self.history else {}

    def state_dict(self) -> dict[str, Any]:
        """History and last step (resume continues the schedule)."""
        return {"history": self.history, "last": self._last}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore history and last step."""
        self.history, self._last = list(state_dict.get("history", [])), int(state_dict.get("last", -1))


def exact_diag(module: nn.Module, named: list[tuple[str, Tensor]]) -> list[Tensor]:
    """Hessian diagonal of ``module.sharpness_closure()`` per parameter, from the full Hessian of the flat vector."""
    wrapper = _Closure(module)
    shapes = [p.shape for _, p in named]
    sizes = [p.numel() for _, p in named]
    flat0 = torch.cat([p.detach().reshape(-1) for _, p in named])

    def f(flat: Tensor) -> Tensor:
        parts = torch.split(flat, sizes)
        params = {f"m.{k}": t.reshape(s) for (k, _), t, s in zip(named, parts, shapes, strict=True)}
        return torch.func.functional_call(wrapper, params, ())

    H = torch.autograd.functional.hessian(f, flat0, vectorize=True)
    return [t.reshape(s) for t, s in zip(torch.split(torch.diagonal(H), sizes), shapes, strict=True)]


def hutchinson_diag(module: nn.Module, params: list[Tensor], n_probes: int, generator: torch.Generator) -> list[Tensor]:
    """Hutchinson estimate of the Hessian diagonal per parameter (Rademacher probes, batched double backward)."""
    with torch.enable_grad():
        loss = module.sharpness_closure()
        grads = torch.autograd.grad(loss, params, create_graph=True)
        flat = torch.cat([g.reshape(-1) for g in grads])
        z = torch.randint(0, 2, (n_probes, flat.numel()), generator=generator)
        z = z.to(device=flat.device, dtype=flat.dtype).mul_(2).sub_(1)
        hz = torch.autograd.grad(flat, params, grad_outputs=z, is_grads_batched=True)
    hz_flat = torch.cat([h.reshape(n_probes, -1) for h in hz], dim=1)
    est = (z * hz_flat).mean(0)
    return [t.reshape(p.shape) for t, p in zip(torch.split(est, [p.numel() for p in params]), params, strict=True)]


__all__ = ["SharpnessLogger", "SharpnessModule", "exact_diag", "hutchinson_diag", "sharpness_values"]
