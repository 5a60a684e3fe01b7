"""Structural changes of a network that checkpoints must replay before loading weights (e.g. pruned-and-merged).

A structure is a dict of primitives ``{"kind": str, "data": ...}``. :func:`apply_structure` reshapes a freshly
built network of the original configuration into the changed shapes, so ``load_state_dict`` of the changed
network's weights succeeds; the rebuild function for each kind is imported on demand.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

#: Checkpoint key under which :attr:`zoo.core.module.ZooModule.structure` is stored.
STRUCTURE_KEY = "zoo_structure"

#: ``kind -> "module:function"`` of the rebuild function ``fn(net, data) -> None``.
REBUILDERS: dict[str, str] = {"prune_finetune.merge": "zoo.prune_finetune.merge:rebuild_"}


def apply_structure(net: nn.Module, structure: dict[str, Any]) -> None:
    """Reshape ``net`` in place as ``structure`` records.

    Raises:
        ValueError: for an unknown ``kind``.
    """
    kind = structure.get("kind")
    if kind not in REBUILDERS:
        raise ValueError(f"checkpoint {STRUCTURE_KEY}: unknown kind {kind!r}; known: {sorted(REBUILDERS)}")
    module_name, _, function = REBUILDERS[kind].partition(":")
    getattr(importlib.import_module(module_name), function)(net, structure["data"])
