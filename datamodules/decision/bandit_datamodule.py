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

import math
from collections.abc import Iterator
from typing import Any, Literal

import networkx as nx
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from datamodules.decision.arms import ArmsKind, check_arms, load_arms
from datamodules.decision.graphs import GraphKind, build_graph, check_connected, hop_distances, load_graph
from zoo.core import checks
from zoo.core.datamodule import ZooDataModule
from zoo.core.messages import say


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
        means: arm means (the card: ``[0.9, 0.8, 0.7, 0.6, 0.5]``; with ``arms: file`` the file decides, and a
            different ``means``/``stds`` is said not to apply, as ``m`` with ``graph: file``).
        stds: Gaussian standard deviations, one per arm (``gaussian`` only, an error with ``bernoulli``; None means 1.0
            each).
        arms_path: the arms CSV for ``arms: file`` (``mean`` or ``mean,std``).
        T: horizon (rounds).
        seed: base reward seed; replica ``r`` draws its rewards from seed ``seed + r``.
        n_replicas: independent replicas simulated side by side (vectorised seeds), linked into the module.
        node_ids: CSV node ids of ``graph: file``: ``integer`` (must be ``0..m-1``, else an error naming the line)
            or ``map`` (any labels, relabelled in sorted order with the mapping shown).
    """

    def __init__(self, graph: GraphKind = "path", m: int = 8, p: float = 0.3, graph_seed: int = 0,
                 graph_path: str | None = None, arms: ArmsKind = "bernoulli",
                 means: list[float] | None = None, stds: list[float] | None = None, arms_path: str | None = None,
                 T: int = 20000, seed: int = 0, n_replicas: int = 1,
                 node_ids: Literal["integer", "map"] = "integer") -> None:  # fmt: skip
        super().__init__()
        checks.choice(checks.data("graph"), graph, GraphKind.__args__)
        if not (isinstance(m, int) and not isinstance(m, bool) and m >= 1):
            raise ValueError(f"--data.init_args.m={m}: expected at least 1 agent")
        checks.probability(checks.data("p"), p, open_low=True)
        checks.integer(checks.data("graph_seed"), graph_seed, low=0)
        checks.choice(checks.data("arms"), arms, ArmsKind.__args__)
        checks.integer(checks.data("T"), T)
        checks.integer(checks.data("seed"), seed, low=0)
        checks.integer(checks.data("n_replicas"), n_replicas)
        checks.choice(checks.data("node_ids"), node_ids, ("integer", "map"))
        if graph == "file":
            if graph_path is None:
                raise ValueError("--data.init_args.graph=file needs --data.init_args.graph_path (.csv or .npy)")
            g = load_graph(graph_path, node_ids)
            source = graph_path
            if g.number_of_nodes() != m:  # the file decides m: say so rather than silently override the config
                say(f"--data.init_args.graph_path={graph_path!r} holds {g.number_of_nodes()} agents; "
                    f"--data.init_args.m={m} does not apply to graph: file")  # fmt: skip
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
            for name, given, read in (("means", means, mu), ("stds", stds, sd)):  # the file decides: say so
                if given is not None and [float(x) for x in given] != read:
                    say(f"--data.init_args.arms_path={arms_path!r} sets the arms; --data.init_args.{name}={given} "
                        "does not apply to arms: file")  # fmt: skip
        else:
            if arms_path is not None:
                raise ValueError(f"--data.init_args.arms_path={arms_path!r} is set but arms={arms!r}; use arms: file")
            if stds is not None and arms == "bernoulli":
                raise ValueError(f"--data.init_args.stds={stds} is set but arms='bernoulli' (a Bernoulli arm has no "
                                 "std); use arms: gaussian or stds: null")  # fmt: skip
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
