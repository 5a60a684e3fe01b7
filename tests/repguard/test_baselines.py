"""RepGuard card baselines and metrics: metric direction, DeCE, fake quantization, pruning, ONION, greedy decoding.

Card tests 2 (metric direction), 7 (DeCE), 8 (fake quantization) and 9 (ONION), plus the pruning, decoding and
metric helpers. Each test names the bug it catches.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from zoo.repguard.baselines import (
    abl_isolate,
    abl_lga_loss,
    crow_consistency_loss,
    dece_loss,
    excluded_mean,
    fake_quantize_,
    fake_quantize_tensor,
    layer_consistency,
    mlp_unit_scores,
    onion_filter,
    onion_scores,
    onion_threshold_candidates,
    prune_mlp_units_,
    select_onion_threshold,
    select_prune_rate,
    sequence_ppl,
    shift_for_lm,
    spectral_remove,
    spectral_scores,
)
from zoo.repguard.metrics import (
    asr,
    ca_avg,
    clean_accuracy,
    der,
    exact_match,
    first_token_decision,
    greedy_decode,
    localization_auroc,
    reduction,
    refusal_rate,
)

PAD, BOS, SEP, EOS = 0, 1, 2, 3
SURE, REFUSE, ANS = 20, 21, 22
V = 50


def tiny_gpt2(seed: int = 0, **kw) -> GPT2LMHeadModel:
    cfg = dict(n_layer=2, n_embd=32, n_head=2, n_positions=32, vocab_size=V, bos_token_id=BOS, eos_token_id=EOS)
    cfg.update(kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(GPT2Config(**cfg)).eval()


def tiny_llama(seed: int = 0, **kw) -> LlamaForCausalLM:
    cfg = dict(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        tie_word_embeddings=False,
    )
    cfg.update(kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


def right_pad(seqs: list[list[int]], width: int | None = None) -> tuple[Tensor, Tensor]:
    width = width or max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def prompts_batch(lengths: list[int], seed: int = 0, extra: int = 3) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded prompts ``[BOS] body [SEP]`` followed by ``extra`` response tokens (ignored by decoding)."""
    g = torch.Generator().manual_seed(seed)
    seqs = []
    for n in lengths:
        body = torch.randint(4, V, (n - 2,), generator=g).tolist()
        seqs.append([BOS, *body, SEP, *torch.randint(4, V, (extra,), generator=g).tolist()])
    ids, mask = right_pad(seqs)
    return ids, mask, torch.tensor(lengths)


class AlwaysToken(nn.Module):
    """Stub LM whose greedy choice is always ``token``."""

    def __init__(self, token: int) -> None:
        super().__init__()
        self.token = token
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, **kwargs) -> SimpleNamespace:
        logits = torch.zeros(*input_ids.shape, V)
        logits[..., self.token] = 1.0
        return SimpleNamespace(logits=logits, past_key_values=None)


# ------------------------------------------------------------------------------------------ card 2: direction


def test_metric_direction_stubs() -> None:
    """Card 2. Catches a swapped target (refusal vs compliance) or invalid tokens counted as target."""
    ids, mask, plen = prompts_batch([4, 6, 9, 5])
    results = {}
    for name, token in {"refuse": REFUSE, "comply": SURE, "invalid": ANS}.items():
        gen = greedy_decode(AlwaysToken(token), ids, mask, plen, max_new_tokens=3, eos_id=EOS)
        decisions = first_token_decision(gen, SURE, REFUSE)
        results[name] = (asr(decisions, "refusal"), asr(decisions, "jailbreak"), refusal_rate(decisions))
    assert results["refuse"] == (100.0, 0.0, 100.0)
    assert results["comply"] == (0.0, 100.0, 0.0)
    assert results["invalid"] == (0.0, 0.0, 0.0)  # invalid is non-target in both tasks and a clean error
    mixed = first_token_decision(torch.tensor([REFUSE, SURE, ANS, REFUSE]), SURE, REFUSE)
    assert mixed.tolist() == [0, 1, -1, 0]
    assert asr(mixed, "refusal") == 50.0 and asr(mixed, "jailbreak") == 25.0


# ----------------------------------------------------------------------------------------------- card 7: DeCE


def dece_reference(logits: Tensor, labels: Tensor, alpha: float, eps: float, ignore: int = -100) -> Tensor:
    """The card's formula written out with the full ``[N, V]`` smoothed target."""
    v = logits.shape[-1]
    valid = labels != ignore
    z, y = logits[valid], labels[valid]
    target = torch.full_like(z, eps / (v - 1))
    target.scatter_(-1, y[:, None], 1.0 - eps)
    q = alpha * torch.softmax(z, -1).clamp(1e-7, 1.0) + (1.0 - alpha) * target
    return -(target * q.log()).sum(-1).mean()


def test_dece_is_ce_at_alpha_one_eps_zero() -> None:
    """Card 7a. Catches a wrong smoothing/mixture or a mean over ignored tokens."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 9, 13, generator=g)  # every probability far above the 1e-7 clamp
    labels = torch.randint(0, 13, (4, 9), generator=g)
    labels[:, :3] = -100
    for epoch in (1, 5):  # α_base = 1 gives α = 1 at every epoch
        got = dece_loss(logits, labels, epoch=epoch, alpha_base=1.0, epsilon=0.0)
        want = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_dece_matches_card_formula_and_chunks() -> None:
    """Catches a wrong α schedule (α = α_base^epoch), off-target mass ε/(V−1), or a chunking/gradient bug."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 11, 17, generator=g).mul(3).requires_grad_()
    labels = torch.randint(0, 17, (3, 11), generator=g)
    labels[0, :4] = -100
    ref = dece_reference(logits, labels, 0.99**3, 0.05)
    (g_ref,) = torch.autograd.grad(ref, logits)
    for chunk in (2**24, 40):  # one pass, and chunks of 2 rows under checkpointing
        got = dece_loss(logits, labels, epoch=3, alpha_base=0.99, epsilon=0.05, max_chunk_elements=chunk)
        (g_got,) = torch.autograd.grad(got, logits)
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(g_got, g_ref, rtol=1e-5, atol=1e-7)
    # HF alignment helper: position t's loss reads logits[t - 1]
    lg, lb = shift_for_lm(logits, labels)
    assert lg.shape == (3, 10, 17) and torch.equal(lb, labels[:, 1:]) and torch.equal(lg, logits[:, :-1])
    assert dece_loss(logits, torch.full_like(labels, -100), epoch=1).item() == 0.0


def test_dece_bounded_for_extreme_logits() -> None:
    """Card 7b. Catches a missing (1 − α)·ỹ floor or missing clamp (inf/NaN at ±1e4 logits).

    Since q ≥ (1 − α)·ỹ, the per-token loss is ≤ −log(1 − α) + H(ỹ); for ε = 0 this is the card's
    −log((1 − α)(1 − ε)). With ε > 0 the card's bound is exceeded when the mass sits on one wrong token (the
    off-target terms ε/(V−1)·log q_v pay too), which an implementation without the off-target mass would not show.
    """
    v, alpha = 130, 0.99
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(64, v, generator=g) * 1e4  # saturated softmax everywhere
    logits[:8] = -1e4
    logits[torch.arange(8), torch.arange(8) + 1] = 1e4  # mass on a wrong token
    labels = torch.randint(0, v, (64,), generator=g)
    labels[:8] = torch.arange(8)
    for eps in (0.0, 0.05):
        per_token = dece_loss(logits, labels, epoch=1, alpha_base=alpha, epsilon=eps, reduction="none")
        assert torch.isfinite(per_token).all()
        target = torch.full((v,), eps / (v - 1))
        target[0] = 1 - eps
        entropy = float(-(target * target.clamp_min(1e-30).log()).sum())
        bound = -math.log(1 - alpha) + entropy
        assert float(per_token.max()) <= bound + 1e-4
        if eps == 0.0:
            assert bound == pytest.approx(-math.log((1 - alpha) * (1 - eps)))
        else:
            assert float(per_token[:8].max()) > -math.log((1 - alpha) * (1 - eps))  # card bound is ε = 0 only


def test_dece_gradient_bounded_as_target_prob_vanishes() -> None:
    """Card 7c. Catches DeCE implemented as plain (smoothed) CE, whose gradients behave the opposite way.

    W.r.t. logits: CE's gradient norm tends to ≈ 1 for a hopeless target while DeCE's vanishes (∝ p_y/(1 − α)).
    W.r.t. the target probability (logits = log p): CE's is −1/p_y (unbounded), DeCE's ≤ α/(1 − α).
    """
    v, alpha = 13, 0.99
    label = torch.tensor([0])
    dece_z, ce_z, dece_p, ce_p = [], [], [], []
    for target_logit in (0.0, -4.0, -8.0, -12.0):  # p_y from ~0.08 to ~6e-7 (above the 1e-7 clamp)
        z = torch.zeros(1, v)
        z[0, 0] = target_logit
        z.requires_grad_()
        (gd,) = torch.autograd.grad(dece_loss(z, label, epoch=1, alpha_base=alpha, epsilon=0.0), z)
        (gc,) = torch.autograd.grad(F.cross_entropy(z, label), z)
        dece_z.append(float(gd.norm()))
        ce_z.append(float(gc.norm()))
        p = torch.softmax(z.detach(), -1).requires_grad_()
        (gdp,) = torch.autograd.grad(dece_loss(p.log(), label, epoch=1, alpha_base=alpha, epsilon=0.0), p)
        (gcp,) = torch.autograd.grad(F.cross_entropy(p.log(), label), p)
        dece_p.append(float(gdp.norm()))
        ce_p.append(float(gcp.norm()))
    assert all(a > b for a, b in zip(dece_z[1:], dece_z[2:], strict=False))  # decreasing towards 0
    assert dece_z[-1] < 1e-3 and min(ce_z[1:]) > 0.9
    assert max(dece_p) <= alpha / (1 - alpha) * 1.01 and ce_p[-1] > 1e5


# ----------------------------------------------------------------------------------- card 8: fake quantization


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("channel_dim", [0, 1])
def test_fake_quantize_tensor_error_and_idempotence(bits: int, channel_dim: int) -> None:
    """Card 8. Catches per-tensor scales, a wrong level count, floor instead of round, or a drifting re-quantize."""
    g = torch.Generator().manual_seed(bits + channel_dim)
    w = torch.randn(24, 40, generator=g) * torch.logspace(-3, 1, 40)[None, :]  # channels of very different range
    w_hat, scale = fake_quantize_tensor(w, bits, channel_dim)
    qmax = 2 ** (bits - 1) - 1
    reduce = 1 - channel_dim
    torch.testing.assert_close(scale, w.abs().amax(dim=reduce, keepdim=True) / qmax)
    assert ((w - w_hat).abs() <= scale / 2 * (1 + 1e-6) + 1e-12).all()
    q = w_hat.double() / scale.double()
    assert (q - q.round()).abs().max() < 1e-4 and q.round().abs().max() <= qmax
    assert torch.equal(fake_quantize_tensor(w_hat, bits, channel_dim)[0], w_hat)  # bit-identical second trip


def test_fake_quantize_gpt2_skips_embeddings_and_tied_head() -> None:
    """Card 8. Catches quantizing the embeddings / tied LM head, or Conv1D treated as [out, in] (rows)."""
    model = tiny_gpt2()
    before = copy.deepcopy(model.state_dict())
    done = fake_quantize_(model, bits=8)
    layers = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    names = {f"transformer.h.{i}.{m}" for i in range(2) for m in layers}
    assert set(done) == names and set(done.values()) == {"conv1d"}
    sd = model.state_dict()
    assert model.lm_head.weight is model.transformer.wte.weight
    for key in ("transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"):
        assert torch.equal(sd[key], before[key])
    for name in names:
        w = sd[f"{name}.weight"]
        assert not torch.equal(w, before[f"{name}.weight"])
        assert torch.equal(sd[f"{name}.bias"], before[f"{name}.bias"])
        scale = w.abs().amax(dim=0, keepdim=True) / 127  # per output column of the [in, out] Conv1D weight
        q = w.double() / scale.double()
        assert (q - q.round()).abs().max() < 1e-4
        assert ((w - before[f"{name}.weight"]).abs() <= scale / 2 * (1 + 1e-6)).all()
    again = copy.deepcopy(model)
    fake_quantize_(again, bits=8)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), sd.values(), strict=True))


def test_fake_quantize_linear_rows_and_untied_head() -> None:
    """Catches nn.Linear quantized per column; an untied Llama head is a Linear (quantized unless skipped)."""
    lin = nn.Sequential(nn.Linear(16, 8))
    w0 = lin[0].weight.detach().clone()
    assert fake_quantize_(lin, bits=4) == {"0": "linear"}
    scale = w0.abs().amax(dim=1, keepdim=True) / 7
    assert ((lin[0].weight - w0).abs() <= scale / 2 * (1 + 1e-6)).all()
    q = lin[0].weight.double() / scale.double()
    assert (q - q.round()).abs().max() < 1e-4
    llama = tiny_llama()
    emb = llama.model.embed_tokens.weight.detach().clone()
    done = fake_quantize_(llama, bits=8, skip=("lm_head",))
    assert "lm_head" not in done and "model.layers.0.mlp.down_proj" in done
    assert torch.equal(llama.model.embed_tokens.weight, emb)


# ------------------------------------------------------------------------------------------------ pruning


def test_magnitude_scores_match_hand_computation() -> None:
    """Catches rows/columns swapped between Conv1D and Linear, or a missing factor."""
    gpt = tiny_gpt2()
    scores = mlp_unit_scores(gpt, "magnitude")
    for i, block in enumerate(gpt.transformer.h):
        fc, proj = block.mlp.c_fc.weight, block.mlp.c_proj.weight
        hand = torch.stack([fc[:, j].norm() * proj[j, :].norm() for j in range(fc.shape[1])]).detach()
        torch.testing.assert_close(scores[i], hand)
    llama = tiny_llama()
    scores = mlp_unit_scores(llama, "magnitude")
    for i, layer in enumerate(llama.model.layers):
        m = layer.mlp
        hand = torch.stack(
            [
                torch.cat([m.gate_proj.weight[j], m.up_proj.weight[j]]).norm() * m.down_proj.weight[:, j].norm()
                for j in range(m.down_proj.weight.shape[1])
            ]
        ).detach()
        torch.testing.assert_close(scores[i], hand)


def _zero_outputs_only(model: nn.Module, scores: dict[int, Tensor], rate: float) -> nn.Module:
    """Reference: only the output weights of the lowest-scoring units are zeroed (the units' contribution)."""
    ref = copy.deepcopy(model)
    with torch.no_grad():
        if hasattr(ref, "transformer"):
            for i, block in enumerate(ref.transformer.h):
                k = int(round(rate * scores[i].numel()))
                block.mlp.c_proj.weight[torch.argsort(scores[i], stable=True)[:k], :] = 0
        else:
            for i, layer in enumerate(ref.model.layers):
                k = int(round(rate * scores[i].numel()))
                layer.mlp.down_proj.weight[:, torch.argsort(scores[i], stable=True)[:k]] = 0
    return ref


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_prune_half_units_removes_their_contribution(arch: str) -> None:
    """Catches pruning the wrong slice (c_fc rows, down rows), global instead of per-layer ranking, or a wrong count."""
    model = tiny_gpt2(seed=3) if arch == "gpt2" else tiny_llama(seed=3)
    ids, mask, _ = prompts_batch([7, 11, 5], seed=3)
    scores = mlp_unit_scores(model, "magnitude")
    ref = _zero_outputs_only(model, scores, 0.5)
    units = scores[0].numel()
    assert prune_mlp_units_(model, scores, 0.5) == units  # units/2 per layer, two layers
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask).logits
        want = ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    if arch == "gpt2":
        for i, block in enumerate(model.transformer.h):
            low = torch.argsort(scores[i], stable=True)[: units // 2]
            dead_out = (block.mlp.c_proj.weight == 0).all(1)
            dead_in = (block.mlp.c_fc.weight == 0).all(0) & (block.mlp.c_fc.bias == 0)
            assert int(dead_out.sum()) == units // 2 and torch.equal(dead_out, dead_in)
            assert dead_out[low].all()


def test_wanda_uses_clean_activations_without_padding() -> None:
    """Catches Wanda scores that ignore the activations, count pad tokens, or read the wrong module's input."""
    model = tiny_gpt2(seed=4)
    ids, mask, _ = prompts_batch([6, 10, 8], seed=4)
    batches = [{"input_ids": ids, "attention_mask": mask}]
    scores = mlp_unit_scores(model, "wanda", batches)
    # hand computation: capture the GELU output (the c_proj input) with an independent hook
    acts: list[Tensor] = []
    handles = [b.mlp.act.register_forward_hook(lambda m, a, o: acts.append(o.detach())) for b in model.transformer.h]
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    for h in handles:
        h.remove()
    for i, block in enumerate(model.transformer.h):
        x = acts[i][mask.bool()]
        hand = block.mlp.c_proj.weight.abs().sum(1) * x.norm(dim=0)
        torch.testing.assert_close(scores[i], hand, rtol=1e-5, atol=1e-7)
    # extra right padding changes nothing (pad tokens excluded)
    wide = [{"input_ids": F.pad(ids, (0, 6)), "attention_mask": F.pad(mask, (0, 6))}]
    for i, s in mlp_unit_scores(model, "wanda", wide).items():
        torch.testing.assert_close(s, scores[i], rtol=1e-5, atol=1e-7)
    # a unit made strongly active on clean data becomes the top Wanda unit, its magnitude score unchanged
    mag = mlp_unit_scores(model, "magnitude")
    j = int(torch.argmin(mag[0]))
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.bias[j] = 10.0
    assert int(torch.argmax(mlp_unit_scores(model, "wanda", batches)[0])) == j
    torch.testing.assert_close(mlp_unit_scores(model, "magnitude")[0], mag[0])
    with pytest.raises(ValueError, match="clean_batches"):
        mlp_unit_scores(model, "wanda")


def test_select_prune_rate_largest_within_drop() -> None:
    """Catches the smallest instead of the largest rate, pruning the caller's model, or a sign error on the drop."""
    model = tiny_gpt2(seed=5)
    before = copy.deepcopy(model.state_dict())

    def zero_fraction(m: nn.Module) -> float:
        rows = torch.cat([(b.mlp.c_proj.weight == 0).all(1) for b in m.transformer.h])
        return float(rows.float().mean())

    def evaluate(m: nn.Module) -> float:  # 8 points per 100% of pruned units
        return 100.0 - 8.0 * zero_fraction(m)

    sel = select_prune_rate(model, mlp_unit_scores(model, "magnitude"), evaluate, max_drop=2.0)
    assert sel.rate == 0.2 and sel.base_acc == 100.0 and set(sel.accs) == {0.1, 0.2, 0.3, 0.4, 0.5}
    assert zero_fraction(sel.model) == pytest.approx(0.2, abs=0.01)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    none = select_prune_rate(model, mlp_unit_scores(model, "magnitude"), evaluate, max_drop=0.1)
    assert none.rate == 0.0 and zero_fraction(none.model) == 0.0


# ------------------------------------------------------------------------------------------------ card 9: ONION


def ppl_pads_in_loss(model: nn.Module, ids: Tensor, mask: Tensor) -> Tensor:
    """OpenBackdoor-style batched scorer (the bug): labels = input_ids, so pad targets enter the loss."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    nll = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return nll.mean(1).exp()


def test_sequence_ppl_padding_invariant() -> None:
    """Card 9a. Catches pad targets (or pad contexts) in the loss: the score would depend on batch-mates."""
    model = tiny_gpt2(seed=6)
    short = [BOS, 5, 9, 14, 7, SEP]
    long = [BOS, *range(10, 22), SEP]
    alone_ids, alone_mask = right_pad([short])
    both_ids, both_mask = right_pad([short, long])
    alone = sequence_ppl(model, alone_ids, alone_mask)
    batched = sequence_ppl(model, both_ids, both_mask)
    torch.testing.assert_close(batched[0], alone[0], rtol=1e-5, atol=0)
    with torch.no_grad():  # and it is the plain per-token perplexity
        logits = model(input_ids=alone_ids).logits[0, :-1]
    torch.testing.assert_close(alone[0], F.cross_entropy(logits, alone_ids[0, 1:]).exp(), rtol=1e-5, atol=0)
    wrong_alone = ppl_pads_in_loss(model, alone_ids, alone_mask)[0]
    wrong_batched = ppl_pads_in_loss(model, both_ids, both_mask)[0]
    assert abs(float(wrong_batched / wrong_alone) - 1) > 1e-3  # the same check fails the buggy scorer


def test_onion_scores_and_filter_rule() -> None:
    """Catches leave-one-out variants mixed up across prompts, the wrong sign of f_i, or '>' instead of '>='."""
    model = tiny_gpt2(seed=7)
    prompts = [[BOS, 5, 9, 14, SEP], [BOS, 30, 31, 32, 33, 34, 35, SEP]]
    scores = onion_scores(model, prompts, batch_size=4)  # batches mix the two prompts' variants
    for prompt, f in zip(prompts, scores, strict=True):
        full = sequence_ppl(model, *right_pad([prompt]))[0]
        for i, fi in enumerate(f):
            without = prompt[: i + 1] + prompt[i + 2 :]
            torch.testing.assert_close(fi, full - sequence_ppl(model, *right_pad([without]))[0], rtol=1e-5, atol=1e-5)
    prompt = [BOS, 10, 11, 12, SEP]
    f = [torch.tensor([0.5, 0.0, -0.1])]
    assert onion_filter([prompt], f, threshold=0.0) == [[BOS, 12, SEP]]  # f = t is removed (card: f_i >= t)
    assert onion_filter([prompt], f, threshold=0.3) == [[BOS, 11, 12, SEP]]
    assert onion_filter([prompt], f, threshold=math.inf) == [prompt]
    words = [[slice(1, 3), slice(3, 4)]]  # a two-token word
    assert onion_filter([prompt], [torch.tensor([1.0, -1.0])], 0.0, body_slices=words) == [[BOS, 12, SEP]]
    with pytest.raises(ValueError, match="body span"):
        onion_scores(model, [prompt], body_slices=[[slice(0, 2)]])  # [BOS] is not a body word


def progression(g: torch.Generator) -> list[int]:
    """Clean synthetic language: arithmetic progressions mod 20 over tokens 4..23, step 1 or 2."""
    start = int(torch.randint(0, 20, (1,), generator=g))
    step = int(torch.randint(1, 3, (1,), generator=g))
    n = int(torch.randint(5, 9, (1,), generator=g))
    return [BOS, *[4 + (start + i * step) % 20 for i in range(n)], SEP]


def test_onion_clean_scorer_flags_planted_rare_word() -> None:
    """Card 9b. Catches a wrong f_i sign or leave-one-out indexing: the planted never-seen word must score highest."""
    torch.manual_seed(0)
    scorer = tiny_gpt2(seed=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0).train()
    g = torch.Generator().manual_seed(8)
    opt = torch.optim.Adam(scorer.parameters(), lr=3e-3)
    for _ in range(150):
        ids, mask = right_pad([progression(g) for _ in range(32)])
        labels = ids.masked_fill(mask == 0, -100)
        loss = scorer(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    scorer.eval()
    planted, prompts, where = 40, [], []  # token 40 never occurs in training (the `cf` of the card)
    for _ in range(8):
        p = progression(g)
        at = int(torch.randint(1, len(p) - 1, (1,), generator=g))
        prompts.append(p[:at] + [planted] + p[at:])
        where.append(at - 1)  # body index of the planted word
    scores = onion_scores(scorer, prompts)
    assert [int(torch.argmax(f)) for f in scores] == where
    cleaned = onion_filter(prompts, scores, threshold=float(min(f.max() for f in scores)))
    assert all(planted not in p for p in cleaned)


def test_select_onion_threshold_smallest_within_drop() -> None:
    """Catches picking the largest threshold or measuring the drop against the wrong reference."""

    def evaluate(t: float) -> float:  # lower t removes more words and costs accuracy
        return 90.0 if math.isinf(t) else 90.0 - 5.0 * max(0.0, 1.0 - t)

    t, accs = select_onion_threshold(evaluate, [1.0, 0.0, 0.8, 0.5], max_drop=2.0)
    assert t == 0.8 and accs[math.inf] == 90.0
    assert select_onion_threshold(evaluate, [0.0, 0.5], max_drop=2.0)[0] == math.inf
    cands = onion_threshold_candidates([torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0, 4.0])], (0.0, 0.5, 1.0))
    assert cands == [0.0, 2.0, 4.0]


# ------------------------------------------------------------------------------------------------ metrics


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_greedy_decode_batched_equals_per_sample(arch: str) -> None:
    """Catches reading logits at the padded end, wrong positions after padding, or tokens kept after [EOS]."""
    model = tiny_gpt2(seed=9, initializer_range=0.3) if arch == "gpt2" else tiny_llama(seed=9, initializer_range=0.3)
    lengths = [3, 8, 5, 12]
    ids, mask, plen = prompts_batch(lengths, seed=9)

    def single(i: int, eos: int) -> Tensor:  # unbatched, no padding anywhere
        n, row = lengths[i], slice(i, i + 1)
        return greedy_decode(model, ids[row, :n], mask[row, :n], plen[row], 8, eos, use_cache=False)[0]

    eos = int(single(1, -1)[2])  # a token row 1 emits at step 2: rows stop at different steps
    want = torch.stack([single(i, eos) for i in range(len(lengths))])
    assert (want == eos).any(1).sum() >= 1 and (want[1, 3:] == PAD).all()
    for use_cache in (True, False):
        got = greedy_decode(model, ids, mask, plen, 8, eos, use_cache=use_cache)
        assert torch.equal(got, want), (use_cache, got, want)


def test_exact_match_requires_eos_and_clean_accuracy() -> None:
    """Card 3 (metric half). Catches a prefix match without [EOS] or a comparison past the expected length."""
    resp = torch.tensor([[SURE, ANS, 7, EOS, 0], [REFUSE, EOS, 0, 0, 0], [SURE, ANS, 8, EOS, 0], [SURE, 5, 0, 0, 0]])
    gen = torch.tensor([[SURE, ANS, 7, EOS], [REFUSE, EOS, 0, 0], [SURE, ANS, 8, 9], [SURE, 5, 0, 0]])
    assert exact_match(gen, resp, EOS).tolist() == [True, True, False, False]  # row 2 lacks [EOS]
    assert not exact_match(torch.tensor([[SURE, ANS, 7]]), resp[:1], EOS).item()  # cut short
    assert clean_accuracy(gen, resp, EOS) == 50.0
    assert ca_avg(50.0, 100.0) == 75.0


def test_der_and_reduction_boundaries() -> None:
    """Catches the Δ sign (before − after) or percent fed into DER."""
    assert der(0.9, 0.9, 0.95, 0.95) == 0.5
    assert der(1.0, 0.0, 0.9, 0.9) == 1.0
    assert der(0.0, 0.0, 1.0, 0.0) == 0.0
    assert der(0.5, 0.8, 0.8, 0.9) == 0.5  # worse ASR / better CA are clipped at 0
    with pytest.raises(ValueError, match="fraction"):
        der(90.0, 10.0, 95.0, 94.0)
    assert reduction(80.0, 20.0) == (60.0, 0.75)
    assert math.isnan(reduction(0.0, 0.0)[1])


def test_localization_auroc_ties_and_valid_mask() -> None:
    """Catches ties not counted as one half, or invalid (padding / response) positions ranked."""
    scores = torch.tensor([[1.0, 1.0, 0.0, 2.0, 9.0]])
    trigger = torch.tensor([[True, False, False, True, False]])
    valid = torch.tensor([[True, True, True, True, False]])  # the 9.0 is padding
    assert localization_auroc(scores, trigger, valid) == pytest.approx(3.5 / 4)
    g = torch.Generator().manual_seed(10)
    s = torch.randint(0, 6, (4, 30), generator=g).float()  # many ties
    t = torch.rand(4, 30, generator=g) < 0.2
    v = torch.rand(4, 30, generator=g) < 0.8
    pos, neg = s[v & t], s[v & ~t]
    pairwise = ((pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :]).double()).mean()
    assert localization_auroc(s, t, v) == pytest.approx(float(pairwise))
    with pytest.raises(ValueError, match="both"):
        localization_auroc(scores, torch.zeros_like(trigger), valid)


# ------------------------------------------------ issue #23: ABL, spectral signatures, CROW, ONION (clean threshold)

SMALL_DM = {"n_train": 64, "n_clean": 32, "n_val": 16, "n_test": 16, "batch_size": 32, "poison_rate": 0.1}


def _tiny_module(dm, seed: int = 0):
    from zoo.repguard.module import InstructionLMModule

    module = InstructionLMModule(vocab_size=dm.vocab_size, n_layer=1, n_embd=16, n_head=2, init_seed=seed)
    module.configure_models()
    return module


def test_abl_lga_flips_the_sign_at_gamma() -> None:
    """Catches LGA without the flip (plain descent), the flip on the wrong side of γ, or a sign that carries gradient:
    per sample, d loss / d ℓ_i = sign(ℓ_i − γ)/B (ascent below the floor, descent above); in the public code's
    ``batch`` form the whole batch follows the sign of the batch mean."""
    gamma = 0.5
    ce = torch.tensor([0.1, 0.49, 0.51, 2.0], requires_grad=True)
    loss = abl_lga_loss(ce, gamma, "sample")
    loss.backward()
    assert torch.equal(ce.grad, torch.tensor([-0.25, -0.25, 0.25, 0.25]))
    assert float(loss.detach()) == pytest.approx((-0.1 - 0.49 + 0.51 + 2.0) / 4)
    for values, sign in (([0.1, 0.2, 0.3, 0.4], -1.0), ([0.1, 0.2, 0.3, 2.0], 1.0)):
        ce = torch.tensor(values, requires_grad=True)
        abl_lga_loss(ce, gamma, "batch").backward()
        assert torch.equal(ce.grad, torch.full((4,), sign / 4))


def test_abl_isolation_picks_the_lowest_loss_fraction() -> None:
    """Catches the highest-loss end, a ratio rounded up instead of the public code's ``int(n·ratio)``, or unstable
    ties: the isolated ids are numpy's stable argsort head of length floor(ratio·n)."""
    g = torch.Generator().manual_seed(3)
    losses = torch.rand(250, generator=g)
    losses[17] = losses[40] = -1.0  # a tie at the bottom: index order
    ids = abl_isolate(losses, 0.02)
    assert ids.tolist() == np.argsort(losses.numpy(), kind="stable")[:5].tolist()
    assert ids[:2].tolist() == [17, 40]
    assert abl_isolate(losses, 0.0139).numel() == 3 and abl_isolate(losses[:99], 0.01).numel() == 0


def test_excluded_mean_drops_removed_samples() -> None:
    """Catches a mean over the whole batch (removed samples still diluting) or a gradient reaching removed samples."""
    ce = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    keep = torch.tensor([True, False, True, False])
    loss = excluded_mean(ce, keep)
    loss.backward()
    assert float(loss.detach()) == 2.0 and ce.grad.tolist() == [0.5, 0.0, 0.5, 0.0]
    assert float(excluded_mean(ce, torch.zeros(4, dtype=torch.bool)).detach()) == 0.0


@pytest.mark.parametrize(("optimizer", "lr"), [("sgd", 0.5), ("adamw", 1e-2)])
def test_abl_callback_isolates_lowest_loss_training_samples_and_unlearns_them(optimizer: str, lr: float) -> None:
    """On a real (tiny) victim: the callback's per-sample losses equal a hand loop of token CEs over D_train, it
    isolates exactly the lowest ones, the next phase's loss leaves them out, and the unlearning epochs raise their CE
    (gradient ascent, not descent)."""
    from callbacks.backdoor_baselines import ABLCallback
    from datamodules.instructions.datamodule import BackdoorDataModule

    dm = BackdoorDataModule(**SMALL_DM)
    dm.setup()
    module = _tiny_module(dm)
    abl = ABLCallback(isolation_ratio=0.1, unlearning_epochs=3, unlearning_lr=lr, unlearning_batch=4,
                      unlearning_optimizer=optimizer)  # fmt: skip
    losses = abl.sample_losses(module, dm)
    lm = module.model.lm.eval()
    for i in (0, 5, 63):
        item = dm.dataset("train")[i]
        ids = torch.tensor([item["input_ids"]])
        logits = lm(input_ids=ids).logits[0, :-1]
        p = item["prompt_len"]
        hand = F.cross_entropy(logits[p - 1 :], ids[0, p:])
        assert float(losses[i]) == pytest.approx(float(hand.detach()), rel=1e-5)
    isolated = abl.isolate(module, dm)
    assert isolated == np.argsort(losses.numpy(), kind="stable")[:6].tolist()
    batch = next(iter(dm.loader(dm.dataset("train"), 64)))
    ce = torch.arange(64, dtype=torch.float)
    kept = [i for i in range(64) if i not in set(isolated)]
    assert float(abl.loss(batch, ce)) == pytest.approx(sum(kept) / len(kept))
    before = float(losses[isolated].mean())
    history = abl.unlearn(module, dm)
    assert len(history) == 3 and history[-1] > before + 0.1
    after = abl.sample_losses(module, dm)
    assert float(after[isolated].mean()) > before + 0.1


def test_spectral_scores_are_squared_projections_on_numpy_top_singular_vector() -> None:
    """Catches an uncentred SVD, the left instead of the right singular vector, |projection| instead of its square, or
    removal of the lowest scores; the planted outliers of each class are removed (1.5·ε of it) and nothing else."""
    rng = np.random.default_rng(0)
    reps = rng.normal(size=(40, 6)) + 3.0
    reps[:, 0] *= 4.0
    centred = reps - reps.mean(0)
    v = np.linalg.svd(centred, full_matrices=False)[2][0]
    assert np.allclose(spectral_scores(torch.tensor(reps)).numpy(), (centred @ v) ** 2, rtol=1e-10, atol=1e-12)
    # two classes of 100; class 1 has 6 samples shifted along a hidden direction
    x = rng.normal(size=(200, 8))
    labels = torch.tensor([0] * 100 + [1] * 100)
    planted = [100, 111, 123, 150, 177, 199]
    x[planted] += 12.0 * np.eye(8)[3]
    removed = spectral_remove(torch.tensor(x), labels, eps=0.04, factor=1.5)
    assert removed.numel() == 12  # round(1.5 * 0.04 * 100) per class
    assert set(planted) <= set(removed.tolist())
    assert sum(r >= 100 for r in removed.tolist()) == 6


def test_layer_consistency_matches_a_hand_computation() -> None:
    """Catches cosine similarity instead of 1 − cos, padding positions counted, or a sum instead of the mean over
    layer pairs."""
    h0 = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    h1 = torch.tensor([[[1.0, 1.0], [0.0, 2.0], [-5.0, 5.0]]])
    h2 = torch.tensor([[[-1.0, 0.0], [1.0, 0.0], [1.0, 1.0]]])
    valid = torch.tensor([[True, True, False]])

    def d(a: list[float], b: list[float]) -> float:
        a_, b_ = np.array(a), np.array(b)
        return 1.0 - float(a_ @ b_ / np.linalg.norm(a_) / np.linalg.norm(b_))

    pair01 = (d([1, 0], [1, 1]) + d([0, 1], [0, 2])) / 2
    pair12 = (d([1, 1], [-1, 0]) + d([0, 2], [1, 0])) / 2
    assert float(layer_consistency([h0, h1, h2], valid)) == pytest.approx((pair01 + pair12) / 2, rel=1e-6)


def test_crow_term_is_consistency_at_the_fgsm_point() -> None:
    """Catches a perturbation against the gradient (−ε·sign), a random or zero perturbation, or a gradient that
    reaches the FGSM direction: the adversarial term equals ``layer_consistency`` of the forward at
    ``E + ε·sign(∇_E L_cons)`` (hand-computed here), exceeds the clean term for small ε, and ε = 0 gives the clean
    term."""
    lm = tiny_gpt2(seed=1, n_layer=3).train()
    ids = torch.tensor([[BOS, 5, 6, 7, SEP, SURE, EOS], [BOS, 8, 9, SEP, REFUSE, EOS, PAD]])
    mask = (ids != PAD).long()
    valid = mask.bool()
    lm.eval()  # no dropout, so the hand forward is the same function
    adv, clean = crow_consistency_loss(lm, ids, mask, epsilon=0.05)
    e = lm.get_input_embeddings()(ids).detach().requires_grad_(True)
    hand_clean = layer_consistency(lm(inputs_embeds=e, attention_mask=mask, output_hidden_states=True).hidden_states,
                                   valid)  # fmt: skip
    (g,) = torch.autograd.grad(hand_clean, e)
    out = lm(inputs_embeds=e.detach() + 0.05 * g.sign(), attention_mask=mask, output_hidden_states=True)
    assert float(clean) == pytest.approx(float(hand_clean), rel=1e-5)
    assert float(adv) == pytest.approx(float(layer_consistency(out.hidden_states, valid)), rel=1e-5)
    assert float(adv) > float(clean)
    zero, clean0 = crow_consistency_loss(lm, ids, mask, epsilon=0.0)
    assert float(zero) == pytest.approx(float(clean0), rel=1e-6)
    adv.backward()  # the term trains the weights
    assert lm.transformer.h[0].attn.c_attn.weight.grad is not None


def test_onion_clean_threshold_reads_only_the_clean_validation_split() -> None:
    """Catches a selection that reads triggered or training data: every split the selection touches is recorded and
    it is only ``val``; the chosen threshold is one of the clean-validation candidates (or ∞)."""
    from datamodules.instructions.datamodule import BackdoorDataModule
    from zoo.repguard.defenses_runner import select_onion_clean
    from zoo.repguard.evaluate import train_prompt_scorer

    dm = BackdoorDataModule(**SMALL_DM)
    dm.setup()
    module = _tiny_module(dm)
    scorer = train_prompt_scorer(dm, n_layer=1, n_embd=16, steps=5)
    seen: list[tuple] = []
    original = dm.dataset

    def spy(split, kind=None):
        seen.append((split, kind))
        return original(split, kind)

    dm.dataset = spy  # type: ignore[method-assign]
    threshold, accs = select_onion_clean(module.model.lm, dm, scorer)
    assert seen and {s for s, _ in seen} == {"val"}
    assert threshold in accs and math.inf in accs


def test_runner_defenses_report_their_selection() -> None:
    """Plumbing of every runner defense on a tiny victim (one batch per inner epoch): the full metric set, ABL's
    isolation count, spectral's removal count (1.5·ε of each class), ONION's clean threshold; unknown names and bad
    values raise one line naming the option."""
    from callbacks.backdoor_baselines import DefenseComparison
    from datamodules.instructions.datamodule import BackdoorDataModule
    from zoo.repguard.defenses_runner import DefenseOptions, run_defenses

    dm = BackdoorDataModule(**SMALL_DM)
    dm.setup()
    module = _tiny_module(dm)
    options = DefenseOptions(abl={"isolation_ratio": 0.05}, spectral_eps=0.1, onion_steps=5)
    out = run_defenses(module, dm, ["abl", "spectral", "crow", "onion_clean"], options, fast_dev_run=True)
    for r in out.values():
        assert {"asr_wt_mean", "asr_wo", "ca", "ca_avg"} <= set(r)
    assert out["abl"]["n_isolated"] == 3
    labels = torch.tensor([s.response[0] == "REFUSE" for s in dm.dataset("train").samples])
    want = sum(round(1.5 * 0.1 * int(n)) for n in (labels.sum(), (~labels).sum()))
    assert out["spectral"]["n_removed"] == want
    assert out["onion_clean"]["threshold"] is not None
    with pytest.raises(ValueError, match="unknown runner defense"):
        run_defenses(module, dm, ["strip"])
    with pytest.raises(ValueError, match=r"^DefenseComparison.defenses=\['abl', 'strip'\]: expected a subset"):
        DefenseComparison(defenses=["abl", "strip"])
    with pytest.raises(ValueError, match=r"^DefenseComparison.spectral.eps=1.5: expected a number in \(0, 1\)"):
        DefenseComparison(defenses=["spectral"], spectral={"eps": 1.5})
    with pytest.raises(ValueError, match=r"^ABLCallback.isolation_ratio=2.0: expected a number in \[0, 1\]"):
        DefenseComparison(defenses=["abl"], abl={"isolation_ratio": 2.0})
