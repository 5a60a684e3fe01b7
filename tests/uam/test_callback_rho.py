"""The UAM radius relative to the weight norm (``rho_scale: relative``, issue #21): one ``rho`` for any input size."""

from __future__ import annotations

import pytest
import torch

from callbacks.unlearning import UnlearningCallback

from .test_callback import Quadratic, _step

torch.set_num_threads(1)


def _eps_norm(model: Quadratic, cb: UnlearningCallback) -> tuple[float, float]:
    """``(||eps||, ||w||)`` of one UAM step (eps read where the retain loss was taken)."""
    w0 = model.w().detach().clone()
    _step(model, cb, 0.01)
    return float((model.seen[0] - w0).norm()), float(w0.norm())


def test_relative_radius_is_rho_times_the_weight_norm_and_scales_with_the_weights() -> None:
    """``||eps|| = rho ||w||`` (global norm over all tensors), so scaling every weight by c scales the radius by c;
    the absolute radius stays rho. Catches a relative knob that is ignored (the old behaviour: one absolute radius,
    too large for small weights and too small for large ones) or a per-tensor weight norm."""
    rho, scale = 0.05, 7.0
    eps, wnorm = _eps_norm(Quadratic(sizes=(4, 3, 5)), UnlearningCallback(rho=rho, rho_scale="relative", gamma=0.0))
    assert abs(eps - rho * wnorm) < 1e-9 * wnorm
    big = Quadratic(sizes=(4, 3, 5))
    with torch.no_grad():
        for p in big.parameters():
            p.mul_(scale)
    eps_big, wnorm_big = _eps_norm(big, UnlearningCallback(rho=rho, rho_scale="relative", gamma=0.0))
    assert abs(wnorm_big - scale * wnorm) < 1e-9 * wnorm_big
    assert abs(eps_big / eps - scale) < 1e-9
    eps_abs, _ = _eps_norm(Quadratic(sizes=(4, 3, 5)), UnlearningCallback(rho=rho, gamma=0.0))
    assert abs(eps_abs - rho) < 1e-9  # absolute (the default): rho, whatever the weights


def test_relative_radius_is_logged_and_checked() -> None:
    """The knob is a checked choice; the LM step (radius without the weights) refuses it in one line."""
    with pytest.raises(ValueError, match="rho_scale='weights'"):
        UnlearningCallback(rho_scale="weights")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rho_scale='relative': expected 'absolute' for strategy=rmu_uam"):
        UnlearningCallback(strategy="rmu_uam", rho_scale="relative")
    cb = UnlearningCallback(rho=0.1, rho_scale="relative")
    w = [torch.full((3,), 2.0), torch.full((4,), 2.0)]  # ||w|| = sqrt(7 * 4)
    assert abs(cb.current_rho(w) - 0.1 * 28**0.5) < 1e-12
    with pytest.raises(ValueError, match="needs the weights"):
        cb.current_rho()
