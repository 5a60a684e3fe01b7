"""Card tests 4-7 and 9 (deterministic): delay semantics, no double counting, m=1 reduction, elimination time,
message accounting; plus the vectorised core == the plain-Python relay reference; and (issue #22) coop_se_logsize
(aggregated log-size messages on a spanning tree), flooding's measured per-edge load and coop_se_logrounds' measured
rounds with a message, each against an independent message-level count."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

from coop_se.helpers import make
from zoo.coop_se.reference import reference_coop_se
from zoo.coop_se.sim import message_bits


def test_delay_semantics_scripted_path() -> None:
    """Test 4: on a 4-path with a scripted schedule, the knowledge at every round is Σ_u cum_u[t−1−D[v,u]] (D
    computed by hand), and agent 0's round-s sample is first counted by agents 0, 1, 2, 3 at s+1, s+2, s+3, s+4."""
    m, T, s_mark = 4, 30, 5
    sim = make("coop_se", "path", m, T=T, means=[1.0, 0.0])  # deterministic rewards: arm 0 pays 1, arm 1 pays 0
    D = [[abs(v - u) for u in range(m)] for v in range(m)]
    schedule = [[(t * (v + 2) + v) % 2 for v in range(m)] for t in range(1, T + 1)]
    schedule[s_mark - 1][0] = 1
    cum_n = [[[0] * 2 for _ in range(m)]]  # cum_n[tau][u][a] over tau = 0..T
    first_seen = {}
    for t in range(1, T + 1):
        kn = sim.knowledge()[0]
        for v in range(m):
            for a in range(2):
                want_n = sum(cum_n[max(t - 1 - D[v][u], 0)][u][a] for u in range(m))
                want_s = want_n if a == 0 else 0  # arm 0 pays 1 per pull
                assert kn[v, a].item() == want_n and kn[v, 2 + a].item() == want_s, (t, v, a)
        sim.step(torch.tensor([schedule[t - 1]]))
        cum_n.append([[cum_n[-1][u][a] + (schedule[t - 1][u] == a) for a in range(2)] for u in range(m)])
    # agent 0's sample of round s_mark: replay with only agent 0 pulling arm 1, once
    sim = make("coop_se", "path", m, T=T, means=[1.0, 0.0])
    for t in range(1, T + 1):
        kn = sim.knowledge()[0]
        for v in range(m):
            if kn[v, 1] > 0 and v not in first_seen:
                first_seen[v] = t
        sim.step(torch.tensor([[1 if (t == s_mark and v == 0) else 0 for v in range(m)]]))
    assert first_seen == {0: s_mark + 1, 1: s_mark + 2, 2: s_mark + 3, 3: s_mark + 4}


@pytest.mark.parametrize(("graph", "m"), [("complete", 6), ("cycle", 7), ("cycle", 6)])
def test_no_double_counting(graph: str, m: int) -> None:
    """Test 5: with many paths between agents, Σ_a n_v[a] at round t is exactly Σ_u max(t−1−D[v,u], 0)."""
    T = 40
    sim = make("coop_se", graph, m, T=T, R=2)
    if graph == "complete":
        D = [[int(u != v) for u in range(m)] for v in range(m)]
    else:
        D = [[min(abs(u - v), m - abs(u - v)) for u in range(m)] for v in range(m)]
    for t in range(1, T + 1):
        total = sim.knowledge()[..., : sim.A].sum(-1)
        want = torch.tensor([sum(max(t - 1 - D[v][u], 0) for u in range(m)) for v in range(m)], dtype=total.dtype)
        assert torch.equal(total, want.expand_as(total)), t
        sim.step()


def test_m1_reduces_to_se_bit_identically() -> None:
    """Test 6: Coop-SE on one agent (flooding path) equals single-agent SE (own-samples path), bit for bit."""
    a, b = make("coop_se", "path", 1, T=3000, R=3, seed=7), make("se", "path", 1, T=3000, R=3, seed=7)
    for _ in range(3000):
        assert torch.equal(a.step(), b.step())
    assert torch.equal(a.regret, b.regret) and torch.equal(a.elim_round, b.elim_round)
    assert torch.equal(a.ring[:, 3000 % a.ring.shape[1]], b.ring[:, 3000 % b.ring.shape[1]])


def test_elimination_time_deterministic_arms() -> None:
    """Test 7: μ = [1, 0, 0], m = 1: arm a > 0 is eliminated at the first round where rad(n_a) < 1 − rad(n_0),
    with the round-robin counts (computed here from the formula)."""
    T, c = 2000, 2.0
    sim = make("se", "path", 1, T=T, means=[1.0, 0.0, 0.0], c=c)
    sim.advance(T)
    L = math.log(3 * T)

    def rad(n: int) -> float:
        return math.sqrt(c * L / n) if n else math.inf

    counts, active, expected = [0, 0, 0], [True, True, True], {}
    for t in range(1, T + 1):
        lcb = [1.0 - rad(counts[0]), -rad(counts[1]), -rad(counts[2])]  # rad(0) = inf: lcb = -inf
        lstar = max(lcb[a] for a in range(3) if active[a])
        for a in (1, 2):
            if active[a] and rad(counts[a]) < lstar:
                active[a], expected[a] = False, t
        pick = min((a for a in range(3) if active[a]), key=lambda a: (counts[a], a))
        counts[pick] += 1
    got = sim.elim_round[0, 0].tolist()
    assert got == [0, expected[1], expected[2]]
    # by hand: equal counts n eliminate once 2·sqrt(2L/n) < 1, i.e. n > 8L (about 3·8L rounds)
    assert 3 * math.floor(8 * L) <= expected[1] <= 3 * (math.floor(8 * L) + 1) + 1


@pytest.mark.parametrize(("graph", "m", "per_sample"), [("path", 6, 5), ("star", 6, 5), ("complete", 5, 16)])
def test_message_accounting(graph: str, m: int, per_sample: int) -> None:
    """Test 9: flooding sends m−1 messages per sample on a tree and (m−1)² on K_m (counted message by message in the
    relay reference); the core's closed-form counts agree; every message respects the C5 bit bound."""
    T = 60
    sim = make("coop_se", graph, m, T=T)
    sim.advance(T)
    adj = sim.adjacency.to(torch.int64).tolist()
    ref = reference_coop_se(adj, sim.means.tolist(), T, count_round=2)
    assert set(ref["per_sample"].values()) == {per_sample} and len(ref["per_sample"]) == m
    assert sim.messages_per_agent().tolist() == [float(x) for x in ref["messages"]]
    bound = math.ceil(math.log2(m)) + math.ceil(math.log2(T)) + math.ceil(math.log2(5)) + 1
    assert sim.bits_per_message() == message_bits(m, T, 5, False) == bound


@pytest.mark.parametrize("bandwidth", [1, 2])
def test_congest_respects_bandwidth(bandwidth: int) -> None:
    """Test 9 (congest): no directed edge carries more than ``bandwidth`` messages in any round, and the backlog
    makes knowledge lag behind flooding."""
    T = 300
    sim = make("coop_se_congest", "path", 5, T=T, R=2, bandwidth=bandwidth)
    flood = make("coop_se", "path", 5, T=T, R=2)
    peak = torch.zeros(5, 2, dtype=torch.long)  # per agent: most samples arrived in one round from (left, right)
    seen = sim._seen.clone()  # (R, m, origin, round) delivered-sample marks
    for _ in range(T):  # read off which samples arrived, independently of the queues' own peak bookkeeping
        sim.step()
        new = sim._seen & ~seen
        seen = sim._seen.clone()
        for v in range(5):  # on a path, a sample from origin u < v can only arrive over the left edge
            left, right = new[:, v, :v].sum((-1, -2)), new[:, v, v + 1 :].sum((-1, -2))
            peak[v] = torch.maximum(peak[v], torch.stack([left.max(), right.max()]))
    assert int(peak.max()) == bandwidth  # never more than `bandwidth` on an edge, and the budget binds
    assert peak[0, 0] == 0 and peak[4, 1] == 0  # the path's ends have no outer neighbour
    flood.advance(T)
    assert int(sim.edge_peak) == bandwidth
    assert float(sim.knowledge()[..., :5].sum()) < float(flood.knowledge()[..., :5].sum())


def test_congest_unlimited_bandwidth_equals_flooding() -> None:
    """With bandwidth above the traffic, the per-edge FIFO simulation plays exactly the flooding game."""
    T = 200
    a, b = make("coop_se_congest", "cycle", 5, T=T, R=2, bandwidth=100), make("coop_se", "cycle", 5, T=T, R=2)
    for _ in range(T):
        assert torch.equal(a.knowledge(), b.knowledge())
        assert torch.equal(a.step(), b.step())


@pytest.mark.parametrize(("graph", "m", "seed"), [("tree", 7, 0), ("tree", 7, 3), ("cycle", 7, 1), ("complete", 5, 2)])
def test_core_equals_plain_loop_reference(graph: str, m: int, seed: int) -> None:
    """The vectorised core (distance gather over a ring buffer) and the message-by-message relay reference pick the
    same arm for every agent and round and end with the same regret and knowledge, on random trees and on graphs with
    several paths (where the reference drops the duplicate copies a sample arrives in)."""
    import numpy as np

    from datamodules.decision.bandit_datamodule import BanditGraphDataModule
    from zoo.coop_se.sim import CoopBanditSim

    T = 600
    dm = BanditGraphDataModule(graph=graph, m=m, graph_seed=seed, T=T, n_replicas=2, seed=seed)
    assert nx.is_tree(dm.graph) == (graph == "tree")
    sim = CoopBanditSim("coop_se", 2, m, 5)
    sim.attach(**dm.problem())
    pulls = [sim.step() for _ in range(T)]
    for r in range(2):
        ref = reference_coop_se(dm.adjacency.astype(int).tolist(), dm.means, T, seed=seed, replica=r)
        assert [p[r].tolist() for p in pulls] == ref["pulls"]
        assert sim.regret[r].tolist() == ref["regret"]
        np.testing.assert_array_equal(sim.knowledge()[r, :, :5].numpy(), np.array(ref["known"]))


@pytest.mark.parametrize(
    "algorithm", ["coop_se_congest", "coop_se_logrounds", "coop_se_logsize", "consensus_ucb", "flood_ucb"]
)
def test_state_dict_round_trip_resumes_exactly(algorithm: str, tmp_path) -> None:
    """Every variant's state (ring, snapshots, consensus estimates, congest FIFO queues) survives a weights_only
    save/load into a fresh, unattached simulator, and the resumed run equals the uninterrupted one."""
    from zoo.coop_se.sim import CoopBanditSim

    T = 200
    straight, half = make(algorithm, "cycle", 5, T=T, R=2), make(algorithm, "cycle", 5, T=T, R=2)
    straight.advance(T)
    half.advance(T // 2)
    torch.save(half.state_dict(), tmp_path / "s.pt")
    fresh = CoopBanditSim(algorithm, 2, 5, 5)
    fresh.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    assert int(fresh.t) == T // 2 and fresh.T == T
    fresh.advance(T)
    for name, buf in straight.state_dict().items():
        if isinstance(buf, torch.Tensor):
            assert torch.equal(buf, fresh.state_dict()[name]), name


@pytest.mark.parametrize("own_delay", [1, 3])
def test_own_delay_option_shifts_every_sample(own_delay: int) -> None:
    """own_delay = k: at round t agent v knows Σ_u cum_u[t − k − D[v,u]] (k = 1 is the card's convention)."""
    m, T = 5, 40
    sim = make("coop_se", "path", m, T=T, R=2, own_delay=own_delay)
    assert sim.ring.shape[1] == own_delay + 1 + (m - 1)
    cum = [torch.zeros(2, m, 10, dtype=torch.float64)]
    for t in range(1, T + 1):
        want = torch.stack(
            [sum(cum[max(t - own_delay - abs(v - u), 0)][:, u] for u in range(m)) for v in range(m)], dim=1
        )
        assert torch.equal(sim.knowledge(), want), t
        sim.step()
        cum.append(sim.ring[:, t % sim.ring.shape[1]].clone())


def test_round_robin_index_selection() -> None:
    """selection=round_robin_index cycles through the active arms by index after the last pull."""
    sim = make("se", "path", 1, T=12, means=[0.5, 0.5, 0.5, 0.5], selection="round_robin_index")
    assert [int(sim.step()[0, 0]) for _ in range(9)] == [0, 1, 2, 3, 0, 1, 2, 3, 0]


@pytest.mark.parametrize(("delay", "extra"), [("zero", 0), ("diameter", 3)])
def test_logrounds_snapshot_timing(delay: str, extra: int) -> None:
    """At round t an agent knows its own samples through t-1 plus every other agent's through the last snapshot round
    2^j that is usable, 2^j <= t - 1 - extra (extra = 0, or the diameter 3 of a 4-path)."""
    m, T = 4, 70
    sim = make("coop_se_logrounds", "path", m, T=T, R=2, snapshot_delay=delay)
    for t in range(1, T + 1):
        usable = t - 1 - extra
        others = (m - 1) * 2 ** int(math.floor(math.log2(usable))) if usable >= 1 else 0
        assert torch.equal(sim.knowledge()[..., :5].sum(-1), torch.full((2, m), float(t - 1 + others)))
        sim.step()


def test_consensus_ucb_update_and_index() -> None:
    """consensus_ucb: (n̂, ŝ) <- P (n̂ + ξ_t), P = I - L_G/(d_max + 1) from networkx's Laplacian; the pull maximises
    ŝ/n̂ + sqrt(2 log t/(m n̂)), unpulled (n̂ = 0) arms first."""
    import numpy as np

    m, A = 5, 5
    sim = make("consensus_ucb", "star", m, T=50, R=1)
    graph = nx.star_graph(m - 1)
    lap = nx.laplacian_matrix(graph, nodelist=range(m)).toarray().astype(float)
    P = np.eye(m) - lap / (lap.diagonal().max() + 1.0)
    n = np.zeros((m, A))
    s = np.zeros((m, A))
    for t in range(1, 31):
        known = sim.knowledge()[0].numpy()
        np.testing.assert_allclose(known[:, :A], n, atol=1e-12)
        np.testing.assert_allclose(known[:, A:], s, atol=1e-12)
        with np.errstate(divide="ignore", invalid="ignore"):
            index = np.where(n > 0, s / n + np.sqrt(2 * math.log(t) / (m * n)), np.inf)
        pull = sim.step()[0].numpy()
        assert (pull == index.argmax(-1)).all(), t
        reward_sum = (
            sim.ring[0, t % sim.ring.shape[1], :, A:].numpy() - sim.ring[0, (t - 1) % sim.ring.shape[1], :, A:].numpy()
        )
        xi = np.eye(A)[pull]
        n, s = P @ (n + xi), P @ (s + reward_sum)


def test_flood_ucb_index() -> None:
    """flood_ucb pulls argmax of mean + sqrt(c·log(mAT)/n) on the flooded knowledge, unpulled arms first."""
    import numpy as np

    from zoo.coop_se.sim import decide_ucb

    kn = np.array([[[0, 4, 1, 0, 0, 3.0, 0.5, 0, 0, 0], [2, 2, 2, 2, 2, 1.8, 0.2, 1.0, 1.0, 1.0]]])
    cL = 2.0 * math.log(4 * 5 * 100)
    assert decide_ucb(kn, cL).tolist() == [[0, 0]]  # agent 0: arm 0 unpulled; agent 1: means 0.9 vs 0.1 / 0.5
    kn[0, 0, 0] = 8.0
    kn[0, 0, 5] = 1.0  # arm 0 mean 0.125 on 8; arm 3 still unpulled
    assert decide_ucb(kn, cL)[0, 0] == 3
    kn[0, 0, [3, 4]] = 1.0
    kn[0, 0, [8, 9]] = 0.0
    n, s = kn[0, 0, :5], kn[0, 0, 5:]
    assert decide_ucb(kn, cL)[0, 0] == int(np.argmax(s / n + np.sqrt(cL / n)))


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
