"""Vectorised multi-agent simulator of Coop-SE, its variants and baselines (card ``coop_se``).

State lives in torch buffers over ``(replicas R, agents m, arms A)`` (checkpoints, ``state_dict``); the round loop runs
on zero-copy numpy views of them, since per-call overhead dominates at these sizes (numpy: ~65 µs per round at m=16,
torch ops on the same arrays: ~165 µs). Each agent's own cumulative pull counts and reward sums
live in a ring buffer of ``W = diameter + own_delay + 1`` rows (``diameter + 2`` by default): row ``τ mod W`` holds
``cum_u(τ)``, so memory is ``O(R·m·A·(diameter + 2))`` whatever the horizon. At round ``t`` agent ``v`` knows

    n_v[a] = Σ_u N_u[a](t − own_delay − D[v, u]),   s_v[a] = Σ_u S_u[a](t − own_delay − D[v, u])

(``N_u(τ) = 0`` for ``τ <= 0``): one gather ``ring[:, (t − own_delay − D) mod W, u]`` summed over ``u``, for every
agent at once. With ``own_delay = 1`` own samples are usable the next round and a sample from distance ``d`` arrives
``d`` rounds later (one hop per round; the card's convention). Flooding delivers every sample along a shortest path,
so this equals the relay protocol of the pseudocode (``zoo.coop_se.reference`` simulates the relay message by
message, and the tests compare the two).

Algorithms (``algorithm``):

- ``coop_se``: successive elimination on the flooded knowledge (eliminate ``a`` when ``UCB_a < max_{b∈Act} LCB_b``,
  never re-added; pull the active arm with the fewest known samples, ties to the lowest index);
- ``coop_se_logsize``: the same rule on what aggregated messages delivered over a BFS spanning tree: every round each
  directed tree edge ``v → w`` carries ``messages_per_edge`` messages ``(arm, count, sum)``, the cumulative totals of
  that arm over ``v``'s side of the tree (own samples plus the latest totals ``v`` holds from its other tree
  neighbours), arms in round-robin order; each message has ``O(log(mAT))`` bits (our reconstruction of the paper's
  log-size messages; with ``messages_per_edge = A`` on a tree it plays exactly ``coop_se``);
- ``coop_se_congest``: the same rule on what per-edge FIFO queues delivered, at most ``bandwidth`` one-sample messages
  per directed edge per round (a per-edge Python loop; our reconstruction);
- ``coop_se_logrounds``: communication only at rounds ``2^j``, where every agent floods its own per-arm aggregates;
  they are usable ``snapshot_delay`` (``diameter`` or ``zero``) rounds after the next one (our guess);
- ``se``: single-agent successive elimination (``m = 1``), own samples only;
- ``no_comm``: ``m`` independent SE agents with the radius ``log(m·A·T)`` of the cooperative run;
- ``flood_ucb``: the flooded knowledge with the UCB index ``mean + rad(n)`` (unpulled first), no elimination;
- ``consensus_ucb``: the zoo's simplified running-consensus UCB in the spirit of coop-UCB2 (Landgren et al. 2016;
  our simplification, not the published index): ``n̂ ← P(n̂ + ξ)``, ``ŝ ← P(ŝ + r·ξ)``, ``P = I − L/(d_max + 1)``,
  index ``ŝ/n̂ + sqrt(2 log t / (m n̂))``.

Rewards come from a reward tape (common random numbers, :func:`noise_block`): the ``k``-th pull of arm ``a`` by agent
``v`` in replica ``r`` uses the ``k``-th uniform (Bernoulli: ``r = 1[U < μ_a]``) or standard normal (Gaussian:
``r = μ_a + σ_a Z``) of the stream ``(seed + r, v, a)``, drawn in blocks of ``BLOCK`` pulls. A run is reproducible and
resumes exactly (the tape position is the own pull count, which is state), replica ``r`` of seed ``s`` equals replica 0
of seed ``s + r``, and runs on different graphs or variants are paired (same rewards for the same pulls).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from zoo.core import checks

Algorithm = Literal[
    "coop_se", "coop_se_logsize", "coop_se_congest", "coop_se_logrounds", "se", "no_comm", "flood_ucb", "consensus_ucb"
]
LogArg = Literal["mAT", "AT", "T"]
Selection = Literal["fewest_samples", "round_robin_index"]
SnapshotDelay = Literal["diameter", "zero"]
#: Rounds per reward-noise block.
BLOCK = 1024
#: Regret-curve points (log-spaced rounds in 1..T).
N_CURVE = 50
ALGORITHMS: tuple[str, ...] = Algorithm.__args__


def validate(algorithm: Any, n_replicas: Any, n_agents: Any, n_arms: Any, c: Any, log_arg: Any, selection: Any,
             own_delay: Any, bandwidth: Any, snapshot_delay: Any, messages_per_edge: Any = 1) -> None:  # fmt: skip
    """Check the simulator's options, naming each ``--model.init_args`` flag (issue #19: before anything is built)."""
    for key, value, allowed in (("algorithm", algorithm, ALGORITHMS), ("log_arg", log_arg, LogArg.__args__),
                                ("selection", selection, Selection.__args__),
                                ("snapshot_delay", snapshot_delay, SnapshotDelay.__args__)):  # fmt: skip
        checks.choice(checks.model(key), value, allowed)
    for key, value, low in (("n_replicas", n_replicas, 1), ("n_agents", n_agents, 1), ("n_arms", n_arms, 2),
                            ("own_delay", own_delay, 1), ("bandwidth", bandwidth, 1),
                            ("messages_per_edge", messages_per_edge, 1)):  # fmt: skip
        checks.integer(checks.model(key), value, low)
    checks.positive(checks.model("c"), c)
    if algorithm in ("coop_se_congest", "coop_se_logsize") and own_delay != 1:
        raise ValueError(f"--model.init_args.own_delay={own_delay}: {algorithm} supports own_delay=1 only")
    if messages_per_edge > n_arms:
        raise ValueError(f"--model.init_args.messages_per_edge={messages_per_edge}: expected at most n_arms={n_arms} "
                         "(one aggregated message per arm and edge is already the whole state)")  # fmt: skip


def noise_block(seed: int, replica: int, agent: int, arm: int, block: int, gaussian: bool) -> Tensor:
    """Reward noise of pulls ``block·BLOCK .. (block + 1)·BLOCK − 1`` of ``arm`` by ``agent``: ``(BLOCK,)`` float64.

    A reward tape (common random numbers): the k-th pull of arm ``a`` by agent ``v`` in replica ``r`` gets the same
    noise whatever the graph or algorithm, so comparisons across graphs and variants are paired.

    Args:
        seed: base seed of the run.
        replica: replica index (the stream of seed ``seed + replica``).
        agent: agent index.
        arm: arm index.
        block: block index of the pull counter.
        gaussian: standard normals (Gaussian arms) instead of uniforms (Bernoulli arms).
    """
    key = (((seed + replica) * 1_000_003 + agent) * 1_000_033 + arm) * 1_000_037 + block
    gen = torch.Generator().manual_seed(key % (2**63))
    if gaussian:
        return torch.randn(BLOCK, generator=gen, dtype=torch.float64)
    return torch.rand(BLOCK, generator=gen, dtype=torch.float64)


def log_term(log_arg: str, m: int, A: int, T: int) -> float:
    """``L`` of the radius ``sqrt(c·L/n)``: ``log(m·A·T)``, ``log(A·T)`` or ``log(T)``."""
    match log_arg:
        case "mAT":
            return math.log(m * A * T)
        case "AT":
            return math.log(A * T)
        case "T":
            return math.log(T)
    raise ValueError(f"log_arg={log_arg!r}: expected one of {list(LogArg.__args__)}")


def message_bits(m: int, T: int, A: int, gaussian: bool) -> int:
    """Bits of one flooded sample ``(origin, round, arm, reward)``: ``⌈log₂m⌉ + ⌈log₂T⌉ + ⌈log₂A⌉ + reward_bits``."""
    return _clog2(m) + _clog2(T) + _clog2(A) + (32 if gaussian else 1)


def logsize_message_bits(m: int, T: int, A: int, gaussian: bool) -> int:
    """Bits of one ``coop_se_logsize`` message ``(arm, count, sum)``.

    ``⌈log₂A⌉ + ⌈log₂(mT+1)⌉`` plus ``⌈log₂(mT+1)⌉`` for a Bernoulli sum (an integer <= the count) or 64 for a
    Gaussian sum (float64).
    A count is a total over at most ``m`` agents and ``T`` rounds, so it fits ``⌈log₂(mT+1)⌉`` bits; the simulator
    records the largest count and sum actually sent (``value_max_count``, ``value_max_sum``) so the fit is checked.
    """
    count = _clog2(m * T + 1)
    return _clog2(A) + count + (64 if gaussian else count)


def _clog2(x: int) -> int:
    return int(math.ceil(math.log2(x))) if x > 1 else 0


def relay_sender(adjacency: np.ndarray, D: np.ndarray, v: int, u: int) -> int:
    """The neighbour from which ``v`` first accepts origin ``u``'s messages when flooding.

    The lowest-index neighbour one hop closer to ``u`` (unique on a tree and on ``K_m``).
    """
    return next(x for x in range(adjacency.shape[0]) if adjacency[v, x] > 0 and D[x, u] == D[v, u] - 1)


def flood_edge_load(adjacency: np.ndarray, D: np.ndarray) -> np.ndarray:
    """``load[v, w, k]``: messages of origins at distance ``k`` from ``v`` that ``v`` forwards to neighbour ``w``.

    Flooding forwards every message to all neighbours except the one it was accepted from (:func:`relay_sender`), so
    in steady state the directed edge ``v → w`` carries ``Σ_k load[v, w, k]`` one-sample messages per round (one per
    origin whose samples ``v`` relays to ``w``); a ``coop_se_logrounds`` snapshot puts ``load[v, w, k]`` on it in its
    ``k``-th hop.
    """
    m = adjacency.shape[0]
    diameter = int(D.max()) if m else 0
    load = np.zeros((m, m, diameter + 1), dtype=np.int64)
    for v in range(m):
        for u in range(m):
            sender = -1 if u == v else relay_sender(adjacency, D, v, u)
            for w in range(m):
                if adjacency[v, w] > 0 and w != sender:
                    load[v, w, D[v, u]] += 1
    return load


def flood_weights(adjacency: Tensor) -> Tensor:
    """Messages ``w[v, u]`` agent ``v`` sends per sample of origin ``u`` when flooding.

    The relay rule "forward once to all neighbours except the sender" gives ``deg(v)`` for its own samples and
    ``deg(v) − 1`` for the others' (a sample received from two neighbours in the same round is forwarded to all but
    one of them), so one sample costs ``2|E| − (m − 1)`` messages: ``m − 1`` on a tree, ``(m − 1)²`` on ``K_m``.
    """
    deg = adjacency.sum(1)
    m = adjacency.shape[0]
    w = (deg[:, None] - 1.0).expand(m, m).clone()
    w.diagonal().copy_(deg)
    return w


def spanning_tree(adjacency: np.ndarray, D: np.ndarray) -> np.ndarray:
    """BFS spanning tree rooted at agent 0: ``(m, m)`` bool symmetric adjacency.

    Each agent ``v > 0`` keeps the edge to its parent, the lowest-index neighbour one hop closer to agent 0
    (``D[0, u] = D[0, v] − 1``); a tree graph is its own spanning tree. In CONGEST a BFS tree is built in
    ``O(diameter)`` rounds before play; the simulator takes it as given (reconstruction, see ``coop_se_logsize``).
    """
    m = adjacency.shape[0]
    tree = np.zeros((m, m), dtype=bool)
    for v in range(1, m):
        parent = next(u for u in range(m) if adjacency[v, u] > 0 and D[0, u] == D[0, v] - 1)
        tree[v, parent] = tree[parent, v] = True
    return tree


def logsize_arms(t: int, k: int, A: int) -> list[int]:
    """Arms whose totals cross every tree edge in round ``t`` (``coop_se_logsize``).

    ``k`` arms in round-robin order, ``(t − 1)·k + j mod A`` for ``j < k`` (all arms every round when ``k = A``).
    """
    return sorted({((t - 1) * k + j) % A for j in range(k)})


def decide_se(
    kn: np.ndarray, active: np.ndarray, cL: float, selection: str, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One successive-elimination decision for every (replica, agent): update ``active`` in place, return pulls.

    Args:
        kn: known ``(…, 2A)`` counts then sums.
        active: ``(…, A)`` bool active sets (updated in place).
        cL: ``c·L`` of the radius ``sqrt(c·L/n)``.
        selection: ``fewest_samples`` (argmin known count, ties lowest index) or ``round_robin_index`` (the next
            active index after the last pull, cyclically).
        last: ``(…)`` last pulled arm (``round_robin_index``; -1 before the first pull).

    Returns:
        ``(pulls, newly_eliminated)``.
    """
    A = active.shape[-1]
    n, s = kn[..., :A], kn[..., A:]
    with np.errstate(divide="ignore"):
        rad = np.sqrt(cL / n)  # cL/0 = inf: unknown arms have infinite radius
    mean = s / np.maximum(n, 1.0)
    lcb, ucb = mean - rad, mean + rad
    lstar = np.where(active, lcb, -np.inf).max(-1, keepdims=True)
    newly = (ucb < lstar) & active
    active &= ~newly
    if selection == "fewest_samples":
        key = np.where(active, n, np.inf)
    else:
        key = np.where(active, (np.arange(A) - last[..., None] - 1) % A, A + 1)
    return key.argmin(-1), newly


def decide_ucb(kn: np.ndarray, cL: float) -> np.ndarray:
    """UCB pull on known ``(…, 2A)`` counts and sums: argmax of ``mean + sqrt(cL/n)``, unpulled arms first."""
    A = kn.shape[-1] // 2
    n, s = kn[..., :A], kn[..., A:]
    with np.errstate(divide="ignore"):
        bonus = np.sqrt(cL / n)
    return (s / np.maximum(n, 1.0) + bonus).argmax(-1)


class CoopBanditSim(nn.Module):
    """The simulator: configuration as attributes, every piece of state a buffer (so a checkpoint resumes exactly).

    Buffers are created with their final shapes from ``n_replicas``, ``n_agents`` and ``n_arms``; :meth:`attach`
    installs the problem (distances, arms, horizon, seed) and resets the state. A state dict with other shapes (e.g. the
    ring's ``W``, known only once the graph is) is adopted on load.

    Args:
        algorithm: see the module docstring.
        n_replicas: independent replicas (vectorised seeds).
        n_agents: agents ``m``.
        n_arms: arms ``A``.
        c: radius constant in ``sqrt(c·L/n)`` (card: 2).
        log_arg: ``L = log(mAT)`` (card default), ``log(AT)`` or ``log(T)`` (reconstruction: see README).
        selection: ``fewest_samples`` (card default) or ``round_robin_index`` (reconstruction).
        own_delay: rounds before an agent's own sample is usable (card: 1); a sample from distance ``d`` is usable
            ``own_delay + d`` rounds after it was drawn.
        bandwidth: ``coop_se_congest``: one-sample messages per directed edge per round.
        snapshot_delay: ``coop_se_logrounds``: snapshots usable after ``diameter`` (default) or ``zero`` extra rounds.
        messages_per_edge: ``coop_se_logsize``: aggregated ``(arm, count, sum)`` messages per directed tree edge per
            round (1..A; default 1).
    """

    def __init__(self, algorithm: str = "coop_se", n_replicas: int = 1, n_agents: int = 1, n_arms: int = 2,
                 c: float = 2.0, log_arg: str = "mAT", selection: str = "fewest_samples", own_delay: int = 1,
                 bandwidth: int = 1, snapshot_delay: str = "diameter", messages_per_edge: int = 1) -> None:  # fmt: skip
        super().__init__()
        validate(algorithm, n_replicas, n_agents, n_arms, c, log_arg, selection, own_delay, bandwidth, snapshot_delay,
                 messages_per_edge)  # fmt: skip
        self.algorithm, self.c, self.log_arg, self.selection = algorithm, float(c), log_arg, selection
        self.own_delay, self.bandwidth, self.snapshot_delay = int(own_delay), int(bandwidth), snapshot_delay
        self.messages_per_edge = int(messages_per_edge)
        R, m, A = n_replicas, n_agents, n_arms
        self.R, self.m, self.A = R, m, A
        f64, i64 = torch.float64, torch.int64
        # problem (installed by attach)
        self.register_buffer("D", torch.zeros(m, m, dtype=i64))
        self.register_buffer("adjacency", torch.zeros(m, m, dtype=f64))
        self.register_buffer("means", torch.zeros(A, dtype=f64))
        self.register_buffer("stds", torch.zeros(A, dtype=f64))
        self.register_buffer("meta", torch.zeros(4, dtype=i64))  # T, seed, gaussian, attached
        # state
        self.register_buffer("t", torch.zeros((), dtype=i64))
        self.register_buffer("ring", torch.zeros(R, self.own_delay + 1, m, 2 * A, dtype=f64))
        self.register_buffer("active", torch.ones(R, m, A, dtype=torch.bool))
        self.register_buffer("elim_round", torch.zeros(R, m, A, dtype=i64))
        self.register_buffer("regret", torch.zeros(R, m, dtype=f64))
        self.register_buffer("last", torch.full((R, m), -1, dtype=i64))
        self.register_buffer("curve", torch.zeros(R, m, N_CURVE, dtype=f64))
        self.register_buffer("curve_t", torch.zeros(N_CURVE, dtype=i64))
        self.register_buffer("best_elim", torch.zeros(R, dtype=i64))
        # algorithm-specific state (empty unless used)
        self.register_buffer("aux", torch.zeros(0, dtype=f64))  # consensus (n̂, ŝ) / congest knowledge
        self.register_buffer("snaps", torch.zeros(0, dtype=f64))  # logrounds snapshots (K, R, m, 2A)
        self.register_buffer("sent", torch.zeros(m, dtype=f64))  # congest: messages sent per agent
        self.register_buffer("edge_peak", torch.zeros((), dtype=i64))  # congest: max messages on an edge in a round
        self.register_buffer("edges", torch.zeros(0, dtype=f64))  # logsize: (R, m receiver, m sender, 2A) latest totals
        self.register_buffer("value_peak", torch.zeros(2, dtype=f64))  # logsize: largest count and sum sent
        self.register_buffer("moved", torch.zeros((), dtype=i64))  # rounds in which some message moved (measured)
        self._queues: dict[tuple[int, int, int], deque] = {}
        self._seen: Tensor | None = None
        self._tape: np.ndarray | None = None

    # ----------------------------------------------------------------- problem
    @property
    def T(self) -> int:
        """Horizon."""
        return int(self.meta[0])

    @property
    def seed(self) -> int:
        """Base reward seed."""
        return int(self.meta[1])

    @property
    def gaussian(self) -> bool:
        """Gaussian (else Bernoulli) arms."""
        return bool(self.meta[2])

    @property
    def attached(self) -> bool:
        """Whether a problem is installed."""
        return bool(self.meta[3])

    @property
    def diameter(self) -> int:
        """Graph diameter."""
        return int(self.D.max())

    @property
    def cL(self) -> float:
        """``c·L`` of the radius (``m`` is the graph's, also for ``no_comm``)."""
        return self.c * log_term(self.log_arg, self.m, self.A, self.T)

    def attach(self, D: Tensor, adjacency: Tensor, means: Tensor, stds: Tensor, gaussian: bool, T: int,
               seed: int) -> None:  # fmt: skip
        """Install a problem and reset the state to round 0.

        Args:
            D: ``(m, m)`` hop distances.
            adjacency: ``(m, m)`` 0/1 adjacency.
            means: ``(A,)`` arm means.
            stds: ``(A,)`` Gaussian standard deviations (ignored for Bernoulli).
            gaussian: Gaussian arms (else Bernoulli).
            T: horizon.
            seed: base reward seed.
        """
        m, A = self.m, self.A
        if tuple(D.shape) != (m, m):
            raise ValueError(f"the graph has {D.shape[0]} agents but the module was built for n_agents={m}")
        if tuple(means.shape) != (A,):
            raise ValueError(f"the arm set has {means.shape[0]} arms but the module was built for n_arms={A}")
        if self.algorithm == "se" and m != 1:
            raise ValueError(f"algorithm=se is single-agent SE: expected a graph with m=1, found m={m} "
                             "(use no_comm for m independent agents)")  # fmt: skip
        self.D = D.to(torch.int64).clone()
        self.adjacency = adjacency.to(torch.float64).clone()
        self.means, self.stds = means.to(torch.float64).clone(), stds.to(torch.float64).clone()
        self.meta = torch.tensor([T, seed, int(gaussian), 1], dtype=torch.int64)
        self.reset()

    def reset(self) -> None:
        """Round 0: empty knowledge, every arm active, no regret."""
        R, m, A, f64 = self.R, self.m, self.A, torch.float64
        uses_flood = self.algorithm in ("coop_se", "flood_ucb")
        W = self.own_delay + 1 + (self.diameter if uses_flood else 0)
        self.t = torch.zeros((), dtype=torch.int64)
        self.ring = torch.zeros(R, W, m, 2 * A, dtype=f64)
        self.active = torch.ones(R, m, A, dtype=torch.bool)
        self.elim_round = torch.zeros(R, m, A, dtype=torch.int64)
        self.regret = torch.zeros(R, m, dtype=f64)
        self.last = torch.full((R, m), -1, dtype=torch.int64)
        self.curve = torch.zeros(R, m, N_CURVE, dtype=f64)
        self.curve_t = torch.unique(torch.logspace(0, math.log10(max(self.T, 1)), N_CURVE, dtype=f64).round().long())
        self.curve_t = torch.cat([self.curve_t, self.curve_t.new_full((N_CURVE - len(self.curve_t),), -1)])
        self.best_elim = torch.zeros(R, dtype=torch.int64)
        self.aux = torch.zeros(R, m, 2 * A, dtype=f64) if self.algorithm in ("consensus_ucb", "coop_se_congest") \
            else torch.zeros(0, dtype=f64)  # fmt: skip
        K = int(math.floor(math.log2(self.T))) + 1 if self.algorithm == "coop_se_logrounds" else 0
        self.snaps = torch.zeros(K, R, m, 2 * A, dtype=f64)
        self.sent = torch.zeros(m, dtype=f64)
        self.edge_peak = torch.zeros((), dtype=torch.int64)
        self.edges = torch.zeros(R, m, m, 2 * A, dtype=f64) if self.algorithm == "coop_se_logsize" \
            else torch.zeros(0, dtype=f64)  # fmt: skip
        self.value_peak = torch.zeros(2, dtype=f64)
        self.moved = torch.zeros((), dtype=torch.int64)
        self._queues = {(r, a, b): deque() for r in range(R) for a in range(m) for b in range(m)
                        if self.adjacency[a, b] > 0}  # fmt: skip
        self._seen = torch.zeros(R, m, m, self.T + 1, dtype=torch.bool) if self.algorithm == "coop_se_congest" \
            else None  # fmt: skip
        self._tape = None
        self._prepare()

    def _prepare(self) -> None:
        """Derived constants (not state): gather offsets, gaps, the consensus matrix."""
        R, m = self.R, self.m
        self._offset = (self.own_delay + self.D).numpy()
        self._cols = np.broadcast_to(np.arange(m), (m, m))
        W = self.ring.shape[1]
        self._flat = [((p - self._offset) % W * m + self._cols).ravel() for p in range(W)]
        self._curve_set = {int(x) for x in self.curve_t.tolist() if x > 0}
        self._curve_t_np = self.curve_t.numpy()
        self._gauss = self.gaussian
        self._means_np, self._stds_np = self.means.numpy(), self.stds.numpy()
        self._gaps_np = (self.means.max() - self.means).numpy()
        self._best_np = (self.means == self.means.max()).numpy()
        self._ri, self._vi = np.arange(R)[:, None], np.arange(m)[None, :]
        deg = self.adjacency.sum(1)
        lap = torch.diag(deg) - self.adjacency
        self._P_np = (torch.eye(m, dtype=torch.float64) - lap / (float(deg.max()) + 1.0)).numpy()
        self._flood_w = flood_weights(self.adjacency)
        self._nbrs = [torch.nonzero(self.adjacency[v] > 0).flatten().tolist() for v in range(m)]
        self._cL = self.cL
        self._tree = spanning_tree(self.adjacency.numpy(), self.D.numpy()) if self.attached else np.zeros((m, m), bool)
        self._tree_f = self._tree.astype(np.float64)
        self._load = None  # flood_edge_load, computed on first use
        # logrounds: a snapshot floods hop by hop, so its messages move in the rounds t_j .. t_j + hops - 1: hops is
        # the diameter on a tree, one more where equidistant agents still forward copies to each other (odd cycle)
        self._snap_hops = 1
        if self.algorithm == "coop_se_logrounds" and self.snapshot_delay != "zero" and self.attached and m > 1:
            self._load = flood_edge_load(self.adjacency.numpy(), self.D.numpy())
            self._snap_hops = int(np.nonzero(self._load.sum((0, 1)))[0].max()) + 1

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        # adopt the saved shapes (the ring's W and the per-algorithm buffers are sized by the graph)
        for name, buf in list(self._buffers.items()):
            key = prefix + name
            if key in state_dict and buf is not None and state_dict[key].shape != buf.shape:
                self._buffers[name] = torch.empty_like(state_dict[key], dtype=buf.dtype)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._prepare()
        self._tape = None

    def get_extra_state(self) -> dict[str, Any]:
        """``coop_se_congest``'s FIFO queues and delivered-sample marks (primitives and a tensor)."""
        if self.algorithm != "coop_se_congest" or not self.attached:
            return {}
        queues = {f"{r},{a},{b}": [list(x) for x in q] for (r, a, b), q in self._queues.items() if q}
        return {"queues": queues, "seen": self._seen}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_extra_state`."""
        if not state:
            return
        self._queues = {(r, a, b): deque() for r in range(self.R) for a in range(self.m) for b in range(self.m)
                        if self.adjacency[a, b] > 0}  # fmt: skip
        for key, items in state.get("queues", {}).items():
            r, a, b = (int(x) for x in key.split(","))
            self._queues[(r, a, b)] = deque((int(o), int(s), int(arm), float(rw)) for o, s, arm, rw in items)
        self._seen = state.get("seen")

    # ----------------------------------------------------------------- dynamics
    def _views(self) -> dict[str, np.ndarray]:
        """Zero-copy numpy views of the state buffers (the round loop runs on them; the buffers stay the state).

        numpy's per-call overhead on these tiny arrays is a fraction of torch's.
        """
        names = ("ring", "active", "elim_round", "regret", "last", "curve", "best_elim", "aux", "snaps", "t", "edges",
                 "value_peak", "moved")  # fmt: skip
        return {name: getattr(self, name).numpy() for name in names}

    def _noise_for(self, pull: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """``(R, m)`` tape noise of each agent's pull, given its own pull counts of that arm before this round."""
        R, m, A = self.R, self.m, self.A
        if self._tape is None:  # load each (replica, agent, arm) stream at its current block (also after a resume)
            own = self.ring[:, int(self.t) % self.ring.shape[1], :, :A].long() // BLOCK
            self._tape = np.empty((R * m * A, BLOCK), dtype=np.float64)
            self._tape_block = own.flatten().tolist()
            for i, block in enumerate(self._tape_block):
                r, v, a = i // (m * A), i // A % m, i % A
                self._tape[i] = noise_block(self.seed, r, v, a, block, self._gauss).numpy()
            self._base = (np.arange(R)[:, None] * m + np.arange(m)[None, :]) * A
        row, col = self._base + pull, counts % BLOCK
        if not col.all():  # a stream enters a new block
            for i, k in zip(row.ravel().tolist(), counts.ravel().tolist(), strict=True):
                if k // BLOCK != self._tape_block[i]:
                    r, v, a = i // (m * A), i // A % m, i % A
                    self._tape[i] = noise_block(self.seed, r, v, a, k // BLOCK, self._gauss).numpy()
                    self._tape_block[i] = k // BLOCK
        return self._tape[row, col]

    def _knowledge(self, V: dict[str, np.ndarray], t: int) -> np.ndarray:
        ring = V["ring"]
        R, W, m, A2 = ring.shape
        match self.algorithm:
            case "coop_se" | "flood_ucb":
                if t >= W:  # no clamping: the gather pattern depends on t mod W only
                    flat = self._flat[t % W]
                else:
                    flat = (np.maximum(t - self._offset, 0) % W * m + self._cols).ravel()
                return ring.reshape(R, W * m, A2)[:, flat].reshape(R, m, m, A2).sum(2)
            case "se" | "no_comm":
                return ring[:, max(t - self.own_delay, 0) % W].copy()
            case "coop_se_logrounds":
                own = ring[:, max(t - self.own_delay, 0) % W]
                extra = 0 if self.snapshot_delay == "zero" else self.diameter
                usable = t - 1 - extra  # latest snapshot round usable now
                if usable < 1:
                    return own.copy()
                snap = V["snaps"][int(math.floor(math.log2(usable)))]
                return own + snap.sum(1, keepdims=True) - snap
            case "coop_se_congest" | "consensus_ucb":
                return V["aux"].copy()
            case "coop_se_logsize":  # own samples through t - 1 + the latest totals held from each tree neighbour
                return ring[:, max(t - 1, 0) % W] + V["edges"].sum(2)
        raise AssertionError(self.algorithm)

    def knowledge(self) -> Tensor:
        """Known ``(R, m, 2A)`` counts then sums at the next round ``t + 1`` (what the decision will use)."""
        return torch.from_numpy(self._knowledge(self._views(), int(self.t) + 1))

    @torch.no_grad()
    def step(self, pulls: Tensor | None = None) -> Tensor:
        """Play one round for every replica and agent; return the ``(R, m)`` pulls.

        Args:
            pulls: force these ``(R, m)`` arms (tests script a pull schedule); None lets the algorithm choose.
        """
        t = self._check_next()
        forced = None if pulls is None else pulls.to(torch.int64).numpy()
        return torch.from_numpy(self._round(self._views(), t, forced).copy())

    def _check_next(self) -> int:
        if not self.attached:
            raise RuntimeError("CoopBanditSim.step: no problem attached (call attach() or fit with the datamodule)")
        t = int(self.t) + 1
        if t > self.T:
            raise RuntimeError(f"CoopBanditSim.step: the horizon T={self.T} is reached")
        return t

    def _round(self, V: dict[str, np.ndarray], t: int, forced: np.ndarray | None = None) -> np.ndarray:
        """Round ``t`` on the numpy views ``V``; returns the pulls."""
        kn = self._knowledge(V, t)
        A = self.A
        if self.algorithm == "flood_ucb":
            choice = decide_ucb(kn, self._cL)
        elif self.algorithm == "consensus_ucb":
            n, s = kn[..., :A], kn[..., A:]
            safe = np.maximum(n, 1e-300)
            index = np.where(n > 0, s / safe + np.sqrt(2.0 * math.log(t) / (self.m * safe)), np.inf)
            choice = index.argmax(-1)
        else:
            choice, newly = decide_se(kn, V["active"], self._cL, self.selection, V["last"])
            if newly.any():
                V["elim_round"][newly] = t
                V["best_elim"] += (newly & self._best_np).any(-1).sum(-1)
        pull = choice if forced is None else forced
        ring = V["ring"]
        W = ring.shape[1]
        prev, cur = ring[:, (t - 1) % W], ring[:, t % W]
        ri, vi = self._ri, self._vi
        noise = self._noise_for(pull, prev[ri, vi, pull].astype(np.int64))
        mu = self._means_np[pull]
        reward = mu + self._stds_np[pull] * noise if self._gauss else (noise < mu).astype(np.float64)
        V["regret"] += self._gaps_np[pull]
        V["last"][...] = pull
        # own cumulative counts and sums through round t
        cur[...] = prev
        cur[ri, vi, pull] += 1.0
        cur[ri, vi, A + pull] += reward
        match self.algorithm:
            case "consensus_ucb":
                aux = V["aux"]
                aux[ri, vi, pull] += 1.0
                aux[ri, vi, A + pull] += reward
                aux[...] = np.matmul(self._P_np, aux)
            case "coop_se_logrounds":
                if t & (t - 1) == 0:
                    V["snaps"][t.bit_length() - 1] = cur
            case "coop_se_congest":
                self._congest_round(t, pull, reward)
            case "coop_se_logsize":
                self._logsize_round(V, t, prev)
        if self._moves(t):
            V["moved"] += 1
        V["t"][...] = t
        if t in self._curve_set:
            V["curve"][..., self._curve_t_np == t] = V["regret"][..., None]
        return pull

    def _moves(self, t: int) -> bool:
        """Whether some message moves on some edge in round ``t`` (counted into ``moved``)."""
        if self.m == 1 or self.algorithm in ("se", "no_comm"):
            return False
        if self.algorithm == "coop_se_logrounds":  # snapshot j floods during rounds 2^j .. 2^j + hops - 1
            return t - (1 << (t.bit_length() - 1)) < self._snap_hops  # the latest snapshot round 2^j <= t decides
        return True  # every other variant sends every round

    def _logsize_round(self, V: dict[str, np.ndarray], t: int, prev: np.ndarray) -> None:
        """Aggregated messages on the spanning tree, delivered in round ``t`` (after the pulls, usable from ``t + 1``).

        ``v → w`` carries, for the round's arms, ``v``'s own totals through ``t − 1`` (``prev``) plus the totals it
        holds from its tree neighbours other than ``w`` (delivered in round ``t − 1``). A message composed at the end of
        round ``t − 1`` thus crosses the edge in round ``t``: the timing of flooding (one round per hop).
        """
        E = V["edges"]  # E[r, w, v] = latest totals w holds from v (zero off the tree)
        A = self.A
        send = (prev + E.sum(2))[:, :, None, :] - E  # send[r, v, w] = C_{v->w}: all v holds but what w sent it
        arms = logsize_arms(t, self.messages_per_edge, A)
        cols = arms + [A + a for a in arms]
        tree = self._tree
        E[..., cols] = np.where(tree[None, :, :, None], send.transpose(0, 2, 1, 3)[..., cols], 0.0)
        if tree.any():
            sent = send[:, tree][..., cols]  # (R, edges, 2k)
            k = len(arms)
            peak = V["value_peak"]
            peak[0] = max(peak[0], float(sent[..., :k].max()))
            peak[1] = max(peak[1], float(np.abs(sent[..., k:]).max()))

    def _congest_round(self, t: int, pull: np.ndarray, reward: np.ndarray) -> None:
        """Per-edge FIFO delivery (``bandwidth`` per directed edge), then the round's own samples enter the queues."""
        bw, m, A = self.bandwidth, self.m, self.A
        nbrs = self._nbrs
        seen, kn, sent = self._seen.numpy(), self.aux.numpy(), self.sent.numpy()  # shared memory: scalar speed
        delivered: list[tuple[int, int, int, tuple]] = []
        peak = int(self.edge_peak)
        for (r, a, b), q in self._queues.items():
            k = min(bw, len(q))
            if k:
                peak = max(peak, k)
                for _ in range(k):
                    delivered.append((r, a, b, q.popleft()))
                sent[a] += k
        self.edge_peak.fill_(peak)
        for r, a, b, item in delivered:
            origin, s, arm, rw = item
            if seen[r, b, origin, s]:
                continue
            seen[r, b, origin, s] = True
            kn[r, b, arm] += 1.0
            kn[r, b, A + arm] += rw
            for w in nbrs[b]:
                if w != a:
                    self._queues[(r, b, w)].append(item)
        pulls, rewards = pull.tolist(), reward.tolist()
        for r in range(self.R):
            for v in range(m):
                arm, rw = pulls[r][v], rewards[r][v]
                item = (v, t, arm, rw)
                seen[r, v, v, t] = True
                kn[r, v, arm] += 1.0
                kn[r, v, A + arm] += rw
                for w in nbrs[v]:
                    self._queues[(r, v, w)].append(item)

    @torch.no_grad()
    def advance(self, rounds: int) -> int:
        """Play up to ``rounds`` rounds (stopping at ``T``); return how many were played."""
        n = max(0, min(rounds, self.T - int(self.t)))
        if n:
            t, V = self._check_next(), self._views()
            for i in range(n):
                self._round(V, t + i)
        return n

    # ----------------------------------------------------------------- metrics
    def messages_per_agent(self) -> Tensor:
        """``(m,)`` messages each agent has sent so far (the same in every replica)."""
        t = int(self.t)
        match self.algorithm:
            case "coop_se" | "flood_ucb":
                # a sample of origin u drawn at round s is forwarded by v at round s + D[v, u] (<= t)
                return ((t - self.D).clamp(min=0).to(torch.float64) * self._flood_w).sum(1)
            case "coop_se_logrounds":
                return self.comm_phases() * self._flood_w.sum(1)
            case "coop_se_congest":
                return self.sent / self.R
            case "consensus_ucb":
                return t * self.adjacency.sum(1)
            case "coop_se_logsize":
                return t * float(self.messages_per_edge) * torch.from_numpy(self._tree_f.sum(1))
        return torch.zeros(self.m, dtype=torch.float64)

    def bits_per_message(self) -> int:
        """Bits of the largest message the algorithm sends (0 without communication)."""
        if self.algorithm in ("se", "no_comm") or self.m == 1:
            return 0
        m, T, A = self.m, self.T, self.A
        match self.algorithm:
            case "coop_se_logrounds":  # origin id + per-arm (count, sum)
                return _clog2(m) + A * (_clog2(T + 1) + (64 if self.gaussian else _clog2(T + 1)))
            case "consensus_ucb":  # (n̂, ŝ) as float64 per arm
                return 2 * A * 64
            case "coop_se_logsize":
                return logsize_message_bits(m, T, A, self.gaussian)
        return message_bits(m, T, A, self.gaussian)

    def messages_per_edge_round(self) -> int:
        """Most messages that crossed one directed edge in one round so far (0 without communication).

        ``coop_se``/``flood_ucb``: the relay rule's steady load (:func:`flood_edge_load`; reached once
        ``t > diameter``); ``coop_se_logsize``: ``messages_per_edge`` on every tree edge; ``coop_se_congest``: the
        queues' peak; ``coop_se_logrounds``: the largest sum of hop loads of the snapshots flooding in one round;
        ``consensus_ucb``: one (n̂, ŝ) message per edge.
        """
        t = int(self.t)
        if self.algorithm in ("se", "no_comm") or self.m == 1 or t == 0:
            return 0
        if self._load is None:
            self._load = flood_edge_load(self.adjacency.numpy(), self.D.numpy())
        load = self._load
        match self.algorithm:
            case "coop_se" | "flood_ucb":
                return int(load[..., : min(t, self.diameter + 1)].sum(-1).max())
            case "coop_se_logsize":
                return self.messages_per_edge
            case "coop_se_congest":
                return int(self.edge_peak)
            case "consensus_ucb":
                return 1
        # logrounds: hop k of snapshot j moves in round 2^j + k (k < hops)
        hops = self._snap_hops
        peak = 0
        for r in range(1, t + 1):
            if not self._moves(r):
                continue
            now = np.zeros(load.shape[:2], dtype=np.int64)
            for j in range(r.bit_length()):
                k = r - (1 << j)
                if 0 <= k < hops:
                    now += load[..., k] if hops > 1 else load.sum(-1)
            peak = max(peak, int(now.max()))
        return peak

    def comm_rounds(self) -> int:
        """Rounds in which some message moved on some edge (counted round by round during play)."""
        return int(self.moved)

    def comm_phases(self) -> int:
        """``coop_se_logrounds``: snapshots taken so far (⌊log₂t⌋ + 1); other variants: :meth:`comm_rounds`."""
        t = int(self.t)
        if self.algorithm == "coop_se_logrounds" and self.m > 1 and t > 0:
            return int(math.floor(math.log2(t))) + 1
        return self.comm_rounds()

    def metrics(self) -> dict[str, float]:
        """Scalar summaries (means over replicas): regret, communication, active sets, eliminations."""
        reg = self.regret
        msgs = self.messages_per_agent()
        bits = self.bits_per_message()
        edge_msgs = self.messages_per_edge_round()
        out = {
            "regret_mean": float(reg.mean(1).mean()),
            "regret_max": float(reg.amax(1).mean()),
            "regret_group": float(reg.sum(1).mean()),
            "messages_per_agent": float(msgs.mean()),
            "bits_per_message_max": float(bits),
            "bits_total": float(msgs.sum() * bits),
            "comm_rounds": float(self.comm_rounds()),
            "comm_phases": float(self.comm_phases()),
            "msgs_per_edge_round_max": float(edge_msgs),
            "bits_per_edge_round_max": float(edge_msgs * bits),
            "value_max_count": float(self.value_peak[0]),
            "value_max_sum": float(self.value_peak[1]),
            "active_size": float(self.active.sum(-1).double().mean()),
            "best_arm_eliminations": float(self.best_elim.sum()),
            "round": float(self.t),
        }
        for a in range(self.A):
            # 0 when no agent eliminated arm a
            done = self.elim_round[..., a] > 0
            out[f"elim_round_arm{a}"] = float(self.elim_round[..., a][done].double().mean()) if done.any() else 0.0
        return out
