"""Merge of pruning masks into a smaller dense PatchTST (card "Tests that must fail" 7, 8, merged-checkpoint part of 9).

Every test names the wrong implementation it catches. Tiny PatchTST with random biases, O(1) weights and random
BatchNorm statistics (the transformers init zeros biases, which would hide a dropped bias, and its small weights make
attention nearly uniform, which would hide a wrong scaling); the whole file runs in a few seconds.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn
from transformers import PatchTSTConfig, PatchTSTForPrediction

from zoo.prune_finetune.merge import (
    BOOKKEEPING_FORMAT,
    Bias,
    IndexedLinear,
    MergedAttention,
    Zero,
    merge_,
    merge_summary,
    param_count,
    plan_merge,
    predicted_param_count,
    rebuild_,
)
from zoo.prune_finetune.spec import LayerSites, mask_sizes, masked

torch.set_num_threads(1)

D, HEADS, HD, FFN = 16, 4, 4, 32
L0, L1 = LayerSites("model.encoder.layers.0"), LayerSites("model.encoder.layers.1")


def make_model(seed: int = 0, **overrides) -> PatchTSTForPrediction:
    config = dict(
        num_input_channels=1,
        context_length=64,
        prediction_length=16,
        patch_length=8,
        patch_stride=8,
        d_model=D,
        num_attention_heads=HEADS,
        num_hidden_layers=2,
        ffn_dim=FFN,
        norm_type="batchnorm",
        pre_norm=True,
        scaling="std",
    )
    config.update(overrides)
    torch.manual_seed(seed)
    model = PatchTSTForPrediction(PatchTSTConfig(**config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.3)
        for m in model.modules():
            if isinstance(m, nn.Linear):  # O(1) attention scores: at the init std 0.02 attention is nearly uniform
                m.weight.normal_(0.0, 1.2 * m.in_features**-0.5)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.normal_(0.0, 0.3)
                m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def inputs(model: PatchTSTForPrediction, seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, model.config.context_length, model.config.num_input_channels, generator=g)


def predict(model: nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        return model(past_values=x).prediction_outputs


def ones(model: nn.Module) -> dict[str, Tensor]:
    return {site: torch.ones(n) for site, n in mask_sizes(model).items()}


def random_masks(model: nn.Module, keep: float = 0.7, seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {site: (torch.rand(n, generator=g) < keep).float() for site, n in mask_sizes(model).items()}


def zero_(masks: dict[str, Tensor], site: str, index: list[int] | slice) -> None:
    masks[site][index] = 0.0


def head(h: int, idx: list[int]) -> list[int]:
    return [h * HD + i for i in idx]


def merge_checked(model: nn.Module, masks: dict[str, Tensor], residual_slicing: str = "fold") -> dict:
    """Merge and assert merged == masked (atol 1e-5), and that the masks changed the output at all."""
    x = inputs(model)
    dense = predict(model, x)
    with masked(model, masks):
        ref = predict(model, x)
    assert not torch.allclose(ref, dense, atol=1e-4), "the masks should change the output (test set-up)"
    bookkeeping = merge_(model, masks, residual_slicing)
    torch.testing.assert_close(predict(model, x), ref, atol=1e-5, rtol=0)
    return bookkeeping


def assert_primitive(value: object, path: str = "bookkeeping") -> None:
    """Only int, float, str, bool, and lists/dicts of those (a checkpoint entry, not tensors or objects)."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), f"{path}: key {key!r} is not a str"
            assert_primitive(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            assert_primitive(item, f"{path}[{i}]")
    else:
        assert type(value) in (int, float, str, bool), f"{path}: {type(value).__name__} is not a primitive"


def attn_of(model: nn.Module, i: int) -> nn.Module:
    return model.model.encoder.layers[i].self_attn


def ff_of(model: nn.Module, i: int) -> nn.Module:
    return model.model.encoder.layers[i].ff


# ----------------------------------------------------------------------------------------------------- test 7: equality


@pytest.mark.parametrize("residual_slicing", ["fold", "index"])
@pytest.mark.parametrize("norm_type", ["batchnorm", "layernorm"])
@pytest.mark.parametrize("pre_norm", [True, False])
def test_random_masks_merged_equals_masked(pre_norm: bool, norm_type: str, residual_slicing: str) -> None:
    """Random masks on every site (inner and residual): catches any wrong fold or slice, per norm placement."""
    model = make_model(pre_norm=pre_norm, norm_type=norm_type)
    bookkeeping = merge_checked(model, random_masks(model), residual_slicing)
    assert all(isinstance(attn_of(model, i), MergedAttention) for i in range(2))
    assert sum(e["ffn_dim"] for e in bookkeeping["layers"]) < 2 * FFN


@pytest.mark.parametrize("residual_slicing", ["fold", "index"])
def test_multichannel_merged_equals_masked(residual_slicing: str) -> None:
    """Three channels (channel-independent, channel_attention=False): catches a merge that assumes B*C == B."""
    model = make_model(num_input_channels=3, channel_attention=False)
    merge_checked(model, random_masks(model, seed=3), residual_slicing)


def test_all_linear_scope_folds_other_sites() -> None:
    """prune_scope all_linear: masks on the patch embedding and head are folded in place (not sliced); catches a merge
    that skips or rejects non-block sites."""
    model = make_model()
    masks = {site: torch.ones(n) for site, n in mask_sizes(model, "all_linear").items()}
    zero_(masks, "model.encoder.embedder.input_embedding:out", [2, 9])
    zero_(masks, "head.projection:in", [0, 5, 11])
    zero_(masks, L0.site("ff.0", "out"), [4])
    merge_checked(model, masks, "index")
    assert model.model.encoder.embedder.input_embedding.weight[[2, 9]].abs().sum() == 0


def test_whole_head_removed_num_heads_drops() -> None:
    """(a) Head 1's V channels gone (v-out on two, o-in on the other two): catches a head test that reads only v-out,
    a head left in place (num_heads unchanged) or one whose q/k rows stay behind (shape error)."""
    model = make_model()
    masks = ones(model)
    zero_(masks, L0.site("v_proj", "out"), head(1, [0, 1]))
    zero_(masks, L0.site("out_proj", "in"), head(1, [2, 3]))
    bookkeeping = merge_checked(model, masks)
    entry = bookkeeping["layers"][0]
    assert (entry["num_heads"], entry["heads"]) == (3, [0, 2, 3])
    attn = attn_of(model, 0)
    assert attn.num_heads == 3 and attn.qk_head_dim == HD and attn.v_head_dim == HD
    assert attn.q_proj.out_features == attn.k_proj.out_features == 3 * HD
    assert attn.v_proj.out_features == attn.out_proj.in_features == 3 * HD
    assert attn_of(model, 1).num_heads == HEADS


def test_nonuniform_head_zeros_shrink_by_minimum() -> None:
    """(b) Per-head V zeros 1,2,3,1 and q/k zeros 2,1,3,1: catches shrinking by the maximum (drops live channels)
    or by per-head widths (no single reshape); the extra zeros must stay folded as zero rows."""
    model = make_model()
    masks = ones(model)
    for h, idx in enumerate([[0], [0, 1], [1, 2, 3], [3]]):
        zero_(masks, L0.site("v_proj", "out"), head(h, idx[:1]))
        zero_(masks, L0.site("out_proj", "in"), head(h, idx[1:]))
    for h, idx in enumerate([[1, 2], [0], [0, 1, 3], [2]]):
        zero_(masks, L0.site("q_proj" if h % 2 else "k_proj", "out"), head(h, idx))
    bookkeeping = merge_checked(model, masks)
    entry = bookkeeping["layers"][0]
    assert (entry["num_heads"], entry["qk_head_dim"], entry["v_head_dim"]) == (HEADS, HD - 1, HD - 1)
    assert entry["v_index"] == [[1, 2, 3], [1, 2, 3], [0, 2, 3], [0, 1, 2]]  # lowest zero of each head goes
    assert entry["qk_index"] == [[0, 2, 3], [1, 2, 3], [1, 2, 3], [0, 1, 3]]
    attn = attn_of(model, 0)
    # head 1 keeps in-head V 1 (zero at o-in) and head 2 keeps 2, 3: their o columns stay folded at zero
    zero_cols = (attn.out_proj.weight == 0).all(dim=0).nonzero().flatten().tolist()
    assert zero_cols == [3 + 0, 6 + 1, 6 + 2]


@pytest.mark.parametrize("side", ["q", "k", "both"])
def test_qk_one_side_zeros_keep_original_scaling(side: str) -> None:
    """(d) q-only, k-only or mixed q/k zeros: catches an intersection rule (keeps the width), q and k sliced apart,
    and a scaling recomputed as 1/sqrt(new head_dim), which the second half shows breaks equality."""
    model = make_model()
    masks = ones(model)
    for sites in (L0, L1):
        for h in range(HEADS):
            if side in ("q", "both"):
                zero_(masks, sites.site("q_proj", "out"), head(h, [0]))
            if side in ("k", "both"):
                zero_(masks, sites.site("k_proj", "out"), head(h, [1]))
    x = inputs(model)
    with masked(model, masks):
        ref = predict(model, x)
    bookkeeping = merge_checked(model, masks)
    want = HD - (2 if side == "both" else 1)
    for i in range(2):
        attn = attn_of(model, i)
        assert attn.qk_head_dim == want and attn.v_head_dim == HD
        assert attn.scaling == HD**-0.5 == bookkeeping["layers"][i]["scaling"]
        attn.scaling = attn.qk_head_dim**-0.5  # the wrong implementation
    assert (predict(model, x) - ref).abs().max() > 1e-3


def test_qk_all_zero_gives_uniform_attention() -> None:
    """All q outputs of layer 0 pruned: qk_head_dim becomes 0 and the scores are 0 (uniform attention); catches a
    crash on zero-width heads or a merge that drops the head (its V path still contributes)."""
    model = make_model()
    masks = ones(model)
    zero_(masks, L0.site("q_proj", "out"), slice(None))
    merge_checked(model, masks)
    attn = attn_of(model, 0)
    assert (attn.num_heads, attn.qk_head_dim, attn.v_head_dim) == (HEADS, 0, HD)
    assert attn.q_proj.weight.shape == (0, D)


def test_all_ffn_channels_removed_gives_bias() -> None:
    """(c) Every FFN channel gone (layer 0 at ff3-in, layer 1 at ff0-out): catches a Zero that drops ff3's bias,
    or a zero-width FFN left in place."""
    model = make_model()
    masks = ones(model)
    zero_(masks, L0.site("ff.3", "in"), slice(None))
    zero_(masks, L1.site("ff.0", "out"), slice(None))
    b3 = [ff_of(model, i)[3].bias.detach().clone() for i in range(2)]
    bookkeeping = merge_checked(model, masks)
    for i in range(2):
        assert isinstance(ff_of(model, i), Bias) and bookkeeping["layers"][i]["ffn"] == "bias"
        torch.testing.assert_close(ff_of(model, i).bias.detach(), b3[i])
        assert bookkeeping["layers"][i]["ffn_dim"] == 0


def test_ffn_output_masked_gives_zero() -> None:
    """ff3's residual output mask all zero: the FFN outputs exactly 0, so it becomes Zero; catches a Bias that
    keeps the (folded to zero) constant or leaves the FFN alive."""
    model = make_model()
    masks = ones(model)
    zero_(masks, L1.site("ff.3", "out"), slice(None))
    bookkeeping = merge_checked(model, masks)
    assert isinstance(ff_of(model, 1), Zero) and bookkeeping["layers"][1]["ffn"] == "zero"


def test_nonzero_activation_at_zero_moves_into_ff3_bias() -> None:
    """Sigmoid FFN (act(0) = 0.5): a channel pruned at ff0-out still adds 0.5 * W3[:, j]. Catches dropping it
    without the bias correction (second half), and a Bias/Zero choice that ignores the act(0) terms."""
    model = make_model()
    for i in range(2):
        ff_of(model, i)[1] = nn.Sigmoid()
    masks = ones(model)
    dead = [1, 5, 6, 20]
    zero_(masks, L0.site("ff.0", "out"), dead)
    zero_(masks, L0.site("ff.3", "in"), [5, 30])  # 5 dead on both sides: no correction for it
    zero_(masks, L1.site("ff.0", "out"), slice(None))
    w3 = [ff_of(model, i)[3].weight.detach().clone() for i in range(2)]
    b3 = [ff_of(model, i)[3].bias.detach().clone() for i in range(2)]
    x = inputs(model)
    with masked(model, masks):
        ref = predict(model, x)
    bookkeeping = merge_checked(model, masks)
    assert bookkeeping["layers"][0]["ffn_dim"] == FFN - 5
    assert isinstance(ff_of(model, 1), Bias)
    torch.testing.assert_close(ff_of(model, 1).bias.detach(), b3[1] + 0.5 * w3[1].sum(dim=1))
    with torch.no_grad():  # the wrong implementation: slice ff0-dead channels without the act(0) term
        ff_of(model, 0)[3].bias.sub_(0.5 * w3[0][:, [1, 6, 20]].sum(dim=1))
    assert (predict(model, x) - ref).abs().max() > 1e-3


def test_all_heads_removed_gives_bias_or_zero() -> None:
    """Every head gone: layer 0 keeps out_proj's bias (Bias), layer 1 with a zero out_proj bias becomes Zero, and an
    all-zero out_proj output mask also gives Zero; catches num_heads=0 crashes and a dropped attention bias."""
    model = make_model()
    with torch.no_grad():
        attn_of(model, 1).out_proj.bias.zero_()
    masks = ones(model)
    zero_(masks, L0.site("v_proj", "out"), slice(None))
    zero_(masks, L1.site("out_proj", "in"), slice(None))
    b_o = attn_of(model, 0).out_proj.bias.detach().clone()
    out = merge_checked(model, masks)
    assert [e["attn"] for e in out["layers"]] == ["bias", "zero"]
    assert isinstance(attn_of(model, 0), Bias) and isinstance(attn_of(model, 1), Zero)
    torch.testing.assert_close(attn_of(model, 0).bias.detach(), b_o)
    hidden, weights = attn_of(model, 0)(hidden_states=torch.zeros(2, 5, D), output_attentions=True)
    assert hidden.shape == (2, 5, D) and weights is None

    model = make_model()
    masks = ones(model)
    zero_(masks, L0.site("out_proj", "out"), slice(None))
    assert merge_checked(model, masks)["layers"][0]["attn"] == "zero"


# ------------------------------------------------------------------------------------------- residual stream slicing


def test_residual_index_slices_residual_side() -> None:
    """Residual zeros under `index`: the Linears keep only live columns/rows and gather/scatter; under `fold` d_model
    stays. Catches an index_add to the wrong rows, a gather without slicing the weight, or an all-zero input mask."""
    masks_fn = lambda model: {  # noqa: E731
        **ones(model),
        L0.site("q_proj", "in"): (torch.arange(D) % 3 != 0).float(),
        L0.site("ff.3", "out"): (torch.arange(D) % 4 != 1).float(),
        L1.site("k_proj", "in"): torch.zeros(D),
        L1.site("out_proj", "out"): (torch.arange(D) < 10).float(),
    }
    folded, indexed = make_model(), make_model()
    merge_checked(folded, masks_fn(folded), "fold")
    bookkeeping = merge_checked(indexed, masks_fn(indexed), "index")
    assert all(not isinstance(m, IndexedLinear) for m in folded.modules())
    q0, ff3, k1, o1 = (
        attn_of(indexed, 0).q_proj,
        ff_of(indexed, 0)[3],
        attn_of(indexed, 1).k_proj,
        attn_of(indexed, 1).out_proj,
    )
    assert all(isinstance(m, IndexedLinear) for m in (q0, ff3, k1, o1))
    assert (q0.in_features, ff3.out_features, k1.in_features, o1.out_features) == (10, 12, 0, 10)
    assert not isinstance(attn_of(indexed, 0).k_proj, IndexedLinear)
    assert bookkeeping["layers"][0]["gather"] == {"q_proj": [i for i in range(D) if i % 3]}
    assert bookkeeping["layers"][1]["scatter"] == {"out_proj": list(range(10))}
    assert param_count(indexed) == param_count(folded) - 6 * D - 4 * (FFN + 1) - D * HEADS * HD - 6 * (D + 1)


# ---------------------------------------------------------------------------------------------- test 8: dependency ties


@pytest.mark.parametrize("pre_norm", [True, False])
def test_dependency_ties(pre_norm: bool) -> None:
    """q/k keep the same original rows, v rows and o columns the same indices, FFN ff0 rows and ff3 columns the same
    channels (those live on both sides); catches slicing tied sides independently (wrong rows, even when shapes
    happen to agree)."""
    model = make_model(pre_norm=pre_norm)
    masks = random_masks(model, keep=0.6, seed=7)
    before = copy.deepcopy(model)
    bookkeeping = merge_checked(model, masks)
    for i, (sites, entry) in enumerate(zip((L0, L1), bookkeeping["layers"], strict=True)):
        old_attn, attn = attn_of(before, i), attn_of(model, i)
        fold = {
            name: getattr(old_attn, name).weight.detach()
            * masks[sites.site(name, "out")][:, None]
            * masks[sites.site(name, "in")][None, :]
            for name in ("q_proj", "k_proj", "v_proj", "out_proj")
        }
        qk_rows = [h * HD + j for h, idx in zip(entry["heads"], entry["qk_index"], strict=True) for j in idx]
        v_rows = [h * HD + j for h, idx in zip(entry["heads"], entry["v_index"], strict=True) for j in idx]
        assert attn.q_proj.out_features == attn.k_proj.out_features == attn.num_heads * attn.qk_head_dim
        assert attn.v_proj.out_features == attn.out_proj.in_features == attn.num_heads * attn.v_head_dim
        torch.testing.assert_close(attn.q_proj.weight.detach(), fold["q_proj"][qk_rows])
        torch.testing.assert_close(attn.k_proj.weight.detach(), fold["k_proj"][qk_rows])
        torch.testing.assert_close(attn.v_proj.weight.detach(), fold["v_proj"][v_rows])
        torch.testing.assert_close(attn.out_proj.weight.detach(), fold["out_proj"][:, v_rows])
        live = (masks[sites.site("ff.0", "out")] != 0) & (masks[sites.site("ff.3", "in")] != 0)
        assert entry["ffn_index"] == live.nonzero().flatten().tolist()
        ff = ff_of(model, i)
        assert ff[0].out_features == ff[3].in_features == entry["ffn_dim"] == int(live.sum())
        removed_heads = [h for h in range(HEADS) if h not in entry["heads"]]
        for h in removed_heads:  # a removed head has all its V channels dead on one side or the other
            v_dead = (masks[sites.site("v_proj", "out")] == 0) | (masks[sites.site("out_proj", "in")] == 0)
            assert bool(v_dead[h * HD : (h + 1) * HD].all())


# ------------------------------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize("residual_slicing", ["fold", "index"])
def test_param_counts_equal_prediction(residual_slicing: str) -> None:
    """The physical count equals the prediction from the masks alone (total and blocks); catches a predictor out of
    sync with the built modules (Bias/Zero, act(0) bias, gathered widths)."""
    model = make_model()
    masks = random_masks(model, keep=0.6, seed=11)
    zero_(masks, L0.site("v_proj", "out"), head(2, [0, 1, 2, 3]))
    zero_(masks, L1.site("ff.0", "out"), slice(None))
    total = predicted_param_count(model, masks, residual_slicing)
    blocks = predicted_param_count(model, masks, residual_slicing, blocks_only=True)
    planned = plan_merge(model, masks, residual_slicing)
    bookkeeping = merge_checked(model, masks, residual_slicing)
    assert planned == bookkeeping
    assert param_count(model) == total == bookkeeping["params"]["total_after"]
    assert param_count(model, blocks_only=True) == blocks == bookkeeping["params"]["blocks_after"]
    assert total < bookkeeping["params"]["total_before"]


def test_param_counts_by_hand() -> None:
    """Hand arithmetic: 5 FFN channels cost 2*d+1 each, a whole head 3*hd*(d+1) + d*hd; catches a predictor and a
    merge that agree with each other but both mis-slice."""
    model = make_model()
    blocks_before = param_count(model, blocks_only=True)
    masks = ones(model)
    zero_(masks, L0.site("ff.3", "in"), [0, 3, 7, 8, 31])
    zero_(masks, L1.site("out_proj", "in"), head(3, [0, 1, 2, 3]))
    merge_checked(model, masks)
    assert blocks_before - param_count(model, blocks_only=True) == 5 * (2 * D + 1) + 3 * HD * (D + 1) + D * HD


# ------------------------------------------------------------------------------------- test 9: merged checkpoint reload


@pytest.mark.parametrize("residual_slicing", ["fold", "index"])
def test_checkpoint_round_trip_rebuilds_shapes(residual_slicing: str, tmp_path) -> None:
    """Bookkeeping through torch.save/torch.load(weights_only=True), rebuild_ on a fresh model, strict
    load_state_dict: identical outputs. Catches non-primitive bookkeeping (tensors, objects), a rebuild that misses
    a shape (strict load fails) and IndexedLinear indices that are not restored."""
    model = make_model(pre_norm=False, num_input_channels=2)
    masks = random_masks(model, keep=0.6, seed=5)
    zero_(masks, L0.site("v_proj", "out"), slice(None))  # layer 0 attention -> Bias
    zero_(masks, L1.site("v_proj", "out"), head(0, [0, 1, 2, 3]))
    bookkeeping = merge_checked(model, masks, residual_slicing)
    assert_primitive(bookkeeping)
    x = inputs(model)
    merged = predict(model, x)
    torch.save({"state_dict": model.state_dict(), "bookkeeping": bookkeeping}, tmp_path / "merged.pt")
    loaded = torch.load(tmp_path / "merged.pt", weights_only=True)
    assert loaded["bookkeeping"] == bookkeeping and loaded["bookkeeping"]["format"] == BOOKKEEPING_FORMAT
    fresh = make_model(seed=123, pre_norm=False, num_input_channels=2)
    rebuild_(fresh, loaded["bookkeeping"])
    fresh.load_state_dict(loaded["state_dict"], strict=True)
    fresh.eval()
    torch.testing.assert_close(predict(fresh, x), merged, atol=1e-6, rtol=0)
    assert param_count(fresh) == param_count(model)
    assert {n: tuple(p.shape) for n, p in fresh.named_parameters()} == {
        n: tuple(p.shape) for n, p in model.named_parameters()
    }


# ------------------------------------------------------------------------------------------------- paths and errors


def test_eager_path_output_attentions_and_training() -> None:
    """The eager softmax path equals the SDPA path, output_attentions returns the merged heads' weights, and the merged
    model trains (Bias gets a gradient); catches SDPA ignoring `scale`, a broken eager path, and a frozen Bias."""
    model = make_model()
    masks = random_masks(model, seed=2)
    zero_(masks, L1.site("ff.3", "in"), slice(None))
    merge_checked(model, masks)
    x = inputs(model)
    sdpa = predict(model, x)
    for i in range(2):
        attn_of(model, i).attn_implementation = "eager"
    torch.testing.assert_close(predict(model, x), sdpa, atol=1e-6, rtol=0)
    with torch.no_grad():
        out = model(past_values=x, output_attentions=True)
    heads = attn_of(model, 0).num_heads
    assert out.attentions[0].shape == (x.shape[0], heads, 8, 8)
    model.train()
    model(past_values=x, future_values=torch.randn(x.shape[0], 16, 1)).loss.backward()
    assert ff_of(model, 1).bias.grad is not None and ff_of(model, 1).bias.grad.abs().sum() > 0


def test_summary() -> None:
    """merge_summary reports heads kept, sub-layer kinds and block parameters before/after from the bookkeeping."""
    model = make_model()
    masks = ones(model)
    zero_(masks, L0.site("v_proj", "out"), head(0, [0, 1, 2, 3]))
    zero_(masks, L1.site("ff.0", "out"), slice(None))
    summary = merge_summary(merge_checked(model, masks))
    kinds = [(s["heads_kept"], s["attn"], s["ffn"]) for s in summary["layers"]]
    assert kinds == [(3, "attn", "ffn"), (4, "attn", "bias")]
    assert summary["blocks_after"] == param_count(model, blocks_only=True) < summary["blocks_before"]


def test_errors_name_what_was_expected() -> None:
    """Wrong mask length, unknown site, bad residual_slicing, a second merge, channel_attention and a rebuild on another
    config each raise a named error; catches silent misuse."""
    model = make_model()
    with pytest.raises(ValueError, match="q_proj:out.*length 16"):
        merge_(model, {L0.site("q_proj", "out"): torch.ones(15)})
    with pytest.raises(KeyError, match="nope"):
        merge_(model, {"model.nope:in": torch.ones(3)})
    with pytest.raises(ValueError, match="residual_slicing"):
        merge_(model, ones(model), "slice")  # type: ignore[arg-type]
    masks = ones(model)
    zero_(masks, L0.site("ff.0", "out"), [0])
    bookkeeping = merge_(model, masks)
    with pytest.raises(ValueError, match="merged already"):
        merge_(model, {})
    with pytest.raises(ValueError, match="orig_num_heads=4, but the model has 2"):
        rebuild_(make_model(num_attention_heads=2), bookkeeping)
    with pytest.raises(ValueError, match="format"):
        rebuild_(make_model(), {**bookkeeping, "format": "v0"})
    with pytest.raises(ValueError, match="channel_attention"):
        merge_(make_model(num_input_channels=2, channel_attention=True), {})
