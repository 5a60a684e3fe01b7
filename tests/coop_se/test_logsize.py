"""coop_se_logsize (aggregated log-size messages on a spanning tree), the measured per-edge load of flooding and the
measured rounds with a message of coop_se_logrounds, each against an independent message-level count (issue #22)."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

from coop_se.helpers import make
from zoo.coop_se.reference import reference_coop_se


def _tree_of(sim) -> nx.Graph:
    from zoo.coop_se.sim import spanning_tree

    tree = spanning_tree(sim.adjacency.numpy(), sim.D.numpy())
    return nx.from_numpy_array(tree.astype(int))


@pytest.mark.parametrize(("graph", "m"), [("cycle", 6), ("complete", 5), ("grid", 9), ("erdos_renyi", 8)])
def test_spanning_tree_is_a_bfs_tree_of_the_graph(graph: str, m: int) -> None:
    """The spanning tree has m - 1 edges, all in the graph, is connected, and keeps every BFS distance from agent 0."""
    sim = make("coop_se_logsize", graph, m, T=10)
    tree = _tree_of(sim)
    assert nx.is_tree(tree) and tree.number_of_nodes() == m
    assert all(sim.adjacency[u, v] > 0 for u, v in tree.edges)
    depth = nx.single_source_shortest_path_length(tree, 0)
    assert [depth[v] for v in range(m)] == sim.D[0].tolist()


@pytest.mark.parametrize(("graph", "m", "k"), [("tree", 7, 1), ("tree", 7, 2), ("cycle", 6, 1), ("grid", 6, 3)])
def test_logsize_knowledge_equals_message_level_reference(graph: str, m: int, k: int) -> None:
    """A scripted pull schedule with deterministic rewards (arms 0 and 2 pay 1, arm 1 pays 0): at every round the
    simulator's knowledge equals an explicit per-edge message loop in which, in round t, every directed tree edge
    v -> w carries arms ((t-1)k + j) mod A, j < k, with the totals cum_v(t-1) + Σ_{u ≠ w} held_v[u] (what v held from
    its other tree neighbours after round t-1); an agent knows cum_w(t-1) + Σ_v held_w[v]. Catches double counting
    through the receiver's own totals, a missing hop of delay, and a wrong arm schedule."""
    A, T = 3, 60
    sim = make("coop_se_logsize", graph, m, T=T, means=[1.0, 0.0, 1.0], messages_per_edge=k)
    tree = _tree_of(sim)
    nbrs = {v: sorted(tree.neighbors(v)) for v in range(m)}
    held = {(w, v): np.zeros(2 * A) for v in range(m) for w in nbrs[v]}  # what w holds from v
    cum = [np.zeros((m, 2 * A))]
    rng = np.random.default_rng(0)
    peak = 0.0
    for t in range(1, T + 1):
        want = np.stack([cum[-1][w] + sum((held[(w, v)] for v in nbrs[w]), np.zeros(2 * A)) for w in range(m)])
        np.testing.assert_array_equal(sim.knowledge()[0].numpy(), want, err_msg=f"round {t}")
        pulls = rng.integers(0, A, size=m)
        sim.step(torch.tensor([pulls.tolist()]))
        arms = [((t - 1) * k + j) % A for j in range(k)]
        new = {key: val.copy() for key, val in held.items()}
        for v in range(m):
            for w in nbrs[v]:
                total = cum[-1][v] + sum((held[(v, u)] for u in nbrs[v] if u != w), np.zeros(2 * A))
                for a in arms:
                    new[(w, v)][[a, A + a]] = total[[a, A + a]]
                    peak = max(peak, total[a])
        held = new
        row = cum[-1].copy()
        row[np.arange(m), pulls] += 1
        row[np.arange(m), A + pulls] += (pulls != 1).astype(float)
        cum.append(row)
    assert float(sim.value_peak[0]) == peak
    assert sim.messages_per_edge_round() == k


@pytest.mark.parametrize(("graph", "m", "seed"), [("path", 6, 0), ("tree", 8, 2)])
def test_logsize_with_every_arm_per_round_is_coop_se_on_a_tree(graph: str, m: int, seed: int) -> None:
    """With messages_per_edge = A the totals on a tree carry exactly the flooded knowledge: the same pulls and
    regret as Coop-SE, round by round (the aggregation neither loses nor double-counts samples)."""
    T = 500
    a = make("coop_se_logsize", graph, m, T=T, R=2, seed=seed, messages_per_edge=5)
    b = make("coop_se", graph, m, T=T, R=2, seed=seed)
    for _ in range(T):
        assert torch.equal(a.knowledge(), b.knowledge())
        assert torch.equal(a.step(), b.step())
    assert torch.equal(a.regret, b.regret)


def test_logsize_on_a_cycle_counts_each_sample_once() -> None:
    """On a cycle (two paths between agents) with every arm per round: Σ_a n_v at round t is exactly
    Σ_u max(t - 1 - D_tree[v, u], 0), the tree distance of the spanning tree (no sample counted twice)."""
    m, T = 7, 40
    sim = make("coop_se_logsize", "cycle", m, T=T, R=2, messages_per_edge=5)
    dist = dict(nx.all_pairs_shortest_path_length(_tree_of(sim)))
    for t in range(1, T + 1):
        total = sim.knowledge()[..., :5].sum(-1)
        want = torch.tensor([sum(max(t - 1 - dist[v][u], 0) for u in range(m)) for v in range(m)], dtype=total.dtype)
        assert torch.equal(total, want.expand_as(total)), t
        sim.step()


def test_logsize_bits_are_logarithmic_and_fields_fit() -> None:
    """One (arm, count, sum) message per edge per round: ⌈log2 A⌉ + 2⌈log2(mT+1)⌉ bits on the busiest edge, and the
    largest count and sum actually sent fit the ⌈log2(mT+1)⌉-bit field."""
    m, T, A = 8, 3000, 5
    sim = make("coop_se_logsize", "path", m, T=T, R=2)
    sim.advance(T)
    field = math.ceil(math.log2(m * T + 1))
    met = sim.metrics()
    assert met["bits_per_message_max"] == math.ceil(math.log2(A)) + 2 * field
    assert met["msgs_per_edge_round_max"] == 1 and met["bits_per_edge_round_max"] == met["bits_per_message_max"]
    assert 0 < met["value_max_sum"] <= met["value_max_count"] < 2**field
    assert met["value_max_count"] > T  # totals over many agents are sent, not single samples
    assert met["comm_rounds"] == T


@pytest.mark.parametrize(("graph", "m", "want"), [("path", 6, 5), ("star", 6, 5), ("complete", 5, 4), ("cycle", 7, 4)])
def test_flooding_edge_load_equals_relay_reference(graph: str, m: int, want: int) -> None:
    """The most one-sample messages on a directed edge in one round of flooding (m - 1 on a tree and on K_m, 1 + 3
    on a 7-cycle) equals the count of the message-by-message relay reference."""
    T = 40
    sim = make("coop_se", graph, m, T=T)
    sim.advance(T)
    ref = reference_coop_se(sim.adjacency.to(torch.int64).tolist(), sim.means.tolist(), T)
    assert sim.messages_per_edge_round() == ref["edge_round_max"] == want
    assert sim.metrics()["bits_per_edge_round_max"] == want * sim.bits_per_message()


def _token_rounds(adjacency: list[list[int]], T: int, zero: bool) -> int:
    """Rounds in 1..T in which some snapshot token moves: at round 2^j every agent sends its token to its
    neighbours; a token received for the first time is forwarded the next round to all neighbours but the sender
    (zero: the whole snapshot moves in its round)."""
    m = len(adjacency)
    moving: set[int] = set()
    j = 0
    while (start := 2**j) <= T:
        if zero:
            moving.add(start)
        else:
            seen = [{v} for v in range(m)]  # origins whose token agent v has
            out = [(v, w, v) for v in range(m) for w in range(m) if adjacency[v][w]]
            r = start
            while out and r <= T:
                moving.add(r)
                nxt = []
                for sender, receiver, origin in out:
                    if origin not in seen[receiver]:
                        seen[receiver].add(origin)
                        nxt += [(receiver, w, origin) for w in range(m) if adjacency[receiver][w] and w != sender]
                out, r = nxt, r + 1
        j += 1
    return len(moving)


@pytest.mark.parametrize(("graph", "m", "delay"), [("path", 5, "diameter"), ("star", 6, "diameter"),
                                                   ("cycle", 7, "diameter"), ("path", 5, "zero")])  # fmt: skip
def test_logrounds_counts_rounds_in_which_a_message_moves(graph: str, m: int, delay: str) -> None:
    """comm_rounds of coop_se_logrounds is the number of rounds in which a snapshot message crosses some edge, as
    counted by an explicit token flood (a snapshot floods for diameter rounds), not ⌊log2 T⌋ + 1 by formula."""
    for T in (3, 40, 300):
        sim = make("coop_se_logrounds", graph, m, T=T, snapshot_delay=delay)
        sim.advance(T)
        want = _token_rounds(sim.adjacency.to(torch.int64).tolist(), T, delay == "zero")
        assert sim.comm_rounds() == want, T
        assert sim.comm_phases() == math.floor(math.log2(T)) + 1
    if delay == "diameter":
        assert sim.comm_rounds() > sim.comm_phases()  # each snapshot needs diameter rounds of relay
