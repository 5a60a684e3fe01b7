"""Direct Coverage Optimization (card ``dco``, "Method (precise)"): the pass@N-aligned loss and its baselines.

``L_DCO^N = −log(1 − (1 − p̂)^N)`` with ``p̂ = Π_t π(y_t | x, y_<t)`` over the response tokens only. Its gradient is
``F(N, p̂) · ∇[−log p̂]`` with the coverage factor ``F(N, p) = N p (1−p)^{N−1} / (1 − (1−p)^N)``. Like the public code
(``refine/training/NCO.py``) the loss is the detached factor times cross-entropy: ``p̂`` and ``F`` are detached, ``F``
is computed in float64 with the Padé-type branch where ``N p < 0.1``, and only examples whose factor is above
``threshold`` are kept (``factor > threshold``, as ``filter_fn_NCO``; the others' gradient is ≈ 0). ``N = 1`` is
exactly cross-entropy.

Pure torch: token log-probabilities in, scalar losses out. Shapes: ``token_logp`` and ``mask`` are ``[B, T]``
(``mask`` true on the response tokens), per-sequence values are ``[B]``.
"""

from __future__ import annotations

import warnings
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

#: Below this ``N·p`` the factor uses the series approximant (card: the public code's switch).
PADE_SWITCH = 0.1

CEReduction = Literal["mean", "sum"]


def coverage_factor(logp: Tensor, n: int) -> Tensor:
    """``F(N, p̂)`` from sequence log-probabilities, detached, in float64 (card "Implementation" steps 1-2).

    ``N p < 0.1``: ``(1 − (N−1)p + (N−1)(N−2)p²/2) / (1 − (N−1)p/2 + (N−1)(N−2)p²/6)``; otherwise the exact formula,
    written with ``log1p``/``expm1`` so ``p = 1`` gives 0 and ``log p = −800`` gives 1 without NaN. ``N = 1`` is 1.

    Args:
        logp: ``log p̂`` per sequence (any float dtype; cast to float64 before ``exp``).
        n: the DCO parameter ``N'`` (>= 1).
    """
    if n < 1:
        raise ValueError(f"coverage_factor: N={n} must be >= 1")
    lp = logp.detach().to(torch.float64).clamp(max=0.0)
    if n == 1:
        return torch.ones_like(lp)
    p = lp.exp()
    a, b = float(n - 1), float((n - 1) * (n - 2))
    pade = (1.0 - a * p + b * p * p / 2.0) / (1.0 - a * p / 2.0 + b * p * p / 6.0)
    log_q = torch.log1p(-p)  # log(1 − p), −inf at p = 1
    exact = n * p * torch.exp(a * log_q) / (-torch.expm1(n * log_q))
    return torch.where(n * p < PADE_SWITCH, pade, exact)


def exact_dco_loss(logp: Tensor, n: int) -> Tensor:
    """The published per-sequence loss ``−log(1 − (1 − p̂)^N)`` (float64; for tests and reporting, not training)."""
    lp = logp.to(torch.float64)
    return -torch.log(-torch.expm1(n * torch.log1p(-lp.exp())))


def shift_labels(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Causal-LM alignment: ``logits[:, t]`` predicts ``labels[:, t + 1]``; returns the aligned ``[B, T − 1]`` pair."""
    return logits[:, :-1], labels[:, 1:]


def token_logprobs(logits: Tensor, target: Tensor, ignore_index: int = -100) -> tuple[Tensor, Tensor]:
    """Log-probabilities of aligned targets and their mask.

    Args:
        logits: ``[B, T, V]``, position ``t`` scoring ``target[:, t]`` (a causal LM's logits after
            :func:`shift_labels`; a classifier's ``[B, 1, K]``).
        target: ``[B, T]`` token ids, ``ignore_index`` on every non-response position (prompt, padding).
        ignore_index: the label of positions outside the response.

    Returns:
        ``(token_logp, mask)``, both ``[B, T]``; ``token_logp`` is 0 where masked. Computed in float32 at least.
    """
    mask = target != ignore_index
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return picked * mask, mask


def sequence_ce(token_logp: Tensor, mask: Tensor, reduction: CEReduction = "mean") -> Tensor:
    """Per-sequence cross-entropy over the response tokens: token mean (``NCO.py``) or token sum (``−log p̂``)."""
    total = -(token_logp * mask).sum(-1)
    if reduction == "sum":
        return total
    return total / mask.sum(-1).clamp(min=1)


def ce_loss(token_logp: Tensor, mask: Tensor, reduction: CEReduction = "mean") -> Tensor:
    """The CE baseline: the batch mean of :func:`sequence_ce` (``DCOLoss(N=1)`` equals it bitwise)."""
    return sequence_ce(token_logp, mask, reduction).mean()


class DCOLoss(torch.nn.Module):
    """Direct Coverage Optimization: ``Σ_kept F(N, p̂) · CE / B`` (card "Implementation"; ``normalize`` below).

    Args:
        n: the DCO parameter ``N'``; 1 is cross-entropy.
        threshold: keep only examples with ``F > threshold`` (public code: 0.1, and its ``>``; 0 keeps every
            example). This is the in-batch filter; the public code's loop (score a candidate batch, collect kept
            examples into full batches) is ``filter_mode: collect`` of the modules, which trains with threshold 0.
        ce_reduction: ``mean`` (token mean, ``NCO.py``; default) or ``sum`` (token sum: the exact gradient of
            ``−log(1 − (1 − p̂)^N)``).
        normalize: what the kept examples' ``F·CE`` is divided by: ``batch`` (default: the batch size, so a dropped
            example contributes 0, as in the public code, where each example is one micro-batch of a 16-step
            gradient accumulation) or ``kept`` (the number of kept examples: the card's "mean over kept examples",
            which raises the effective step as examples drop out; on the full-batch K-answer task DCO 16 then
            ends at test max-p 0.87 instead of the reference 0.52).

    ``forward`` returns ``{"loss", "factor" [B], "kept" (fraction), "logp" [B]}``. With ``group_ids`` (one id per
    sequence) the factor is computed from the group's total log-probability and shared by its members: the
    whole-trace factor of the card's formal variant, where each step of a trace is one row.
    """

    def __init__(self, n: int = 16, threshold: float = 0.1, ce_reduction: CEReduction = "mean",
                 normalize: Literal["batch", "kept"] = "batch") -> None:  # fmt: skip
        super().__init__()
        if normalize not in ("batch", "kept"):
            raise ValueError(f"DCOLoss: normalize={normalize!r} must be 'batch' or 'kept'")
        if n < 1:
            raise ValueError(f"DCOLoss: N={n} must be >= 1 (N=1 is cross-entropy)")
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"DCOLoss: threshold={threshold} must be in [0, 1)")
        if ce_reduction not in ("mean", "sum"):
            raise ValueError(f"DCOLoss: ce_reduction={ce_reduction!r} must be 'mean' or 'sum'")
        self.n, self.threshold, self.ce_reduction, self.normalize = n, threshold, ce_reduction, normalize

    def forward(self, token_logp: Tensor, mask: Tensor, group_ids: Tensor | None = None,
                p_estimate: Tensor | None = None) -> dict[str, Tensor]:  # fmt: skip
        """``token_logp``, ``mask``: ``[B, T]``; ``group_ids``: ``[B]`` or ``None`` (see the class).

        ``p_estimate`` (``[B]``, in [0, 1]) replaces ``p̂`` in the factor: the card's approximate DCO, where ``p̂`` is
        the fraction of sampled completions with a correct final answer (the CE still trains the reference).
        """
        logp = (token_logp * mask).sum(-1).detach()
        if p_estimate is not None:
            logp = torch.log(p_estimate.detach().to(torch.float64).clamp(0.0, 1.0))
        if group_ids is not None:
            _, inverse = torch.unique(group_ids, return_inverse=True)
            totals = torch.zeros(int(inverse.max()) + 1, dtype=torch.float64, device=logp.device)
            totals.index_add_(0, inverse, logp.double())
            logp = totals[inverse]
        factor = coverage_factor(logp, self.n)
        ce = sequence_ce(token_logp, mask, self.ce_reduction)
        keep = factor > self.threshold if self.threshold > 0 else torch.ones_like(factor, dtype=torch.bool)
        kept = keep.double().mean()
        if self.n == 1:
            loss = (factor.to(ce.dtype) * ce).mean()
        elif not bool(keep.any()):
            warnings.warn(f"DCOLoss(N={self.n}): every example of the batch has factor <= threshold "
                          f"{self.threshold} (max {float(factor.max()):.3g}); the step trains on nothing",
                          stacklevel=2)  # fmt: skip
            loss = (ce * 0.0).sum()
        elif self.normalize == "kept":
            loss = (factor.to(ce.dtype) * ce)[keep].mean()
        else:
            loss = (factor.to(ce.dtype) * ce * keep).sum() / ce.shape[0]
        return {"loss": loss, "factor": factor, "kept": kept, "logp": logp}


def smoothed_ce(logits: Tensor, target: Tensor, epsilon: float, ignore_index: int = -100) -> Tensor:
    """Label-smoothing baseline on aligned response targets: per-sequence token mean, then the batch mean."""
    mask = target != ignore_index
    tok = F.cross_entropy(logits.float().transpose(1, 2), target.clamp(min=0), reduction="none",
                          label_smoothing=epsilon)  # fmt: skip
    return ((tok * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


def entropy_penalized_ce(logits: Tensor, target: Tensor, beta: float, ignore_index: int = -100) -> Tensor:
    """Confidence-penalty baseline ``CE − β·H(π)`` on aligned response targets (Pereyra et al. 2017; card β = 0.1)."""
    mask = target != ignore_index
    logp = torch.log_softmax(logits.float(), dim=-1)
    ce = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return (((ce - beta * entropy) * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
