"""Shared runners of the avg_reward_q tests: the pure core on a datamodule's stream, with snapshots at given k."""

from __future__ import annotations

import torch

from datamodules.decision.mdp_datamodule import TabularMDPDataModule
from zoo.avg_reward_q.model import QConfig, q_update_chunk


def run_core(dm: TabularMDPDataModule, cfg: QConfig, steps: int, at: list[int], chunk_len: int = 1000) -> dict:
    """Run ``cfg`` on ``dm``'s fresh stream for ``steps``; return Q copies at each k in ``at`` and the final state."""
    R, S, A = dm.n_replicas, dm.n_states, dm.n_actions
    Q = torch.zeros(R, S, A, dtype=torch.float64)
    N = torch.zeros(R, S, A, dtype=torch.int64)
    rbar = torch.zeros(R, dtype=torch.float64)
    snaps, k = {}, 0
    for chunk in dm.chunks(steps, chunk_len):
        L = chunk.shape[1]
        begin = 0
        for stop in sorted({p for p in at if k < p <= k + L} | {k + L}):
            q_update_chunk(Q, N, k + begin, chunk[:, begin : stop - k], cfg, rbar)
            begin = stop - k
            if stop in at:
                snaps[stop] = Q.clone()
        k += L
    return {"Q": Q, "N": N, "k": k, "rbar": rbar, "snaps": snaps}
