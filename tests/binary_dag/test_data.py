"""Binary data: the MVB generator and fixture, the packaged pgmpy networks, the CSV and truth readers, the datamodules.

Card ``binary_dag``, tests 7 (offline networks), 8 (binarisation), 9 (CSV loader; its malformed inputs are the table
of ``test_bad_inputs.py``) and 10 (generator). Reference values are written here from the card, not taken from the
code under test.
"""

from __future__ import annotations

import gzip
import socket
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import installed

from datamodules.binary import bif
from datamodules.binary.datamodule import BinaryCSVDataModule, BinaryMVBDataModule, PgmpyBIFDataModule
from datamodules.binary.readers import BinaryDataError, find_cycle, read_binary_csv, read_truth
from datamodules.binary.synthetic import (
    INTERACTION5_EDGES,
    interaction5,
    mvb_conditionals,
    mvb_problem,
    random_dag,
    sample_mvb,
)
from zoo.launcher import user_error

needs_pgmpy = pytest.mark.skipif(not installed("pgmpy"), reason="needs pgmpy (the binary_dag extra)")

#: bnlearn's asia network (Lauritzen & Spiegelhalter 1988): 8 nodes, 8 edges.
ASIA_EDGES = {("asia", "tub"), ("tub", "either"), ("smoke", "lung"), ("smoke", "bronc"), ("lung", "either"),
              ("either", "xray"), ("either", "dysp"), ("bronc", "dysp")}  # fmt: skip


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + np.exp(-z))


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


def _is_dag(adj: np.ndarray) -> bool:
    """Reference acyclicity test: a nilpotent adjacency (A^d = 0)."""
    a = adj.astype(np.int64)
    power = np.linalg.matrix_power(a, adj.shape[0])
    return not power.any()


def _edges(adj: np.ndarray, names: list[str]) -> set[tuple[str, str]]:
    return {(names[i], names[j]) for i, j in zip(*np.nonzero(adj), strict=True)}


def _empirical(x: np.ndarray, j: int, pa: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """P̂(x_j = 1 | pa = c) and counts per key c = Σ_i x_{pa_i} 2^i (the documented bit order)."""
    keys = sum((x[:, p].astype(np.int64) << i) for i, p in enumerate(pa)) if pa else np.zeros(len(x), np.int64)
    counts = np.bincount(keys, minlength=2 ** len(pa))
    ones = np.bincount(keys, weights=x[:, j], minlength=2 ** len(pa))
    return ones / np.maximum(counts, 1), counts


def _mobius(table: np.ndarray, m: int) -> dict[tuple[int, ...], float]:
    """Coefficients θ_S of logit P = Σ_{S ⊆ pa} θ_S Π_{k∈S} x_k (Möbius inversion over the key bits)."""
    logit = _logit(table)
    out = {}
    for size in range(m + 1):
        for s in combinations(range(m), size):
            out[s] = sum((-1) ** (size - len(t)) * logit[sum(1 << i for i in t)]
                         for r in range(size + 1) for t in combinations(s, r))  # fmt: skip
    return out


# ---------------------------------------------------------------- generator (card test 10)


def test_interaction5_structure_and_conditionals() -> None:
    """The fixture's graph and every conditional of the card, at n = 200k (a swapped bit or formula fails)."""
    x, adj = interaction5(200_000, seed=0)
    assert x.dtype == np.uint8 and x.shape == (200_000, 5) and set(np.unique(x)) == {0, 1}
    assert adj.dtype == bool and _edges(adj, list("01234")) == {(str(a), str(b)) for a, b in INTERACTION5_EDGES}
    assert abs(x[:, 0].mean() - 0.3) <= 0.005  # card test 10
    assert abs(x[:, 1].mean() - 0.6) <= 0.01
    assert abs(x[x[:, 2] == 1, 3].mean() - 0.8) <= 0.01  # card test 10
    assert abs(x[x[:, 2] == 0, 3].mean() - 0.25) <= 0.01
    for a in (0, 1):
        for b in (0, 1):
            p2 = _sigmoid(-1.5 + 3.5 * a * b + 1.5 * (a == 0 and b == 0))
            assert abs(x[(x[:, 0] == a) & (x[:, 1] == b), 2].mean() - p2) <= 0.01, (a, b)
            p4 = _sigmoid(1.5 - 3 * a - 3 * b + 5 * a * b)
            assert abs(x[(x[:, 2] == a) & (x[:, 3] == b), 4].mean() - p4) <= 0.01, (a, b)
    # X3 and X4 given X2 are dependent (the 3 -> 4 edge): P(X4=1|X2=1,X3=1) - P(X4=1|X2=1,X3=0) = 0.622 - 0.182
    assert _sigmoid(0.5) - _sigmoid(-1.5) > 0.4


def test_same_seed_same_data_other_seed_other_data() -> None:
    for kwargs in ({"graph": "er"}, {"graph": "sf", "k": 2}, {"graph": "interaction5", "d": 5}):
        args = {"d": 10, "k": 1, "n": 500, "conditional": "interaction", "max_interaction_order": 2,
                "max_in_degree": 4, **kwargs}  # fmt: skip
        x1, a1 = mvb_problem(**args, seed=3)
        x2, a2 = mvb_problem(**args, seed=3)
        x3, _ = mvb_problem(**args, seed=4)
        assert np.array_equal(x1, x2) and np.array_equal(a1, a2), kwargs
        assert not np.array_equal(x1, x3), kwargs


def test_draw_order_graph_then_parameters_then_samples() -> None:
    """``mvb_problem`` is one default_rng(seed) consumed by the graph, the tables, then the samples."""
    rng = np.random.default_rng(7)
    adj = random_dag(8, "er", 2, 4, rng)
    cpts = mvb_conditionals(adj, "random_cpt", 2, rng)
    rng2 = np.random.default_rng(7)
    adj2 = random_dag(8, "er", 2, 4, rng2)
    x2 = sample_mvb(adj2, 300, "random_cpt", 2, rng2)
    xp, ap = mvb_problem(8, "er", 2, 300, "random_cpt", 2, 4, seed=7)
    assert np.array_equal(adj, ap) and np.array_equal(adj2, ap) and np.array_equal(x2, xp)
    assert len(cpts) == 8


@pytest.mark.parametrize("graph", ["er", "sf"])
def test_in_degree_at_most_the_cap_and_acyclic(graph: str) -> None:
    """Card test 10: every draw is a DAG with in-degree <= max_in_degree; the cap is active (uncapped draws exceed
    it)."""
    for seed in range(20):
        rng = np.random.default_rng(seed)
        for k, cap in ((2, 4), (1, 2)):
            adj = random_dag(20, graph, k, cap, rng)
            assert adj.sum(axis=0).max() <= cap and _is_dag(adj) and not adj.diagonal().any()
    if graph == "er":  # without the cap, ER-2 on 20 nodes has in-degrees above 4
        uncapped = [random_dag(20, "er", 2, 19, np.random.default_rng(s)).sum(axis=0).max() for s in range(20)]
        assert max(uncapped) > 4


def test_er_expected_edges_k_times_d() -> None:
    """ER-k: each π-ordered pair with probability 2k/(d−1), so k·d edges on average (10 here)."""
    rng = np.random.default_rng(0)
    counts = [random_dag(10, "er", 1, 9, rng).sum() for _ in range(300)]
    assert abs(np.mean(counts) - 10.0) <= 0.6


def test_sf_barabasi_albert_degrees() -> None:
    """SF-k: a star on the first k+1 arrivals, then k parents per arrival: in-degrees 0, 1 (k times), k (the rest)."""
    for k, d in ((1, 12), (2, 15), (3, 20)):
        for seed in range(5):
            adj = random_dag(d, "sf", k, 4, np.random.default_rng(seed))
            assert adj.sum() == k * (d - k) and _is_dag(adj)
            assert sorted(adj.sum(axis=0).tolist()) == sorted([0] + [1] * k + [k] * (d - k - 1))
    # preferential attachment: some node is a hub (out-degree well above the mean k)
    hubs = [random_dag(60, "sf", 1, 4, np.random.default_rng(s)).sum(axis=1).max() for s in range(5)]
    assert min(hubs) >= 5


def _fixture_adj() -> np.ndarray:
    """Node 3 <- {0, 1, 2}, node 4 <- {0, 1}, node 5 <- {2}; nodes 0, 1, 2 are roots."""
    adj = np.zeros((6, 6), dtype=bool)
    adj[[0, 1, 2], 3] = True
    adj[[0, 1], 4] = True
    adj[2, 5] = True
    return adj


def test_conditional_parameter_ranges() -> None:
    """The card's draws, read back from the tables by Möbius inversion of their logits.

    Roots U(0.2, 0.8); b ~ U(−1, 1); |β| ~ U(0.5, 2); |γ| ~ U(1.5, 3) for pairs (and triples at order 3); no
    interaction under ``logistic_linear`` or above ``max_interaction_order``; ``random_cpt`` entries U(0.1, 0.9).
    """
    adj = _fixture_adj()
    pa = {3: [0, 1, 2], 4: [0, 1], 5: [2]}
    signs = set()
    for seed in range(10):
        for conditional, order in (("interaction", 2), ("interaction", 3), ("logistic_linear", 2)):
            cpts = mvb_conditionals(adj, conditional, order, np.random.default_rng(seed))
            for root in (0, 1, 2):
                assert cpts[root].shape == (1,) and 0.2 <= cpts[root][0] <= 0.8
            for j, parents in pa.items():
                m = len(parents)
                assert cpts[j].shape == (2**m,)
                theta = _mobius(cpts[j], m)
                assert -1.0 <= theta[()] <= 1.0
                for s, value in theta.items():
                    if len(s) == 1:
                        assert 0.5 - 1e-9 <= abs(value) <= 2.0 + 1e-9
                        signs.add(np.sign(value))
                    elif len(s) >= 2 and conditional == "interaction" and len(s) <= order:
                        assert 1.5 - 1e-9 <= abs(value) <= 3.0 + 1e-9, (conditional, order, s)
                    elif len(s) >= 2:
                        assert abs(value) <= 1e-9, (conditional, order, s)
        cpts = mvb_conditionals(adj, "random_cpt", 2, np.random.default_rng(seed))
        assert all(0.1 <= p.min() and p.max() <= 0.9 for p in cpts[3:])
        assert all(0.2 <= cpts[r][0] <= 0.8 for r in (0, 1, 2))
    assert signs == {-1.0, 1.0}


@pytest.mark.parametrize("conditional", ["interaction", "random_cpt", "logistic_linear"])
def test_samples_follow_the_tables(conditional: str) -> None:
    """Ancestral samples reproduce each node's table under the documented key (bit i = i-th parent, ascending)."""
    adj = _fixture_adj()
    cpts = mvb_conditionals(adj, conditional, 3, np.random.default_rng(11))
    x = sample_mvb(adj, 60_000, conditional, 3, np.random.default_rng(11))
    for j in range(6):
        p_hat, counts = _empirical(x, j, np.flatnonzero(adj[:, j]).tolist())
        ok = counts >= 3000
        assert ok.any()
        assert np.abs(p_hat[ok] - cpts[j][ok]).max() <= 0.03, (conditional, j)


# ---------------------------------------------------------------- packaged networks (card tests 7, 8)


@needs_pgmpy
def test_asia_offline_from_the_packaged_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Card test 7: with HF_HUB_OFFLINE=1 and no socket, asia loads (8 nodes, 8 edges, bnlearn's edges) and a fixed
    seed samples identical data twice; the hub loader is never called."""
    import os

    import pgmpy.example_models

    assert os.environ["HF_HUB_OFFLINE"] == "1"

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(pgmpy.example_models, "load_model", refuse)
    x1, adj, names, card = bif.sample_network("asia", 400, seed=0, binarize=None)
    x2, _, _, _ = bif.sample_network("asia", 400, seed=0, binarize=None)
    x3, _, _, _ = bif.sample_network("asia", 400, seed=1, binarize=None)
    assert len(names) == 8 and adj.sum() == 8 and _edges(adj, names) == ASIA_EDGES
    assert card == (2,) * 8 and x1.dtype == np.uint8 and x1.shape == (400, 8)
    assert np.array_equal(x1, x2) and not np.array_equal(x1, x3)
    # state indices in the CPD's order: asia's states are (yes, no) with P(yes) = 0.01, so index 1 dominates
    assert x1[:, names.index("asia")].mean() > 0.95
    assert bif.NETWORKS["asia"] == (8, 8, True)


@needs_pgmpy
def test_sampling_keeps_numpy_global_state() -> None:
    """pgmpy's forward_sample seeds numpy's global generator; the caller's stream is restored."""
    outer = np.random.get_state()
    try:
        np.random.seed(123)
        expected = np.random.random(3)
        np.random.seed(123)
        bif.sample_network("asia", 10, seed=5)
        assert np.array_equal(np.random.random(3), expected)
    finally:
        np.random.set_state(outer)


@needs_pgmpy
def test_native_states_follow_the_cpd_order() -> None:
    """sachs roots: the frequency of state index s matches the CPD's s-th probability (a name-sorted map fails)."""
    from importlib import metadata

    if not metadata.version("pgmpy").startswith("1."):
        pytest.skip("recorded for pgmpy 1.x")
    model = bif.packaged_network("sachs")
    x, adj, names, card = bif.sample_network("sachs", 3000, seed=0, binarize=None)
    assert (len(names), int(adj.sum())) == bif.NETWORKS["sachs"][:2] and card == (3,) * 11
    roots = [names[j] for j in np.flatnonzero(adj.sum(axis=0) == 0)]
    assert roots
    for v in roots:
        probs = np.asarray(model.get_cpds(v).values, dtype=float).ravel()
        freq = np.bincount(x[:, names.index(v)], minlength=3) / len(x)
        assert np.abs(freq - probs).max() <= 0.04, (v, freq, probs)


@needs_pgmpy
def test_binarisation_of_sachs_and_binary_networks_untouched() -> None:
    """Card test 8: binarised sachs is 0/1 by the card's rules; asia (binary) is unchanged by both rules."""
    native, adj, _, card = bif.sample_network("sachs", 300, seed=2, binarize=None)
    first, adj1, _, card1 = bif.sample_network("sachs", 300, seed=2, binarize="first_vs_rest")
    median, _, _, _ = bif.sample_network("sachs", 300, seed=2, binarize="median")
    assert set(np.unique(first)) <= {0, 1} and set(np.unique(median)) <= {0, 1} and card1 == (2,) * 11
    assert np.array_equal(first, (native != 0).astype(np.uint8))  # x = 1 iff state != state 0
    assert np.array_equal(median, (native >= 2).astype(np.uint8))  # card 3: ceil(3/2) = 2
    assert np.array_equal(adj, adj1) and card == (3,) * 11  # the truth stays the network's DAG
    asia = bif.sample_network("asia", 300, seed=2, binarize=None)[0]
    for rule in ("first_vs_rest", "median"):
        assert np.array_equal(bif.sample_network("asia", 300, seed=2, binarize=rule)[0], asia)


def test_binarisation_rules_by_cardinality() -> None:
    """Card test 8: the median rule at card 5 maps {0,1,2} -> 0 and {3,4} -> 1; first_vs_rest is index != 0."""
    idx = np.array([[s, s % 4, s % 3, s % 2] for s in range(5)], dtype=np.uint8)
    median, card = bif.binarize_states(idx, (5, 4, 3, 2), "median")
    assert median[:, 0].tolist() == [0, 0, 0, 1, 1] and card == (2, 2, 2, 2)
    assert median[:, 1].tolist() == [0, 0, 1, 1, 0]  # card 4: {0,1} -> 0, {2,3} -> 1
    assert median[:, 2].tolist() == [0, 0, 1, 0, 0]  # card 3: {0,1} -> 0, {2} -> 1
    assert median[:, 3].tolist() == idx[:, 3].tolist()  # binary: unchanged
    first, _ = bif.binarize_states(idx, (5, 4, 3, 2), "first_vs_rest")
    assert np.array_equal(first, (idx != 0).astype(np.uint8))
    same, card_same = bif.binarize_states(idx, (5, 4, 3, 2), None)
    assert same is idx and card_same == (5, 4, 3, 2)


@needs_pgmpy
def test_missing_network_file_names_version_and_pin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Card test 7: a wheel without the file (and without the deprecated fallback) raises the one specified line;
    with the fallback present, the network still loads."""
    from importlib import metadata

    import pgmpy.utils

    monkeypatch.setattr(bif, "example_file", lambda name: tmp_path / f"{name}.bif.gz")
    if hasattr(pgmpy.utils, "get_example_model"):  # pgmpy < 1.3: the fallback reads the same packaged network
        assert len(bif.packaged_network("cancer").edges()) == 4

    def gone(name: str) -> None:
        raise ValueError(f"Unknown model name: {name}")

    monkeypatch.setattr(pgmpy.utils, "get_example_model", gone, raising=False)
    line = (f"network 'asia': utils/example_models/asia.bif.gz is not in the installed pgmpy "
            f"{metadata.version('pgmpy')}; the zoo reads the bnlearn networks shipped in pgmpy's wheel, offline: "
            "install pgmpy>=1.0,<1.3")  # fmt: skip
    with pytest.raises(BinaryDataError) as info:
        PgmpyBIFDataModule(name="asia", n=10)
    assert str(info.value) == line
    assert user_error(info.value) is info.value


# ---------------------------------------------------------------- CSV and truth readers (card test 9)


def test_csv_tokens_mapping_and_constant_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0/1 columns kept, two tokens mapped by sorted order (numeric when numbers), the mapping said in one line, a
    constant column only warned about."""
    rows = [("1", " yes", "10", "0.0", "1"), ("0", "no", "9", "1.0", "1")] * 6
    path = tmp_path / "data.csv"
    path.write_text("a,smoker,dose,f,const\n" + "".join(",".join(r) + "\n" for r in rows))
    x, names, mapping = read_binary_csv(str(path))
    assert names == ["a", "smoker", "dose", "f", "const"] and x.dtype == np.uint8
    assert x[:2].tolist() == [[1, 1, 1, 0, 1], [0, 0, 0, 1, 1]]
    assert mapping["smoker"] == {"no": 0, "yes": 1} and mapping["dose"] == {"9": 0, "10": 1}  # 9 < 10 numerically
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"zoo: {path}: warning: column 'const' is constant ('1' in all 12 rows); it carries no information about edges",
        f"zoo: {path}: two-token columns mapped by sorted order: smoker no=0 yes=1; dose 9=0 10=1",
    ]


def test_csv_datamodule_with_edge_list_truth(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=(40, 3))
    (tmp_path / "d.csv").write_text("u,v,w\n" + "".join(f"{a},{b},{c}\n" for a, b, c in x))
    (tmp_path / "t.csv").write_text("source,target\nw,u\nu,v\n\n")
    dm = BinaryCSVDataModule(str(tmp_path / "d.csv"), truth=str(tmp_path / "t.csv"))
    assert np.array_equal(dm.x, x.astype(np.uint8)) and dm.names == ["u", "v", "w"] and dm.n_vars == 3
    assert _edges(dm.truth, dm.names) == {("w", "u"), ("u", "v")} and dm.binary and dm.card == (2, 2, 2)


#: A 3-variable BIF network: a -> b, a -> c, b -> c.
SMALL_BIF = """network small {
}
variable a {
  type discrete [ 2 ] { no, yes };
}
variable b {
  type discrete [ 2 ] { no, yes };
}
variable c {
  type discrete [ 2 ] { no, yes };
}
probability ( a ) {
  table 0.3, 0.7;
}
probability ( b | a ) {
  (no) 0.9, 0.1;
  (yes) 0.2, 0.8;
}
probability ( c | a, b ) {
  (no, no) 0.5, 0.5;
  (yes, no) 0.4, 0.6;
  (no, yes) 0.3, 0.7;
  (yes, yes) 0.1, 0.9;
}
"""


@needs_pgmpy
def test_bif_truth_in_the_data_column_order(tmp_path: Path) -> None:
    """A .bif.gz and a .bif truth give the network's DAG over the data's columns, whatever their order."""
    (tmp_path / "small.bif").write_text(SMALL_BIF)
    (tmp_path / "small.bif.gz").write_bytes(gzip.compress(SMALL_BIF.encode()))
    names = ["c", "a", "b"]
    for name in ("small.bif.gz", "small.bif"):
        assert _edges(read_truth(str(tmp_path / name), names), names) == {("a", "b"), ("a", "c"), ("b", "c")}


def test_find_cycle() -> None:
    adj = np.zeros((4, 4), dtype=bool)
    adj[0, 1] = adj[1, 2] = adj[2, 3] = True
    assert find_cycle(adj) is None
    adj[3, 1] = True
    assert find_cycle(adj) == [1, 2, 3, 1]


# ---------------------------------------------------------------- datamodules


def test_mvb_datamodule_one_full_batch_and_link_source() -> None:
    """Attributes exist after ``__init__`` (before setup); one float64 full batch per epoch; the generator's data."""
    dm = BinaryMVBDataModule(d=7, graph="er", k=2, n=300, seed=5)
    x, adj = mvb_problem(7, "er", 2, 300, "interaction", 2, 4, 5)
    assert dm.n_vars == 7 and dm.binary and dm.card == (2,) * 7 and dm.names == [f"X{j}" for j in range(7)]
    assert np.array_equal(dm.x, x) and np.array_equal(dm.truth, adj)
    batches = list(dm.train_dataloader())
    assert len(batches) == 1 and set(batches[0]) == {"x"}
    assert batches[0]["x"].dtype == torch.float64 and torch.equal(batches[0]["x"], torch.from_numpy(x).double())
    problem = dm.problem()
    assert set(problem) == {"x", "names", "card", "truth"} and problem["x"] is dm.x
    assert all(isinstance(v, int | str | type(None)) for v in dm.hparams.values())  # primitives (weights_only)


def test_mvb_datamodule_fixture() -> None:
    dm = BinaryMVBDataModule(d=5, graph="interaction5", n=200, seed=1)
    x, adj = interaction5(200, 1)
    assert np.array_equal(dm.x, x) and np.array_equal(dm.truth, adj)


@needs_pgmpy
def test_pgmpy_datamodule_native_and_binarised() -> None:
    dm = PgmpyBIFDataModule(name="sachs", n=100, seed=0, binarize=None)
    assert dm.n_vars == 11 and not dm.binary and dm.card == (3,) * 11 and dm.x.max() == 2 and dm.truth.sum() == 17
    dm2 = PgmpyBIFDataModule(name="sachs", n=100, seed=0)
    assert dm2.binary and np.array_equal(dm2.x, (dm.x != 0).astype(np.uint8)) and dm2.names == dm.names
    assert next(iter(dm2.train_dataloader()))["x"].shape == (100, 11)
