"""Pruning spec of transformers' PatchTST and TimesFm: which Linears carry masks, their names, and masked forwards.

A *mask site* is one side of one target ``nn.Linear``: ``"<path>:in"`` (length ``in_features``) or ``"<path>:out"``
(length ``out_features``), ``<path>`` the Linear's dotted name in the model given (e.g.
``model.encoder.layers.0.self_attn.q_proj``). A masked Linear computes ``h = (W (x * m_in) + b) * m_out``
(card, "Masks"). Pure torch: no Lightning here.

Block layouts (:class:`Layout`, one per layer, found by :func:`layer_layout`):

- PatchTST (``PatchTSTEncoderLayer``): ``self_attn.{q_proj,k_proj,v_proj,out_proj}``, ``ff[0]`` (d -> ffn) and
  ``ff[3]`` (ffn -> d).
- TimesFm (transformers' ``TimesFmDecoderLayer``): ``self_attn.{q_proj,k_proj,v_proj,o_proj}`` (split) or
  ``self_attn.{qkv_proj,o_proj}`` (fused; its output rows are the q, k and v blocks in that order), plus the MLP's
  ``mlp.gate_proj`` (d -> ffn) and ``mlp.down_proj`` (ffn -> d); the MLP's own LayerNorm feeds ``gate_proj`` (residual
  side). The attention's per-dimension query scale (``self_attn.scaling``, softplus, shared by the heads) is a
  parameter, not a Linear: it carries no mask; the merge slices it with the q/k indices.
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
    "PATCHTST",
    "TIMESFM",
    "TIMESFM_FUSED",
    "LayerSites",
    "Layout",
    "PruneScope",
    "encoder_layers",
    "install_masks",
    "layer_layout",
    "layer_sites",
    "mask_sizes",
    "masked",
    "ones_masks",
    "site_kind",
    "target_linears",
]

PruneScope = Literal["blocks", "all_linear"]


@dataclass(frozen=True)
class Layout:
    """Where the block Linears of one transformer layer live.

    ``q``/``k``/``v``/``o`` name the attention Linears under ``self_attn`` (all three of q/k/v are ``qkv_proj`` when
    ``fused_qkv``); ``ffn_in``/``ffn_out`` name the FFN Linears under the layer, ``ffn`` the FFN sub-module that the
    merge may replace as a whole.
    """

    kind: Literal["patchtst", "timesfm"]
    q: str
    k: str
    v: str
    o: str
    ffn: str
    ffn_in: str
    ffn_out: str
    fused_qkv: bool = False

    @property
    def attn_linears(self) -> tuple[str, ...]:
        """The distinct attention Linears (``qkv_proj, o_proj`` when fused)."""
        return tuple(dict.fromkeys((self.q, self.k, self.v, self.o)))

    @property
    def ffn_linears(self) -> tuple[str, str]:
        """The FFN Linears (input side first)."""
        return (self.ffn_in, self.ffn_out)

    def path(self, linear: str) -> str:
        """Path of ``linear`` relative to its layer."""
        return f"self_attn.{linear}" if linear in self.attn_linears else linear


PATCHTST = Layout("patchtst", "q_proj", "k_proj", "v_proj", "out_proj", "ff", "ff.0", "ff.3")
TIMESFM = Layout("timesfm", "q_proj", "k_proj", "v_proj", "o_proj", "mlp", "mlp.gate_proj", "mlp.down_proj")
TIMESFM_FUSED = Layout(
    "timesfm", "qkv_proj", "qkv_proj", "qkv_proj", "o_proj", "mlp", "mlp.gate_proj", "mlp.down_proj", fused_qkv=True
)

#: The four attention Linears of a ``PatchTSTEncoderLayer`` (attribute names under ``self_attn``).
ATTN_LINEARS = PATCHTST.attn_linears
#: The two FFN Linears of a ``PatchTSTEncoderLayer``: ``ff[0]`` (d -> ffn) and ``ff[3]`` (ffn -> d).
FFN_LINEARS = PATCHTST.ffn_linears

#: Layer class names the spec knows, with their layout finder.
_LAYER_CLASSES = ("PatchTSTEncoderLayer", "TimesFmDecoderLayer")


def _timesfm_layout(name: str, layer: nn.Module) -> Layout:
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    has = lambda module, *names: module is not None and all(hasattr(module, n) for n in names)  # noqa: E731
    if has(attn, "q_proj", "k_proj", "v_proj", "o_proj"):
        layout = TIMESFM
    elif has(attn, "qkv_proj", "o_proj"):
        layout = TIMESFM_FUSED
    else:
        found = sorted(n for n, _ in attn.named_children()) if attn is not None else "no self_attn"
        raise ValueError(
            f"{name}: unknown TimesFm attention layout (children {found}); the pruning spec knows split "
            "q_proj/k_proj/v_proj/o_proj and fused qkv_proj/o_proj"
        )
    if not has(attn, "scaling", "head_dim", "num_heads") or not has(mlp, "gate_proj", "down_proj", "layer_norm"):
        raise ValueError(
            f"{name}: unknown TimesFm layout: expected self_attn.scaling/head_dim/num_heads and "
            "mlp.gate_proj/down_proj/layer_norm"
        )
    return layout


def layer_layout(name: str, layer: nn.Module) -> Layout:
    """The :class:`Layout` of one transformer layer (``name``: its dotted name, for errors).

    Raises:
        ValueError: for a layer class or attention layout the spec does not know.
    """
    kind = type(layer).__name__
    if kind == "PatchTSTEncoderLayer":
        return PATCHTST
    if kind == "TimesFmDecoderLayer":
        return _timesfm_layout(name, layer)
    raise ValueError(f"{name}: {kind} is not a layer the pruning spec knows ({', '.join(_LAYER_CLASSES)})")


def encoder_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(dotted name, layer)`` of every PatchTST encoder layer or TimesFm decoder layer in ``model``, in order.

    Raises:
        ValueError: if no such layer is found, or if a PatchTST layer has ``channel_attention`` (its second sub-layer
            reuses ``self_attn``, so the masks would score two uses of one module).
    """
    found = [(n, m) for n, m in model.named_modules() if type(m).__name__ in _LAYER_CLASSES]
    if not found:
        others = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.endswith("Layer")})
        raise ValueError(
            f"{type(model).__name__}: no {' or '.join(_LAYER_CLASSES)} found; the pruning spec covers transformers' "
            f"PatchTST and TimesFm (found layers: {others or 'none'})"
        )
    for name, layer in found:
        if getattr(layer, "channel_attention", False):
            raise ValueError(
                f"{name}: channel_attention=true reuses self_attn for a second sub-layer, so its masks would score "
                "two uses; the pruning spec needs channel_attention=false"
            )
    return found


@dataclass(frozen=True)
class LayerSites:
    """Mask-site names of one transformer layer (``prefix`` is the layer's dotted name)."""

    prefix: str
    layout: Layout = PATCHTST

    def site(self, linear: str, side: Literal["in", "out"]) -> str:
        """``"<prefix>.self_attn.q_proj:out"`` style name; ``linear`` is one of the layout's Linears."""
        return f"{self.prefix}.{self.layout.path(linear)}:{side}"

    @property
    def inner_pairs(self) -> dict[str, tuple[str, str]]:
        """The three inner dependency ties: q/k outputs, v-out/o-in, ffn-in-out/ffn-out-in.

        With a fused ``qkv_proj`` the q, k and v outputs are row blocks of one site, named twice.
        """
        lay = self.layout
        return {
            "qk": (self.site(lay.q, "out"), self.site(lay.k, "out")),
            "vo": (self.site(lay.v, "out"), self.site(lay.o, "in")),
            "ffn": (self.site(lay.ffn_in, "out"), self.site(lay.ffn_out, "in")),
        }

    @property
    def residual(self) -> tuple[str, ...]:
        """Residual-side sites: q/k/v/ffn-in inputs and o/ffn-out outputs (all of length d_model)."""
        lay = self.layout
        inputs = dict.fromkeys((lay.q, lay.k, lay.v, lay.ffn_in))
        return (*(self.site(n, "in") for n in inputs), self.site(lay.o, "out"), self.site(lay.ffn_out, "out"))


def layer_sites(model: nn.Module) -> list[LayerSites]:
    """One :class:`LayerSites` per transformer layer of ``model``."""
    return [LayerSites(name, layer_layout(name, layer)) for name, layer in encoder_layers(model)]


def target_linears(model: nn.Module, scope: PruneScope = "blocks") -> dict[str, nn.Linear]:
    """The masked Linears by dotted name: each layer's block Linears (``blocks``) or every Linear (``all_linear``).

    Raises:
        ValueError: on an unknown scope, or (``blocks``) on an unknown layer layout or a block Linear that is missing
            or not an ``nn.Linear``.
    """
    if scope == "all_linear":
        return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    if scope != "blocks":
        raise ValueError(f"prune_scope={scope!r}, expected 'blocks' or 'all_linear'")
    out: dict[str, nn.Linear] = {}
    for name, layer in encoder_layers(model):
        layout = layer_layout(name, layer)
        for linear in layout.attn_linears + layout.ffn_linears:
            path = layout.path(linear)
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


#: Path endings of block Linears reading the residual stream (``:in`` residual-side) and writing it (``:out``).
_READS = (".q_proj", ".k_proj", ".v_proj", ".qkv_proj", ".ff.0", ".mlp.gate_proj")
_WRITES = (".out_proj", ".o_proj", ".ff.3", ".mlp.down_proj")


def site_kind(site: str) -> Literal["residual", "inner", "other"]:
    """``residual`` (q/k/v/ffn-in inputs, o/ffn-out outputs), ``inner`` (the tied inner sides) or ``other``."""
    path, side = site.rsplit(":", 1)
    if path.endswith(_READS):
        return "residual" if side == "in" else "inner"
    if path.endswith(_WRITES):
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
