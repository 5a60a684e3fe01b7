"""Continuing behaviour trajectories on a tabular MDP, served in chunks (``avg_reward_q``)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import IterableDataset


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
