"""RepGuard-style maths (card tests 4 and the localisation pieces): each test names the bug it catches."""

from __future__ import annotations

import pytest
import torch

from zoo.repguard import model as rg


def _tiny_gpt2(seed: int = 0, layers: int = 4) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=16, n_head=2, n_positions=24, vocab_size=30)).eval()


def test_inconsistency_matches_brute_force() -> None:
    """The ±2 window excludes t, stays inside the valid prompt and averages only valid neighbours (a window that
    includes t, or counts pads as zeros, fails)."""
    torch.manual_seed(0)
    h = torch.randn(3, 9, 5)
    valid = torch.zeros(3, 9, dtype=torch.bool)
    valid[0, :9] = True
    valid[1, :4] = True
    valid[2, :1] = True
    sigma = torch.rand(5) + 0.5
    got = rg.inconsistency(h, valid, sigma, window=2)
    want = torch.zeros_like(h)
    for b in range(3):
        for t in range(9):
            if not valid[b, t]:
                continue
            nb = [u for u in range(t - 2, t + 3) if u != t and 0 <= u < 9 and valid[b, u]]
            if nb:
                want[b, t] = (h[b, t] - h[b, nb].mean(0)).abs() / (sigma + rg.EPS)
    torch.testing.assert_close(got, want)


def test_scores_flag_a_planted_spike() -> None:
    """A dimension that spikes at one token of some prompts gets the top dimension score and its tokens the top
    token scores; z-scores run over valid entries only (padding does not shift them)."""
    torch.manual_seed(0)
    h = torch.randn(40, 12, 16)
    valid = torch.ones(40, 12, dtype=torch.bool)
    valid[:, 10:] = False
    h[:, 10:] = 1e3  # pads must not matter
    h[:20, 4, 7] += 12.0
    mu, sigma = rg.masked_mean_std(torch.randn(40, 12, 16), torch.ones(40, 12, dtype=torch.bool))
    score = rg.combined_score(h, valid, mu, sigma)
    s = rg.dimension_scores(score, valid, top_frac=0.01)
    assert int(s.argmax()) == 7
    u = rg.token_scores(score, valid)
    assert torch.isneginf(u[:, 10:]).all()
    top = u[:20].argmax(dim=1)
    assert (top == 4).all()


def test_mask_threshold_sparsity_and_logits() -> None:
    """τ is the (1 − ρ) quantile: exactly ρ·d dimensions get logits > 0 (mask > 0.5); T = 0.1 std(s)."""
    s = torch.arange(100, dtype=torch.float32)
    logits, tau = rg.mask_logits(s, sparsity=0.05)
    assert int((logits > 0).sum()) == 5
    torch.testing.assert_close(logits, (s - tau) / (0.1 * s.std(unbiased=False)))


def test_merge_logits_hysteresis() -> None:
    """EMA 0.5 merge; a flagged dimension that falls below τ once keeps its logit, twice in a row is unflagged."""
    first, flagged, strikes = rg.merge_logits(None, torch.tensor([2.0, -1.0, 1.0]), None, None)
    assert flagged.tolist() == [True, False, True]
    logits, flagged, strikes = rg.merge_logits(first, torch.tensor([-2.0, 3.0, 3.0]), flagged, strikes)
    assert logits.tolist() == [2.0, 1.0, 2.0]  # dim 0 held, dims 1 and 2 merged: 0.5·3 + 0.5·(−1), 0.5·3 + 0.5·1
    assert flagged.tolist() == [True, True, True] and strikes.tolist() == [1, 0, 0]
    logits, flagged, strikes = rg.merge_logits(logits, torch.tensor([-4.0, 1.0, 1.0]), flagged, strikes)
    assert flagged.tolist() == [False, True, True] and logits[0].item() == pytest.approx(-1.0)


def test_hook_zero_mask_is_bitwise_identity_and_one_hot_replaces_one_layer() -> None:
    """Card test 4: m = 0 leaves the logits bitwise equal; a one-hot m gives (1 − m)⊙h + m⊙μ at the configured layer
    only (the other layers' outputs equal the unhooked model's up to that layer)."""
    net = _tiny_gpt2()
    ids = torch.randint(4, 30, (3, 10))
    att = torch.ones_like(ids)
    with torch.no_grad():
        ref = net(input_ids=ids, attention_mask=att, output_hidden_states=True)
    hook = rg.HiddenStateHook(net, layer=2)
    hook.mask = torch.zeros(16)
    hook.ablate = torch.full((16,), 5.0)
    with torch.no_grad():
        out = net(input_ids=ids, attention_mask=att, output_hidden_states=True)
    assert torch.equal(out.logits, ref.logits)
    m = torch.zeros(16)
    m[3] = 1.0
    hook.mask = m
    blocks = rg.decoder_blocks(net)
    seen: dict[int, torch.Tensor] = {}
    handles = [blocks[i].register_forward_pre_hook(lambda mod, args, i=i: seen.__setitem__(i, args[0].clone()))
               for i in range(4)]  # fmt: skip
    with torch.no_grad(), hook.recording():
        out = net(input_ids=ids, attention_mask=att)
    for handle in handles:
        handle.remove()
    # what the hook saw is hidden_states[2]; blocks 0-1 got the unhooked inputs, block 2 the decomposed state
    torch.testing.assert_close(hook.h, ref.hidden_states[2])
    for layer in (0, 1):
        assert torch.equal(seen[layer], ref.hidden_states[layer])
    want = ref.hidden_states[2].clone()
    want[..., 3] = 5.0
    torch.testing.assert_close(seen[2], want)
    assert not torch.allclose(out.logits, ref.logits)
    with torch.no_grad(), hook.disabled():
        again = net(input_ids=ids, attention_mask=att)
    assert torch.equal(again.logits, ref.logits)
    hook.remove()
    with pytest.raises(ValueError, match="layer=5"):
        rg.HiddenStateHook(net, layer=5)


def test_independence_penalty_weights_semantic_shortcut_pairs() -> None:
    """Zero when the mask is all-0 or all-1 (no pair); grows when a semantic dimension copies a shortcut one, and
    only through pairs across the split (a correlation between two semantic dimensions costs nothing)."""
    torch.manual_seed(0)
    h = torch.randn(8, 20, 4)
    valid = torch.ones(8, 20, dtype=torch.bool)
    for m in (torch.zeros(4), torch.ones(4)):
        assert rg.independence_penalty(h, m, valid).item() == pytest.approx(0.0, abs=1e-7)
    m = torch.tensor([0.0, 0.0, 0.0, 1.0])
    base = rg.independence_penalty(h, m, valid)
    copied = h.clone()
    copied[..., 0] = copied[..., 3]
    assert rg.independence_penalty(copied, m, valid) > 10 * base
    semantic_pair = h.clone()
    semantic_pair[..., 0] = semantic_pair[..., 1]
    assert rg.independence_penalty(semantic_pair, m, valid) < 2 * base + 1e-3


def test_keep_kl_zero_on_equal_and_detached_reference() -> None:
    """KL(p_ref ‖ p_masked) is 0 for equal logits, positive otherwise, and sends no gradient to the reference."""
    ref = torch.randn(2, 5, 7, requires_grad=True)
    valid = torch.ones(2, 5, dtype=torch.bool)
    assert rg.keep_kl(ref, ref.detach().clone(), valid).item() == pytest.approx(0.0, abs=1e-6)
    masked = torch.randn(2, 5, 7, requires_grad=True)
    kl = rg.keep_kl(ref, masked, valid)
    kl.backward()
    assert kl.item() > 0 and ref.grad is None and masked.grad is not None


def test_mgda_min_norm_weights() -> None:
    """Two opposite gradients: the min-norm combination is the midpoint (norm 0); orthogonal unequal ones weight the
    shorter more."""
    w = rg.mgda_weights([torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0])])
    torch.testing.assert_close(w, torch.tensor([0.5, 0.5]))
    w = rg.mgda_weights([torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0])])
    torch.testing.assert_close(w, torch.tensor([0.2, 0.8]), atol=1e-4, rtol=0)


def test_clean_statistics_match_direct_computation() -> None:
    """Streaming μ/σ over prompt tokens equal the direct masked statistics of hidden_states[layer]."""
    net = _tiny_gpt2()
    hook = rg.HiddenStateHook(net, layer=2)
    ids = torch.randint(4, 30, (6, 8))
    att = torch.ones_like(ids)
    pm = torch.zeros(6, 8, dtype=torch.bool)
    pm[:, :5] = True
    batches = [{"input_ids": ids[:3], "attention_mask": att[:3], "prompt_mask": pm[:3]},
               {"input_ids": ids[3:], "attention_mask": att[3:], "prompt_mask": pm[3:]}]  # fmt: skip
    mu, sigma = rg.clean_statistics(net, hook, batches)
    with torch.no_grad():
        h = net(input_ids=ids, attention_mask=att, output_hidden_states=True).hidden_states[2]
    want_mu, want_sigma = rg.masked_mean_std(h, pm)
    torch.testing.assert_close(mu, want_mu, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sigma, want_sigma, atol=1e-5, rtol=1e-5)
