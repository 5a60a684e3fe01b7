"""MTTSeval-style evaluation of synthetic multi-table time-series EHR (card ``rawmed``, section Metrics).

Every metric is a pure function of tables in the event-table folder format: per table a frame with ``stay_id``,
``time`` (integer minutes since ``intime``, floored to 10 min) and the table's columns (``TableSpec.columns``; the item
column holds the label text), numeric columns as floats and categorical columns as text with NaN for null. A folder is
``(stays, tables)`` as ``datamodules.ehr.folder.read_folder`` returns it.

Fidelity: CDE (KS for numeric columns, natural-log Jensen-Shannon *distance* for categorical ones), I-CDE (the same
within each item), PCC and I-PCC (association matrices: Pearson, correlation ratio η, Theil's U; ``μ_abs`` and
CorAcc), predictive similarity (TRTR vs TSTR per column). Temporal: time-gap and event-count KS, next-event micro-F1.
Utility: TSTR AUROC on 6 lab-class and 5 presence tasks. Privacy: a nearest-synthetic-distance membership attack.
:func:`evaluate` runs the parts and returns one flat ``{name: value}`` dict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from datamodules.ehr.tables import ITEM_UNRELATED, TABLE_SPECS, TABLES

#: A folder as ``read_folder`` returns it: (every stay id, {table: frame}).
Folder = tuple[list[int], dict[str, pd.DataFrame]]

#: CorAcc bin edges (card): (−∞, −.5) | [−.5, −.3) | [−.3, −.1) | [−.1, .1] | (.1, .3] | (.3, .5] | (.5, ∞).
CORR_BINS = (-0.5, -0.3, -0.1, 0.1, 0.3, 0.5)

#: Lab-class utility tasks: (lab label, lower-cased), thresholds; class = number of thresholds <= the value.
LAB_TASKS: dict[str, tuple[str, tuple[float, ...]]] = {
    "creatinine": ("creatinine", (1.2, 2.0, 3.5, 5.0)),
    "platelets": ("platelet count", (20.0, 50.0, 100.0, 150.0)),
    "wbc": ("white blood cells", (4.0, 12.0)),
    "hemoglobin": ("hemoglobin", (8.0, 10.0, 12.0)),
    "bicarbonate": ("bicarbonate", (22.0, 29.0)),
    "sodium": ("sodium", (135.0, 145.0)),
}
#: Presence utility tasks: a case-insensitive regular expression on the item text of any table.
PRESENCE_TASKS: dict[str, str] = {
    "magnesium_sulfate": "magnesium sulfate",
    "heparin": "heparin",
    "kcl": "potassium chloride|kcl",
    "norepinephrine": "norepinephrine",
    "propofol": "propofol",
}
#: The parts :func:`evaluate` knows.
PARTS = ("fidelity", "temporal", "utility", "privacy", "predictive", "next_event")
#: Placeholder category for a null categorical value where nulls count as a category.
NULL = "<null>"


class MetricsInputError(ValueError):
    """A folder handed to the evaluator does not match the event-table folder format (one line: which, what)."""


# --- validation -------------------------------------------------------------------------------------------------------


def check_folder(folder: Folder, name: str, obs_hours: int = 12) -> None:
    """Raise :class:`MetricsInputError` unless ``folder`` is in the event-table folder format.

    Checked: every table of ``TABLES`` is present with ``stay_id``, ``time`` and its columns; times are integers in
    ``[0, obs_hours·60)`` and multiples of 10 (floored); every ``stay_id`` of a table is listed in the stays.

    Args:
        folder: ``(stays, tables)``.
        name: how to name the folder in the message (e.g. ``--synthetic``).
        obs_hours: the observation window in hours.
    """
    stays, tables = folder
    known = pd.Index(np.asarray(stays, dtype=np.int64))
    if known.has_duplicates:
        raise MetricsInputError(f"{name}/stays.csv: column stay_id: expected unique stay ids, found duplicates")
    for table in TABLES:
        if table not in tables:
            raise MetricsInputError(f"{name}/{table}.csv: missing table; expected one CSV per table {list(TABLES)}")
        frame = tables[table]
        expected = ["stay_id", "time", *TABLE_SPECS[table].columns]
        if missing := [c for c in expected if c not in frame.columns]:
            raise MetricsInputError(
                f"{name}/{table}.csv: missing column(s) {missing}; expected header {','.join(expected)}"
            )
        time = frame["time"].to_numpy()
        if len(time) and not np.issubdtype(time.dtype, np.integer):
            raise MetricsInputError(f"{name}/{table}.csv: column time: expected integer minutes, found {time.dtype}")
        if len(time) and (time.min() < 0 or time.max() >= obs_hours * 60 or (time % 10 != 0).any()):
            bad = time[(time < 0) | (time >= obs_hours * 60) | (time % 10 != 0)][0]
            raise MetricsInputError(
                f"{name}/{table}.csv: column time: expected multiples of 10 in [0, {obs_hours * 60}) "
                f"(obs_hours={obs_hours}), found {bad}"
            )
        unknown = ~frame["stay_id"].isin(known)
        if unknown.any():
            raise MetricsInputError(
                f"{name}/{table}.csv: column stay_id: {int(unknown.sum())} row(s) of stays not listed in stays.csv "
                f"(first {int(frame['stay_id'][unknown].iloc[0])})"
            )


# --- distances between two samples ------------------------------------------------------------------------------------


def js_distance(real: pd.Series, synthetic: pd.Series) -> float:
    """Jensen-Shannon *distance* (natural log) between the category frequencies of two samples (nulls dropped).

    ``scipy.spatial.distance.jensenshannon`` on frequencies aligned over the union of categories: disjoint supports
    give ``√ln 2 = 0.8326``. An empty sample against a non-empty one scores 1 [ours]; two empty samples NaN.
    """
    from scipy.spatial.distance import jensenshannon

    p, q = real.dropna().value_counts(), synthetic.dropna().value_counts()
    if p.empty or q.empty:
        return math.nan if p.empty and q.empty else 1.0
    index = p.index.union(q.index)
    return float(jensenshannon(p.reindex(index, fill_value=0).to_numpy(float), q.reindex(index, fill_value=0)))


def ks_distance(real: pd.Series | np.ndarray, synthetic: pd.Series | np.ndarray) -> float:
    """Two-sample KS statistic of the non-null values; an empty sample against a non-empty one scores 1 [ours]."""
    from scipy.stats import ks_2samp

    a, b = _finite(real), _finite(synthetic)
    if a.size == 0 or b.size == 0:
        return math.nan if a.size == 0 and b.size == 0 else 1.0
    return float(ks_2samp(a, b).statistic)


def _finite(values: pd.Series | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    return array[~np.isnan(array)]


def grouped_js(real: pd.DataFrame, synthetic: pd.DataFrame, group: str, value: str) -> pd.Series:
    """:func:`js_distance` of ``value`` within each ``group`` present in both frames (one vectorised pass).

    Groups present in only one frame, or whose values are all null in one frame, are absent or scored as
    :func:`js_distance` scores them (empty vs non-empty: 1; both empty: NaN).
    """
    counts = pd.concat(
        {"p": real.groupby([group, value]).size(), "q": synthetic.groupby([group, value]).size()}, axis=1
    ).fillna(0.0)
    groups = pd.Index(real[group].dropna().unique()).intersection(pd.Index(synthetic[group].dropna().unique()))
    totals = counts.groupby(level=0).sum()
    p = counts["p"] / counts["p"].groupby(level=0).transform("sum")
    q = counts["q"] / counts["q"].groupby(level=0).transform("sum")
    m = (p + q) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p / m), 0.0) + np.where(q > 0, q * np.log(q / m), 0.0)
    js = np.sqrt(np.maximum(pd.Series(terms, index=counts.index).groupby(level=0).sum() / 2, 0.0))
    out = js.reindex(groups)
    totals = totals.reindex(groups, fill_value=0.0)
    one_empty = (totals["p"] == 0) ^ (totals["q"] == 0)
    out[one_empty] = 1.0
    out[(totals["p"] == 0) & (totals["q"] == 0)] = math.nan
    return out


def grouped_ks(real: pd.DataFrame, synthetic: pd.DataFrame, group: str, value: str) -> pd.Series:
    """:func:`ks_distance` of ``value`` within each ``group`` present in both frames (exact, one vectorised pass).

    Both samples are sorted together per group; the statistic is the largest gap between the two empirical CDFs,
    read after the last of each run of tied values (as ``scipy.stats.ks_2samp``).
    """
    groups = pd.Index(real[group].dropna().unique()).intersection(pd.Index(synthetic[group].dropna().unique()))
    both = pd.concat(
        [
            pd.DataFrame({"g": real[group], "v": real[value].astype(float), "r": 1.0}),
            pd.DataFrame({"g": synthetic[group], "v": synthetic[value].astype(float), "r": 0.0}),
        ],
        ignore_index=True,
    )
    both = both[both["g"].isin(groups) & both["v"].notna()].sort_values(["g", "v"], kind="mergesort")
    n_real = both.groupby("g")["r"].sum().reindex(groups, fill_value=0.0)
    n_syn = (both.groupby("g")["r"].count() - both.groupby("g")["r"].sum()).reindex(groups, fill_value=0.0)
    cum_r = both.groupby("g")["r"].cumsum() / both["g"].map(n_real)
    cum_s = (both.groupby("g").cumcount() + 1 - both.groupby("g")["r"].cumsum()) / both["g"].map(n_syn)
    key = both[["g", "v"]]
    last_of_tie = ~key.eq(key.shift(-1)).all(axis=1)
    gap = (cum_r - cum_s).abs()[last_of_tie]
    out = gap.groupby(both["g"][last_of_tie]).max().reindex(groups)
    one_empty = (n_real == 0) ^ (n_syn == 0)
    out[one_empty] = 1.0
    out[(n_real == 0) & (n_syn == 0)] = math.nan
    return out


# --- CDE and I-CDE ----------------------------------------------------------------------------------------------------


def cde(real: dict[str, pd.DataFrame], synthetic: dict[str, pd.DataFrame]) -> dict[str, float]:
    """Column-wise density estimation: per column KS (numeric) or JS distance (categorical) of non-null values.

    Returns ``cde/<table>/<column>``, ``cde/<table>`` (mean over columns), ``cde/mean`` (mean over tables),
    ``null_gap/<table>/<column>`` (|null rate real − null rate synthetic|) and ``null_gap/mean``. Columns null in both
    are left out of the means.
    """
    out: dict[str, float] = {}
    table_means, gaps = [], []
    for table in TABLES:
        spec = TABLE_SPECS[table]
        r, s = real[table], synthetic[table]
        scores = []
        for col in spec.columns:
            score = ks_distance(r[col], s[col]) if col in spec.numeric else js_distance(r[col], s[col])
            out[f"cde/{table}/{col}"] = score
            if not math.isnan(score):
                scores.append(score)
            gap = abs(_null_rate(r[col]) - _null_rate(s[col]))
            out[f"null_gap/{table}/{col}"] = gap
            if not math.isnan(gap):
                gaps.append(gap)
        out[f"cde/{table}"] = float(np.mean(scores)) if scores else math.nan
        if scores:
            table_means.append(out[f"cde/{table}"])
    out["cde/mean"] = float(np.mean(table_means)) if table_means else math.nan
    out["null_gap/mean"] = float(np.mean(gaps)) if gaps else math.nan
    return out


def _null_rate(col: pd.Series) -> float:
    return float(col.isna().mean()) if len(col) else math.nan


def item_scores(real: pd.DataFrame, synthetic: pd.DataFrame, table: str) -> pd.DataFrame:
    """Per real item of ``table``: its real row count and its I-CDE score (mean column distance within the item).

    Columns are the table's columns except the item column and ``ITEM_UNRELATED``. A real item absent from the
    synthetic table scores 1 [ours]; an item whose columns are null in both frames scores 0 (nothing differs).
    """
    spec = TABLE_SPECS[table]
    item = spec.item
    columns = [c for c in spec.columns if c != item and c not in ITEM_UNRELATED.get(table, ())]
    rows = real[item].value_counts()
    per_col = []
    for col in columns:
        fn = grouped_ks if col in spec.numeric else grouped_js
        per_col.append(fn(real, synthetic, item, col).rename(col))
    present = rows.index.isin(synthetic[item].dropna().unique())
    if per_col:
        mean = pd.concat(per_col, axis=1).reindex(rows.index).mean(axis=1, skipna=True).fillna(0.0)
    else:
        mean = pd.Series(0.0, index=rows.index)
    score = mean.where(present, 1.0)
    return pd.DataFrame({"rows": rows.to_numpy(), "score": score.to_numpy(), "present": present}, index=rows.index)


def item_cde(
    real: dict[str, pd.DataFrame], synthetic: dict[str, pd.DataFrame], top: int = 50, min_frac: float = 0.001
) -> dict[str, float]:
    """Item-wise CDE over the items of all tables (``icde/all``, ``icde/top<top>``, ``icde/frequent``).

    ``icde/top<top>`` averages the ``top`` most frequent real items, ``icde/frequent`` the items with at least
    ``min_frac`` of the real rows; ``icde/coverage`` is the share of real items the synthetic data has.
    """
    scores = pd.concat([item_scores(real[t], synthetic[t], t) for t in TABLES], keys=list(TABLES))
    if scores.empty:
        return {"icde/all": math.nan, "icde/top50": math.nan, "icde/frequent": math.nan, "icde/coverage": math.nan}
    ranked = scores.sort_values("rows", ascending=False, kind="mergesort")
    frequent = scores[scores["rows"] >= min_frac * scores["rows"].sum()]
    return {
        "icde/all": float(scores["score"].mean()),
        f"icde/top{top}": float(ranked["score"].iloc[:top].mean()),
        "icde/frequent": float(frequent["score"].mean()) if len(frequent) else math.nan,
        "icde/coverage": float(scores["present"].mean()),
        "icde/n_items": float(len(scores)),
    }


# --- association matrices, PCC, I-PCC ---------------------------------------------------------------------------------


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of the pairs where both are non-null; NaN when undefined (constant, < 2 pairs)."""
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if x.size < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum() / den) if den > 0 else math.nan


def correlation_ratio(categories: np.ndarray, values: np.ndarray) -> float:
    """η = √(Σ_c n_c (ȳ_c − ȳ)² / Σ (y − ȳ)²) over the non-null ``values``; NaN when ``values`` are constant.

    Args:
        categories: integer category codes (``pd.factorize``), one per row.
        values: floats, one per row (NaN = null, left out).
    """
    ok = ~np.isnan(values)
    codes, y = categories[ok], values[ok]
    if y.size == 0:
        return math.nan
    total = float(((y - y.mean()) ** 2).sum())
    if total <= 0:
        return math.nan
    codes = np.unique(codes, return_inverse=True)[1]
    n = np.bincount(codes).astype(float)
    means = np.bincount(codes, weights=y) / n
    between = float((n * (means - y.mean()) ** 2).sum())
    return math.sqrt(min(between / total, 1.0))


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def theils_u(x: np.ndarray, y: np.ndarray) -> float:
    """Theil's U(x|y) = (H(x) − H(x|y)) / H(x), asymmetric; 1 when H(x) = 0.

    Args:
        x: integer category codes of the predicted variable.
        y: integer category codes of the given variable (same length).
    """
    x = np.unique(x, return_inverse=True)[1]
    y = np.unique(y, return_inverse=True)[1]
    if x.size == 0:
        return math.nan
    h_x = _entropy(np.bincount(x).astype(float))
    if h_x == 0:
        return 1.0
    joint = np.bincount(y * (x.max() + 1) + x, minlength=(y.max() + 1) * (x.max() + 1)).reshape(-1, x.max() + 1)
    n_y = joint.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = joint / n_y[:, None]
        h_cond = -np.nansum(np.where(joint > 0, joint * np.log(p), 0.0)) / x.size
    return float((h_x - h_cond) / h_x)


def association_matrix(
    frame: pd.DataFrame,
    numeric: Sequence[str],
    categorical: Sequence[str],
    categorical_null: Literal["category", "drop"] = "category",
) -> pd.DataFrame:
    """The association matrix C over ``numeric`` and ``categorical`` columns of ``frame``; C[x, y] reads "x given y".

    num–num: Pearson (pairwise complete rows). cat–num: the correlation ratio η of the numeric column given the
    categorical one, in both cells. cat–cat: Theil's U(x|y) (asymmetric). NaN → 0; the diagonal is 1.

    Args:
        frame: the table.
        numeric: numeric columns.
        categorical: categorical columns.
        categorical_null: ``category`` [ours]: a null categorical value is a category of its own (a null ``flag``
            means "normal"); ``drop``: rows where it is null are left out of that pair.
    """
    names = [*numeric, *categorical]
    k = len(names)
    c = np.eye(k)
    nums = {col: frame[col].to_numpy(dtype=float) for col in numeric}
    cats = {col: pd.factorize(frame[col], use_na_sentinel=categorical_null == "drop")[0] for col in categorical}
    for i, a in enumerate(names):
        for j in range(i + 1, k):
            b = names[j]
            if a in nums and b in nums:
                c[i, j] = c[j, i] = pearson(nums[a], nums[b])
            elif a in cats and b in cats:
                keep = (cats[a] >= 0) & (cats[b] >= 0)
                c[i, j] = theils_u(cats[a][keep], cats[b][keep])
                c[j, i] = theils_u(cats[b][keep], cats[a][keep])
            else:
                cat, num = (a, b) if a in cats else (b, a)
                keep = cats[cat] >= 0
                c[i, j] = c[j, i] = correlation_ratio(cats[cat][keep], nums[num][keep])
    return pd.DataFrame(np.nan_to_num(c, nan=0.0), index=names, columns=names)


def corr_bins(values: np.ndarray) -> np.ndarray:
    """CorAcc bin of each association, −3 … 3.

    Bins: (−∞, −.5) | [−.5, −.3) | [−.3, −.1) | [−.1, .1] none | (.1, .3] | (.3, .5] | (.5, ∞).
    """
    v = np.asarray(values, dtype=float)
    neg = np.searchsorted(np.array([-0.5, -0.3, -0.1]), v, side="right")  # 0: < −.5, 1: [−.5, −.3), 2: [−.3, −.1)
    pos = np.searchsorted(np.array([0.1, 0.3, 0.5]), v, side="left")  # 1: (.1, .3], 2: (.3, .5], 3: > .5
    return np.where(v < -0.1, neg - 3, np.where(v > 0.1, pos, 0))


def matrix_scores(real: pd.DataFrame, synthetic: pd.DataFrame) -> tuple[float, float]:
    """``(μ_abs, CorAcc)`` of two association matrices over their off-diagonal entries."""
    off = ~np.eye(len(real), dtype=bool)
    a, b = real.to_numpy()[off], synthetic.to_numpy()[off]
    if a.size == 0:
        return math.nan, math.nan
    return float(np.abs(a - b).mean()), float((corr_bins(a) == corr_bins(b)).mean())


def pcc(real: dict[str, pd.DataFrame], synthetic: dict[str, pd.DataFrame]) -> dict[str, float]:
    """PCC per table over its columns: ``pcc/<table>/mu_abs``, ``corr_acc/<table>``, and their means over tables."""
    out: dict[str, float] = {}
    for table in TABLES:
        spec = TABLE_SPECS[table]
        cats = [c for c in spec.columns if c not in spec.numeric]
        mats = [association_matrix(f, spec.numeric, cats) for f in (real[table], synthetic[table])]
        out[f"pcc/{table}/mu_abs"], out[f"corr_acc/{table}"] = matrix_scores(*mats)
    out["pcc/mean"] = float(np.nanmean([out[f"pcc/{t}/mu_abs"] for t in TABLES]))
    out["corr_acc/mean"] = float(np.nanmean([out[f"corr_acc/{t}"] for t in TABLES]))
    return out


def item_pcc(
    real: dict[str, pd.DataFrame], synthetic: dict[str, pd.DataFrame], min_rows: int = 100
) -> dict[str, float]:
    """I-PCC: ``μ_abs`` within each item with at least ``min_rows`` rows in both frames, averaged over those items.

    Columns are the table's columns except the item column and ``ITEM_UNRELATED``. Returns ``ipcc/mean``,
    ``ipcc/<table>`` and ``ipcc/n_items``.
    """
    out: dict[str, float] = {}
    every = []
    for table in TABLES:
        spec = TABLE_SPECS[table]
        skip = {spec.item, *ITEM_UNRELATED.get(table, ())}
        nums = [c for c in spec.numeric if c not in skip]
        cats = [c for c in spec.columns if c not in spec.numeric and c not in skip]
        r, s = real[table], synthetic[table]
        rc, sc = r[spec.item].value_counts(), s[spec.item].value_counts()
        items = [i for i in rc.index if rc[i] >= min_rows and sc.get(i, 0) >= min_rows]
        r_groups, s_groups = dict(tuple(r.groupby(spec.item))), dict(tuple(s.groupby(spec.item)))
        scores = [
            matrix_scores(association_matrix(r_groups[i], nums, cats), association_matrix(s_groups[i], nums, cats))[0]
            for i in items
        ]
        out[f"ipcc/{table}"] = float(np.mean(scores)) if scores else math.nan
        every += scores
    out["ipcc/mean"] = float(np.mean(every)) if every else math.nan
    out["ipcc/n_items"] = float(len(every))
    return out


# --- predictive similarity --------------------------------------------------------------------------------------------


def smape(actual: np.ndarray, predicted: np.ndarray) -> float:
    """200 · mean(|a − p| / (|a| + |p|)), with 0/0 = 0."""
    a, p = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    den = np.abs(a) + np.abs(p)
    ratio = np.divide(np.abs(a - p), den, out=np.zeros_like(den), where=den > 0)
    return float(200.0 * ratio.mean())


def dedup_against(test: pd.DataFrame, train: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """The rows of ``test`` whose values over ``columns`` (nulls equal to nulls) equal no row of ``train``."""
    cols = list(columns)
    seen = train[cols].astype(str).drop_duplicates()
    keys = test[cols].astype(str)
    merged = keys.merge(seen.assign(_in_train=True), on=cols, how="left")
    return test[merged["_in_train"].isna().to_numpy()]


def _features(
    train: pd.DataFrame, others: Sequence[pd.DataFrame], numeric: list[str], categorical: list[str], min_frac: float
) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numeric = [c for c in numeric if train[c].notna().any()]  # an all-null column carries nothing (and breaks HGB)
    parts = []
    if numeric:
        parts.append(("num", StandardScaler(), numeric))
    if categorical:
        # categories under min_frac of the training rows share one "infrequent" column [ours]: a free-text column
        # (labevents.value) would otherwise give thousands of dense one-hot columns
        onehot = OneHotEncoder(
            handle_unknown="infrequent_if_exist", sparse_output=False, min_frequency=min_frac if min_frac > 0 else None
        )
        parts.append(("cat", onehot, categorical))
    encoder = ColumnTransformer(parts, sparse_threshold=0.0)
    prep = [f[[*numeric, *categorical]].astype({c: object for c in categorical}) for f in (train, *others)]
    for f in prep:
        f[categorical] = f[categorical].fillna(NULL).astype(str)
    return encoder.fit_transform(prep[0]).astype(float), [encoder.transform(f).astype(float) for f in prep[1:]]


def _gbm(kind: Literal["classifier", "regressor"], gbm: Literal["sklearn", "xgboost"], seed: int) -> Any:
    match gbm:
        case "sklearn":
            from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

            cls = HistGradientBoostingClassifier if kind == "classifier" else HistGradientBoostingRegressor
            # no early stopping: exactly 100 iterations (its stratified split also fails on singleton classes)
            return cls(max_iter=100, early_stopping=False, random_state=seed)
        case "xgboost":
            import xgboost

            cls = xgboost.XGBClassifier if kind == "classifier" else xgboost.XGBRegressor
            return cls(n_estimators=100, tree_method="hist", subsample=0.9, random_state=seed, n_jobs=1)
    raise ValueError(f"gbm={gbm!r}: expected one of 'sklearn', 'xgboost'")


def _fit_predict(
    train: pd.DataFrame, test: pd.DataFrame, target: str, numeric: list[str], categorical: list[str],
    is_categorical: bool, gbm: Literal["sklearn", "xgboost"], seed: int, onehot_min_frac: float,
) -> np.ndarray:  # fmt: skip
    x_train, (x_test,) = _features(train, [test], numeric, categorical, onehot_min_frac)
    y = train[target].to_numpy()
    if is_categorical:
        classes, codes = np.unique(y.astype(str), return_inverse=True)
        if classes.size == 1:  # one class: the GBM cannot fit; predict it
            return np.full(len(test), classes[0], dtype=object)
        model = _gbm("classifier", gbm, seed).fit(x_train, codes)
        return classes[np.asarray(model.predict(x_test), dtype=int)].astype(object)
    return np.asarray(_gbm("regressor", gbm, seed).fit(x_train, y.astype(float)).predict(x_test), dtype=float)


def predictive_similarity(
    real_train: dict[str, pd.DataFrame],
    real_test: dict[str, pd.DataFrame],
    synthetic: dict[str, pd.DataFrame],
    gbm: Literal["sklearn", "xgboost"] = "sklearn",
    min_class_frac: float = 0.001,
    seed: int = 0,
    targets: Sequence[str] | None = None,
    onehot_min_frac: float = 0.001,
) -> dict[str, float]:
    """Each column in turn is the target of a GBM on the other columns: TRTR (fit on real train) vs TSTR (on synthetic).

    Both score real-test rows de-duplicated against the real-train rows; rows with a null target are left out, and
    categorical classes under ``min_class_frac`` of the real-train rows are removed from all three frames. Categorical
    targets: ``er_*`` = 100·(1 − accuracy) and macro ``f1_*``; numeric targets: ``smape_*``. Keys
    ``predictive/<table>/<column>/<score>_{trtr,tstr}`` and the means ``predictive/<score>_{trtr,tstr}``.

    Args:
        real_train: real train tables (TRTR fit, de-duplication, rare classes).
        real_test: real test tables (scored).
        synthetic: synthetic tables (TSTR fit).
        gbm: ``sklearn`` (HistGradientBoosting, 100 iterations) or ``xgboost`` (100 trees, hist, subsample 0.9).
        min_class_frac: classes under this share of the real-train rows are removed.
        seed: the GBMs' random state.
        targets: ``<table>/<column>`` targets to run (default: every column of every table).
        onehot_min_frac: input categories under this share of the training rows share one one-hot column [ours];
            0 keeps every category.
    """
    from sklearn.metrics import accuracy_score, f1_score

    out: dict[str, float] = {}
    for table in TABLES:
        spec = TABLE_SPECS[table]
        cols = list(spec.columns)
        test_all = dedup_against(real_test[table], real_train[table], cols)
        for target in cols:
            if targets is not None and f"{table}/{target}" not in targets:
                continue
            is_cat = target not in spec.numeric
            numeric = [c for c in spec.numeric if c != target]
            categorical = [c for c in cols if c not in spec.numeric and c != target]
            frames = [f[f[target].notna()] for f in (real_train[table], synthetic[table], test_all)]
            if is_cat:
                freq = frames[0][target].value_counts(normalize=True)
                rare = set(freq.index[freq < min_class_frac])
                frames = [f[~f[target].isin(rare)] for f in frames]
            r_train, s_train, test = frames
            if test.empty or r_train.empty or s_train.empty:
                continue
            truth = test[target].to_numpy()
            for arm, train in (("trtr", r_train), ("tstr", s_train)):
                pred = _fit_predict(train, test, target, numeric, categorical, is_cat, gbm, seed, onehot_min_frac)
                key = f"predictive/{table}/{target}"
                if is_cat:
                    truth_s = truth.astype(str)
                    out[f"{key}/er_{arm}"] = 100.0 * (1.0 - accuracy_score(truth_s, pred.astype(str)))
                    out[f"{key}/f1_{arm}"] = float(f1_score(truth_s, pred.astype(str), average="macro"))
                else:
                    out[f"{key}/smape_{arm}"] = smape(truth.astype(float), pred)
    for score in ("er", "f1", "smape"):
        for arm in ("trtr", "tstr"):
            values = [v for k, v in out.items() if k.endswith(f"/{score}_{arm}")]
            if values:
                out[f"predictive/{score}_{arm}"] = float(np.mean(values))
    return out


# --- temporal ---------------------------------------------------------------------------------------------------------


def pooled_times(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """``(stay_id, time)`` of every event of every table, sorted."""
    frames = [tables[t][["stay_id", "time"]] for t in TABLES]
    return pd.concat(frames, ignore_index=True).sort_values(["stay_id", "time"], kind="mergesort")


def time_gaps(tables: dict[str, pd.DataFrame]) -> np.ndarray:
    """Gaps (minutes) between consecutive events of a stay, all tables pooled (zeros included)."""
    times = pooled_times(tables)
    gaps = times.groupby("stay_id")["time"].diff()
    return gaps.dropna().to_numpy(dtype=float)


def time_gap_ks(real: dict[str, pd.DataFrame], synthetic: dict[str, pd.DataFrame]) -> dict[str, float]:
    """KS of real vs synthetic time gaps and absolute times.

    Keys: gaps with zeros ``time_gap_ks/all``, without ``time_gap_ks/nonzero``, absolute times ``time_ks/absolute``.
    """
    gr, gs = time_gaps(real), time_gaps(synthetic)
    return {
        "time_gap_ks/all": ks_distance(gr, gs),
        "time_gap_ks/nonzero": ks_distance(gr[gr > 0], gs[gs > 0]),
        "time_ks/absolute": ks_distance(pooled_times(real)["time"], pooled_times(synthetic)["time"]),
    }


def event_counts(folder: Folder) -> np.ndarray:
    """Events per stay (all tables), one entry per listed stay (stays without events count 0)."""
    stays, tables = folder
    counts = pooled_times(tables)["stay_id"].value_counts()
    return counts.reindex(pd.Index(stays, dtype=np.int64), fill_value=0).to_numpy(dtype=float)


def event_count_ks(real: Folder, synthetic: Folder) -> dict[str, float]:
    """KS of per-stay event counts (``event_count_ks``), plus the median and IQR of each side."""
    cr, cs = event_counts(real), event_counts(synthetic)
    out = {"event_count_ks": ks_distance(cr, cs)}
    for side, counts in (("real", cr), ("synthetic", cs)):
        q1, med, q3 = np.percentile(counts, [25, 50, 75]) if counts.size else (math.nan,) * 3
        out[f"event_count/median_{side}"], out[f"event_count/iqr_{side}"] = float(med), float(q3 - q1)
    return out


def item_keys(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """``stay_id``, ``time`` and ``key`` = ``<table>:<item>`` of every event (null items keep a key of their own)."""
    frames = [
        pd.DataFrame(
            {
                "stay_id": tables[t]["stay_id"].to_numpy(),
                "time": tables[t]["time"].to_numpy(),
                "key": t + ":" + tables[t][TABLE_SPECS[t].item].astype(object).fillna(NULL).astype(str),
            }
        )
        for t in TABLES
    ]
    return pd.concat(frames, ignore_index=True)


def event_sets(tables: dict[str, pd.DataFrame], vocab: Sequence[str]) -> list[np.ndarray]:
    """Per stay with events, the multi-hot ``(times, len(vocab))`` float32 matrix of its (table, item) sets by time."""
    keys = item_keys(tables)
    index = pd.Index(list(vocab))
    keys = keys.assign(col=index.get_indexer(keys["key"]))
    keys = keys[keys["col"] >= 0].drop_duplicates(["stay_id", "time", "col"])
    steps = keys[["stay_id", "time"]].drop_duplicates().sort_values(["stay_id", "time"])
    steps = steps.assign(row=np.arange(len(steps)))
    keys = keys.merge(steps, on=["stay_id", "time"])
    dense = np.zeros((len(steps), len(index)), dtype=np.float32)
    dense[keys["row"].to_numpy(), keys["col"].to_numpy()] = 1.0
    bounds = np.flatnonzero(np.diff(steps["stay_id"].to_numpy())) + 1
    return np.split(dense, bounds) if len(steps) else []


def next_event_f1(
    train: dict[str, pd.DataFrame],
    test: dict[str, pd.DataFrame],
    vocab: Sequence[str] | None = None,
    hidden: int = 128,
    epochs: int = 20,
    lr: float = 1e-3,
    batch_size: int = 64,
    threshold: float = 0.1,
    seed: int = 0,
) -> float:
    """Micro-F1 of an LSTM that predicts the next (table, item) set of a stay from the sets so far.

    Sets are multi-hot vectors per ``(stay, time)``; the LSTM (``hidden`` units) reads the sets 1..t and predicts set
    t+1 through a sigmoid, trained with BCE on ``train`` for ``epochs`` epochs (Adam, ``lr``) [ours: epochs, lr, batch];
    a label is predicted where its probability exceeds ``threshold``. Scored on every next set of ``test``.

    Args:
        train: the tables the model learns from (real train: TRTR, synthetic: TSTR).
        test: real test tables.
        vocab: the ``<table>:<item>`` keys (default: those of ``train`` and ``test``); pass one list to compare arms.
        hidden: LSTM hidden size.
        epochs: training epochs.
        lr: Adam learning rate.
        batch_size: stays per step.
        threshold: the decision threshold on the sigmoid.
        seed: torch seed of the initialisation and the shuffling.
    """
    import torch
    from torch import nn

    if vocab is None:
        vocab = sorted(set(item_keys(train)["key"]) | set(item_keys(test)["key"]))
    seq_train = [s for s in event_sets(train, vocab) if len(s) > 1]
    seq_test = [s for s in event_sets(test, vocab) if len(s) > 1]
    if not seq_test:
        return math.nan
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    lstm, head = nn.LSTM(len(vocab), hidden, batch_first=True), nn.Linear(hidden, len(vocab))
    params = [*lstm.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=lr)

    def batch(seqs: list[np.ndarray]) -> tuple[Any, Any, Any]:
        pad = nn.utils.rnn.pad_sequence
        x = pad([torch.from_numpy(s[:-1]) for s in seqs], batch_first=True)
        y = pad([torch.from_numpy(s[1:]) for s in seqs], batch_first=True)
        lengths = torch.tensor([len(s) - 1 for s in seqs])
        return x, y, torch.arange(x.shape[1])[None, :] < lengths[:, None]

    for _ in range(epochs if seq_train else 0):
        order = torch.randperm(len(seq_train), generator=gen).tolist()
        for start in range(0, len(order), batch_size):
            x, y, mask = batch([seq_train[i] for i in order[start : start + batch_size]])
            logits = head(lstm(x)[0])
            loss = nn.functional.binary_cross_entropy_with_logits(logits[mask], y[mask])
            opt.zero_grad()
            loss.backward()
            opt.step()
    tp = fp = fn = 0.0
    with torch.no_grad():
        for start in range(0, len(seq_test), batch_size):
            x, y, mask = batch(seq_test[start : start + batch_size])
            pred = torch.sigmoid(head(lstm(x)[0]))[mask] > threshold
            truth = y[mask] > 0.5
            tp += float((pred & truth).sum())
            fp += float((pred & ~truth).sum())
            fn += float((~pred & truth).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else math.nan


# --- utility (TSTR) and privacy (MIA) ---------------------------------------------------------------------------------


def stay_features(folder: Folder, until: int | None = None, columns: pd.Index | None = None) -> pd.DataFrame:
    """MEDS-TAB-like features per listed stay (events with ``time < until``; all when ``None``).

    Per (table, item): the event count, and per numeric column of the table its last non-null value and mean.

    Args:
        folder: ``(stays, tables)``.
        until: keep events with ``time < until`` (minutes).
        columns: reindex to these feature columns (absent ones: count 0, values NaN); default: those found.
    """
    stays, tables = folder
    parts = []
    for t in TABLES:
        spec, frame = TABLE_SPECS[t], tables[t]
        if until is not None:
            frame = frame[frame["time"] < until]
        frame = frame.sort_values(["stay_id", "time"], kind="mergesort").assign(
            _item=t + ":" + frame[spec.item].astype(object).fillna(NULL).astype(str)
        )
        group = frame.groupby(["stay_id", "_item"], sort=False)
        stats = [group.size().rename("count").to_frame()]
        numeric = list(spec.numeric)
        stats.append(group[numeric].last().add_suffix(":last"))  # last non-null value of each column
        stats.append(group[numeric].mean().add_suffix(":mean"))
        wide = pd.concat(stats, axis=1).unstack("_item")
        wide.columns = [f"{item}:{stat}" for stat, item in wide.columns]
        parts.append(wide)
    features = pd.concat(parts, axis=1).reindex(pd.Index(stays, dtype=np.int64, name="stay_id"))
    counts = [c for c in features.columns if c.endswith(":count")]
    features[counts] = features[counts].fillna(0.0)
    if columns is not None:
        features = features.reindex(columns=columns)
        counts = [c for c in columns if c.endswith(":count")]
        features[counts] = features[counts].fillna(0.0)
    return features.astype(float)


def utility_labels(folder: Folder, obs_hours: int = 12) -> pd.DataFrame:
    """Task labels per listed stay from events with ``time >= obs_hours·30`` (the second half); NaN = no label.

    Lab-class tasks: the class (number of thresholds <= value) of the first ``valuenum`` of the lab in the second
    half (case-insensitive label); stays without one get NaN. Presence tasks: 1 if any table's item matches the
    pattern (case-insensitive) in the second half, else 0.
    """
    stays, tables = folder
    half = obs_hours * 30
    index = pd.Index(stays, dtype=np.int64, name="stay_id")
    labels = pd.DataFrame(index=index)
    labs = tables["labevents"]
    labs = labs[labs["time"] >= half].sort_values(["stay_id", "time"], kind="mergesort")
    names = labs["itemid"].astype(object).fillna("").astype(str).str.lower()
    for task, (label, edges) in LAB_TASKS.items():
        rows = labs[(names == label).to_numpy() & labs["valuenum"].notna().to_numpy()]
        first = rows.groupby("stay_id")["valuenum"].first()
        cls = pd.Series(np.searchsorted(np.asarray(edges), first.to_numpy(), side="right"), index=first.index)
        labels[task] = cls.reindex(index).astype(float)
    items = item_keys(tables)
    items = items[items["time"] >= half]
    text = items["key"].str.split(":", n=1).str[1]
    for task, pattern in PRESENCE_TASKS.items():
        hit = items["stay_id"][text.str.contains(pattern, case=False, regex=True).to_numpy()].unique()
        labels[task] = index.isin(hit).astype(float)
    return labels


def macro_ovr_auroc(truth: np.ndarray, proba: pd.DataFrame) -> float:
    """Mean over the classes of ``truth`` (each with positives and negatives) of the AUROC of ``proba[class]``."""
    from sklearn.metrics import roc_auc_score

    scores = []
    for cls in np.unique(truth):
        positive = truth == cls
        if positive.all():
            continue
        score = proba[cls].to_numpy() if cls in proba.columns else np.zeros(len(truth))
        scores.append(roc_auc_score(positive, score))
    return float(np.mean(scores)) if scores else math.nan


def utility(
    train: Folder,
    test: Folder,
    obs_hours: int = 12,
    tasks: Sequence[str] | None = None,
    gbm: Literal["sklearn", "xgboost"] = "sklearn",
    seed: int = 0,
) -> dict[str, float]:
    """Macro one-vs-rest AUROC per task of a GBM fit on ``train`` and scored on the stays of ``test``.

    Inputs: :func:`stay_features` of events with ``time < obs_hours·30``, columns fixed by ``train``. Labels:
    :func:`utility_labels`. A task whose train labels hold one class predicts it (AUROC 0.5); a task whose test labels
    hold one class is NaN. Returns ``{task: auroc}`` and ``mean`` over the non-NaN tasks.

    Args:
        train: where the model learns (synthetic: TSTR; real train: TRTR).
        test: the real stays that score (test, or test + holdout; see :func:`merge_folders`).
        obs_hours: the observation window in hours.
        tasks: a subset of ``LAB_TASKS`` and ``PRESENCE_TASKS`` (default: all 11).
        gbm: ``sklearn`` (HistGradientBoostingClassifier, 100 iterations) or ``xgboost``.
        seed: the GBM's random state.
    """
    names = list(tasks) if tasks is not None else [*LAB_TASKS, *PRESENCE_TASKS]
    if unknown := [t for t in names if t not in LAB_TASKS and t not in PRESENCE_TASKS]:
        raise ValueError(f"tasks={unknown}: expected names from {[*LAB_TASKS, *PRESENCE_TASKS]}")
    half = obs_hours * 30
    x_train = stay_features(train, until=half)
    x_train = x_train.loc[:, x_train.notna().any()]  # an all-null feature carries nothing (and breaks HGB's binning)
    x_test = stay_features(test, until=half, columns=x_train.columns)
    y_train, y_test = utility_labels(train, obs_hours), utility_labels(test, obs_hours)
    out: dict[str, float] = {}
    for task in names:
        tr, te = y_train[task].notna().to_numpy(), y_test[task].notna().to_numpy()
        truth = y_test[task].to_numpy()[te]
        if truth.size == 0 or np.unique(truth).size < 2:
            out[task] = math.nan
            continue
        y = y_train[task].to_numpy()[tr]
        classes = np.unique(y)
        rows = x_train.to_numpy()[tr]
        keep = ~np.isnan(rows).all(0)  # a feature with no value among this task's stays breaks HGB's binning
        if classes.size < 2 or not keep.any():
            proba = pd.DataFrame(0.5, index=range(truth.size), columns=classes if classes.size else [0.0])
        else:
            model = _gbm("classifier", gbm, seed).fit(rows[:, keep], np.searchsorted(classes, y))
            proba = pd.DataFrame(model.predict_proba(x_test.to_numpy()[te][:, keep]), columns=classes)
        out[task] = macro_ovr_auroc(truth, proba)
    scored = [v for v in out.values() if not math.isnan(v)]
    out["mean"] = float(np.mean(scored)) if scored else math.nan
    return out


def merge_folders(*folders: Folder) -> Folder:
    """One folder holding the stays and rows of several (their stay ids must be disjoint)."""
    stays = [s for f in folders for s in f[0]]
    if len(set(stays)) != len(stays):
        raise MetricsInputError("merge_folders: the folders share stay ids; expected disjoint splits")
    tables = {
        t: pd.concat([f[1][t] for f in folders], ignore_index=True).sort_values(["stay_id", "time"], kind="mergesort")
        for t in TABLES
    }
    return stays, tables


def mia(
    real_train: Folder, holdout: Folder, synthetic: Folder, n: int | None = None, seed: int = 0
) -> dict[str, float]:
    """Distance-to-nearest-synthetic membership attack [ours]: the attack accuracy (0.5 is ideal, 1 leaks).

    Members are ``n`` stays drawn from ``real_train``, non-members ``n`` from ``holdout`` (default ``n``: the smaller
    split). Each stay is embedded with :func:`stay_features` over the full window (columns of the real train,
    standardised on the real train, missing values at the mean); its score is the Euclidean distance to the nearest
    synthetic stay; a stay is called a member when its score is below the median of the ``2n`` scores.
    """
    import torch

    rng = np.random.default_rng(seed)
    n = min(len(real_train[0]), len(holdout[0])) if n is None else n
    if n < 1 or n > len(real_train[0]) or n > len(holdout[0]):
        raise ValueError(f"mia n={n}: expected 1 <= n <= min(train, holdout) stays")
    if not synthetic[0]:
        raise MetricsInputError("mia: the synthetic folder lists no stays")
    train_x = stay_features(real_train)
    mean, std = train_x.mean(), train_x.std(ddof=0).replace(0.0, 1.0).fillna(1.0)

    def embed(folder: Folder, stays: Sequence[int] | None = None) -> Any:
        x = stay_features(folder, columns=train_x.columns)
        if stays is not None:
            x = x.loc[list(stays)]
        return torch.from_numpy(((x - mean) / std).fillna(0.0).to_numpy(dtype=np.float64))

    members = rng.choice(np.asarray(real_train[0]), size=n, replace=False)
    others = rng.choice(np.asarray(holdout[0]), size=n, replace=False)
    syn = embed(synthetic)
    queries = torch.cat([embed(real_train, members), embed(holdout, others)])
    score = torch.cdist(queries, syn).min(dim=1).values.numpy()
    called = score < np.median(score)
    truth = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    return {"mia/accuracy": float((called == truth).mean()), "mia/n": float(n)}


# --- the entry point --------------------------------------------------------------------------------------------------


def evaluate(
    real_test: Folder,
    synthetic: Folder,
    real_train: Folder | None = None,
    holdout: Folder | None = None,
    obs_hours: int = 12,
    parts: tuple[str, ...] = PARTS,
    seed: int = 0,
    gbm: Literal["sklearn", "xgboost"] = "sklearn",
    next_event_epochs: int = 20,
) -> dict[str, Any]:
    """Every metric of the card on one synthetic folder, as one flat ``{name: value}`` dict.

    Parts: ``fidelity`` (CDE, null gaps, I-CDE, PCC, I-PCC), ``temporal`` (time-gap and event-count KS),
    ``utility`` (TSTR on ``real_test``; TRTR with ``real_train``; the KCl task also on test + holdout as
    ``utility/kcl_test_holdout/{tstr,trtr}`` when ``holdout`` is given), ``privacy`` (MIA; needs ``real_train`` and
    ``holdout``), ``predictive`` (needs ``real_train``), ``next_event`` (TSTR; TRTR with ``real_train``). What needs a
    missing folder is listed under ``skipped`` (a list of strings).

    Args:
        real_test: the real test split (the reference of every fidelity and temporal metric).
        synthetic: the generated folder.
        real_train: the real train split (TRTR arms, de-duplication, MIA members).
        holdout: the real holdout split (MIA non-members).
        obs_hours: the observation window in hours.
        parts: which parts to run (a subset of ``PARTS``).
        seed: seeds of the GBMs, the LSTM and the MIA draw.
        gbm: ``sklearn`` or ``xgboost`` for predictive similarity and utility.
        next_event_epochs: training epochs of the next-event LSTM.
    """
    if unknown := [p for p in parts if p not in PARTS]:
        raise ValueError(f"parts={list(parts)}: unknown {unknown}; expected a subset of {list(PARTS)}")
    for folder, name in ((real_test, "--real-test"), (synthetic, "--synthetic"), (real_train, "--real-train"),
                         (holdout, "--holdout")):  # fmt: skip
        if folder is not None:
            check_folder(folder, name, obs_hours)
    real, syn = real_test[1], synthetic[1]
    out: dict[str, Any] = {}
    skipped: list[str] = []
    if "fidelity" in parts:
        out |= cde(real, syn) | item_cde(real, syn) | pcc(real, syn) | item_pcc(real, syn)
    if "temporal" in parts:
        out |= time_gap_ks(real, syn) | event_count_ks(real_test, synthetic)
    if "utility" in parts:
        arms = {"tstr": synthetic} | ({"trtr": real_train} if real_train is not None else {})
        for arm, train in arms.items():
            for task, value in utility(train, real_test, obs_hours, gbm=gbm, seed=seed).items():
                out[f"utility/{arm}_mean" if task == "mean" else f"utility/{task}/{arm}"] = value
            if holdout is not None:
                both = merge_folders(real_test, holdout)
                out[f"utility/kcl_test_holdout/{arm}"] = utility(train, both, obs_hours, ("kcl",), gbm, seed)["kcl"]
        if real_train is None:
            skipped.append("utility/trtr (needs --real-train)")
        if holdout is None:
            skipped.append("utility/kcl_test_holdout (needs --holdout)")
    if "privacy" in parts:
        if real_train is not None and holdout is not None:
            out |= mia(real_train, holdout, synthetic, seed=seed)
        else:
            skipped.append("privacy (needs --real-train and --holdout)")
    if "predictive" in parts:
        if real_train is not None:
            out |= predictive_similarity(real_train[1], real, syn, gbm=gbm, seed=seed)
        else:
            skipped.append("predictive (needs --real-train)")
    if "next_event" in parts:
        sources = [real, syn] + ([real_train[1]] if real_train is not None else [])
        vocab = sorted(set().union(*(set(item_keys(s)["key"]) for s in sources)))
        out["next_event/f1_tstr"] = next_event_f1(syn, real, vocab, epochs=next_event_epochs, seed=seed)
        if real_train is not None:
            out["next_event/f1_trtr"] = next_event_f1(real_train[1], real, vocab, epochs=next_event_epochs, seed=seed)
        else:
            skipped.append("next_event/f1_trtr (needs --real-train)")
    out["skipped"] = skipped
    return out


def format_table(metrics: dict[str, Any]) -> str:
    """The metrics as a two-column markdown table (``skipped`` as a last line)."""
    lines = ["| metric | value |", "|---|---|"]
    for key, value in metrics.items():
        if key != "skipped":
            lines.append(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |")
    if metrics.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(metrics["skipped"])]
    return "\n".join(lines)


__all__ = [
    "CORR_BINS", "LAB_TASKS", "PARTS", "PRESENCE_TASKS", "Folder", "MetricsInputError", "association_matrix", "cde",
    "check_folder", "corr_bins", "correlation_ratio", "dedup_against", "evaluate", "event_count_ks", "event_counts",
    "format_table", "grouped_js", "grouped_ks", "item_cde", "item_pcc", "item_scores", "js_distance", "ks_distance",
    "macro_ovr_auroc", "matrix_scores", "merge_folders", "mia", "next_event_f1", "pcc", "pearson",
    "predictive_similarity", "smape", "stay_features", "theils_u", "time_gap_ks", "time_gaps", "utility",
    "utility_labels",
]  # fmt: skip
