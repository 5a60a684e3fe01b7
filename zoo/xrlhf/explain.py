"""Explaining an unsatisfactory response by convex data selection (card ``xrlhf``, "Part 1"), plus the baselines.

``ConvexExplainer`` is the zoo's reconstruction of the paper's "efficient iterative data selection": grow a set S of
training comparisons from the nearest ``Δφ_i`` to the target feature ``φ̄``, one candidate at a time (the one that most
reduces the simplex least-squares distance ``d(S) = min_{α∈Δ} ‖φ̄ − Σ α_i Δφ_i‖``), until ``d(S) ≤ τ‖φ̄‖``, no
candidate helps, or ``|S| = d + 1`` (Carathéodory). Members with ``α_i ≤ 1e-6`` are pruned. The simplex fit is NNLS on
the augmented system ``[Δφ_Sᵀ; λ1ᵀ] α ≈ [φ̄; λ]`` with ``λ = 100·max_i‖Δφ_i‖``, then ``α ← α/Σα``.

``solver="exact"`` (the card's "exact QP is an allowed alternative") instead solves the simplex least squares over
the ``W`` nearest comparisons at once (one NNLS), ``W = k_cand`` doubled until ``d ≤ τ‖φ̄‖`` or ``W = n``: the greedy
growth only ever looks at the ``k_cand`` nearest, and ``φ̄`` is rarely in their hull (see the method page).

Baselines (same size per item): k nearest neighbours, random, one-step TracIn (gradient-dot); ``knn_union`` grows the
per-item k-NN sets round-robin until their union is as large as the convex union. No representer-point selector:
for a linear head its score is TracIn's times the constant ``1/(λn)``, the same ranking.
:func:`select_forget_set` builds the forget set ``S_all`` for any selector (both xrlhf modules call it).
Pure numpy/scipy: no torch, no Lightning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import nnls

#: How the forget set is chosen (``--model.init_args.selector`` of the xrlhf modules).
Selector = Literal["convex", "knn", "knn_union", "random", "tracin", "planted", "random_set"]
SELECTORS: tuple[str, ...] = ("convex", "knn", "knn_union", "random", "tracin", "planted", "random_set")
#: How ``ConvexExplainer`` solves the selection (``--model.init_args.solver``).
Solver = Literal["greedy", "exact"]
SOLVERS: tuple[str, ...] = ("greedy", "exact")
#: What an infeasible explanation (residual > τ) contributes to ``S_all`` (``--model.init_args.infeasible``).
Infeasible = Literal["keep", "drop"]
INFEASIBLE: tuple[str, ...] = ("keep", "drop")


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
        solver: ``greedy`` (the card's growth among the ``k_cand`` nearest) or ``exact`` (one simplex least-squares
            solve over the ``W`` nearest, ``W = k_cand, 2k_cand, …, n`` until ``d ≤ τ‖φ̄‖``; the support of the
            NNLS solution is at most ``d + 1``, and larger than ``max_size`` only if one is given: then the
            ``max_size`` largest weights are kept and re-solved).
    """

    def __init__(self, k_cand: int = 100, tau: float = 0.05, max_size: int | None = None, prune: float = 1e-6,
                 lam_scale: float = 100.0, pca_dim: int | None = None, solver: Solver = "greedy") -> None:  # fmt: skip
        if solver not in SOLVERS:
            raise ValueError(f"solver={solver!r}: expected one of {list(SOLVERS)}")
        self.solver = solver
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
        if self.solver == "exact":
            return self._finish(*self._exact(points, target, order, bound, max_size), points, target, norm)
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
        return self._finish(np.asarray(chosen), alpha, points, target, norm)

    def _exact(self, points: np.ndarray, target: np.ndarray, order: np.ndarray, bound: float,
               max_size: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Simplex least squares over the ``W`` nearest, ``W`` doubled from ``k_cand`` until feasible or ``W = n``."""
        window = min(self.k_cand, len(points))
        while True:
            chosen = order[:window]
            alpha, res = simplex_least_squares(points[chosen], target, self.lam)
            if res <= bound or window == len(points):
                break
            window = min(2 * window, len(points))
        if np.count_nonzero(alpha > self.prune) > max_size:  # only with a max_size below the NNLS support
            chosen = chosen[np.argsort(-alpha, kind="stable")[:max_size]]
            alpha, _ = simplex_least_squares(points[chosen], target, self.lam)
        return chosen, alpha

    def _finish(self, chosen: np.ndarray, alpha: np.ndarray, points: np.ndarray, target: np.ndarray,
                norm: float) -> Explanation:  # fmt: skip
        """Prune ``α ≤ prune``, renormalise, and measure the relative residual of the returned weights."""
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


def knn_union_select(delta_phi: np.ndarray, targets: np.ndarray, sizes: list[int], union_size: int) -> list[np.ndarray]:
    """Per-item k-NN sets grown until their union has ``union_size`` comparisons (k-NN matched on ``|S_all|``).

    Item ``j`` starts with its ``sizes[j]`` nearest (the per-item matched k-NN); then, round by round, every item in
    turn adds its next nearest comparison, and the growth stops as soon as the union holds ``union_size``. A union
    already larger than ``union_size`` (k-NN sets overlap less than the convex ones) is trimmed by dropping the
    farthest members first.
    """
    orders = [np.argsort(np.linalg.norm(delta_phi - t, axis=1), kind="stable") for t in targets]
    counts = [min(int(s), len(delta_phi)) for s in sizes]
    union_size = min(union_size, len(delta_phi))
    members: dict[int, int] = {}  # index -> how many sets hold it
    for order, count in zip(orders, counts, strict=True):
        for i in order[:count]:
            members[int(i)] = members.get(int(i), 0) + 1
    while len(members) > union_size:  # trim: drop the farthest member of the largest set
        j = int(np.argmax(counts))
        i = int(orders[j][counts[j] - 1])
        counts[j] -= 1
        members[i] -= 1
        if members[i] == 0:
            del members[i]
    while len(members) < union_size and any(c < len(delta_phi) for c in counts):
        for j, order in enumerate(orders):
            if len(members) >= union_size:
                break
            if counts[j] < len(delta_phi):
                i = int(order[counts[j]])
                counts[j] += 1
                members[i] = members.get(i, 0) + 1
    return [order[:count] for order, count in zip(orders, counts, strict=True)]


def select_forget_set(points: np.ndarray, targets: np.ndarray, items: np.ndarray, theta: np.ndarray,
                      corrupted: np.ndarray | None, selector: str, explainer: ConvexExplainer | None, seed: int,
                      infeasible: str = "keep") -> tuple[list[dict], np.ndarray]:  # fmt: skip
    """The forget set ``S_all`` and per-item provenance for any selector (card step 7 and the baselines).

    Args:
        points: ``(n, d)`` comparisons ``Δφ`` (k-NN, TracIn and the sizes read them).
        targets: ``(m, d)`` explanation targets ``φ̄`` of the unsatisfactory ``items``.
        items: ``(m,)`` test-prompt indices (provenance).
        theta: the original RM head (TracIn).
        corrupted: the planted flags (``planted``), or None.
        selector: one of :data:`SELECTORS`.
        explainer: a fitted :class:`ConvexExplainer` (None only for ``planted``); every per-item baseline takes the
            convex set's size for its item.
        seed: seed of the random selectors.
        infeasible: ``keep`` (the card: every best-effort set enters ``S_all``) or ``drop`` (an item whose convex
            explanation misses ``τ`` contributes nothing; it stays in the provenance with ``"used": False``). Applies
            to the per-item baselines through their item's convex feasibility, so sizes stay matched.

    Returns:
        ``(explanations, forget indices)``; an explanation is ``{"item", "indices", "alpha", "residual",
        "feasible", "used"}`` (``planted`` and ``random_set`` give one provenance-free entry with ``item = -1``).
    """
    if selector == "planted":
        if corrupted is None:
            raise ValueError("selector=planted needs the planted 'corrupted' ground truth")
        return [{"item": -1, "indices": np.flatnonzero(corrupted), "alpha": None, "used": True}], \
            np.flatnonzero(corrupted)  # fmt: skip
    if explainer is None:
        raise ValueError(f"selector={selector!r} needs a fitted ConvexExplainer")
    rng = np.random.default_rng(seed + 7919)
    convex = [explainer.explain(t) for t in targets]
    used = [e.feasible or infeasible == "keep" for e in convex]
    sizes = [len(e.indices) for e in convex]
    union = np.unique(np.concatenate([e.indices for e, u in zip(convex, used, strict=True) if u])) \
        if any(used) else np.zeros(0, dtype=int)  # fmt: skip
    if selector == "knn_union":
        kept = [j for j, u in enumerate(used) if u]
        grown = knn_union_select(points, targets[kept], [sizes[j] for j in kept], len(union))
        chosen: list[np.ndarray | None] = [None] * len(convex)
        for j, idx in zip(kept, grown, strict=True):
            chosen[j] = idx
    explanations = []
    for j, (item, target, e) in enumerate(zip(items, targets, convex, strict=True)):
        alpha = None
        match selector:
            case "convex" | "random_set":
                indices, alpha = e.indices, e.alpha.tolist()
            case "knn":
                indices = knn_select(points, target, sizes[j])
            case "knn_union":
                indices = chosen[j] if chosen[j] is not None else knn_select(points, target, sizes[j])
            case "random":
                indices = random_select(len(points), sizes[j], rng)
            case "tracin":
                indices = tracin_select(points, target, theta, sizes[j])
            case _:
                raise ValueError(f"selector={selector!r}: expected one of {list(SELECTORS)}")
        explanations.append({"item": int(item), "indices": np.asarray(indices, dtype=int), "alpha": alpha,
                             "residual": e.residual, "feasible": bool(e.feasible), "used": used[j]})  # fmt: skip
    in_union = [e["indices"] for e in explanations if e["used"]]
    forget = np.unique(np.concatenate(in_union)) if in_union else np.zeros(0, dtype=int)
    if selector == "random_set":  # one uniform set as large as the convex union (no per-item provenance)
        rng = np.random.default_rng(seed + 104729)
        forget = np.sort(rng.choice(len(points), size=len(forget), replace=False))
        explanations = [{"item": -1, "indices": forget, "alpha": None, "used": True}]
    return explanations, forget
