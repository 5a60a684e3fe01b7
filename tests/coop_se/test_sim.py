"""Card tests 4-7 and 9 (deterministic): delay semantics, no double counting, m=1 reduction, elimination time,
message accounting; plus the vectorised core == the plain-Python relay reference."""

from __future__ import annotations

import math

import networkx as nx
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
