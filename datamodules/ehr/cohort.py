"""The ICU cohort: stays, their three event tables in the observation window, splits and truncation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from datamodules.ehr.tables import TABLE_SPECS, TABLES

#: Split fractions by stay (card: train 60 / val 10 / test 15 / holdout 15; holdout = MIA non-members).
SPLITS: dict[str, float] = {"train": 0.60, "val": 0.10, "test": 0.15, "holdout": 0.15}


def event_columns() -> list[str]:
    """The union of the tables' columns in table order (the columns of :meth:`EHRCohort.events`)."""
    return list(dict.fromkeys(c for t in TABLES for c in TABLE_SPECS[t].columns))


@dataclass
class EHRCohort:
    """ICU stays and their events in the observation window.

    Attributes:
        stays: one row per stay: ``stay_id, subject_id, hadm_id, first_careunit, intime`` (datetime64), ``los``.
        tables: per table: ``stay_id, time`` (int minutes since ``intime``, ``0 <= t < obs_hours * 60``, not
            floored), then ``spec.columns``; sorted by (stay_id, time, file order).
        obs_hours: the observation window in hours.
        truth: generator ground truth (``{"stays": DataFrame, "kcl": DataFrame}``, keyed by stay_id), else ``None``.
        max_events: the per-stay event cap applied (``None``: no cap).
    """

    stays: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    obs_hours: int
    truth: dict[str, Any] | None = None
    max_events: int | None = None

    @property
    def stay_ids(self) -> list[int]:
        """Stay ids in ``stays`` order."""
        return self.stays["stay_id"].astype(np.int64).tolist()

    def split(self, seed: int) -> dict[str, list[int]]:
        """Seeded split by stay: train 60 / val 10 / test 15 / holdout 15 (each list sorted by stay_id).

        The counts are ``round(0.6 n)``, ``round(0.1 n)``, ``round(0.15 n)`` and the rest for the holdout.
        """
        ids = np.sort(self.stays["stay_id"].to_numpy(np.int64))
        perm = ids[np.random.default_rng(seed).permutation(len(ids))]
        n = len(ids)
        sizes = [int(round(SPLITS[s] * n)) for s in ("train", "val", "test")]
        cuts = np.cumsum(sizes)
        parts = np.split(perm, cuts)
        return {name: np.sort(part).tolist() for name, part in zip(SPLITS, parts, strict=True)}

    def subset(self, stay_ids: Iterable[int]) -> EHRCohort:
        """The cohort restricted to ``stay_ids`` (rows keep their order; the truth is restricted too)."""
        keep = pd.Index(np.asarray(list(stay_ids), dtype=np.int64))
        stays = self.stays[self.stays["stay_id"].isin(keep)].reset_index(drop=True)
        tables = {t: f[f["stay_id"].isin(keep)].reset_index(drop=True) for t, f in self.tables.items()}
        truth = None
        if self.truth is not None:
            truth = {
                k: v[v["stay_id"].isin(keep)].reset_index(drop=True)
                if isinstance(v, pd.DataFrame) and "stay_id" in v
                else v
                for k, v in self.truth.items()
            }
        return replace(self, stays=stays, tables=tables, truth=truth)

    def events(self) -> pd.DataFrame:
        """All tables pooled in the AR sequence order: ``stay_id, time, table``, then the union of columns.

        Sorted by (stay_id, time, table order, file order); a column a table lacks is null.
        """
        frames = []
        for k, name in enumerate(TABLES):
            f = self.tables[name]
            frames.append(f.assign(table=name, _table=k, _row=np.arange(len(f))))
        pooled = pd.concat(frames, ignore_index=True)
        pooled = pooled.sort_values(["stay_id", "time", "_table", "_row"], kind="stable").reset_index(drop=True)
        return pooled[["stay_id", "time", "table", *event_columns()]]

    def counts(self) -> pd.Series:
        """Events per stay (all tables), indexed by stay_id in ``stays`` order; stays without events count 0."""
        total = pd.Series(0, index=pd.Index(self.stays["stay_id"].to_numpy(np.int64), name="stay_id"))
        for f in self.tables.values():
            total = total.add(f.groupby("stay_id").size(), fill_value=0)
        return total.loc[self.stays["stay_id"].to_numpy(np.int64)].astype(np.int64)

    def truncate(self, max_events: int) -> EHRCohort:
        """Keep the earliest ``max_events`` events of each stay in the AR sequence order (all tables pooled)."""
        tables = {}
        frames = []
        for k, name in enumerate(TABLES):
            f = self.tables[name]
            frames.append(pd.DataFrame({"stay_id": f["stay_id"].to_numpy(), "time": f["time"].to_numpy(),
                                        "_table": k, "_row": np.arange(len(f))}))  # fmt: skip
        pooled = pd.concat(frames, ignore_index=True).sort_values(["stay_id", "time", "_table", "_row"], kind="stable")
        rank = pooled.groupby("stay_id").cumcount().to_numpy()
        kept = pooled[rank < max_events]
        for k, name in enumerate(TABLES):
            rows = np.sort(kept.loc[kept["_table"] == k, "_row"].to_numpy())
            tables[name] = self.tables[name].iloc[rows].reset_index(drop=True)
        return replace(self, tables=tables, max_events=int(max_events))


def p95_cap(cohort: EHRCohort, train: Iterable[int]) -> int:
    """The 95th percentile of the train stays' event counts, rounded up (the card's ``max_events: p95``)."""
    counts = cohort.counts()
    train_counts = counts.loc[np.asarray(list(train), dtype=np.int64)].to_numpy()
    return max(int(np.ceil(np.percentile(train_counts, 95))), 1) if len(train_counts) else 1


def __getattr__(name: str) -> Any:
    """``load_mimiciv`` and ``mimic_like_icu`` are importable from here too (lazily: they import this module)."""
    if name == "load_mimiciv":
        from datamodules.ehr.mimic import load_mimiciv

        return load_mimiciv
    if name == "mimic_like_icu":
        from datamodules.ehr.synthetic import mimic_like_icu

        return mimic_like_icu
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
