"""Structural changes of a network that checkpoints must replay before loading weights (e.g. pruned-and-merged).

A structure is a dict of primitives ``{"kind": str, "data": ...}``. :func:`apply_structure` reshapes a freshly
built network of the original configuration into the changed shapes, so ``load_state_dict`` of the changed
network's weights succeeds. Each kind's rebuild function is declared by its method's manifest (``structures``) and
imported on demand: the core names no method.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

from zoo.core.registry import structure_rebuilders

#: Checkpoint key under which :attr:`zoo.core.module.ZooModule.structure` is stored.
STRUCTURE_KEY = "zoo_structure"


def apply_structure(net: nn.Module, structure: dict[str, Any]) -> None:
    """Reshape ``net`` in place as ``structure`` records.

    Raises:
        ValueError: for a kind no manifest declares.
    """
    kind = structure.get("kind")
    rebuilders = structure_rebuilders()
    if kind not in rebuilders:
        raise ValueError(f"checkpoint {STRUCTURE_KEY}: unknown kind {kind!r}; known: {sorted(rebuilders)}")
    module_name, _, function = rebuilders[kind].partition(":")
    getattr(importlib.import_module(module_name), function)(net, structure["data"])
