"""The bnlearn networks shipped inside pgmpy's wheel, read offline (card ``binary_dag``, ``PgmpyBIFDataModule``).

The network is read from ``importlib.resources.files("pgmpy") / "utils/example_models/<name>.bif.gz"`` with
``BIFReader(string=...)``; the fallback is ``pgmpy.utils.get_example_model`` (deprecated, removed in pgmpy 1.3).
``pgmpy.example_models.load_model`` (downloads from the Hugging Face Hub) and ``pgmpy.datasets`` are never used.
Samples come from ``BayesianModelSampling(model).forward_sample(size=n, seed=seed)``; its state-name strings become
indices in the CPD's state order. pgmpy is imported inside the functions (the ``binary_dag`` extra).

Binarisation (card): ``first_vs_rest``: x = 1 iff state index != 0; ``median``: x = 1 iff index >= ceil(card / 2);
a binary column is unchanged by both. Binarisation can break faithfulness: the network's DAG stays the truth.
"""

from __future__ import annotations

import functools
import gzip
import importlib.resources
import warnings
from typing import Any, Literal

import numpy as np

from datamodules.binary.readers import BinaryDataError

Binarize = Literal["first_vs_rest", "median"]
BINARIZE = ("first_vs_rest", "median")
#: The pgmpy versions whose wheel ships the networks as read here (the ``binary_dag`` extra).
PGMPY_PIN = "pgmpy>=1.0,<1.3"
#: The card's networks: name -> (nodes, edges, all variables binary?); checked against pgmpy 1.1.2's files.
NETWORKS: dict[str, tuple[int, int, bool]] = {
    "asia": (8, 8, True),
    "cancer": (5, 4, True),
    "earthquake": (5, 4, True),
    "win95pts": (76, 112, True),
    "andes": (223, 338, True),
    "sachs": (11, 17, False),
    "child": (20, 25, False),
    "alarm": (37, 46, False),
    "insurance": (27, 52, False),
    "survey": (6, 6, False),
}


def _pgmpy_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pgmpy")
    except metadata.PackageNotFoundError:
        return "not installed"


def example_file(name: str) -> Any:
    """The packaged ``<name>.bif.gz`` inside the installed pgmpy (a ``Traversable``; it may not exist)."""
    return importlib.resources.files("pgmpy") / "utils" / "example_models" / f"{name}.bif.gz"


@functools.lru_cache(maxsize=16)
def _parse(text: str) -> Any:
    """A parsed BIF network, cached by its text (parsing takes ~0.6 s; callers must not modify the model)."""
    from pgmpy.readwrite import BIFReader

    return BIFReader(string=text).get_model()


def packaged_network(name: str) -> Any:
    """The pgmpy ``DiscreteBayesianNetwork`` of a packaged bnlearn network, read without network access.

    Raises:
        BinaryDataError: pgmpy is missing, or its wheel has no ``<name>.bif.gz`` (names the version and the pin).
    """
    try:
        import pgmpy  # noqa: F401
    except ImportError:
        raise BinaryDataError(f"network {name!r} needs pgmpy ({PGMPY_PIN}); install the extra: pip install "
                              "'zoo[binary_dag]'") from None  # fmt: skip
    path = example_file(name)
    if path.is_file():
        return _parse(gzip.decompress(path.read_bytes()).decode("utf-8"))
    try:  # the deprecated reader of the same packaged files (pgmpy < 1.3)
        from pgmpy.utils import get_example_model

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return get_example_model(name)
    except Exception:  # any failure of the fallback ends in the one error below
        pass
    raise BinaryDataError(f"network {name!r}: utils/example_models/{name}.bif.gz is not in the installed pgmpy "
                          f"{_pgmpy_version()}; the zoo reads the bnlearn networks shipped in pgmpy's wheel, offline: "
                          f"install {PGMPY_PIN}")  # fmt: skip


def binarize_states(idx: np.ndarray, card: tuple[int, ...], rule: Binarize | None) -> tuple[np.ndarray, tuple]:
    """Binarise state indices column by column (binary columns unchanged).

    Args:
        idx: uint8 (n, d) state indices, column j in ``0..card[j]-1``.
        card: states per column.
        rule: ``first_vs_rest`` (1 iff index != 0), ``median`` (1 iff index >= ceil(card/2)), or ``None`` (keep).

    Returns:
        ``(x, card)``: uint8 0/1 data and all-2 cardinalities (``rule=None``: the input unchanged).
    """
    if rule is None:
        return idx, tuple(card)
    if rule not in BINARIZE:
        raise ValueError(f"binarize={rule!r}: expected one of 'first_vs_rest', 'median' or None")
    if idx.ndim != 2 or idx.shape[1] != len(card):
        raise ValueError(f"state indices of shape {idx.shape} do not match {len(card)} cardinalities")
    cut = np.ones(len(card), dtype=np.int64) if rule == "first_vs_rest" else -(-np.asarray(card, np.int64) // 2)
    return (idx >= cut[None, :]).astype(np.uint8), (2,) * len(card)


def network_graph(model: Any) -> tuple[list[str], np.ndarray, tuple[int, ...]]:
    """``(names, adj, card)`` of a pgmpy network: names in the file's variable order."""
    names = [str(v) for v in model.nodes()]
    index = {v: i for i, v in enumerate(names)}
    adj = np.zeros((len(names), len(names)), dtype=bool)
    for a, b in model.edges():
        adj[index[str(a)], index[str(b)]] = True
    return names, adj, tuple(int(model.get_cardinality(v)) for v in names)


def sample_network(
    name: str, n: int, seed: int, binarize: Binarize | None = "first_vs_rest"
) -> tuple[np.ndarray, np.ndarray, list[str], tuple[int, ...]]:
    """Draw n forward samples of a packaged network: ``(x uint8 (n, d), adj, names, card)``.

    ``forward_sample`` seeds numpy's global generator; its state is restored afterwards.
    """
    model = packaged_network(name)
    with warnings.catch_warnings():  # pgmpy 1.1 warns on its own import of pgmpy.estimators.StructureScore
        warnings.simplefilter("ignore", FutureWarning)
        from pgmpy.sampling import BayesianModelSampling

    names, adj, card = network_graph(model)
    state = np.random.get_state()
    try:
        frame = BayesianModelSampling(model).forward_sample(size=n, seed=seed, show_progress=False)
    finally:
        np.random.set_state(state)
    x = np.empty((n, len(names)), dtype=np.uint8)
    for j, v in enumerate(names):  # a loop over variables; each column is vectorised
        states = [str(s) for s in model.get_cpds(v).state_names[v]]
        codes = np.asarray(frame[v].astype(str).map({s: i for i, s in enumerate(states)}).to_numpy(), dtype=float)
        if np.isnan(codes).any():
            raise RuntimeError(f"pgmpy sampled a state of {v!r} outside its CPD's states {states}")
        x[:, j] = codes.astype(np.uint8)
    x, card = binarize_states(x, card, binarize)
    return x, adj, names, card
