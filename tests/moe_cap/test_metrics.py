"""``s_mfu_code`` against an independent transcription of the public MoE-CAP arithmetic (issue #21, point 5).

The reference below is written here from Auto-CAP/MoE-CAP (read, not run; no code copied):
``moe_cap/utils/basic_utils.py`` (``_calculate_attention_size``, ``_calculate_attention_score``,
``_process_outputs_continuous``, ``_calculate_default_decoding``/``_prefill``), ``moe_cap/utils/deepseek_utils.py``
(the MLA attention size, the shared size hard-coded to ``2·moe_intermediate_size``, dense first layers),
``moe_cap/utils/continuous_batching_utils.py`` (per forward: ``ctx = seq_lens_sum``, the batch's whole context;
decode throughput ``batch_size/latency``, prefill ``seq_lens_sum/latency``) and ``moe_cap/utils/hardware_utils.py``
(the 2:4-sparse peak table, halved inside S-MFU). Nothing here imports ``zoo.moe_cap.metrics`` for the reference.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from zoo.moe_cap import metrics as M
from zoo.moe_cap.hardware import PRESETS

#: The public table's bf16 entry for NVIDIA-H100-HBM3-80GB (2:4-sparse; ``hardware_utils.py``).
H100_SPARSE_BF16 = 1979e12
#: (batch, context per row) of the decode forwards checked: the issue's (16, 300) and two more.
SIZES = ((1, 8), (4, 64), (16, 300))


def mixtral_tiny() -> SimpleNamespace:
    """The zoo's tiny Mixtral config (``zoo.moe_cap.model.tiny_config``), as plain attributes."""
    return SimpleNamespace(model_type="mixtral", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                           num_hidden_layers=2, head_dim=None, num_local_experts=8, num_experts_per_tok=2,
                           intermediate_size=128, vocab_size=24, sliding_window=None)  # fmt: skip


def deepseek_tiny() -> SimpleNamespace:
    """The zoo's tiny DeepSeek-V3 config (MLA, one shared expert, layer 0 dense)."""
    return SimpleNamespace(model_type="deepseek_v3", hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                           num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2,
                           n_shared_experts=1, moe_intermediate_size=32, intermediate_size=128, kv_lora_rank=16,
                           q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, vocab_size=24,
                           attention_bias=False, sliding_window=None)  # fmt: skip


def mixtral_8x7b() -> SimpleNamespace:
    """Mixtral-8x7B's published config (the GQA model of the issue's figures at full size)."""
    return SimpleNamespace(model_type="mixtral", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                           num_hidden_layers=32, head_dim=None, num_local_experts=8, num_experts_per_tok=2,
                           intermediate_size=14336, vocab_size=32000, sliding_window=None)  # fmt: skip


def deepseek_v3_full() -> SimpleNamespace:
    """DeepSeek-V3's published config (MLA with q_lora, 3 dense layers, one shared expert)."""
    return SimpleNamespace(model_type="deepseek_v3", hidden_size=7168, num_attention_heads=128,
                           num_key_value_heads=128, num_hidden_layers=61, first_k_dense_replace=3,
                           n_routed_experts=256, num_experts_per_tok=8, n_shared_experts=1, moe_intermediate_size=2048,
                           intermediate_size=18432, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                           qk_nope_head_dim=128, v_head_dim=128, vocab_size=129280, attention_bias=False,
                           sliding_window=None)  # fmt: skip


def public_code_forward_flops(cfg: Any, seq_lens_sum: int, tokens: int) -> float:
    """FLOPs of one forward as the public code counts them (its S-MFU numerator times the latency).

    Per token: ``n_layers·(attention size + one expert)`` (DeepSeek: ``L·attn + n_sparse·(expert + 2 shared) +
    n_dense·dense FFN``) plus ``attention_score`` at ``prefill_len = seq_lens_sum, output_len = 1``; everything times
    2, times the forward's tokens.
    """
    d, n_h, n_layers = cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers
    if cfg.model_type == "deepseek_v3":
        q_hd = cfg.qk_rope_head_dim + cfg.qk_nope_head_dim
        base = (d * (cfg.kv_lora_rank + cfg.qk_rope_head_dim)
                + cfg.kv_lora_rank * n_h * (q_hd - cfg.qk_rope_head_dim + cfg.v_head_dim)
                + cfg.v_head_dim * n_h * d)  # fmt: skip
        q = d * cfg.q_lora_rank + cfg.q_lora_rank * n_h * q_hd if cfg.q_lora_rank else d * n_h * q_hd
        attention = base + q
        expert = cfg.moe_intermediate_size * 3 * d
        shared_total = cfg.moe_intermediate_size * 3 * d * 2
        dense_ffn = cfg.intermediate_size * 3 * d
        n_dense = cfg.first_k_dense_replace
        params = n_layers * attention + (n_layers - n_dense) * (expert + shared_total) + n_dense * dense_ffn
        k_size, v_size = n_layers * n_h * q_hd, n_layers * n_h * cfg.v_head_dim
        score = seq_lens_sum * k_size + 0 * k_size / 2 + seq_lens_sum * v_size + 0 * v_size / 2
    else:
        d_head = cfg.head_dim or d // n_h
        n_kv = cfg.num_key_value_heads
        attention = d * (n_h * d_head + n_kv * d_head * 2) + n_h * d_head * d
        expert = cfg.intermediate_size * 3 * d  # d_ff: moe_intermediate_size, else intermediate_size
        params = n_layers * (attention + expert)
        kv_size = n_layers * n_h * d_head
        score = (seq_lens_sum * kv_size + 0 * kv_size / 2) * 2
    return (params + score) * 2 * tokens


def public_code_smfu(cfg: Any, seq_lens_sum: int, tokens: int, latency: float, sparse_peak: float) -> float:
    """The public S-MFU of one forward: the numerator over ``num_gpus·peak/2`` (the table's sparse peak halved)."""
    return public_code_forward_flops(cfg, seq_lens_sum, tokens) / latency / (1 * sparse_peak / 2)


@pytest.mark.parametrize(
    "make",
    [mixtral_tiny, deepseek_tiny, mixtral_8x7b, deepseek_v3_full],
    ids=["gqa_mixtral_tiny", "mla_deepseek_tiny", "gqa_mixtral_8x7b", "mla_deepseek_v3"],
)
@pytest.mark.parametrize(("batch", "ctx"), SIZES)
def test_s_mfu_code_equals_public_arithmetic(make: Any, batch: int, ctx: int) -> None:
    """Catches the old attention-score term (2·Σctx·L·n_h·d_h: half the code's on GQA; v_hd only on MLA), a DeepSeek
    shared size that is not the code's 2x, and a peak halved twice or never: s_mfu_code and the code-variant FLOPs of
    a decode forward (B rows at context ``ctx``) and of a B-row prefill equal the transcription to 1e-12."""
    cfg = make()
    shape = M.moe_shape(cfg)  # default deepseek_shared="config": the code variant still uses the code's 2x
    latency = 0.01
    decode = {"latency_s": latency, "counts": [2] * len(shape.sparse_layers), "n_new": [1] * batch,
              "ctx": [ctx] * batch}  # fmt: skip
    got = M.forward_metrics(decode, shape, bw_Bps=3350e9, peak_flops=PRESETS["H100-HBM3-80GB"].peak_flops("bf16"))
    want = public_code_smfu(cfg, seq_lens_sum=batch * ctx, tokens=batch, latency=latency,
                            sparse_peak=H100_SPARSE_BF16)  # fmt: skip
    assert got["s_mfu_code"] == pytest.approx(want, rel=1e-12)
    prefill_flops = M.forward_flops(shape, [ctx] * batch, [ctx] * batch, variant="code")
    assert prefill_flops == pytest.approx(public_code_forward_flops(cfg, batch * ctx, batch * ctx), rel=1e-12)


def test_code_shared_switch_and_before_after_ratio() -> None:
    """Catches the code variant ignoring ``code_shared`` on DeepSeek, and records the issue's figures: at batch 16,
    ctx 300 the old arithmetic gave 0.53x (Mixtral) and 0.42x (DeepSeek) of the public value; now 1.0x."""
    for make, old_ratio in ((mixtral_tiny, 0.528), (deepseek_tiny, 0.42)):
        cfg = make()
        shape = M.moe_shape(cfg)
        want = public_code_forward_flops(cfg, seq_lens_sum=16 * 300, tokens=16)
        old = 16 * (_old_param_part(shape) + 2 * 16 * 300 * shape.num_layers * shape.num_heads * shape.head_dim)
        assert old / want == pytest.approx(old_ratio, abs=0.01)
        assert M.forward_flops(shape, [1] * 16, [300] * 16, variant="code") == pytest.approx(want, rel=1e-12)
    shape = M.moe_shape(deepseek_tiny())
    two, one = (M.param_flops_per_token(shape, "code", code_shared=c) for c in ("code_2x", "config"))
    assert two - one == 2 * 3 * 64 * 32 * len(shape.sparse_layers)  # one more 3·d·d_ff expert per sparse layer
    with pytest.raises(ValueError, match="code_shared"):
        M.param_flops_per_token(shape, "code", code_shared="3x")


def _old_param_part(shape: M.MoEShape) -> int:
    """The zoo's parameter part before the fix: one routed expert, no router, the shape's own shared size."""
    return sum(2 * a + (2 * (shape.expert + shape.shared) if s else 2 * m)
               for a, s, m in zip(shape.attn, shape.sparse, shape.mlp, strict=True))  # fmt: skip
