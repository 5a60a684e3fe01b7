"""MoE-CAP's sparsity-aware metrics as pure arithmetic (card ``moe_cap``, "Method"): no torch import.

Sizes are in parameters, per decoder layer, from a Hugging Face config (duck-typed: any object with the config's
attributes). ``S_activated`` sums attention, the experts a forward's batch actually routed to (``count_l`` per sparse
layer, from the router trace), shared experts and dense MLPs; S-MBU divides its bytes plus the KV cache read by the
latency and the peak bandwidth, S-MFU divides the forward's FLOPs (top-k + shared experts, router, attention
scores) by the latency and the dense peak. The dense baselines (MBU/MFU) count every expert; ``s_mfu_code`` is the
public code's arithmetic (one routed expert, no router, DeepSeek's shared size hard-coded to 2 experts, its
attention-score term; Auto-CAP/MoE-CAP ``moe_cap/utils/basic_utils.py``). Equations and sources:
``zoo/moe_cap/README.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: Bytes per element of the weight / KV storage dtypes (the card's table).
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0, "float32": 4.0, "fp16": 2.0, "float16": 2.0, "bf16": 2.0, "bfloat16": 2.0,
    "int8": 1.0, "fp8": 1.0, "float8_e4m3fn": 1.0, "float8_e5m2": 1.0,
    "int4": 0.5, "fp4": 0.5, "awq": 0.5, "gptq": 0.5,
}  # fmt: skip
#: ``model_type`` values whose sizes come from the config formulas (others: introspection, see ``model.py``).
KNOWN_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "olmoe", "llama", "mistral", "qwen2", "qwen3")
_DENSE_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def bytes_per_element(dtype: str) -> float:
    """Bytes per element of ``dtype`` (``fp32``, ``bf16``, ``int4`` ...; torch names such as ``float16`` too)."""
    key = dtype.removeprefix("torch.").lower()
    if key not in BYTES_PER_ELEMENT:
        raise ValueError(f"dtype={dtype!r}: unknown storage dtype; expected one of {sorted(BYTES_PER_ELEMENT)}")
    return BYTES_PER_ELEMENT[key]


@dataclass(frozen=True)
class MoEShape:
    """Per-layer parameter counts of a decoder (norms, embeddings excluded; ``lm_head`` kept apart).

    Attributes:
        family: the config's ``model_type``.
        attn: attention parameters per layer (``S_attn,l``, biases included).
        sparse: whether layer ``l`` is a routed-expert layer.
        mlp: dense MLP parameters per layer (``S_mlp,l``; 0 on sparse layers).
        num_experts: routed experts per sparse layer ``E`` (1 for a dense model).
        top_k: experts per token ``k``.
        expert: parameters of one routed expert ``S_expert``.
        shared: shared-expert parameters per sparse layer ``S_shared``.
        router: router parameters per sparse layer ``N_router`` (Qwen2-MoE's shared-expert gate included).
        num_heads: query heads ``n_h``.
        d_qk: query/key head dim of the score product (GQA ``d_h``; MLA ``qk_nope + qk_rope``).
        d_v: value head dim.
        head_dim: ``d_h`` of a GQA head (MLA: ``v_head_dim``); kept in saved records, no formula reads it (the public
            code's score term uses ``d_qk + d_v``, see :func:`code_score_flops_per_token`).
        kv_per_token: KV-cache elements per token over all layers (``KV_tok``).
        lm_head: parameters of the output projection (``d·V``), counted only with ``include_lm_head``.
        sliding_window: the config's attention window, caps the context read (None: none).
        shared_code_2x: the public code's shared size per sparse layer (DeepSeek: its hard-coded
            ``3·d·2·moe_intermediate_size``; other families: ``shared``).
        latent_up: MLA's ``kv_b`` parameters per layer (0 for GQA): transformers caches the latent and re-expands
            every cached token through ``kv_b`` at each forward [check], FLOPs the per-token formula does not count.
        notes: provenance (``introspected``).
    """

    family: str
    attn: tuple[int, ...]
    sparse: tuple[bool, ...]
    mlp: tuple[int, ...]
    num_experts: int
    top_k: int
    expert: int
    shared: int
    router: int
    num_heads: int
    d_qk: int
    d_v: int
    head_dim: int
    kv_per_token: int
    lm_head: int
    sliding_window: int | None = None
    shared_code_2x: int = 0
    latent_up: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def num_layers(self) -> int:
        """Decoder layers."""
        return len(self.attn)

    @property
    def sparse_layers(self) -> list[int]:
        """Indices of the routed-expert layers."""
        return [i for i, s in enumerate(self.sparse) if s]

    @property
    def is_moe(self) -> bool:
        """Whether any layer routes (a dense model is the card's ``E = 1`` case)."""
        return any(self.sparse)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able primitives."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MoEShape:
        """Inverse of :meth:`to_dict` (the ``shape`` of a saved ``moecap_{stage}.json``)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _get(config: Any, name: str, default: Any = None) -> Any:
    value = getattr(config, name, default)
    return default if value is None else value


def _head_dim(config: Any) -> int:
    head_dim = getattr(config, "head_dim", None)
    return int(head_dim) if head_dim else config.hidden_size // config.num_attention_heads


def gqa_attention_params(config: Any) -> int:
    """``S_attn = d·(n_h·d_h + 2·n_kv·d_h) + n_h·d_h·d`` plus the q/k/v (and o) biases where the config has them."""
    d, n_h, d_h = config.hidden_size, config.num_attention_heads, _head_dim(config)
    n_kv = _get(config, "num_key_value_heads", n_h)
    size = d * (n_h * d_h + 2 * n_kv * d_h) + n_h * d_h * d
    if getattr(config, "model_type", "") in ("qwen2_moe", "qwen2") and _get(config, "qkv_bias", True):
        size += n_h * d_h + 2 * n_kv * d_h  # Qwen2's q/k/v biases (o has none; transformers hard-codes them)
    elif _get(config, "attention_bias", False):
        size += n_h * d_h + 2 * n_kv * d_h + d  # Llama-style attention_bias: q, k, v and o
    return size


def mla_attention_params(config: Any) -> int:
    """DeepSeek multi-head latent attention: q path (low-rank if ``q_lora_rank``), ``kv_a``, ``kv_b`` and ``o``."""
    d, n_h = config.hidden_size, config.num_attention_heads
    q_hd = config.qk_nope_head_dim + config.qk_rope_head_dim
    q_lora = getattr(config, "q_lora_rank", None)
    q = d * n_h * q_hd if q_lora is None else d * q_lora + q_lora * n_h * q_hd
    kv_a = d * (config.kv_lora_rank + config.qk_rope_head_dim)
    kv_b = config.kv_lora_rank * n_h * (config.qk_nope_head_dim + config.v_head_dim)
    o = n_h * config.v_head_dim * d
    bias = d if _get(config, "attention_bias", False) else 0  # o_proj bias
    if _get(config, "attention_bias", False):
        bias += (q_lora or 0) + config.kv_lora_rank + config.qk_rope_head_dim  # q_a / kv_a biases
    return q + kv_a + kv_b + o + bias


def _sparse_pattern(config: Any) -> tuple[bool, ...]:
    """The card's sparse-layer rule [check] per family."""
    n, family = config.num_hidden_layers, config.model_type
    match family:
        case "qwen2_moe" | "qwen3_moe":
            only = set(_get(config, "mlp_only_layers", []))
            step = _get(config, "decoder_sparse_step", 1)
            return tuple(i not in only and config.num_experts > 0 and (i + 1) % step == 0 for i in range(n))
        case "deepseek_v3":
            return tuple(i >= _get(config, "first_k_dense_replace", 0) for i in range(n))
        case "mixtral" | "olmoe":
            return (True,) * n
        case _:
            return (False,) * n


def moe_shape(config: Any, *, deepseek_shared: str = "config") -> MoEShape:
    """Sizes of a known family from its config (``KNOWN_FAMILIES``); others go through ``model.introspect_shape``.

    Args:
        config: a Hugging Face config (or any object with its attributes).
        deepseek_shared: ``config`` (``n_shared_experts·moe_intermediate_size``) or ``code_2x`` (the public code's
            ``2·moe_intermediate_size``, right for DeepSeek-V2 only).
    """
    family = getattr(config, "model_type", None)
    if family not in KNOWN_FAMILIES:
        raise KeyError(f"model_type={family!r} has no config formula; known: {list(KNOWN_FAMILIES)}")
    if deepseek_shared not in ("config", "code_2x"):
        raise ValueError(f"deepseek_shared={deepseek_shared!r}: expected 'config' or 'code_2x'")
    d, n_h, n_layers = config.hidden_size, config.num_attention_heads, config.num_hidden_layers
    sparse = _sparse_pattern(config)
    dense_mlp = 3 * d * config.intermediate_size
    if family == "deepseek_v3":
        attn = mla_attention_params(config)
        d_qk, d_v = config.qk_nope_head_dim + config.qk_rope_head_dim, config.v_head_dim
        head_dim, kv_tok = config.v_head_dim, n_layers * (config.kv_lora_rank + config.qk_rope_head_dim)
    else:
        attn = gqa_attention_params(config)
        d_qk = d_v = head_dim = _head_dim(config)
        kv_tok = 2 * n_layers * _get(config, "num_key_value_heads", n_h) * head_dim
    match family:
        case "mixtral":
            num_experts, expert, shared, router = config.num_local_experts, 3 * d * config.intermediate_size, 0, 0
            router = d * num_experts
        case "olmoe":
            num_experts, expert, shared = config.num_experts, 3 * d * config.intermediate_size, 0
            router = d * num_experts
        case "qwen2_moe":
            num_experts, expert = config.num_experts, 3 * d * config.moe_intermediate_size
            shared = 3 * d * _get(config, "shared_expert_intermediate_size", 0)
            router = d * num_experts + (d if shared else 0)  # the d x 1 shared_expert_gate counts as router
        case "qwen3_moe":
            num_experts, expert, shared = config.num_experts, 3 * d * config.moe_intermediate_size, 0
            router = d * num_experts
        case "deepseek_v3":
            num_experts, expert = config.n_routed_experts, 3 * d * config.moe_intermediate_size
            shared = 3 * d * _get(config, "n_shared_experts", 0) * config.moe_intermediate_size
            router = d * num_experts
        case _:  # dense: the E = 1 case
            num_experts, expert, shared, router = 1, 0, 0, 0
    code_2x = 3 * d * 2 * config.moe_intermediate_size if family == "deepseek_v3" else shared
    if family == "deepseek_v3" and deepseek_shared == "code_2x":
        shared = code_2x
    k = _get(config, "num_experts_per_tok", 1) if family not in _DENSE_FAMILIES else 1
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        window = None
    return MoEShape(
        family=family, attn=(attn,) * n_layers, sparse=sparse,
        mlp=tuple(0 if s else dense_mlp for s in sparse), num_experts=int(num_experts), top_k=int(k),
        expert=int(expert), shared=int(shared), router=int(router), num_heads=n_h, d_qk=d_qk, d_v=d_v,
        head_dim=head_dim, kv_per_token=int(kv_tok), lm_head=d * config.vocab_size,
        sliding_window=int(window) if window else None, shared_code_2x=int(code_2x),
        latent_up=config.kv_lora_rank * n_h * (config.qk_nope_head_dim + config.v_head_dim)
        if family == "deepseek_v3" else 0,
    )  # fmt: skip


def activated_params(shape: MoEShape, counts: Sequence[int] | None, *, include_router: bool = False,
                     include_lm_head: bool = False) -> int:  # fmt: skip
    """``S_activated = Σ_l S_attn,l + Σ_sparse (count_l·S_expert + S_shared) + Σ_dense S_mlp``.

    Args:
        shape: the model's sizes.
        counts: unique experts hit per sparse layer (``len == len(shape.sparse_layers)``); None = every expert (the
            dense MBU baseline).
        include_router: add ``N_router`` per sparse layer (off in the paper).
        include_lm_head: add the output projection.
    """
    sparse = shape.sparse_layers
    if counts is None:
        counts = [shape.num_experts] * len(sparse)
    if len(counts) != len(sparse):
        raise ValueError(f"{len(counts)} expert counts for {len(sparse)} sparse layers")
    total = sum(shape.attn) + sum(shape.mlp)
    for count in counts:
        if not 0 <= count <= shape.num_experts:
            raise ValueError(f"expert count {count} outside [0, E={shape.num_experts}]")
        total += count * shape.expert + shape.shared + (shape.router if include_router else 0)
    return total + (shape.lm_head if include_lm_head else 0)


def param_flops_per_token(shape: MoEShape, variant: str = "paper", *, code_shared: str = "code_2x") -> int:
    """The parameter part of ``S-F_token`` (2 FLOPs per multiply-add), attention scores excluded.

    ``paper``: ``Σ_l 2·N_attn,l + sparse: 2·N_router + 2·(k·S_expert + S_shared) | dense: 2·S_mlp``. ``code``: one
    routed expert and no router (the public code), with its DeepSeek shared size ``2·moe_intermediate_size``
    (``code_shared="code_2x"``, default) or the shape's own (``"config"``). ``dense``: every expert (the MFU
    over-count).
    """
    k = {"paper": shape.top_k, "code": 1, "dense": shape.num_experts}.get(variant)
    if k is None:
        raise ValueError(f"variant={variant!r}: expected 'paper', 'code' or 'dense'")
    if code_shared not in ("code_2x", "config"):
        raise ValueError(f"code_shared={code_shared!r}: expected 'code_2x' or 'config'")
    router = 0 if variant == "code" else shape.router
    shared = shape.shared_code_2x if variant == "code" and code_shared == "code_2x" else shape.shared
    total = 0
    for attn, sparse, mlp in zip(shape.attn, shape.sparse, shape.mlp, strict=True):
        total += 2 * attn + (2 * router + 2 * (k * shape.expert + shared) if sparse else 2 * mlp)
    return total


def code_score_flops_per_token(shape: MoEShape, ctx: Sequence[int]) -> int:
    """The public code's attention-score FLOPs **per token** of a forward: ``2·Σ_b ctx_b·n_layer·n_h·(d_qk + d_v)``.

    Its ``attention_score`` is ``2·Σctx·L·n_h·d_h`` for GQA and ``Σctx·L·n_h·(q_hd + v_hd)`` for MLA, added to the
    per-token parameter count that is then multiplied by ``2·throughput``: ``4·Σctx·L·n_h·d_h`` (GQA) and
    ``2·Σctx·L·n_h·(q_hd + v_hd)`` (MLA) per token, one expression since GQA has ``d_qk = d_v = d_h``. ``Σctx`` is the
    whole batch's context (SGLang's ``seq_lens_sum``), so a forward's total scales as tokens x Σ ctx.
    """
    return 2 * sum(cap_context(shape, c) for c in ctx) * shape.num_layers * shape.num_heads * (shape.d_qk + shape.d_v)


def cap_context(shape: MoEShape, ctx: int) -> int:
    """Keys a row attends to: its context, capped at the sliding window where the config sets one."""
    return min(ctx, shape.sliding_window) if shape.sliding_window else ctx


def score_flops(shape: MoEShape, n_new: Sequence[int], ctx: Sequence[int], *, causal_halving: bool = False) -> float:
    """Attention-score FLOPs of one forward: ``Σ_l Σ_b n_new_b·2·ctx_b·n_h·(d_qk + d_v)`` (QKᵀ and AV).

    Eager attention multiplies the full ``n_new x ctx`` block (masked entries included), so ``causal_halving`` is
    off by default; on, a prefill row's square counts half.
    """
    total = 0.0
    for new, c in zip(n_new, ctx, strict=True):
        c = cap_context(shape, c)
        block = new * c
        if causal_halving and new > 1:
            block -= new * (new - 1) / 2
        total += 2 * block * shape.num_heads * (shape.d_qk + shape.d_v)
    return total * shape.num_layers


def forward_flops(shape: MoEShape, n_new: Sequence[int], ctx: Sequence[int], *, variant: str = "paper",
                  causal_halving: bool = False, lm_head_rows: int = 0, latent_expansion: bool = True,
                  code_shared: str = "code_2x") -> float:  # fmt: skip
    """FLOPs of one forward, ``F_fwd = tokens·(parameter part) + score FLOPs`` (+ ``2·d·V`` per lm_head row).

    ``latent_expansion`` (MLA only; ours): add ``2·Σ_b (ctx_b − n_new_b)·S_kv_b`` per layer, the re-expansion of the
    cached latent that transformers' eager MLA performs at every decode step (an absorbed-MLA server does not).

    ``variant="code"`` is the public code's arithmetic: ``tokens·(parameter part + code_score_flops_per_token)``,
    one routed expert, no router, the DeepSeek shared size of ``code_shared`` and no latent re-expansion.
    """
    tokens = sum(n_new)
    head = 2 * shape.lm_head * lm_head_rows
    if latent_expansion and shape.latent_up and variant != "code":
        cached = sum(cap_context(shape, c) - n for n, c in zip(n_new, ctx, strict=True))
        head += 2 * max(cached, 0) * shape.latent_up * shape.num_layers
    if variant == "code":
        params = param_flops_per_token(shape, "code", code_shared=code_shared)
        return tokens * (params + code_score_flops_per_token(shape, ctx)) + head
    return (
        tokens * param_flops_per_token(shape, variant)
        + score_flops(shape, n_new, ctx, causal_halving=causal_halving)
        + head
    )


def kv_elements(shape: MoEShape, ctx: Sequence[int]) -> int:
    """KV-cache elements read by a forward under the formula accounting, ``Σ_b ctx_b·KV_tok``."""
    return sum(cap_context(shape, c) for c in ctx) * shape.kv_per_token


def utilisation(bytes_moved: float, flops: float, latency_s: float, bw_Bps: float, peak_flops: float,
                n_dev: int = 1) -> tuple[float, float]:  # fmt: skip
    """``(bytes/latency/(n_dev·BW_peak), flops/latency/(n_dev·F_peak_dense))``: the MBU and MFU of one forward."""
    if latency_s <= 0:
        raise ValueError(f"latency {latency_s} s must be positive")
    return bytes_moved / latency_s / (n_dev * bw_Bps), flops / latency_s / (n_dev * peak_flops)


def expected_union(num_experts: int, top_k: int, rows: int) -> float:
    """Expected distinct experts hit when each of ``rows`` rows picks ``k`` distinct experts uniformly:
    ``E·(1 − (1 − k/E)^T)``.
    """  # noqa: D205
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** rows)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean (NaN for an empty sequence: a phase with no forward)."""
    return sum(values) / len(values) if values else math.nan


def forward_metrics(record: dict[str, Any], shape: MoEShape, *, bw_Bps: float, peak_flops: float, n_dev: int = 1,
                    bytes_w: float = 4.0, bytes_kv: float = 4.0, include_router_bytes: bool = False,
                    include_lm_head: bool = False, causal_halving: bool = False, kv_accounting: str = "formula",
                    latent_expansion: bool = True, code_shared: str = "code_2x") -> dict[str, float]:  # fmt: skip
    """S-MBU, S-MFU and their baselines for one traced forward.

    Args:
        record: one forward record: ``latency_s``, ``counts`` (unique experts per sparse layer), ``n_new`` and ``ctx``
            (per row), ``lm_head_rows``, and ``kv_cached_elements`` for ``kv_accounting="as_cached"``.
        shape: the model's sizes.
        bw_Bps: peak bandwidth per device.
        peak_flops: dense peak FLOP/s per device in the run's dtype.
        n_dev: devices.
        bytes_w: bytes per weight element.
        bytes_kv: bytes per KV element.
        include_router_bytes: count router weights in ``S_activated`` (off in the paper).
        include_lm_head: count the output projection (bytes and FLOPs).
        causal_halving: halve a prefill's score square.
        kv_accounting: ``formula`` (``Σ_b ctx_b·KV_tok``) or ``as_cached`` (the numel actually held).
        latent_expansion: count MLA's per-forward re-expansion of the cached latent (see ``forward_flops``).
        code_shared: the DeepSeek shared size of ``s_mfu_code``: ``code_2x`` (the public code's
            ``2·moe_intermediate_size``) or ``config`` (the shape's).

    Returns:
        ``s_mbu``, ``mbu_dense``, ``s_mfu``, ``s_mfu_code``, ``mfu_dense``, ``act_experts`` (mean ``count_l``),
        ``act_frac`` (``S_activated`` over every-expert ``S_activated``), ``activated_params``, ``kv_bytes``,
        ``flops`` (the paper's ``F_fwd``), ``tokens``; DeepSeek adds ``s_mbu_shared2x`` (the code's shared size).
    """
    latency, counts = float(record["latency_s"]), list(record["counts"])
    n_new, ctx = list(record["n_new"]), list(record["ctx"])
    match kv_accounting:
        case "formula":
            kv_bytes = kv_elements(shape, ctx) * bytes_kv
        case "as_cached":
            kv_bytes = float(record["kv_cached_elements"]) * bytes_kv
        case _:
            raise ValueError(f"kv_accounting={kv_accounting!r}: expected 'formula' or 'as_cached'")
    sizes = {"include_router": include_router_bytes, "include_lm_head": include_lm_head}
    active = activated_params(shape, counts if shape.is_moe else [], **sizes)
    every = activated_params(shape, None if shape.is_moe else [], **sizes)
    head_rows = int(record.get("lm_head_rows", 0)) if include_lm_head else 0
    flops = {v: forward_flops(shape, n_new, ctx, variant=v, causal_halving=causal_halving, lm_head_rows=head_rows,
                              latent_expansion=latent_expansion, code_shared=code_shared)
             for v in ("paper", "code", "dense")}  # fmt: skip
    s_mbu, s_mfu = utilisation(active * bytes_w + kv_bytes, flops["paper"], latency, bw_Bps, peak_flops, n_dev)
    mbu_dense, mfu_dense = utilisation(every * bytes_w + kv_bytes, flops["dense"], latency, bw_Bps, peak_flops, n_dev)
    _, s_mfu_code = utilisation(0.0, flops["code"], latency, bw_Bps, peak_flops, n_dev)
    out = {
        "s_mbu": s_mbu, "mbu_dense": mbu_dense, "s_mfu": s_mfu, "s_mfu_code": s_mfu_code, "mfu_dense": mfu_dense,
        "act_experts": mean(counts) if counts else 1.0, "act_frac": active / every, "activated_params": float(active),
        "kv_bytes": kv_bytes, "flops": flops["paper"], "tokens": float(sum(n_new)),
    }  # fmt: skip
    if shape.family == "deepseek_v3" and shape.is_moe:
        code_2x = active + len(shape.sparse_layers) * (shape.shared_code_2x - shape.shared)
        out["s_mbu_shared2x"] = (code_2x * bytes_w + kv_bytes) / latency / (n_dev * bw_Bps)
    return out
