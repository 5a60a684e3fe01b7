"""Link-prediction metrics: TGB one-vs-many MRR (with a seen/unseen split) and DyGLib AP/AUC.

Both metrics keep sum (or concatenation) states, so under DDP the synced result is the exact global value over all
positives of the split, never a mean of per-batch or per-rank means.
"""

from __future__ import annotations

from typing import Literal

import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

__all__ = ["APAUCMetric", "LinkPredMetric", "reciprocal_rank", "tie_averaged_rank"]


def _check_finite(name: str, scores: Tensor, valid: Tensor | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` if any (valid) score is NaN or infinite."""
    bad = ~torch.isfinite(scores)
    if valid is not None:
        bad &= valid
    if bool(bad.any()):
        n_nan = int((torch.isnan(scores) & bad).sum())
        raise ValueError(
            f"{name} scores contain {n_nan} NaN and {int(bad.sum()) - n_nan} infinite value(s); "
            "ranking metrics are undefined for non-finite scores"
        )


def tie_averaged_rank(pos: Tensor, neg: Tensor, mask: Tensor | None = None) -> Tensor:
    """TGB rank of each positive among its negatives: ``1 + 0.5 * (#{neg > pos} + #{neg >= pos})``.

    Args:
        pos: positive scores ``(B,)``.
        neg: negative scores ``(B, K)``.
        mask: ``(B, K)`` bool, ``True`` = a real negative, ``False`` = padding (ignored); ``None`` = all real.

    Returns:
        ``(B,)`` float64 ranks (1 = best; ties count half).

    Raises:
        ValueError: on shape mismatch or NaN/inf in ``pos`` or in an unmasked ``neg``.
    """
    if pos.dim() != 1 or neg.dim() != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(f"expected pos (B,) and neg (B, K), got {tuple(pos.shape)} and {tuple(neg.shape)}")
    if mask is not None and mask.shape != neg.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from neg shape {tuple(neg.shape)}")
    if mask is not None:
        mask = mask.to(torch.bool)
    _check_finite("pos", pos)
    _check_finite("neg", neg, mask)
    p = pos[:, None]
    gt, ge = neg > p, neg >= p
    if mask is not None:
        gt, ge = gt & mask, ge & mask
    return 1.0 + 0.5 * (gt.sum(1) + ge.sum(1)).to(torch.float64)


def reciprocal_rank(pos: Tensor, neg: Tensor, mask: Tensor | None = None) -> Tensor:
    """TGB one-vs-many reciprocal rank ``1 / tie_averaged_rank`` of each positive.

    All-equal scores give ``2 / (K + 2)`` (K = number of unmasked negatives); a strictly best positive gives 1.

    Args:
        pos: positive scores ``(B,)``.
        neg: negative scores ``(B, K)``.
        mask: ``(B, K)`` bool, ``True`` = a real negative, ``False`` = padding (ignored); ``None`` = all real.

    Returns:
        ``(B,)`` float64 reciprocal ranks.

    Raises:
        ValueError: on shape mismatch or NaN/inf in ``pos`` or in an unmasked ``neg`` (the message names which).
    """
    return 1.0 / tie_averaged_rank(pos, neg, mask)


class LinkPredMetric(Metric):
    """MRR over all positives of a split, with a seen/unseen breakdown and Hits@k (TGB definitions).

    ``update(pos, neg, mask, seen)`` ranks each positive against its unmasked negatives (tie-averaged rank) and adds
    its reciprocal rank to sum states; ``compute()`` divides by counts, so the result does not depend on how the
    split was batched or sharded.

    Args:
        k: cut-off of ``hits@k`` (TGB default 10; the result key is always ``hits10`` for ``k=10``, ``hits{k}``
            otherwise).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, k: int = 10) -> None:
        super().__init__()
        self.k = k
        for name in ("rr_sum", "hits_sum", "rr_seen_sum", "rr_unseen_sum"):
            self.add_state(name, default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        for name in ("n", "n_seen", "n_unseen"):
            self.add_state(name, default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, pos: Tensor, neg: Tensor, mask: Tensor | None = None, seen: Tensor | None = None) -> None:
        """Add one batch of positives.

        Args:
            pos: positive scores ``(B,)``.
            neg: negative scores ``(B, K)``.
            mask: ``(B, K)`` bool, ``True`` = real negative; ``None`` = all real.
            seen: ``(B,)`` bool, whether each positive pair was seen before; ``None`` = unknown (the batch then counts
                for ``mrr`` and ``hits`` only).
        """
        rank = tie_averaged_rank(pos.detach(), neg.detach(), None if mask is None else mask.detach())
        rr = 1.0 / rank
        self.rr_sum += rr.sum()
        self.hits_sum += (rank <= self.k).sum().to(torch.float64)
        self.n += rr.numel()
        if seen is not None:
            seen = seen.reshape(-1).to(device=rr.device, dtype=torch.bool)
            if seen.numel() != rr.numel():
                raise ValueError(f"LinkPredMetric: seen has {seen.numel()} entries for {rr.numel()} positives")
            self.rr_seen_sum += rr[seen].sum()
            self.rr_unseen_sum += rr[~seen].sum()
            self.n_seen += seen.sum()
            self.n_unseen += (~seen).sum()

    def compute(self) -> dict[str, Tensor]:
        """Return ``mrr, mrr_seen, mrr_unseen, seen_frac, hits10`` (float64; NaN where a count is 0)."""
        nan = torch.tensor(float("nan"), dtype=torch.float64, device=self.rr_sum.device)

        def ratio(num: Tensor, den: Tensor) -> Tensor:
            return num / den if int(den) > 0 else nan

        labelled = self.n_seen + self.n_unseen
        return {
            "mrr": ratio(self.rr_sum, self.n),
            "mrr_seen": ratio(self.rr_seen_sum, self.n_seen),
            "mrr_unseen": ratio(self.rr_unseen_sum, self.n_unseen),
            "seen_frac": ratio(self.n_seen.to(torch.float64), labelled),
            "hits10" if self.k == 10 else f"hits{self.k}": ratio(self.hits_sum, self.n),
        }


def _ap_auc(pos: Tensor, neg: Tensor) -> tuple[float, float]:
    """Average precision and ROC-AUC (sklearn) of positives (label 1) against negatives (label 0)."""
    _check_finite("pos", pos)
    _check_finite("neg", neg)
    scores = torch.cat([pos.reshape(-1), neg.reshape(-1)]).detach().to("cpu", torch.float64).numpy()
    labels = torch.cat([torch.ones(pos.numel()), torch.zeros(neg.numel())]).numpy()
    return float(average_precision_score(labels, scores)), float(roc_auc_score(labels, scores))


class APAUCMetric(Metric):
    """DyGLib AP and ROC-AUC: each positive against one negative (sklearn definitions).

    Args:
        reduction: ``"batch_mean"`` (DyGLib default) = mean over ``update()`` calls of the per-batch AP/AUC, kept as
            sums + a count (summed across processes); ``"global"`` = AP/AUC of all scores of the split, kept as
            concatenated states.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, reduction: Literal["batch_mean", "global"] = "batch_mean") -> None:
        super().__init__()
        if reduction not in ("batch_mean", "global"):
            raise ValueError(f"APAUCMetric: reduction={reduction!r}, expected 'batch_mean' or 'global'")
        self.reduction = reduction
        if reduction == "batch_mean":
            self.add_state("ap_sum", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
            self.add_state("auc_sum", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
            self.add_state("batches", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")
        else:
            self.add_state("pos_scores", default=[], dist_reduce_fx="cat")
            self.add_state("neg_scores", default=[], dist_reduce_fx="cat")

    def update(self, pos: Tensor, neg: Tensor) -> None:
        """Add one batch: ``pos`` ``(B,)`` positive scores and ``neg`` ``(B,)`` scores of their negatives."""
        pos, neg = pos.detach().reshape(-1), neg.detach().reshape(-1)
        if self.reduction == "batch_mean":
            ap, auc = _ap_auc(pos, neg)
            self.ap_sum += ap
            self.auc_sum += auc
            self.batches += 1
        else:
            _check_finite("pos", pos)
            _check_finite("neg", neg)
            self.pos_scores.append(pos)
            self.neg_scores.append(neg)

    def compute(self) -> dict[str, Tensor]:
        """Return ``{"ap": ..., "auc": ...}`` (float64 scalars; NaN before any update)."""
        device = self.device
        if self.reduction == "batch_mean":
            if int(self.batches) == 0:
                nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
                return {"ap": nan, "auc": nan.clone()}
            return {"ap": self.ap_sum / self.batches, "auc": self.auc_sum / self.batches}
        if isinstance(self.pos_scores, list) and not self.pos_scores:
            ap, auc = float("nan"), float("nan")
        else:
            ap, auc = _ap_auc(dim_zero_cat(self.pos_scores), dim_zero_cat(self.neg_scores))
        return {
            "ap": torch.tensor(ap, dtype=torch.float64, device=device),
            "auc": torch.tensor(auc, dtype=torch.float64, device=device),
        }
