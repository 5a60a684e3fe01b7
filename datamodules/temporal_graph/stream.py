"""The event stream with its splits and evaluation negatives, as one object."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class TemporalStream:
    """The internal event stream with its split, seen flags and fixed evaluation negatives.

    Attributes:
        name: dataset name.
        src: int64 (E,) 1-based source ids, 0 = padding.
        dst: int64 (E,) destination ids.
        t: float64 (E,) non-decreasing (stable-sorted) timestamps.
        split: int8 (E,) 0 train, 1 val, 2 test.
        msg: float32 (E, F) edge features (F >= 1; a 1.0 column when the format has none).
        label: int64 (E,) state labels.
        num_nodes: max id + 1.
        bipartite: source and destination id sets are disjoint.
        dst_min: smallest destination id.
        seen: bool (E,) per ``seen_def`` (stream: the (src, dst) pair occurred strictly earlier; trainval: the pair
            occurs in train+val).
        eval_neg: ``"val"``/``"test"`` -> (n_split, Kmax) int64 negatives (0 = pad), rows in event order.
        eval_neg_mask: same shapes, True = valid.
        stats: repeat ratio, surprise, seen fractions per split, counts.
    """

    name: str
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    split: np.ndarray
    msg: np.ndarray
    label: np.ndarray
    num_nodes: int
    bipartite: bool
    dst_min: int
    seen: np.ndarray
    eval_neg: dict[str, np.ndarray] = field(default_factory=dict)
    eval_neg_mask: dict[str, np.ndarray] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t)
