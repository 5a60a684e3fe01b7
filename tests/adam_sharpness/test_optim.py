"""AdaptiveGM against hand computations (card tests 3, 4, 5, 7) and a reference loop written here."""

from __future__ import annotations

import pytest
import torch

from zoo.adam_sharpness.optim import AdaptiveGM, beta2_schedule, make_optimizer


def _grads(step: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A fixed gradient sequence (no model needed)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(100 + step), dtype=torch.float64)


def _run(opt: torch.optim.Optimizer, params: list[torch.Tensor], steps: int) -> list[list[torch.Tensor]]:
    seen = []
    for t in range(steps):
        gs = [_grads(10 * t + i, p.shape) for i, p in enumerate(params)]
        for p, g in zip(params, gs, strict=True):
            p.grad = g.clone()
        opt.step()
        seen.append(gs)
    return seen


def reference_adam(theta: torch.Tensor, grads: list[torch.Tensor], lr: float, b1: float, b2: float, e: float,
                   eps: float) -> torch.Tensor:  # fmt: skip
    """The card's update in plain Python loops (no bias correction, eps outside the power)."""
    m, v, th = torch.zeros_like(theta), torch.zeros_like(theta), theta.clone()
    for g in grads:
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        th = th - lr * m / (v**e + eps)
    return th


def test_elementwise_update_matches_reference() -> None:
    """Catches eps inside the power, a hidden bias correction or a wrong EMA (5 steps vs the loop above)."""
    p = torch.nn.Parameter(torch.randn(2, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    start = p.detach().clone()
    opt = AdaptiveGM([p], lr=0.01, beta1=0.9, exponent=0.5, eps=1e-6)
    seen = _run(opt, [p], 5)
    ref = reference_adam(start, [s[0] for s in seen], 0.01, 0.9, 0.999, 0.5, 1e-6)
    torch.testing.assert_close(p.detach(), ref, rtol=0, atol=1e-14)


def test_exponent_zero_momentum_zero_is_sgd() -> None:
    """Card test 3: e=0, beta1=0 in float64 equals SGD with lr/(1+eps) after 100 steps (max abs diff < 1e-12)."""
    lr, eps = 0.05, 1e-6
    gen = torch.Generator().manual_seed(1)
    Z, y = torch.randn(10, 6, dtype=torch.float64, generator=gen), torch.randn(10, dtype=torch.float64, generator=gen)
    u0 = 0.1 * torch.randn(6, dtype=torch.float64, generator=gen)
    u_a, u_b = torch.nn.Parameter(u0.clone()), u0.clone()
    opt = AdaptiveGM([u_a], lr=lr, beta1=0.0, exponent=0.0, eps=eps)
    for t in range(100):
        noise = 0.5 * torch.randn(10, dtype=torch.float64, generator=torch.Generator().manual_seed(t))
        opt.zero_grad()
        (0.5 * (Z @ (u_a * u_a) - y - noise).pow(2).mean()).backward()
        opt.step()
        grad = 2 * u_b * (Z.T @ (Z @ (u_b * u_b) - y - noise)) / 10
        u_b = u_b - lr / (1 + eps) * grad
    assert float((u_a.detach() - u_b).abs().max()) < 1e-12


def test_first_step_without_bias_correction() -> None:
    """Card test 4: first step = lr(1−β1)g/(√(1−β2)|g|+ε) ≈ 3.16·lr·sign(g); torch_adam gives ≈ lr·sign(g)."""
    lr = 0.01
    g = torch.tensor([0.3, -2.0, 1e-2, -0.7], dtype=torch.float64)
    for name, expected in (("adam_nobc", lr * 0.1 * g / (0.001**0.5 * g.abs() + 1e-6)),
                           ("torch_adam", lr * g.sign())):  # fmt: skip
        p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
        opt = make_optimizer(name, [p], lr, eps=1e-6 if name == "adam_nobc" else 1e-12)
        p.grad = g.clone()
        opt.step()
        tol = 1e-9 if name == "adam_nobc" else 1e-6
        torch.testing.assert_close(-p.detach(), expected, rtol=0, atol=tol)
    assert float((lr * 0.1 * g / (0.001**0.5 * g.abs())).abs().max() / lr) == pytest.approx(3.1623, abs=1e-4)


def test_beta2_schedule() -> None:
    """Card test 5: lr=0.01, C=10, scheme=2 gives beta2 = 0.999 exactly; C·lr^scheme ≥ 1 raises."""
    assert beta2_schedule(0.01, 10.0, 2.0) == 0.999
    p = torch.nn.Parameter(torch.zeros(3))
    assert AdaptiveGM([p], lr=0.01).param_groups[0]["beta2"] == 0.999
    with pytest.raises(ValueError, match="C\\*lr\\^scheme"):
        AdaptiveGM([p], lr=0.5, C=10.0, scheme=1.0)
    with pytest.raises(ValueError, match="<= 0"):
        beta2_schedule(0.1, 100.0, 2.0)


def test_adalayer_one_scalar_per_tensor_and_replica() -> None:
    """Card test 7 (Adalayer): each tensor's v is the EMA of mean(g²) over the tensor, per replica, after 3 steps."""
    u = torch.nn.Parameter(torch.zeros(2, 5, dtype=torch.float64))
    v = torch.nn.Parameter(torch.zeros(2, 5, dtype=torch.float64))
    opt = make_optimizer("adalayer", [u, v], 0.01, batch_dims=1)
    seen = _run(opt, [u, v], 3)
    vu, vv = opt.block_v()
    for i, got in enumerate((vu, vv)):
        for r in range(2):
            expected = torch.zeros((), dtype=torch.float64)
            for gs in seen:
                expected = 0.999 * expected + 0.001 * gs[i][r].pow(2).mean()
            torch.testing.assert_close(got[r], expected.expand(5), rtol=0, atol=1e-15)


def test_adam_mini_one_scalar_per_pair() -> None:
    """Card test 7 (Adam-mini): each pair {u_i, v_i} shares one v = EMA of (g_u_i² + g_v_i²)/2, per replica."""
    u = torch.nn.Parameter(torch.zeros(3, 4, dtype=torch.float64))
    v = torch.nn.Parameter(torch.zeros(3, 4, dtype=torch.float64))
    opt = make_optimizer("adam_mini", [u, v], 0.01, blocks=[[0, 1, 2, 3], [0, 1, 2, 3]], batch_dims=1)
    seen = _run(opt, [u, v], 3)
    vu, vv = opt.block_v()
    expected = torch.zeros(3, 4, dtype=torch.float64)
    for gu, gv in seen:
        expected = 0.999 * expected + 0.001 * (gu * gu + gv * gv) / 2
    torch.testing.assert_close(vu, expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(vv, expected, rtol=0, atol=1e-15)


def test_replicas_do_not_mix() -> None:
    """Catches block means over the replica dimension: replica r of a batched run equals a one-replica run."""
    batched = torch.nn.Parameter(torch.zeros(2, 6, dtype=torch.float64))
    opt = make_optimizer("adalayer", [batched], 0.01, batch_dims=1)
    seen = _run(opt, [batched], 3)
    for r in range(2):
        alone = torch.nn.Parameter(torch.zeros(6, dtype=torch.float64))
        single = make_optimizer("adalayer", [alone], 0.01)
        for gs in seen:
            alone.grad = gs[0][r].clone()
            single.step()
        torch.testing.assert_close(batched.detach()[r], alone.detach(), rtol=0, atol=1e-15)


def test_bad_blocks_are_refused() -> None:
    """A custom partition must give one id per element."""
    p = torch.nn.Parameter(torch.zeros(4))
    with pytest.raises(ValueError, match="3 ids for 4 elements"):
        AdaptiveGM([p], block="custom", blocks=[[0, 1, 2]])
