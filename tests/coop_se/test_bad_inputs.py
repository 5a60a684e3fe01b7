"""Bad input through the real `zoo` entry (issue #19): every coop_se on-disk format and value, one line, exit code 2.

Each row runs `zoo fit -c configs/coop_se/default.yaml <args> --trainer.fast_dev_run=1` in this process and expects
`zoo: error: <line>` as the last stderr line, before any round is simulated. The files are written by the `files`
fixture into the test's folder, which is the working directory (conftest), so paths are relative. An unknown enum
value (`--data.init_args.graph=ring`) is refused by jsonargparse against the Literal type before the zoo's code runs,
so it has no row here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_user_error, bad_inputs

CONFIG = ["fit", "-c", str(ROOT / "configs/coop_se/default.yaml")]
GRAPH = ["--data.init_args.graph=file", "--data.init_args.graph_path"]
ARMS = ["--data.init_args.arms=file", "--data.init_args.arms_path"]
GAUSSIAN = ["--data.init_args.means=null"]  # the default config's card means would be said not to apply


def _graph(name: str) -> list[str]:
    return [GRAPH[0], f"{GRAPH[1]}={name}"]


def _arms(name: str) -> list[str]:
    return [ARMS[0], f"{ARMS[1]}={name}"]


#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # graph: CSV edge list
    ("csv_missing_file", _graph("missing.csv"),
     "--data.init_args.graph_path='missing.csv': no such file (expected a .csv edge list or .npy)"),
    ("csv_empty_file", _graph("empty.csv"), "empty.csv: expected the header 'source,target', found nothing"),
    ("csv_missing_column", _graph("header.csv"), "header.csv: expected the header 'source,target', found source"),
    ("csv_malformed_line", _graph("extra.csv"),
     "extra.csv: line 3: expected 2 fields (source,target), found 3: '1,2,3'"),
    ("csv_empty_field", _graph("hole.csv"),
     "hole.csv: line 3: empty source or target ('1,'); expected '<source>,<target>' on every line"),
    ("csv_wrong_type", _graph("float.csv"),
     "float.csv: line 3: node id '2.0'; expected the integers 0..m-1 (found 3 distinct ids); "
     "--data.init_args.node_ids=map relabels any ids in sorted order and shows the mapping"),
    ("csv_one_based", _graph("one_based.csv"),
     "one_based.csv: line 3: node id '3'; expected the integers 0..m-1 (found 3 distinct ids); "
     "--data.init_args.node_ids=map relabels any ids in sorted order and shows the mapping"),
    ("csv_no_edges", _graph("no_edges.csv"), "no_edges.csv: no edges below the header 'source,target'"),
    ("csv_disconnected", _graph("split.csv"),
     "split.csv: the graph is disconnected: 2 components of sizes [2, 2]; Coop-SE needs a connected communication "
     "graph"),
    ("graph_wrong_suffix", _graph("edges.txt"),
     "--data.init_args.graph_path='edges.txt': expected a .csv edge list or a .npy adjacency"),
    ("graph_path_missing", [GRAPH[0]], "--data.init_args.graph=file needs --data.init_args.graph_path (.csv or .npy)"),
    ("graph_path_unused", [f"{GRAPH[1]}=ok.csv"],
     "--data.init_args.graph_path='ok.csv' is set but graph='path'; use graph: file"),
    # graph: .npy adjacency
    ("npy_unreadable", _graph("junk.npy"),
     "junk.npy: not a readable .npy adjacency matrix (no .npy header; write the matrix with numpy.save)"),
    ("npy_empty_file", _graph("empty.npy"),
     "empty.npy: not a readable .npy adjacency matrix (no .npy header; write the matrix with numpy.save)"),
    ("npy_truncated", _graph("cut.npy"),
     "cut.npy: not a readable .npy adjacency matrix (ValueError: Failed to read all data for array. Expected (2, 2) "
     "= 4 elements, could only read 1 elements. (file seems not fully written?))"),
    ("npy_not_square", _graph("wide.npy"), "wide.npy: expected a square m x m adjacency matrix, found shape (2, 3)"),
    ("npy_wrong_type", _graph("text.npy"), "text.npy: expected a numeric 0/1 adjacency matrix, found dtype <U1"),
    ("npy_not_binary", _graph("weighted.npy"), "weighted.npy: adjacency entries must be 0 or 1, found [0, 1, 2]"),
    ("npy_asymmetric", _graph("directed.npy"),
     "directed.npy: adjacency matrix is not symmetric (A[0,1]=1, A[1,0]=0); expected an undirected graph"),
    # arms: CSV mean[,std]
    ("arms_missing_file", _arms("missing.csv"),
     "--data.init_args.arms_path='missing.csv': no such file (expected a CSV with mean[,std])"),
    ("arms_empty_file", _arms("empty.csv"),
     "empty.csv: expected the column 'mean' (Bernoulli) or 'mean,std' (Gaussian), found nothing"),
    ("arms_unknown_column", _arms("mu.csv"),
     "mu.csv: expected the column 'mean' (Bernoulli) or 'mean,std' (Gaussian), found mu"),
    ("arms_malformed_line", _arms("arms_extra.csv"),
     "arms_extra.csv: line 3: expected 1 field(s) (mean), found 2: '0.4,0.1'"),
    ("arms_missing_std", [*_arms("no_std.csv"), *GAUSSIAN],
     "no_std.csv: line 3: expected 2 field(s) (mean,std), found 1: '0.4'"),
    ("arms_wrong_type", _arms("word.csv"), "word.csv: line 3: mean 'high' is not a number"),
    ("arms_one_arm", _arms("one.csv"), "one.csv: 1 arm(s); a bandit needs A >= 2 arms"),
    ("arms_not_bernoulli", _arms("big.csv"), "big.csv: Bernoulli means must lie in [0, 1], found [1.2]"),
    ("arms_nan", _arms("nan.csv"), "nan.csv: arm means must be finite, found [0.5, nan]"),
    ("arms_negative_std", [*_arms("neg_std.csv"), *GAUSSIAN],
     "neg_std.csv: Gaussian stds must be finite and >= 0, found [1.0, -1.0]"),
    ("arms_path_missing", [ARMS[0]], "--data.init_args.arms=file needs --data.init_args.arms_path (CSV mean[,std])"),
    ("stds_on_bernoulli", ["--data.init_args.stds=[1.0,1.0,1.0,1.0,1.0]"],
     "--data.init_args.stds=[1.0, 1.0, 1.0, 1.0, 1.0] is set but arms='bernoulli' (a Bernoulli arm has no std); use "
     "arms: gaussian or stds: null"),
    ("means_one_arm", ["--data.init_args.means=[0.5]"], "--data.init_args.means: 1 arm(s); a bandit needs A >= 2 arms"),
    # values
    ("horizon_0", ["--data.init_args.T=0"], "--data.init_args.T=0: expected an integer >= 1"),
    ("rounds_per_step_0", ["--model.init_args.rounds_per_step=0"],
     "--model.init_args.rounds_per_step=0: expected an integer >= 1"),
    ("negative_agents", ["--data.init_args.m=-1"], "--data.init_args.m=-1: expected at least 1 agent"),
    ("negative_replicas", ["--data.init_args.n_replicas=-2"],
     "--data.init_args.n_replicas=-2: expected an integer >= 1"),
    ("probability_1.5", ["--data.init_args.p=1.5"], "--data.init_args.p=1.5: expected a number in (0, 1]"),
    ("probability_0", ["--data.init_args.graph=erdos_renyi", "--data.init_args.p=0"],
     "--data.init_args.p=0.0: expected a number in (0, 1]"),
    ("negative_seed", ["--data.init_args.graph_seed=-1"], "--data.init_args.graph_seed=-1: expected an integer >= 0"),
    ("radius_constant_0", ["--model.init_args.c=0"], "--model.init_args.c=0.0: expected a finite number > 0"),
    ("own_delay_0", ["--model.init_args.own_delay=0"], "--model.init_args.own_delay=0: expected an integer >= 1"),
    ("bandwidth_0", ["--model.init_args.bandwidth=0"], "--model.init_args.bandwidth=0: expected an integer >= 1"),
    ("congest_own_delay", ["--model.init_args.algorithm=coop_se_congest", "--model.init_args.own_delay=2"],
     "--model.init_args.own_delay=2: coop_se_congest supports own_delay=1 only"),
    ("logsize_own_delay", ["--model.init_args.algorithm=coop_se_logsize", "--model.init_args.own_delay=2"],
     "--model.init_args.own_delay=2: coop_se_logsize supports own_delay=1 only"),
    ("messages_per_edge_0", ["--model.init_args.messages_per_edge=0"],
     "--model.init_args.messages_per_edge=0: expected an integer >= 1"),
    ("messages_per_edge_above_arms", ["--model.init_args.messages_per_edge=6"],
     "--model.init_args.messages_per_edge=6: expected at most n_arms=5 (one aggregated message per arm and edge is "
     "already the whole state)"),
    ("cycle_of_2", ["--data.init_args.graph=cycle", "--data.init_args.m=2"],
     "--data.init_args.m=2: a cycle needs m >= 3 (use graph: path)"),
    ("se_on_8_agents", ["--model.init_args.algorithm=se"],
     "algorithm=se is single-agent SE: expected a graph with m=1, found m=8 (use no_comm for m independent agents)"),
]  # fmt: skip


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    """The malformed files of :data:`BAD_INPUTS`, in the working directory."""
    texts = {
        "empty.csv": "", "header.csv": "source\n0\n", "extra.csv": "source,target\n0,1\n1,2,3\n",
        "hole.csv": "source,target\n0,1\n1,\n", "float.csv": "source,target\n0,1\n1,2.0\n",
        "one_based.csv": "source,target\n1,2\n2,3\n", "no_edges.csv": "source,target\n",
        "split.csv": "source,target\n0,1\n2,3\n", "edges.txt": "source,target\n0,1\n", "ok.csv": "source,target\n0,1\n",
        "junk.npy": "junk", "empty.npy": "", "mu.csv": "mu\n0.5\n0.4\n", "arms_extra.csv": "mean\n0.5\n0.4,0.1\n",
        "no_std.csv": "mean,std\n0.5,1\n0.4\n", "word.csv": "mean\n0.5\nhigh\n", "one.csv": "mean\n0.5\n",
        "big.csv": "mean\n0.5\n1.2\n", "nan.csv": "mean\n0.5\nnan\n", "neg_std.csv": "mean,std\n0.5,1\n0.4,-1\n",
    }  # fmt: skip
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    np.save(tmp_path / "wide.npy", np.zeros((2, 3), dtype=np.int64))
    np.save(tmp_path / "text.npy", np.array([["0", "1"], ["1", "0"]]))
    np.save(tmp_path / "weighted.npy", np.array([[0, 2], [2, 1]]))
    np.save(tmp_path / "directed.npy", np.array([[0, 1], [0, 0]]))
    np.save(tmp_path / "cut.npy", np.array([[0, 1], [1, 0]]))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:-24])
    return tmp_path


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(files: Path, args: list[str], line: str, capsys) -> None:
    assert_user_error([*CONFIG, *args, "--trainer.fast_dev_run=1"], line, capsys)
