"""Shared helpers of the coop_se tests: build a problem and run the bare core."""

from __future__ import annotations

from datamodules.decision.bandit_datamodule import BanditGraphDataModule
from zoo.coop_se.sim import CoopBanditSim

CARD_MEANS = [0.9, 0.8, 0.7, 0.6, 0.5]


def make(
    algorithm: str = "coop_se",
    graph: str = "path",
    m: int = 4,
    T: int = 1000,
    R: int = 1,
    seed: int = 0,
    means: list[float] | None = None,
    **options,
) -> CoopBanditSim:
    dm = BanditGraphDataModule(graph=graph, m=m, T=T, n_replicas=R, seed=seed, means=means or CARD_MEANS)
    sim = CoopBanditSim(algorithm, R, dm.n_agents, dm.n_arms, **options)
    sim.attach(**dm.problem())
    return sim


def run(
    algorithm: str = "coop_se", graph: str = "path", m: int = 4, T: int = 1000, R: int = 1, seed: int = 0, **options
) -> CoopBanditSim:
    sim = make(algorithm, graph, m, T, R, seed, **options)
    sim.advance(T)
    return sim
