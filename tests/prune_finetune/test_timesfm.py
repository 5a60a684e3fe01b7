"""TimesFm (``timesfm.py``) through the spec, merge and callback (card "Merge", TimesFm bullet; "Tests" 7, 8, 9).

Tiny transformers ``TimesFmModelForPrediction`` (d 16, 4 heads of 4, MLP 32, 2 layers, 8 patches of 8) inside the
zoo's :class:`Forecaster`, with random biases, O(1) weights and a random per-dimension query scale (the transformers
init zeros biases, makes attention nearly uniform and sets every ``scaling`` entry to 1, which would hide a dropped
bias, a wrong score scaling and a query scale applied to the wrong dimensions). Every test names the wrong
implementation it catches. Fused ``qkv_proj`` (Google's own PyTorch TimesFM; no transformers version installed here
has it) is covered by a test-local attention with the transformers forward convention, built from the split one.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from callbacks.prune_finetune import PruneThenFinetune
from zoo.prune_finetune.merge import (
    Bias,
    IndexedLinear,
    MergedAttention,
    Zero,
    merge_,
    param_count,
    plan_merge,
    predicted_param_count,
    rebuild_,
)
from zoo.prune_finetune.model import Forecaster
from zoo.prune_finetune.module import TSFMModule
from zoo.prune_finetune.spec import LayerSites, layer_sites, mask_sizes, masked, site_kind, target_linears
from zoo.prune_finetune.timesfm import TIMESFM_QUERY_SCALE, timesfm_config

from .test_callback import TINY, _data, _trainer

torch.set_num_threads(1)

D, HEADS, HD, FFN, L, H = 16, 4, 4, 32, 64, 16
FACTOR = TIMESFM_QUERY_SCALE / math.sqrt(HD)


class FusedTimesFmAttention(nn.Module):
    """transformers' ``TimesFmAttention`` with q, k and v in one ``qkv_proj`` (row blocks q, k, v), as Google's own
    PyTorch TimesFM lays it out; same forward convention as the transformers module (eager attention)."""

    def __init__(self, split: nn.Module) -> None:
        super().__init__()
        self.config, self.num_heads, self.head_dim = split.config, split.num_heads, split.head_dim
        self.attention_dropout, self.is_causal = split.attention_dropout, True
        self.scaling = split.scaling
        self.qkv_proj = nn.Linear(D, 3 * HEADS * HD)
        with torch.no_grad():
            self.qkv_proj.weight.copy_(torch.cat([split.q_proj.weight, split.k_proj.weight, split.v_proj.weight]))
            self.qkv_proj.bias.copy_(torch.cat([split.q_proj.bias, split.k_proj.bias, split.v_proj.bias]))
        self.o_proj = split.o_proj

    def _scale_query(self, query: Tensor) -> Tensor:
        scale = F.softplus(self.scaling).mul(1.442695041 / math.sqrt(self.head_dim))
        return query * scale[None, None, None, :]

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None, **kwargs) -> tuple[Tensor, Tensor]:
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q, k, v = (t.view(shape).transpose(1, 2) for t in self.qkv_proj(hidden_states).chunk(3, dim=-1))
        scores = self._scale_query(q) @ k.transpose(2, 3)
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = (weights @ v).transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
        return self.o_proj(out), weights


def make_model(seed: int = 0, fused: bool = False, attn: str = "sdpa", layers: int = 2) -> Forecaster:
    config = timesfm_config(
        context_length=L, horizon=H, d_model=D, num_layers=layers, heads=HEADS, ffn_dim=FFN, patch_length=8
    )
    config._attn_implementation = attn
    torch.manual_seed(seed)
    model = Forecaster(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.3)
            elif name.endswith("self_attn.scaling"):
                p.normal_(0.0, 1.0)  # softplus values spread over ~0.3..2: each dimension scaled differently
        for m in model.modules():
            if isinstance(m, nn.Linear):  # O(1) attention scores: at the init std 0.02 attention is nearly uniform
                m.weight.normal_(0.0, 1.2 * m.in_features**-0.5)
    if fused:
        for layer in model.net.decoder.layers:
            layer.self_attn = FusedTimesFmAttention(layer.self_attn)
    return model.eval()


def inputs(seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.3 * torch.randn(3, L, generator=g).cumsum(dim=1)  # O(1) values: atol 1e-5 is above float32 noise


def predict(model: nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        return model(x)


def sites(model: Forecaster, i: int) -> LayerSites:
    return layer_sites(model)[i]


def ones(model: nn.Module) -> dict[str, Tensor]:
    return {site: torch.ones(n) for site, n in mask_sizes(model).items()}


def random_masks(model: nn.Module, keep: float = 0.7, seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {site: (torch.rand(n, generator=g) < keep).float() for site, n in mask_sizes(model).items()}


def head(h: int, idx: list[int], block: int = 0) -> list[int]:
    """Rows of in-head indices ``idx`` of head ``h`` (``block``: 0 q, 1 k, 2 v within a fused qkv)."""
    return [block * HEADS * HD + h * HD + i for i in idx]


def layer(model: Forecaster, i: int) -> nn.Module:
    return model.net.decoder.layers[i]


def merge_checked(model: Forecaster, masks: dict[str, Tensor], residual_slicing: str = "fold") -> dict:
    """Merge and assert merged == masked (atol 1e-5), and that the masks changed the output at all."""
    x = inputs()
    dense = predict(model, x)
    with masked(model, masks):
        ref = predict(model, x)
    assert not torch.allclose(ref, dense, atol=1e-4), "the masks should change the output (test set-up)"
    bookkeeping = merge_(model, masks, residual_slicing)
    torch.testing.assert_close(predict(model, x), ref, atol=1e-5, rtol=0)
    return bookkeeping


# ------------------------------------------------------------------------------------------------- model and spec


def test_forecaster_equals_timesfm_forward() -> None:
    """The Forecaster's one-step decoder path equals TimesFmModelForPrediction's own forward (mean predictions);
    catches a wrong patch/statistics/head wiring or taking another patch's output."""
    model = make_model()
    x = inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.net(past_values=x).mean_predictions, atol=1e-6, rtol=0)
    assert model(x).shape == (3, H) and model.backbone == "timesfm"


@pytest.mark.parametrize("fused", [False, True])
def test_spec_sites_and_kinds(fused: bool) -> None:
    """Block Linears per layer (split q/k/v/o or fused qkv/o, MLP gate/down), residual vs inner sides, and the
    all_linear scope; catches a spec that masks the MLP's LayerNorm, misses a Linear, or misclassifies a side."""
    model = make_model(fused=fused)
    attn = ("qkv_proj", "o_proj") if fused else ("q_proj", "k_proj", "v_proj", "o_proj")
    want = [f"self_attn.{n}" for n in attn] + ["mlp.gate_proj", "mlp.down_proj"]
    assert list(target_linears(model)) == [f"net.decoder.layers.{i}.{p}" for i in range(2) for p in want]
    per_layer = sum(n for s, n in mask_sizes(model).items() if ".layers.0." in s)
    assert per_layer == (8 * D if fused else 10 * D) + 2 * FFN  # split: 10 d + 2 ffn, as PatchTST
    ls = sites(model, 0)
    assert all(site_kind(s) == "residual" for s in ls.residual)
    inner = [s for pair in ls.inner_pairs.values() for s in pair]
    assert all(site_kind(s) == "inner" for s in inner)
    assert len(ls.residual) == (4 if fused else 6)
    assert set(mask_sizes(model)) | set(ls.residual) == set(mask_sizes(model))
    all_linear = target_linears(model, "all_linear")
    assert "net.horizon_ff_layer.output_layer" in all_linear and "net.decoder.input_ff_layer.input_layer" in all_linear
    assert site_kind("net.decoder.input_ff_layer.input_layer:out") == "other"


def test_unknown_layouts_raise() -> None:
    """A TimesFm layer whose attention has neither split nor fused projections, and a model with no known layer,
    raise naming the layer; catches a spec that silently masks nothing (or half a layer)."""
    model = make_model()
    attn = layer(model, 1).self_attn
    del attn.k_proj
    with pytest.raises(ValueError, match=r"layers\.1: unknown TimesFm attention layout"):
        mask_sizes(model)
    with pytest.raises(ValueError, match="no PatchTSTEncoderLayer or TimesFmDecoderLayer"):
        mask_sizes(nn.Sequential(nn.Linear(2, 2)))
    model = make_model()
    with torch.no_grad():
        layer(model, 0).self_attn._scale_query = lambda q: q * 2.0  # a future version's other query scaling
    with pytest.raises(ValueError, match="query scale is not softplus"):
        merge_(model, ones(model))


# ----------------------------------------------------------------------------------------------- test 7: equality


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("residual_slicing", ["fold", "index"])
@pytest.mark.parametrize("fused", [False, True])
def test_random_masks_merged_equals_masked(seed: int, residual_slicing: str, fused: bool) -> None:
    """Random masks on every site (inner and residual), three seeds, split and fused qkv: catches any wrong fold or
    slice, a fused weight split into the wrong row blocks, and a query scale sliced unlike q."""
    model = make_model(seed=seed, fused=fused, attn="eager" if seed == 2 else "sdpa")
    bookkeeping = merge_checked(model, random_masks(model, seed=seed), residual_slicing)
    assert all(isinstance(layer(model, i).self_attn, MergedAttention) for i in range(2))
    assert sum(e["ffn_dim"] for e in bookkeeping["layers"]) < 2 * FFN
    assert param_count(model) == bookkeeping["params"]["total_after"] < bookkeeping["params"]["total_before"]


@pytest.mark.parametrize("fused", [False, True])
def test_whole_heads_removed(fused: bool) -> None:
    """(a) Head 1 loses its V channels (v-out on two, o-in on two) and head 3 loses them all at o-in: num_heads drops
    to 2 and the query scale keeps one row per kept head. Catches a head test that reads only v-out, a head left in
    place, or a query-scale index still sized for the original heads."""
    model = make_model(fused=fused)
    masks = ones(model)
    s = sites(model, 0)
    v_site = s.site("qkv_proj" if fused else "v_proj", "out")
    masks[v_site][head(1, [0, 1], block=2 if fused else 0)] = 0.0
    masks[s.site("o_proj", "in")][head(1, [2, 3]) + head(3, [0, 1, 2, 3])] = 0.0
    entry = merge_checked(model, masks)["layers"][0]
    assert (entry["num_heads"], entry["heads"]) == (2, [0, 2])
    attn = layer(model, 0).self_attn
    assert (attn.num_heads, attn.qk_head_dim, attn.v_head_dim) == (2, HD, HD)
    assert attn.q_proj.out_features == attn.k_proj.out_features == attn.v_proj.out_features == 2 * HD
    assert tuple(attn.query_scale_index.shape) == (2, HD)
    assert layer(model, 1).self_attn.num_heads == HEADS


def test_all_heads_and_whole_ffn_removed() -> None:
    """(c) Layer 0: every head gone (Bias of o_proj's bias) and every MLP channel gone at gate-out (Bias of
    down_proj's bias: TimesFm's MLP adds its input back and masks padding itself, its LayerNorm goes too); layer 1:
    down_proj's output mask all zero (Zero, the MLP returns its input). Catches a Bias/Zero that drops the residual
    inside TimesFm's MLP, loses the bias, or a zero-width MLP left in place."""
    model = make_model()
    masks = ones(model)
    s0, s1 = sites(model, 0), sites(model, 1)
    masks[s0.site("v_proj", "out")][:] = 0.0
    masks[s0.site("mlp.gate_proj", "out")][:] = 0.0
    masks[s1.site("mlp.down_proj", "out")][:] = 0.0
    b_o = layer(model, 0).self_attn.o_proj.bias.detach().clone()
    b_down = layer(model, 0).mlp.down_proj.bias.detach().clone()
    bookkeeping = merge_checked(model, masks)
    assert [(e["attn"], e["ffn"]) for e in bookkeeping["layers"]] == [("bias", "bias"), ("attn", "zero")]
    mlp0, mlp1 = layer(model, 0).mlp, layer(model, 1).mlp
    assert isinstance(layer(model, 0).self_attn, Bias) and isinstance(mlp0, Bias) and isinstance(mlp1, Zero)
    torch.testing.assert_close(layer(model, 0).self_attn.bias.detach(), b_o)
    torch.testing.assert_close(mlp0.bias.detach(), b_down)
    x, pad = torch.randn(2, 5, D), torch.tensor([[0.0, 0, 1, 0, 0], [1, 0, 0, 0, 0]])
    torch.testing.assert_close(mlp0(x, paddings=pad), b_down * (1 - pad[:, :, None]) + x)
    assert torch.equal(mlp1(x, paddings=pad), x)
    assert param_count(model) == bookkeeping["params"]["total_after"]


@pytest.mark.parametrize("side", ["q", "k"])
def test_query_scale_sliced_per_head_and_kept_dimension(side: str) -> None:
    """(b, d) Head h loses in-head dimension h (q-only or k-only zeros), so every head keeps a *different* set of
    dimensions. The merged query scale must equal softplus(scaling)[kept dims of head h] x 1.442695041/sqrt(4) for
    each head h. Three wrong implementations each change the output: the shared vector sliced with one head's
    indices for all heads (not expanded per head), the vector left unsliced (its first qk_head_dim entries scale
    the kept dims), and the factor recomputed from the new head width."""
    model = make_model()
    raw = [layer(model, i).self_attn.scaling.detach().clone() for i in range(2)]
    masks = ones(model)
    for i in range(2):
        for h in range(HEADS):
            masks[sites(model, i).site(f"{side}_proj", "out")][head(h, [h])] = 0.0
    x = inputs()
    with masked(model, masks):
        ref = predict(model, x)
    bookkeeping = merge_checked(model, masks)
    for i in range(2):
        attn, entry = layer(model, i).self_attn, bookkeeping["layers"][i]
        assert entry["qk_index"] == [[j for j in range(HD) if j != h] for h in range(HEADS)]
        assert (attn.qk_head_dim, attn.query_scale_factor, entry["scaling"]) == (HD - 1, FACTOR, 1.0)
        effective = F.softplus(attn.query_scale).mul(attn.query_scale_factor)[attn.query_scale_index]
        expected = torch.stack([F.softplus(raw[i])[idx] * FACTOR for idx in entry["qk_index"]])
        torch.testing.assert_close(effective, expected, atol=1e-7, rtol=0)

    def wrong(change) -> float:
        broken = copy.deepcopy(model)
        for i in range(2):
            change(layer(broken, i).self_attn, raw[i])
        return float((predict(broken, x) - ref).abs().max())

    def one_head(attn: MergedAttention, _raw: Tensor) -> None:
        attn.query_scale_index = attn.query_scale_index[:1].expand_as(attn.query_scale_index).clone()

    def unsliced(attn: MergedAttention, full: Tensor) -> None:
        attn.query_scale = nn.Parameter(full.clone())
        attn.query_scale_index = torch.arange(attn.qk_head_dim).expand_as(attn.query_scale_index).clone()

    def recomputed(attn: MergedAttention, _raw: Tensor) -> None:
        attn.query_scale_factor = TIMESFM_QUERY_SCALE / math.sqrt(attn.qk_head_dim)

    for change in (one_head, unsliced, recomputed):
        assert wrong(change) > 1e-3, change.__name__


# ---------------------------------------------------------------------------------------------- test 8: dependency ties


@pytest.mark.parametrize("fused", [False, True])
def test_dependency_ties(fused: bool) -> None:
    """q and k keep the same original rows (and the query scale those dimensions), v rows and o columns the same
    indices, gate rows and down columns the same channels (live on both sides); catches slicing tied sides
    independently or taking a fused qkv's blocks at the wrong offsets, even where shapes happen to agree."""
    model = make_model(fused=fused)
    masks = random_masks(model, keep=0.6, seed=7)
    before = copy.deepcopy(model)
    bookkeeping = merge_checked(model, masks)
    for i, entry in enumerate(bookkeeping["layers"]):
        s = sites(before, i)
        old, new = layer(before, i), layer(model, i)

        def folded(name: str) -> Tensor:
            weight = old.get_submodule(s.layout.path(name)).weight.detach()
            return weight * masks[s.site(name, "out")][:, None] * masks[s.site(name, "in")][None, :]

        qk_rows = [h * HD + j for h, idx in zip(entry["heads"], entry["qk_index"], strict=True) for j in idx]
        v_rows = [h * HD + j for h, idx in zip(entry["heads"], entry["v_index"], strict=True) for j in idx]
        block = HEADS * HD if fused else 0
        q_w = folded("qkv_proj" if fused else "q_proj")
        k_w = q_w if fused else folded("k_proj")
        v_w = q_w if fused else folded("v_proj")
        attn = new.self_attn
        torch.testing.assert_close(attn.q_proj.weight.detach(), q_w[qk_rows])
        torch.testing.assert_close(attn.k_proj.weight.detach(), k_w[[block + r for r in qk_rows]])
        torch.testing.assert_close(attn.v_proj.weight.detach(), v_w[[2 * block + r for r in v_rows]])
        torch.testing.assert_close(attn.out_proj.weight.detach(), folded("o_proj")[:, v_rows])
        used = sorted({j for idx in entry["qk_index"] for j in idx})
        torch.testing.assert_close(attn.query_scale.detach(), old.self_attn.scaling.detach()[used])
        live = (masks[s.site("mlp.gate_proj", "out")] != 0) & (masks[s.site("mlp.down_proj", "in")] != 0)
        assert entry["ffn_index"] == live.nonzero().flatten().tolist()
        torch.testing.assert_close(new.mlp.gate_proj.weight.detach(), folded("mlp.gate_proj")[entry["ffn_index"]])
        torch.testing.assert_close(new.mlp.down_proj.weight.detach(), folded("mlp.down_proj")[:, entry["ffn_index"]])
        assert isinstance(new.mlp.layer_norm, nn.LayerNorm)  # the MLP's own LayerNorm stays (residual side)
        for h in (h for h in range(HEADS) if h not in entry["heads"]):  # removed heads had no live V channel
            v_out = masks[s.site("qkv_proj" if fused else "v_proj", "out")][2 * block :][h * HD : (h + 1) * HD]
            assert bool(((v_out == 0) | (masks[s.site("o_proj", "in")][h * HD : (h + 1) * HD] == 0)).all())


# ------------------------------------------------------------------------------------ parameter counts, checkpoints


@pytest.mark.parametrize("residual_slicing", ["fold", "index"])
def test_param_counts_equal_prediction(residual_slicing: str) -> None:
    """The physical count equals the prediction from the masks alone (total and blocks), with a head and a whole MLP
    gone; catches a predictor that forgets the query scale, the MLP's LayerNorm or the Bias stand-ins."""
    model = make_model()
    masks = random_masks(model, keep=0.6, seed=11)
    masks[sites(model, 0).site("v_proj", "out")][head(2, [0, 1, 2, 3])] = 0.0
    masks[sites(model, 1).site("mlp.gate_proj", "out")][:] = 0.0
    total = predicted_param_count(model, masks, residual_slicing)
    blocks = predicted_param_count(model, masks, residual_slicing, blocks_only=True)
    assert plan_merge(model, masks, residual_slicing) == (bookkeeping := merge_checked(model, masks, residual_slicing))
    assert param_count(model) == total == bookkeeping["params"]["total_after"]
    assert param_count(model, blocks_only=True) == blocks == bookkeeping["params"]["blocks_after"]


def test_param_counts_by_hand() -> None:
    """5 MLP channels cost 2 d + 1 each; a whole head 3 hd (d + 1) + d hd, while its query-scale entries stay (the
    other heads use every dimension). Catches a predictor and a merge that agree with each other but both
    mis-slice."""
    model = make_model()
    blocks_before = param_count(model, blocks_only=True)
    masks = ones(model)
    masks[sites(model, 0).site("mlp.down_proj", "in")][[0, 3, 7, 8, 31]] = 0.0
    masks[sites(model, 1).site("o_proj", "in")][head(3, [0, 1, 2, 3])] = 0.0
    merge_checked(model, masks)
    assert blocks_before - param_count(model, blocks_only=True) == 5 * (2 * D + 1) + 3 * HD * (D + 1) + D * HD


@pytest.mark.parametrize("fused", [False, True])
def test_rebuild_from_bookkeeping(fused: bool, tmp_path: Path) -> None:
    """Bookkeeping through torch.save/torch.load(weights_only=True), rebuild_ on a fresh model, strict load: identical
    outputs, also for the query-scale index (a non-persistent buffer) and a fused qkv; a split model refuses fused
    bookkeeping. Catches a rebuild that misses a shape or does not restore the per-head query-scale index."""
    model = make_model(fused=fused)
    masks = random_masks(model, keep=0.6, seed=5)
    masks[sites(model, 1).site("mlp.gate_proj", "out")][:] = 0.0
    bookkeeping = merge_checked(model, masks, "index")
    torch.save({"state_dict": model.state_dict(), "bookkeeping": bookkeeping}, tmp_path / "merged.pt")
    loaded = torch.load(tmp_path / "merged.pt", weights_only=True)
    fresh = make_model(seed=123, fused=fused)
    rebuild_(fresh, loaded["bookkeeping"])
    fresh.load_state_dict(loaded["state_dict"], strict=True)
    torch.testing.assert_close(predict(fresh.eval(), inputs()), predict(model, inputs()), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="fused_qkv"):
        rebuild_(make_model(fused=not fused), bookkeeping)
    with pytest.raises(ValueError, match="merged already"):
        merge_(model, {})


# ------------------------------------------------------------------------------------------- callback and module


def test_callback_scores_one_macro_batch_dead_channel_zero() -> None:
    """The callback's own hooks score one macro-batch (two micro-batches) on TimesFm: every score finite, an MLP
    channel that never fires (ReLU of a negative constant) scores exactly 0 on both tied sides and goes at the first
    prune step. Catches per-sample copies shaped for PatchTST only, or hooks that miss a TimesFm Linear."""
    model = make_model()
    with torch.no_grad():
        gate = layer(model, 0).mlp.gate_proj
        gate.weight[5].zero_()
        gate.bias[5] = -1.0
    cb = PruneThenFinetune(macro_batch_size=6, prune_ratio_per_epoch=0.05, steps_per_epoch=1)
    cb.attach(model)
    g = torch.Generator().manual_seed(3)
    for _ in range(2):
        x = torch.randn(3, L, generator=g).cumsum(dim=1)
        with cb.scoring():
            loss = torch.mean((model(x) - x[:, -H:].flip(1)) ** 2)
        cb.accumulate(loss, 3)
    assert cb.pending == 6
    scores = cb.scores()
    cb.prune(scores)
    cb.detach()
    assert set(scores) == set(mask_sizes(model)) and all(bool(torch.isfinite(s).all()) for s in scores.values())
    s0 = sites(model, 0)
    for site in s0.inner_pairs["ffn"]:
        assert scores[site][5] == 0.0 and not bool(cb.mask[site][5])
    assert sum(int((s != 0).sum()) for s in scores.values()) > 0.9 * sum(s.numel() for s in scores.values())


def test_module_prune_merge_checkpoint_round_trip(tmp_path: Path) -> None:
    """TSFMModule(backbone="timesfm") through a real prune fit (finetune off): the merged module is smaller, equals
    the masked original, and its Lightning checkpoint loads with weights_only=True and through load_from_checkpoint
    into the merged shape with identical forecasts. Catches a backbone that is not a primitive hyperparameter or a
    rebuild that cannot replay TimesFm bookkeeping."""
    args = {**TINY, "backbone": "timesfm"}
    torch.manual_seed(0)
    module = TSFMModule(**args)
    reference = TSFMModule(**args)
    reference.load_state_dict(module.state_dict())
    cb = PruneThenFinetune(prune_ratio_per_epoch=0.7, macro_batch_size=64, finetune=False)
    dm = _data(tmp_path)
    trainer = _trainer(tmp_path, [cb], limit_val_batches=2)
    trainer.fit(module, datamodule=dm)
    assert module.structure is not None and isinstance(module.model.net.decoder.layers[0].self_attn, MergedAttention)
    assert param_count(module.model, blocks_only=True) < param_count(reference.model, blocks_only=True)
    x = next(iter(dm.test_dataloader()))["x"][:32]
    with torch.no_grad(), masked(reference.eval().model, {k: m.float() for k, m in cb.best_mask.items()}):
        expected = reference.model(x)
    torch.testing.assert_close(predict(module.eval().model, x), expected, atol=1e-5, rtol=0)
    path = tmp_path / "merged.ckpt"
    trainer.save_checkpoint(path)
    blob = torch.load(path, weights_only=True)
    assert blob["hyper_parameters"]["backbone"] == "timesfm"
    loaded = TSFMModule.load_from_checkpoint(str(path))
    assert loaded.structure == module.structure and loaded.backbone == "timesfm"
    torch.testing.assert_close(predict(loaded.eval().model, x), predict(module.model, x), atol=0, rtol=0)
    assert any(isinstance(m, IndexedLinear) for m in loaded.modules()) is False  # default residual_slicing: fold


def test_config_errors_name_the_option() -> None:
    """Overlapping patches or a context that is not a whole number of patches raise naming the option (TimesFm reshapes
    the window into non-overlapping patches); catches a silent stride mismatch with the PatchTST options."""
    with pytest.raises(ValueError, match="patch_stride=8"):
        timesfm_config(context_length=64, patch_length=16, patch_stride=8)
    with pytest.raises(ValueError, match="patch_length=24.*context_length=64"):
        timesfm_config(context_length=64, patch_length=24)
    with pytest.raises(ValueError, match="backbone='chronos'"):
        TSFMModule(**{**TINY, "backbone": "chronos"})
