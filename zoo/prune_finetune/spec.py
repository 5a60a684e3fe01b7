"""Pruning spec of transformers' PatchTST: which Linears carry masks, their names, and plain masked forwards.

A *mask site* is one side of one target ``nn.Linear``: ``"<path>:in"`` (length ``in_features``) or ``"<path>:out"``
(length ``out_features``), ``<path>`` the Linear's dotted name in the model given (e.g.
``model.encoder.layers.0.self_attn.q_proj``). A masked Linear computes ``h = (W (x * m_in) + b) * m_out``
(card, "Masks"). Pure torch: no Lightning here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

__all__ = [
    "ATTN_LINEARS",
    "FFN_LINEARS",
    "LayerSites",
    "PruneScope",
    "encoder_layers",
    "install_masks",
    "layer_sites",
    "mask_sizes",
    "masked",
    "ones_masks",
    "site_kind",
    "target_linears",
]

PruneScope = Literal["blocks", "all_linear"]

#: The four attention Linears of a ``PatchTSTEncoderLayer`` (attribute names under ``self_attn``).
ATTN_LINEARS = ("q_proj", "k_proj", "v_proj", "out_proj")
#: The two FFN Linears of a ``PatchTSTEncoderLayer``: ``ff[0]`` (d -> ffn) and ``ff[3]`` (ffn -> d).
FFN_LINEARS = ("ff.0", "ff.3")


def encoder_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(dotted name, layer)`` of every ``PatchTSTEncoderLayer`` in ``model``, in order.

    Raises:
        ValueError: if no encoder layer is found, or a layer has ``channel_attention`` (its second sub-layer reuses
            ``self_attn``, so the masks would score two uses of one module).
    """
    found = [(n, m) for n, m in model.named_modules() if type(m).__name__ == "PatchTSTEncoderLayer"]
    if not found:
        raise ValueError(f"{type(model).__name__}: no PatchTSTEncoderLayer found; the pruning spec covers PatchTST")
    for name, layer in found:
        if getattr(layer, "channel_attention", False):
            raise ValueError(
                f"{name}: channel_attention=true reuses self_attn for a second sub-layer, so its masks would score "
                "two uses; the pruning spec needs channel_attention=false"
            )
    return found


@dataclass(frozen=True)
class LayerSites:
    """Mask-site names of one encoder layer (``prefix`` is the layer's dotted name)."""

    prefix: str

    def site(self, linear: str, side: Literal["in", "out"]) -> str:
        """``"<prefix>.self_attn.q_proj:out"`` style name; ``linear`` is one of ATTN_LINEARS or FFN_LINEARS."""
        path = f"{self.prefix}.self_attn.{linear}" if linear in ATTN_LINEARS else f"{self.prefix}.{linear}"
        return f"{path}:{side}"

    @property
    def inner_pairs(self) -> dict[str, tuple[str, str]]:
        """The three inner dependency ties: q/k outputs, v-out/o-in, ff0-out/ff3-in."""
        return {
            "qk": (self.site("q_proj", "out"), self.site("k_proj", "out")),
            "vo": (self.site("v_proj", "out"), self.site("out_proj", "in")),
            "ffn": (self.site("ff.0", "out"), self.site("ff.3", "in")),
        }

    @property
    def residual(self) -> tuple[str, ...]:
        """Residual-side sites: q/k/v/ff0 inputs and out_proj/ff3 outputs (all of length d_model)."""
        return (
            *(self.site(n, "in") for n in ("q_proj", "k_proj", "v_proj", "ff.0")),
            self.site("out_proj", "out"),
            self.site("ff.3", "out"),
        )


def layer_sites(model: nn.Module) -> list[LayerSites]:
    """One :class:`LayerSites` per encoder layer of ``model``."""
    return [LayerSites(name) for name, _ in encoder_layers(model)]


def target_linears(model: nn.Module, scope: PruneScope = "blocks") -> dict[str, nn.Linear]:
    """The masked Linears by dotted name: the six of each encoder layer (``blocks``) or every Linear (``all_linear``).

    Raises:
        ValueError: on an unknown scope, or (``blocks``) when a block Linear is missing or not an ``nn.Linear``.
    """
    if scope == "all_linear":
        return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    if scope != "blocks":
        raise ValueError(f"prune_scope={scope!r}, expected 'blocks' or 'all_linear'")
    out: dict[str, nn.Linear] = {}
    for name, layer in encoder_layers(model):
        for linear in ATTN_LINEARS + FFN_LINEARS:
            path = f"self_attn.{linear}" if linear in ATTN_LINEARS else linear
            module = layer.get_submodule(path)
            if not isinstance(module, nn.Linear):
                raise ValueError(f"{name}.{path}: expected nn.Linear, found {type(module).__name__}")
            out[f"{name}.{path}"] = module
    return out


def mask_sizes(model: nn.Module, scope: PruneScope = "blocks") -> dict[str, int]:
    """``{"<path>:in": in_features, "<path>:out": out_features}`` for every target Linear, in module order."""
    sizes: dict[str, int] = {}
    for path, linear in target_linears(model, scope).items():
        sizes[f"{path}:in"] = linear.in_features
        sizes[f"{path}:out"] = linear.out_features
    return sizes


def site_kind(site: str) -> Literal["residual", "inner", "other"]:
    """``residual`` (q/k/v/ff0 inputs, out_proj/ff3 outputs), ``inner`` (the tied inner sides) or ``other``."""
    path, side = site.rsplit(":", 1)
    if path.endswith((".q_proj", ".k_proj", ".v_proj", ".ff.0")):
        return "residual" if side == "in" else "inner"
    if path.endswith((".out_proj", ".ff.3")):
        return "residual" if side == "out" else "inner"
    return "other"


def ones_masks(model: nn.Module, scope: PruneScope = "blocks") -> dict[str, Tensor]:
    """All-ones float masks for every site (the starting point of pruning)."""
    param = next(model.parameters())
    return {k: torch.ones(n, dtype=param.dtype, device=param.device) for k, n in mask_sizes(model, scope).items()}


def install_masks(model: nn.Module, masks: dict[str, Tensor]) -> list[torch.utils.hooks.RemovableHandle]:
    """Register hooks so each listed Linear computes ``(W (x * m_in) + b) * m_out``; returns the handles.

    Masks broadcast over the last dimension. A site missing from ``masks`` is left unmasked.

    Raises:
        KeyError: for a mask naming no Linear of ``model``.
        ValueError: for a mask whose length differs from the Linear's side.
    """
    modules = dict(model.named_modules())
    handles = []
    for site, mask in masks.items():
        path, side = site.rsplit(":", 1)
        linear = modules.get(path)
        if not isinstance(linear, nn.Linear):
            raise KeyError(f"mask {site!r}: no nn.Linear named {path!r} in {type(model).__name__}")
        size = linear.in_features if side == "in" else linear.out_features
        if mask.shape[-1] != size:
            raise ValueError(f"mask {site!r}: length {mask.shape[-1]}, but the Linear's {side} side has {size}")
        if side == "in":
            handles.append(linear.register_forward_pre_hook(lambda _m, args, m=mask: (args[0] * m, *args[1:])))
        else:
            handles.append(linear.register_forward_hook(lambda _m, _a, out, m=mask: out * m))
    return handles


@contextlib.contextmanager
def masked(model: nn.Module, masks: dict[str, Tensor]) -> Iterator[nn.Module]:
    """Context manager: ``model`` with :func:`install_masks` applied, hooks removed on exit."""
    handles = install_masks(model, masks)
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()
