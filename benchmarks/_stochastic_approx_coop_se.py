"""coop_se performance (card "Performance"): vectorised core vs the plain-Python per-agent relay loop, the Lightning
path vs the bare core, and the ring-buffer memory at T = 1e6, m = 64.

Called by ``benchmarks/stochastic_approx.py`` (``run(quick) -> list[str]``); one process, one torch thread, the same
problem (Coop-SE, path m = 16, the card's arms, T = 2e4) for both arms of each comparison, interleaved repeats,
medians. The reference is timed on fewer rounds (rounds/s is flat in t once the delay pipeline is full).

    python benchmarks/_stochastic_approx_coop_se.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch


def _core_rate(m: int, R: int, T: int, rounds: int) -> float:
    from datamodules.decision.bandit_datamodule import BanditGraphDataModule
    from zoo.coop_se.sim import CoopBanditSim

    dm = BanditGraphDataModule(graph="path", m=m, T=T, n_replicas=R)
    sim = CoopBanditSim("coop_se", R, m, dm.n_arms)
    sim.attach(**dm.problem())
    sim.advance(50)  # warm-up
    start = time.perf_counter()
    sim.advance(rounds)
    return rounds / (time.perf_counter() - start)


def _reference_rate(m: int, T: int, rounds: int) -> float:
    from datamodules.decision.bandit_datamodule import BanditGraphDataModule
    from zoo.coop_se.reference import reference_coop_se

    dm = BanditGraphDataModule(graph="path", m=m, T=T)
    adj = dm.adjacency.astype(int).tolist()
    start = time.perf_counter()
    reference_coop_se(adj, dm.means, T, rounds=rounds)
    return rounds / (time.perf_counter() - start)


def _lightning_rate(T: int, rounds_per_step: int) -> tuple[float, float]:
    """(end-to-end ``trainer.fit`` rounds/s, in-loop rounds/s from the first training batch to the end of training)."""
    import logging

    from lightning.pytorch import Callback, Trainer

    from datamodules.decision.bandit_datamodule import BanditGraphDataModule
    from zoo.coop_se.module import CooperativeBanditModule

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    dm = BanditGraphDataModule(graph="path", m=16, T=T)
    module = CooperativeBanditModule(rounds_per_step=rounds_per_step, n_agents=16, n_arms=dm.n_arms)
    marks: dict[str, float] = {}

    class Clock(Callback):
        def on_train_batch_start(self, *args) -> None:
            marks.setdefault("first", time.perf_counter())

        def on_train_end(self, *args) -> None:
            marks["end"] = time.perf_counter()

    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
                      callbacks=[Clock()])  # fmt: skip
    start = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    seconds = time.perf_counter() - start
    assert int(module.sim.t) == T
    return T / seconds, T / (marks["end"] - marks["first"])


def _memory_lines() -> list[str]:
    from datamodules.decision.bandit_datamodule import BanditGraphDataModule
    from zoo.coop_se.sim import CoopBanditSim

    out = []
    for graph in ("path", "complete"):
        dm = BanditGraphDataModule(graph=graph, m=64, T=1_000_000)
        sim = CoopBanditSim("coop_se", 1, 64, dm.n_arms)
        sim.attach(**dm.problem())
        sim.advance(200)  # a short run: the tape cache and every buffer are allocated
        state = sum(b.numel() * b.element_size() for b in sim.buffers())
        tape = sim._tape.nbytes if sim._tape is not None else 0
        ring = sim.ring.numel() * sim.ring.element_size()
        out.append(f"coop_se memory, T=1e6, m=64 {graph} (diameter {dm.diameter}): ring {ring / 2**20:.2f} MiB "
                   f"(R x (diam+2) x m x 2A float64), all state buffers {state / 2**20:.2f} MiB, reward-tape cache "
                   f"{tape / 2**20:.2f} MiB; total {(state + tape) / 2**20:.2f} MiB (target < 1 GB)")  # fmt: skip
    return out


def run(quick: bool = False) -> list[str]:
    """Measure and return printable lines (ratios with their card targets); uses the caller's torch threads."""
    T = 20_000
    core_rounds, ref_rounds, repeats = (1000, 300, 1) if quick else (4000, 1500, 3)
    lines = []
    for R in (1, 16):
        core, ref = [], []
        for _ in range(repeats):  # interleaved, so machine load hits both alike
            core.append(_core_rate(16, R, T, core_rounds))
            ref.append(_reference_rate(16, T, ref_rounds) / R)  # the reference plays one replica per call
        c, r = statistics.median(core), statistics.median(ref)
        lines.append(f"coop_se core vs plain-Python per-agent loop, m=16 path, {R} replica(s): {c:.0f} vs {r:.0f} "
                     f"rounds/s (x{R} replicas; reference timed on {ref_rounds} rounds): {c / r:.2f}x "
                     f"(target >= 10x)")  # fmt: skip
    lit_T = 4000 if quick else 10_000
    lit, loop, bare = [], [], []
    for _ in range(repeats):
        end_to_end, in_loop = _lightning_rate(lit_T, 1000)
        lit.append(end_to_end)
        loop.append(in_loop)
        bare.append(_core_rate(16, 1, lit_T + 50, lit_T))
    li, lo, ba = statistics.median(lit), statistics.median(loop), statistics.median(bare)
    lines.append(f"coop_se Lightning path (rounds_per_step=1000) / bare core, m=16, {lit_T} rounds: training loop "
                 f"{lo:.0f} vs {ba:.0f} rounds/s: {lo / ba:.2f}x (target >= 0.8x); whole trainer.fit incl. setup "
                 f"{li:.0f} rounds/s: {li / ba:.2f}x")  # fmt: skip
    return lines + _memory_lines()


if __name__ == "__main__":
    torch.set_num_threads(1)
    for line in run(quick="--quick" in sys.argv):
        print(line, flush=True)
