"""Card test 10 and the datamodule: graph and arm loaders, generated graphs, validation errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from datamodules.decision.bandit_datamodule import BanditGraphDataModule, ChunkStarts


def _csv(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_disconnected_edge_list_raises_with_components(tmp_path: Path) -> None:
    path = _csv(tmp_path / "g.csv", "source,target\n0,1\n1,2\n3,4\n")
    with pytest.raises(ValueError, match=r"disconnected: 2 components of sizes \[3, 2\]"):
        BanditGraphDataModule(graph="file", graph_path=path)


def test_asymmetric_adjacency_raises(tmp_path: Path) -> None:
    adj = np.array([[0, 1, 0], [0, 0, 1], [0, 1, 0]])
    np.save(tmp_path / "a.npy", adj)
    with pytest.raises(ValueError, match=r"a\.npy: adjacency matrix is not symmetric"):
        BanditGraphDataModule(graph="file", graph_path=str(tmp_path / "a.npy"))


def test_npy_adjacency_self_loops_dropped_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adj = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 0]])
    np.save(tmp_path / "a.npy", adj)
    dm = BanditGraphDataModule(graph="file", graph_path=str(tmp_path / "a.npy"))
    assert "a.npy: dropped the self-loop(s) at node(s) [0]" in capsys.readouterr().err
    assert dm.n_agents == 3 and dm.diameter == 2 and dm.degrees.tolist() == [1, 2, 1]


@pytest.mark.parametrize("bad", [[0.5, 1.2], [-0.1, 0.5]])
def test_bernoulli_mean_outside_unit_interval_raises(bad: list[float], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Bernoulli means must lie in \[0, 1\]"):
        BanditGraphDataModule(means=bad)
    path = _csv(tmp_path / "arms.csv", "mean\n" + "\n".join(str(x) for x in bad) + "\n")
    with pytest.raises(ValueError, match=r"arms\.csv: Bernoulli means"):
        BanditGraphDataModule(arms="file", arms_path=path)


def test_arms_csv_formats(tmp_path: Path) -> None:
    dm = BanditGraphDataModule(arms="file", arms_path=_csv(tmp_path / "a.csv", "mean,std\n0.5,1.0\n0.2,2.0\n0.5,0\n"))
    assert dm.arms_kind == "gaussian" and dm.stds == [1.0, 2.0, 0.0] and dm.gaps == [0.0, 0.3, 0.0]
    with pytest.raises(ValueError, match="A >= 2"):
        BanditGraphDataModule(arms="file", arms_path=_csv(tmp_path / "one.csv", "mean\n0.5\n"))
    with pytest.raises(ValueError, match=r"expected the column 'mean'.*found mu"):
        BanditGraphDataModule(arms="file", arms_path=_csv(tmp_path / "w.csv", "mu\n0.5\n0.4\n"))


def test_string_labels_map_deterministically(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With node_ids=map, string node ids map to 0..m-1 in sorted order, whatever the edge order; the mapping is
    said on stderr."""
    a = _csv(tmp_path / "a.csv", "source,target\ncarol,alice\nalice,bob\ndave,carol\n")
    b = _csv(tmp_path / "b.csv", "source,target\ndave,carol\nbob,alice\nalice,carol\n")
    da = BanditGraphDataModule(graph="file", graph_path=a, m=4, node_ids="map")
    assert re.search(r"zoo: .*a\.csv: node ids mapped .*'alice': 0.*'dave': 3", capsys.readouterr().err)
    db = BanditGraphDataModule(graph="file", graph_path=b, m=4, node_ids="map")
    assert "node ids mapped" in capsys.readouterr().err
    assert sorted(da.graph.edges) == sorted(db.graph.edges) == [(0, 1), (0, 2), (2, 3)]
    np.testing.assert_array_equal(da.D, db.D)


@pytest.mark.parametrize(
    ("rows", "bad", "line"),
    [("0,1\n1,x3\n2,0\n", "x3", 3), ("1,2\n2,3\n", "3", 3), ("0,1\n1,-2\n", "-2", 3), ("0,1\n1,2.0\n", "2.0", 3),
     ("0,1\n1,\u0662\n", "\u0662", 3)],
    ids=["mixed", "one_based", "negative", "float", "non_ascii_digit"],
)  # fmt: skip
def test_node_ids_that_would_be_relabelled_are_an_error(tmp_path: Path, rows: str, bad: str, line: int) -> None:
    """A mixed, 1-based, negative, float or non-ASCII-digit id (int('٢') is 2) is not silently relabelled (issue #19:
    an `x3` trained a 4-node graph while the config said m 8): the error names the file, the line and the id, and
    offers node_ids=map."""
    path = _csv(tmp_path / "g.csv", "source,target\n" + rows)
    with pytest.raises(ValueError, match=rf"g\.csv: line {line}: node id '{re.escape(bad)}'.*node_ids=map"):
        BanditGraphDataModule(graph="file", graph_path=path)


def test_file_graph_that_overrides_m_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv(tmp_path / "g.csv", "source,target\n0,1\n1,2\n2,3\n")
    assert BanditGraphDataModule(graph="file", graph_path=path, m=8).n_agents == 4
    assert "holds 4 agents; --data.init_args.m=8 does not apply" in capsys.readouterr().err
    assert BanditGraphDataModule(graph="file", graph_path=path, m=4).n_agents == 4
    assert capsys.readouterr().err == ""


def test_bad_header_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected the header 'source,target'"):
        BanditGraphDataModule(graph="file", graph_path=_csv(tmp_path / "g.csv", "src,dst\n0,1\n"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        BanditGraphDataModule(graph="file", graph_path=str(tmp_path / "missing.csv"))


@pytest.mark.parametrize(("row", "error"), [("2", "expected 2 fields"), ("1,", "empty source or target"),
                                            (",3", "empty source"), ("1,2,3", "expected 2 fields")])  # fmt: skip
def test_edge_row_with_a_missing_or_extra_field_raises(row: str, error: str, tmp_path: Path) -> None:
    """A row without a source or a target, or with a field too many (formerly dropped silently), names the file and
    line (never an empty-string node)."""
    path = _csv(tmp_path / "g.csv", f"source,target\n0,1\n{row}\n")
    with pytest.raises(ValueError, match=rf"g\.csv: line 3: {error}"):
        BanditGraphDataModule(graph="file", graph_path=path)


def test_unreadable_npy_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.npy").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"a\.npy: not a readable \.npy"):
        BanditGraphDataModule(graph="file", graph_path=str(tmp_path / "a.npy"))


@pytest.mark.parametrize(("graph", "m", "diameter", "edges"), [("path", 8, 7, 7), ("cycle", 8, 4, 8), ("star", 6, 2, 5),
                         ("complete", 5, 1, 10), ("grid", 16, 6, 24), ("tree", 9, None, 8)])  # fmt: skip
def test_generated_graphs(graph: str, m: int, diameter: int | None, edges: int) -> None:
    dm = BanditGraphDataModule(graph=graph, m=m)
    assert dm.n_agents == m and dm.graph.number_of_edges() == edges
    if diameter is not None:
        assert dm.diameter == diameter
    assert (dm.D == dm.D.T).all() and (np.diag(dm.D) == 0).all()


def test_erdos_renyi_resamples_until_connected() -> None:
    import networkx as nx

    dm = BanditGraphDataModule(graph="erdos_renyi", m=20, p=0.12, graph_seed=0)
    assert nx.is_connected(dm.graph)
    again = BanditGraphDataModule(graph="erdos_renyi", m=20, p=0.12, graph_seed=0)
    assert sorted(dm.graph.edges) == sorted(again.graph.edges)


def test_chunk_starts() -> None:
    assert [int(x) for x in ChunkStarts(2500, 1000)] == [1, 1001, 2001] and len(ChunkStarts(2500, 1000)) == 3


def test_duplicate_and_reversed_edges_are_merged_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches an edge listed twice or both ways merged without a word (the graph is undirected and simple)."""
    dm = BanditGraphDataModule(graph="file", graph_path=_csv(tmp_path / "g.csv", "source,target\n0,1\n1,0\n1,2\n1,2\n"),
                               m=3)  # fmt: skip
    assert dm.graph.number_of_edges() == 2
    assert "g.csv: 2 duplicate edge(s) (listed twice or both ways) merged" in capsys.readouterr().err


def test_extra_columns_are_said_and_a_bom_is_no_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches a weight column dropped without a word, and a UTF-8 BOM read into the first header name."""
    path = tmp_path / "g.csv"
    path.write_bytes("\ufeffsource,target,weight\n0,1,5\n1,2,0.5\n".encode())
    dm = BanditGraphDataModule(graph="file", graph_path=str(path), m=3)
    assert dm.graph.number_of_edges() == 2
    assert "g.csv: column(s) weight ignored" in capsys.readouterr().err


def test_arms_csv_rows_are_checked_line_by_line(tmp_path: Path) -> None:
    """Catches a row's extra field dropped (csv.DictReader's restkey), a missing std as a bare TypeError, '1_0' read as
    10, and a header with a space after the comma failing with a KeyError traceback."""
    for text, error in (("mean\n0.5\n0.4,0.1\n", r"line 3: expected 1 field\(s\) \(mean\), found 2"),
                        ("mean,std\n0.5,1\n0.4\n", r"line 3: expected 2 field\(s\) \(mean,std\), found 1"),
                        ("mean\n0.5\n1_0\n", r"line 3: mean '1_0' is not a number"),
                        ("mean\n0.5\nhigh\n", r"line 3: mean 'high' is not a number")):  # fmt: skip
        with pytest.raises(ValueError, match=r"arms\.csv: " + error):
            BanditGraphDataModule(arms="file", arms_path=_csv(tmp_path / "arms.csv", text))
    dm = BanditGraphDataModule(arms="file", arms_path=_csv(tmp_path / "ok.csv", "mean, std\n0.5, 1\n\n0.2, 2\n"),
                               means=None)  # fmt: skip
    assert dm.arms_kind == "gaussian" and dm.means == [0.5, 0.2] and dm.stds == [1.0, 2.0]
    with pytest.raises(FileNotFoundError, match="arms_path='nope.csv': no such file"):
        BanditGraphDataModule(arms="file", arms_path="nope.csv")


def test_config_arms_that_do_not_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches stds silently ignored on Bernoulli arms, and config means silently overridden by an arms file."""
    with pytest.raises(ValueError, match=r"--data.init_args.stds=\[0.5, 0.5\] is set but arms='bernoulli'"):
        BanditGraphDataModule(means=[0.5, 0.4], stds=[0.5, 0.5])
    dm = BanditGraphDataModule(arms="file", arms_path=_csv(tmp_path / "a.csv", "mean\n0.5\n0.4\n"), means=[0.9, 0.8])
    assert dm.means == [0.5, 0.4]
    assert "--data.init_args.means=[0.9, 0.8] does not apply to arms: file" in capsys.readouterr().err
    BanditGraphDataModule(arms="file", arms_path=str(tmp_path / "a.csv"), means=[0.5, 0.4])
    assert capsys.readouterr().err == ""


def test_generated_graphs_that_differ_from_the_config_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    """Catches an Erdős–Rényi draw on another graph_seed, or a prime-m 'grid' that is a path, without a word."""
    dm = BanditGraphDataModule(graph="erdos_renyi", m=20, p=0.12, graph_seed=0)
    err = capsys.readouterr().err
    assert re.search(r"graph_seed 0 gave a disconnected graph; using the first connected draw, graph_seed \d+", err)
    assert BanditGraphDataModule(graph="grid", m=7).diameter == 6
    assert "graph=grid with m=7: the most square grid with r·c = m is 1 x 7, i.e. a path" in capsys.readouterr().err
    BanditGraphDataModule(graph="grid", m=8)
    assert capsys.readouterr().err == ""
    assert dm.n_agents == 20


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"graph": "ring"}, "--data.init_args.graph='ring': expected one of 'path', "),
     ({"m": 2.5}, "--data.init_args.m=2.5: expected at least 1 agent"),
     ({"p": 0.0}, "--data.init_args.p=0.0: expected a number in (0, 1]"),
     ({"p": 1.5, "graph": "path"}, "--data.init_args.p=1.5: expected a number in (0, 1]"),
     ({"graph_seed": -1}, "--data.init_args.graph_seed=-1: expected an integer >= 0"),
     ({"arms": "poisson"}, "--data.init_args.arms='poisson': expected one of 'bernoulli', 'gaussian', 'file'"),
     ({"T": 0}, "--data.init_args.T=0: expected an integer >= 1"),
     ({"T": 100.5}, "--data.init_args.T=100.5: expected an integer >= 1"),
     ({"seed": -3}, "--data.init_args.seed=-3: expected an integer >= 0"),
     ({"n_replicas": 0}, "--data.init_args.n_replicas=0: expected an integer >= 1"),
     ({"node_ids": "labels"}, "--data.init_args.node_ids='labels': expected one of 'integer', 'map'")],
)  # fmt: skip
def test_values_checked_at_construction(kwargs: dict, message: str) -> None:
    """Each value is checked in __init__ with the option's name (issue #19), also ones that only matter for another
    graph kind (p with graph: path)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        BanditGraphDataModule(**kwargs)
