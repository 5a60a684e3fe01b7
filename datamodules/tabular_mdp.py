"""Tabular MDPs and continuing behaviour trajectories for average-reward Q-learning (card ``avg_reward_q``).

The default generator draws ``P(·|s,a) ~ Dirichlet(dirichlet_alpha·1_S)`` and ``R(s,a) ~ U(0,1)`` once from
``mdp_seed``. ``min_gap`` (float) searches ``mdp_seed, mdp_seed+1, …`` (at most 1000 tries) for the first instance
whose predicted universal-stepsize error ``gap = sp(Q̄ − Q*)`` is at least ``min_gap``.

Real data (``path``): an ``.npz`` with ``P`` (S×A×S), ``R`` (S×A) and optional ``pi_b`` (S×A), validated with errors
naming the file, the key and the offending (s,a). :func:`from_mdptoolbox` reads the pymdptoolbox / mdptoolbox-hiive
convention (P is A×S×S) and :func:`from_gymnasium_P` the toy_text dict ``P[s][a] = [(prob, s', reward, terminated)]``
(terminated transitions are redirected to ``reset_state``); :func:`save_npz` writes either for ``--data.path``.

Behaviour (``behaviour``): ``uniform`` π_b (default), ``eps_greedy`` (``(1−ε)·greedy(Q*) + ε·uniform``, ε =
``epsilon``), ``iid_uniform`` (generative model: each step draws (s,a) uniformly, then s' ~ P; μ uniform) or ``file``
(the file's ``pi_b``; a file with ``pi_b`` and ``behaviour: uniform`` also uses it).

Streams: replica ``r`` follows one continuing trajectory from ``start_state`` seeded ``base_seed + r`` (numpy
``default_rng``; one uniform per step samples (a, s') jointly by inverse CDF, three in ``iid_uniform`` mode, so a
replica's stream does not depend on ``n_replicas`` or ``chunk_len``).
The training loader yields chunks ``(R, L, 4)`` float64 of ``(s, a, r, s')``, ``steps`` transitions per epoch; a later
epoch continues the same trajectories. Ground truths (float64) are computed in :meth:`setup` into :attr:`truth`.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from zoo.avg_reward_q.model import greedy, qbar_bisection, qbar_ode, rvi, span, stationary
from zoo.core.datamodule import ZooDataModule

log = logging.getLogger(__name__)

Behaviour = Literal["uniform", "eps_greedy", "iid_uniform", "file"]
#: Instances tried by the ``min_gap`` search.
GAP_TRIES = 1000
#: Tolerance on the rows of P and pi_b.
ROW_TOL = 1e-8


# ------------------------------------------------------------------------------------------------- MDPs and files
def random_mdp(n_states: int, n_actions: int, dirichlet_alpha: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The card's generator: ``P(·|s,a) ~ Dirichlet(dirichlet_alpha·1_S)``, ``R ~ U(0,1)`` (float64, one seed)."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(n_states, float(dirichlet_alpha)), size=(n_states, n_actions))
    R = rng.random((n_states, n_actions))
    return P, R


def check_mdp(
    P: Any, R: Any, pi_b: Any = None, source: str = "MDP"
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate P (S×A×S), R (S×A) and optional pi_b (S×A); raise ValueError naming ``source``, key and (s,a).

    Returns:
        float64 copies ``(P, R, pi_b)``.
    """
    P = np.asarray(P, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    if P.ndim != 3 or P.shape[0] != P.shape[2]:
        raise ValueError(f"{source}: key 'P' has shape {P.shape}; expected (S, A, S) with P[s, a, s']")
    S, A, _ = P.shape
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
        pi_b = np.asarray(pi_b, dtype=np.float64)
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


def _open_npz(path: str) -> Any:
    """``np.load`` of an ``.npz`` MDP file, with errors that name the file."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"path={path!r}: no such file (expected an .npz with keys P, R and optional pi_b)")
    try:
        blob = np.load(path, allow_pickle=False)
    except Exception as exc:  # a malformed file: name it
        raise ValueError(f"{path}: not a readable .npz file ({exc})") from exc
    if not hasattr(blob, "files"):  # a plain .npy array
        raise ValueError(f"{path}: a single array, not an .npz archive with keys P (S×A×S), R (S×A), optional pi_b")
    return blob


def load_npz(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Read and validate an ``.npz`` MDP (keys ``P``, ``R``, optional ``pi_b``)."""
    with _open_npz(path) as blob:
        for key in ("P", "R"):
            if key not in blob.files:
                raise ValueError(f"{path}: missing key {key!r}; found {blob.files}, expected P (S×A×S), R (S×A)")
        return check_mdp(blob["P"], blob["R"], blob["pi_b"] if "pi_b" in blob.files else None, source=path)


def npz_shape(path: str) -> tuple[int, int]:
    """(S, A) of an ``.npz`` MDP from the header of ``P`` (cheap; full validation happens in ``setup``)."""
    with _open_npz(path) as blob:
        if "P" not in blob.files:
            raise ValueError(f"{path}: missing key 'P'; found {blob.files}, expected P (S×A×S), R (S×A)")
        shape = blob["P"].shape
    if len(shape) != 3 or shape[0] != shape[2]:
        raise ValueError(f"{path}: key 'P' has shape {shape}; expected (S, A, S) with P[s, a, s']")
    return int(shape[0]), int(shape[1])


def save_npz(path: str, P: np.ndarray, R: np.ndarray, pi_b: np.ndarray | None = None) -> str:
    """Validate and write an MDP as ``.npz`` (keys ``P``, ``R``, ``pi_b``) for ``--data.init_args.path``."""
    P, R, pi_b = check_mdp(P, R, pi_b, source=path)
    arrays = {"P": P, "R": R} if pi_b is None else {"P": P, "R": R, "pi_b": pi_b}
    np.savez(path, **arrays)
    return path


def from_mdptoolbox(P: Any, R: Any, r_layout: Literal["SA", "AS"] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Convert the pymdptoolbox / mdptoolbox-hiive convention to ours.

    Args:
        P: (A, S, S) transition matrices, ``P[a, s, s']`` (a list of A matrices works too).
        R: (S, A) expected rewards, or (A, S, S) per-transition rewards ``R[a, s, s']`` (converted to expectations).
        r_layout: the axis order of a 2-D ``R``: required when ``A == S`` (the shape cannot tell), else checked.

    Returns:
        ``(P (S, A, S), R (S, A))``, validated.
    """
    P = np.asarray(P, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    if P.ndim != 3 or P.shape[1] != P.shape[2]:
        raise ValueError(f"from_mdptoolbox: P has shape {P.shape}; expected (A, S, S) (mdptoolbox stores P[a][s][s'];"
                         " our own convention (S, A, S) goes to check_mdp/save_npz directly)")  # fmt: skip
    A, S, _ = P.shape
    if R.shape == (A, S, S):
        Rsa = np.einsum("ast,ast->sa", P, R)
    elif R.shape == (S, A) and A == S and r_layout is None:
        raise ValueError(f"from_mdptoolbox: R has shape {R.shape} and A = S = {S}, so it could be R[s, a] "
                         "(mdptoolbox's vector convention) or R[a, s]; pass r_layout='SA' or 'AS'")  # fmt: skip
    elif R.shape == (S, A) and r_layout != "AS":
        Rsa = R
    elif R.shape == (A, S) and r_layout == "AS":
        Rsa = R.T
    elif R.shape == (A, S) and A != S:
        raise ValueError(f"from_mdptoolbox: R has shape {R.shape} = (A, S); expected (S, A) = ({S}, {A}) "
                         "(transpose it: mdptoolbox vectors are R[s, a]) or (A, S, S)")  # fmt: skip
    else:
        raise ValueError(f"from_mdptoolbox: R has shape {R.shape}; expected (S, A) = ({S}, {A}) or (A, S, S) = "
                         f"({A}, {S}, {S}); check the axis order (P is A×S×S in mdptoolbox)")  # fmt: skip
    P2, R2, _ = check_mdp(P.transpose(1, 0, 2), Rsa, source="from_mdptoolbox")
    return P2, R2


def from_gymnasium_P(P: dict, reset_state: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Convert a gymnasium toy_text ``env.unwrapped.P`` dict into a continuing (S, A, S) kernel and (S, A) reward.

    ``P[s][a]`` is a list of ``(prob, next_state, reward, terminated)``; a terminated transition goes to
    ``reset_state`` instead (the episodic task becomes continuing and unichain). ``R(s,a)`` is the expected reward.
    """
    if not isinstance(P, dict) or not P:
        raise ValueError("from_gymnasium_P: expected a non-empty dict s -> a -> [(prob, next_state, reward, done)]")
    S = len(P)
    if sorted(P) != list(range(S)):
        raise ValueError(f"from_gymnasium_P: states must be 0..{S - 1}; got keys {sorted(P)[:10]}")
    A = len(P[0])
    if not 0 <= reset_state < S:
        raise ValueError(f"from_gymnasium_P: reset_state={reset_state} is not a state in 0..{S - 1}")
    Pm = np.zeros((S, A, S))
    Rm = np.zeros((S, A))
    for s in range(S):
        if sorted(P[s]) != list(range(A)):
            raise ValueError(f"from_gymnasium_P: state {s} has actions {sorted(P[s])}; expected 0..{A - 1}")
        for a in range(A):
            for item in P[s][a]:
                if len(item) != 4:
                    raise ValueError(f"from_gymnasium_P: P[{s}][{a}] has entry {item!r}; expected (prob, s', r, done)")
                prob, nxt, rew, done = item
                target = reset_state if done else int(nxt)
                Pm[s, a, target] += prob
                Rm[s, a] += prob * rew
    P2, R2, _ = check_mdp(Pm, Rm, source="from_gymnasium_P")
    return P2, R2


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


# ------------------------------------------------------------------------------------------------------ streams
class TrajectorySampler:
    """One continuing trajectory per replica, sampled by inverse CDF on pre-drawn uniforms, vectorised over replicas.

    Args:
        P: (S, A, S). R: (S, A). pi_b: (S, A) float64 numpy arrays.
        n_replicas: R. base_seed: replica ``r`` uses ``default_rng(base_seed + r)``.
        iid: generative-model mode (each step draws (s,a) uniformly).
        reward_noise_std: Gaussian noise on the reward.
        start_state: the first state of every replica.
    """

    def __init__(self, P: np.ndarray, R: np.ndarray, pi_b: np.ndarray, n_replicas: int, base_seed: int,
                 iid: bool = False, reward_noise_std: float = 0.0, start_state: int = 0) -> None:  # fmt: skip
        S, A, _ = P.shape
        self.S, self.A, self.iid, self.noise = S, A, iid, float(reward_noise_std)
        self.CP = np.cumsum(P.reshape(S * A, S), axis=1)
        self.CP[:, -1] = 1.0  # rounding never pushes a uniform past the last state
        # Joint law of (a, s') from s: pi_b(a|s)·P(s'|s,a), flattened as a·S + s'.
        self.CJ = np.cumsum((pi_b[:, :, None] * P).reshape(S, A * S), axis=1)
        self.CJ[:, -1] = 1.0
        self.R = R.reshape(-1).copy()
        self.rngs = [np.random.default_rng(base_seed + r) for r in range(n_replicas)]
        self.noise_rngs = [np.random.default_rng([base_seed + r, 1]) for r in range(n_replicas)]
        self.s = np.full(n_replicas, int(start_state), dtype=np.int64)
        self.k = 0

    def next_chunk(self, L: int) -> Tensor:
        """The next ``L`` transitions of every replica as a (R, L, 4) float64 tensor ``(s, a, r, s')``."""
        Rn, S, A = len(self.rngs), self.S, self.A
        out = np.empty((Rn, L, 4))
        if self.iid:
            U = np.stack([rng.random((L, 3)) for rng in self.rngs])  # (R, L, 3)
            s = np.minimum((U[..., 0] * S).astype(np.int64), S - 1)
            a = np.minimum((U[..., 1] * A).astype(np.int64), A - 1)
            sa = s * A + a
            nxt = (U[..., 2, None] > self.CP[sa]).sum(-1)
            self.s = nxt[:, -1].copy()
        else:
            # One uniform per step samples (a, s') jointly from the row of the current state: 4 numpy ops per step.
            U = np.stack([rng.random(L) for rng in self.rngs]).T.copy()  # (L, R)
            joint = np.empty((L, Rn), dtype=np.int64)
            states = np.empty((L, Rn), dtype=np.int64)
            cur, CJ = self.s, self.CJ
            for t in range(L):
                states[t] = cur
                idx = (U[t][:, None] > CJ.take(cur, axis=0)).sum(1)
                joint[t] = idx
                cur = idx % S
            self.s = cur
            s, a, nxt = states.T, joint.T // S, joint.T % S
            sa = s * A + a
        out[..., 0], out[..., 1], out[..., 3] = s, a, nxt
        out[..., 2] = self.R[sa]
        if self.noise > 0:
            out[..., 2] += self.noise * np.stack([rng.standard_normal(L) for rng in self.noise_rngs])
        self.k += L
        return torch.from_numpy(out)


class ChunkStream(IterableDataset):
    """Yields ``ceil(steps / chunk_len)`` chunks of a :class:`TrajectorySampler` (continues across epochs)."""

    def __init__(self, sampler: TrajectorySampler, steps: int, chunk_len: int) -> None:
        self.sampler, self.steps, self.chunk_len = sampler, steps, chunk_len

    def __iter__(self) -> Iterator[Tensor]:
        done = 0
        while done < self.steps:
            L = min(self.chunk_len, self.steps - done)
            done += L
            yield self.sampler.next_chunk(L)

    def __len__(self) -> int:
        return math.ceil(self.steps / self.chunk_len)


# --------------------------------------------------------------------------------------------------- datamodule
class TabularMDPDataModule(ZooDataModule):
    """A finite MDP, its exact ground truths and R continuing behaviour trajectories (card ``avg_reward_q``).

    Args:
        S: number of states (ignored with ``path``). A: number of actions (ignored with ``path``).
        dirichlet_alpha: concentration of ``P(·|s,a)``.
        mdp_seed: seed of P and R (the first one tried with ``min_gap``).
        min_gap: search for the first instance with ``gap = sp(Q̄ − Q*) ≥ min_gap`` (``null``: no search).
        reward_noise_std: Gaussian noise added to each observed reward.
        behaviour: ``uniform``, ``eps_greedy``, ``iid_uniform`` or ``file``.
        epsilon: ε of ``eps_greedy``.
        n_replicas: independent trajectories (seeds ``base_seed + r``).
        steps: transitions per replica and epoch.
        chunk_len: transitions per training batch.
        base_seed: seed of replica 0.
        start_state: first state of every trajectory.
        ref_state: s0 of the reference pair (RVI normalisation, ``ref`` centering).
        ref_action: a0 of the reference pair.
        path: an ``.npz`` MDP (keys P, R, optional pi_b) instead of the generator.
        cross_check: also compute Q̄ by bisection and warn if it disagrees with the ODE iteration.
    """

    def __init__(self, S: int = 6, A: int = 2, dirichlet_alpha: float = 0.5, mdp_seed: int = 0,
                 min_gap: float | None = None, reward_noise_std: float = 0.0, behaviour: Behaviour = "uniform",
                 epsilon: float = 0.3, n_replicas: int = 16, steps: int = 30000, chunk_len: int = 1000,
                 base_seed: int = 0, start_state: int = 0, ref_state: int = 0, ref_action: int = 0,
                 path: str | None = None, cross_check: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        checks = {"S": (S, S >= 1), "A": (A, A >= 1), "dirichlet_alpha": (dirichlet_alpha, dirichlet_alpha > 0),
                  "n_replicas": (n_replicas, n_replicas >= 1), "steps": (steps, steps >= 1),
                  "chunk_len": (chunk_len, chunk_len >= 1),
                  "reward_noise_std": (reward_noise_std, reward_noise_std >= 0),
                  "epsilon": (epsilon, 0 <= epsilon <= 1)}  # fmt: skip
        for key, (value, ok) in checks.items():
            if not ok:
                raise ValueError(f"--data.init_args.{key}={value}: impossible value")
        if behaviour not in ("uniform", "eps_greedy", "iid_uniform", "file"):
            raise ValueError(f"--data.init_args.behaviour={behaviour!r}: expected uniform, eps_greedy, iid_uniform "
                             "or file")  # fmt: skip
        if min_gap is not None and behaviour == "iid_uniform":
            raise ValueError("--data.init_args.min_gap with behaviour=iid_uniform: μ is uniform there, so the gap "
                             "sp(Q̄ − Q*) is 0 for every instance; set min_gap: null")  # fmt: skip
        if min_gap is not None and path is not None:
            raise ValueError("--data.init_args.min_gap searches generated instances; it cannot apply to path=")
        if path is not None:
            S, A = npz_shape(path)
        for key, value, bound in (("start_state", start_state, S), ("ref_state", ref_state, S),
                                  ("ref_action", ref_action, A)):  # fmt: skip
            if not 0 <= value < bound:
                raise ValueError(f"--data.init_args.{key}={value}: expected in 0..{bound - 1}")
        self.S, self.A = S, A
        self.n_states, self.n_actions, self.n_replicas = S, A, int(n_replicas)
        self.dirichlet_alpha, self.mdp_seed, self.min_gap = float(dirichlet_alpha), int(mdp_seed), min_gap
        self.reward_noise_std, self.behaviour, self.epsilon = float(reward_noise_std), behaviour, float(epsilon)
        self.steps, self.chunk_len, self.base_seed = int(steps), int(chunk_len), int(base_seed)
        self.start_state, self.ref = int(start_state), (int(ref_state), int(ref_action))
        self.path, self.cross_check = path, cross_check
        #: User-supplied arrays (``from_arrays``); take precedence over ``path`` and the generator.
        self._given: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        #: Ground truths, filled by :meth:`setup`.
        self.truth: dict[str, Any] | None = None
        self.chosen_seed: int | None = None
        self._sampler: TrajectorySampler | None = None

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> TabularMDPDataModule:
        """A datamodule on an ``.npz`` MDP (keys P, R, optional pi_b)."""
        return cls(path=path, **kwargs)

    @classmethod
    def from_arrays(cls, P: Any, R: Any, pi_b: Any = None, **kwargs: Any) -> TabularMDPDataModule:
        """A datamodule on in-memory arrays in our convention (P: S×A×S), e.g. from :func:`from_mdptoolbox`."""
        P, R, pi_b = check_mdp(P, R, pi_b, source="from_arrays")
        kwargs.update(S=P.shape[0], A=P.shape[1])
        dm = cls(**kwargs)
        dm._given = (P, R, pi_b)
        return dm

    @classmethod
    def from_mdptoolbox(
        cls, P: Any, R: Any, r_layout: Literal["SA", "AS"] | None = None, **kwargs: Any
    ) -> TabularMDPDataModule:
        """A datamodule on mdptoolbox arrays (P: A×S×S; R: S×A or A×S×S; ``r_layout`` when A = S)."""
        P2, R2 = from_mdptoolbox(P, R, r_layout)
        return cls.from_arrays(P2, R2, **kwargs)

    @classmethod
    def from_gymnasium_P(cls, P: dict, reset_state: int = 0, **kwargs: Any) -> TabularMDPDataModule:
        """A datamodule on a gymnasium toy_text ``P`` dict (terminal transitions redirected to ``reset_state``)."""
        P2, R2 = from_gymnasium_P(P, reset_state)
        kwargs.setdefault("start_state", reset_state)
        return cls.from_arrays(P2, R2, **kwargs)

    def mdp(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(P, R, pi_b)`` of the chosen instance (``pi_b`` None unless given)."""
        if self._given is not None or self.path is not None:
            P, R, pi_b = self._given if self._given is not None else load_npz(self.path)
            source = self.path or "from_arrays"
            if pi_b is None and self.behaviour == "file":
                raise ValueError(f"{source}: behaviour=file needs the key 'pi_b' (S×A); found only P and R")
            if pi_b is not None and self.behaviour in ("eps_greedy", "iid_uniform"):
                raise ValueError(f"{source}: has 'pi_b' but behaviour={self.behaviour!r}; use behaviour=file or "
                                 "remove pi_b")  # fmt: skip
            return P, R, pi_b
        if self.behaviour == "file":
            raise ValueError("--data.init_args.behaviour=file needs --data.init_args.path (an .npz with pi_b)")
        seed = self.mdp_seed if self.chosen_seed is None else self.chosen_seed
        return (*random_mdp(self.S, self.A, self.dirichlet_alpha, seed), None)

    def setup(self, stage: str | None = None) -> None:
        """Compute the ground truths (once), searching ``mdp_seed, mdp_seed+1, …`` when ``min_gap`` is set."""
        if self.truth is not None:
            return
        start = time.perf_counter()
        generated = self._given is None and self.path is None
        if generated and self.min_gap is not None:
            for seed in range(self.mdp_seed, self.mdp_seed + GAP_TRIES):
                P, R = random_mdp(self.S, self.A, self.dirichlet_alpha, seed)
                try:
                    truth = ground_truth(P, R, None, self.behaviour, self.epsilon, self.ref, cross_check=False)
                except ValueError:  # a reducible behaviour chain: try the next instance
                    continue
                if truth["gap"] >= self.min_gap:
                    self.chosen_seed = seed
                    break
            else:
                raise ValueError(f"--data.init_args.min_gap={self.min_gap}: no instance among mdp_seed="
                                 f"{self.mdp_seed}..{self.mdp_seed + GAP_TRIES - 1} reaches it")  # fmt: skip
            log.info("min_gap=%s: chose mdp_seed=%d", self.min_gap, seed)
        elif generated:
            self.chosen_seed = self.mdp_seed
        P, R, pi_b = self.mdp()
        try:
            self.truth = ground_truth(P, R, pi_b, self.behaviour, self.epsilon, self.ref, self.cross_check)
        except ValueError as exc:  # name the MDP: a user's file, or the generated instance
            where = self.path or f"generated MDP (mdp_seed {self.chosen_seed})"
            raise ValueError(f"{where} with behaviour={self.behaviour!r}: {exc}") from exc
        self.truth["mdp_seed"] = self.chosen_seed
        self.truth["setup_seconds"] = time.perf_counter() - start

    def sampler(self) -> TrajectorySampler:
        """A fresh sampler from the start of every replica's trajectory (needs :meth:`setup`)."""
        if self.truth is None:
            self.setup()
        truth = self.truth
        return TrajectorySampler(truth["P"].numpy(), truth["R"].numpy(), truth["pi_b"].numpy(), self.n_replicas,
                                 self.base_seed, self.behaviour == "iid_uniform", self.reward_noise_std,
                                 self.start_state)  # fmt: skip

    def chunks(self, steps: int | None = None, chunk_len: int | None = None) -> Iterator[Tensor]:
        """Fresh chunks of the first ``steps`` transitions (defaults: the datamodule's), for runs without a Trainer."""
        return iter(ChunkStream(self.sampler(), steps or self.steps, chunk_len or self.chunk_len))

    def train_dataloader(self) -> DataLoader:
        """Chunks (R, L, 4); a later epoch continues the trajectories where the previous one stopped.

        On a resume (``--ckpt_path``) the module's restored transition counter ``k`` is ahead of this (fresh)
        sampler: the trajectories are fast-forwarded to ``k`` and the epoch serves only the transitions it had left,
        so a resumed run sees exactly the transitions the interrupted one had not.
        """
        k = self._module_k()
        if self._sampler is None or (k is not None and self._sampler.k > k):
            self._sampler = self.sampler()
        if k is not None and k > self._sampler.k:
            while self._sampler.k < k:  # fast-forward (sampling only)
                self._sampler.next_chunk(min(10 * self.chunk_len, k - self._sampler.k))
        left = self.steps - (self._sampler.k % self.steps)
        return DataLoader(ChunkStream(self._sampler, left, self.chunk_len), batch_size=None)

    def _module_k(self) -> int | None:
        """The attached module's transition counter (``None`` without a trainer or a counting module)."""
        module = getattr(getattr(self, "trainer", None), "lightning_module", None)
        counter = getattr(getattr(module, "model", None), "k", None)
        return None if counter is None else int(counter)
