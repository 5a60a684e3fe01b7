"""LoRA adapters on the zoo's TSFMs through ``peft`` (the card's ``lora`` baseline; pure torch + peft, no Lightning).

The adapters go on the Linears inside every transformer layer that ``spec.encoder_layers`` finds, dense or merged:

- PatchTST: ``self_attn.{q_proj,k_proj,v_proj,out_proj}``, ``ff.0`` (d -> ffn) and ``ff.3`` (ffn -> d);
- TimesFm: ``self_attn.{q_proj,k_proj,v_proj,o_proj}`` (or a fused ``qkv_proj``), ``mlp.gate_proj`` and
  ``mlp.down_proj``;
- after the merge (``merge.py``) the attention is a ``MergedAttention`` with ``{q,k,v,out}_proj`` for both backbones,
  and its Linears may be :class:`~zoo.prune_finetune.merge.IndexedLinear` (``residual_slicing: index``). A sub-layer
  the merge replaced by ``Zero``/``Bias`` has no Linear and gets no adapter, nor does a Linear with a zero-width side
  (a head whose q/k width went to 0).

peft builds everything: ``LoraConfig(r, lora_alpha, lora_dropout, target_modules=<the full dotted names>)`` and
``inject_adapter_in_model`` replace each target by peft's ``lora.Linear`` (``h = W x + b + (alpha / r) B A x``,
A Kaiming-uniform, B = 0, so the adapted model starts equal to the base one) and freeze every other parameter
(``bias="none"``). An ``IndexedLinear`` reads and writes full-width (d_model) tensors while its weight covers only the
live residual channels, so peft's default layer would feed A the full-width input; it is registered through peft's
custom-module mapping (``LoraConfig._register_custom_module``) to :func:`indexed_lora_linear`, peft's ``lora.Linear``
whose forward gathers A's input and scatters B's output with the base layer's indices (initialisation, scaling,
dropout, merging and the state dict are peft's).

State dicts keep the adapters separate (``<linear>.base_layer.weight``, ``<linear>.lora_A.default.weight``, ...) plus
a root buffer ``lora_scaling`` (alpha / r). :func:`fold_lora_state_` turns such a state dict into the plain
network's (``W + (alpha / r) B A``), so a LoRA checkpoint also loads as ``pretrained`` into a network without adapters.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor, nn

from zoo.core.messages import say
from zoo.prune_finetune.merge import IndexedLinear
from zoo.prune_finetune.spec import encoder_layers

__all__ = [
    "ADAPTER",
    "BLOCK_LINEARS",
    "LORA_SCALING",
    "add_lora",
    "fold_lora_state_",
    "fold_on_load",
    "has_lora",
    "indexed_lora_linear",
    "lora_targets",
    "remove_lora",
]

#: The Linears adapted inside each transformer layer (relative paths; those a layer does not have are skipped).
BLOCK_LINEARS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.qkv_proj",
    "self_attn.out_proj",
    "self_attn.o_proj",
    "ff.0",
    "ff.3",
    "mlp.gate_proj",
    "mlp.down_proj",
)
#: peft's adapter name.
ADAPTER = "default"
#: Root buffer holding alpha / r while adapters are installed (read by :func:`fold_lora_state_`).
LORA_SCALING = "lora_scaling"


def _is_lora(module: nn.Module) -> bool:
    """A peft LoRA layer (duck-typed, so that checking needs no peft import)."""
    return hasattr(module, "base_layer") and isinstance(getattr(module, "lora_A", None), nn.ModuleDict)


def has_lora(model: nn.Module) -> bool:
    """Whether ``model`` holds peft LoRA layers."""
    return any(_is_lora(m) for m in model.modules())


def lora_targets(model: nn.Module) -> list[str]:
    """Full dotted names of the Linears :func:`add_lora` adapts, in module order (see the module docstring)."""
    found = []
    for name, layer in encoder_layers(model):
        for path in BLOCK_LINEARS:
            try:
                module = layer.get_submodule(path)
            except AttributeError:  # not in this layout, or the sub-layer is a merged Zero/Bias
                continue
            base = module.get_base_layer() if _is_lora(module) else module
            if isinstance(base, nn.Linear) and base.in_features > 0 and base.out_features > 0:
                found.append(f"{name}.{path}")
    return found


@functools.cache
def indexed_lora_linear() -> type[nn.Module]:
    """The peft ``lora.Linear`` for an :class:`IndexedLinear` base: A reads the gathered input, B's rows scattered.

    Built on first use, so that importing this module does not import peft.
    """
    from peft.tuners.lora import Linear as LoraLinear

    class IndexedLoraLinear(LoraLinear):
        """LoRA on an ``IndexedLinear``: ``base(x) + scatter((alpha / r) B A gather(x))``, gather/scatter the base's."""

        def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            if self.disable_adapters or self.merged:  # peft's path: the base layer alone (merged weights)
                return super().forward(x, *args, **kwargs)
            if kwargs.get("adapter_names") is not None:
                raise NotImplementedError("IndexedLoraLinear: mixed-adapter batches (adapter_names) are not supported")
            base = self.get_base_layer()
            result = base(x)
            inner = x if base.in_index is None else x.index_select(-1, base.in_index)
            delta = None
            for name in self.active_adapters:
                if name not in self.lora_A:
                    continue
                a, b = self.lora_A[name], self.lora_B[name]
                term = b(a(self.lora_dropout[name](inner.to(a.weight.dtype)))) * self.scaling[name]
                delta = term if delta is None else delta + term
            if delta is None:
                return result
            if base.out_index is not None:
                full = delta.new_zeros(*delta.shape[:-1], base.full_out_features)
                delta = full.index_add(-1, base.out_index, delta)
            return result + delta.to(result.dtype)

    return IndexedLoraLinear


def add_lora(model: nn.Module, rank: int, alpha: float, dropout: float = 0.0) -> list[str]:
    """Inject peft LoRA adapters of rank ``rank`` into every block Linear of ``model``; freeze everything else.

    Args:
        model: a dense or merged PatchTST/TimesFm network (``Forecaster`` or anything holding their layers).
        rank: the adapters' rank r.
        alpha: LoRA alpha (the update is scaled by alpha / r).
        dropout: dropout on the adapters' input.

    Returns:
        The adapted Linears' dotted names (:func:`lora_targets`).

    Raises:
        ValueError: if ``model`` already holds adapters or has no block Linear left to adapt.
    """
    from peft import LoraConfig, inject_adapter_in_model

    if has_lora(model):
        raise ValueError(f"{type(model).__name__} already holds LoRA adapters")
    targets = lora_targets(model)
    if not targets:
        raise ValueError(f"{type(model).__name__}: no block Linear left to adapt (every sub-layer was merged away)")
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")
    config._register_custom_module({IndexedLinear: indexed_lora_linear()})
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    param = next(model.parameters())
    model.register_buffer(LORA_SCALING, torch.tensor(alpha / rank, dtype=param.dtype, device=param.device))
    return targets


def remove_lora(model: nn.Module) -> None:
    """Put every LoRA layer's base layer back, dropping the adapters unmerged; unfreeze every parameter."""
    for name, module in list(model.named_modules()):
        if _is_lora(module):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())
    if LORA_SCALING in model._buffers:
        del model._buffers[LORA_SCALING]
    if "peft_config" in vars(model):  # written by inject_adapter_in_model
        del model.peft_config
    model.requires_grad_(True)


def fold_lora_state_(state: dict[str, Tensor], prefix: str = "") -> int:
    """Turn a LoRA network's state dict (keys under ``prefix``) into the plain network's, in place.

    Every ``X.base_layer.<p>`` becomes ``X.<p>``, with ``X.weight = W + s B A`` (``s`` the ``lora_scaling`` entry);
    the adapter entries and ``lora_scaling`` are dropped. A no-op without ``<prefix>lora_scaling``.

    Returns:
        The number of Linears folded.
    """
    scaling = state.pop(f"{prefix}{LORA_SCALING}", None)
    if scaling is None:
        return 0
    a_suffix, b_suffix = f".lora_A.{ADAPTER}.weight", f".lora_B.{ADAPTER}.weight"
    linears = [k[: -len(a_suffix)] for k in list(state) if k.startswith(prefix) and k.endswith(a_suffix)]
    for linear in linears:
        a, b = state.pop(f"{linear}{a_suffix}"), state.pop(f"{linear}{b_suffix}")
        for key in [k for k in state if k.startswith(f"{linear}.base_layer.")]:
            value = state.pop(key)
            name = key[len(f"{linear}.base_layer.") :]
            if name == "weight":
                value = value + scaling.to(value) * (b.to(value) @ a.to(value))
            state[f"{linear}.{name}"] = value
    return len(linears)


def fold_on_load(module: nn.Module, state: dict[str, Tensor], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: a LoRA state dict loading into a network without adapters is folded first."""
    if f"{prefix}{LORA_SCALING}" in state and not has_lora(module):
        folded = fold_lora_state_(state, prefix)
        say(f"{type(module).__name__}: folded the LoRA adapters of {folded} Linears into their weights (W + s B A)")
