"""The card's pruning-score and schedule tests (1-5): per-sample Fisher, closed form, dead channel, global threshold,
schedule and EMA. The maths runs on the callback's own hooks without a Trainer."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from callbacks.prune_finetune import PruneThenFinetune
from zoo.prune_finetune.model import Forecaster, patchtst_config
from zoo.prune_finetune.spec import layer_sites


def _tiny(activation: str = "gelu", layers: int = 2) -> Forecaster:
    torch.manual_seed(0)
    cfg = patchtst_config(context_length=32, horizon=8, d_model=8, num_layers=layers, heads=2, ffn_dim=16,
                          patch_length=8, patch_stride=8, activation=activation)  # fmt: skip
    return Forecaster(cfg).eval()


def _score(cb: PruneThenFinetune, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    cb.attach(model)
    with cb.scoring():
        loss = torch.mean((model(x) - y) ** 2)
    cb.accumulate(loss, x.shape[0])
    cb.detach()
    return cb.scores()


def test_per_sample_fisher_sees_opposite_gradients() -> None:
    """Two samples with opposite gradients on one channel: batch gradient 0, score sum g_n^2/2 = 1 > 0. Catches a
    score from the batch gradient (or its square), which gives 0."""
    lin = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0)
    model = nn.Sequential(lin)
    x, t = torch.ones(2, 1), torch.tensor([[0.0], [2.0]])  # residuals +1 and -1: g_n = +-1 on the output mask
    cb = PruneThenFinetune(prune_scope="all_linear", macro_batch_size=2)
    cb.attach(model)
    with cb.scoring():
        loss = torch.mean((model(x) - t) ** 2)
    batch_grad = torch.autograd.grad(torch.mean((model(x) - t) ** 2), lin.weight)[0]
    cb.accumulate(loss, 2)
    s = cb.scores()
    assert float(batch_grad.abs().max()) == 0.0
    assert s["0:out"].item() == pytest.approx(1.0, abs=1e-12)
    assert s["0:in"].item() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("scale", ["code", "paper"])
def test_score_closed_form_on_linear_model(scale: str) -> None:
    """On a linear model with MSE (float64) the score of every mask entry equals sum_n(-g_n + g_n^2/2) with g_n the
    per-sample gradient of the mean-reduced loss (``code``), or -(1/N) sum a_n + (1/2N) sum a_n^2 with a_n that of the
    unreduced per-sample loss (``paper``), from explicit per-sample autograd. Catches a missing per-sample copy, a
    wrong sign or a wrong Fisher scale."""
    torch.manual_seed(1)
    lin = nn.Linear(5, 3).double()
    model = nn.Sequential(lin)
    x, t = torch.randn(7, 5, dtype=torch.float64), torch.randn(7, 3, dtype=torch.float64)
    n = x.shape[0]
    cb = PruneThenFinetune(prune_scope="all_linear", fisher_scale=scale, macro_batch_size=n)
    got = _score(cb, model, x, t)
    m_in = torch.ones(5, dtype=torch.float64, requires_grad=True)
    m_out = torch.ones(3, dtype=torch.float64, requires_grad=True)
    expected_in, expected_out = torch.zeros(5, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for i in range(n):
        per_sample_loss = torch.mean((lin(x[i : i + 1] * m_in) * m_out - t[i : i + 1]) ** 2)  # l_n
        a_in, a_out = torch.autograd.grad(per_sample_loss, (m_in, m_out))
        for a, exp in ((a_in, expected_in), (a_out, expected_out)):
            if scale == "code":
                g = a / n
                exp += -g + 0.5 * g * g
            else:
                exp += -a / n + a * a / (2 * n)
    torch.testing.assert_close(got["0:in"], expected_in, atol=1e-10, rtol=1e-6)
    torch.testing.assert_close(got["0:out"], expected_out, atol=1e-10, rtol=1e-6)


def test_dead_relu_channel_scores_zero_and_goes_first() -> None:
    """An FFN channel (ReLU) that never fires scores exactly 0 on both of its sides and is pruned at the first
    step, even at a tiny ratio. Catches a score that is not exactly 0 for a dead channel or a pool that keeps it."""
    model = _tiny("relu")
    ff0 = model.net.model.encoder.layers[0].ff[0]
    with torch.no_grad():
        ff0.bias[3] = -1e6  # pre-activation always negative
    cb = PruneThenFinetune(prune_ratio_per_epoch=0.001, steps_per_epoch=1)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    s = _score(cb, model, x, y)
    sites = layer_sites(model)[0].inner_pairs["ffn"]
    assert all(float(s[k][3]) == 0.0 for k in sites)
    zeros = {k: v == 0 for k, v in s.items()}
    for k, z in zeros.items():  # exact zeros only on FFN channel pairs (other ReLU channels may be dead too)
        assert not bool(z.any()) or k.endswith(("ff.0:out", "ff.3:in")), k
    cb.prune(s)
    assert all(not bool(cb.mask[k][3]) for k in sites)
    assert all(not bool(cb.mask[k][z].any()) for k, z in zeros.items())  # every dead entry went at step 1
    total = sum(v.numel() for v in s.values())
    n_zero = sum(int(z.sum()) for z in zeros.values())
    assert sum(int((~m).sum()) for m in cb.mask.values()) == n_zero + math.ceil(0.001 * total)


def _ffn_sites(model: nn.Module, layer: int) -> list[str]:
    ls = layer_sites(model)[layer]
    return [*ls.inner_pairs["ffn"]]


@pytest.mark.parametrize("global_threshold", [True, False])
def test_global_threshold_prunes_the_silent_layer_first(global_threshold: bool) -> None:
    """Layer 2's FFN output scaled by 1e-4 (layer 1's by 0.1, so its FFN channels are its least important): with
    one global threshold all of layer 2's FFN channels go before any of layer 1's; the per-layer uniform ratio (the
    ablation) prunes layer 1's FFN while layer 2 still has some."""
    model = _tiny(layers=2)
    with torch.no_grad():
        for index, factor in ((0, 0.1), (1, 1e-4)):
            ff3 = model.net.model.encoder.layers[index].ff[3]
            ff3.weight.mul_(factor)
            ff3.bias.mul_(factor)
    cb = PruneThenFinetune(prune_ratio_per_epoch=0.7, steps_per_epoch=8, global_threshold=global_threshold)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 32, generator=gen), torch.randn(32, 8, generator=gen)
    first, second = _ffn_sites(model, 0), _ffn_sites(model, 1)
    ordered = True
    for _ in range(8):
        cb.grad, cb.pending = {}, 0
        cb.prune(_score(cb, model, x, y))
        layer1_lost = any(not bool(cb.mask[k].all()) for k in first)
        layer2_gone = all(not bool(cb.mask[k].any()) for k in second)
        if layer1_lost and not layer2_gone:
            ordered = False
    assert ordered is global_threshold


def test_schedule_ema_and_monotone() -> None:
    """With tie-free synthetic scores the live count after each step is R - ceil(r_step R); imp follows
    alpha s + (1 - alpha) imp with imp = s at step 1; a pruned entry never revives (even with a huge new score)."""
    model = _tiny()
    cb = PruneThenFinetune(prune_ratio_per_epoch=0.7, prune_ema=0.3, steps_per_epoch=5)
    cb.init_masks(model)
    gen = torch.Generator().manual_seed(3)
    remaining = sum(m.numel() for m in cb.mask.values())
    previous_imp = None
    dead: dict[str, torch.Tensor] = {}
    for step in range(5):
        scores = {k: torch.rand(m.shape, generator=gen) + 0.01 for k, m in cb.mask.items()}
        for k, d in dead.items():
            scores[k] = torch.where(d, torch.full_like(scores[k], 1e9), scores[k] * cb.mask[k])  # try to revive
        if step > 0:
            scores = {k: v * cb.mask[k] for k, v in scores.items()}
        before_imp = {k: v.clone() for k, v in cb.imp.items()}
        cb.prune(scores)
        k_step = math.ceil(0.7 / 5 * remaining)
        remaining -= k_step
        assert sum(int(m.sum()) for m in cb.mask.values()) == remaining
        for k in cb.imp:
            expected = scores[k] if previous_imp is None else 0.3 * scores[k] + 0.7 * before_imp[k]
            live = cb.mask[k]
            torch.testing.assert_close(cb.imp[k][live], expected[live])
            assert bool((cb.imp[k][~live] == 0).all())
        for k, d in dead.items():
            assert not bool(cb.mask[k][d].any())
        dead = {k: ~m for k, m in cb.mask.items()}
        previous_imp = cb.imp
    assert cb.history[-1][1] == remaining
    assert 0.45 <= remaining / sum(m.numel() for m in cb.mask.values()) <= 0.50  # ~ (1 - 0.7/5)^5 = 0.47
