"""Tests of the link-prediction metrics (card "Tests that must fail" 12, Metrics section)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from zoo.craft.metrics import APAUCMetric, LinkPredMetric, reciprocal_rank, tie_averaged_rank

torch.set_num_threads(1)


def _scores(b: int = 300, k: int = 20, seed: int = 0, ties: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    pos, neg = torch.randn(b, generator=g), torch.randn(b, k, generator=g)
    if ties:  # coarse scores: many exact ties between positives and negatives
        pos, neg = (pos * 2).round() / 2, (neg * 2).round() / 2
    return pos, neg


def _ref_rr(pos: torch.Tensor, neg: torch.Tensor, mask: torch.Tensor | None = None) -> list[float]:
    """One positive at a time, Python loop: rank = 1 + #greater + #equal / 2 over real negatives."""
    out = []
    for i in range(pos.numel()):
        negs = [float(v) for j, v in enumerate(neg[i]) if mask is None or bool(mask[i, j])]
        greater = sum(v > float(pos[i]) for v in negs)
        equal = sum(v == float(pos[i]) for v in negs)
        out.append(1.0 / (1.0 + greater + 0.5 * equal))
    return out


def test_reciprocal_rank_matches_loop_reference() -> None:
    """Catches optimistic or pessimistic tie handling (rank 1 + #>, or 1 + #>=) instead of their average."""
    pos, neg = _scores(b=50)
    torch.testing.assert_close(reciprocal_rank(pos, neg), torch.tensor(_ref_rr(pos, neg), dtype=torch.float64))


@pytest.mark.parametrize("k", [1, 20, 100, 999])
def test_all_equal_scores_give_two_over_k_plus_two(k: int) -> None:
    """Catches the optimistic rank (all-equal -> MRR 1): the card's tie floor 2/(K+2), exactly."""
    rr = reciprocal_rank(torch.zeros(4), torch.zeros(4, k))
    assert torch.equal(rr, torch.full((4,), 2.0 / (k + 2), dtype=torch.float64))


def test_strictly_best_positive_scores_one() -> None:
    """Catches an off-by-one rank (rank 0-based or counting the positive itself)."""
    neg = torch.randn(5, 30)
    assert torch.equal(reciprocal_rank(neg.max(1).values + 1e-3, neg), torch.ones(5, dtype=torch.float64))
    assert torch.equal(reciprocal_rank(neg.min(1).values - 1e-3, neg), torch.full((5,), 1 / 31, dtype=torch.float64))


def test_masked_negatives_are_ignored() -> None:
    """Catches padding negatives (variable K, TGB #76) counted in the rank, and NaN checks on padding."""
    pos, neg = _scores(b=40, k=12)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(40, 12, generator=g) > 0.3
    mask[:, 0] = True
    poisoned = torch.where(mask, neg, torch.tensor(float("nan")))  # padded slots may hold anything
    want = torch.tensor(_ref_rr(pos, neg, mask), dtype=torch.float64)
    torch.testing.assert_close(reciprocal_rank(pos, poisoned, mask), want)
    torch.testing.assert_close(reciprocal_rank(pos, torch.where(mask, neg, 1e9), mask), want)
    # all-equal with padding: the floor uses the number of *real* negatives
    m = torch.ones(2, 10, dtype=torch.bool)
    m[1, 4:] = False
    rr = reciprocal_rank(torch.zeros(2), torch.zeros(2, 10), m)
    assert rr.tolist() == [2 / 12, 2 / 6]  # K = 10 and K = 4 real negatives


@pytest.mark.parametrize("which", ["pos", "neg"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_scores_raise(which: str, bad: float) -> None:
    """Catches NaN scores silently ranked last (NaN comparisons are False -> a NaN positive ranks first)."""
    pos, neg = torch.zeros(3), torch.zeros(3, 4)
    (pos if which == "pos" else neg).view(-1)[1] = bad
    with pytest.raises(ValueError, match=which):
        reciprocal_rank(pos, neg)


def test_shape_checks() -> None:
    """Catches a (B,) negative vector broadcast against (B,) positives as a (B, B) matrix."""
    with pytest.raises(ValueError, match="neg"):
        reciprocal_rank(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="mask"):
        reciprocal_rank(torch.zeros(3), torch.zeros(3, 4), torch.ones(3, 5, dtype=torch.bool))


def test_mrr_is_batch_size_independent() -> None:
    """Catches MRR as a mean of batch means (tgm parity notes): any batching gives the same global mean."""
    pos, neg = _scores(b=301)
    seen = torch.arange(301) % 3 == 0
    results = []
    for sizes in ([301], [1, 7, 50, 243], [200, 101], [100] * 3 + [1]):
        metric = LinkPredMetric()
        start = 0
        for n in sizes:
            metric.update(pos[start : start + n], neg[start : start + n], None, seen[start : start + n])
            start += n
        results.append(metric.compute())
    for other in results[1:]:
        for key in results[0]:
            torch.testing.assert_close(other[key], results[0][key], rtol=1e-12, atol=0)
    rr = reciprocal_rank(pos, neg)
    torch.testing.assert_close(results[0]["mrr"], rr.mean())
    # a mean of batch means would differ for unequal batches
    batch_means = torch.stack([rr[:1].mean(), rr[1:].mean()]).mean()
    assert abs(float(batch_means - rr.mean())) > 1e-4


def test_seen_unseen_breakdown_and_hits() -> None:
    """Catches seen/unseen swapped, seen_frac over the wrong count and Hits@10 with an untied rank."""
    pos = torch.tensor([5.0, 0.0, 0.0, 1.0])
    neg = torch.zeros(4, 20)
    neg[0] = -1.0  # rank 1
    neg[1, :9] = 1.0  # 9 above, 11 tied -> rank 1 + 9 + 5.5 = 15.5 (not a hit)
    neg[2, :9] = 1.0
    neg[2, 9:] = -1.0  # rank 10 -> hit
    neg[3, :9] = 2.0
    neg[3, 9] = 1.0
    neg[3, 10:] = -1.0  # rank 1 + 9 + 0.5 = 10.5 -> miss (an optimistic or floored rank 10 would hit)
    seen = torch.tensor([True, False, True, False])
    metric = LinkPredMetric()
    metric.update(pos, neg, seen=seen)
    out = metric.compute()
    rr = torch.tensor([1.0, 1 / 15.5, 1 / 10, 1 / 10.5], dtype=torch.float64)
    torch.testing.assert_close(tie_averaged_rank(pos, neg), 1 / rr)
    torch.testing.assert_close(out["mrr"], rr.mean())
    torch.testing.assert_close(out["mrr_seen"], rr[[0, 2]].mean())
    torch.testing.assert_close(out["mrr_unseen"], rr[[1, 3]].mean())
    assert float(out["seen_frac"]) == 0.5
    assert float(out["hits10"]) == 0.5
    assert set(out) == {"mrr", "mrr_seen", "mrr_unseen", "seen_frac", "hits10"}


def test_mrr_seen_is_nan_without_seen_positives() -> None:
    """Catches 0/0 reported as 0 (which would look like a real, terrible seen MRR)."""
    metric = LinkPredMetric()
    metric.update(torch.ones(3), torch.zeros(3, 5), seen=torch.zeros(3, dtype=torch.bool))
    out = metric.compute()
    assert torch.isnan(out["mrr_seen"]) and float(out["mrr_unseen"]) == 1.0 and float(out["seen_frac"]) == 0.0


def test_metric_states_sum_like_ddp() -> None:
    """Catches per-rank means (DDP would then average means): merging two shards' states gives the global MRR."""
    pos, neg = _scores(b=90)
    seen = torch.arange(90) % 2 == 0
    full, a, b = LinkPredMetric(), LinkPredMetric(), LinkPredMetric()
    full.update(pos, neg, seen=seen)
    a.update(pos[:10], neg[:10], seen=seen[:10])
    b.update(pos[10:], neg[10:], seen=seen[10:])
    a.merge_state(b)
    for key, value in full.compute().items():
        torch.testing.assert_close(a.compute()[key], value)


def test_matches_tgb_evaluator() -> None:
    """Catches any drift from the official TGB evaluator (skipped without py-tgb)."""
    had_inductor_dir = "TORCHINDUCTOR_CACHE_DIR" in os.environ
    try:
        evaluate = pytest.importorskip("tgb.linkproppred.evaluate")
        pos, neg = _scores(b=200, k=50, seed=3)
        want = evaluate.Evaluator(name="tgbl-wiki").eval(
            {"y_pred_pos": pos.numpy(), "y_pred_neg": neg.numpy(), "eval_metric": ["mrr"]}
        )
    finally:  # importing tgb pulls in torch._dynamo, which sets TORCHINDUCTOR_CACHE_DIR (conftest's leak check)
        if not had_inductor_dir:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    metric = LinkPredMetric()
    metric.update(pos, neg)
    out = metric.compute()
    assert float(out["mrr"]) == pytest.approx(float(want["mrr"]), abs=1e-6)
    if "hits@10" in want:
        assert float(out["hits10"]) == pytest.approx(float(want["hits@10"]), abs=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# DyGLib AP / AUC.
# ---------------------------------------------------------------------------------------------------------------
def _ap_auc(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    s = np.r_[pos, neg]
    return average_precision_score(y, s), roc_auc_score(y, s)


def test_ap_auc_batch_mean_and_global() -> None:
    """Catches batch_mean and global reductions swapped, or AP computed over the whole split in DyGLib mode."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(n, generator=g) + 0.5, torch.randn(n, generator=g)) for n in (50, 7, 120)]
    bm, gl = APAUCMetric("batch_mean"), APAUCMetric("global")
    for p, n in batches:
        bm.update(p, n)
        gl.update(p, n)
    per_batch = np.array([_ap_auc(p.numpy(), n.numpy()) for p, n in batches])
    out_bm = bm.compute()
    assert float(out_bm["ap"]) == pytest.approx(per_batch[:, 0].mean(), abs=1e-12)
    assert float(out_bm["auc"]) == pytest.approx(per_batch[:, 1].mean(), abs=1e-12)
    ap, auc = _ap_auc(torch.cat([p for p, _ in batches]).numpy(), torch.cat([n for _, n in batches]).numpy())
    out_gl = gl.compute()
    assert float(out_gl["ap"]) == pytest.approx(ap, abs=1e-12)
    assert float(out_gl["auc"]) == pytest.approx(auc, abs=1e-12)
    assert abs(float(out_bm["ap"]) - ap) > 1e-4  # the two reductions genuinely differ
    # DDP-style merge of batch_mean states: the mean over all batches of all shards
    a, b = APAUCMetric("batch_mean"), APAUCMetric("batch_mean")
    a.update(*batches[0])
    b.update(*batches[1])
    b.update(*batches[2])
    a.merge_state(b)
    assert float(a.compute()["ap"]) == pytest.approx(per_batch[:, 0].mean(), abs=1e-12)


def test_ap_auc_perfect_and_merge() -> None:
    """Catches labels swapped (perfect separation -> AP 1, AUC 1) and global states that do not concatenate."""
    m = APAUCMetric("global")
    m.update(torch.ones(5), torch.zeros(5))
    other = APAUCMetric("global")
    other.update(torch.full((3,), 2.0), torch.full((3,), -1.0))
    m.merge_state(other)
    out = m.compute()
    assert float(out["ap"]) == 1.0 and float(out["auc"]) == 1.0
    with pytest.raises(ValueError, match="neg"):
        APAUCMetric().update(torch.ones(2), torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="reduction"):
        APAUCMetric("mean")  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert torch.isnan(APAUCMetric().compute()["ap"])
