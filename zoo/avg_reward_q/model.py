"""Pure maths of average-reward Q-learning with adaptive (local-clock) stepsizes (card ``avg_reward_q``).

Everything here is plain torch (float64): the Bellman operator ``H``, relative value iteration (Q*, r*), the
stationary distribution of the behaviour chain, the predicted wrong target Q̄ of the universal stepsize (by ODE
iteration and by an independent bisection), exact gains of deterministic policies, the vectorised asynchronous update
:func:`q_update_chunk` with its baselines, a plain-Python per-replica reference of the same update
(:func:`q_update_reference`) and the span diagnostics. Nothing here imports Lightning.

Conventions: ``P`` has shape (S, A, S) with ``P[s, a, s']``, ``R`` (S, A), ``pi_b`` (S, A); Q tables are (S, A) or
(R, S, A) for ``R`` replicas; the reference pair ``ref = (s0, a0)`` fixes the additive constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

Algorithm = Literal["adaptive", "universal", "constant", "rvi_q", "differential_q", "discounted_q"]
Stepsize = Literal["adaptive", "universal", "constant"]
Centering = Literal["none", "mean", "ref"]
RviF = Literal["ref", "mean"]
STEPSIZES = ("adaptive", "universal", "constant")
ALGORITHMS = ("adaptive", "universal", "constant", "rvi_q", "differential_q", "discounted_q")


# ----------------------------------------------------------------------------------------------------- ground truth
def bellman(Q: Tensor, P: Tensor, R: Tensor) -> Tensor:
    """``H(Q)(s,a) = R(s,a) + Σ_s' P(s'|s,a)·max_a' Q(s',a')`` for Q of shape (..., S, A)."""
    return R + torch.einsum("sat,...t->...sa", P, Q.amax(-1))


def span(x: Tensor) -> Tensor:
    """Span seminorm ``max x − min x`` over the last two dims (all (s,a)) of ``x`` (..., S, A)."""
    flat = x.flatten(-2)
    return flat.amax(-1) - flat.amin(-1)


def rvi(
    P: Tensor, R: Tensor, ref: tuple[int, int] = (0, 0), tol: float = 1e-12, max_iter: int = 100_000
) -> tuple[Tensor, float]:
    """Relative value iteration ``Q ← H(Q) − H(Q)(s0,a0)`` until ``‖ΔQ‖∞ < tol``.

    After ``max_iter`` iterations without convergence (a periodic chain) it switches to the damped form
    ``Q ← ½Q + ½(H(Q) − H(Q)(s0,a0))``, which has the same fixed point (card, ground truth 1).

    Returns:
        ``(Q*, r*)`` with ``Q*(s0,a0) = 0`` and ``r* = H(Q*)(s0,a0)``.
    """
    s0, a0 = ref
    Q = torch.zeros_like(R, dtype=torch.float64)
    for damped in (False, True):
        for _ in range(max_iter if not damped else 10 * max_iter):
            HQ = bellman(Q, P, R)
            new = HQ - HQ[s0, a0]
            if damped:
                new = 0.5 * Q + 0.5 * new
            delta = float((new - Q).abs().max())
            Q = new
            if delta < tol:
                return Q, float(bellman(Q, P, R)[s0, a0])
    raise ValueError(f"rvi: relative value iteration did not converge to {tol} (max_iter={max_iter}, damped too)")


def behaviour_chain(P: Tensor, pi_b: Tensor) -> Tensor:
    """``P_b(s, s') = Σ_a π_b(a|s)·P(s'|s,a)`` (S, S)."""
    return torch.einsum("sa,sat->st", pi_b, P)


def stationary(P: Tensor, pi_b: Tensor) -> tuple[Tensor, Tensor]:
    """Stationary state distribution ``d_b`` of the behaviour chain by a linear solve, and ``μ = d_b ⊗ π_b``.

    Raises:
        ValueError: naming the states with ``d_b < 1e-12`` (or the rank defect) when the chain is not irreducible.
    """
    Pb = behaviour_chain(P, pi_b)
    S = Pb.shape[0]
    M = Pb.T - torch.eye(S, dtype=torch.float64)
    rank = int(torch.linalg.matrix_rank(M))
    if rank < S - 1:
        raise ValueError(f"the behaviour chain is not irreducible: it has {S - rank} recurrent classes "
                         "(μ is not unique; change pi_b/behaviour or the MDP)")  # fmt: skip
    A = torch.cat([M, torch.ones(1, S, dtype=torch.float64)])
    b = torch.zeros(S + 1, dtype=torch.float64)
    b[-1] = 1.0
    d = torch.linalg.lstsq(A, b.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    bad = [s for s in range(S) if d[s] < 1e-12]
    if bad:
        raise ValueError(f"the behaviour chain is not irreducible: stationary mass < 1e-12 at states {bad}")
    d = d / d.sum()
    mu = d[:, None] * pi_b
    bad_sa = [(s, a) for s, a in (mu < 1e-12).nonzero().tolist()]
    if bad_sa:
        raise ValueError(f"μ(s,a) < 1e-12 at (s,a) = {bad_sa[:10]}: pi_b never takes these actions")
    return d, mu


def qbar_ode(
    P: Tensor, R: Tensor, mu: Tensor, ref: tuple[int, int] = (0, 0), tol: float = 1e-13, max_iter: int = 1_000_000
) -> tuple[Tensor, float, int]:
    """Span-equilibrium Q̄ of the universal-stepsize ODE ``Q̇ = D·(H(Q) − Q)`` by iteration.

    ``Q ← Q + (D / max μ)·(H(Q) − Q)``, then ``Q ← Q − Q(s0,a0)``, until ``‖ΔQ‖∞ < tol``.

    Returns:
        ``(Q̄, c̄, iterations)`` with ``c̄ = [D·(H(Q̄) − Q̄)](s0,a0)``.
    """
    s0, a0 = ref
    scale = mu / mu.max()
    Q = torch.zeros_like(R, dtype=torch.float64)
    for it in range(1, max_iter + 1):
        new = Q + scale * (bellman(Q, P, R) - Q)
        new = new - new[s0, a0]
        delta = float((new - Q).abs().max())
        Q = new
        if delta < tol:
            c = float((mu * (bellman(Q, P, R) - Q))[s0, a0])
            return Q, c, it
    raise ValueError(f"qbar_ode: the ODE iteration did not converge to {tol} in {max_iter} iterations")


def qbar_bisection(
    P: Tensor, R: Tensor, mu: Tensor, ref: tuple[int, int] = (0, 0), iters: int = 200
) -> tuple[Tensor, float]:
    """Q̄ by bisection on ``c``: the optimal gain of the reward ``R − c/μ`` is 0 (strictly decreasing in ``c``).

    The bracket ``[c_lo, c_hi]`` is where ``R − c/μ`` is entrywise ≥ 0 resp. ≤ 0. Q̄ is then the RVI bias of the
    modified MDP (normalised ``Q̄(s0,a0) = 0``), which solves the gain-0 Bellman equation.

    Returns:
        ``(Q̄, c̄)``.
    """
    rmin, rmax = float(R.min()), float(R.max())
    lo = rmin * (float(mu.min()) if rmin >= 0 else float(mu.max()))
    hi = rmax * (float(mu.max()) if rmax >= 0 else float(mu.min()))
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        _, gain = rvi(P, R - mid / mu, ref)
        if gain > 0:
            lo = mid
        else:
            hi = mid
    c = 0.5 * (lo + hi)
    Q, _ = rvi(P, R - c / mu, ref)
    return Q, c


def greedy(Q: Tensor) -> Tensor:
    """``argmax_a Q(s, a)`` with ties to the lowest index (..., S) int64."""
    # torch.argmax returns the first maximal index on CPU; made explicit so it never depends on the backend.
    best = Q.amax(-1, keepdim=True)
    A = Q.shape[-1]
    idx = torch.arange(A, dtype=torch.int64).expand_as(Q)
    return torch.where(Q == best, idx, A).amin(-1)


def policy_gain(P: Tensor, R: Tensor, policy: Tensor, start: int = 0) -> Tensor:
    """Exact long-run average reward of deterministic policies started at ``start``.

    The Cesàro limit matrix of the policy's chain equals the limit of the lazy chain ``(I + P_π)/2`` (aperiodic, same
    stationary distributions), computed by 64 squarings (``2^64`` steps: exact in float64 for any chain with a mixing
    time below ~1e17). Multichain policies are handled: the gain of the recurrent classes reached from ``start``.

    Args:
        P: (S, A, S) kernel.
        R: (S, A) reward.
        policy: (..., S) int64 actions.
        start: the start state.

    Returns:
        (...,) gains.
    """
    S = P.shape[0]
    batch = policy.shape[:-1]
    pol = policy.reshape(-1, S)
    rows = torch.arange(S)
    Ppi = P[rows, pol]  # (B, S, S)
    rpi = R[rows, pol]  # (B, S)
    M = 0.5 * (Ppi + torch.eye(S, dtype=P.dtype))
    for _ in range(64):
        M = M @ M
        M = M / M.sum(-1, keepdim=True)
    g = (M @ rpi.unsqueeze(-1)).squeeze(-1)[:, start]
    return g.reshape(batch)


def brute_force_gain(P: Tensor, R: Tensor, start: int = 0) -> float:
    """Maximum exact gain over all ``A^S`` deterministic policies (tests; feasible for small S, A)."""
    S, A = R.shape
    grids = torch.cartesian_prod(*[torch.arange(A)] * S) if S > 1 else torch.arange(A)[:, None]
    return float(policy_gain(P, R, grids.reshape(-1, S), start).max())


# ------------------------------------------------------------------------------------------------------ the update
@dataclass
class QConfig:
    """Settings of :func:`q_update_chunk` (see ``AverageRewardQLearning`` for their meaning and defaults)."""

    algorithm: Algorithm = "adaptive"
    stepsize: Stepsize = "adaptive"
    alpha: float = 3.0
    h: float = 10.0
    centering: Centering = "none"
    ref: tuple[int, int] = (0, 0)
    rvi_f: RviF = "ref"
    eta: float = 1.0
    gamma: float = 0.99

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={self.algorithm!r}: expected one of {list(ALGORITHMS)}")
        if self.stepsize not in STEPSIZES:
            raise ValueError(f"stepsize={self.stepsize!r}: expected one of {list(STEPSIZES)}")
        if self.centering not in ("none", "mean", "ref"):
            raise ValueError(f"centering={self.centering!r}: expected none, mean or ref")
        if self.rvi_f not in ("ref", "mean"):
            raise ValueError(f"rvi_f={self.rvi_f!r}: expected ref or mean")
        if not self.alpha > 0:
            raise ValueError(f"alpha={self.alpha}: expected > 0")
        if self.h < 0:
            raise ValueError(f"h={self.h}: expected >= 0")
        if not 0 <= self.gamma < 1:
            raise ValueError(f"gamma={self.gamma}: expected in [0, 1)")


def _occurrence_rank(keys: np.ndarray) -> np.ndarray:
    """For (R, L) int keys (distinct across rows), how many earlier positions of the same row hold the same key."""
    Rn, L = keys.shape
    flat = keys.reshape(-1)
    order = np.argsort(flat, kind="stable")  # stable: equal keys stay in time order
    sk = flat[order]
    pos = np.arange(sk.size)
    new = np.ones(sk.size, dtype=bool)
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    start = np.maximum.accumulate(np.where(new, pos, 0))
    rank = np.empty_like(pos)
    rank[order] = pos - start
    return rank.reshape(Rn, L)


def q_update_chunk(
    Q: Tensor, N: Tensor, k: int, chunk: Tensor, cfg: QConfig, rbar: Tensor | None = None
) -> tuple[int, float, float]:
    """Apply ``L`` consecutive asynchronous updates to ``R`` replicas in place (vectorised over replicas).

    Step ``t`` of replica ``r`` updates only ``Q[r, s_t, a_t]``, sequentially over ``t`` (the TD target reads the
    current table). Stepsizes (increment ``N`` *before* the step; card): adaptive ``α/(N(s,a)+h)``, universal
    ``α/(k+1+h)`` with the global transition counter ``k``, constant ``α``; they are precomputed for the whole chunk.

    Args:
        Q: (R, S, A) float64 table, updated in place.
        N: (R, S, A) int64 visit counts, updated in place.
        k: transitions already processed per replica (the global clock).
        chunk: (R, L, 4) float64 transitions ``(s, a, r, s')``.
        cfg: the algorithm and its constants (for ``universal`` ``cfg.alpha`` is the universal α).
        rbar: (R,) float64 reward-rate estimate of ``differential_q``, updated in place.

    Returns:
        ``(k + L, min step, max step)``.
    """
    Rn, S, A = Q.shape
    L = chunk.shape[1]
    if L == 0:
        return k, math.nan, math.nan
    if chunk.shape[0] != Rn or chunk.shape[2] != 4:
        raise ValueError(f"chunk has shape {tuple(chunk.shape)}; expected ({Rn}, L, 4) rows (s, a, r, s')")
    SA = S * A
    s = chunk[..., 0].long()
    a = chunk[..., 1].long()
    nxt = chunk[..., 3].long()
    for name, idx, size in (("s", s, S), ("a", a, A), ("s'", nxt, S)):  # flat indexing would hit another replica
        if int(idx.min()) < 0 or int(idx.max()) >= size:
            raise ValueError(f"chunk column {name} has values in [{int(idx.min())}, {int(idx.max())}]; "
                             f"expected 0..{size - 1} (S={S}, A={A})")  # fmt: skip
    off = (torch.arange(Rn) * SA)[:, None]
    gidx = off + s * A + a  # (R, L) flat index of the updated entry
    if Q.device.type != "cpu" or not Q.is_contiguous() or not N.is_contiguous():
        raise ValueError("q_update_chunk runs on contiguous CPU tables (Q, N); got device " + str(Q.device))
    Nf = N.view(-1)
    # numpy division is correctly rounded (torch's scalar/tensor is not always), so steps equal the Python reference's.
    if cfg.stepsize == "adaptive":
        counts = (Nf[gidx].numpy() + _occurrence_rank(gidx.numpy()) + 1).astype(np.float64)
        steps = cfg.alpha / (counts + cfg.h)
    elif cfg.stepsize == "universal":
        clock = np.arange(k + 1, k + L + 1, dtype=np.float64)
        steps = np.broadcast_to(cfg.alpha / (clock + cfg.h), (Rn, L))
    else:
        steps = np.full((Rn, L), float(cfg.alpha))
    Nf.add_(torch.bincount(gidx.reshape(-1), minlength=Rn * SA))
    # The sequential loop runs on numpy views of the same memory: ~4-8 µs per step against ~25-50 µs for the same
    # torch ops on (R,) tensors (per-op dispatch overhead dominates at this size; measured, see the method page).
    Qf_np = Q.detach().view(-1).numpy()
    Qv_np = Qf_np.reshape(Rn, SA)
    nrow = (off + nxt * A).T.contiguous().numpy()  # (L, R) flat index of Q[r, s', 0]
    gi = gidx.T.contiguous().numpy()
    rew = chunk[..., 2].T.contiguous().numpy()
    st = np.ascontiguousarray(steps.T)
    cols = np.arange(A)
    rb = rbar.numpy() if rbar is not None else None
    algo, center = cfg.algorithm, cfg.centering
    ref_i = cfg.ref[0] * A + cfg.ref[1]
    fidx = np.arange(Rn) * SA + ref_i
    gamma, eta = cfg.gamma, cfg.eta
    if algo in STEPSIZES and center == "none":  # the method without centering: the tightest loop
        if A == 2:
            nrow1 = nrow + 1
            for t in range(L):
                i = gi[t]
                q = Qf_np[i]
                Qf_np[i] = q + st[t] * (rew[t] + np.maximum(Qf_np[nrow[t]], Qf_np[nrow1[t]]) - q)
        else:
            nidx = nrow[:, :, None] + cols
            for t in range(L):
                i = gi[t]
                q = Qf_np[i]
                Qf_np[i] = q + st[t] * (rew[t] + Qf_np[nidx[t]].max(1) - q)
        return k + L, float(steps.min()), float(steps.max())
    for t in range(L):
        i = gi[t]
        q = Qf_np[i]
        n = nrow[t]
        m = np.maximum(Qf_np[n], Qf_np[n + 1]) if A == 2 else Qf_np[n[:, None] + cols].max(1)
        if algo == "discounted_q":
            m = gamma * m
        elif algo == "rvi_q":
            m = m - (Qf_np[fidx] if cfg.rvi_f == "ref" else Qv_np.mean(1))
        elif algo == "differential_q":
            m = m - rb
        delta = rew[t] + m - q
        Qf_np[i] = q + st[t] * delta
        if algo == "differential_q":
            rb += eta * st[t] * delta
        if center == "mean":
            Qv_np -= Qv_np.mean(1, keepdims=True)
        elif center == "ref":
            Qv_np -= Qv_np[:, ref_i : ref_i + 1].copy()
    return k + L, float(steps.min()), float(steps.max())


def q_update_reference(
    Q: list[list[list[float]]],
    N: list[list[list[int]]],
    k: int,
    chunk: list[list[tuple[float, float, float, float]]],
    cfg: QConfig,
    rbar: list[float] | None = None,
) -> int:
    """Plain-Python per-replica loop of the same update (nested lists; the benchmark's and the tests' reference).

    Args:
        Q: ``Q[r][s][a]`` floats, updated in place.
        N: ``N[r][s][a]`` ints, updated in place.
        k: transitions already processed.
        chunk: ``chunk[r][t] = (s, a, r, s')``.
        cfg: the algorithm.
        rbar: per-replica reward rates of ``differential_q``.

    Returns:
        ``k + L``.
    """
    L = len(chunk[0]) if chunk else 0
    s0, a0 = cfg.ref
    for r, traj in enumerate(chunk):
        table, counts = Q[r], N[r]
        S, A = len(table), len(table[0])
        for t, (s_, a_, rew, n_) in enumerate(traj):
            s, a, nxt = int(s_), int(a_), int(n_)
            counts[s][a] += 1
            if cfg.stepsize == "adaptive":
                step = cfg.alpha / (counts[s][a] + cfg.h)
            elif cfg.stepsize == "universal":
                step = cfg.alpha / (k + t + 1 + cfg.h)
            else:
                step = cfg.alpha
            m = max(table[nxt])
            if cfg.algorithm == "discounted_q":
                m = cfg.gamma * m
            elif cfg.algorithm == "rvi_q":
                m = m - (table[s0][a0] if cfg.rvi_f == "ref" else sum(map(sum, table)) / (S * A))
            elif cfg.algorithm == "differential_q":
                m = m - rbar[r]
            q = table[s][a]
            delta = rew + m - q
            table[s][a] = q + step * delta
            if cfg.algorithm == "differential_q":
                rbar[r] += cfg.eta * step * delta
            if cfg.centering != "none":
                c = sum(map(sum, table)) / (S * A) if cfg.centering == "mean" else table[s0][a0]
                for row in table:
                    for j in range(A):
                        row[j] -= c
    return k + L


class TabularQ(nn.Module):
    """State of ``R`` replica learners as buffers: ``Q`` (R,S,A) float64, ``N`` (R,S,A) int64, ``k``, ``rbar``.

    Args:
        n_replicas: number of replicas R. n_states: S. n_actions: A.
        q0: initial value of every entry.
    """

    def __init__(self, n_replicas: int, n_states: int, n_actions: int, q0: float = 0.0) -> None:
        super().__init__()
        shape = (n_replicas, n_states, n_actions)
        self.register_buffer("Q", torch.full(shape, float(q0), dtype=torch.float64))
        self.register_buffer("N", torch.zeros(shape, dtype=torch.int64))
        self.register_buffer("k", torch.zeros((), dtype=torch.int64))
        self.register_buffer("rbar", torch.zeros(n_replicas, dtype=torch.float64))

    def update(self, chunk: Tensor, cfg: QConfig) -> tuple[float, float]:
        """Run :func:`q_update_chunk` on the buffers; return the realised (min, max) stepsize."""
        k, lo, hi = q_update_chunk(self.Q, self.N, int(self.k), chunk, cfg, self.rbar)
        self.k.fill_(k)
        return lo, hi


# --------------------------------------------------------------------------------------------------- diagnostics
def centered(Q: Tensor, centering: Centering, ref: tuple[int, int] = (0, 0)) -> Tensor:
    """``Q − c(Q)·e`` with ``c`` the mean (``mean``) or ``Q(s0,a0)`` (``ref``); ``none`` returns ``Q``."""
    if centering == "mean":
        return Q - Q.flatten(-2).mean(-1)[..., None, None]
    if centering == "ref":
        return Q - Q[..., ref[0], ref[1]][..., None, None]
    return Q


def diagnostics(
    Q: Tensor, truth: dict[str, Tensor | float], centering: Centering = "none", ref: tuple[int, int] = (0, 0)
) -> dict[str, Tensor]:
    """Per-replica span diagnostics of ``Q`` (R, S, A) against the ground truth.

    Args:
        Q: (R, S, A) tables.
        truth: ``Q_star``, ``Q_bar``, ``pi_star``, ``r_star``, ``P``, ``R`` (see ``TabularMDPDataModule.truth``).
        centering: the run's centering (for the pointwise error against ``Q*_c``).
        ref: reference pair.

    Returns:
        (R,) tensors: ``span_err`` sp(Q−Q*), ``span_err_bar`` sp(Q−Q̄), ``greedy_agree``, ``gain_regret``, ``drift``
        mean(Q), ``pointwise`` ‖Q − Q*_c‖∞ (NaN without centering), ``greedy_agree_bar`` (agreement with greedy(Q̄)).
    """
    Qs, Qb = truth["Q_star"], truth["Q_bar"]
    pol = greedy(Q)
    out = {
        "span_err": span(Q - Qs),
        "span_err_bar": span(Q - Qb),
        "greedy_agree": (pol == truth["pi_star"]).double().mean(-1),
        "greedy_agree_bar": (pol == greedy(Qb)).double().mean(-1),
        "gain_regret": float(truth["r_star"]) - policy_gain(truth["P"], truth["R"], pol),
        "drift": Q.flatten(-2).mean(-1),
    }
    if centering == "none":
        out["pointwise"] = torch.full_like(out["drift"], math.nan)
    else:
        out["pointwise"] = (Q - centered(Qs, centering, ref)).flatten(-2).abs().amax(-1)
    return out


def summarise(diag: dict[str, Tensor]) -> dict[str, float]:
    """Replica aggregates of :func:`diagnostics`: means, span MSE, medians of the span errors."""
    out = {f"{k}": float(v.mean()) for k, v in diag.items()}
    out["span_mse"] = float((diag["span_err"] ** 2).mean())
    out["span_mse_bar"] = float((diag["span_err_bar"] ** 2).mean())
    out["span_err_median"] = float(diag["span_err"].median())
    out["span_err_bar_median"] = float(diag["span_err_bar"].median())
    return out


def loglog_slope(x: list[float] | Tensor, y: list[float] | Tensor) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    lx = torch.as_tensor(x, dtype=torch.float64).log()
    ly = torch.as_tensor(y, dtype=torch.float64).log()
    lx = lx - lx.mean()
    return float((lx * (ly - ly.mean())).sum() / (lx * lx).sum())


def semilog_slope(x: list[float] | Tensor, y: list[float] | Tensor) -> float:
    """Least-squares slope of ``y`` against ``ln x`` (the drift law)."""
    lx = torch.as_tensor(x, dtype=torch.float64).log()
    yy = torch.as_tensor(y, dtype=torch.float64)
    lx = lx - lx.mean()
    return float((lx * (yy - yy.mean())).sum() / (lx * lx).sum())
