"""Behaviour tests of CRAFTNet and the CRAFT maths (card "Tests that must fail" 4-7, 9-11, 17 fast part).

Every test names the wrong implementation it catches. Sizes are tiny; the whole file runs in a few seconds.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.craft.metrics import reciprocal_rank
from zoo.craft.model import (
    MASK_VALUE,
    CRAFTLayer,
    CRAFTNet,
    bce_loss,
    bpr_loss,
    elapsed_feature,
    map_ids,
    num_embeddings_for,
    repeat_counts,
)

torch.set_num_threads(1)

ROWS = 40


def _batch(
    b: int = 5, c: int = 4, length: int = 8, seed: int = 0, min_valid: int = 1
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Random left-aligned windows with min_valid..length real neighbours, candidates, elapsed, repeat."""
    g = torch.Generator().manual_seed(seed)
    hist = torch.randint(1, ROWS, (b, length), generator=g)
    valid = torch.randint(min_valid, length + 1, (b,), generator=g)
    hist[torch.arange(length)[None, :] >= valid[:, None]] = 0
    cand = torch.randint(1, ROWS, (b, c), generator=g)
    elapsed = torch.rand(b, c, generator=g) * 50.0
    repeat = repeat_counts(hist, cand)
    return hist, cand, elapsed, repeat


def _net(seed: int = 0, **kwargs: object) -> CRAFTNet:
    torch.manual_seed(seed)
    return CRAFTNet.tiny(ROWS, **kwargs).eval()


# ---------------------------------------------------------------------------------------------------------------
# Reference implementation (slow, explicit) of the card's pseudocode, reading the module's weights.
# ---------------------------------------------------------------------------------------------------------------
def _ref_layer(layer: CRAFTLayer, q: Tensor, kv: Tensor, hist: Tensor) -> Tensor:
    """Official layer, one head and one (query, candidate) at a time, explicit softmax."""
    b, c, d = q.shape
    h = layer.heads
    dh = d // h
    out = torch.empty_like(q)
    for i in range(b):
        k = kv[i] @ layer.wk.weight.T + layer.wk.bias
        v = kv[i] @ layer.wv.weight.T + layer.wv.bias
        add = torch.where(hist[i] != 0, 0.0, -10000.0)
        for j in range(c):
            qq = q[i, j] @ layer.wq.weight.T + layer.wq.bias
            heads = []
            for hh in range(h):
                sl = slice(hh * dh, (hh + 1) * dh)
                logits = (k[:, sl] @ qq[sl]) / math.sqrt(dh) + add
                w = torch.exp(logits - logits.max())
                heads.append((w / w.sum()) @ v[:, sl])
            attn = torch.cat(heads) @ layer.wo.weight.T + layer.wo.bias
            x = q[i, j] + F.layer_norm(attn, (d,), layer.ln_a.weight, layer.ln_a.bias, 1e-12)
            inner = x @ layer.w1.weight.T + layer.w1.bias
            gelu = 0.5 * inner * (1.0 + torch.erf(inner / math.sqrt(2.0)))
            ffn = gelu @ layer.w2.weight.T + layer.w2.bias
            out[i, j] = x + F.layer_norm(ffn, (d,), layer.ln_f.weight, layer.ln_f.bias, 1e-12)
    return out


def _ref_net(net: CRAFTNet, hist: Tensor, cand: Tensor, elapsed: Tensor, repeat: Tensor) -> Tensor:
    """Whole network per the pseudocode: shared LN0, positions on keys only, K0 reused by every layer."""
    d = net.d
    e = net.emb.weight
    ln0 = lambda x: F.layer_norm(x, (d,), net.ln0.weight, net.ln0.bias, 1e-12)  # noqa: E731
    k0 = ln0(e[hist] + net.pos.weight[: hist.shape[1]])
    q = ln0(e[cand])
    for layer in net.layers:
        q = _ref_layer(layer, q, k0, hist)
    feats = [q]
    for enc, x in ((net.elapsed_enc, elapsed), (net.repeat_enc, repeat)):
        if enc is not None:
            lin = x[..., None] * enc.lin.weight[:, 0] + enc.lin.bias
            feats.append(F.layer_norm(lin, (d,), enc.ln.weight, enc.ln.bias, 1e-12))
    z = torch.cat(feats, -1)
    lin1, prelu, _, lin2 = net.mlp
    hdn = z @ lin1.weight.T + lin1.bias
    hdn = torch.where(hdn >= 0, hdn, prelu.weight * hdn)
    return (hdn @ lin2.weight.T + lin2.bias)[..., 0]


@pytest.mark.parametrize("kv_path", ["project", "fold"])
def test_layer_matches_slow_reference(kv_path: str) -> None:
    """Catches a wrong attention scale (sqrt(d), not sqrt(d/h)), a missing key mask, tanh-GELU, swapped LN/residual;
    for both key/value paths (a fold that drops the value bias or misplaces Wk fails here)."""
    net = _net(heads=2, kv_path=kv_path)
    with torch.no_grad():  # non-trivial LayerNorm affine parameters so that their placement matters
        for p in (net.layers[0].ln_a.weight, net.layers[0].ln_f.weight):
            p.uniform_(0.5, 1.5)
        for p in (net.layers[0].ln_a.bias, net.layers[0].ln_f.bias):
            p.normal_(0.0, 0.1)
        for lin in ("wq", "wk", "wv", "wo"):  # non-zero biases: the folded path carries each one differently
            getattr(net.layers[0], lin).bias.normal_(0.0, 0.5)
    hist, cand, _, _ = _batch()
    with torch.no_grad():
        kv, q = net.encode_keys(hist), net.encode_queries(cand)
        got = net.layers[0](q, kv, net.key_mask(hist))
        want = _ref_layer(net.layers[0], q, kv, hist)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kv_path", ["project", "fold"])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_network_matches_slow_reference(num_layers: int, kv_path: str) -> None:
    """Catches positions on queries, separate LN0s, keys updated between layers, a wrong MLP or feature encoder."""
    torch.manual_seed(1)
    net = CRAFTNet(ROWS, d=16, L=8, num_layers=num_layers, heads=4, use_repeat=True, kv_path=kv_path).eval()
    hist, cand, elapsed, repeat = _batch(seed=1)
    with torch.no_grad():
        torch.testing.assert_close(
            net(hist, cand, elapsed, repeat), _ref_net(net, hist, cand, elapsed, repeat), atol=1e-5, rtol=1e-5
        )


# ---------------------------------------------------------------------------------------------------------------
# Card test 4: candidate independence.
# ---------------------------------------------------------------------------------------------------------------
def test_candidates_are_independent() -> None:
    """Catches candidates attending to each other (self-attention over C) or any cross-candidate normalisation."""
    net = _net(use_repeat=True, num_layers=2)
    hist, cand, elapsed, repeat = _batch(c=3)
    with torch.no_grad():
        joint = net(hist, cand, elapsed, repeat)
        for j in range(3):
            alone = net(hist, cand[:, j : j + 1], elapsed[:, j : j + 1], repeat[:, j : j + 1])
            torch.testing.assert_close(joint[:, j : j + 1], alone, atol=1e-6, rtol=0)
        perm = torch.tensor([2, 0, 1])
        torch.testing.assert_close(
            net(hist, cand[:, perm], elapsed[:, perm], repeat[:, perm]), joint[:, perm], atol=1e-6, rtol=0
        )


# ---------------------------------------------------------------------------------------------------------------
# Card test 5: keys/values projected once per query, shared over candidates.
# ---------------------------------------------------------------------------------------------------------------
def test_key_value_projections_see_b_l_d() -> None:
    """Catches keys expanded to (B*C, L, d) (or (B, C, L, d)) before the Wk/Wv projections: C-times the work."""
    torch.manual_seed(0)
    net = CRAFTNet(ROWS, d=16, L=8, num_layers=2, heads=2, kv_path="project").eval()
    b, c, length = 3, 5, 8
    hist, cand, elapsed, _ = _batch(b=b, c=c, length=length)
    seen: list[tuple[str, tuple[int, ...]]] = []
    handles = []
    for i, layer in enumerate(net.layers):
        for name in ("wk", "wv"):
            mod = getattr(layer, name)
            handles.append(
                mod.register_forward_hook(
                    lambda m, inp, out, tag=f"{i}.{name}": seen.append((tag, tuple(inp[0].shape)))
                )
            )
    with torch.no_grad():
        net(hist, cand, elapsed)
    for h in handles:
        h.remove()
    assert sorted(t for t, _ in seen) == ["0.wk", "0.wv", "1.wk", "1.wv"]  # each called exactly once
    assert all(shape == (b, length, 16) for _, shape in seen), seen


def test_folded_path_never_projects_keys_and_matches() -> None:
    """The folded path (training, small C) calls no Wk/Wv module at all, and equals the projecting path, also in
    training mode with dropout under the same RNG state (same masks, same order of random draws)."""
    torch.manual_seed(0)
    net = CRAFTNet(ROWS, d=16, L=8, num_layers=2, heads=2, kv_path="fold")
    hist, cand, elapsed, _ = _batch(b=4, c=2, length=8)
    calls = []
    handles = [getattr(layer, n).register_forward_hook(lambda *a: calls.append(1)) for layer in net.layers
               for n in ("wk", "wv")]  # fmt: skip
    net.eval()
    with torch.no_grad():
        folded = net(hist, cand, elapsed)
    assert calls == []
    for handle in handles:
        handle.remove()
    for layer in net.layers:
        layer.kv_path = "project"
    with torch.no_grad():
        torch.testing.assert_close(net(hist, cand, elapsed), folded, atol=1e-6, rtol=1e-5)
    assert net.layers[0].use_fold(2, 20) is False  # explicit setting wins
    net.layers[0].kv_path = "auto"
    assert net.layers[0].use_fold(2, 20) and not net.layers[0].use_fold(101, 20)  # train folds, eval projects


# ---------------------------------------------------------------------------------------------------------------
# Card test 6: target-awareness.
# ---------------------------------------------------------------------------------------------------------------
def test_scores_are_target_aware() -> None:
    """Catches a source-only encoder (all candidates tie, MRR 2/(K+2)) and a history-blind candidate scorer."""
    net = _net(use_elapsed=False)
    hist, _, _, _ = _batch(b=2, min_valid=3)
    cand = torch.arange(1, ROWS)[None].expand(2, -1)
    with torch.no_grad():
        s = net(hist, cand)
    assert torch.unique(s[0]).numel() == ROWS - 1  # every candidate gets its own score
    # The history changes the candidates' relative scores, not just a per-source offset.
    rel = s - s[:, :1]
    assert (rel[0] - rel[1]).abs().max() > 1e-5


# ---------------------------------------------------------------------------------------------------------------
# Card test 7: positions and padding.
# ---------------------------------------------------------------------------------------------------------------
def _permute_valid(hist: Tensor, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    out = hist.clone()
    for i in range(hist.shape[0]):
        n = int((hist[i] != 0).sum())
        out[i, :n] = hist[i, :n][torch.randperm(n, generator=g)]
    return out


def test_without_positions_history_order_is_irrelevant() -> None:
    """Catches positional information leaking in when use_pos=False (and a mask keyed to positions, not ids)."""
    net = _net(use_pos=False, num_layers=2)
    hist, cand, elapsed, _ = _batch(min_valid=4)
    perm = _permute_valid(hist)
    assert not torch.equal(perm, hist)
    with torch.no_grad():
        torch.testing.assert_close(net(perm, cand, elapsed), net(hist, cand, elapsed), atol=1e-6, rtol=0)
    assert net.pos is None


def test_with_positions_history_order_matters() -> None:
    """Catches learnable positions that are not added to the keys (or added to the queries only)."""
    net = _net(use_pos=True)
    hist, cand, elapsed, _ = _batch(min_valid=4)
    with torch.no_grad():
        diff = (net(_permute_valid(hist), cand, elapsed) - net(hist, cand, elapsed)).abs().max()
    assert diff > 1e-5


def test_extra_zero_padding_changes_nothing() -> None:
    """Catches a -inf-free mask that is not applied (padding keys get weight) or positions counted from the right.

    Rows need one real neighbour: an all-padding window averages the padding values uniformly (official behaviour).
    """
    net = _net(num_layers=2, use_repeat=True)
    hist, cand, elapsed, repeat = _batch(length=5)
    with torch.no_grad():
        short = net(hist, cand, elapsed, repeat)
        padded = net(F.pad(hist, (0, 3)), cand, elapsed, repeat)  # same network, 8 columns
        torch.testing.assert_close(padded, short, atol=1e-6, rtol=0)
        torch.manual_seed(5)
        big = CRAFTNet(ROWS, d=16, L=12, num_layers=2, heads=2, use_repeat=True).eval()
        state = net.state_dict()
        state["pos.weight"] = torch.cat([state["pos.weight"], big.pos.weight[8:]])  # shared positions kept
        big.load_state_dict(state)
        torch.testing.assert_close(big(F.pad(hist, (0, 7)), cand, elapsed, repeat), short, atol=1e-6, rtol=0)


def test_all_padding_history_is_finite() -> None:
    """Catches a -inf mask (softmax over only -inf gives NaN) on a source with no earlier neighbour."""
    net = _net(use_repeat=True).train()
    hist = torch.zeros(3, 8, dtype=torch.long)
    cand = torch.randint(1, ROWS, (3, 4))
    s = net(hist, cand, elapsed_feature(torch.ones(3), torch.full((3, 4), float("nan"))), repeat_counts(hist, cand))
    assert torch.isfinite(s).all()
    s.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
    assert MASK_VALUE == -10000.0


def test_hist_longer_than_l_is_refused() -> None:
    """Catches silent truncation of a window longer than the position table."""
    net = _net()
    with pytest.raises(ValueError, match="L=8"):
        net(torch.ones(2, 9, dtype=torch.long), torch.ones(2, 1, dtype=torch.long), torch.zeros(2, 1))


# ---------------------------------------------------------------------------------------------------------------
# Card test 9: LayerNorm placement.
# ---------------------------------------------------------------------------------------------------------------
def _zero_sublayer_lns(layer: CRAFTLayer) -> None:
    with torch.no_grad():
        for ln in (layer.ln_a, layer.ln_f):
            ln.weight.zero_()
            ln.bias.zero_()


@pytest.mark.parametrize("placement", ["official", "post", "pre"])
def test_zeroed_sublayer_layernorms_return_q(placement: str) -> None:
    """Catches post-LN (LN(Q + f(Q))) or pre-LN (Q + f(LN(Q))) where the card's Q + LN(f(Q)) is meant."""
    torch.manual_seed(0)
    layer = CRAFTLayer(16, 2, placement).eval()
    _zero_sublayer_lns(layer)
    hist, _, _, _ = _batch()
    net = _net()
    q, kv = torch.randn(5, 4, 16), torch.randn(5, 8, 16)
    with torch.no_grad():
        out = layer(q, kv, net.key_mask(hist))
    if placement == "official":
        assert torch.equal(out, q)
    else:
        assert (out - q).abs().max() > 1e-3


def test_zeroed_layernorms_leave_q_unchanged_through_every_layer() -> None:
    """Catches a network whose layers are not the official residual form (checked on each layer via hooks)."""
    torch.manual_seed(0)
    net = CRAFTNet(ROWS, d=16, L=8, num_layers=3, heads=2).eval()
    io: list[tuple[Tensor, Tensor]] = []
    for layer in net.layers:
        _zero_sublayer_lns(layer)
        layer.register_forward_hook(lambda m, inp, out: io.append((inp[0], out)))
    hist, cand, elapsed, _ = _batch()
    with torch.no_grad():
        net(hist, cand, elapsed)
        q0 = net.encode_queries(cand)
    assert len(io) == 3
    assert torch.equal(io[0][0], q0)
    for inp, out in io:
        assert torch.equal(out, inp)


# ---------------------------------------------------------------------------------------------------------------
# Card test 10: parameter count of the official MOOC configuration.
# ---------------------------------------------------------------------------------------------------------------
def test_mooc_parameter_count() -> None:
    """Catches any layout drift from the official code: per-layer LN0, no biases, a skip projection, FFN width ..."""
    kw = {"d": 64, "L": 30, "num_layers": 2, "heads": 2, "use_pos": True, "use_elapsed": True, "num_output_layer": 2}
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(CRAFTNet(98, use_repeat=True, **kw)) == 146_050
    assert count(CRAFTNet(98, use_repeat=False, **kw)) != 146_050
    assert num_embeddings_for(7145, 7048, "dst_only") == 98  # MOOC: 7047 users, 97 items, ids 1..7144


# ---------------------------------------------------------------------------------------------------------------
# Card test 11: BPR.
# ---------------------------------------------------------------------------------------------------------------
def test_bpr_equal_scores_give_log2_and_gradient_raises_positive() -> None:
    """Catches a sign error (loss rewarding negatives) or a different loss (hinge, BCE, softmax CE)."""
    pos = torch.tensor([0.3, -1.0, 2.0], requires_grad=True)
    neg = pos.detach().clone().requires_grad_(True)
    loss = bpr_loss(pos, neg)
    torch.testing.assert_close(loss, torch.tensor(math.log(2.0)))
    loss.backward()
    assert (pos.grad < 0).all() and (neg.grad > 0).all()  # a descent step raises s+ and lowers s-
    p, n = torch.randn(4), torch.randn(4, 3)
    want = -torch.log(1e-10 + torch.sigmoid(p[:, None] - n)).mean()
    torch.testing.assert_close(bpr_loss(p, n), want)


def test_bce_ablation_loss() -> None:
    """Catches BCE with swapped labels or on raw scores instead of sigmoid(s)."""
    p, n = torch.randn(6), torch.randn(6)
    want = F.binary_cross_entropy(torch.sigmoid(torch.cat([p, n])), torch.cat([torch.ones(6), torch.zeros(6)]))
    torch.testing.assert_close(bce_loss(p, n), want)


# ---------------------------------------------------------------------------------------------------------------
# Card test 17 (fast part): constant query-side embedding ties every candidate.
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["tiny", "reproduce"])
def test_constant_embedding_ablation_ties_exactly(size: str) -> None:
    """Catches an identity leak besides E (e.g. positions on queries, id-dependent features): MRR must be 2/(K+2)."""
    torch.manual_seed(0)
    if size == "tiny":
        net = CRAFTNet.tiny(300, use_elapsed=False, use_repeat=False)
    else:
        net = CRAFTNet(300, d=64, L=20, num_layers=2, heads=2, use_elapsed=False, use_repeat=False)
    net.eval()
    with torch.no_grad():
        net.emb.weight[1:] = torch.randn(net.d)  # every candidate row equal
    k = 100
    g = torch.Generator().manual_seed(0)
    hist = torch.randint(0, 300, (6, net.L), generator=g)
    cand = torch.randint(1, 300, (6, 1 + k), generator=g)
    with torch.no_grad():
        s = net(hist, cand)
    rr = reciprocal_rank(s[:, 0], s[:, 1:])
    assert torch.equal(rr, torch.full((6,), 2.0 / (k + 2), dtype=torch.float64))


# ---------------------------------------------------------------------------------------------------------------
# Inputs: repeat counts, elapsed time, id mapping, key-time ablation, argument checks.
# ---------------------------------------------------------------------------------------------------------------
def test_repeat_counts_ignore_padding() -> None:
    """Catches padding counted as a repeat and counts of presence instead of multiplicity."""
    hist = torch.tensor([[4, 7, 4, 4, 0, 0], [0, 0, 0, 0, 0, 0]])
    cand = torch.tensor([[4, 7, 9], [4, 1, 2]])
    torch.testing.assert_close(repeat_counts(hist, cand), torch.tensor([[3.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))


def test_elapsed_feature_sentinel_and_precision() -> None:
    """Catches NaN leaking into the network and float32 subtraction of unix-scale times."""
    t = torch.tensor([1.7e9 + 0.75, 10.0], dtype=torch.float64)
    tau = torch.tensor([[1.7e9 + 0.25, float("nan")], [4.0, 10.0]], dtype=torch.float64)
    dt = elapsed_feature(t, tau)
    torch.testing.assert_close(dt, torch.tensor([[0.5, -100000.0], [6.0, 0.0]]))
    assert elapsed_feature(t, tau, sentinel=-1.0)[0, 1] == -1.0


def test_map_ids() -> None:
    """Catches off-by-one destination rows and sources/padding given real rows in the dst_only space."""
    ids = torch.tensor([0, 1, 5, 6, 9])
    assert map_ids(ids, 6, "dst_only").tolist() == [0, 0, 0, 1, 4]
    assert map_ids(ids, 6, "all").tolist() == ids.tolist()
    assert num_embeddings_for(10, 6, "dst_only") == 5 and num_embeddings_for(10, 6, "all") == 10
    with pytest.raises(ValueError, match="auto"):
        map_ids(ids, 6, "auto")  # type: ignore[arg-type]


def test_init_and_padding_row() -> None:
    """Catches default PyTorch init instead of the official N(0, 0.02) / zero bias / LN eps 1e-12 / PReLU 0.15."""
    torch.manual_seed(0)
    net = CRAFTNet(500, d=64, L=30).requires_grad_(False)
    assert torch.equal(net.emb.weight[0], torch.zeros(64))
    assert abs(float(net.emb.weight[1:].std()) - 0.02) < 2e-3
    assert abs(float(net.layers[0].w1.weight.std()) - 0.02) < 2e-3
    assert all(float(m.bias.abs().max()) == 0.0 for m in net.modules() if isinstance(m, torch.nn.Linear))
    assert all(m.eps == 1e-12 for m in net.modules() if isinstance(m, torch.nn.LayerNorm))
    assert float(net.mlp[1].weight) == pytest.approx(0.15)
    assert net.emb.padding_idx == 0


def test_key_time_replaces_positions() -> None:
    """Catches the key-time ablation ignoring key_dt or keeping positions next to it."""
    net = _net(key_time=True)
    assert net.pos is None and net.key_time_enc is not None
    hist, cand, elapsed, _ = _batch()
    dt = torch.rand(hist.shape) * 10
    with torch.no_grad():
        a, b = net(hist, cand, elapsed, key_dt=dt), net(hist, cand, elapsed, key_dt=dt * 3)
        padded_dt = torch.where(hist == 0, 1e6, dt)  # values under padding keys are ignored
        torch.testing.assert_close(net(hist, cand, elapsed, key_dt=padded_dt), a)
    assert (a - b).abs().max() > 1e-6
    with pytest.raises(ValueError, match="key_dt"):
        net(hist, cand, elapsed)


def test_missing_feature_inputs_raise() -> None:
    """Catches a silently dropped elapsed/repeat feature when the flag is on."""
    net = _net(use_repeat=True)
    hist, cand, elapsed, _ = _batch()
    with pytest.raises(ValueError, match="elapsed"):
        net(hist, cand)
    with pytest.raises(ValueError, match="repeat"):
        net(hist, cand, elapsed)


def test_single_layer_output_head() -> None:
    """Catches num_output_layer=1 building the 2-layer MLP (code default is a single Linear(D, 1))."""
    net = _net(num_output_layer=1)
    assert len(net.mlp) == 1 and net.mlp[0].in_features == 2 * 16
    hist, cand, elapsed, _ = _batch()
    assert net(hist, cand, elapsed).shape == cand.shape


def test_training_steps_reduce_bpr() -> None:
    """Catches a network that cannot learn (detached keys, frozen embeddings): a few descent steps lower BPR.

    Plain sign-descent updates (no torch.optim, which imports dynamo and sets TORCHINDUCTOR_CACHE_DIR).
    """
    torch.manual_seed(0)
    net = CRAFTNet.tiny(ROWS)
    hist, cand, elapsed, _ = _batch(b=32, c=2, seed=3)
    losses = []
    for _ in range(30):
        s = net(hist, cand, elapsed)
        loss = bpr_loss(s[:, 0], s[:, 1])
        net.zero_grad()
        loss.backward()
        assert float(net.emb.weight.grad[0].abs().max()) == 0.0  # padding row never trained
        with torch.no_grad():
            for p in net.parameters():
                p -= 1e-2 * p.grad.sign()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_folded_core_backward_matches_autograd() -> None:
    """The hand-written backward of the folded attention core equals autograd's (gradcheck in float64, with and
    without a dropout mask, with a full and a broadcast key bias); catches a missing K1 term (dS^T Qk or A^T dO), a
    softmax backward without the row correction, or a dropout mask applied on one side only. Through the ones column
    of ``with_ones`` the last output column is the row sum of the dropped attention."""
    from zoo.craft.model import _FoldedCore, with_ones

    g = torch.Generator().manual_seed(0)
    qk = torch.randn(3, 4, 6, dtype=torch.float64, generator=g, requires_grad=True)
    kv = with_ones(torch.randn(3, 6, 5, dtype=torch.float64, generator=g)).requires_grad_()
    drop = (torch.rand(3, 4, 6, dtype=torch.float64, generator=g) > 0.3).double() / 0.7
    for bias_shape in ((3, 4, 6), (3, 1, 6)):
        bias = torch.randn(*bias_shape, dtype=torch.float64, generator=g, requires_grad=True)
        for mask in (None, drop):
            assert torch.autograd.gradcheck(lambda a, b, c, m=mask: _FoldedCore.apply(a, b, c, m), (qk, kv, bias))
            attn = torch.softmax(qk @ kv.transpose(1, 2) + bias, -1) * (1 if mask is None else mask)
            out = _FoldedCore.apply(qk, kv, bias, mask)
            torch.testing.assert_close(out, attn @ kv)
            torch.testing.assert_close(out[..., -1], attn.sum(-1))


def test_keep_mask_rate_scale_and_seeding() -> None:
    """keep_mask keeps 1-p of the entries at 1/(1-p) and zeros the rest, is fixed by torch.manual_seed, and draws a
    fresh mask on the next call (catches an unscaled mask, an inverted threshold or a generator not seeded by torch)."""
    from zoo.craft.model import keep_mask

    torch.manual_seed(5)
    a = keep_mask((400, 1000), 0.3)
    kept = a != 0
    assert abs(float(kept.double().mean()) - 0.7) < 0.003  # 4e5 draws: 5 standard errors
    torch.testing.assert_close(a[kept], torch.full_like(a[kept], 1 / 0.7))
    torch.manual_seed(5)
    assert torch.equal(keep_mask((400, 1000), 0.3), a)
    assert not torch.equal(keep_mask((400, 1000), 0.3), a)
    assert keep_mask((3, 7), 0.1, torch.float64).dtype == torch.float64
    assert keep_mask((5,), 0.0).eq(1.0).all()


def test_fast_dropout_is_inverted_bernoulli_and_seeded() -> None:
    """FastDropout keeps each element with probability 1-p scaled by 1/(1-p), passes gradients through the same
    mask, is the identity in eval mode, and is fixed by torch.manual_seed (catches an unscaled or unseeded mask)."""
    from zoo.craft.model import FastDropout

    drop = FastDropout(0.1, min_numel=1)
    x = torch.ones(200, 20, 64, requires_grad=True)
    torch.manual_seed(3)
    y = drop(x)
    kept = y != 0
    assert abs(float(kept.float().mean()) - 0.9) < 0.005
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.9))
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())
    torch.manual_seed(3)
    torch.testing.assert_close(drop(x), y)
    assert not torch.equal(drop(x), y)  # the next call draws a fresh mask
    drop.eval()
    assert torch.equal(drop(x), x)
