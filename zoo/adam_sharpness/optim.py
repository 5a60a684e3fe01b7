"""``AdaptiveGM``: one optimizer for SGD, Adam without bias correction, RMSProp, AdamE, Adalayer and Adam-mini blocks.

The update (public code form, card ``adam_sharpness``)::

    m <- beta1*m + (1-beta1)*g
    v <- beta2*v + (1-beta2)*g^2          (block modes: mean of g^2 over each block)
    theta <- theta - lr * m / (v^exponent + eps)     (eps outside the power; no bias correction by default)
    beta2 = 1 - C*lr^scheme               (unless given)

``batch_dims`` leading dimensions of every parameter index independent replicas (seeds run side by side): block means
never mix replicas. A plain ``torch.optim.Optimizer``: any zoo module may return it from ``configure_optimizers``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import torch
from torch import Tensor

Block = Literal["none", "tensor", "custom"]
#: Preset name -> AdaptiveGM settings (``torch_adam`` and ``sgd`` are built by :func:`make_optimizer`).
PRESETS: dict[str, dict[str, Any]] = {
    "sgd": {"beta1": 0.0, "exponent": 0.0, "eps": 0.0},
    "adam_nobc": {"beta1": 0.9, "exponent": 0.5},
    "rmsprop": {"beta1": 0.0, "exponent": 0.5},
    "adame": {"beta1": 0.9, "exponent": 0.5},
    "adalayer": {"beta1": 0.9, "exponent": 0.5, "block": "tensor"},
    "adam_mini": {"beta1": 0.9, "exponent": 0.5, "block": "custom"},
    "torch_adam": {"beta1": 0.9},
}
OPTIMIZERS = tuple(PRESETS)


def beta2_schedule(lr: float, C: float = 10.0, scheme: float = 2.0) -> float:
    """``beta2 = 1 - C*lr^scheme``; raises ``ValueError`` when that is <= 0 (no clipping)."""
    decay = C * lr**scheme
    if not decay < 1:
        raise ValueError(f"beta2 = 1 - C*lr^scheme = 1 - {C:g}*{lr:g}^{scheme:g} = {1 - decay:g} <= 0: expected "
                         "C*lr^scheme < 1 (lower C or lr, or raise scheme)")  # fmt: skip
    return 1.0 - decay


class AdaptiveGM(torch.optim.Optimizer):
    """Adaptive gradient method with a tunable exponent, no bias correction by default, and block second moments.

    Args:
        params: parameters (one group).
        lr: learning rate (beta2 is computed from this *initial* value).
        beta1: first-moment decay (0: no momentum).
        beta2: second-moment decay; ``None`` means ``1 - C*lr^scheme``.
        C: constant of the beta2 coupling.
        scheme: power of lr in the beta2 coupling (card main scheme 2: beta2 = 0.999 at lr = 0.01).
        exponent: e in ``v^e`` (0.5 Adam/RMSProp; 0 with beta1 = 0 is SGD with lr/(1+eps)).
        eps: added outside the power.
        bias_correction: divide m and v by ``1 - beta^t`` as ``torch.optim.Adam`` does (public code: no).
        block: ``none`` (elementwise v), ``tensor`` (one v per parameter tensor: Adalayer), ``custom`` (``blocks``).
        blocks: for ``custom``: per parameter, a flat list assigning each (non-replica) element a block id; ids
            shared across tensors join one block (the diag-net's Adam-mini pairs {u_i, v_i}: ``[[0..d-1], [0..d-1]]``).
        batch_dims: leading dimensions of every parameter that index independent replicas.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 0.01, beta1: float = 0.9,
                 beta2: float | None = None, C: float = 10.0, scheme: float = 2.0, exponent: float = 0.5,
                 eps: float = 1e-6, bias_correction: bool = False, block: Block = "none",
                 blocks: list[list[int]] | None = None, batch_dims: int = 0) -> None:  # fmt: skip
        if not lr > 0:
            raise ValueError(f"AdaptiveGM lr={lr!r}: expected a number > 0")
        if not 0 <= beta1 < 1:
            raise ValueError(f"AdaptiveGM beta1={beta1!r}: expected a number in [0, 1)")
        if beta2 is None:
            beta2 = beta2_schedule(lr, C, scheme)
        if not 0 <= beta2 < 1:
            raise ValueError(f"AdaptiveGM beta2={beta2!r}: expected a number in [0, 1)")
        if not exponent >= 0:
            raise ValueError(f"AdaptiveGM exponent={exponent!r}: expected a number >= 0")
        if not eps >= 0:
            raise ValueError(f"AdaptiveGM eps={eps!r}: expected a number >= 0")
        if block not in ("none", "tensor", "custom"):
            raise ValueError(f"AdaptiveGM block={block!r}: expected one of 'none', 'tensor', 'custom'")
        if (block == "custom") != (blocks is not None):
            raise ValueError(f"AdaptiveGM block={block!r} with blocks={'given' if blocks else None}: blocks are "
                             "given exactly when block='custom'")  # fmt: skip
        defaults = {
            "lr": lr,
            "beta1": beta1,
            "beta2": beta2,
            "exponent": exponent,
            "eps": eps,
            "bias_correction": bias_correction,
            "block": block,
            "blocks": blocks,
            "batch_dims": batch_dims,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            if group["block"] == "custom":
                _check_blocks(group["params"], group["blocks"], group["batch_dims"])

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # noqa: D102 - torch's docstring
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        lr, b1, b2, e, eps = group["lr"], group["beta1"], group["beta2"], group["exponent"], group["eps"]
        grads = [p.grad for p in params]
        states = [self.state[p] for p in params]
        if not states[0]:
            for p, st in zip(params, states, strict=True):
                st["step"] = torch.zeros((), dtype=torch.float64)
                st["m"] = torch.zeros_like(p)
                st["v"] = torch.zeros_like(p) if group["block"] == "none" else None
            if group["block"] != "none":
                states[0]["v_blocks"] = torch.zeros(self._block_shape(group, params), dtype=params[0].dtype,
                                                    device=params[0].device)  # fmt: skip
        step = float(states[0]["step"]) + 1
        for st in states:
            st["step"].fill_(step)
        ms = [st["m"] for st in states]
        if b1 > 0:
            torch._foreach_mul_(ms, b1)
            torch._foreach_add_(ms, grads, alpha=1 - b1)
        else:
            for m, g in zip(ms, grads, strict=True):
                m.copy_(g)
        if group["block"] == "none":
            vs = [st["v"] for st in states]
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
        else:
            vb = states[0]["v_blocks"]
            vb.mul_(b2).add_(self._block_means(group, grads), alpha=1 - b2)
            vs = self._expand(group, vb, params)
        bc1 = 1 - b1**step if group["bias_correction"] and b1 > 0 else 1.0
        bc2 = 1 - b2**step if group["bias_correction"] else 1.0
        if e == 0:  # v is tracked all the same (logged), the step ignores it
            denom = [torch.full_like(v, 1.0 + eps) for v in vs]
        else:
            denom = torch._foreach_pow([v / bc2 for v in vs] if bc2 != 1.0 else vs, e)
            torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_([p for p in params], ms, denom, value=-lr / bc1)

    def _block_shape(self, group: dict[str, Any], params: list[Tensor]) -> tuple[int, ...]:
        lead = tuple(params[0].shape[: group["batch_dims"]])
        n = len(params) if group["block"] == "tensor" else 1 + max(max(b) for b in group["blocks"])
        return (*lead, n)

    def _block_means(self, group: dict[str, Any], grads: list[Tensor]) -> Tensor:
        """Mean of g^2 over each block, shape (*replicas, n_blocks)."""
        k = group["batch_dims"]
        flat = [g.reshape(*g.shape[:k], -1) for g in grads]
        if group["block"] == "tensor":
            return torch.stack([(f * f).mean(-1) for f in flat], dim=-1)
        sq = torch.cat([f * f for f in flat], dim=-1)
        ids, counts = self._block_index(group, sq.device)
        sums = torch.zeros((*sq.shape[:-1], counts.numel()), dtype=sq.dtype, device=sq.device)
        sums.index_add_(sq.dim() - 1, ids, sq)
        return sums / counts

    def _expand(self, group: dict[str, Any], vb: Tensor, params: list[Tensor]) -> list[Tensor]:
        """Each parameter's view of its blocks' v (elementwise shape)."""
        k = group["batch_dims"]
        if group["block"] == "tensor":
            return [vb[..., i].reshape(*vb.shape[:-1], *([1] * (p.dim() - k))).expand_as(p)
                    for i, p in enumerate(params)]  # fmt: skip
        ids, _ = self._block_index(group, vb.device)
        full = vb.index_select(vb.dim() - 1, ids)
        out, start = [], 0
        for p in params:
            size = p[(0,) * k].numel() if k else p.numel()
            out.append(full[..., start : start + size].reshape(p.shape))
            start += size
        return out

    def _block_index(self, group: dict[str, Any], device: torch.device) -> tuple[Tensor, Tensor]:
        """Flat block id of every element (all tensors concatenated) and each block's size (cached, not saved)."""
        cache = self.__dict__.setdefault("_ids", {})
        key = (id(group), str(device))
        if key not in cache:
            ids = torch.tensor([i for b in group["blocks"] for i in b], dtype=torch.long, device=device)
            cache[key] = (ids, torch.bincount(ids).to(torch.float64))
        return cache[key]

    def block_v(self) -> list[Tensor]:
        """The second-moment state of each parameter in its elementwise shape (blocks expanded)."""
        group = self.param_groups[0]
        params = group["params"]
        if group["block"] == "none":
            return [self.state[p]["v"] for p in params]
        return self._expand(group, self.state[params[0]]["v_blocks"], params)


def _check_blocks(params: list[Tensor], blocks: list[list[int]], batch_dims: int) -> None:
    if len(blocks) != len(params):
        raise ValueError(f"AdaptiveGM blocks: {len(blocks)} lists for {len(params)} parameters; expected one each")
    for i, (p, b) in enumerate(zip(params, blocks, strict=True)):
        size = p[(0,) * batch_dims].numel() if batch_dims else p.numel()
        if len(b) != size:
            raise ValueError(f"AdaptiveGM blocks[{i}] has {len(b)} ids for {size} elements of parameter {i}")
        if min(b) < 0:
            raise ValueError(f"AdaptiveGM blocks[{i}]: block ids must be >= 0")
    used = {i for b in blocks for i in b}
    if used != set(range(len(used))):
        raise ValueError("AdaptiveGM blocks: ids must be 0..n_blocks-1 with none skipped")


def make_optimizer(name: str, params: list[Tensor], lr: float, beta1: float | None = None, C: float = 10.0,
                   scheme: float = 2.0, exponent: float | None = None, eps: float = 1e-6,
                   blocks: list[list[int]] | None = None, batch_dims: int = 0) -> torch.optim.Optimizer:  # fmt: skip
    """The named preset of the card's table as an optimizer over ``params``.

    ``AdaptiveGM`` for all but ``torch_adam`` (``torch.optim.Adam``, with bias correction; beta2 still from the
    C/scheme coupling, eps as given).
    """
    if name not in PRESETS:
        raise ValueError(f"optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")
    preset = dict(PRESETS[name])
    if beta1 is not None and name != "sgd":
        preset["beta1"] = beta1
    if name == "torch_adam":
        return torch.optim.Adam(params, lr=lr, betas=(preset["beta1"], beta2_schedule(lr, C, scheme)), eps=eps)
    if name == "sgd":
        return AdaptiveGM(params, lr=lr, beta1=0.0, beta2=0.0, exponent=0.0, eps=0.0, batch_dims=batch_dims)
    if exponent is not None:
        preset["exponent"] = exponent
    if preset.get("block") != "custom":
        blocks = None
    return AdaptiveGM(params, lr=lr, C=C, scheme=scheme, eps=eps, blocks=blocks, batch_dims=batch_dims, **preset)
