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


def test_npy_adjacency_self_loops_dropped_with_warning(tmp_path: Path) -> None:
    adj = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 0]])
    np.save(tmp_path / "a.npy", adj)
    with pytest.warns(UserWarning, match="self-loop"):
        dm = BanditGraphDataModule(graph="file", graph_path=str(tmp_path / "a.npy"))
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


def test_string_labels_map_deterministically(tmp_path: Path) -> None:
    """With node_ids=map, string node ids map to 0..m-1 in sorted order, whatever the edge order; the mapping is
    shown as a warning."""
    a = _csv(tmp_path / "a.csv", "source,target\ncarol,alice\nalice,bob\ndave,carol\n")
    b = _csv(tmp_path / "b.csv", "source,target\ndave,carol\nbob,alice\nalice,carol\n")
    with pytest.warns(UserWarning, match=r"'alice': 0.*'dave': 3"):
        da = BanditGraphDataModule(graph="file", graph_path=a, m=4, node_ids="map")
    with pytest.warns(UserWarning, match="node ids mapped"):
        db = BanditGraphDataModule(graph="file", graph_path=b, m=4, node_ids="map")
    assert sorted(da.graph.edges) == sorted(db.graph.edges) == [(0, 1), (0, 2), (2, 3)]
    np.testing.assert_array_equal(da.D, db.D)


@pytest.mark.parametrize(
    ("rows", "bad", "line"),
    [("0,1\n1,x3\n2,0\n", "x3", 3), ("1,2\n2,3\n", "3", 3), ("0,1\n1,-2\n", "-2", 3)],
    ids=["mixed", "one_based", "negative"],
)
def test_node_ids_that_would_be_relabelled_are_an_error(tmp_path: Path, rows: str, bad: str, line: int) -> None:
    """A mixed, 1-based or negative id column is not silently relabelled (issue #19: an `x3` trained a 4-node graph
    while the config said m 8): the error names the file, the line and the id, and offers node_ids=map."""
    path = _csv(tmp_path / "g.csv", "source,target\n" + rows)
    with pytest.raises(ValueError, match=rf"g\.csv: line {line}: node id '{re.escape(bad)}'.*node_ids=map"):
        BanditGraphDataModule(graph="file", graph_path=path)


def test_file_graph_that_overrides_m_says_so(tmp_path: Path) -> None:
    path = _csv(tmp_path / "g.csv", "source,target\n0,1\n1,2\n2,3\n")
    with pytest.warns(UserWarning, match=r"holds 4 agents; --data.init_args.m=8 does not apply"):
        assert BanditGraphDataModule(graph="file", graph_path=path, m=8).n_agents == 4


def test_bad_header_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected the header 'source,target'"):
        BanditGraphDataModule(graph="file", graph_path=_csv(tmp_path / "g.csv", "src,dst\n0,1\n"))
    with pytest.raises(ValueError, match="no such file"):
        BanditGraphDataModule(graph="file", graph_path=str(tmp_path / "missing.csv"))


@pytest.mark.parametrize("row", ["2", "1,", ",3"])
def test_edge_row_with_a_missing_end_raises(row: str, tmp_path: Path) -> None:
    """A row without a source or a target names the file and line (never an empty-string node)."""
    path = _csv(tmp_path / "g.csv", f"source,target\n0,1\n{row}\n")
    with pytest.raises(ValueError, match=r"g\.csv: line 3: empty source or target"):
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
