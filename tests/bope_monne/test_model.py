"""The MoNNE maths (card tests 1-5): monotonicity, expressivity, the hinge loss, ensemble EUBO, BoTorch shapes."""

from __future__ import annotations

import pytest
import torch

from zoo.bope_monne.model import (
    MonotoneEnsemble,
    ensemble_eubo,
    fit_ensemble,
    hinge_loss,
    kendall_tau,
    pairwise_accuracy,
)

torch.set_num_threads(1)
F64 = torch.float64


def _pwl2(y: torch.Tensor) -> torch.Tensor:
    """The card's symmetric concave target: PWL with β1 = 1, β2 = 0.1, t = 0.5 in both dimensions."""
    return torch.where(y < 0.5, y + (0.1 - 1.0) * 0.5, 0.1 * y).sum(-1)


def _comparisons(y: torch.Tensor, g: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    pairs = torch.stack([torch.randperm(len(y), generator=gen)[:2] for _ in range(n)])
    better = g[pairs[:, 0]] >= g[pairs[:, 1]]
    return torch.where(better.unsqueeze(-1), pairs, pairs.flip(-1))


@pytest.mark.parametrize("positivity", ["exp", "softplus", "square"])
def test_every_member_is_non_decreasing_in_every_outcome(positivity: str) -> None:
    """Card test 1: ∂g_m/∂y_k ≥ 0 and g_m(y + εe_k) ≥ g_m(y) on 1000 random y; fails if any layer has raw weights."""
    ens = MonotoneEnsemble(3, members=8, positivity=positivity, seed=1)
    with torch.no_grad():  # move the weights away from the initialisation, both signs of the raw parameters
        for w in ens.weights:
            w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(2), dtype=F64))
    y = torch.rand(1000, 3, dtype=F64, generator=torch.Generator().manual_seed(3)).requires_grad_()
    g = ens(y)  # (M, n)
    grads = torch.stack([torch.autograd.grad(g[m].sum(), y, retain_graph=True)[0] for m in range(8)])
    assert grads.min() >= 0
    with torch.no_grad():
        for k in range(3):
            step = torch.zeros(3, dtype=F64)
            step[k] = 1e-3
            assert (ens(y + step) - ens(y)).min() >= 0


def test_the_monotonicity_check_catches_raw_weights() -> None:
    """The non-monotone ablation (raw weights) has negative partial derivatives: test 1 can fail."""
    ens = MonotoneEnsemble(3, members=8, monotone=False, seed=1)
    y = torch.rand(1000, 3, dtype=F64, generator=torch.Generator().manual_seed(3)).requires_grad_()
    grad = torch.autograd.grad(ens(y).sum(), y)[0]
    assert grad.min() < 0


def test_vectorised_ensemble_equals_a_loop_over_members() -> None:
    """The batched ``[M, out, in]`` forward equals each member run alone (no mixed-up member axis)."""
    ens = MonotoneEnsemble(4, members=5, hidden=(7, 3), lo=torch.full((4,), -1.0), hi=torch.full((4,), 2.0), seed=4)
    y = torch.randn(2, 6, 4, dtype=F64)
    loop = torch.stack([ens.member(m, y) for m in range(5)], dim=-2)
    assert ens(y).shape == (2, 5, 6)
    torch.testing.assert_close(ens(y), loop)


def test_initialisation_follows_the_card() -> None:
    """First-layer units cross zero inside the box (``b₁ = −W₁c``, c ∈ [0,1]^k); log-weights centred on −log fan_in."""
    ens = MonotoneEnsemble(3, members=200, hidden=(32, 32), seed=5)
    w1, b1 = torch.exp(ens.weights[0]), ens.biases[0]
    assert (b1 <= 0).all() and (b1 >= -w1.sum(-1)).all()  # zero crossing between ŷ = 0 and ŷ = 1
    for w in ens.weights:
        log_w = w.detach()
        assert abs(float(log_w.mean()) + torch.log(torch.tensor(w.shape[-1], dtype=F64))) < 0.02
        assert abs(float(log_w.std()) - 0.5) < 0.02
    assert all(float(b.detach().min()) >= -1 and float(b.detach().max()) <= 1 for b in list(ens.biases)[1:])


def _triples(n: int = 100, seed: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    b = 0.5 + 0.05 * (2 * torch.rand(n, 2, dtype=F64, generator=gen) - 1)
    s = 0.2 + 0.2 * torch.rand(n, 1, dtype=F64, generator=gen)
    direction = torch.tensor([1.0, -1.0], dtype=F64)
    return b, b + s * direction, b - s * direction


def _triple_accuracy(ens: MonotoneEnsemble) -> float:
    b, e_plus, e_minus = _triples()
    truth = _pwl2(torch.cat([torch.stack([b, e_plus], 1), torch.stack([b, e_minus], 1)]))
    assert (truth[:, 0] > truth[:, 1]).all()  # g* prefers the centre to both ends
    with torch.no_grad():
        pairs = torch.cat([torch.stack([b, e_plus], 1), torch.stack([b, e_minus], 1)])
        return pairwise_accuracy(ens.mean(pairs), truth)


def _fit_on_pwl2(activation: str) -> MonotoneEnsemble:
    y = torch.rand(200, 2, dtype=F64, generator=torch.Generator().manual_seed(7))
    comps = _comparisons(y, _pwl2(y), 300, seed=8)
    ens = MonotoneEnsemble(2, members=8, activation=activation)  # type: ignore[arg-type]
    fit_ensemble(ens, y, comps, seed=9)
    return ens


def test_tanh_monne_represents_a_concave_utility_a_relu_net_cannot() -> None:
    """Card test 2 (Jensen): tanh-MoNNE ≥ 0.9 on the centre-vs-ends pairs; a positive-weight ReLU net ≤ 0.55.

    A positive-weight ReLU network is convex, so ``g(b) ≤ max(g(e+), g(e−))`` for the midpoint b and at least one pair
    of each triple is wrong (a tie counts as wrong).
    """
    assert _triple_accuracy(_fit_on_pwl2("tanh")) >= 0.9
    assert _triple_accuracy(_fit_on_pwl2("relu")) <= 0.55


def test_hinge_loss_is_zero_when_every_pair_is_separated_by_the_margin() -> None:
    """Card test 3: no loss when ``g(y_w) − g(y_l) ≥ margin`` for every pair; the mean of the hinge otherwise."""
    g = torch.tensor([[3.0, 1.0, 0.0], [2.0, 1.5, 0.0]], dtype=F64)
    comps = torch.tensor([[0, 1], [1, 2]])
    losses = hinge_loss(g, comps, margin=1.0)
    torch.testing.assert_close(losses, torch.tensor([0.0, (0.5 + 0.0) / 2], dtype=F64))
    torch.testing.assert_close(hinge_loss(g, comps, margin=0.5), torch.zeros(2, dtype=F64))
    weights = torch.tensor([[1.0, 1.0], [3.0, 1.0]], dtype=F64)
    torch.testing.assert_close(hinge_loss(g, comps, 1.0, weights)[1], torch.tensor(1.5 / 4, dtype=F64))


def test_one_step_widens_a_violated_gap_and_moves_each_side_as_its_gradients_say() -> None:
    """Card test 3: one Adam step on a violated pair raises ``g(y_w) − g(y_l)`` in every member.

    The card also says ``g(y_w)`` rises and ``g(y_l)`` falls. Members share their weights between the two outcomes,
    so that holds exactly when the parameter gradients a = ∇g(y_w), b = ∇g(y_l) satisfy a·b < |a|² and a·b < |b|²
    (one small gradient step changes g(y_w) by lr(|a|² − a·b) and g(y_l) by lr(a·b − |b|²)); checked for plain
    gradient descent against that first-order prediction, which must hold for some members in the sign the card says.
    """
    ens = MonotoneEnsemble(2, members=8, seed=10)
    y = torch.tensor([[0.2, 0.9], [0.8, 0.1]], dtype=F64)  # neither dominates the other
    before = ens(y).detach()
    comps = torch.tensor([[0, 1]])
    assert (before[:, 0] - before[:, 1] < 1.0).all()  # violated (inside the margin) in every member
    fit_ensemble(ens, y, comps, steps=1, lr=1e-2, warm_start=True)
    after = ens(y).detach()
    assert ((after[:, 0] - after[:, 1]) > (before[:, 0] - before[:, 1])).all()

    ens = MonotoneEnsemble(2, members=8, seed=10)
    params = list(ens.parameters())
    g = ens(y)
    a = torch.autograd.grad(g[:, 0].sum(), params, retain_graph=True)
    b = torch.autograd.grad(g[:, 1].sum(), params)
    dot = sum((ai * bi).flatten(1).sum(1) for ai, bi in zip(a, b, strict=True))  # per member
    aa = sum((ai * ai).flatten(1).sum(1) for ai in a)
    bb = sum((bi * bi).flatten(1).sum(1) for bi in b)
    lr = 1e-6
    with torch.no_grad():
        for p, ai, bi in zip(params, a, b, strict=True):
            p.add_(lr * (ai - bi))  # one gradient-descent step on the hinge loss of the violated pair
    delta = ens(y).detach() - g.detach()
    assert torch.equal(torch.sign(delta[:, 0]), torch.sign(aa - dot))
    assert torch.equal(torch.sign(delta[:, 1]), torch.sign(dot - bb))
    assert ((delta[:, 0] > 0) & (delta[:, 1] < 0)).any()


def test_fit_from_scratch_is_reproducible_and_warm_start_is_not_a_reset() -> None:
    """``fit_ensemble`` re-initialises from the seed (same seed, same fit); ``warm_start`` continues instead."""
    y = torch.rand(30, 2, dtype=F64, generator=torch.Generator().manual_seed(11))
    comps = _comparisons(y, _pwl2(y), 40, seed=12)
    a, b = MonotoneEnsemble(2, members=3), MonotoneEnsemble(2, members=3, seed=99)
    fit_ensemble(a, y, comps, steps=20, seed=13)
    fit_ensemble(b, y, comps, steps=20, seed=13)
    torch.testing.assert_close(a(y), b(y))
    fit_ensemble(b, y, comps, steps=20, seed=13, warm_start=True)
    assert not torch.allclose(a(y), b(y))


def test_pairwise_accuracy_and_kendall_tau_count_ties_as_wrong() -> None:
    """Diagnostics: a tied prediction is wrong for the accuracy and neither concordant nor discordant for τ."""
    truth = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]], dtype=F64)
    scores = torch.tensor([[5.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]], dtype=F64)
    assert pairwise_accuracy(scores, truth) == 0.5
    assert kendall_tau(scores, truth) == (2 - 1) / 4


def test_ensemble_eubo_is_the_mean_over_members_of_the_max() -> None:
    """Card test 4: identical members give ``max(g(y₁), g(y₂))``; otherwise the mean of the members' maxima."""
    ens = MonotoneEnsemble(3, members=4, seed=14)
    y1, y2 = torch.rand(5, 3, dtype=F64), torch.rand(5, 3, dtype=F64)
    g1, g2 = ens(y1.unsqueeze(-2)).squeeze(-1), ens(y2.unsqueeze(-2)).squeeze(-1)  # (5, M)
    torch.testing.assert_close(ensemble_eubo(ens, y1, y2), torch.maximum(g1, g2).mean(-1))
    assert (ensemble_eubo(ens, y1, y2) > torch.maximum(g1.mean(-1), g2.mean(-1)) - 1e-12).all()
    with torch.no_grad():
        for p in list(ens.weights) + list(ens.biases):
            p.copy_(p[:1].expand_as(p))
    g1, g2 = ens(y1.unsqueeze(-2))[..., 0, 0], ens(y2.unsqueeze(-2))[..., 0, 0]
    torch.testing.assert_close(ensemble_eubo(ens, y1, y2), torch.maximum(g1, g2))


def test_ensemble_eubo_equals_botorch_qeubo_with_fixed_member_indices() -> None:
    """Card test 4: the exact ensemble EUBO equals BoTorch's qEUBO with ``IndexSampler`` base samples 0..M−1."""
    pytest.importorskip("botorch")
    from botorch.acquisition.preference import qExpectedUtilityOfBestOption
    from botorch.sampling.index_sampler import IndexSampler

    from zoo.bope_monne.acquisition import MoNNEModel

    m, b = 6, 7
    ens = MonotoneEnsemble(3, members=m, seed=15)
    pairs = torch.rand(b, 2, 3, dtype=F64, generator=torch.Generator().manual_seed(16))
    sampler = IndexSampler(sample_shape=torch.Size([m]))
    sampler.register_buffer("base_samples", torch.arange(m).view(m, 1).expand(m, b).contiguous())
    qeubo = qExpectedUtilityOfBestOption(pref_model=MoNNEModel(ens), sampler=sampler)
    with torch.no_grad():
        torch.testing.assert_close(qeubo(pairs), ensemble_eubo(ens, pairs[:, 0], pairs[:, 1]), atol=1e-6, rtol=0)


def test_botorch_posterior_layout_and_learned_objective_shapes() -> None:
    """Card test 5: ``posterior(Y)`` is an ``EnsemblePosterior`` with values ``batch × M × n × 1`` (BoTorch 0.18's
    layout; older releases put the ensemble last), samples are member draws, and the learned objective maps
    ``[S, b, q, k]`` to ``[M·S, b, q]`` member-major.
    """
    pytest.importorskip("botorch")
    from botorch.posteriors.ensemble import EnsemblePosterior

    from zoo.bope_monne.acquisition import EnsembleLearnedObjective, MoNNEModel

    ens = MonotoneEnsemble(3, members=4, seed=17)
    model = MoNNEModel(ens)
    y = torch.rand(5, 6, 3, dtype=F64)
    post = model.posterior(y)
    assert isinstance(post, EnsemblePosterior)
    assert post.values.shape == (5, 4, 6, 1) and post.ensemble_size == 4
    torch.testing.assert_close(post.values[..., 0], ens(y))
    draws = post.rsample(torch.Size([3]))
    assert draws.shape == (3, 5, 6, 1)
    members = ens(y).transpose(0, 1)  # (M, 5, 6)
    assert all(any(torch.equal(draws[s, i, :, 0], members[m, i]) for m in range(4)) for s in range(3) for i in range(5))
    samples = torch.rand(8, 2, 3, 3, dtype=F64)  # S=8, b=2, q=3, k=3
    out = EnsembleLearnedObjective(ens)(samples)
    assert out.shape == (4 * 8, 2, 3)
    torch.testing.assert_close(out.view(4, 8, 2, 3)[1, 5], ens(samples[5])[:, 1, :])  # member 1, sample 5


def test_acquisitions_optimise_end_to_end_on_a_5d_design_space() -> None:
    """Card test 5: the ensemble EUBO over 2 × 5 dimensions and qLogNEI with the learned objective run through
    ``optimize_acqf`` on a fitted ``SingleTaskGP`` and return designs inside the box.
    """
    pytest.importorskip("botorch")
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.deterministic import FixedSingleSampleModel
    from botorch.models.transforms import Normalize, Standardize
    from botorch.optim import optimize_acqf
    from botorch.sampling.normal import SobolQMCNormalSampler
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from zoo.bope_monne.acquisition import EnsembleEUBO, EnsembleLearnedObjective

    torch.manual_seed(18)
    bounds = torch.tensor([[1.0] * 5, [3.0] * 5], dtype=F64)
    x = 1 + 2 * torch.rand(8, 5, dtype=F64)
    y = torch.stack([x[:, 0] - x[:, 1], x[:, 2] * x[:, 3] / 9, torch.sin(x[:, 4])], -1)
    gp = SingleTaskGP(x, y, input_transform=Normalize(5, bounds=bounds), outcome_transform=Standardize(3))
    fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
    ens = MonotoneEnsemble(3, members=4, lo=y.min(0).values, hi=y.max(0).values, seed=19)
    pair, value = optimize_acqf(EnsembleEUBO(ens, FixedSingleSampleModel(gp)), bounds=bounds, q=2, num_restarts=2,
                                raw_samples=16, options={"maxiter": 20})  # fmt: skip
    assert pair.shape == (2, 5) and ((pair >= 1) & (pair <= 3)).all() and torch.isfinite(value)
    acqf = qLogNoisyExpectedImprovement(
        model=gp,
        X_baseline=x,
        objective=EnsembleLearnedObjective(ens),
        sampler=SobolQMCNormalSampler(torch.Size([16])),
        prune_baseline=True,
    )
    batch, _ = optimize_acqf(acqf, bounds=bounds, q=2, num_restarts=2, raw_samples=16, options={"maxiter": 20})
    assert batch.shape == (2, 5) and ((batch >= 1) & (batch <= 3)).all()
