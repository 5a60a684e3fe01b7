"""Communication graphs for cooperative bandits: networkx generators, edge-list reader, hop distances."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import numpy as np

from zoo.core.messages import say

#: Kept for the ``datamodules.bandit_graph`` alias; the reader's notices go to stderr through ``say``.
log = logging.getLogger(__name__)

GraphKind = Literal["path", "cycle", "star", "grid", "complete", "tree", "erdos_renyi", "file"]
#: Resampling attempts for a connected Erdős–Rényi graph before giving up.
ER_ATTEMPTS = 1000


def build_graph(kind: str, m: int, p: float = 0.3, seed: int = 0) -> nx.Graph:
    """A connected generated graph on nodes ``0..m-1``.

    Args:
        kind: ``path``, ``cycle``, ``star``, ``grid``, ``complete``, ``tree`` or ``erdos_renyi``.
        m: number of nodes (agents).
        p: edge probability of ``erdos_renyi``.
        seed: seed of ``tree`` and of the first ``erdos_renyi`` draw.
    """
    if m < 1:
        raise ValueError(f"--data.init_args.m={m}: expected at least 1 agent")
    match kind:
        case "path":
            return nx.path_graph(m)
        case "cycle":
            if m < 3:
                raise ValueError(f"--data.init_args.m={m}: a cycle needs m >= 3 (use graph: path)")
            return nx.cycle_graph(m)
        case "star":
            return nx.star_graph(m - 1)
        case "complete":
            return nx.complete_graph(m)
        case "grid":
            rows = max(r for r in range(1, int(math.isqrt(m)) + 1) if m % r == 0)
            if rows == 1 and m > 1:  # a prime m: the only grid is 1 x m, a path
                say(f"graph=grid with m={m}: the most square grid with r·c = m is 1 x {m}, i.e. a path")
            return nx.convert_node_labels_to_integers(nx.grid_2d_graph(rows, m // rows), ordering="sorted")
        case "tree":
            if m <= 2:
                return nx.path_graph(m)
            rng = np.random.default_rng(seed)
            prufer = rng.integers(0, m, size=m - 2).tolist()
            return nx.from_prufer_sequence(prufer)
        case "erdos_renyi":
            if not 0.0 < p <= 1.0:
                raise ValueError(f"--data.init_args.p={p}: expected an edge probability in (0, 1]")
            for attempt in range(ER_ATTEMPTS):
                g = nx.gnp_random_graph(m, p, seed=seed + attempt)
                if nx.is_connected(g):
                    if attempt:  # the seed used differs from the config's: say so
                        say(f"graph=erdos_renyi(m={m}, p={p:g}): graph_seed {seed} gave a disconnected graph; "
                            f"using the first connected draw, graph_seed {seed + attempt}")  # fmt: skip
                    return g
            raise ValueError(f"erdos_renyi(m={m}, p={p}): no connected draw in {ER_ATTEMPTS} seeds from {seed}")
    raise ValueError(f"--data.init_args.graph={kind!r}: expected one of {list(GraphKind.__args__)}")


def load_graph(path: str, node_ids: Literal["integer", "map"] = "integer") -> nx.Graph:
    """Read a graph file: a CSV edge list (``source,target``) or a ``.npy`` symmetric 0/1 adjacency matrix.

    CSV node ids must be the integers ``0..m-1`` (``node_ids="integer"``): anything else raises, naming the line, since
    a silent relabelling would change the experiment. With ``node_ids="map"`` any labels are mapped to ``0..m-1`` in
    sorted order and the mapping is said on stderr. Every row has exactly the header's fields (else an error naming the
    line); columns after ``source,target`` are ignored, and so said. The graph is undirected and simple: an edge listed
    twice (or both ways) is one edge, and self-loops are dropped; each is said with its count. An asymmetric or non-0/1
    matrix raises; so does a disconnected graph (the error states the number of components and their sizes).

    Args:
        path: the ``.csv`` or ``.npy`` file.
        node_ids: ``integer`` (ids must be ``0..m-1``) or ``map`` (relabel any ids, shown).
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--data.init_args.graph_path={path!r}: no such file (expected a .csv edge list or "
                                ".npy)")  # fmt: skip
    if file.suffix == ".npy":
        adj, problem = _load_npy(file)
        if problem:  # a malformed file: name it
            raise ValueError(f"{path}: not a readable .npy adjacency matrix ({problem})")
        if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
            raise ValueError(f"{path}: expected a square m x m adjacency matrix, found shape {adj.shape}")
        if adj.dtype.kind not in "biuf":
            raise ValueError(f"{path}: expected a numeric 0/1 adjacency matrix, found dtype {adj.dtype}")
        if not np.isin(adj, (0, 1)).all():
            raise ValueError(f"{path}: adjacency entries must be 0 or 1, found {np.unique(adj)[:5].tolist()}")
        if not (adj == adj.T).all():
            i, j = np.argwhere(adj != adj.T)[0]
            raise ValueError(f"{path}: adjacency matrix is not symmetric (A[{i},{j}]={adj[i, j]}, A[{j},{i}]="
                             f"{adj[j, i]}); expected an undirected graph")  # fmt: skip
        m = adj.shape[0]
        edges = [(int(i), int(j)) for i, j in np.argwhere(adj) if i <= j]
        nodes: list[Any] = list(range(m))
    elif file.suffix == ".csv":
        raw = _read_edge_csv(path)
        labels = sorted({x for edge in raw.values() for x in edge}, key=_label_key)
        integers = all(_is_id(x) for x in labels) and [int(x) for x in labels] == list(range(len(labels)))
        if integers:
            mapping = {x: int(x) for x in labels}
        elif node_ids == "integer":
            bad = next((x for x in labels if not _is_id(x) or int(x) >= len(labels)), labels[0])
            line = next(i for i, edge in raw.items() if bad in edge)
            raise ValueError(f"{path}: line {line}: node id {bad!r}; expected the integers 0..m-1 (found {len(labels)} "
                             "distinct ids); --data.init_args.node_ids=map relabels any ids in sorted order and shows "
                             "the mapping")  # fmt: skip
        else:
            mapping = {x: i for i, x in enumerate(labels)}
            say(f"{path}: node ids mapped to 0..{len(labels) - 1} in sorted order (node_ids=map): {mapping}")
        edges = [(mapping[a], mapping[b]) for a, b in raw.values()]
        nodes = list(range(len(labels)))
        distinct = {(min(a, b), max(a, b)) for a, b in edges}
        if len(distinct) < len(edges):  # undirected and simple: 0,1 and 1,0 (or 0,1 twice) are one edge
            say(f"{path}: {len(edges) - len(distinct)} duplicate edge(s) (listed twice or both ways) merged: the "
                "communication graph is undirected")  # fmt: skip
    else:
        raise ValueError(f"--data.init_args.graph_path={path!r}: expected a .csv edge list or a .npy adjacency")
    g = nx.Graph()
    g.add_nodes_from(nodes)
    loops = sorted({a for a, b in edges if a == b})
    if loops:
        say(f"{path}: dropped the self-loop(s) at node(s) {loops[:10]}{' ...' if len(loops) > 10 else ''}: an agent "
            "always knows its own samples")  # fmt: skip
    g.add_edges_from((a, b) for a, b in edges if a != b)
    return g


def _load_npy(file: Path) -> tuple[np.ndarray | None, str]:
    """``np.load`` without pickles: ``(array, "")`` or ``(None, what went wrong)``."""
    with file.open("rb") as fh:
        if fh.read(6) != b"\x93NUMPY":  # numpy would try it as a pickle and suggest allow_pickle
            return None, "no .npy header; write the matrix with numpy.save"
    try:
        return np.load(file, allow_pickle=False), ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _read_edge_csv(path: str) -> dict[int, tuple[str, str]]:
    """The rows of an edge-list CSV as ``{line: (source, target)}`` (stripped strings), checked field by field."""
    with Path(path).open(newline="", encoding="utf-8-sig") as fh:  # utf-8-sig: a BOM is not part of the header
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        if header[:2] != ["source", "target"]:
            raise ValueError(f"{path}: expected the header 'source,target', found {','.join(header) or 'nothing'}")
        raw: dict[int, tuple[str, str]] = {}
        for row in reader:
            line = reader.line_num
            if not row:  # a blank line holds no edge
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}: line {line}: expected {len(header)} fields ({','.join(header)}), found "
                                 f"{len(row)}: {','.join(row)!r}")  # fmt: skip
            pair = row[0].strip(), row[1].strip()
            if not all(pair):
                raise ValueError(f"{path}: line {line}: empty source or target ({','.join(row)!r}); expected "
                                 "'<source>,<target>' on every line")  # fmt: skip
            raw[line] = pair
    if not raw:
        raise ValueError(f"{path}: no edges below the header 'source,target'")
    if len(header) > 2:
        say(f"{path}: column(s) {','.join(header[2:])} ignored (the communication graph is unweighted: source,target)")
    return raw


def _is_id(label: str) -> bool:
    """An integer node id written in ASCII digits (``'3'``; not ``'3.0'``, ``'+3'``, ``'-3'`` or ``'٣'``)."""
    return label.isascii() and label.isdigit()


def _label_key(label: str) -> tuple[int, Any]:
    """Sort integers numerically, then strings lexicographically (a deterministic relabelling)."""
    return (0, int(label)) if label.lstrip("-").isdigit() else (1, label)


def check_connected(g: nx.Graph, source: str) -> None:
    """Raise ``ValueError`` naming the component count and sizes when ``g`` is not connected."""
    if g.number_of_nodes() == 0:
        raise ValueError(f"{source}: the graph has no nodes")
    if not nx.is_connected(g):
        sizes = sorted((len(c) for c in nx.connected_components(g)), reverse=True)
        raise ValueError(f"{source}: the graph is disconnected: {len(sizes)} components of sizes {sizes}; "
                         "Coop-SE needs a connected communication graph")  # fmt: skip


def hop_distances(g: nx.Graph) -> np.ndarray:
    """The ``m × m`` int64 hop-distance matrix (BFS from every node)."""
    m = g.number_of_nodes()
    dist = np.full((m, m), -1, dtype=np.int64)
    for v, lengths in nx.all_pairs_shortest_path_length(g):
        for u, d in lengths.items():
            dist[v, u] = d
    return dist
