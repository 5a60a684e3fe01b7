"""The maths of ``emergence``: a two-layer Hermite student on the sphere and its exact population dynamics.

Every tensor carries a leading replica dimension R (seeds vectorised): W (R, m, d) unit rows, a (R, m), teacher
V (R, P, d), a* (R, P). With kernels K(x) = Σ_k c_k²·x^k (student) and K_c(x) = Σ_k c_k·c*_k·x^k (student-teacher),
G = WWᵀ, C = WVᵀ, the population loss is (card, "Population loss")

    L(W, a) = ½·aᵀK(G)a − aᵀK_c(C)a* + ½·a*ᵀK*(VVᵀ)a*,

its closed-form gradient ∂L/∂w_j = a_j·Σ_l a_l·K'(G_jl)·w_l − a_j·Σ_p a*_p·K_c'(C_jp)·v_p
(k·a_j·Σ_l a_l G^{k−1} w_l − ... for a pure degree k), and the Riemannian step projects g_j on the tangent space
of w_j, steps, and renormalises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from datamodules.gaussian_teacher.hermite import information_exponent, kernel, kernel_prime, sigma

#: ``observer(Ms, t0)``: Ms (n, R, P), row i = max_j |C_jp| after t0 + i updates (callbacks.overlap_logger).
Observer = Callable[[Tensor, int], None]
SECOND_LAYERS: tuple[str, ...] = ("fixed", "trained", "two_timescale", "refit")


@dataclass(frozen=True)
class StepConfig:
    """The update's settings.

    Args:
        lr: first-layer step size.
        lr_a: second-layer step size (0 for ``fixed`` and ``refit``).
        coeffs: student activation {k: c_k}.
        teacher_coeffs: teacher activation {k: c*_k}.
    """

    lr: float
    lr_a: float
    coeffs: dict[int, float]
    teacher_coeffs: dict[int, float]


def sphere_init(n_replicas: int, m: int, d: int, seed: int) -> Tensor:
    """W (R, m, d): replica r draws its rows uniformly on the sphere from ``seed + r`` (float64)."""
    rows = []
    for r in range(n_replicas):
        gen = torch.Generator().manual_seed(int(seed) + r)
        w = torch.randn(m, d, generator=gen, dtype=torch.float64)
        rows.append(w / w.norm(dim=-1, keepdim=True))
    return torch.stack(rows)


class HermiteStudent(nn.Module):
    """f(x) = Σ_j a_j·σ(⟨w_j, x⟩), ‖w_j‖ = 1, R replicas side by side (W and a are buffers: no torch optimizer).

    Args:
        n_replicas: R.
        m: width.
        d: input dimension.
        coeffs: activation {k: c_k}.
        a_init: initial a_j.
        init_seed: replica r draws W from ``init_seed + r``.
    """

    def __init__(
        self, n_replicas: int, m: int, d: int, coeffs: dict[int, float], a_init: float, init_seed: int
    ) -> None:
        super().__init__()
        self.coeffs = coeffs
        self.register_buffer("W", sphere_init(n_replicas, m, d, init_seed))
        self.register_buffer("a", torch.full((n_replicas, m), float(a_init), dtype=torch.float64))

    def forward(self, x: Tensor, a: Tensor | None = None) -> Tensor:
        """f(x) for x (R, B, d) -> (R, B) (``a``: another second layer, e.g. the refit one)."""
        return student_output(self.W, self.a if a is None else a, x, self.coeffs)


def student_output(W: Tensor, a: Tensor, x: Tensor, coeffs: dict[int, float]) -> Tensor:
    """Σ_j a_j·σ(⟨w_j, x⟩) for x (R, B, d), W (R, m, d), a (R, m) -> (R, B)."""
    return (sigma(torch.einsum("rbd,rmd->rbm", x, W), coeffs) * a.unsqueeze(1)).sum(-1)


def teacher_output(V: Tensor, astar: Tensor, x: Tensor, coeffs: dict[int, float]) -> Tensor:
    """f*(x) = Σ_p a*_p·σ(⟨v_p, x⟩) (R, B)."""
    return student_output(V, astar, x, coeffs)


def overlaps(W: Tensor, V: Tensor) -> Tensor:
    """C = WVᵀ (R, m, P)."""
    return W @ V.transpose(-1, -2)


def population_loss(W: Tensor, a: Tensor, V: Tensor, astar: Tensor, coeffs: dict[int, float],
                    teacher_coeffs: dict[int, float] | None = None) -> Tensor:  # fmt: skip
    """Exact L(W, a) per replica (R,) for x ~ N(0, I); rows of W and V of unit norm."""
    tc = coeffs if teacher_coeffs is None else teacher_coeffs
    G, C, T = W @ W.transpose(-1, -2), overlaps(W, V), V @ V.transpose(-1, -2)
    quad = torch.einsum("rj,rjl,rl->r", a, kernel(G, coeffs), a)
    cross = torch.einsum("rj,rjp,rp->r", a, kernel(C, coeffs, tc), astar)
    self_ = torch.einsum("rp,rpq,rq->r", astar, kernel(T, tc), astar)
    return 0.5 * quad - cross + 0.5 * self_


def population_grads(W: Tensor, a: Tensor, V: Tensor, astar: Tensor, coeffs: dict[int, float],
                     teacher_coeffs: dict[int, float] | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """Closed-form (∂L/∂W (R, m, d), ∂L/∂a (R, m), C (R, m, P)) at (W, a)."""
    tc = coeffs if teacher_coeffs is None else teacher_coeffs
    G, C = W @ W.transpose(-1, -2), overlaps(W, V)
    gW = a.unsqueeze(-1) * ((kernel_prime(G, coeffs) * a.unsqueeze(1)) @ W
                            - (kernel_prime(C, coeffs, tc) * astar.unsqueeze(1)) @ V)  # fmt: skip
    ga = (kernel(G, coeffs) @ a.unsqueeze(-1)).squeeze(-1) - (kernel(C, coeffs, tc) @ astar.unsqueeze(-1)).squeeze(-1)
    return gW, ga, C


def tangent(g: Tensor, W: Tensor) -> Tensor:
    """g_j − ⟨g_j, w_j⟩·w_j (the Riemannian gradient on the sphere)."""
    return g - (g * W).sum(-1, keepdim=True) * W


def riemannian_step(W: Tensor, g: Tensor, lr: float) -> tuple[Tensor, Tensor]:
    """(renormalised W − lr·tangent(g), the applied step −lr·tangent(g) before renormalisation)."""
    step = -lr * tangent(g, W)
    new = W + step
    return new / new.norm(dim=-1, keepdim=True), step


def population_steps(model: HermiteStudent, V: Tensor, astar: Tensor, cfg: StepConfig, n: int, t0: int,
                     observers: Sequence[Observer] = ()) -> None:  # fmt: skip
    """``n`` exact population GD updates of ``model`` in place (W and, when ``cfg.lr_a`` > 0, a).

    The same maths as :func:`population_grads` + :func:`riemannian_step`, fused for speed: with X = [W; V] and
    S = W·Xᵀ = [G | C], ∂L/∂w_j = Σ_l K'(S_jl)·s_l·a_j·x_l with s = [a, −a*], and its radial part ⟨g_j, w_j⟩ =
    Σ_l K'(S_jl)·s_l·a_j·S_jl needs no extra d-length product. Observers get the block M (n + 1, R, P) of
    max_j |C_jp| after t0 .. t0+n updates (the C of each gradient, plus the final state).
    """
    if cfg.coeffs != cfg.teacher_coeffs:  # the general path (student and teacher activations differ)
        return _population_steps_general(model, V, astar, cfg, n, t0, observers)
    a = model.a
    m, lr = model.W.shape[-2], cfg.lr
    X = torch.cat([model.W, V], -2)
    W = X[..., :m, :]  # a view: updating W in place updates X
    Ms = W.new_empty(n + 1, W.shape[0], V.shape[-2]) if observers else None
    single = len(cfg.coeffs) == 1
    if single:
        ((k, c),) = cfg.coeffs.items()
    scale = None
    for i in range(n):
        if scale is None or cfg.lr_a > 0:
            cols = torch.cat([a, -astar], -1)
            scale = a.unsqueeze(-1) * cols.unsqueeze(-2)
            if single:
                scale = scale * (k * c * c)
        S = torch.bmm(W, X.transpose(-1, -2))
        if Ms is not None:
            torch.amax(S[..., m:].abs(), -2, out=Ms[i])
        coef = S.pow(k - 1).mul_(scale) if single else kernel_prime(S, cfg.coeffs).mul_(scale)
        g = torch.bmm(coef, X)
        radial = (coef * S).sum(-1, keepdim=True).mul_(lr).add_(1.0)
        g.mul_(-lr).addcmul_(W, radial)  # W(1 + lr·⟨g, w⟩) − lr·g = W − lr·tangent(g)
        W.copy_(g.div_(g.norm(dim=-1, keepdim=True)))
        if cfg.lr_a > 0:
            a = a - cfg.lr_a * (kernel(S, cfg.coeffs) * cols.unsqueeze(-2)).sum(-1)
    model.W.copy_(W)
    model.a.copy_(a)
    if Ms is not None:
        Ms[n] = overlaps(W, V).abs().amax(-2)
        for obs in observers:
            obs(Ms, t0)
    return None


def _population_steps_general(model: HermiteStudent, V: Tensor, astar: Tensor, cfg: StepConfig, n: int, t0: int,
                              observers: Sequence[Observer] = ()) -> None:  # fmt: skip
    """:func:`population_steps` by :func:`population_grads` and :func:`riemannian_step` (any pair of activations)."""
    W, a = model.W, model.a
    Ms = []
    for _ in range(n):
        gW, ga, C = population_grads(W, a, V, astar, cfg.coeffs, cfg.teacher_coeffs)
        Ms.append(C.abs().amax(-2))
        W, _ = riemannian_step(W, gW, cfg.lr)
        if cfg.lr_a > 0:
            a = a - cfg.lr_a * ga
    model.W.copy_(W)
    model.a.copy_(a)
    if observers:
        Ms.append(overlaps(W, V).abs().amax(-2))
        block = torch.stack(Ms)
        for obs in observers:
            obs(block, t0)


def minibatch_step(model: HermiteStudent, x: Tensor, y: Tensor, cfg: StepConfig) -> Tensor:
    """One online/minibatch SGD update on 0.5·mean((f(x) − y)²) per replica (autograd); returns the losses (R,)."""
    W = model.W.clone().requires_grad_(True)
    a = model.a.clone().requires_grad_(cfg.lr_a > 0)
    loss = 0.5 * ((student_output(W, a, x, model.coeffs) - y) ** 2).mean(-1)
    grads = torch.autograd.grad(loss.sum(), [W, a] if cfg.lr_a > 0 else [W])
    with torch.no_grad():
        model.W.copy_(riemannian_step(model.W, grads[0], cfg.lr)[0])
        if cfg.lr_a > 0:
            model.a.sub_(cfg.lr_a * grads[1])
    return loss.detach()


def refit(W: Tensor, V: Tensor, astar: Tensor, coeffs: dict[int, float], teacher_coeffs: dict[int, float] | None = None,
          ridge: float = 1e-8) -> Tensor:  # fmt: skip
    """The least-squares second layer a = (K(G) + ridge·I)⁻¹·K_c(C)·a* (R, m) (population closed form)."""
    tc = coeffs if teacher_coeffs is None else teacher_coeffs
    G, C = W @ W.transpose(-1, -2), overlaps(W, V)
    eye = torch.eye(W.shape[-2], dtype=W.dtype, device=W.device)
    rhs = kernel(C, coeffs, tc) @ astar.unsqueeze(-1)
    return torch.linalg.solve(kernel(G, coeffs) + ridge * eye, rhs).squeeze(-1)


def refit_on_data(W: Tensor, x: Tensor, y: Tensor, coeffs: dict[int, float], ridge: float = 1e-8) -> Tensor:
    """Least squares on a sample: a = (ΦᵀΦ/n + ridge·I)⁻¹·Φᵀy/n, Φ = σ(XWᵀ) (no teacher known)."""
    phi = sigma(torch.einsum("rbd,rmd->rbm", x, W), coeffs)
    n = x.shape[1]
    eye = torch.eye(W.shape[-2], dtype=W.dtype)
    return torch.linalg.solve(phi.transpose(-1, -2) @ phi / n + ridge * eye,
                              (phi.transpose(-1, -2) @ y.unsqueeze(-1)).squeeze(-1) / n)  # fmt: skip


def residuals(M: Tensor, astar: Tensor, k: int) -> Tensor:
    """Per-direction residual r_p = a*_p²·(1 − M_p^k) (R, P)."""
    return astar**2 * (1 - M**k)


def tau_hat(C0: Tensor, a: Tensor, astar: Tensor, lr: float, k: int, target: float = 0.9) -> Tensor:
    """Predicted time to overlap ``target`` from dκ/dt = c·κ^(k−1), c = k·lr·a_j·a*_p, κ₀ = max_j |C_jp(0)| (R, P).

    k = 4: τ̂ = (1/(2c))·(1/κ₀² − 1/0.81); k > 2: (κ₀^(2−k) − target^(2−k))/((k−2)·c); k = 2: ln(target/κ₀)/c.
    """
    kappa, j = C0.abs().max(-2)
    c = k * lr * torch.gather(a.abs(), -1, j) * astar
    if k == 2:
        return torch.log(target / kappa) / c
    return (kappa ** (2 - k) - target ** (2 - k)) / ((k - 2) * c)


def degree(coeffs: dict[int, float]) -> int:
    """The information exponent k* of the activation (the power in r_p and τ̂)."""
    return information_exponent(coeffs)


# --- statistics of recovery times ------------------------------------------------------------------------------------


def sharpness(t03: Sequence[float], t09: Sequence[float]) -> list[float]:
    """s_p = (t_0.9 − t_0.3)/t_0.9 for learned directions (NaN where t_0.9 is infinite)."""
    return [(b - a) / b if math.isfinite(b) and b > 0 else math.nan for a, b in zip(t03, t09, strict=True)]


def spearman_with_index(tau: Sequence[float]) -> float:
    """Spearman ρ(τ_p, p); unlearned directions (∞) are ranked last (tied among themselves, average ranks)."""
    n = len(tau)
    big = [t if math.isfinite(t) else math.inf for t in tau]
    order = sorted(range(n), key=lambda i: big[i])
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and big[order[j + 1]] == big[order[i]]:
            j += 1
        for q in range(i, j + 1):
            ranks[order[q]] = (i + j) / 2 + 1
        i = j + 1
    p = [float(i + 1) for i in range(n)]
    mr, mp = sum(ranks) / n, sum(p) / n
    cov = sum((r - mr) * (q - mp) for r, q in zip(ranks, p, strict=True))
    var = math.sqrt(sum((r - mr) ** 2 for r in ranks) * sum((q - mp) ** 2 for q in p))
    return cov / var if var > 0 else math.nan


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log x over the finite positive pairs (NaN with fewer than 2)."""
    pts = [(math.log(a), math.log(b)) for a, b in zip(x, y, strict=True) if a > 0 and b > 0 and math.isfinite(b)]
    if len(pts) < 2:
        return math.nan
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx > 0 else math.nan
