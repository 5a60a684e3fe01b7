"""Library baselines for binary_dag (card "Baselines"): pgmpy hill climbing and PC, DAGMA-logistic, run as shipped.

Every function takes the zoo's data convention (``x`` an (n, d) integer matrix of state indices, columns in node
order) and returns a boolean adjacency over that column order, so all methods are scored by the same metrics in
:mod:`zoo.binary_dag.graphs`. pgmpy and dagma are the method's optional extra (``pip install -e ".[binary_dag]"``)
and are imported inside the functions, so ``zoo --help`` never loads them.

How the libraries are driven (pgmpy 1.1.2 and dagma 1.1.1 read for this):

- pgmpy infers a column's type from its dtype: integers are *numeric* (continuous), so the states are passed as an
  unordered ``pandas.Categorical`` (what pgmpy does itself with the state-name strings ``forward_sample`` returns).
  pgmpy's state space is the set of *observed* states; its scores are invariant to the state labels.
- Node labels. pgmpy 1.1.2 walks Python sets of node-name tuples (hill climbing's candidate moves, PC's adjacency
  sets), and ties between moves of equal score (X -> Y and Y -> X are score-equivalent) go to whichever comes first.
  With string node names that order follows Python's per-process string-hash seed, so the learned graph changes
  from one process to the next (measured, pgmpy 1.1.2, n = 1000, seed 0, PYTHONHASHSEED 0-3: HC-BIC CPDAG-SHD on
  asia 1 or 7). The default ``labels="index"`` hands pgmpy the column indices (integers hash the same in every
  process) and maps the result back, so a run is reproducible; ``labels="names"`` passes the names, as a user of
  pgmpy typically would, and inherits that variation.
- ``hill_climb``: ``HillClimbSearch(data).estimate(scoring_method=...)`` with the library's defaults (empty start
  graph, tabu length 100, epsilon 1e-4, no in-degree limit); only the progress bar is switched off.
- ``pc``: ``PC(data).estimate(ci_test="chi_square", return_type="dag", significance_level=alpha)`` with the
  library's defaults otherwise (variant "parallel", i.e. PC-stable, max_cond_vars 5). ``n_jobs`` defaults to 1 here
  instead of pgmpy's -1 (all cores): the parallel variant gives the same graph for any number of jobs.
- ``dagma_logistic``: ``DagmaLinear(loss_type="logistic").fit(X, lambda1, w_threshold)`` with the package's defaults
  (lambda1 0.03, T 5, s [1, .9, .8, .7, .6], warm_iter 3e4, max_iter 6e4, lr 3e-4). A fresh ``s`` list is passed
  on every call: dagma's default list is a mutable default argument that ``fit`` increments when it retries.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from zoo.binary_dag.graphs import find_cycle, is_dag, threshold_acyclic
from zoo.binary_dag.score import check_data

if TYPE_CHECKING:
    import pandas as pd

#: dagma's own default for ``s`` (copied per call, see the module docstring).
DAGMA_S = (1.0, 0.9, 0.8, 0.7, 0.6)


def _check_names(names: Sequence[str], d: int) -> list[str]:
    labels = [str(n) for n in names]
    if len(labels) != d:
        raise ValueError(f"names: expected {d} names (one per column of x), got {len(labels)}")
    if len(set(labels)) != d:
        dup = sorted({n for n in labels if labels.count(n) > 1})
        raise ValueError(f"names: expected distinct names, found duplicates {dup}")
    return labels


def to_frame(
    x: np.ndarray, names: Sequence[str], card: Sequence[int], labels: Literal["index", "names"] = "index"
) -> pd.DataFrame:
    """The data as pgmpy reads discrete data: one unordered categorical column per variable.

    Columns are labelled by their index (``labels="index"``, the default: see the module docstring) or by ``names``.
    """
    import pandas as pd

    if labels not in ("index", "names"):
        raise ValueError(f"labels={labels!r}: expected 'index' or 'names'")
    arr, _ = check_data(x, card)
    names = _check_names(names, arr.shape[1])
    keys: list[Any] = list(range(arr.shape[1])) if labels == "index" else names
    return pd.DataFrame({key: pd.Categorical(arr[:, j].astype(np.int64)) for j, key in enumerate(keys)})


def _adjacency(edge_list: Any, frame: pd.DataFrame, names: Sequence[str], who: str) -> np.ndarray:
    index = {key: i for i, key in enumerate(frame.columns)}
    adj = np.zeros((len(index), len(index)), dtype=bool)
    for src, tgt in edge_list:
        adj[index[src], index[tgt]] = True
    if not is_dag(adj):
        cycle = [str(names[v]) for v in find_cycle(adj) or []]
        raise RuntimeError(f"{who} returned a graph with the cycle {' -> '.join([*cycle, cycle[0]])}")
    return adj


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep pgmpy's deprecation notices (its 1.1 estimators move in 1.3) out of the output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def hill_climb(
    x: np.ndarray,
    names: Sequence[str],
    card: Sequence[int],
    scoring: Literal["bic-d", "bdeu"] = "bic-d",
    max_indegree: int | None = None,
    labels: Literal["index", "names"] = "index",
) -> np.ndarray:
    """The pgmpy ``HillClimbSearch`` with the BIC (``bic-d``) or BDeu (``bdeu``) score, library defaults otherwise.

    Args:
        x: (n, d) state indices.
        names: column names (node names in pgmpy).
        card: states per column (validation; pgmpy uses the observed states).
        scoring: pgmpy scoring method.
        max_indegree: largest parent set (None: pgmpy's default, unlimited).
        labels: pgmpy node labels, ``index`` (reproducible across processes) or ``names`` (see the module docstring).

    Returns:
        Boolean DAG adjacency over the columns of ``x``.
    """
    if scoring not in ("bic-d", "bdeu"):
        raise ValueError(f"scoring={scoring!r}: expected 'bic-d' or 'bdeu'")
    if max_indegree is not None and not (isinstance(max_indegree, int) and max_indegree >= 0):
        raise ValueError(f"max_indegree={max_indegree!r}: expected None or an integer >= 0")
    frame = to_frame(x, names, card, labels)
    with _quiet():
        from pgmpy.estimators import HillClimbSearch

        dag = HillClimbSearch(frame).estimate(scoring_method=scoring, max_indegree=max_indegree, show_progress=False)
    return _adjacency(dag.edges(), frame, names, "pgmpy HillClimbSearch")


def pc(
    x: np.ndarray,
    names: Sequence[str],
    card: Sequence[int],
    alpha: float = 0.01,
    n_jobs: int = 1,
    labels: Literal["index", "names"] = "index",
) -> np.ndarray:
    """The pgmpy ``PC`` with the chi-square test at level ``alpha``, returning pgmpy's DAG completion of its CPDAG.

    Args:
        x: (n, d) state indices.
        names: column names (node names in pgmpy).
        card: states per column (validation; pgmpy uses the observed states).
        alpha: significance level of the chi-square tests (card: 0.01).
        n_jobs: joblib workers of pgmpy's parallel PC-stable (the graph does not depend on it).
        labels: pgmpy node labels, ``index`` (reproducible across processes) or ``names`` (see the module docstring).

    Returns:
        Boolean DAG adjacency over the columns of ``x``.
    """
    if not (isinstance(alpha, int | float) and 0 < alpha < 1):
        raise ValueError(f"alpha={alpha!r}: expected a significance level in (0, 1)")
    if not (isinstance(n_jobs, int) and (n_jobs >= 1 or n_jobs == -1)):
        raise ValueError(f"n_jobs={n_jobs!r}: expected an integer >= 1, or -1 for all cores")
    frame = to_frame(x, names, card, labels)
    with _quiet():
        from pgmpy.estimators import PC

        dag = PC(frame).estimate(
            ci_test="chi_square", return_type="dag", significance_level=alpha, n_jobs=n_jobs, show_progress=False
        )
    return _adjacency(dag.edges(), frame, names, "pgmpy PC")


def dagma_logistic(
    x: np.ndarray, lambda1: float = 0.03, w_threshold: float = 0.3, **kw: Any
) -> tuple[np.ndarray, np.ndarray]:
    """DAGMA with the logistic loss (``dagma.linear.DagmaLinear(loss_type="logistic")``) on binary data.

    The package's model is first-order and has no intercept: ``P(x_j = 1 | x) = sigmoid(sum_k W_kj x_k)``.

    Args:
        x: (n, d) binary matrix (0/1).
        lambda1: L1 weight (dagma's default 0.03).
        w_threshold: dagma zeroes entries with ``|W| < w_threshold`` (its default 0.3).
        **kw: any other ``DagmaLinear.fit`` argument (``T``, ``mu_init``, ``max_iter``, ...).

    Returns:
        (boolean adjacency ``W != 0``, dagma's thresholded weight matrix ``W``). dagma's output is almost always a
        DAG; if a cycle survives (dagma's docs: "try larger T"), its weakest edges by ``|W|`` are removed with a
        warning, as :func:`zoo.binary_dag.graphs.threshold_acyclic` does.
    """
    arr = np.asarray(x)
    if arr.ndim != 2 or not np.isin(arr, (0, 1)).all():
        raise ValueError("x: expected a 2-D 0/1 matrix for dagma_logistic (the logistic loss is for binary data)")
    for key, value in (("lambda1", lambda1), ("w_threshold", w_threshold)):
        if not (isinstance(value, int | float) and value >= 0):
            raise ValueError(f"{key}={value!r}: expected a number >= 0")
    kw.setdefault("s", list(DAGMA_S))
    with _quiet():
        from dagma import linear

        bar, linear.tqdm = linear.tqdm, _silent_tqdm(linear.tqdm)
        try:
            weights = linear.DagmaLinear(loss_type="logistic").fit(
                arr.astype(np.float64), lambda1=lambda1, w_threshold=w_threshold, **kw
            )
        finally:
            linear.tqdm = bar
    adj = weights != 0
    np.fill_diagonal(adj, False)
    if not is_dag(adj):
        warnings.warn("dagma_logistic: dagma returned a cyclic graph; removed each cycle's weakest edge", stacklevel=2)
        adj = threshold_acyclic(np.where(adj, np.abs(weights), 0.0), 0.0)
    return adj, weights


def _silent_tqdm(tqdm: Any) -> Any:
    def make(*args: Any, **kwargs: Any) -> Any:
        kwargs["disable"] = True
        return tqdm(*args, **kwargs)

    return make
