"""The training-free baselines of ``rawmed`` (card, Baselines): independent marginals and a copy of the train stays.

Both take the train split as event tables in the folder format (``stay_id``, ``time`` in minutes, then the table's
columns) and return synthetic tables in the same format, with new stay ids:

- :func:`marginal_tables`: per synthetic stay and table, the event count is drawn from the train distribution of
  per-stay counts of that table (stays without an event of the table included), each time from the train marginal
  of that table's times, and every column independently from its train marginal, nulls included;
- :func:`copy_tables`: the train stays verbatim (the fidelity ceiling and the membership-inference sanity case).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: First id of synthetic stays (disjoint from MIMIC-IV's 3e7 range and the generator's ids).
SYNTHETIC_STAY0 = 90_000_000


def floor_times(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Times floored to 10 minutes (how synthetic times are written), rows sorted by (stay_id, time)."""
    out = {}
    for name, frame in tables.items():
        frame = frame.copy()
        frame["time"] = (frame["time"].to_numpy() // 10 * 10).astype(np.int64)
        out[name] = frame.sort_values(["stay_id", "time"], kind="stable").reset_index(drop=True)
    return out


def copy_tables(stays: list[int], tables: dict[str, pd.DataFrame]) -> tuple[list[int], dict[str, pd.DataFrame]]:
    """The train stays verbatim under new ids ``SYNTHETIC_STAY0 + i`` (times floored to 10 minutes)."""
    mapping = {s: SYNTHETIC_STAY0 + i for i, s in enumerate(stays)}
    out = {}
    for name, frame in floor_times(tables).items():
        frame = frame[frame["stay_id"].isin(mapping)].copy()
        frame["stay_id"] = frame["stay_id"].map(mapping).astype(np.int64)
        out[name] = frame.reset_index(drop=True)
    return list(mapping.values()), out


def marginal_tables(stays: list[int], tables: dict[str, pd.DataFrame], n_stays: int,
                    seed: int = 0) -> tuple[list[int], dict[str, pd.DataFrame]]:  # fmt: skip
    """``n_stays`` synthetic stays from independent per-table count, time and column marginals of the train split.

    Args:
        stays: the train stay ids (stays without events count as zero events).
        tables: the train event tables (folder format).
        n_stays: synthetic stays to draw.
        seed: the draw's seed.
    """
    rng = np.random.default_rng(seed)
    new = [SYNTHETIC_STAY0 + i for i in range(n_stays)]
    out = {}
    for name, frame in floor_times(tables).items():
        counts = frame.groupby("stay_id").size().reindex(stays, fill_value=0).to_numpy()
        drawn = rng.choice(counts, size=n_stays, replace=True) if len(counts) else np.zeros(n_stays, dtype=int)
        total = int(drawn.sum())
        columns = {"stay_id": np.repeat(np.asarray(new, dtype=np.int64), drawn)}
        if len(frame) == 0 or total == 0:
            out[name] = frame.iloc[:0].copy()
            continue
        columns["time"] = rng.choice(frame["time"].to_numpy(), size=total, replace=True)
        for column in frame.columns[2:]:
            columns[column] = frame[column].to_numpy()[rng.integers(0, len(frame), size=total)]
        drawn_frame = pd.DataFrame(columns, columns=frame.columns).astype(frame.dtypes.to_dict())
        out[name] = drawn_frame.sort_values(["stay_id", "time"], kind="stable").reset_index(drop=True)
    return new, out
