"""Gradient-list maths shared by the unlearning callback and its methods (pure torch).

Every norm and inner product is *global*: over all tensors of a list flattened together into one float64 vector.
``projection_coefficients`` gives the per-tensor coefficients of ``[I - gamma P_f] g_r`` with
``P_f = g_hat_f g_hat_f^T`` (UAM's projection, reconstructed; see zoo/uam/README.md); ``cosine_rho`` is the
perturbation-radius schedule of the UAM library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

Projection = Literal["always", "conflict_only", "none"]
Scope = Literal["global", "per_tensor"]


def flat(tensors: Sequence[Tensor]) -> Tensor:
    """All tensors flattened into one float64 vector (the space every UAM norm and inner product lives in)."""
    return torch.cat([t.reshape(-1) for t in tensors]).double()


def dot(a: Sequence[Tensor], b: Sequence[Tensor]) -> Tensor:
    """``<a, b>`` over all tensors flattened together (float64)."""
    return flat(a) @ flat(b)


def global_norm(grads: Sequence[Tensor]) -> Tensor:
    """Global L2 norm ``||g||_2`` of a list of tensors flattened together (not a per-tensor norm)."""
    return flat(grads).norm()


def projection_coefficients(
    g_r: Sequence[Tensor],
    g_f: Sequence[Tensor],
    gamma: float,
    mode: Projection = "always",
    scope: Scope = "global",
    eps: float = 1e-16,
) -> list[float] | None:
    """Per-tensor ``c_i`` with ``[I - gamma P_f] g_r = g_r_i - c_i g_f_i`` (``None``: no projection at all).

    ``c = gamma <g_r, g_f> / (||g_f|| + eps)^2`` over the scope (all tensors together, or each on its own); 0 where
    ``conflict_only`` finds ``<g_r, g_f> <= 0``. See :func:`project_retain_grad` for the algebra.
    """
    if mode == "none" or gamma == 0.0:
        return None
    groups = [[i] for i in range(len(g_r))] if scope == "per_tensor" else [list(range(len(g_r)))]
    coefs = [0.0] * len(g_r)
    for idx in groups:
        r, f = flat([g_r[i] for i in idx]), flat([g_f[i] for i in idx])
        inner = float(r @ f)
        if mode == "conflict_only" and inner <= 0.0:
            continue
        coef = gamma * inner / (float(f.norm()) + eps) ** 2
        for i in idx:
            coefs[i] = coef
    return coefs


def project_retain_grad(
    g_r: Sequence[Tensor],
    g_f: Sequence[Tensor],
    gamma: float,
    mode: Projection = "always",
    scope: Scope = "global",
    eps: float = 1e-16,
) -> list[Tensor]:
    """``[I - gamma P_f] g_r`` with ``P_f = g_hat_f g_hat_f^T`` (reconstruction: see zoo/uam/README.md).

    The ``g_hat_f`` component of the result is ``(1 - gamma) <g_r, g_hat_f>``; the orthogonal part is unchanged.
    ``conflict_only`` projects only when ``<g_r, g_f> > 0`` (the retain step would lower the forget loss); with
    ``gamma >= 1`` the first-order change of the forget loss is then never negative.

    Args:
        g_r: retain gradient, one tensor per parameter.
        g_f: forget gradient (at the unperturbed weights), same shapes.
        gamma: projection strength (``gamma = 1`` removes the forget component, ``gamma > 1`` reverses it).
        mode: ``always`` | ``conflict_only`` | ``none`` (the public library's behaviour: no projection).
        scope: ``global`` (one ``g_hat_f`` over all parameters) or ``per_tensor`` (each tensor on its own).
        eps: added to ``||g_f||`` before dividing.

    Returns:
        The projected retain gradient (new tensors; inputs are not modified).
    """
    coefs = projection_coefficients(g_r, g_f, gamma, mode, scope, eps)
    if coefs is None:
        return [g.clone() for g in g_r]
    return [r - c * f if c else r.clone() for r, f, c in zip(g_r, g_f, coefs, strict=True)]


def cosine_rho(rho0: float, step: int, total: int | None, start: int = 0) -> float:
    """Library cosine schedule ``rho0 (1 + cos(pi (t - t0) / (T - t0))) / 2`` for ``t >= t0``; ``rho0`` before.

    Args:
        rho0: initial radius.
        step: 0-based optimizer step ``t``.
        total: ``T`` (``cosine_total_step``); ``None`` means a constant radius.
        start: ``t0`` (``cosine_start_step``).
    """
    if total is None or step < start:
        return rho0
    frac = min((step - start) / max(total - start, 1), 1.0)
    return rho0 * (1.0 + math.cos(math.pi * frac)) / 2.0
