"""Tabular MDPs as arrays: the seeded Dirichlet generator, validation and ground truth (``avg_reward_q``)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from zoo.avg_reward_q.model import greedy, qbar_bisection, qbar_ode, rvi, span, stationary

#: Tolerance on the rows of P and pi_b.
ROW_TOL = 1e-8


# ------------------------------------------------------------------------------------------------- MDPs and files
def random_mdp(n_states: int, n_actions: int, dirichlet_alpha: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The card's generator: ``P(·|s,a) ~ Dirichlet(dirichlet_alpha·1_S)``, ``R ~ U(0,1)`` (float64, one seed)."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(n_states, float(dirichlet_alpha)), size=(n_states, n_actions))
    R = rng.random((n_states, n_actions))
    return P, R


def numeric_array(x: Any, key: str, source: str) -> np.ndarray:
    """``x`` as a float64 array; an error naming ``source`` and ``key`` for a non-real dtype.

    ``np.asarray(x, float64)`` would coerce bools, strings such as ``'0.5'`` and complex numbers (dropping the
    imaginary part) silently.
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{source}: key {key!r} has dtype {arr.dtype}; expected an array of real numbers (float or "
                         "integer)")  # fmt: skip
    return arr.astype(np.float64)


def check_mdp(
    P: Any, R: Any, pi_b: Any = None, source: str = "MDP"
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate P (S×A×S), R (S×A) and optional pi_b (S×A); raise ValueError naming ``source``, key and (s,a).

    Returns:
        float64 copies ``(P, R, pi_b)``.
    """
    P = numeric_array(P, "P", source)
    R = numeric_array(R, "R", source)
    if P.ndim != 3 or P.shape[0] != P.shape[2]:
        raise ValueError(f"{source}: key 'P' has shape {P.shape}; expected (S, A, S) with P[s, a, s']")
    S, A, _ = P.shape
    if S == 0 or A == 0:
        raise ValueError(f"{source}: key 'P' has shape {P.shape}; expected at least one state and one action")
    if R.shape != (S, A):
        raise ValueError(f"{source}: key 'R' has shape {R.shape}; expected (S, A) = ({S}, {A}) to match 'P'")
    for key, arr in (("P", P), ("R", R)):
        bad = np.argwhere(~np.isfinite(arr))
        if len(bad):
            raise ValueError(f"{source}: key {key!r} has a non-finite value at (s,a)={tuple(bad[0][:2].tolist())}")
    neg = np.argwhere(P < 0)
    if len(neg):
        s, a, t = neg[0].tolist()
        raise ValueError(f"{source}: key 'P' is negative at (s,a)=({s},{a}), s'={t}: {P[s, a, t]}")
    sums = P.sum(-1)
    off = np.argwhere(np.abs(sums - 1) > ROW_TOL)
    if len(off):
        s, a = off[0].tolist()
        total = float(sums[s, a])
        raise ValueError(f"{source}: key 'P' row (s,a)=({s},{a}) sums to {total!r}; expected 1 within {ROW_TOL}")
    if pi_b is not None:
        pi_b = numeric_array(pi_b, "pi_b", source)
        if pi_b.shape != (S, A):
            raise ValueError(f"{source}: key 'pi_b' has shape {pi_b.shape}; expected (S, A) = ({S}, {A})")
        bad = np.argwhere(~np.isfinite(pi_b) | (pi_b < 0))
        if len(bad):
            raise ValueError(f"{source}: key 'pi_b' is non-finite or negative at (s,a)={tuple(bad[0].tolist())}")
        rows = pi_b.sum(-1)
        off = np.flatnonzero(np.abs(rows - 1) > ROW_TOL)
        if len(off):
            raise ValueError(f"{source}: key 'pi_b' row s={int(off[0])} sums to {float(rows[off[0]])!r}; expected 1")
    return P, R, pi_b


# ------------------------------------------------------------------------------------------------- ground truth
def ground_truth(
    P: np.ndarray,
    R: np.ndarray,
    pi_b: np.ndarray | None,
    behaviour: str = "uniform",
    epsilon: float = 0.3,
    ref: tuple[int, int] = (0, 0),
    cross_check: bool = True,
) -> dict[str, Any]:
    """Q*, r*, π*, μ, Q̄ (ODE and bisection), c̄ and gap in float64 (card, ground truths 1-5).

    Returns:
        a dict of float64 tensors and floats: ``P``, ``R``, ``pi_b``, ``d_b``, ``mu``, ``Q_star``, ``r_star``,
        ``pi_star``, ``Q_bar``, ``c_bar``, ``qbar_iters``, ``gap`` and, with ``cross_check``, ``Q_bar_bisect``,
        ``c_bar_bisect``.
    """
    Pt, Rt = torch.as_tensor(P, dtype=torch.float64), torch.as_tensor(R, dtype=torch.float64)
    S, A = Rt.shape
    if behaviour in ("uniform", "file") or (behaviour == "eps_greedy" and epsilon > 0):
        # These behaviours need an irreducible chain (checked below too): on a multichain MDP say so now, before
        # relative value iteration spends its 1e5 + 1e6 iterations failing to converge (ε > 0: uniform's support).
        early = pi_b if pi_b is not None and behaviour != "eps_greedy" else None
        stationary(Pt, torch.full((S, A), 1.0 / A, dtype=torch.float64) if early is None else torch.as_tensor(early))
    Qs, rs = rvi(Pt, Rt, ref)
    pi_star = greedy(Qs)
    if behaviour == "eps_greedy":
        pib = torch.full((S, A), epsilon / A, dtype=torch.float64)
        pib[torch.arange(S), pi_star] += 1 - epsilon
    elif pi_b is not None:
        pib = torch.as_tensor(pi_b, dtype=torch.float64)
    else:
        pib = torch.full((S, A), 1.0 / A, dtype=torch.float64)
    if behaviour == "iid_uniform":
        d = torch.full((S,), 1.0 / S, dtype=torch.float64)
        mu = torch.full((S, A), 1.0 / (S * A), dtype=torch.float64)
    else:
        d, mu = stationary(Pt, pib)
    Qb, cb, iters = qbar_ode(Pt, Rt, mu, ref)
    out = {"P": Pt, "R": Rt, "pi_b": pib, "d_b": d, "mu": mu, "Q_star": Qs, "r_star": rs, "pi_star": pi_star,
           "Q_bar": Qb, "c_bar": cb, "qbar_iters": iters, "gap": float(span(Qb - Qs))}  # fmt: skip
    if cross_check:
        Qbb, cbb = qbar_bisection(Pt, Rt, mu, ref)
        out["Q_bar_bisect"], out["c_bar_bisect"] = Qbb, cbb
        if abs(cbb - cb) > 1e-8 or float(span(Qbb - Qb)) > 1e-6:
            warnings.warn(f"Q̄ cross-check: ODE c̄={cb!r} vs bisection c̄={cbb!r}, span difference "
                          f"{float(span(Qbb - Qb)):.3g}", stacklevel=2)  # fmt: skip
    return out
