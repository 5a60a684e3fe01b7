"""The card's tiny random-init MoE causal LMs (and a dense Llama), local-folder loading and size introspection.

Every tiny config runs eager attention and eager experts (``experts_implementation="eager"``: the loop over the
experts a batch hit, which FlopCounterMode and the poisoning test rely on; transformers 5 defaults to
``grouped_mm``). Sizes of unknown families come from the instantiated modules (``introspect_shape``), with a warning.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.moe_cap.metrics import KNOWN_FAMILIES, MoEShape, moe_shape

#: The card's tiny families (``family`` init arg of ``MoEEvalModule``).
FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "olmoe", "llama")


def tiny_config(family: str, *, vocab_size: int, pad_token_id: int, bos_token_id: int, eos_token_id: int,
                hidden_size: int = 64, num_layers: int | None = None, q_lora_rank: int | None = 24,
                max_position_embeddings: int = 512) -> Any:  # fmt: skip
    """The card's tiny config of ``family`` ("Tiny configs"): d = 64, 4 heads, 2 KV heads, 2 layers unless stated.

    Args:
        family: one of ``FAMILIES``.
        vocab_size: the tokenizer's vocabulary.
        pad_token_id: pad id (also the config's).
        bos_token_id: bos id.
        eos_token_id: eos id (``generate(min_new_tokens=...)`` suppresses it).
        hidden_size: d (the overhead benchmark uses 256).
        num_layers: decoder layers (default 2; Qwen3-MoE 3, so its dense layer 0 has two sparse layers after it).
        q_lora_rank: DeepSeek-V3's low-rank query path (None: the full ``q_proj``, the card's second variant).
        max_position_embeddings: positions (rotary tables only; prompts here are short).
    """
    import transformers as tf

    common: dict[str, Any] = {
        "vocab_size": vocab_size, "hidden_size": hidden_size, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": num_layers or 2, "max_position_embeddings": max_position_embeddings,
        "pad_token_id": pad_token_id, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id,
        "tie_word_embeddings": False,
    }  # fmt: skip
    match family:
        case "mixtral":
            return tf.MixtralConfig(**common, num_local_experts=8, num_experts_per_tok=2, intermediate_size=128)
        case "qwen2_moe":
            return tf.Qwen2MoeConfig(**common, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                     shared_expert_intermediate_size=64, intermediate_size=128)  # fmt: skip
        case "qwen3_moe":
            common["num_hidden_layers"] = num_layers or 3
            return tf.Qwen3MoeConfig(**common, head_dim=hidden_size // 4, mlp_only_layers=[0], num_experts=8,
                                     num_experts_per_tok=2, moe_intermediate_size=32,
                                     intermediate_size=128)  # fmt: skip
        case "deepseek_v3":
            common["num_key_value_heads"] = 4  # MLA has per-head K/V from the latent: no grouped KV heads
            return tf.DeepseekV3Config(
                **common, first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                moe_intermediate_size=32, intermediate_size=128, n_group=2, topk_group=1, kv_lora_rank=16,
                q_lora_rank=q_lora_rank, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
            )  # fmt: skip
        case "olmoe":
            return tf.OlmoeConfig(**common, num_experts=16, num_experts_per_tok=4, intermediate_size=32)
        case "llama":
            return tf.LlamaConfig(**common, intermediate_size=128)
    raise ValueError(f"--model.init_args.family={family!r}: expected one of {list(FAMILIES)}")


def build_model(config: Any, seed: int = 0) -> nn.Module:
    """A random-init causal LM of ``config`` with eager attention and eager experts, seeded, in eval mode."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, **eager_kwargs(config))
    return model.eval()


def eager_kwargs(config: Any) -> dict[str, str]:
    """``attn_implementation``/``experts_implementation`` both eager (the latter only where the model has experts)."""
    kwargs = {"attn_implementation": "eager"}
    if getattr(config, "model_type", "") not in ("llama", "mistral", "qwen2", "qwen3"):
        kwargs["experts_implementation"] = "eager"
    return kwargs


def load_folder(path: str) -> tuple[nn.Module, Any]:
    """Model and tokenizer of a local Hugging Face folder (``local_files_only``; left padding forced).

    Raises:
        FileNotFoundError: the folder does not exist (nothing is looked up on the hub).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"pretrained={path!r}: no such local folder (the zoo never downloads)")
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, **eager_kwargs(config))
    except (ValueError, TypeError):  # a family without an experts switch
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.eval(), tokenizer


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks of a Hugging Face causal LM (``model.model.layers`` in every listed family)."""
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no `model.layers` ModuleList; cannot locate the decoder layers")
    return layers


def experts_modules(model: nn.Module) -> dict[int, nn.Module]:
    """Layer index -> the ``experts`` submodule of each sparse layer (the transformers 5 MoE layout)."""
    found = {}
    for i, layer in enumerate(decoder_layers(model)):
        mlp = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
        experts = getattr(mlp, "experts", None)
        if isinstance(experts, nn.Module) and not isinstance(experts, nn.ModuleList):
            found[i] = experts
    return found


def gate_modules(model: nn.Module) -> dict[int, nn.Module]:
    """Layer index -> the router (``gate``) of each sparse layer, for layouts without an ``experts(..., index, w)``."""
    found = {}
    for i, layer in enumerate(decoder_layers(model)):
        mlp = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
        gate = getattr(mlp, "gate", None) or getattr(mlp, "router", None)
        if isinstance(gate, nn.Module) and getattr(mlp, "experts", None) is not None:
            found[i] = gate
    return found


def _numel_without_norms(module: nn.Module) -> int:
    norms = sum(p.numel() for m in module.modules() if "norm" in type(m).__name__.lower() for p in m.parameters())
    return sum(p.numel() for p in module.parameters()) - norms


def introspect_shape(model: nn.Module) -> MoEShape:
    """Sizes by introspection: ``numel(experts)/E`` per expert and the attention module's numel (norms excluded).

    For families without a config formula; known families use ``moe_shape`` (test 3 makes the two agree).
    """
    config = model.config
    layers = decoder_layers(model)
    experts = experts_modules(model)
    for i, layer in enumerate(layers):  # transformers 4.x: a ModuleList of experts (traced through the gate)
        block = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
        if i not in experts and isinstance(getattr(block, "experts", None), nn.ModuleList):
            experts[i] = block.experts
    attn = tuple(_numel_without_norms(layer.self_attn) for layer in layers)
    num_experts = int(getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
                      or getattr(config, "n_routed_experts", None) or 1)  # fmt: skip
    expert = shared = router = 0
    mlp: list[int] = []
    for i, layer in enumerate(layers):
        block = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
        if i in experts:
            expert = _numel_without_norms(experts[i]) // num_experts
            gate = getattr(block, "gate", None) or getattr(block, "router", None)
            router = _numel_without_norms(gate) if gate is not None else 0
            if isinstance(extra := getattr(block, "shared_expert_gate", None), nn.Module):
                router += _numel_without_norms(extra)  # Qwen2-MoE's d x 1 gate counts as router, as in the formula
            rest = _numel_without_norms(block) - expert * num_experts - router
            shared = rest  # shared experts and their gates
            mlp.append(0)
        else:
            mlp.append(_numel_without_norms(block) if block is not None else 0)
    n_h = config.num_attention_heads
    d_h = getattr(config, "head_dim", None) or config.hidden_size // n_h
    n_kv = getattr(config, "num_key_value_heads", None) or n_h
    return MoEShape(
        family=str(getattr(config, "model_type", "unknown")), attn=attn,
        sparse=tuple(i in experts for i in range(len(layers))), mlp=tuple(mlp), num_experts=num_experts,
        top_k=int(getattr(config, "num_experts_per_tok", None) or 1), expert=expert, shared=shared, router=router,
        num_heads=n_h, d_qk=d_h, d_v=d_h, head_dim=d_h, kv_per_token=2 * len(layers) * n_kv * d_h,
        lm_head=config.hidden_size * config.vocab_size, shared_code_2x=shared, notes=("introspected",),
    )  # fmt: skip


def shape_of(model: nn.Module, deepseek_shared: str = "config") -> MoEShape:
    """The config formulas for a known family, else introspection with a warning."""
    config = model.config
    if getattr(config, "model_type", None) in KNOWN_FAMILIES:
        return moe_shape(config, deepseek_shared=deepseek_shared)
    warnings.warn(
        f"model_type={getattr(config, 'model_type', None)!r} has no MoE-CAP size formula; sizes come from the "
        f"instantiated modules (numel(experts)/E, attention numel; norms excluded)",
        stacklevel=2,
    )
    return introspect_shape(model)


def _cache_tensors(cache: Any) -> list[torch.Tensor]:
    if cache is None:
        return []
    layers = getattr(cache, "layers", None)
    if layers:
        return [t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                if isinstance(t, torch.Tensor)]  # fmt: skip
    if isinstance(cache, tuple | list):
        return [t for pair in cache for t in pair if isinstance(t, torch.Tensor)]
    return []


def cache_element_bytes(cache: Any) -> float | None:
    """Bytes per element of the cache's tensors (None without a cache)."""
    tensors = _cache_tensors(cache)
    return float(tensors[0].element_size()) if tensors else None


def cache_numel(cache: Any) -> int:
    """Elements of the tensors a transformers cache holds (``layers[i].keys/values``; legacy tuples too)."""
    return sum(t.numel() for t in _cache_tensors(cache))
