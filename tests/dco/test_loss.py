"""DCO loss (card ``dco``, tests 1-6): the CE limit, the factor identity, precision, underflow, detachment, masking."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from zoo.dco.loss import (
    DCOLoss,
    ce_loss,
    coverage_factor,
    entropy_penalized_ce,
    exact_dco_loss,
    sequence_ce,
    smoothed_ce,
    token_logprobs,
)

torch.set_num_threads(1)


def _batch(seed: int = 0, b: int = 5, t: int = 7, v: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=gen)
    target = torch.randint(0, v, (b, t), generator=gen)
    target[:, :3] = -100  # prompt
    target[0, -2:] = -100  # padding
    return logits, target


def test_n1_is_cross_entropy_bitwise() -> None:
    """Test 1: with N = 1 the loss and its gradient are bitwise CE's."""
    logits, target = _batch()
    grads = []
    values = []
    for fn in (lambda lp, m: DCOLoss(1)(lp, m)["loss"], ce_loss):
        x = logits.clone().requires_grad_(True)
        lp, m = token_logprobs(x, target)
        value = fn(lp, m)
        value.backward()
        values.append(value.detach())
        grads.append(x.grad)
    assert torch.equal(values[0], values[1])
    assert torch.equal(grads[0], grads[1])
    # and CE is the per-sequence token mean of F.cross_entropy, then the batch mean
    tok = F.cross_entropy(logits.transpose(1, 2), target.clamp(min=0), reduction="none")
    mask = target != -100
    ref = ((tok * mask).sum(1) / mask.sum(1)).mean()
    assert values[1] == pytest.approx(float(ref), rel=1e-6)


@pytest.mark.parametrize("n", [4, 16, 256])
@pytest.mark.parametrize("p", [1e-6, 1e-3, 0.2, 0.9])
def test_factor_is_minus_dloss_dlogp(n: int, p: float) -> None:
    """Test 2: F(N, p) = −dL/d log p̂ of the exact loss, by central finite differences in float64."""
    lp = torch.tensor([math.log(p)], dtype=torch.float64)
    h = 1e-6
    fd = -(exact_dco_loss(lp + h, n) - exact_dco_loss(lp - h, n)) / (2 * h)
    assert float(coverage_factor(lp, n)) == pytest.approx(float(fd), rel=1e-5)


def test_reference_values_and_switch_continuity() -> None:
    """The card's F values, and the Padé/exact switch at N·p = 0.1 continuous to < 1e-3 (card: 1.3e-5, 1.4e-4)."""
    for p, ref in ((0.1, 0.40), (0.2, 0.12)):
        assert float(coverage_factor(torch.tensor([math.log(p)]), 16)) == pytest.approx(ref, abs=0.006)
    assert float(coverage_factor(torch.tensor([math.log(0.5)]), 16)) == pytest.approx(2.44e-4, rel=0.01)
    for n in (4, 16, 256, 1024):
        p = 0.1 / n
        below = coverage_factor(torch.tensor([math.log(p * (1 - 1e-9))], dtype=torch.float64), n)
        above = coverage_factor(torch.tensor([math.log(p * (1 + 1e-9))], dtype=torch.float64), n)
        assert float((below - above).abs() / above) < 1e-3


def test_precision_trap_float32_and_bf16() -> None:
    """Test 3: float32 / bf16 log-probs at p = 1e-6, N = 256 give the float64 factor 0.99987 (relative 1e-6)."""
    ref = float(coverage_factor(torch.tensor([math.log(1e-6)], dtype=torch.float64), 256))
    assert ref == pytest.approx(0.99987, abs=1e-5)
    for dtype in (torch.float32, torch.bfloat16):
        got = float(coverage_factor(torch.tensor([math.log(1e-6)], dtype=dtype), 256))
        assert abs(got - ref) / ref < 1e-6
    # the trap this guards against: the exact branch evaluated in float32 is wrong by about 1.3%
    p = torch.tensor([1e-6], dtype=torch.float32)
    naive = 256 * p * (1 - p) ** 255 / (1 - (1 - p) ** 256)
    assert abs(float(naive) - ref) > 5e-3


def test_underflow_and_certainty() -> None:
    """Test 4: log p̂ = −800 gives F = 1 exactly; p̂ = 1 with N > 1 gives F = 0; nothing is NaN."""
    f = coverage_factor(torch.tensor([-800.0, 0.0]), 16)
    assert f[0].item() == 1.0 and f[1].item() == 0.0
    assert coverage_factor(torch.tensor([0.0]), 1).item() == 1.0
    token_logp = torch.tensor([[-400.0, -400.0], [0.0, 0.0]], requires_grad=True)
    out = DCOLoss(16, threshold=0.0)(token_logp, torch.ones(2, 2, dtype=torch.bool))
    out["loss"].backward()
    assert torch.isfinite(out["loss"]) and torch.isfinite(token_logp.grad).all()
    assert out["kept"].item() == 1.0


def _two_parameter_logp(theta: torch.Tensor) -> torch.Tensor:
    """A 2-token response whose token logits are ``[θ0, 0]`` and ``[θ1, 0]``, both targets class 0: ``[1, 2]``."""
    logits = torch.stack([torch.stack([theta[0], theta.new_zeros(())]), torch.stack([theta[1], theta.new_zeros(())])])
    return torch.log_softmax(logits, -1)[:, 0].unsqueeze(0)


def test_detached_factor_gives_the_exact_gradient() -> None:
    """Test 5: the parameter gradient is F·∇CE (= the exact loss's gradient in token-sum mode), not ∇(F·CE)."""
    n = 4
    theta = torch.tensor([-0.3, 0.4], dtype=torch.float64, requires_grad=True)
    lp = _two_parameter_logp(theta)
    DCOLoss(n, threshold=0.0, ce_reduction="sum")(lp, torch.ones_like(lp, dtype=torch.bool))["loss"].backward()
    got = theta.grad.clone()
    theta.grad = None
    exact_dco_loss(_two_parameter_logp(theta).sum(-1), n).sum().backward()
    assert torch.allclose(got, theta.grad, rtol=1e-9, atol=0)
    theta.grad = None
    lp = _two_parameter_logp(theta)
    seq = lp.sum(-1)
    p = seq.exp()
    undetached = n * p * (1 - p) ** (n - 1) / (1 - (1 - p) ** n) * -seq  # F not detached
    undetached.sum().backward()
    assert not torch.allclose(got, theta.grad, rtol=1e-3)


def test_response_only_probability() -> None:
    """Test 6: prompt and padding positions do not enter p̂ or the loss; shifting the response does."""
    logits, target = _batch(1)
    loss = DCOLoss(4, threshold=0.0)
    base = loss(*token_logprobs(logits, target))
    changed = logits.clone()
    changed[:, :3] = torch.randn_like(changed[:, :3]) * 5  # prompt positions
    changed[0, -2:] = 7.0  # padding positions
    other = loss(*token_logprobs(changed, target))
    assert torch.equal(base["logp"], other["logp"]) and torch.equal(base["loss"], other["loss"])
    shifted = torch.full_like(target, -100)
    shifted[:, 2:-1] = target[:, 3:]  # the same response tokens, one position earlier
    moved = loss(*token_logprobs(logits, shifted))
    assert not torch.allclose(base["logp"], moved["logp"])


def test_filter_drops_confident_examples() -> None:
    """The filter keeps ``F > threshold`` (the public code's ``>``); ``normalize`` divides by the batch size or by the
    kept count."""
    token_logp = torch.tensor([[math.log(0.9)], [math.log(0.01)], [math.log(0.05)]], requires_grad=True)
    mask = torch.ones(3, 1, dtype=torch.bool)
    f = coverage_factor(token_logp.detach().sum(-1), 16)
    keep = f > 0.1
    assert keep.tolist() == [False, True, True]
    kept_sum = (f[keep] * -token_logp.detach().sum(-1)[keep]).sum()
    for normalize, denominator in (("batch", 3), ("kept", 2)):
        out = DCOLoss(16, threshold=0.1, normalize=normalize)(token_logp, mask)
        assert float(out["loss"].detach()) == pytest.approx(float(kept_sum) / denominator, rel=1e-6)
        assert float(out["kept"]) == pytest.approx(2 / 3)
    out = DCOLoss(16, threshold=0.1)(token_logp, mask)
    out["loss"].backward()
    assert token_logp.grad[0].item() == 0.0 and token_logp.grad[1].item() != 0.0  # the dropped example: no gradient
    tie = DCOLoss(16, threshold=float(f[2]))(token_logp.detach(), mask)  # F exactly at the threshold: dropped (`>`)
    assert float(tie["kept"]) == pytest.approx(1 / 3) and float(f[1]) > float(f[2])


def test_nothing_kept_warns_and_is_zero() -> None:
    token_logp = torch.full((4, 2), math.log(0.9) / 2, requires_grad=True)
    with pytest.warns(UserWarning, match="trains on nothing"):
        out = DCOLoss(256, threshold=0.1)(token_logp, torch.ones(4, 2, dtype=torch.bool))
    out["loss"].backward()
    assert out["loss"].item() == 0.0 and torch.count_nonzero(token_logp.grad) == 0


def test_group_ids_share_the_whole_trace_factor() -> None:
    """Rows of one trace (formal variant) share the factor of the trace's total log-probability."""
    token_logp = torch.tensor([[-0.5], [-0.7], [-2.0]])
    out = DCOLoss(8, threshold=0.0)(token_logp, torch.ones(3, 1, dtype=torch.bool), group_ids=torch.tensor([3, 3, 9]))
    f = coverage_factor(torch.tensor([-1.2, -1.2, -2.0]), 8)
    assert torch.allclose(out["factor"], f)


def test_ce_reduction_sum_and_baselines() -> None:
    logits, target = _batch(2)
    lp, m = token_logprobs(logits, target)
    assert torch.allclose(sequence_ce(lp, m, "sum"), -(lp * m).sum(-1))
    ls0 = smoothed_ce(logits, target, 0.0)
    assert float(ls0) == pytest.approx(float(ce_loss(lp, m)), rel=1e-6)
    assert float(smoothed_ce(logits, target, 0.2)) != pytest.approx(float(ls0))
    assert float(entropy_penalized_ce(logits, target, 0.0)) == pytest.approx(float(ls0), rel=1e-6)
    assert float(entropy_penalized_ce(logits, target, 0.1)) < float(ls0)  # the entropy term is subtracted


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="N=0"):
        DCOLoss(0)
    with pytest.raises(ValueError, match="threshold"):
        DCOLoss(4, threshold=1.5)
    with pytest.raises(ValueError, match="ce_reduction"):
        DCOLoss(4, ce_reduction="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="normalize"):
        DCOLoss(4, normalize="all")  # type: ignore[arg-type]


def test_sampled_p_estimate_replaces_p_hat_in_the_factor() -> None:
    """Approximate DCO: ``F(N, p̂_est)`` weights the reference's CE; p̂_est = 0 gives F = 1, p̂_est = 1 drops it."""
    token_logp = torch.tensor([[-0.1], [-0.2], [-3.0]], requires_grad=True)
    mask = torch.ones(3, 1, dtype=torch.bool)
    est = torch.tensor([0.0, 0.25, 1.0])
    out = DCOLoss(16, threshold=0.1)(token_logp, mask, p_estimate=est)
    f = out["factor"]
    assert f[0].item() == 1.0 and f[2].item() == 0.0
    ref = coverage_factor(torch.tensor([math.log(0.25)], dtype=torch.float64), 16)
    assert f[1].item() == pytest.approx(float(ref), rel=1e-12)
    expected = (f[0] * 0.1 + 0.0) / 3  # example 1 (F(16, 0.25) = 0.054) and example 2 are dropped by the filter
    assert float(out["loss"].detach()) == pytest.approx(float(expected), rel=1e-6)
