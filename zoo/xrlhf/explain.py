"""Explaining an unsatisfactory response by convex data selection (card ``xrlhf``, "Part 1"), plus the baselines.

``ConvexExplainer`` is the zoo's reconstruction of the paper's "efficient iterative data selection": grow a set S of
training comparisons from the nearest ``Δφ_i`` to the target feature ``φ̄``, one candidate at a time (the one that most
reduces the simplex least-squares distance ``d(S) = min_{α∈Δ} ‖φ̄ − Σ α_i Δφ_i‖``), until ``d(S) ≤ τ‖φ̄‖``, no
candidate helps, or ``|S| = d + 1`` (Carathéodory). Members with ``α_i ≤ 1e-6`` are pruned. The simplex fit is NNLS on
the augmented system ``[Δφ_Sᵀ; λ1ᵀ] α ≈ [φ̄; λ]`` with ``λ = 100·max_i‖Δφ_i‖``, then ``α ← α/Σα``.

Baselines (same size per item): k nearest neighbours, random, one-step TracIn (gradient-dot) and representer points.
Pure numpy/scipy: no torch, no Lightning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import nnls

#: How the forget set is chosen (``--model.init_args.selector`` of the xrlhf modules).
Selector = Literal["convex", "knn", "random", "tracin", "representer", "planted", "random_set"]
SELECTORS: tuple[str, ...] = ("convex", "knn", "random", "tracin", "representer", "planted", "random_set")


@dataclass(frozen=True)
class Explanation:
    """The selected comparisons for one target.

    Attributes:
        indices: training-comparison indices (into ``Δφ``), in selection order, pruned.
        alpha: their simplex weights (``α ≥ 0``, ``Σα = 1``).
        residual: relative residual ``‖φ̄ − Σ α_i Δφ_i‖ / ‖φ̄‖`` of the returned weights.
        feasible: ``residual ≤ τ``.
    """

    indices: np.ndarray
    alpha: np.ndarray
    residual: float
    feasible: bool


def simplex_least_squares(points: np.ndarray, target: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    """``α ∈ Δ`` minimising ``‖target − αᵀ points‖`` (NNLS on the λ-augmented system, renormalised) and its residual.

    Args:
        points: ``(k, d)`` rows ``Δφ_i``.
        target: ``(d,)``.
        lam: weight of the sum-to-one row (large: the constraint is nearly exact before renormalising).
    """
    k = points.shape[0]
    system = np.vstack([points.T, np.full((1, k), lam)])
    rhs = np.concatenate([target, [lam]])
    alpha, _ = nnls(system, rhs, maxiter=50 * (k + system.shape[0]))
    total = alpha.sum()
    alpha = alpha / total if total > 0 else np.full(k, 1.0 / k)
    return alpha, float(np.linalg.norm(target - alpha @ points))


class ConvexExplainer:
    """Greedy convex-hull selection of the training comparisons that explain a feature vector.

    Args:
        k_cand: nearest candidates (not yet in S) scored at each growth step.
        tau: relative-residual target (stop and call the item feasible when ``d(S) ≤ τ‖φ̄‖``).
        max_size: largest |S| (None: ``d + 1``, the Carathéodory bound).
        prune: weights at or below this are dropped from the returned set.
        lam_scale: ``λ = lam_scale · max_i ‖Δφ_i‖``.
        pca_dim: project ``Δφ`` and every target onto the top-k principal components of ``{Δφ_i}`` first (None: the
            full space). Convex combinations survive any linear map, so a member of the hull stays one; the
            Carathéodory bound becomes ``k + 1`` and the residual is measured in the projected space.
    """

    def __init__(self, k_cand: int = 100, tau: float = 0.05, max_size: int | None = None, prune: float = 1e-6,
                 lam_scale: float = 100.0, pca_dim: int | None = None) -> None:  # fmt: skip
        if k_cand < 1:
            raise ValueError(f"k_cand={k_cand} must be >= 1")
        if pca_dim is not None and pca_dim < 1:
            raise ValueError(f"pca_dim={pca_dim} must be None or >= 1")
        if tau < 0:
            raise ValueError(f"tau={tau} must be >= 0")
        self.k_cand, self.tau, self.max_size, self.prune, self.lam_scale = k_cand, tau, max_size, prune, lam_scale
        self.pca_dim = pca_dim
        self.delta_phi: np.ndarray | None = None
        #: ``(d, k)`` orthonormal basis of the projection (None without ``pca_dim``).
        self.basis: np.ndarray | None = None

    def fit(self, delta_phi: np.ndarray) -> ConvexExplainer:
        """Store the training comparisons ``Δφ`` (``(n, d)``, winner − loser)."""
        delta_phi = np.asarray(delta_phi, dtype=np.float64)
        if delta_phi.ndim != 2 or len(delta_phi) == 0:
            raise ValueError(f"delta_phi: expected a non-empty (n, d) array, found shape {delta_phi.shape}")
        self.dim = delta_phi.shape[1]
        if self.pca_dim is not None:
            if self.pca_dim > self.dim:
                raise ValueError(f"pca_dim={self.pca_dim} exceeds the feature dimension {self.dim}")
            _, _, vt = np.linalg.svd(delta_phi - delta_phi.mean(axis=0), full_matrices=False)
            self.basis = vt[: self.pca_dim].T
            delta_phi = delta_phi @ self.basis
        self.delta_phi = delta_phi
        self.lam = self.lam_scale * float(np.linalg.norm(delta_phi, axis=1).max())
        return self

    def explain(self, target: np.ndarray) -> Explanation:
        """The selected set, weights and residual for one target ``φ̄`` (``(d,)``)."""
        if self.delta_phi is None:
            raise RuntimeError("ConvexExplainer.explain before fit")
        points = self.delta_phi
        target = np.asarray(target, dtype=np.float64)
        if target.shape != (self.dim,):
            raise ValueError(f"target: expected shape ({self.dim},), found {target.shape}")
        if self.basis is not None:
            target = target @ self.basis
        norm = float(np.linalg.norm(target))
        bound = self.tau * norm
        max_size = min(self.max_size or points.shape[1] + 1, len(points))
        order = np.argsort(np.linalg.norm(points - target, axis=1), kind="stable")
        chosen = [int(order[0])]
        alpha, res = simplex_least_squares(points[chosen], target, self.lam)
        while res > bound and len(chosen) < max_size:
            taken = set(chosen)
            candidates = [int(i) for i in order[: self.k_cand + len(chosen)] if int(i) not in taken][: self.k_cand]
            best = None
            for cand in candidates:
                trial_alpha, trial_res = simplex_least_squares(points[[*chosen, cand]], target, self.lam)
                if best is None or trial_res < best[2]:
                    best = (cand, trial_alpha, trial_res)
            if best is None or best[2] >= res - 1e-12:  # no candidate reduces d(S)
                break
            chosen.append(best[0])
            alpha, res = best[1], best[2]
        keep = alpha > self.prune
        indices, alpha = np.asarray(chosen)[keep], alpha[keep] / alpha[keep].sum()
        residual = float(np.linalg.norm(target - alpha @ points[indices]))
        relative = residual / norm if norm > 0 else residual
        return Explanation(indices=indices, alpha=alpha, residual=relative, feasible=relative <= self.tau)


# -- baselines (the card's "Explanation selectors"), each returning ``size`` indices ----------------------------------
def knn_select(delta_phi: np.ndarray, target: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` comparisons nearest to ``target``."""
    return np.argsort(np.linalg.norm(delta_phi - target, axis=1), kind="stable")[:size]


def random_select(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` distinct comparisons uniformly at random."""
    return rng.choice(n, size=size, replace=False)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def tracin_select(delta_phi: np.ndarray, target: np.ndarray, theta: np.ndarray, size: int) -> np.ndarray:
    """One-step TracIn / gradient-dot for a linear BT RM: top ``(φ̄ᵀΔφ_i)·(1 − σ(θᵀΔφ_i))``."""
    score = (delta_phi @ target) * (1.0 - _sigmoid(delta_phi @ theta))
    return np.argsort(-score, kind="stable")[:size]


def representer_select(delta_phi: np.ndarray, target: np.ndarray, theta: np.ndarray, size: int,
                       l2: float = 1e-3) -> np.ndarray:  # fmt: skip
    """Representer points: top ``α_i^rep·Δφ_iᵀφ̄`` with ``α_i^rep = (1 − σ(θᵀΔφ_i))/(λn)``.

    ``α^rep`` is the stationarity condition of ``(1/n)Σ ℓ_BT + (λ/2)‖θ‖²``: ``θ = Σ α_i^rep Δφ_i``.
    """
    weights = (1.0 - _sigmoid(delta_phi @ theta)) / (l2 * len(delta_phi))
    return np.argsort(-(weights * (delta_phi @ target)), kind="stable")[:size]
