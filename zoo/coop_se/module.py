"""Individual Regret in Cooperative Stochastic Multi-Armed Bandits (NeurIPS 2025).

``CooperativeBanditModule`` wraps the vectorised simulator ``zoo.coop_se.sim.CoopBanditSim``: ``m`` agents on a
connected graph (``datamodules.decision.bandit_datamodule.BanditGraphDataModule``) play an ``A``-armed stochastic bandit
for ``T`` rounds; Coop-SE runs successive elimination on everything flooded to an agent so far (a sample from distance
``d`` arrives ``d`` rounds late), which makes each agent's regret ``O(R/m + A² + A·√log T)`` independently of the
diameter. Training is simulation: each ``training_step`` advances ``rounds_per_step`` rounds of every replica, with no
optimizer; all state lives in buffers, so a checkpoint resumes exactly. Variants and baselines: ``algorithm``.

Example:
    >>> from datamodules.decision.bandit_datamodule import BanditGraphDataModule
    >>> from zoo.coop_se.module import CooperativeBanditModule
    >>> dm = BanditGraphDataModule(graph="path", m=4, T=200)
    >>> module = CooperativeBanditModule(n_agents=dm.n_agents, n_arms=dm.n_arms, rounds_per_step=100)
    >>> module.sim.attach(**dm.problem())
    >>> module.sim.advance(200)
    200
    >>> module.sim.metrics()["regret_mean"] > 0
    True
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from zoo.coop_se.sim import Algorithm, CoopBanditSim, LogArg, Selection, SnapshotDelay, validate
from zoo.core import checks
from zoo.core.module import ZooModule

#: Metrics logged every ``log_every_n_steps`` as ``train/*``; all metrics are logged as ``final/*`` at ``T``.
STEP_KEYS = ("regret_mean", "regret_max", "regret_group", "messages_per_agent", "active_size", "best_arm_eliminations")


class CooperativeBanditModule(ZooModule):
    """Coop-SE and its baselines as a training-free LightningModule (card ``coop_se``).

    Args:
        algorithm: ``coop_se`` (flooding), ``coop_se_logsize`` (aggregated log-size messages on a spanning tree;
            reconstruction), ``coop_se_congest`` (per-edge bandwidth; reconstruction),
            ``coop_se_logrounds`` (snapshots at rounds 2^j; our guess), ``se`` (m=1), ``no_comm``, ``flood_ucb`` or
            ``consensus_ucb`` (the zoo's simplification of coop-UCB2, not the published index).
        c: radius constant of ``sqrt(c·L/n)`` (card: 2; unverified).
        rounds_per_step: rounds simulated per training step.
        n_replicas: independent replicas (seeds ``seed..seed+n_replicas-1``), linked from the datamodule.
        n_agents: agents ``m``, linked from the datamodule.
        n_arms: arms ``A``, linked from the datamodule.
        log_arg: ``L`` of the radius: ``mAT`` (zoo default), ``AT`` or ``T`` (unverified).
        selection: ``fewest_samples`` (zoo default) or ``round_robin_index`` (unverified).
        own_delay: rounds before an agent's own sample is usable (card convention: 1).
        bandwidth: ``coop_se_congest``: one-sample messages per directed edge per round.
        snapshot_delay: ``coop_se_logrounds``: snapshot usable after ``diameter`` (default) or ``zero`` rounds.
        messages_per_edge: ``coop_se_logsize``: aggregated ``(arm, count, sum)`` messages per directed spanning-tree
            edge per round (1..n_arms; reconstruction, default 1).
    """

    monitor: ClassVar[str] = "train/regret_mean"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "coop_se"
    trainable: ClassVar[bool] = False

    def __init__(self, algorithm: Algorithm = "coop_se", c: float = 2.0, rounds_per_step: int = 1000,
                 n_replicas: int = 1, n_agents: int = 8, n_arms: int = 5, log_arg: LogArg = "mAT",
                 selection: Selection = "fewest_samples", own_delay: int = 1, bandwidth: int = 1,
                 snapshot_delay: SnapshotDelay = "diameter", messages_per_edge: int = 1) -> None:  # fmt: skip
        checks.integer(checks.model("rounds_per_step"), rounds_per_step)
        validate(algorithm, n_replicas, n_agents, n_arms, c, log_arg, selection, own_delay, bandwidth, snapshot_delay,
                 messages_per_edge)  # fmt: skip
        self.algorithm, self.c, self.rounds_per_step = algorithm, c, int(rounds_per_step)
        self.n_replicas, self.n_agents, self.n_arms = int(n_replicas), int(n_agents), int(n_arms)
        self.log_arg, self.selection, self.own_delay = log_arg, selection, int(own_delay)
        self.bandwidth, self.snapshot_delay = int(bandwidth), snapshot_delay
        self.messages_per_edge = int(messages_per_edge)
        super().__init__()
        self.automatic_optimization = False

    def configure_models(self) -> None:
        """The simulator (state in buffers; no parameters)."""
        self.sim = CoopBanditSim(self.algorithm, self.n_replicas, self.n_agents, self.n_arms, self.c, self.log_arg,
                                 self.selection, self.own_delay, self.bandwidth, self.snapshot_delay,
                                 self.messages_per_edge)  # fmt: skip
        self.model = self.sim

    def setup(self, stage: str) -> None:
        """Install the datamodule's graph and arms (a restored checkpoint then overwrites the fresh state)."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or not hasattr(dm, "problem"):
            if not self.sim.attached:
                raise RuntimeError(
                    "CooperativeBanditModule needs datamodules.decision.bandit_datamodule.BanditGraphDataModule"
                )
            return
        problem = dm.problem()
        if problem["D"].shape[0] != self.n_agents or len(problem["means"]) != self.n_arms:
            raise ValueError(
                f"the datamodule has m={problem['D'].shape[0]} agents and A={len(problem['means'])} arms "
                f"but the module n_agents={self.n_agents}, n_arms={self.n_arms} (link them from data)"
            )
        if getattr(dm, "n_replicas", self.n_replicas) != self.n_replicas:
            raise ValueError(f"--data.init_args.n_replicas={dm.n_replicas} != --model.init_args.n_replicas="
                             f"{self.n_replicas}")  # fmt: skip
        self.sim.attach(**problem)
        dm.stride = self.rounds_per_step

    def compute_loss(self, batch: Any) -> None:
        """Nothing to learn."""
        return None

    def training_step(self, batch: Tensor, batch_idx: int) -> None:
        """Advance ``rounds_per_step`` rounds (fewer at the horizon) and log the metrics."""
        played = self.sim.advance(self.rounds_per_step)
        self.count_step()
        if played and self._logs_this_step():  # Lightning's log costs ~1 ms a key: the full set is logged at T
            metrics = self.sim.metrics()
            self.log_dict({f"train/{k}": metrics[k] for k in STEP_KEYS}, batch_size=1)
        if int(self.sim.t) >= self.sim.T and self._trainer is not None:
            self.log_dict({f"final/{k}": v for k, v in self.sim.metrics().items()}, batch_size=1)
            self.trainer.should_stop = True
        return None

    def regret_curves(self) -> dict[str, Tensor]:
        """``{"t": (k,), "regret": (R, m, k)}`` cumulative individual regret at the log-spaced rounds reached."""
        with torch.no_grad():
            keep = (self.sim.curve_t > 0) & (self.sim.curve_t <= self.sim.t)
            return {"t": self.sim.curve_t[keep].clone(), "regret": self.sim.curve[..., keep].clone()}
