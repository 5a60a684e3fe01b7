"""Small graph builders shared by the binary_dag tests."""

from __future__ import annotations

import numpy as np


def adj_of(d: int, edge_list: list[tuple[int, int]]) -> np.ndarray:
    """The boolean (d, d) adjacency with ``adj[i, j]`` for each edge ``(i, j)``."""
    a = np.zeros((d, d), dtype=bool)
    for i, j in edge_list:
        a[i, j] = True
    return a
