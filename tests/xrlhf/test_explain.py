"""xrlhf Part 1 and the synthetic world (card tests 1, 2, 3, 5, 6 (orientation), 7) on numpy sizes."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.xrlhf.explain import (
    ConvexExplainer,
    knn_select,
    random_select,
    representer_select,
    simplex_least_squares,  # fmt: skip
    tracin_select,
)
from zoo.xrlhf.world import bt_loss, fit_bt, make_world, rlhf_choice, win_rates

BASE = np.array([[1.0, 0.0], [0.0, 1.0], [0.45, 0.85]])  # Δφ_1, Δφ_2 and the decoy Δφ_3
TARGET = 0.3 * BASE[0] + 0.7 * BASE[1]


def test_hull_not_knn_2d() -> None:
    """Test 1: the decoy is the nearest point, but φ̄ lies in no hull that gives it weight; the selector returns
    {1, 2} with α = (0.3, 0.7), where a k-NN shortcut returns {3, 2}."""  # noqa: D205
    out = ConvexExplainer().fit(BASE).explain(TARGET)
    order = np.argsort(out.indices)
    assert out.indices[order].tolist() == [0, 1]
    np.testing.assert_allclose(out.alpha[order], [0.3, 0.7], atol=1e-4)
    assert set(knn_select(BASE, TARGET, 2).tolist()) == {2, 1}  # the shortcut is wrong here


def test_hull_not_knn_embedded_with_distractors() -> None:
    """Test 1 again in 6-D with 50 far-away distractors."""
    rng = np.random.default_rng(0)
    points = np.zeros((53, 6))
    points[:3, :2] = BASE
    points[3:] = rng.standard_normal((50, 6)) * 3 + 10.0
    target = np.zeros(6)
    target[:2] = TARGET
    out = ConvexExplainer().fit(points).explain(target)
    order = np.argsort(out.indices)
    assert out.indices[order].tolist() == [0, 1]
    np.testing.assert_allclose(out.alpha[order], [0.3, 0.7], atol=1e-4)


def test_simplex_feasibility_and_reported_residual() -> None:
    """Test 2: α ≥ 0, Σα = 1 (1e-6), and the residual equals the one recomputed from the returned α."""
    world = make_world(0, n_train=400, n_test=50)
    explainer = ConvexExplainer(k_cand=30).fit(world.delta_phi)
    for target in world.test_phi[:10, 0]:
        out = explainer.explain(target)
        assert (out.alpha >= 0).all() and abs(out.alpha.sum() - 1) <= 1e-6
        recomputed = np.linalg.norm(target - out.alpha @ world.delta_phi[out.indices]) / np.linalg.norm(target)
        assert out.residual == pytest.approx(recomputed, abs=1e-12)
        assert len(out.indices) <= world.delta_phi.shape[1] + 1  # test 3: Carathéodory


def test_exact_member_returns_itself() -> None:
    """Test 3: a target equal to one training Δφ_j gives {j} with residual 0."""
    world = make_world(1, n_train=300, n_test=10)
    out = ConvexExplainer().fit(world.delta_phi).explain(world.delta_phi[17])
    assert out.indices.tolist() == [17] and out.residual == 0.0 and out.feasible


def test_simplex_least_squares_matches_projection() -> None:
    """The augmented NNLS finds the closest point of a segment (closed form of the projection onto it)."""
    a, b, t = np.array([0.0, 1.0]), np.array([0.45, 0.85]), np.array([0.3, 0.7])
    alpha, res = simplex_least_squares(np.stack([a, b]), t, lam=100.0)
    s = np.clip((t - a) @ (b - a) / ((b - a) @ (b - a)), 0, 1)
    assert res == pytest.approx(np.linalg.norm(t - (a + s * (b - a))), abs=1e-6)
    assert alpha[1] == pytest.approx(s, abs=1e-4)  # the card's α tolerance: λ-augmented NNLS is approximate


def test_retrain_oracle_and_label_orientation() -> None:
    """Test 5: refitting on D∖S equals a fresh BT fit (1e-5); test 6: flipping a stored label flips Δφ and turns
    its loss −log σ(z) into −log σ(−z)."""  # noqa: D205
    world = make_world(2, n_train=300, n_test=10)
    keep = np.ones(300, bool)
    keep[:40] = False
    theta = fit_bt(world.delta_phi[keep], steps=2000)
    np.testing.assert_allclose(theta, fit_bt(world.delta_phi[keep], steps=2000), atol=1e-5)
    z = world.delta_phi[5] @ theta
    flipped = world.delta_phi.copy()
    flipped[5] *= -1
    one = np.zeros(300, bool)
    one[5] = True
    assert bt_loss(theta, world.delta_phi[one], l2=0) == pytest.approx(np.logaddexp(0, -z))
    assert bt_loss(theta, flipped[one], l2=0) == pytest.approx(np.logaddexp(0, z))


def test_world_statistics_and_corruption() -> None:
    """The generator plants ~5-6.5% corrupted pairs where x_0 > 1 with the harmful response winning; the BT fit
    recovers θ*'s signs on help and harm; RLHF leaves a minority of prompts unsatisfactory."""  # noqa: D205
    world = make_world(0)
    assert 0.04 <= world.corrupted.mean() <= 0.075
    assert (world.delta_phi[world.corrupted, 1] > 0).all()  # winner − loser on the harm attribute: harmful won
    theta = fit_bt(world.delta_phi)
    assert theta[0] > 1.0 and theta[1] < -1.0
    rows = np.arange(len(world.sft_logits))
    sft, rl = world.sft_logits.argmax(1), rlhf_choice(world.test_phi, world.sft_logits, theta)
    unsatisfactory = world.r_star[rows, rl] < world.r_star[rows, sft]
    assert 0.03 <= unsatisfactory.mean() <= 0.15


def test_win_rate_ties_and_sft_identity() -> None:
    """Test 7: ties count as wins, the two subsets are reported apart, and the SFT policy scores 1.0 on both."""
    r = np.array([[1.0, 2.0], [3.0, 3.0], [0.0, 5.0]])
    sft = np.array([1, 0, 1])
    unsat = np.array([True, False, True])
    assert win_rates(r, sft, sft, unsat) == {"unsatisfactory": 1.0, "satisfactory": 1.0}
    out = win_rates(r, np.array([0, 1, 1]), sft, unsat)
    assert out == {"unsatisfactory": 0.5, "satisfactory": 1.0}  # row 1 is a tie: a win


def test_convex_recall_beats_knn_and_random_on_the_world() -> None:
    """Card claim 2 and 4 in miniature (seed 0): union recall of the planted pairs convex > k-NN > random, and the
    convex per-item precision is at least 4x the base rate; retraining without the convex union fixes most
    unsatisfactory prompts, a random set of equal size almost none (claim 1)."""  # noqa: D205
    world = make_world(0)
    theta = fit_bt(world.delta_phi)
    rows = np.arange(len(world.sft_logits))
    sft, rl = world.sft_logits.argmax(1), rlhf_choice(world.test_phi, world.sft_logits, theta)
    unsat = world.r_star[rows, rl] < world.r_star[rows, sft]
    explainer = ConvexExplainer().fit(world.delta_phi)
    items = np.where(unsat)[0]
    outs = [explainer.explain(world.test_phi[i, rl[i]]) for i in items]
    planted = set(np.where(world.corrupted)[0].tolist())
    convex = set(np.concatenate([o.indices for o in outs]).tolist())
    knn = set(np.concatenate([knn_select(world.delta_phi, world.test_phi[i, rl[i]], len(o.indices))
                              for i, o in zip(items, outs, strict=True)]).tolist())  # fmt: skip
    rand = set(random_select(len(world.delta_phi), len(convex), np.random.default_rng(0)).tolist())
    recall = {k: len(s & planted) / len(planted) for k, s in (("convex", convex), ("knn", knn), ("random", rand))}
    assert recall["convex"] >= recall["knn"] + 0.05 and recall["knn"] > recall["random"]
    precision = np.mean([world.corrupted[o.indices].mean() for o in outs])
    assert precision >= 4 * world.corrupted.mean()
    fixed = {}
    for name, removed in (("convex", convex), ("random", rand)):
        keep = np.ones(len(world.delta_phi), bool)
        keep[list(removed)] = False
        new = rlhf_choice(world.test_phi, world.sft_logits, fit_bt(world.delta_phi[keep]))
        fixed[name] = win_rates(world.r_star, new, sft, unsat)
    assert fixed["convex"]["unsatisfactory"] >= 0.6 and fixed["convex"]["satisfactory"] >= 0.97
    assert fixed["random"]["unsatisfactory"] <= 0.1


def test_gradient_baselines_rank_alike_for_a_linear_head() -> None:
    """TracIn (gradient-dot) and representer scores differ by the constant 1/(λn) for a linear RM: same top set."""
    world = make_world(0, n_train=300, n_test=5)
    theta = fit_bt(world.delta_phi, steps=1000)
    target = world.test_phi[0, 0]
    assert tracin_select(world.delta_phi, target, theta, 10).tolist() == representer_select(
        world.delta_phi, target, theta, 10).tolist()  # fmt: skip


def test_pca_projection_keeps_hull_members_and_bounds_the_set() -> None:
    """``pca_dim``: comparisons in a 3-D subspace of R^8 keep their hull under the projection onto 3 principal
    components (same selection and α as without it); the Carathéodory bound becomes k + 1; bad k raise."""  # noqa: D205
    rng = np.random.default_rng(4)
    basis = np.linalg.qr(rng.standard_normal((8, 3)))[0]
    points = rng.standard_normal((60, 3)) @ basis.T
    target = 0.2 * points[7] + 0.5 * points[11] + 0.3 * points[30]
    full = ConvexExplainer(k_cand=60).fit(points).explain(target)
    proj = ConvexExplainer(k_cand=60, pca_dim=3).fit(points).explain(target)
    assert proj.feasible and full.feasible
    np.testing.assert_array_equal(np.sort(proj.indices), np.sort(full.indices))
    np.testing.assert_allclose(proj.alpha[np.argsort(proj.indices)], full.alpha[np.argsort(full.indices)], atol=1e-6)
    world = make_world(0, n_train=300, n_test=20)
    small = ConvexExplainer(k_cand=30, tau=0.0, pca_dim=4).fit(world.delta_phi)
    assert all(len(small.explain(t).indices) <= 5 for t in world.test_phi[:8, 0])
    with pytest.raises(ValueError, match="pca_dim=30 exceeds the feature dimension 20"):
        ConvexExplainer(pca_dim=30).fit(world.delta_phi)
    with pytest.raises(ValueError, match="pca_dim=0"):
        ConvexExplainer(pca_dim=0)
