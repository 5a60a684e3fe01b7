"""Binary causal-discovery data served as one full batch per epoch (card ``binary_dag``, section Data).

Every datamodule builds its data in ``__init__`` (before ``setup``), so ``n_vars`` can be linked into
``model.init_args.n_vars`` and a harness can call :meth:`BinaryDataModule.problem` without a Trainer:

- :class:`BinaryMVBDataModule`: the seeded MVB generator (:mod:`datamodules.binary.synthetic`) or the
  ``interaction5`` fixture;
- :class:`PgmpyBIFDataModule`: a bnlearn network shipped in pgmpy (:mod:`datamodules.binary.bif`), binarised or
  native;
- :class:`BinaryCSVDataModule`: a user's CSV (:mod:`datamodules.binary.readers`) with an optional truth.

The training batch is ``{"x": float64 tensor (n, d)}`` holding the state indices (0/1 when binary), the same batch
every epoch. There is no validation loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from datamodules.binary.bif import BINARIZE, NETWORKS, Binarize, sample_network
from datamodules.binary.readers import read_binary_csv, read_truth
from datamodules.binary.synthetic import CONDITIONALS, MAX_PARENTS, Conditional, mvb_problem
from datamodules.common.single import one_batch_loader
from zoo.core import checks
from zoo.core.datamodule import ZooDataModule


class BinaryDataModule(ZooDataModule):
    """Base of the binary datamodules: the data matrix, its names, cardinalities and (optional) true DAG.

    Subclasses call :meth:`_set` at the end of ``__init__``.
    """

    def __init__(self) -> None:
        super().__init__()
        #: uint8 (n, d) state indices (0/1 for binary data).
        self.x: np.ndarray = np.zeros((0, 0), dtype=np.uint8)
        #: Variable names in column order.
        self.names: list[str] = []
        #: States per column (2 for binary).
        self.card: tuple[int, ...] = ()
        #: The true DAG (bool (d, d), ``truth[i, j]`` iff i -> j), or ``None`` when unknown.
        self.truth: np.ndarray | None = None
        #: Number of variables d, linked into ``model.init_args.n_vars``.
        self.n_vars: int | None = None
        #: Whether every column is binary (all ``card == 2``).
        self.binary: bool = True

    def _set(self, x: np.ndarray, names: list[str], card: tuple[int, ...], truth: np.ndarray | None) -> None:
        self.x, self.names, self.card, self.truth = x, list(names), tuple(int(c) for c in card), truth
        self.n_vars = int(x.shape[1])
        self.binary = all(c == 2 for c in self.card)

    def problem(self) -> dict[str, Any]:
        """The data as numpy: ``x`` (uint8 (n, d)), ``names``, ``card``, ``truth`` (bool (d, d) or ``None``)."""
        return {"x": self.x, "names": list(self.names), "card": self.card, "truth": self.truth}

    def train_dataloader(self) -> DataLoader:
        """One batch per epoch: ``{"x": float64 (n, d)}``, the full data."""
        batch = {"x": torch.from_numpy(self.x.astype(np.float64))}
        return one_batch_loader(batch)


class BinaryMVBDataModule(BinaryDataModule):
    """Seeded binary data from a random DAG with MVB conditionals, or the card's ``interaction5`` fixture.

    One ``numpy.random.default_rng(seed)`` draws the graph, then the parameters, then the samples (card, Data).

    Args:
        d: number of variables (``graph: interaction5`` needs 5).
        graph: ``er`` (Erdős–Rényi), ``sf`` (Barabási–Albert) or ``interaction5`` (the fixture).
        k: expected edges per node (ER edge probability 2k/(d−1); SF attaches k edges per node).
        n: samples.
        conditional: ``interaction`` (main effects plus interactions up to ``max_interaction_order``),
            ``random_cpt`` (a U(0.1, 0.9) table entry per parent configuration) or ``logistic_linear``.
        max_interaction_order: largest interaction order of ``conditional: interaction``.
        max_in_degree: graphs are redrawn until every in-degree is at most this.
        seed: data seed.
    """

    def __init__(
        self, d: int = 10, graph: Literal["er", "sf", "interaction5"] = "er", k: int = 1, n: int = 10000,
        conditional: Conditional = "interaction", max_interaction_order: int = 2, max_in_degree: int = 4,
        seed: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        checks.integer(checks.data("d"), d, low=2)
        checks.choice(checks.data("graph"), graph, ("er", "sf", "interaction5"))
        checks.integer(checks.data("n"), n)
        checks.integer(checks.data("seed"), seed, low=0)
        if graph == "interaction5":
            if d != 5:
                checks.fail(checks.data("d"), d, "5 with graph='interaction5' (the fixture has 5 nodes)")
        else:
            checks.integer(checks.data("k"), k, low=1, high=d - 1)
            checks.choice(checks.data("conditional"), conditional, CONDITIONALS)
            checks.integer(checks.data("max_interaction_order"), max_interaction_order, low=1)
            checks.integer(checks.data("max_in_degree"), max_in_degree, low=1, high=MAX_PARENTS)
            if graph == "sf" and k > max_in_degree:
                checks.fail(checks.data("k"), k, f"<= max_in_degree={max_in_degree} with graph='sf' (every later "
                            "node gets k parents)")  # fmt: skip
        try:
            x, adj = mvb_problem(d, graph, k, n, conditional, max_interaction_order, max_in_degree, seed)
        except ValueError as exc:
            if "random_dag: " not in str(exc):
                raise
            raise ValueError(f"{checks.data('k')}={k}, max_in_degree={max_in_degree}: "
                             f"{str(exc).removeprefix('random_dag: ')}") from None  # fmt: skip
        self._set(x, [f"X{j}" for j in range(d)], (2,) * d, adj)


class PgmpyBIFDataModule(BinaryDataModule):
    """Forward samples of a bnlearn network shipped inside pgmpy, read offline (extra ``binary_dag``).

    The truth is the network's DAG. Binarisation can break faithfulness, so results on binarised non-binary networks
    are comparative only (card, Data).

    Args:
        name: one of asia, cancer, earthquake, win95pts, andes (binary) or sachs, child, alarm, insurance, survey.
        n: samples (``BayesianModelSampling.forward_sample(size=n, seed=seed)``).
        seed: sampling seed.
        binarize: ``first_vs_rest`` (1 iff state != the first state), ``median`` (1 iff state index >=
            ceil(card/2)) or ``null`` (native state indices). Binary networks are unchanged by both rules.
    """

    def __init__(self, name: str = "asia", n: int = 1000, seed: int = 0,
                 binarize: Binarize | None = "first_vs_rest") -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        checks.choice(checks.data("name"), name, tuple(NETWORKS))
        checks.integer(checks.data("n"), n)
        checks.integer(checks.data("seed"), seed, low=0)
        checks.choice(checks.data("binarize"), binarize, (*BINARIZE, None))
        x, adj, names, card = sample_network(name, n, seed, binarize)
        self._set(x, names, card, adj)


class BinaryCSVDataModule(BinaryDataModule):
    """A user's binary data matrix from CSV, with an optional ground truth.

    Args:
        path: CSV with a header of variable names and one row per sample; each column 0/1 or exactly two distinct
            tokens (mapped by sorted order; the mapping is said in one line).
        truth: optional true DAG: an edge-list CSV ``source,target`` naming header variables, or a ``.bif``/
            ``.bif.gz`` network.
        min_rows: fewest data rows accepted.
    """

    def __init__(self, path: str, truth: str | None = None, min_rows: int = 10) -> None:
        super().__init__()
        self.save_hyperparameters()
        checks.integer(checks.data("min_rows"), min_rows)
        if not Path(path).is_file():
            checks.fail(checks.data("path"), path, "an existing CSV file (a header of variable names, one row per "
                        "sample)")  # fmt: skip
        if truth is not None and not Path(truth).is_file():
            checks.fail(checks.data("truth"), truth, "an existing edge-list CSV (source,target) or .bif/.bif.gz file")
        x, names, mapping = read_binary_csv(path, min_rows)
        #: Per column, the token -> 0/1 mapping that was applied.
        self.mapping: dict[str, dict[str, int]] = mapping
        self._set(x, names, (2,) * x.shape[1], None if truth is None else read_truth(truth, names))
