"""Run something that seeds and draws random numbers without disturbing the caller's random state."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch


@contextlib.contextmanager
def preserved_rng(threads: bool = True) -> Iterator[None]:
    """Restore Python's, numpy's and torch's (CPU and CUDA) generators, and the torch thread count, on exit.

    An inner fit (a cached original model, a pretraining recipe) calls ``seed_everything`` and draws from every
    generator; without this, the caller's later draws would depend on whether the inner fit ran or was cached.

    Args:
        threads: also restore ``torch.get_num_threads()`` (an inner config may set ``threads``).
    """
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    count = torch.get_num_threads()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        if threads:
            torch.set_num_threads(count)
