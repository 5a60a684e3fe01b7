"""Merge pruning masks into a physically smaller dense PatchTST or TimesFm (pure torch + transformers; no Lightning).

:func:`merge_` first folds every mask into its Linear (``W <- diag(m_out) W diag(m_in)``, ``b <- m_out * b``), so the
plain model equals the masked one, then slices with the layer's dependency graph (card, "Merge"; the layouts are in
``spec.py``; "ffn-in/ffn-out" below are PatchTST's ``ff[0]``/``ff[3]`` and TimesFm's ``gate_proj``/``down_proj``):

- q/k: inner index ``j`` goes when ``q_out[j] = 0`` or ``k_out[j] = 0``; q and k rows go together. The score scaling
  stays the original ``1 / sqrt(head_dim)``.
- v-out <-> o-in: index ``j`` goes when either side is 0 (v row, v bias entry and o column).
- heads: a head whose V channels are all gone is removed (its q/k/v rows and o columns); ``num_heads`` drops.
- uniform head width: each remaining head drops the *minimum* zero count over the remaining heads (lowest zero
  indices first); other zeros stay folded as zero rows/columns. q/k and V get separate widths.
- FFN: index ``j`` goes when ``ff0_out[j] = 0`` or ``ff3_in[j] = 0``; when only ``ff0_out[j]`` is 0, the channel's
  constant ``act(0) * W3[:, j]`` moves into ff3's bias first.
- whole sub-layers: an attention with no head left becomes :class:`Bias` (its out_proj bias) or :class:`Zero`; an FFN
  with no channel left becomes :class:`Bias` (ff3's bias plus the act(0) terms) or :class:`Zero`. A sub-layer whose
  residual-side output mask is all zero outputs 0 and becomes :class:`Zero`. TimesFm's MLP adds its input back
  itself (and zeroes padded positions), so its stand-ins do too (``residual=True``); its LayerNorm goes with it.
- TimesFm: a fused ``qkv_proj`` is split into its q, k and v row blocks first. The per-dimension query scale
  ``softplus(scaling) * 1.442695041 / sqrt(head_dim)`` (one vector of length head_dim, shared by the heads) is
  expanded per head and sliced with the kept q/k indices of each head: :class:`MergedAttention` keeps the raw
  ``scaling`` entries of the in-head indices some kept head still uses (one shared vector, so fine-tuning keeps the
  heads' tie) and a per-head gather index; the constant factor keeps the *original* head_dim.
- residual stream: ``fold`` keeps d_model (zero rows/columns); ``index`` keeps only live residual columns/rows in
  :class:`IndexedLinear`, which gathers its input with ``index_select`` and scatters its output with ``index_add``.

The merge returns *bookkeeping* (primitives only, safe for ``torch.load(weights_only=True)``), from which
:func:`rebuild_` turns a fresh unpruned model of the same config into the merged shapes before ``load_state_dict``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.prune_finetune.spec import LayerSites, Layout, encoder_layers, layer_layout
from zoo.prune_finetune.timesfm import TIMESFM_QUERY_SCALE, query_scale_factor

__all__ = [
    "BOOKKEEPING_FORMAT",
    "TIMESFM_QUERY_SCALE",
    "Bias",
    "IndexedLinear",
    "MergedAttention",
    "ResidualSlicing",
    "Zero",
    "merge_",
    "merge_summary",
    "param_count",
    "plan_merge",
    "predicted_param_count",
    "rebuild_",
]

ResidualSlicing = Literal["fold", "index"]

#: Version tag of the bookkeeping dict; :func:`rebuild_` refuses any other.
BOOKKEEPING_FORMAT = "prune_finetune.merge/1"


class IndexedLinear(nn.Linear):
    """A Linear on live residual channels only: gathers inputs (``index_select``), scatters outputs (``index_add``).

    ``weight`` has the physical shape ``(len(out_index) or out_features, len(in_index) or in_features)``; the module
    still reads and writes full-width (d_model) tensors. The index buffers are not saved in the state dict: the
    bookkeeping holds them and :func:`rebuild_` restores them.
    """

    #: Live input columns of the full-width input (``None``: no gather).
    in_index: Tensor | None
    #: Rows of the full-width output the physical rows land on (``None``: no scatter).
    out_index: Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """A plain Linear until :meth:`set_index` installs the indices (arguments as ``nn.Linear``)."""
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.set_index(None, None, out_features)

    def set_index(self, in_index: list[int] | None, out_index: list[int] | None, full_out_features: int) -> None:
        """Install the gather/scatter indices.

        Args:
            in_index: live input columns (length ``in_features``), or ``None`` to take the input as is.
            out_index: output rows (length ``out_features``) within ``full_out_features``, or ``None``.
            full_out_features: width of the scattered output (d_model).

        Raises:
            ValueError: if an index length differs from the weight's side.
        """
        if in_index is not None and len(in_index) != self.in_features:
            raise ValueError(f"in_index has {len(in_index)} entries, expected in_features={self.in_features}")
        if out_index is not None and len(out_index) != self.out_features:
            raise ValueError(f"out_index has {len(out_index)} entries, expected out_features={self.out_features}")
        device = self.weight.device
        for name, index in (("in_index", in_index), ("out_index", out_index)):
            value = None if index is None else torch.tensor(index, dtype=torch.long, device=device)
            self.register_buffer(name, value, persistent=False)
        self.full_out_features = full_out_features

    def forward(self, input: Tensor) -> Tensor:
        """Gather the live inputs, apply the Linear, scatter the rows back to full width (zeros elsewhere)."""
        if self.in_index is not None:
            input = input.index_select(-1, self.in_index)
        out = F.linear(input, self.weight, self.bias)
        if self.out_index is None:
            return out
        return out.new_zeros(*out.shape[:-1], self.full_out_features).index_add(-1, self.out_index, out)

    def extra_repr(self) -> str:  # noqa: D102
        gather = "none" if self.in_index is None else f"{self.in_features} cols"
        scatter = "none" if self.out_index is None else f"{self.out_features} -> {self.full_out_features}"
        return f"{super().extra_repr()}, gather={gather}, scatter={scatter}"


class MergedAttention(nn.Module):
    """An attention after the merge: ``num_heads`` heads of q/k width ``qk_head_dim`` and V width ``v_head_dim``.

    Same forward signature and return convention as ``PatchTSTAttention`` and ``TimesFmAttention``
    (``(output, weights)``). The scores use the *original* ``scaling`` (PatchTST: ``1 / sqrt(original head_dim)``;
    TimesFm: 1): the sliced q/k entries were zero, so recomputing it from the new width would change every score.
    ``qk_head_dim = 0`` gives all-zero scores (uniform attention).

    TimesFm's per-dimension query scale: ``query_scale`` holds raw ``scaling`` entries (before softplus) and
    ``query_scale_index`` (``num_heads x qk_head_dim``, a buffer restored from the bookkeeping) says which entry
    scales each kept q dimension of each head; the query is multiplied by
    ``softplus(query_scale) * query_scale_factor`` gathered per head, ``query_scale_factor`` being the original
    ``1.442695041 / sqrt(original head_dim)``.
    """

    #: Per kept head and q/k dimension, the entry of ``query_scale`` that scales it (``None``: no query scale).
    query_scale_index: Tensor | None

    def __init__(
        self,
        q_proj: nn.Linear,
        k_proj: nn.Linear,
        v_proj: nn.Linear,
        out_proj: nn.Linear,
        num_heads: int,
        qk_head_dim: int,
        v_head_dim: int,
        scaling: float,
        dropout: float = 0.0,
        attn_implementation: str = "eager",
        query_scale: Tensor | None = None,
        query_scale_index: list[list[int]] | None = None,
        query_scale_factor: float = 1.0,
    ) -> None:
        """Wrap sliced projections.

        Args:
            q_proj: query projection, ``num_heads * qk_head_dim`` outputs.
            k_proj: key projection, ``num_heads * qk_head_dim`` outputs.
            v_proj: value projection, ``num_heads * v_head_dim`` outputs.
            out_proj: output projection, ``num_heads * v_head_dim`` inputs.
            num_heads: remaining heads (at least 1).
            qk_head_dim: per-head q/k width (may be 0).
            v_head_dim: per-head V width (at least 1).
            scaling: score scaling of the original module (never recomputed).
            dropout: attention-probability dropout in training (the original's ``dropout``).
            attn_implementation: ``"sdpa"`` uses ``F.scaled_dot_product_attention`` when no weights are requested;
                anything else computes the softmax eagerly.
            query_scale: raw per-dimension query scale entries (TimesFm's ``scaling`` before softplus), trainable;
                ``None``: no query scale (PatchTST).
            query_scale_index: per kept head, the ``query_scale`` entry of each kept q dimension.
            query_scale_factor: the original constant the softplus is multiplied by.

        Raises:
            ValueError: if a projection's width does not match ``num_heads`` and the head widths, or the query-scale
                index does not match the heads and ``query_scale``.
        """
        super().__init__()
        if num_heads < 1 or v_head_dim < 1 or qk_head_dim < 0:
            raise ValueError(
                f"MergedAttention: expected num_heads >= 1, v_head_dim >= 1, qk_head_dim >= 0; found "
                f"num_heads={num_heads}, v_head_dim={v_head_dim}, qk_head_dim={qk_head_dim}"
            )
        for name, size, want in (
            ("q_proj.out_features", q_proj.out_features, num_heads * qk_head_dim),
            ("k_proj.out_features", k_proj.out_features, num_heads * qk_head_dim),
            ("v_proj.out_features", v_proj.out_features, num_heads * v_head_dim),
            ("out_proj.in_features", out_proj.in_features, num_heads * v_head_dim),
        ):
            if size != want:
                raise ValueError(f"MergedAttention: {name}={size}, expected {want} (heads x head width)")
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = q_proj, k_proj, v_proj, out_proj
        if query_scale is None:
            self.query_scale = None
            self.register_buffer("query_scale_index", None, persistent=False)
        else:
            rows = query_scale_index or []
            slots = set(range(len(query_scale)))
            if len(rows) != num_heads or any(len(r) != qk_head_dim or not set(r) <= slots for r in rows):
                raise ValueError(
                    f"MergedAttention: query_scale_index needs {num_heads} rows of {qk_head_dim} entries in "
                    f"[0, {len(query_scale)}), found {rows}"
                )
            index = torch.tensor(rows, dtype=torch.long, device=query_scale.device).reshape(num_heads, qk_head_dim)
            self.query_scale = nn.Parameter(query_scale.detach().clone())
            self.register_buffer("query_scale_index", index, persistent=False)
        self.query_scale_factor = query_scale_factor
        self.num_heads = num_heads
        self.qk_head_dim = qk_head_dim
        self.v_head_dim = v_head_dim
        self.scaling = scaling
        self.dropout = dropout
        self.attn_implementation = attn_implementation
        self.is_decoder = False
        self.is_causal = False

    def forward(
        self,
        hidden_states: Tensor,
        key_value_states: Tensor | None = None,
        attention_mask: Tensor | None = None,
        output_attentions: bool | None = False,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor | None]:
        """Multi-head attention over ``hidden_states`` (batch x time x channel), as PatchTSTAttention.

        Args:
            hidden_states: queries (and keys/values unless ``key_value_states`` is given).
            key_value_states: keys/values for cross-attention.
            attention_mask: additive mask broadcast to the scores ``(batch, heads, q_len, kv_len)``.
            output_attentions: also return the attention probabilities.
            **kwargs: ignored (PatchTSTAttention's attention-backend kwargs).

        Returns:
            ``(attn_output, attn_weights)``; ``attn_weights`` is ``None`` unless ``output_attentions``.
        """
        input_shape = hidden_states.shape[:-1]
        current = hidden_states if key_value_states is None else key_value_states
        kv_shape = current.shape[:-1]
        query = self.q_proj(hidden_states).view(*input_shape, self.num_heads, self.qk_head_dim).transpose(-3, -2)
        key = self.k_proj(current).view(*kv_shape, self.num_heads, self.qk_head_dim).transpose(-3, -2)
        value = self.v_proj(current).view(*kv_shape, self.num_heads, self.v_head_dim).transpose(-3, -2)
        if self.query_scale is not None:  # TimesFm: softplus(scaling) * factor, expanded per head and sliced
            scale = F.softplus(self.query_scale).mul(self.query_scale_factor)[self.query_scale_index]
            query = query * scale[:, None, :]
        dropout = self.dropout if self.training else 0.0
        weights = None
        if self.attn_implementation == "sdpa" and not output_attentions and self.qk_head_dim > 0:
            out = F.scaled_dot_product_attention(
                query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=self.scaling
            )
        else:
            scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
            if attention_mask is not None:
                scores = scores + attention_mask
            weights = F.dropout(F.softmax(scores, dim=-1), p=dropout, training=self.training)
            out = torch.matmul(weights, value)
        out = out.transpose(-3, -2).reshape(*input_shape, self.num_heads * self.v_head_dim)
        return self.out_proj(out), (weights if output_attentions else None)

    def extra_repr(self) -> str:  # noqa: D102
        query_scale = "" if self.query_scale is None else f", query_scale={len(self.query_scale)} entries"
        return (
            f"num_heads={self.num_heads}, qk_head_dim={self.qk_head_dim}, v_head_dim={self.v_head_dim}, "
            f"scaling={self.scaling:.6g}{query_scale}"
        )


def _residual_out(out: Tensor, hidden_states: Tensor, paddings: Tensor | None) -> Tensor:
    """TimesFm's MLP ending: zero the padded positions' output, then add the input back."""
    if paddings is not None:
        out = out * (1.0 - paddings[:, :, None])
    return out + hidden_states


class Bias(nn.Module):
    """A removed sub-layer whose output is a constant vector (its surviving bias), broadcast to the input's shape.

    With ``attention=True`` it stands in for ``self_attn`` and returns ``(output, None)`` like PatchTSTAttention
    and TimesFmAttention (no attention weights exist); otherwise it stands in for the FFN and returns the tensor.
    With ``residual=True`` it stands in for TimesFm's MLP, whose residual connection is inside it: ``forward(x,
    paddings)`` returns ``bias * (1 - paddings) + x``.
    """

    def __init__(self, bias: Tensor, attention: bool, residual: bool = False) -> None:
        """Hold the constant.

        Args:
            bias: the constant output vector (d_model), trainable.
            attention: return the attention's ``(output, None)`` tuple instead of a tensor.
            residual: add the input back and zero padded positions (TimesFm's MLP).
        """
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())
        self.attention = attention
        self.residual = residual

    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Tensor | tuple[Tensor, None]:
        """The constant, broadcast to ``(*hidden_states.shape[:-1], d_model)`` (TimesFm MLP: see the class)."""
        out = self.bias.expand(*hidden_states.shape[:-1], self.bias.shape[0])
        if self.residual:
            return _residual_out(out, hidden_states, kwargs.get("paddings", args[0] if args else None))
        return (out, None) if self.attention else out

    def extra_repr(self) -> str:  # noqa: D102
        return f"dim={self.bias.shape[0]}, attention={self.attention}, residual={self.residual}"


class Zero(nn.Module):
    """A removed sub-layer whose output is identically 0 (see :class:`Bias` for the return conventions).

    With ``residual=True`` (TimesFm's MLP) it returns its input unchanged.
    """

    def __init__(self, dim: int, attention: bool, residual: bool = False) -> None:
        """Remember the output width.

        Args:
            dim: output width (d_model).
            attention: return the attention's ``(output, None)`` tuple instead of a tensor.
            residual: return the input (TimesFm's MLP adds it back itself).
        """
        super().__init__()
        self.dim = dim
        self.attention = attention
        self.residual = residual

    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Tensor | tuple[Tensor, None]:
        """Zeros of shape ``(*hidden_states.shape[:-1], dim)`` (the input itself with ``residual``)."""
        if self.residual:
            return hidden_states
        out = hidden_states.new_zeros(*hidden_states.shape[:-1], self.dim)
        return (out, None) if self.attention else out

    def extra_repr(self) -> str:  # noqa: D102
        return f"dim={self.dim}, attention={self.attention}, residual={self.residual}"


# ----------------------------------------------------------------------------------------------------------- masks


def _check_masks(model: nn.Module, masks: dict[str, Tensor]) -> dict[str, nn.Linear]:
    """Validate that every site names an ``nn.Linear`` of ``model`` with the right length; returns path -> Linear."""
    modules = dict(model.named_modules())
    found: dict[str, nn.Linear] = {}
    for site, mask in masks.items():
        path, sep, side = site.rpartition(":")
        if not sep or side not in ("in", "out"):
            raise KeyError(f"mask {site!r}: expected '<linear path>:in' or '<linear path>:out'")
        linear = modules.get(path)
        if not isinstance(linear, nn.Linear) or isinstance(linear, IndexedLinear):
            kind = "nothing" if linear is None else type(linear).__name__
            raise KeyError(f"mask {site!r}: expected an unmerged nn.Linear at {path!r}, found {kind}")
        size = linear.in_features if side == "in" else linear.out_features
        if mask.dim() != 1 or mask.shape[0] != size:
            raise ValueError(f"mask {site!r}: expected a vector of length {size}, found shape {tuple(mask.shape)}")
        found[path] = linear
    return found


#: Class names of the merge's stand-ins: a layer holding one was merged already.
_MERGED = ("MergedAttention", "Bias", "Zero")


def _unmerged_layers(model: nn.Module) -> list[tuple[str, nn.Module, Layout]]:
    """Transformer layers with their layouts, checked to still hold the original attention and FFN."""
    layers = []
    for name, layer in encoder_layers(model):
        attn = layer.self_attn
        if type(layer).__name__ == "PatchTSTEncoderLayer":
            ff = layer.ff
            merged = type(attn).__name__ != "PatchTSTAttention" or not isinstance(ff, nn.Sequential) or len(ff) != 4
            expected, found = "PatchTSTAttention and a 4-module ff Sequential", f"ff={type(ff).__name__}"
        else:
            mlp = layer.mlp
            merged = type(attn).__name__ in _MERGED or type(mlp).__name__ in _MERGED
            expected, found = "TimesFm attention and MLP", f"mlp={type(mlp).__name__}"
        if merged:
            raise ValueError(
                f"{name}: expected an unmerged layer ({expected}), found self_attn={type(attn).__name__}, {found}; "
                "was the model merged already?"
            )
        layers.append((name, layer, layer_layout(name, layer)))
    return layers


class _Masks:
    """Mask lookup for one layer; an absent site is all ones. ``role`` helpers split a fused qkv into row blocks."""

    def __init__(self, masks: dict[str, Tensor], sites: LayerSites, layer: nn.Module) -> None:
        self.masks, self.sites, self.layer, self.layout = masks, sites, layer, sites.layout
        attn = layer.self_attn
        self.block = attn.num_heads * attn.head_dim  # rows of each of q, k and v
        if self.layout.fused_qkv and self.linear(self.layout.q).out_features != 3 * self.block:
            raise ValueError(
                f"{sites.prefix}.self_attn.{self.layout.q}: {self.linear(self.layout.q).out_features} outputs, "
                f"expected 3 x num_heads x head_dim = {3 * self.block} (q, k and v blocks; grouped kv is not supported)"
            )

    def linear(self, name: str) -> nn.Linear:
        return self.layer.get_submodule(self.layout.path(name))

    def get(self, name: str, side: Literal["in", "out"]) -> Tensor:
        linear = self.linear(name)
        mask = self.masks.get(self.sites.site(name, side))
        size = linear.in_features if side == "in" else linear.out_features
        if mask is None:
            return torch.ones(size, dtype=linear.weight.dtype, device=linear.weight.device)
        return mask.to(dtype=linear.weight.dtype, device=linear.weight.device)

    def zero(self, name: str, side: Literal["in", "out"]) -> Tensor:
        return self.get(name, side) == 0

    def offset(self, role: Literal["q", "k", "v"]) -> int:
        """First row of ``role``'s block in its Linear (0 unless the qkv is fused)."""
        return "qkv".index(role) * self.block if self.layout.fused_qkv else 0

    def role_out_zero(self, role: Literal["q", "k", "v"]) -> Tensor:
        """Output-mask zeros of the q, k or v projection (its row block of a fused qkv)."""
        start = self.offset(role)
        return self.zero(getattr(self.layout, role), "out")[start : start + self.block]

    def folded(self, name: str, already: bool) -> tuple[Tensor, Tensor | None]:
        """``(W, b)`` of a Linear with its masks folded in (as is, when ``already`` folded)."""
        linear = self.linear(name)
        weight, bias = linear.weight.detach(), None if linear.bias is None else linear.bias.detach()
        if already:
            return weight, bias
        m_in, m_out = self.get(name, "in"), self.get(name, "out")
        return weight * m_out[:, None] * m_in[None, :], None if bias is None else bias * m_out


def _uniform_keep(gone: Tensor, heads: list[int], head_dim: int) -> list[list[int]]:
    """Per kept head, the in-head indices kept when every head drops the minimum zero count (lowest zeros first)."""
    per_head = [gone[h * head_dim : (h + 1) * head_dim].nonzero().flatten().tolist() for h in heads]
    drop = min(len(z) for z in per_head)
    dropped = [set(z[:drop]) for z in per_head]
    return [[i for i in range(head_dim) if i not in gone_h] for gone_h in dropped]


def _live(mask: Tensor) -> list[int] | None:
    """Indices of the non-zero entries, or ``None`` when there is no zero (nothing to gather/scatter)."""
    return None if bool((mask != 0).all()) else (mask != 0).nonzero().flatten().tolist()


def _query_scale_slots(qk_index: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """The in-head dimensions some kept head uses (sorted) and, per head, each kept dimension's slot among them."""
    used = sorted({i for idx in qk_index for i in idx})
    slot = {i: n for n, i in enumerate(used)}
    return used, [[slot[i] for i in idx] for idx in qk_index]


def _activation_at_zero(layer: nn.Module, layout: Layout, like: Tensor) -> Tensor:
    """``act(0)`` of the FFN: PatchTST's ``ff[1]``; TimesFm's MLP applies ReLU (0)."""
    zero = torch.zeros(1, dtype=like.dtype, device=like.device)
    if layout.kind == "timesfm":
        return zero[0]
    with torch.no_grad():
        return layer.ff[1](zero)[0]


def _plan_layer(
    name: str, layer: nn.Module, layout: Layout, masks: dict[str, Tensor], residual_slicing: ResidualSlicing,
    folded: bool,
) -> tuple[dict[str, Any], dict[str, Tensor]]:  # fmt: skip
    """Bookkeeping entry of one layer, plus the constants (tensors) the build needs."""
    m = _Masks(masks, LayerSites(name, layout), layer)
    attn = layer.self_attn
    num_heads, head_dim = attn.num_heads, attn.head_dim
    d_model = m.linear(layout.o).out_features
    ffn_dim = m.linear(layout.ffn_in).out_features
    entry: dict[str, Any] = {
        "name": name,
        "layout": layout.kind,
        "fused_qkv": layout.fused_qkv,
        "d_model": d_model,
        "orig_num_heads": num_heads,
        "orig_head_dim": head_dim,
        "orig_ffn_dim": ffn_dim,
        # PatchTST multiplies the scores by 1/sqrt(head_dim); TimesFm scales the query per dimension and the scores by 1
        "scaling": 1.0 if layout.kind == "timesfm" else float(attn.scaling),
    }
    if layout.kind == "timesfm":
        entry["query_scale_factor"] = query_scale_factor(name, attn)
    consts: dict[str, Tensor] = {}

    # attention: heads whose V channels are all gone go first, then the uniform q/k and V widths
    v_gone = m.role_out_zero("v") | m.zero(layout.o, "in")
    qk_gone = m.role_out_zero("q") | m.role_out_zero("k")
    heads = [h for h in range(num_heads) if not bool(v_gone[h * head_dim : (h + 1) * head_dim].all())]
    _, o_bias = m.folded(layout.o, folded)
    if bool(m.zero(layout.o, "out").all()):
        kind = "zero"
    elif not heads:
        kind = "bias" if o_bias is not None and bool((o_bias != 0).any()) else "zero"
        if kind == "bias":
            consts["attn_bias"] = o_bias
    else:
        kind = "attn"
    if kind == "attn":
        qk_index, v_index = _uniform_keep(qk_gone, heads, head_dim), _uniform_keep(v_gone, heads, head_dim)
        if layout.kind == "timesfm":
            consts["query_scale"] = attn.scaling.detach()[_query_scale_slots(qk_index)[0]]
    else:
        heads, qk_index, v_index = [], [], []
    entry |= {
        "attn": kind,
        "num_heads": len(heads),
        "heads": heads,
        "qk_head_dim": len(qk_index[0]) if heads else 0,
        "v_head_dim": len(v_index[0]) if heads else 0,
        "qk_index": qk_index,
        "v_index": v_index,
    }

    # FFN: a channel dead at ffn-in but live at ffn-out still adds act(0) * W_out[:, j]; move that into the bias
    f0_gone, f3_gone = m.zero(layout.ffn_in, "out"), m.zero(layout.ffn_out, "in")
    w3, b3 = m.folded(layout.ffn_out, folded)
    act0 = _activation_at_zero(layer, layout, w3)
    absorbed = f0_gone & ~f3_gone
    constant = torch.zeros(d_model, dtype=w3.dtype, device=w3.device) if b3 is None else b3.clone()
    if bool(absorbed.any()) and bool(act0 != 0):
        constant = constant + act0 * w3[:, absorbed].sum(dim=1)
    keep = (~(f0_gone | f3_gone)).nonzero().flatten().tolist()
    if bool(m.zero(layout.ffn_out, "out").all()):
        ffn_kind = "zero"
    elif not keep:
        ffn_kind = "bias" if bool((constant != 0).any()) else "zero"
    else:
        ffn_kind = "ffn"
    if ffn_kind != "ffn":
        keep = []
    out_bias = ffn_kind == "ffn" and (b3 is not None or bool((constant != 0).any()))
    if ffn_kind == "bias" or out_bias:
        consts["ffn_bias"] = constant
    entry |= {"ffn": ffn_kind, "ffn_dim": len(keep), "ffn_index": keep, "ffn_out_bias": out_bias}

    # residual stream: `index` keeps only the live residual columns (inputs) and rows (outputs)
    gather: dict[str, list[int]] = {}
    scatter: dict[str, list[int]] = {}
    if residual_slicing == "index":
        live_linears = layout.attn_linears if kind == "attn" else ()
        live_linears += layout.ffn_linears if ffn_kind == "ffn" else ()
        for linear in live_linears:
            side: Literal["in", "out"] = "out" if linear in (layout.o, layout.ffn_out) else "in"
            if (index := _live(m.get(linear, side))) is not None:
                (scatter if side == "out" else gather)[linear] = index
    entry |= {"gather": gather, "scatter": scatter}
    return entry, consts


def plan_merge(
    model: nn.Module, masks: dict[str, Tensor], residual_slicing: ResidualSlicing = "fold"
) -> dict[str, Any]:
    """The bookkeeping :func:`merge_` would produce, computed from the masks without touching ``model``.

    Args:
        model: an unmerged PatchTST (masks not folded yet).
        masks: ``{"<linear path>:in" | ":out": mask}``; absent sites are all ones; 0 means pruned.
        residual_slicing: ``fold`` (keep d_model) or ``index`` (gather/scatter live residual channels).

    Returns:
        The bookkeeping dict (see :func:`merge_`), including the predicted parameter counts under ``"params"``.

    Raises:
        KeyError: for a mask naming no unmerged Linear.
        ValueError: for a wrong mask length, an unknown ``residual_slicing`` or an already merged model.
    """
    return _plan(model, masks, residual_slicing, folded=False)


def _plan(
    model: nn.Module, masks: dict[str, Tensor], residual_slicing: ResidualSlicing, folded: bool
) -> dict[str, Any]:
    if residual_slicing not in ("fold", "index"):
        raise ValueError(f"residual_slicing={residual_slicing!r}, expected 'fold' or 'index'")
    _check_masks(model, masks)
    layers = _unmerged_layers(model)
    entries = [_plan_layer(*layer, masks, residual_slicing, folded)[0] for layer in layers]
    bookkeeping: dict[str, Any] = {"format": BOOKKEEPING_FORMAT, "residual_slicing": residual_slicing}
    bookkeeping["layers"] = entries
    bookkeeping["params"] = _predicted_params(model, entries)
    return bookkeeping


# ---------------------------------------------------------------------------------------------------------- counting


def param_count(model: nn.Module, blocks_only: bool = False) -> int:
    """Number of parameters of ``model`` (shared ones once); ``blocks_only`` counts only the transformer layers'."""
    if not blocks_only:
        return sum(p.numel() for p in model.parameters())
    seen: dict[int, int] = {}
    for _, layer in encoder_layers(model):
        seen |= {id(p): p.numel() for p in layer.parameters()}
    return sum(seen.values())


def _linear_params(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _layer_params(layer: nn.Module, layout: Layout, entry: dict[str, Any]) -> int:
    """Parameters of one merged layer as the bookkeeping says (``layer``: the unmerged layer, for norms and biases)."""
    d = entry["d_model"]
    ffn = layer.get_submodule(layout.ffn)
    rest = sum(p.numel() for n, p in layer.named_parameters() if not n.startswith(("self_attn.", f"{layout.ffn}.")))
    ffn_linears = tuple(name.removeprefix(layout.ffn) + "." for name in layout.ffn_linears)  # ".0." / ".gate_proj."
    ffn_rest = sum(p.numel() for n, p in ffn.named_parameters() if not f".{n}".startswith(ffn_linears))  # TimesFm LN

    def width(linear: str, side: str) -> int:
        index = entry["gather" if side == "in" else "scatter"].get(linear)
        return d if index is None else len(index)

    def bias(linear: str) -> bool:
        return layer.get_submodule(layout.path(linear)).bias is not None

    match entry["attn"]:
        case "attn":
            h, qk, v = entry["num_heads"], entry["qk_head_dim"], entry["v_head_dim"]
            attn_count = _linear_params(width(layout.q, "in"), h * qk, bias(layout.q))
            attn_count += _linear_params(width(layout.k, "in"), h * qk, bias(layout.k))
            attn_count += _linear_params(width(layout.v, "in"), h * v, bias(layout.v))
            attn_count += _linear_params(h * v, width(layout.o, "out"), bias(layout.o))
            if layout.kind == "timesfm":
                attn_count += len(_query_scale_slots(entry["qk_index"])[0])
        case "bias":
            attn_count = d
        case _:
            attn_count = 0
    match entry["ffn"]:
        case "ffn":
            f = entry["ffn_dim"]
            ffn_count = _linear_params(width(layout.ffn_in, "in"), f, bias(layout.ffn_in))
            ffn_count += _linear_params(f, width(layout.ffn_out, "out"), entry["ffn_out_bias"]) + ffn_rest
        case "bias":
            ffn_count = d
        case _:
            ffn_count = 0
    return rest + attn_count + ffn_count


def _predicted_params(model: nn.Module, entries: list[dict[str, Any]]) -> dict[str, int]:
    layers = dict(encoder_layers(model))
    blocks_before = param_count(model, blocks_only=True)
    total_before = param_count(model)
    blocks_after = sum(_layer_params(layers[e["name"]], layer_layout(e["name"], layers[e["name"]]), e) for e in entries)
    return {
        "total_before": total_before,
        "blocks_before": blocks_before,
        "total_after": total_before - blocks_before + blocks_after,
        "blocks_after": blocks_after,
    }


def predicted_param_count(
    model_before_merge: nn.Module,
    masks: dict[str, Tensor],
    residual_slicing: ResidualSlicing = "fold",
    blocks_only: bool = False,
) -> int:
    """Physical parameter count :func:`merge_` will produce, from the masks alone (``model`` is not modified).

    Args:
        model_before_merge: the unmerged model.
        masks: the pruning masks (see :func:`plan_merge`).
        residual_slicing: as in :func:`merge_`.
        blocks_only: count only the transformer blocks (encoder layers).

    Returns:
        The predicted total (or block) parameter count.
    """
    params = plan_merge(model_before_merge, masks, residual_slicing)["params"]
    return params["blocks_after" if blocks_only else "total_after"]


# ---------------------------------------------------------------------------------------------------------- building


def _new_linear(
    n_in: int, n_out: int, bias: bool, like: Tensor, in_index: list[int] | None, out_index: list[int] | None, d: int
) -> nn.Linear:
    """An uninitialised Linear (an :class:`IndexedLinear` when gathering or scattering) on ``like``'s device/dtype."""
    indexed = in_index is not None or out_index is not None
    cls = IndexedLinear if indexed else nn.Linear
    with warnings.catch_warnings():  # a zero-width side (qk_head_dim = 0, nothing live) is expected here
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors is a no-op")
        linear = torch.nn.utils.skip_init(cls, n_in, n_out, bias=bias, device=like.device, dtype=like.dtype)
    with torch.no_grad():
        linear.weight.zero_()
        if linear.bias is not None:
            linear.bias.zero_()
    if indexed:
        linear.set_index(in_index, out_index, d)
    return linear


def _fill(linear: nn.Linear, weight: Tensor, bias: Tensor | None) -> None:
    with torch.no_grad():
        linear.weight.copy_(weight)
        if linear.bias is not None:
            linear.bias.copy_(bias if bias is not None else torch.zeros_like(linear.bias))


def _build_layer(layer: nn.Module, layout: Layout, entry: dict[str, Any], consts: dict[str, Tensor] | None) -> None:
    """Replace ``layer``'s attention and FFN by the merged shapes; copy sliced weights when ``consts`` is given.

    With ``consts`` (merge) the layer's Linears must already hold the folded weights; without (rebuild) the new
    weights are zeros, to be overwritten by ``load_state_dict``. A fused qkv gives three Linears (its row blocks).
    """
    d = entry["d_model"]
    attn = layer.self_attn
    like = layer.get_submodule(layout.path(layout.q)).weight
    gather, scatter = entry["gather"], entry["scatter"]
    timesfm = layout.kind == "timesfm"

    def make(name: str, rows: list[int] | None, cols: list[int] | None, bias: bool | None = None) -> nn.Linear:
        """New Linear from the old one's ``rows`` (outputs) and ``cols`` (inputs); ``None`` keeps a whole side."""
        old = layer.get_submodule(layout.path(name))
        cols = gather.get(name, cols)
        rows = scatter.get(name, rows)
        n_in = old.in_features if cols is None else len(cols)
        n_out = old.out_features if rows is None else len(rows)
        has_bias = old.bias is not None if bias is None else bias
        new = _new_linear(n_in, n_out, has_bias, like, gather.get(name), scatter.get(name), d)
        if consts is not None:
            weight = old.weight.detach()
            weight = weight if rows is None else weight[rows]
            weight = weight if cols is None else weight[:, cols]
            b = None if old.bias is None else (old.bias.detach() if rows is None else old.bias.detach()[rows])
            _fill(new, weight, b)
        return new

    match entry["attn"]:
        case "attn":
            hd = entry["orig_head_dim"]
            heads = entry["heads"]
            qk_rows = [h * hd + i for h, idx in zip(heads, entry["qk_index"], strict=True) for i in idx]
            v_rows = [h * hd + i for h, idx in zip(heads, entry["v_index"], strict=True) for i in idx]
            block = 0 if not layout.fused_qkv else attn.num_heads * hd  # fused qkv: q, k, v row blocks
            scale: dict[str, Any] = {}
            if timesfm:
                used, slots = _query_scale_slots(entry["qk_index"])
                raw = consts["query_scale"] if consts is not None else like.new_zeros(len(used))
                factor = entry["query_scale_factor"]
                scale = {"query_scale": raw, "query_scale_index": slots, "query_scale_factor": factor}
            layer.self_attn = MergedAttention(
                q_proj=make(layout.q, qk_rows, None),
                k_proj=make(layout.k, [block + r for r in qk_rows], None),
                v_proj=make(layout.v, [2 * block + r for r in v_rows], None),
                out_proj=make(layout.o, None, v_rows),
                num_heads=entry["num_heads"],
                qk_head_dim=entry["qk_head_dim"],
                v_head_dim=entry["v_head_dim"],
                scaling=entry["scaling"],
                dropout=float(getattr(attn, "dropout", getattr(attn, "attention_dropout", 0.0))),
                attn_implementation=getattr(getattr(attn, "config", None), "_attn_implementation", None) or "eager",
                **scale,
            )
        case "bias":
            value = consts["attn_bias"] if consts is not None else like.new_zeros(d)
            layer.self_attn = Bias(value, attention=True)
        case _:
            layer.self_attn = Zero(d, attention=True)

    match entry["ffn"]:
        case "ffn":
            keep = entry["ffn_index"]
            ffn_in = make(layout.ffn_in, keep, None)
            ffn_out = make(layout.ffn_out, None, keep, bias=entry["ffn_out_bias"])
            if consts is not None and "ffn_bias" in consts:
                rows = scatter.get(layout.ffn_out)
                with torch.no_grad():
                    ffn_out.bias.copy_(consts["ffn_bias"] if rows is None else consts["ffn_bias"][rows])
            for name, new in ((layout.ffn_in, ffn_in), (layout.ffn_out, ffn_out)):
                parent, _, child = name.rpartition(".")
                setattr(layer.get_submodule(parent), child, new)
        case "bias":
            value = consts["ffn_bias"] if consts is not None else like.new_zeros(d)
            setattr(layer, layout.ffn, Bias(value, attention=False, residual=timesfm))
        case _:
            setattr(layer, layout.ffn, Zero(d, attention=False, residual=timesfm))


@torch.no_grad()
def _fold_(model: nn.Module, masks: dict[str, Tensor]) -> None:
    """``W <- diag(m_out) W diag(m_in)``, ``b <- m_out * b`` for every site, in place."""
    modules = dict(model.named_modules())
    for site, mask in masks.items():
        path, side = site.rsplit(":", 1)
        linear = modules[path]
        mask = mask.to(dtype=linear.weight.dtype, device=linear.weight.device)
        if side == "in":
            linear.weight.mul_(mask[None, :])
        else:
            linear.weight.mul_(mask[:, None])
            if linear.bias is not None:
                linear.bias.mul_(mask)


def merge_(model: nn.Module, masks: dict[str, Tensor], residual_slicing: ResidualSlicing = "fold") -> dict[str, Any]:
    """Turn ``model`` in place into a smaller dense model whose outputs equal ``with masked(model, masks)``'s.

    Args:
        model: an unmerged PatchTST or TimesFm (``PatchTSTForPrediction``, ``TimesFmModelForPrediction`` or
            anything holding ``PatchTSTEncoderLayer``s or ``TimesFmDecoderLayer``s).
        masks: ``{"<linear path>:in" | ":out": mask}`` (see ``spec.mask_sizes``); 0 means pruned, absent sites are
            all ones. Sites outside the encoder layers (``prune_scope: all_linear``) are folded, not sliced.
        residual_slicing: ``fold`` keeps d_model with zero rows/columns; ``index`` slices the residual-side
            columns/rows and gathers/scatters with :class:`IndexedLinear`.

    Returns:
        The bookkeeping, primitives only::

            {"format": "prune_finetune.merge/1", "residual_slicing": "fold" | "index",
             "layers": [{"name": "model.encoder.layers.0", "layout": "patchtst" | "timesfm", "fused_qkv": bool,
                         "d_model": int, "orig_num_heads": int, "orig_head_dim": int, "orig_ffn_dim": int,
                         "scaling": float, "query_scale_factor": float (TimesFm only),
                         "attn": "attn" | "bias" | "zero", "num_heads": int, "heads": [kept head ids],
                         "qk_head_dim": int, "v_head_dim": int,
                         "qk_index": [[kept in-head q/k indices] per kept head], "v_index": [[...] per kept head],
                         "ffn": "ffn" | "bias" | "zero", "ffn_dim": int, "ffn_index": [kept FFN channels],
                         "ffn_out_bias": bool,
                         "gather": {linear: [live input columns]}, "scatter": {linear: [live output rows]}}, ...],
             "params": {"total_before", "blocks_before", "total_after", "blocks_after": int}}

        ``params`` holds the counts predicted from the masks; ``gather``/``scatter`` are empty under ``fold``.
        ``scaling`` is the score scaling (PatchTST ``1/sqrt(head_dim)``, TimesFm 1) and ``query_scale_factor``
        TimesFm's constant ``1.442695041/sqrt(head_dim)``, both of the original widths. Bookkeeping written before
        TimesFm support has no ``layout``/``fused_qkv`` and reads as PatchTST.

    Raises:
        KeyError: for a mask naming no unmerged Linear of ``model``.
        ValueError: for a wrong mask length, an unknown ``residual_slicing``, ``channel_attention`` or a model that
            is already merged.
    """
    if residual_slicing not in ("fold", "index"):
        raise ValueError(f"residual_slicing={residual_slicing!r}, expected 'fold' or 'index'")
    _check_masks(model, masks)
    layers = _unmerged_layers(model)
    _fold_(model, masks)
    planned = [_plan_layer(*layer, masks, residual_slicing, folded=True) for layer in layers]
    entries = [entry for entry, _ in planned]
    bookkeeping: dict[str, Any] = {"format": BOOKKEEPING_FORMAT, "residual_slicing": residual_slicing}
    bookkeeping["layers"] = entries
    bookkeeping["params"] = _predicted_params(model, entries)
    for (_, layer, layout), (entry, consts) in zip(layers, planned, strict=True):
        _build_layer(layer, layout, entry, consts)
    return bookkeeping


def rebuild_(model: nn.Module, bookkeeping: dict[str, Any]) -> None:
    """Give a freshly built unpruned model of the same config the merged shapes (weights zero) for ``load_state_dict``.

    Args:
        model: an unmerged model of the config the bookkeeping came from.
        bookkeeping: the dict :func:`merge_` returned.

    Raises:
        ValueError: on an unknown bookkeeping format, or a layer whose name or original sizes differ from the model.
    """
    if bookkeeping.get("format") != BOOKKEEPING_FORMAT:
        raise ValueError(f"bookkeeping format {bookkeeping.get('format')!r}, expected {BOOKKEEPING_FORMAT!r}")
    layers = {name: (layer, layout) for name, layer, layout in _unmerged_layers(model)}
    entries = bookkeeping["layers"]
    if sorted(layers) != sorted(e["name"] for e in entries):
        raise ValueError(f"bookkeeping layers {[e['name'] for e in entries]}, but the model has {list(layers)}")
    for entry in entries:
        layer, layout = layers[entry["name"]]
        found = {
            "layout": layout.kind,
            "fused_qkv": layout.fused_qkv,
            "d_model": layer.get_submodule(layout.path(layout.o)).out_features,
            "orig_num_heads": layer.self_attn.num_heads,
            "orig_head_dim": layer.self_attn.head_dim,
            "orig_ffn_dim": layer.get_submodule(layout.ffn_in).out_features,
        }
        defaults = {"layout": "patchtst", "fused_qkv": False}  # bookkeeping written before TimesFm support
        for key, value in found.items():
            if entry.get(key, defaults.get(key)) != value:
                raise ValueError(f"{entry['name']}: bookkeeping {key}={entry.get(key)}, but the model has {value}")
    for entry in entries:
        _build_layer(*layers[entry["name"]], entry, None)


def merge_summary(bookkeeping: dict[str, Any]) -> dict[str, Any]:
    """A short, JSON-ready summary: per layer heads kept and sub-layer kinds, block parameters before/after.

    Args:
        bookkeeping: the dict :func:`merge_` returned.

    Returns:
        ``{"layers": [{"name", "attn", "heads_kept", "heads_before", "qk_head_dim", "v_head_dim", "head_dim_before",
        "ffn", "ffn_dim", "ffn_dim_before"}], "blocks_before", "blocks_after", "block_fraction_kept",
        "total_before", "total_after", "residual_slicing"}``.
    """
    params = bookkeeping["params"]
    layers = [
        {
            "name": e["name"],
            "attn": e["attn"],
            "heads_kept": e["num_heads"],
            "heads_before": e["orig_num_heads"],
            "qk_head_dim": e["qk_head_dim"],
            "v_head_dim": e["v_head_dim"],
            "head_dim_before": e["orig_head_dim"],
            "ffn": e["ffn"],
            "ffn_dim": e["ffn_dim"],
            "ffn_dim_before": e["orig_ffn_dim"],
        }
        for e in bookkeeping["layers"]
    ]
    before, after = params["blocks_before"], params["blocks_after"]
    return {
        "layers": layers,
        "residual_slicing": bookkeeping["residual_slicing"],
        "blocks_before": before,
        "blocks_after": after,
        "block_fraction_kept": after / before if before else math.nan,
        "total_before": params["total_before"],
        "total_after": params["total_after"],
    }
