"""The diag-net maths against autograd and hand computations (card: model, metrics, basis pursuit)."""

from __future__ import annotations

import torch

from datamodules.sparse_regression.synthetic import sparse_problem
from zoo.adam_sharpness.model import (
    DiagNet,
    basis_pursuit,
    diag_hessian,
    preconditioner_check,
    replica_losses,
    sparsity,
    support_recovered,
)


def test_init_gives_zero_weights_and_replica_seeds() -> None:
    """Card test 9 (init): u = v = 0.1·g so w ≡ 0; replica r draws g from its own seed."""
    net = DiagNet(7, 3, 0.1, seeds=[4, 5, 6])
    assert float(net.weights().detach().abs().max()) == 0.0
    g = torch.randn(7, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    torch.testing.assert_close(net.u.detach()[1], 0.1 * g)


def test_diag_hessian_matches_autograd_off_manifold() -> None:
    """Catches a missing residual term or a wrong factor: the closed form vs autograd's Hessian at a random point."""
    gen = torch.Generator().manual_seed(0)
    Z = torch.randn(2, 6, 4, dtype=torch.float64, generator=gen)
    y = torch.randn(2, 6, dtype=torch.float64, generator=gen)
    u, v = torch.randn(2, 4, dtype=torch.float64, generator=gen), torch.randn(2, 4, dtype=torch.float64, generator=gen)
    hu, hv = diag_hessian(u, v, Z, y)
    for r in range(2):

        def loss(theta: torch.Tensor, r: int = r) -> torch.Tensor:
            uu, vv = theta[:4], theta[4:]
            return replica_losses((Z[r] @ (uu * uu - vv * vv)).unsqueeze(0), y[r].unsqueeze(0)).sum()

        H = torch.autograd.functional.hessian(loss, torch.cat([u[r], v[r]]))
        torch.testing.assert_close(torch.cat([hu[r], hv[r]]), torch.diagonal(H), rtol=1e-12, atol=1e-12)


def test_sparsity_metrics_by_hand() -> None:
    """Σ√|w|, ‖w‖₁, nbig and support recovery on a hand-made w."""
    w = torch.tensor([[0.25, -0.04, 0.0, -1.0]], dtype=torch.float64)
    s = sparsity(w)
    assert float(s["l_half"][0]) == 0.5 + 0.2 + 1.0 and float(s["l1"][0]) == 1.29 and float(s["nbig"][0]) == 2
    assert support_recovered(w, torch.tensor([[0.3, 0.0, 0.0, -0.9]], dtype=torch.float64)).tolist() == [1.0]
    assert support_recovered(w, torch.tensor([[0.3, 0.0, 0.5, 0.0]], dtype=torch.float64)).tolist() == [0.0]


def test_basis_pursuit_interpolates_with_minimal_l1() -> None:
    """Basis pursuit interpolates Zw = y with ‖w‖₁ no larger than ‖w*‖₁ (and recovers w* at n=20, d=40, k=3)."""
    p = sparse_problem(40, 3, 20, 10, "rademacher", 0)
    Z, y, w_star = (torch.from_numpy(p[k]) for k in ("Z", "y", "w_star"))
    w = basis_pursuit(Z, y)
    assert float((Z @ w - y).abs().max()) < 1e-8
    assert float(w.abs().sum()) <= float(w_star.abs().sum()) + 1e-8
    assert float((w - w_star).abs().max()) < 1e-6


def test_preconditioner_check_ratio_and_floor() -> None:
    """The ratio is v / ((δ²/n)·H) and coordinates with predicted value ≤ 1e-6 are left out."""
    h = torch.tensor([4.0, 2.0, 1.0, 1e-8], dtype=torch.float64)
    v = 1.1 * (0.25 / 20) * h
    v[3] = 5.0  # below the floor: ignored
    out = preconditioner_check(v, h, 0.5, 20)
    assert abs(out["ratio"] - 1.1) < 1e-12 and out["corr"] > 0.999999 and out["coords"] == 3
