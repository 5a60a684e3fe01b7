"""avg_reward_q part of `benchmarks/stochastic_approx.py` (card avg_reward_q, "Performance").

Measures, in one process on one torch thread:
1. replica-updates/s of the vectorised core ``q_update_chunk`` against two per-replica Python loops on the same stream
   at R=64 (card target: >= 10x): ``q_update_reference`` on nested lists of Python floats (the fastest plain-Python
   form; 1.9-2.9x measured, the 10x target is NOT met against it) and the naive loop of scalar torch indexing
   ``Q[r, s, a] += ...`` (met by a wide margin);
2. the Lightning path (``Trainer.fit``, chunk_len 1000) against the pure core on the same datamodule stream, both
   including trajectory sampling (card: within 1.5x);
3. the wall time of 4e5 steps x 64 replicas of the method (sampling + update; card: <= 60 s on 2 cores); ``quick``
   measures 5e4 steps and extrapolates linearly (the cost per step is constant), and says so;
4. ground-truth setup time for S·A = 12 and S·A = 1000 (card: < 1 s for S·A <= 1000).
"""

from __future__ import annotations

import time


def _pure(dm, cfg, steps: int) -> float:
    import torch

    from zoo.avg_reward_q.model import q_update_chunk

    R, S, A = dm.n_replicas, dm.n_states, dm.n_actions
    Q = torch.zeros(R, S, A, dtype=torch.float64)
    N = torch.zeros(R, S, A, dtype=torch.int64)
    start, k = time.perf_counter(), 0
    for chunk in dm.chunks(steps, 1000):
        k, _, _ = q_update_chunk(Q, N, k, chunk, cfg)
    return time.perf_counter() - start


def run(quick: bool = False) -> list[str]:
    """Run the measurements on one torch thread; return printable lines."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the loops are per-step small ops; restored on return (the caller may use 2)
    try:
        return _measure(quick)
    finally:
        torch.set_num_threads(threads)


def _measure(quick: bool) -> list[str]:
    import logging
    import warnings

    import torch
    from lightning.pytorch import Trainer

    from datamodules.decision.mdp_datamodule import TabularMDPDataModule
    from zoo.avg_reward_q.model import QConfig, q_update_chunk, q_update_reference
    from zoo.avg_reward_q.module import AverageRewardQLearning

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    lines = ["avg_reward_q (card: vectorised >= 10x the Python loop; Lightning within 1.5x; 4e5 x 64 <= 60 s)"]
    cfg = QConfig()
    R = 64

    # 1. vectorised core vs plain-Python loop on the same stream
    L = 1000 if quick else 4000
    dm = TabularMDPDataModule(n_replicas=R, steps=L, chunk_len=L)
    dm.setup()
    chunk = next(dm.chunks(L, L))
    S, A = dm.n_states, dm.n_actions
    t_vec = float("inf")
    for _ in range(3):  # best of 3 (the machine is shared)
        Q, N = torch.zeros(R, S, A, dtype=torch.float64), torch.zeros(R, S, A, dtype=torch.int64)
        t0 = time.perf_counter()
        q_update_chunk(Q, N, 0, chunk, cfg)
        t_vec = min(t_vec, time.perf_counter() - t0)
    Ql = [[[0.0] * A for _ in range(S)] for _ in range(R)]
    Nl = [[[0] * A for _ in range(S)] for _ in range(R)]
    rows = chunk.tolist()
    t0 = time.perf_counter()
    q_update_reference(Ql, Nl, 0, rows, cfg)
    t_ref = time.perf_counter() - t0
    same = torch.equal(Q, torch.tensor(Ql, dtype=torch.float64))
    # The naive loop: per replica, per step, scalar torch indexing of the same (R, S, A) tensors.
    Ln = 100 if quick else 300
    Qn, Nn = torch.zeros(R, S, A, dtype=torch.float64), torch.zeros(R, S, A, dtype=torch.int64)
    t0 = time.perf_counter()
    for r in range(R):
        for t in range(Ln):
            s, a, rew, nxt = chunk[r, t]
            s, a, nxt = int(s), int(a), int(nxt)
            Nn[r, s, a] += 1
            step = cfg.alpha / (Nn[r, s, a] + cfg.h)
            Qn[r, s, a] += step * (rew + Qn[r, nxt].max() - Qn[r, s, a])
    t_naive = (time.perf_counter() - t0) * L / Ln
    lines.append(f"  core vs Python loop (R={R}, L={L}): vectorised {R * L / t_vec / 1e6:.2f} M replica-updates/s, "
                 f"loop {R * L / t_ref / 1e6:.3f} M/s, ratio {t_ref / t_vec:.1f}x (target >= 10x); "
                 f"identical Q: {same}")  # fmt: skip
    lines.append(f"  core vs naive per-replica loop of scalar torch indexing: {R * L / t_naive / 1e6:.4f} M/s, "
                 f"ratio {t_naive / t_vec:.0f}x (measured on {Ln} steps per replica)")  # fmt: skip

    # 2. Lightning path vs pure core (both sample the stream)
    steps = 20_000 if quick else 100_000
    dm = TabularMDPDataModule(n_replicas=R, steps=steps, chunk_len=1000)
    dm.setup()
    t_pure = _pure(dm, cfg, steps)
    module = AverageRewardQLearning(n_states=S, n_actions=A, n_replicas=R)
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=50)  # fmt: skip
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    t_light = time.perf_counter() - t0
    lines.append(f"  Lightning Trainer.fit vs pure core ({steps} steps x {R}, chunk_len 1000, sampling included): "
                 f"{t_light:.2f} s vs {t_pure:.2f} s, ratio {t_light / t_pure:.2f}x (target <= 1.5x)")  # fmt: skip

    # 3. 4e5 steps x 64 replicas
    target = 400_000
    measured = 50_000 if quick else target
    dm = TabularMDPDataModule(n_replicas=R, steps=measured, chunk_len=1000)
    dm.setup()
    t_run = _pure(dm, cfg, measured)
    if measured == target:
        lines.append(f"  4e5 steps x {R} replicas (adaptive, sampling included): {t_run:.1f} s (target <= 60 s)")
    else:
        lines.append(f"  4e5 steps x {R} replicas: {t_run * target / measured:.1f} s EXTRAPOLATED linearly from "
                     f"{measured} steps in {t_run:.1f} s (target <= 60 s)")  # fmt: skip

    # 4. ground-truth setup
    for S_, A_ in ((6, 2), (100, 10)):
        for cross in (False, True):
            t0 = time.perf_counter()
            TabularMDPDataModule(S=S_, A=A_, cross_check=cross).setup()
            lines.append(f"  ground truth S={S_}, A={A_} (RVI, μ, Q̄ by ODE{' + bisection' if cross else ''}): "
                         f"{time.perf_counter() - t0:.2f} s (target < 1 s)")  # fmt: skip
    return lines


if __name__ == "__main__":
    for line in run():
        print(line)
