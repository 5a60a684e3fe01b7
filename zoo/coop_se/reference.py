"""Plain-Python per-agent reference of Coop-SE with explicit message relay (for the equality test and the benchmark).

An independent implementation of the card's pseudocode: no hop-distance matrix, no ring buffer. Every round each
agent decides from its own running counts; then every message queued in the previous round is delivered, a receiver
that sees a sample for the first time counts it and queues it to all neighbours except the sender; finally each
agent counts its own new sample and queues it to all neighbours. "First time" is tracked per (receiver, origin) as
the latest round seen: with unlimited bandwidth the samples of one origin arrive in round order along shortest paths,
so any later copy is a duplicate. It shares only the reward noise (``zoo.coop_se.sim.noise_block``, with the
vectorised core, the reward tape), so the two play identical games.
"""

from __future__ import annotations

import math

from zoo.coop_se.sim import BLOCK, noise_block


def reference_coop_se(adjacency: list[list[int]], means: list[float], T: int, seed: int = 0, replica: int = 0,
                      c: float = 2.0, L: float | None = None, rounds: int | None = None,
                      count_round: int = 0) -> dict:  # fmt: skip
    """Run Coop-SE (Bernoulli arms, fewest-samples selection, own delay 1) agent by agent.

    Args:
        adjacency: ``m × m`` 0/1 lists.
        means: Bernoulli arm means.
        T: horizon (enters ``L = log(m·A·T)`` and the noise stream).
        seed: base reward seed (the core's ``seed``).
        replica: replica index (the core's replica ``r`` uses seed ``seed + r``).
        c: radius constant.
        L: log term (default ``log(m·A·T)``).
        rounds: rounds to play (default ``T``).
        count_round: also count the messages carrying samples drawn in this round (0: off).

    Returns:
        ``{"pulls": [[arm per agent] per round], "regret": [per agent], "messages": [sent per agent],
        "known": [[n_v per arm] per agent] at the end, "per_sample": {(origin, round): messages},
        "edge_round_max": most messages queued on one directed edge in one round}``.
    """
    m, A = len(adjacency), len(means)
    nbrs = [[u for u in range(m) if adjacency[v][u]] for v in range(m)]
    L = math.log(m * A * T) if L is None else L
    cL = c * L
    best = max(means)
    n = [[0.0] * A for _ in range(m)]
    s = [[0.0] * A for _ in range(m)]
    active = [[True] * A for _ in range(m)]
    last_seen = [[0] * m for _ in range(m)]
    outbox: list[tuple[int, int, tuple[int, int, int, float]]] = []
    regret = [0.0] * m
    messages = [0] * m
    per_sample: dict[tuple[int, int], int] = {}
    edge_round_max = 0
    history = []
    tape: dict[tuple[int, int, int], list[float]] = {}
    pulls_of = [[0] * A for _ in range(m)]

    def draw(v: int, a: int) -> float:
        k = pulls_of[v][a]
        pulls_of[v][a] += 1
        block = k // BLOCK
        if (v, a, block) not in tape:
            tape[(v, a, block)] = noise_block(seed, replica, v, a, block, False).tolist()
        return tape[(v, a, block)][k % BLOCK]

    for t in range(1, (T if rounds is None else rounds) + 1):
        pulls = []
        for v in range(m):
            nv, sv, act = n[v], s[v], active[v]
            lcb = [-math.inf] * A
            ucb = [math.inf] * A
            for a in range(A):
                if nv[a] > 0:
                    rad = math.sqrt(cL / nv[a])
                    mean = sv[a] / nv[a]
                    lcb[a], ucb[a] = mean - rad, mean + rad
            lstar = max(lcb[a] for a in range(A) if act[a])
            for a in range(A):
                if act[a] and ucb[a] < lstar:
                    act[a] = False
            pick = min((a for a in range(A) if act[a]), key=lambda a: (nv[a], a))
            pulls.append(pick)
            regret[v] += best - means[pick]
        history.append(pulls)
        # deliver last round's queue: one hop
        new_out = []
        for sender, receiver, sample in outbox:
            origin, rnd, arm, reward = sample
            if rnd <= last_seen[receiver][origin]:
                continue  # a duplicate through a longer path
            last_seen[receiver][origin] = rnd
            n[receiver][arm] += 1.0
            s[receiver][arm] += reward
            for w in nbrs[receiver]:
                if w != sender:
                    new_out.append((receiver, w, sample))
        # own samples of round t: known from t + 1, sent to every neighbour
        for v in range(m):
            arm = pulls[v]
            reward = 1.0 if draw(v, arm) < means[arm] else 0.0
            n[v][arm] += 1.0
            s[v][arm] += reward
            last_seen[v][v] = t
            for w in nbrs[v]:
                new_out.append((v, w, (v, t, arm, reward)))
        on_edge: dict[tuple[int, int], int] = {}
        for sender, receiver, sample in new_out:
            messages[sender] += 1
            on_edge[(sender, receiver)] = on_edge.get((sender, receiver), 0) + 1
            if count_round and sample[1] == count_round:
                per_sample[(sample[0], sample[1])] = per_sample.get((sample[0], sample[1]), 0) + 1
        edge_round_max = max([edge_round_max, *on_edge.values()])
        outbox = new_out
    return {"pulls": history, "regret": regret, "messages": messages, "known": n, "per_sample": per_sample,
            "edge_round_max": edge_round_max}  # fmt: skip
