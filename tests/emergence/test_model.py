"""The maths of ``emergence`` (card tests 1-6 and 9): Hermite identities, closed form vs expectation, the sphere,
the teacher, the τ̂ time scale and the refit. Each docstring names the bug it catches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from numpy.polynomial.hermite_e import hermegauss

from datamodules.gaussian_teacher.hermite import (
    coefficients,
    information_exponent,
    information_exponent_of,
    sigma,
)
from datamodules.gaussian_teacher.teacher import make_teacher, power_law
from zoo.emergence.model import (
    HermiteStudent,
    StepConfig,
    minibatch_step,
    overlaps,
    population_grads,
    population_loss,
    population_steps,
    refit,
    riemannian_step,
    student_output,
    tangent,
    tau_hat,
    teacher_output,
)

HE4 = coefficients("he4")


def _gh(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    z, w = hermegauss(n)
    return torch.as_tensor(z), torch.as_tensor(w / math.sqrt(2 * math.pi))


def _unit(*shape: int, seed: int = 0) -> torch.Tensor:
    w = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return w / w.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.7, 0.95])
def test_he4_kernel_by_2d_quadrature(rho: float) -> None:
    """E[σ(z₁)σ(ρz₁ + √(1−ρ²)z₂)] = ρ⁴ to 1e-10 (60×60 Gauss–Hermite): catches a wrong normalisation (√24) or a
    raw monomial (whose He₂ part adds ρ² terms)."""
    z, w = _gh(60)
    z1, z2 = torch.meshgrid(z, z, indexing="ij")
    ww = w[:, None] * w[None, :]
    value = (ww * sigma(z1, HE4) * sigma(rho * z1 + math.sqrt(1 - rho**2) * z2, HE4)).sum()
    assert abs(float(value) - rho**4) < 1e-10


def test_he4_moments_and_information_exponents() -> None:
    """E[σ²] = 1, E[σ·He₂] = 0, E[σ·He₄]/√24 = 1; k* is 4 (he4), 6 (he6), 2 (raw z⁴): catches a monomial σ."""
    z, w = _gh(60)
    s = sigma(z, HE4)
    assert abs(float((w * s * s).sum()) - 1) < 1e-10
    assert abs(float((w * s * (z**2 - 1)).sum())) < 1e-10
    assert abs(float((w * s * (z**4 - 6 * z**2 + 3)).sum()) / math.sqrt(24) - 1) < 1e-10
    assert information_exponent(HE4) == 4
    assert information_exponent(coefficients("he6")) == 6
    assert information_exponent(coefficients("raw_z4")) == 2
    assert information_exponent_of(lambda x: x**4) == 2
    assert information_exponent_of(lambda x: sigma(x, HE4)) == 4
    assert information_exponent_of(lambda x: sigma(x, coefficients("he6"))) == 6
    # raw_z4 is z⁴/√105 exactly (its coefficients on h_k reproduce the monomial)
    torch.testing.assert_close(sigma(z, coefficients("raw_z4")), z**4 / math.sqrt(105))


def test_mix_kernel_is_sum_of_squares() -> None:
    """hermite_mix: E[σ(u·x)σ(v·x)] = Σ c_k²ρ^k (quadrature): catches mixing degrees with unnormalised He_k."""
    mix = coefficients("hermite_mix", [0, 0, 0, 0, 0.8, 0, 0.6])
    z, w = _gh(60)
    z1, z2 = torch.meshgrid(z, z, indexing="ij")
    ww = w[:, None] * w[None, :]
    rho = 0.6
    value = float((ww * sigma(z1, mix) * sigma(rho * z1 + math.sqrt(1 - rho**2) * z2, mix)).sum())
    assert abs(value - (0.64 * rho**4 + 0.36 * rho**6)) < 1e-10


def test_monte_carlo_kernel() -> None:
    """1e6 samples (fixed seed) at ρ = 0.5: E[σσ] within 0.02 of 0.0625 (sanity of the sampled σ)."""
    gen = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(2, 1_000_000, generator=gen, dtype=torch.float64)
    value = float((sigma(z1, HE4) * sigma(0.5 * z1 + math.sqrt(0.75) * z2, HE4)).mean())
    assert abs(value - 0.0625) < 0.02


def test_closed_form_loss_and_gradient_equal_the_expectation() -> None:
    """d=3, P=2, m=2: the closed-form L equals the 40³ Gauss–Hermite expectation of ½(f − f*)² to 1e-8 and its
    closed-form gradient equals autograd's to 1e-7: catches a missing ½, a wrong power k, C from unnormalised W."""
    W, V = _unit(1, 2, 3, seed=1), _unit(1, 2, 3, seed=2)
    V = torch.linalg.qr(V[0].T)[0].T.unsqueeze(0)  # orthonormal rows
    a, astar = torch.tensor([[0.7, -0.4]], dtype=torch.float64), torch.tensor([[0.8, 0.6]], dtype=torch.float64)
    z, w = _gh(40)
    x = torch.stack(torch.meshgrid(z, z, z, indexing="ij"), -1).reshape(1, -1, 3)
    weight = (w[:, None, None] * w[None, :, None] * w[None, None, :]).reshape(-1)
    diff = student_output(W, a, x, HE4) - teacher_output(V, astar, x, HE4)
    expectation = float((weight * 0.5 * diff[0] ** 2).sum())
    assert abs(float(population_loss(W, a, V, astar, HE4)[0]) - expectation) < 1e-8
    Wg, ag = W.clone().requires_grad_(True), a.clone().requires_grad_(True)
    gW_auto, ga_auto = torch.autograd.grad(population_loss(Wg, ag, V, astar, HE4).sum(), [Wg, ag])
    gW, ga, _ = population_grads(W, a, V, astar, HE4)
    assert (gW - gW_auto).abs().max() < 1e-7 and (ga - ga_auto).abs().max() < 1e-7


def test_online_loss_and_gradient_match_population() -> None:
    """d=50, 1e6 fresh samples: MC loss within 3% of the closed form, tangent-gradient cosine > 0.95 (the online
    path's loss and projection agree with the population's)."""
    d, m, P = 50, 4, 2
    V, astar = make_teacher(d, P, 1.5, [3])
    gen = torch.Generator().manual_seed(5)
    # a student with O(1) overlaps so the gradient is well above the MC noise
    W = V[:, :1, :].repeat(1, m, 1) * 0.6 + 0.8 * _unit(1, m, d, seed=6)
    W = W / W.norm(dim=-1, keepdim=True)
    a = torch.full((1, m), 0.3, dtype=torch.float64)
    Wg = W.clone().requires_grad_(True)
    total_loss, total_grad, n = 0.0, torch.zeros_like(W), 0
    for _ in range(10):
        x = torch.randn(1, 100_000, d, generator=gen, dtype=torch.float64)
        loss = 0.5 * ((student_output(Wg, a, x, HE4) - teacher_output(V, astar, x, HE4)) ** 2).mean()
        (g,) = torch.autograd.grad(loss, [Wg])
        total_loss, total_grad, n = total_loss + float(loss.detach()), total_grad + g, n + 1
    exact = float(population_loss(W, a, V, astar, HE4)[0])
    g_mc = tangent(total_grad / n, W).flatten()
    g_pop = tangent(population_grads(W, a, V, astar, HE4)[0], W).flatten()
    cosine = float(g_mc @ g_pop / (g_mc.norm() * g_pop.norm()))
    assert abs(total_loss / n - exact) / exact < 0.03 and cosine > 0.95, (total_loss / n, exact, cosine)


def test_sphere_constraint_and_tangent_update() -> None:
    """After every population and online step |‖w_j‖ − 1| < 1e-6, and the applied step is orthogonal to w_j before
    renormalisation to 1e-10: catches a missing projection or renormalisation."""
    V, astar = make_teacher(30, 3, 1.5, [0, 1])
    model = HermiteStudent(2, 5, 30, HE4, 0.3, 0)
    cfg = StepConfig(lr=0.5, lr_a=0.01, coeffs=HE4, teacher_coeffs=HE4)
    for _ in range(20):
        gW, _, _ = population_grads(model.W, model.a, V, astar, HE4)
        new, step = riemannian_step(model.W, gW, cfg.lr)
        assert (step * model.W).sum(-1).abs().max() < 1e-10
        assert step.abs().max() > 1e-6  # a real step was taken
        population_steps(model, V, astar, cfg, 1, 0)
        torch.testing.assert_close(model.W, new)
        assert (model.W.norm(dim=-1) - 1).abs().max() < 1e-6
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randn(2, 64, 30, generator=gen, dtype=torch.float64)
        minibatch_step(model, x, teacher_output(V, astar, x, HE4), cfg)
        assert (model.W.norm(dim=-1) - 1).abs().max() < 1e-6


def test_teacher_generation() -> None:
    """a* for P=8, β=1.5 is the card's vector (1e-3), VVᵀ = I (1e-10), Σa*² = 1: catches a wrong norm or QR use."""
    expected = [0.915, 0.323, 0.176, 0.114, 0.082, 0.062, 0.049, 0.040]
    assert np.allclose(power_law(8, 1.5).numpy(), expected, atol=1e-3)
    V, astar = make_teacher(400, 8, 1.5, [0, 1])
    for r in range(2):
        assert (V[r] @ V[r].T - torch.eye(8, dtype=torch.float64)).abs().max() < 1e-10
        assert abs(float((astar[r] ** 2).sum()) - 1) < 1e-12
    assert not torch.allclose(V[0], V[1])  # each seed its own teacher


def test_tau_hat_ratio_seed0() -> None:
    """Population mode d=400, m=16, seed 0: τ_1/τ̂_1 ∈ [0.8, 1.5]: catches a factor-2 gradient scaling or a missing
    tangent projection (both shift the time axis)."""
    V, astar = make_teacher(400, 8, 1.5, [0])
    model = HermiteStudent(1, 16, 400, HE4, 0.3, 0)
    predicted = float(tau_hat(overlaps(model.W, V), model.a, astar, 0.2, 4)[0, 0])
    first = []

    def observe(Ms: torch.Tensor, t0: int) -> None:
        above = (Ms[:, 0, 0] > 0.9).nonzero()
        if not first and len(above):
            first.append(t0 + int(above[0]))

    cfg = StepConfig(lr=0.2, lr_a=0.0, coeffs=HE4, teacher_coeffs=HE4)
    for t0 in range(0, 1000, 50):
        population_steps(model, V, astar, cfg, 50, t0, [observe])
        if first:
            break
    assert first and 0.8 <= first[0] / predicted <= 1.5, (first, predicted)


def test_refit_recovers_teacher_and_zeroes_the_gradient() -> None:
    """m = P, W = V: refit a = a* (1e-8) and L = 0; at a random W the refit a zeroes ∂L/∂a (1e-8): catches a wrong
    kernel in the normal equations."""
    V, astar = make_teacher(40, 4, 1.5, [0, 1])
    a = refit(V.clone(), V, astar, HE4)
    assert (a - astar).abs().max() < 1e-8
    assert population_loss(V.clone(), a, V, astar, HE4).abs().max() < 1e-12
    W = _unit(2, 6, 40, seed=3) + 0.5 * V[:, :1, :]
    W = W / W.norm(dim=-1, keepdim=True)
    a = refit(W, V, astar, HE4)
    _, ga, _ = population_grads(W, a, V, astar, HE4)
    assert ga.abs().max() < 1e-8


def test_fused_population_steps_equal_the_reference_path() -> None:
    """The fused loop (one bmm over [W; V], radial part from S) equals population_grads + riemannian_step to 1e-12,
    a trained a and the observed overlaps included: catches a sign or scale slip in the fused kernel."""
    from zoo.emergence.model import _population_steps_general

    V, astar = make_teacher(50, 3, 1.5, [0, 1])
    for coeffs in (HE4, coefficients("raw_z4"), coefficients("hermite_mix", [0, 0, 0, 0, 0.8, 0, 0.6])):
        fast, ref = HermiteStudent(2, 6, 50, coeffs, 0.3, 0), HermiteStudent(2, 6, 50, coeffs, 0.3, 0)
        cfg = StepConfig(lr=0.3, lr_a=0.05, coeffs=coeffs, teacher_coeffs=coeffs)
        seen: list[torch.Tensor] = []
        population_steps(fast, V, astar, cfg, 30, 0, [lambda Ms, t0: seen.append(Ms.clone())])
        _population_steps_general(ref, V, astar, cfg, 30, 0, [lambda Ms, t0: seen.append(Ms.clone())])
        assert (fast.W - ref.W).abs().max() < 1e-12 and (fast.a - ref.a).abs().max() < 1e-12
        assert (fast.a - 0.3).abs().max() > 1e-4  # a moved
        torch.testing.assert_close(seen[0], seen[1], rtol=0, atol=1e-12)


def test_population_loss_is_non_increasing_at_the_card_step() -> None:
    """lr = 0.2, d = 400, m = 16, fixed a: L(W, a) never rises over 600 updates (checked every 20) by more than 1e-12:
    catches an ascent sign or a step that is not a descent direction on the sphere."""
    V, astar = make_teacher(400, 8, 1.5, [0])
    model = HermiteStudent(1, 16, 400, HE4, 0.3, 0)
    cfg = StepConfig(lr=0.2, lr_a=0.0, coeffs=HE4, teacher_coeffs=HE4)
    losses = [float(population_loss(model.W, model.a, V, astar, HE4)[0])]
    for t0 in range(0, 600, 20):
        population_steps(model, V, astar, cfg, 20, t0)
        losses.append(float(population_loss(model.W, model.a, V, astar, HE4)[0]))
    assert all(b <= a + 1e-12 for a, b in zip(losses, losses[1:], strict=False))
    assert losses[-1] < losses[0] - 0.1  # direction 1 learned (τ_1 ≈ 190): the loss dropped
