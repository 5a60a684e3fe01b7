"""Graph-and-arms data for cooperative stochastic bandits (``coop_se``): a networkx graph plus an arm set.

The simulation itself lives in ``zoo.coop_se.sim``; this datamodule builds and validates the communication graph
(connected, undirected, no self-loops), its hop-distance matrix ``D`` (BFS, networkx all-pairs), diameter and degrees,
and the arms (means, standard deviations, gaps ``Δ_a = μ* − μ_a``). Its training loader yields chunk start rounds
``1, 1 + k, 1 + 2k, ...`` (``k`` = the module's ``rounds_per_step``, set by the module in ``setup``).

Graphs (``graph``): ``path``, ``cycle``, ``star``, ``grid`` (the most square ``r × c`` grid with ``r·c = m``),
``complete``, ``tree`` (a uniformly random labelled tree drawn from ``graph_seed``), ``erdos_renyi`` (``G(m, p)``,
resampled with ``graph_seed + 1, + 2, ...`` until connected) or ``file`` (``graph_path``: a CSV edge list with the
header ``source,target``, or a ``.npy`` ``m × m`` symmetric 0/1 adjacency matrix).

Arms (``arms``): ``bernoulli`` or ``gaussian`` with ``means`` (and ``stds``), or ``file`` (``arms_path``: a CSV with the
column ``mean`` (Bernoulli) or the columns ``mean,std`` (Gaussian)).
"""

from __future__ import annotations

import csv
import logging
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from zoo.core.datamodule import ZooDataModule

log = logging.getLogger(__name__)

GraphKind = Literal["path", "cycle", "star", "grid", "complete", "tree", "erdos_renyi", "file"]
ArmsKind = Literal["bernoulli", "gaussian", "file"]
#: Resampling attempts for a connected Erdős–Rényi graph before giving up.
ER_ATTEMPTS = 1000


class ChunkStarts(IterableDataset):
    """Yields the first round (1-based) of each chunk of ``stride`` rounds in ``1..T``, as 0-d int64 tensors.

    Args:
        T: horizon.
        stride: rounds per chunk (the module's ``rounds_per_step``).
    """

    def __init__(self, T: int, stride: int) -> None:
        self.T, self.stride = T, stride

    def __iter__(self) -> Iterator[Tensor]:
        for start in range(1, self.T + 1, self.stride):
            yield torch.tensor(start, dtype=torch.int64)

    def __len__(self) -> int:
        return math.ceil(self.T / self.stride)


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
                    if attempt:
                        log.info("erdos_renyi(m=%d, p=%g): connected at graph_seed %d", m, p, seed + attempt)
                    return g
            raise ValueError(f"erdos_renyi(m={m}, p={p}): no connected draw in {ER_ATTEMPTS} seeds from {seed}")
    raise ValueError(f"--data.init_args.graph={kind!r}: expected one of {list(GraphKind.__args__)}")


def load_graph(path: str) -> nx.Graph:
    """Read a graph file: a CSV edge list (``source,target``) or a ``.npy`` symmetric 0/1 adjacency matrix.

    CSV labels that are not all integers ``0..m-1`` are mapped to ``0..m-1`` in sorted order (the mapping is logged).
    Self-loops are dropped with a warning; an asymmetric or non-0/1 matrix raises; so does a disconnected graph (the
    error states the number of components and their sizes).

    Args:
        path: the ``.csv`` or ``.npy`` file.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--data.init_args.graph_path={path!r}: no such file (expected a .csv edge list or .npy)")
    if file.suffix == ".npy":
        try:
            adj = np.load(file, allow_pickle=False)
        except Exception as exc:  # a malformed file: name it
            raise ValueError(f"{path}: not a readable .npy adjacency matrix ({exc})") from exc
        if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
            raise ValueError(f"{path}: expected a square m x m adjacency matrix, found shape {adj.shape}")
        if not np.isin(adj, (0, 1)).all():
            raise ValueError(f"{path}: adjacency entries must be 0 or 1, found {sorted(set(np.unique(adj)))[:5]}")
        if not (adj == adj.T).all():
            i, j = np.argwhere(adj != adj.T)[0]
            raise ValueError(f"{path}: adjacency matrix is not symmetric (A[{i},{j}]={adj[i, j]}, A[{j},{i}]="
                             f"{adj[j, i]}); expected an undirected graph")  # fmt: skip
        m = adj.shape[0]
        edges = [(int(i), int(j)) for i, j in np.argwhere(adj) if i <= j]
        nodes: list[Any] = list(range(m))
    elif file.suffix == ".csv":
        with file.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            if header[:2] != ["source", "target"]:
                raise ValueError(f"{path}: expected the header 'source,target', found {','.join(header) or 'nothing'}")
            raw = []
            for line, row in enumerate(reader, start=2):
                pair = (row.get("source") or "").strip(), (row.get("target") or "").strip()
                if not all(pair):
                    raise ValueError(f"{path}: line {line}: empty source or target ({row}); expected "
                                     "'<source>,<target>' on every line")  # fmt: skip
                raw.append(pair)
        if not raw:
            raise ValueError(f"{path}: no edges below the header 'source,target'")
        labels = sorted({x for edge in raw for x in edge}, key=_label_key)
        if all(x.lstrip("-").isdigit() for x in labels) and [int(x) for x in labels] == list(range(len(labels))):
            mapping = {x: int(x) for x in labels}
        else:
            mapping = {x: i for i, x in enumerate(labels)}
            log.info("%s: node labels mapped to 0..%d in sorted order: %s", path, len(labels) - 1, mapping)
        edges = [(mapping[a], mapping[b]) for a, b in raw]
        nodes = list(range(len(labels)))
    else:
        raise ValueError(f"--data.init_args.graph_path={path!r}: expected a .csv edge list or a .npy adjacency")
    g = nx.Graph()
    g.add_nodes_from(nodes)
    loops = [(a, b) for a, b in edges if a == b]
    if loops:
        warnings.warn(f"{path}: dropped {len(loops)} self-loop(s) at node(s) {sorted({a for a, _ in loops})[:10]}",
                      stacklevel=2)  # fmt: skip
    g.add_edges_from((a, b) for a, b in edges if a != b)
    return g


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


def load_arms(path: str) -> tuple[str, list[float], list[float] | None]:
    """Read an arms CSV: column ``mean`` (Bernoulli) or columns ``mean,std`` (Gaussian); returns kind, means, stds."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--data.init_args.arms_path={path!r}: no such file (expected a CSV with mean[,std])")
    with file.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        rows = list(reader)
    if header not in (["mean"], ["mean", "std"]):
        raise ValueError(f"{path}: expected the column 'mean' (Bernoulli) or 'mean,std' (Gaussian), found "
                         f"{','.join(header) or 'nothing'}")  # fmt: skip
    try:
        means = [float(r["mean"]) for r in rows]
        stds = [float(r["std"]) for r in rows] if "std" in header else None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: every 'mean'/'std' entry must be a number ({exc})") from None
    return ("gaussian" if stds is not None else "bernoulli"), means, stds


def check_arms(kind: str, means: list[float], stds: list[float] | None, source: str) -> None:
    """Validate an arm set: ``A >= 2``, Bernoulli means in [0, 1], Gaussian stds >= 0 and one per arm."""
    if len(means) < 2:
        raise ValueError(f"{source}: {len(means)} arm(s); a bandit needs A >= 2 arms")
    if any(not math.isfinite(x) for x in means):
        raise ValueError(f"{source}: arm means must be finite, found {means}")
    if kind == "bernoulli":
        bad = [x for x in means if not 0.0 <= x <= 1.0]
        if bad:
            raise ValueError(f"{source}: Bernoulli means must lie in [0, 1], found {bad}")
    else:
        if stds is None or len(stds) != len(means):
            raise ValueError(f"{source}: Gaussian arms need one std per mean ({len(means)} means, stds={stds})")
        if any(not (math.isfinite(s) and s >= 0) for s in stds):
            raise ValueError(f"{source}: Gaussian stds must be finite and >= 0, found {stds}")


class BanditGraphDataModule(ZooDataModule):
    """A connected communication graph and a stochastic arm set (card ``coop_se``, "Data").

    Everything is built in ``__init__`` (cheap), so ``n_agents``, ``n_arms`` and ``n_replicas`` are linked into the
    module and invalid graphs or arms fail before training.

    Args:
        graph: ``path``, ``cycle``, ``star``, ``grid``, ``complete``, ``tree``, ``erdos_renyi`` or ``file``.
        m: number of agents of a generated graph (ignored for ``file``).
        p: edge probability of ``erdos_renyi``.
        graph_seed: seed of ``tree`` and of the first ``erdos_renyi`` draw (then ``+1, +2, ...`` until connected).
        graph_path: the graph file for ``graph: file`` (CSV ``source,target`` edge list or ``.npy`` adjacency).
        arms: ``bernoulli``, ``gaussian`` or ``file``.
        means: arm means (the card: ``[0.9, 0.8, 0.7, 0.6, 0.5]``).
        stds: Gaussian standard deviations, one per arm (``gaussian`` only; None means 1.0 each).
        arms_path: the arms CSV for ``arms: file`` (``mean`` or ``mean,std``).
        T: horizon (rounds).
        seed: base reward seed; replica ``r`` draws its rewards from seed ``seed + r``.
        n_replicas: independent replicas simulated side by side (vectorised seeds), linked into the module.
    """

    def __init__(self, graph: GraphKind = "path", m: int = 8, p: float = 0.3, graph_seed: int = 0,
                 graph_path: str | None = None, arms: ArmsKind = "bernoulli",
                 means: list[float] | None = None, stds: list[float] | None = None, arms_path: str | None = None,
                 T: int = 20000, seed: int = 0, n_replicas: int = 1) -> None:  # fmt: skip
        super().__init__()
        if T < 1:
            raise ValueError(f"--data.init_args.T={T}: expected a horizon >= 1")
        if n_replicas < 1:
            raise ValueError(f"--data.init_args.n_replicas={n_replicas}: expected >= 1")
        if graph == "file":
            if graph_path is None:
                raise ValueError("--data.init_args.graph=file needs --data.init_args.graph_path (.csv or .npy)")
            g = load_graph(graph_path)
            source = graph_path
        else:
            if graph_path is not None:
                raise ValueError(f"--data.init_args.graph_path={graph_path!r} is set but graph={graph!r}; use "
                                 "graph: file")  # fmt: skip
            g = build_graph(graph, m, p, graph_seed)
            source = f"graph={graph}(m={m})"
        check_connected(g, source)
        if arms == "file":
            if arms_path is None:
                raise ValueError("--data.init_args.arms=file needs --data.init_args.arms_path (CSV mean[,std])")
            kind, mu, sd = load_arms(arms_path)
            arm_source = arms_path
        else:
            if arms_path is not None:
                raise ValueError(f"--data.init_args.arms_path={arms_path!r} is set but arms={arms!r}; use arms: file")
            kind = arms
            mu = [0.9, 0.8, 0.7, 0.6, 0.5] if means is None else [float(x) for x in means]
            sd = None if kind == "bernoulli" else ([1.0] * len(mu) if stds is None else [float(x) for x in stds])
            arm_source = "--data.init_args.means"
        check_arms(kind, mu, sd, arm_source)
        self.graph, self.arms_kind, self.T, self.seed = g, kind, int(T), int(seed)
        self.means = mu
        self.stds = sd if sd is not None else [0.0] * len(mu)
        self.D = hop_distances(g)
        self.diameter = int(self.D.max())
        self.degrees = np.array([g.degree(v) for v in range(g.number_of_nodes())], dtype=np.int64)
        self.gaps = [max(mu) - x for x in mu]
        self.n_agents, self.n_arms, self.n_replicas = g.number_of_nodes(), len(mu), int(n_replicas)
        #: Rounds per chunk of the training loader; the module sets it to its ``rounds_per_step`` in ``setup``.
        self.stride = 1000

    @property
    def adjacency(self) -> np.ndarray:
        """The ``m × m`` 0/1 adjacency matrix (float64)."""
        return nx.to_numpy_array(self.graph, nodelist=range(self.n_agents), dtype=np.float64)

    def problem(self) -> dict[str, Any]:
        """Everything the simulator needs: ``D``, ``adjacency``, ``means``, ``stds``, ``gaussian``, ``T``, ``seed``."""
        return {"D": torch.as_tensor(self.D), "adjacency": torch.as_tensor(self.adjacency),
                "means": torch.tensor(self.means, dtype=torch.float64),
                "stds": torch.tensor(self.stds, dtype=torch.float64), "gaussian": self.arms_kind == "gaussian",
                "T": self.T, "seed": self.seed}  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        """Chunk start rounds, one per training step (``batch_size=None``: each item is handed over as is)."""
        return DataLoader(ChunkStarts(self.T, self.stride), batch_size=None, num_workers=0)
