"""MoE-CAP router tracing, sizes, FLOPs, KV and phases on the card's tiny families (card tests 1-6, 8-10)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from callbacks.moe_cap import RouterTrace
from zoo.moe_cap import metrics as M
from zoo.moe_cap.model import FAMILIES, build_model, decoder_layers, experts_modules, shape_of, tiny_config
from zoo.moe_cap.tokenizer import char_tokenizer

MOE = [f for f in FAMILIES if f != "llama"]
TOK = char_tokenizer()


def tiny(family: str, **kwargs: Any) -> torch.nn.Module:
    """The card's tiny random-init model of ``family`` (eager attention and experts)."""
    config = tiny_config(family, vocab_size=len(TOK), pad_token_id=TOK.pad_token_id, bos_token_id=TOK.bos_token_id,
                         eos_token_id=TOK.eos_token_id, **kwargs)  # fmt: skip
    return build_model(config, seed=0)


def prompt_ids(rows: int, length: int, seed: int = 0) -> torch.Tensor:
    """Random non-special token ids (4..vocab-1)."""
    return torch.randint(4, len(TOK), (rows, length), generator=torch.Generator().manual_seed(seed))


def run_generate(model: torch.nn.Module, ids: torch.Tensor, new: int, mask: torch.Tensor | None = None,
                 **trace_kwargs: Any) -> RouterTrace:  # fmt: skip
    """``generate`` exactly ``new`` tokens (seeded sampling) under a fresh trace; the trace is detached after."""
    shape = shape_of(model)
    trace = RouterTrace(model, shape.num_experts, shape.top_k, **trace_kwargs).attach()
    try:
        torch.manual_seed(0)
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids) if mask is None else mask,
                       max_new_tokens=new, min_new_tokens=new, do_sample=True, top_k=0,
                       pad_token_id=TOK.pad_token_id, eos_token_id=TOK.eos_token_id)  # fmt: skip
    finally:
        trace.detach()
    return trace


def numel(module: torch.nn.Module) -> int:
    """Parameters of ``module`` minus those of its norm submodules (the card's convention)."""
    norms = sum(p.numel() for m in module.modules() if "norm" in type(m).__name__.lower() for p in m.parameters())
    return sum(p.numel() for p in module.parameters()) - norms


# -- test 1: union, not sum --------------------------------------------------------------------------------------------
def test_union_not_sum_and_sentinels() -> None:
    """A per-token sum (k·T) instead of the union, or counting the sentinel E / negatives as experts, fails."""
    model = tiny("mixtral")
    trace = RouterTrace(model, 8, 2)
    cases = [([[0, 1], [0, 1]], 2), ([[0, 1], [1, 2]], 3), ([[8, 0], [-1, 8]], 1), ([[8, 8]], 0)]
    for index, expected in cases:
        for row in (0, 1):  # layer 1 gets the same rows shifted: the batched and per-layer markings agree
            shifted = [[i if i in (-1, 8) else (i + row) % 8 for i in pair] for pair in index]
            trace._experts_hook(row)(None, (torch.zeros(len(index), 64), torch.tensor(shifted), torch.ones(1)), {})
        hit = trace.collect()
        assert hit.sum(dim=1).tolist() == [expected, expected], index
        trace._experts_hook(1)(None, (None, torch.tensor(index), None), {})  # one layer only: per-layer marking
        assert trace.collect().sum(dim=1).tolist() == [0, expected], index


@pytest.mark.parametrize("family", MOE)
def test_one_token_decode_counts_k(family: str) -> None:
    """C1: a batch-1 decode forward hits exactly k experts per sparse layer (counting all experts, or summing, fails)
    and S_activated is the closed-form integer."""  # noqa: D205
    model = tiny(family)
    shape = shape_of(model)
    trace = run_generate(model, prompt_ids(1, 6), new=2)
    decode = [r for r in trace.records if r["phase"] == "decode"]
    assert len(decode) == 1 and decode[0]["counts"] == [shape.top_k] * len(shape.sparse_layers)
    expected = (sum(shape.attn) + sum(shape.mlp)
                + len(shape.sparse_layers) * (shape.top_k * shape.expert + shape.shared))  # fmt: skip
    assert M.activated_params(shape, decode[0]["counts"]) == expected


# -- test 2: ground truth by poisoning ---------------------------------------------------------------------------------
@pytest.mark.parametrize("family", MOE)
def test_poisoned_expert_produces_nan_iff_traced(family: str) -> None:
    """The traced set is what ran: a NaN planted in expert j's down projection reaches the output iff j was traced.

    On DeepSeek-V3 (group-limited routing with a non-zero score-correction bias) a tracer that re-ran top-k on the
    router logits would disagree; the test checks that it would.
    """
    model = tiny(family)
    if family == "deepseek_v3":
        for layer in decoder_layers(model):
            if hasattr(layer.mlp, "gate") and hasattr(layer.mlp.gate, "e_score_correction_bias"):
                layer.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.5, 0.5, 8))
    ids = prompt_ids(1, 3, seed=1)
    shape = shape_of(model)
    trace = RouterTrace(model, shape.num_experts, shape.top_k).attach()
    with torch.no_grad():
        model(input_ids=ids)
    hit = trace.last_hit.clone()
    trace.detach()
    experts = experts_modules(model)
    for row, layer in enumerate(trace.layers):
        weights = experts[layer].down_proj
        for j in range(shape.num_experts):
            saved = weights.data[j].clone()
            weights.data[j] = math.nan
            with torch.no_grad():
                nan = bool(model(input_ids=ids).logits.isnan().any())
            weights.data[j] = saved
            assert nan == bool(hit[row, j]), (layer, j)
    if family == "deepseek_v3":  # naive top-k over sigmoid(logits), ignoring the bias and groups, differs
        layer = trace.layers[0]
        captured = {}
        handle = decoder_layers(model)[layer].mlp.gate.register_forward_hook(
            lambda m, a, out: captured.update(logits=out[0])
        )  # returns None: the output is kept
        with torch.no_grad():
            model(input_ids=ids)
        handle.remove()
        naive = torch.zeros(shape.num_experts, dtype=torch.bool)
        naive[captured["logits"].sigmoid().topk(shape.top_k, dim=-1).indices.flatten()] = True
        assert not torch.equal(naive, hit[0])


# -- test 3: sizes = numel ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", [*FAMILIES, "deepseek_v3_no_qlora"])
def test_sizes_equal_module_numel(family: str) -> None:
    """Every analytic size equals the instantiated modules' parameter count (norms excluded), exactly."""
    model = tiny("deepseek_v3", q_lora_rank=None) if family == "deepseek_v3_no_qlora" else tiny(family)
    shape = shape_of(model)
    for i, layer in enumerate(decoder_layers(model)):
        assert numel(layer.self_attn) == shape.attn[i], i
        if not shape.sparse[i]:
            assert numel(layer.mlp) == shape.mlp[i], i
            continue
        block = layer.mlp
        assert numel(block.experts) == shape.num_experts * shape.expert
        shared = getattr(block, "shared_expert", None) or getattr(block, "shared_experts", None)
        assert (numel(shared) if shared is not None else 0) == shape.shared
        router = numel(block.gate) + (numel(block.shared_expert_gate) if hasattr(block, "shared_expert_gate") else 0)
        assert router == shape.router
    if family == "qwen3_moe":
        assert shape.sparse == (False, True, True)
    if family.startswith("deepseek"):
        assert shape.sparse == (False, True)
    from zoo.moe_cap.model import introspect_shape

    intro = introspect_shape(model)  # the fallback for unknown families agrees with the formulas
    for field in ("attn", "sparse", "mlp", "expert", "shared", "router"):
        assert getattr(intro, field) == getattr(shape, field), field


# -- test 4: FLOPs vs FlopCounterMode ----------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_flops_match_flop_counter(family: str) -> None:
    """The paper's analytic FLOPs are within 1% of FlopCounterMode (12-token prefill; one-token decode at ctx 8);
    the public code's one-expert form is > 10% off on Mixtral."""  # noqa: D205
    model = tiny(family)
    shape = shape_of(model)
    prefill = run_generate(model, prompt_ids(1, 12), new=1, flop_check=True).records[0]
    decode = [r for r in run_generate(model, prompt_ids(1, 7), new=2, flop_check=True).records
              if r["phase"] == "decode"][0]  # fmt: skip
    assert prefill["n_new"] == [12] and decode["ctx"] == [8]
    for rec in (prefill, decode):
        analytic = M.forward_flops(shape, rec["n_new"], rec["ctx"])
        assert rec["flops_measured"] == pytest.approx(analytic, rel=0.01), rec["phase"]
        if family == "deepseek_v3" and rec["phase"] == "decode":  # eager MLA re-expands its cached latent
            plain = M.forward_flops(shape, rec["n_new"], rec["ctx"], latent_expansion=False)
            assert rec["flops_measured"] > 1.1 * plain
        if family == "mixtral":
            code = M.forward_flops(shape, rec["n_new"], rec["ctx"], variant="code")
            assert abs(code - rec["flops_measured"]) / rec["flops_measured"] > 0.1


# -- test 5: KV accounting ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_kv_per_token_formula_and_as_cached(family: str) -> None:
    """GQA KV_tok = the cache's numel per token (stored before head repetition); MLA = n_layer·(kv_lora + qk_rope)
    (the latent); ``as_cached`` is the cache numel whatever transformers stores."""  # noqa: D205
    model = tiny(family)
    shape = shape_of(model)
    rows, length = 2, 5
    prefill = run_generate(model, prompt_ids(rows, length), new=1).records[0]
    cfg = model.config
    if family == "deepseek_v3":
        assert shape.kv_per_token == cfg.num_hidden_layers * (cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    else:
        assert shape.kv_per_token == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * shape.head_dim
    cached = prefill["kv_cached_elements"]
    assert cached == rows * length * shape.kv_per_token  # transformers 5.24 stores the MLA latent too [check]
    out = M.forward_metrics(prefill, shape, bw_Bps=1e9, peak_flops=1e9, kv_accounting="as_cached")
    assert out["kv_bytes"] == cached * 4.0


# -- test 6: dense and saturation equalities ---------------------------------------------------------------------------
def test_dense_model_metrics_equal_mbu_mfu() -> None:
    """A dense model is the E = 1 case: S-MBU = MBU and S-MFU = MFU exactly, on every forward."""
    model = tiny("llama")
    trace = run_generate(model, prompt_ids(2, 5), new=3)
    for rec in trace.records:
        out = M.forward_metrics(rec, shape_of(model), bw_Bps=1e11, peak_flops=1e12)
        assert out["s_mbu"] == out["mbu_dense"] and out["s_mfu"] == out["mfu_dense"] and out["act_frac"] == 1.0


def test_all_experts_hit_gives_dense_mbu() -> None:
    """When the batch hits every expert, S-MBU equals the dense MBU (rel. 1e-9); below that it is strictly lower."""
    model = tiny("mixtral")
    trace = run_generate(model, prompt_ids(4, 16), new=2, router="uniform")  # 64 rows: all 8 hit (p miss ~ 1e-7)
    prefill, decode = trace.records[0], trace.records[1]
    assert prefill["counts"] == [8, 8]
    out = M.forward_metrics(prefill, shape_of(model), bw_Bps=1e11, peak_flops=1e12)
    assert out["s_mbu"] == pytest.approx(out["mbu_dense"], rel=1e-9)
    if sum(decode["counts"]) < 16:
        low = M.forward_metrics(decode, shape_of(model), bw_Bps=1e11, peak_flops=1e12)
        assert low["s_mbu"] < low["mbu_dense"]


# -- test 8: DeepSeek shared experts -----------------------------------------------------------------------------------
def test_deepseek_shared_config_vs_code_2x() -> None:
    """V3 with one shared expert: S_shared = 3·d·moe_intermediate_size; the code's hard-coded form doubles it."""
    config = tiny("deepseek_v3").config
    assert M.moe_shape(config).shared == 3 * 64 * 32
    assert M.moe_shape(config, deepseek_shared="code_2x").shared == 2 * 3 * 64 * 32


# -- test 9: phases ----------------------------------------------------------------------------------------------------
def test_phases_prefill_then_decode() -> None:
    """generate(5 new) = 1 prefill + 4 decode records, decode context P + j, B rows; a cache-less forward is prefill."""
    model = tiny("olmoe")
    rows, length = 3, 6
    records = run_generate(model, prompt_ids(rows, length), new=5).records
    assert [r["phase"] for r in records] == ["prefill"] + ["decode"] * 4
    assert records[0]["n_new"] == [length] * rows and records[0]["ctx"] == [length] * rows
    for j, rec in enumerate(records[1:], start=1):
        assert rec["rows"] == rows and rec["n_new"] == [1] * rows and rec["ctx"] == [length + j] * rows
    shape = shape_of(model)
    trace = RouterTrace(model, shape.num_experts, shape.top_k).attach()
    with torch.no_grad():
        model(input_ids=prompt_ids(2, 4), use_cache=False)
    trace.detach()
    assert trace.records[0]["phase"] == "prefill" and trace.records[0]["rows"] == 2


# -- test 10: padding --------------------------------------------------------------------------------------------------
def test_padding_executed_counts_pad_rows_real_does_not() -> None:
    """Forced routing sends only the pad row to expert 7: ``executed`` counts it, ``real`` does not."""
    model = tiny("mixtral")
    ids = prompt_ids(2, 4)
    mask = torch.ones_like(ids)
    mask[0, 0] = 0  # left padding on row 0
    ids[0, 0] = TOK.pad_token_id
    pad_row = 0  # flattened (B·T) position of the pad token

    def force(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
        index = torch.zeros_like(args[1])
        index[:, 1] = 1
        if index.shape[0] == ids.numel():
            index[pad_row] = torch.tensor([7, 1])
        return (args[0], index, *args[2:]), kwargs

    handles = [m.register_forward_pre_hook(force, with_kwargs=True) for m in experts_modules(model).values()]
    counts = {}
    for padding in ("executed", "real"):
        shape = shape_of(model)
        trace = RouterTrace(model, shape.num_experts, shape.top_k, padding=padding).attach()
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
        trace.detach()
        counts[padding] = trace.records[0]["counts"]
        if padding == "real":
            assert trace.records[0]["ctx"] == [3, 4] and trace.records[0]["n_new"] == [3, 4]
    for handle in handles:
        handle.remove()
    assert counts == {"executed": [3, 3], "real": [2, 2]}


def test_padding_real_through_generate() -> None:
    """``real`` on a left-padded generate: prefill counts each row's own tokens, decode contexts grow from them."""
    model = tiny("olmoe")
    ids = prompt_ids(2, 5)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    ids[0, :2] = TOK.pad_token_id
    real = run_generate(model, ids, new=3, mask=mask, padding="real").records
    assert real[0]["n_new"] == [3, 5] and real[0]["ctx"] == [3, 5]
    assert [r["ctx"] for r in real[1:]] == [[4, 6], [5, 7]]
    executed = run_generate(model, ids, new=3, mask=mask).records
    assert executed[0]["n_new"] == [5, 5] and [r["ctx"] for r in executed[1:]] == [[6, 6], [7, 7]]


# -- union law (C2) on the real module ---------------------------------------------------------------------------------
def test_uniform_router_matches_closed_form() -> None:
    """The uniform router's mean count over forwards follows E·(1 − (1 − k/E)^T) (a sum or a wrong law fails)."""
    model = tiny("mixtral")
    shape = shape_of(model)
    trace = RouterTrace(model, 8, 2, router="uniform").attach()
    with torch.no_grad():
        for i in range(100):
            model(input_ids=prompt_ids(1, 4, seed=i), use_cache=False)
    trace.detach()
    counts = [c for r in trace.records for c in r["counts"]]
    assert sum(counts) / len(counts) == pytest.approx(M.expected_union(8, 2, 4), abs=0.02 * 8)
    assert shape.top_k == 2
