"""The diagonal linear network w = u⊙u − v⊙v and its maths (card ``adam_sharpness``); never imports lightning.

Every tensor carries a leading replica dimension R (seeds side by side): ``u, v`` are (R, d), ``Z`` (R, n, d), ``y``
(R, n). The loss of the batch is the *sum* of the replicas' losses, so each replica's gradient is its own.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class DiagNet(nn.Module):
    """θ = [u; v] ∈ R^{2d} per replica, w = u⊙u − v⊙v, f(z) = ⟨w, z⟩.

    Args:
        d: input dimension.
        n_replicas: replicas R (independent seeds).
        init_scale: u = v = init_scale·g at init, one shared draw g ~ N(0, I_d) per replica (so w = 0).
        seeds: the init seed of each replica (default 0..R-1).
        dtype: parameter dtype.
    """

    def __init__(self, d: int, n_replicas: int = 1, init_scale: float = 0.1, seeds: list[int] | None = None,
                 dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__()
        seeds = list(range(n_replicas)) if seeds is None else seeds
        g = torch.stack([torch.randn(d, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
                         for s in seeds]).to(dtype)  # fmt: skip
        self.u = nn.Parameter(init_scale * g.clone())
        self.v = nn.Parameter(init_scale * g.clone())

    def weights(self) -> Tensor:
        """W = u⊙u − v⊙v, (R, d)."""
        return self.u * self.u - self.v * self.v

    def forward(self, Z: Tensor) -> Tensor:
        """Predictions ⟨w, z⟩, (R, n)."""
        return torch.einsum("rnd,rd->rn", Z, self.weights())


def replica_losses(pred: Tensor, y: Tensor) -> Tensor:
    """L = (1/n)·Σ_i ½(pred_i − y_i)² per replica, (R,)."""
    return 0.5 * (pred - y).pow(2).mean(-1)


def diag_hessian(u: Tensor, v: Tensor, Z: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Exact diagonal of the Hessian of L (labels ``y``) w.r.t. u and v, each (R, d).

    ∂²L/∂u_j² = (1/n)Σ_i [(2u_j z_ij)² + 2 r_i z_ij] and ∂²L/∂v_j² = (1/n)Σ_i [(2v_j z_ij)² − 2 r_i z_ij], r = f − y.
    On the manifold (r = 0, Rademacher z) these are 4u_j² and 4v_j².
    """
    w = u * u - v * v
    r = torch.einsum("rnd,rd->rn", Z, w) - y
    z2 = Z.pow(2).mean(1)
    rz = torch.einsum("rn,rnd->rd", r, Z) / Z.shape[1]
    return 4 * u * u * z2 + 2 * rz, 4 * v * v * z2 - 2 * rz


def gauss_newton_diag(u: Tensor, v: Tensor, Z: Tensor) -> tuple[Tensor, Tensor]:
    """Diagonal of the card's H = (1/n)·Σ_i ∇f_i ∇f_iᵀ (no residual term) w.r.t. u and v: 4u_j²·mean_i z_ij², 4v_j²·….

    It is the noise covariance's shape, E[g gᵀ] = (δ²/n)·H, and equals the Hessian on the manifold. Off the manifold
    the Hessian's residual term 2·mean_i(r_i z_ij) dominates the coordinates near 0, which the noise never sees.
    """
    z2 = Z.pow(2).mean(1)
    return 4 * u * u * z2, 4 * v * v * z2


def sparsity(w: Tensor, threshold: float = 0.05) -> dict[str, Tensor]:
    """Per replica: Σ√|w| (ℓ_{1/2}), ‖w‖₁ and nbig = #{|w_i| > threshold}."""
    return {"l_half": w.abs().sqrt().sum(-1), "l1": w.abs().sum(-1), "nbig": (w.abs() > threshold).sum(-1).double()}


def support_recovered(w: Tensor, w_star: Tensor, threshold: float = 0.05) -> Tensor:
    """Per replica: nbig = k and the top-k of |w| is the support of w* (1.0 or 0.0)."""
    out = []
    for wr, sr in zip(w, w_star, strict=True):
        support = set(torch.nonzero(sr).flatten().tolist())
        k = len(support)
        top = set(torch.topk(wr.abs(), k).indices.tolist()) if k else set()
        out.append(float(int((wr.abs() > threshold).sum()) == k and top == support))
    return torch.tensor(out, dtype=torch.float64)


def heldout_mse(w: Tensor, Z_test: Tensor, y_test: Tensor) -> Tensor:
    """Mean over the test set of (⟨w,z⟩ − y)² (no ½), per replica."""
    return (torch.einsum("rnd,rd->rn", Z_test, w) - y_test).pow(2).mean(-1)


def pearson(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two flat tensors (NaN with fewer than 2 points)."""
    a, b = a.flatten().double(), b.flatten().double()
    if a.numel() < 2:
        return math.nan
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()).clamp_min(1e-300))


def preconditioner_check(
    v_state: Tensor, h_diag: Tensor, delta: float, n: int, floor: float = 1e-6
) -> dict[str, float]:
    """Pearson corr and median ratio of the optimizer's v against (δ²/n)·diag(H), over predicted values > ``floor``."""
    pred = (delta**2 / n) * h_diag
    keep = pred > floor
    if int(keep.sum()) < 2:
        return {"corr": math.nan, "ratio": math.nan, "coords": float(keep.sum())}
    return {"corr": pearson(v_state[keep], pred[keep]), "ratio": float((v_state[keep] / pred[keep]).median()),
            "coords": float(keep.sum())}  # fmt: skip


def basis_pursuit(Z: Tensor, y: Tensor) -> Tensor:
    """Min ‖w‖₁ s.t. Zw = y (one replica: Z (n, d), y (n,)) by ``scipy.optimize.linprog`` on w = p − q, p, q ≥ 0."""
    import numpy as np
    from scipy.optimize import linprog

    A = Z.double().cpu().numpy()
    n, d = A.shape
    res = linprog(np.ones(2 * d), A_eq=np.hstack([A, -A]), b_eq=y.double().cpu().numpy(), bounds=(0, None),
                  method="highs")  # fmt: skip
    if res.status != 0:
        raise RuntimeError(f"basis pursuit: linprog failed ({res.message})")
    return torch.from_numpy(res.x[:d] - res.x[d:])
