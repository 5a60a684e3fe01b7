"""xrlhf Part 1 and the synthetic world (card tests 1, 2, 3, 5, 6 (orientation), 7) on numpy sizes."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.xrlhf.explain import (
    ConvexExplainer,
    knn_select,
    knn_union_select,
    random_select,
    select_forget_set,
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


def test_representer_points_rank_as_tracin_for_a_linear_head() -> None:
    """Why there is no representer selector: its score ``α_i^rep·Δφ_iᵀφ̄`` with ``α_i^rep = (1 − σ(θᵀΔφ_i))/(λn)`` is
    TracIn's times the constant ``1/(λn)``, so the top sets agree on every target (and the two scores are
    proportional); a selector built from it would duplicate the TracIn arm."""  # noqa: D205
    world = make_world(0, n_train=300, n_test=5)
    theta = fit_bt(world.delta_phi, steps=1000)
    sig = 1.0 / (1.0 + np.exp(-(world.delta_phi @ theta)))
    for target in world.test_phi[:, 0]:
        representer = (1.0 - sig) / (1e-3 * len(world.delta_phi)) * (world.delta_phi @ target)
        tracin = (world.delta_phi @ target) * (1.0 - sig)
        np.testing.assert_allclose(representer, tracin / (1e-3 * len(world.delta_phi)), rtol=1e-12)
        top = np.argsort(-representer, kind="stable")[:10]
        assert tracin_select(world.delta_phi, target, theta, 10).tolist() == top.tolist()


def _outside_the_near_hull() -> tuple[np.ndarray, np.ndarray]:
    """Target (1, 1); its 6 nearest comparisons all have x + y > 2.2 (no hull of them holds it); 3 far ones do."""
    rng = np.random.default_rng(2)
    near = np.array([1.3, 1.2]) + 0.15 * rng.standard_normal((6, 2))
    near = near[near.sum(axis=1) > 2.2]
    far = np.array([[-3.0, 0.0], [0.0, -3.0], [4.0, 4.0]])
    return np.vstack([near, far]), np.array([1.0, 1.0])


def test_exact_solver_widens_past_the_nearest_candidates() -> None:
    """``solver=exact``: φ̄ is outside the hull of its k_cand nearest, inside the hull of all; the greedy (pool = the
    nearest k_cand) stays infeasible, the exact solve doubles the window and returns a simplex α with residual 0
    that uses a far comparison. A solver that never widens, or returns weights off the simplex, fails."""  # noqa: D205
    points, target = _outside_the_near_hull()
    k = len(points) - 3
    greedy = ConvexExplainer(k_cand=2, tau=0.01).fit(points).explain(target)
    exact = ConvexExplainer(k_cand=2, tau=0.01, solver="exact").fit(points).explain(target)
    assert not greedy.feasible and greedy.residual > 0.05
    assert exact.feasible and exact.residual < 1e-8
    assert (exact.alpha >= 0).all() and abs(exact.alpha.sum() - 1) <= 1e-6
    assert np.linalg.norm(target - exact.alpha @ points[exact.indices]) / np.linalg.norm(target) == pytest.approx(
        exact.residual, abs=1e-12)  # fmt: skip
    assert (exact.indices >= k).any() and len(exact.indices) <= 3  # a far point; Carathéodory d + 1
    # the hull case of card test 1 and the single-point case of card test 3 hold for the exact solver too
    out = ConvexExplainer(solver="exact").fit(BASE).explain(TARGET)
    order = np.argsort(out.indices)
    assert out.indices[order].tolist() == [0, 1]
    np.testing.assert_allclose(out.alpha[order], [0.3, 0.7], atol=1e-4)
    world = make_world(1, n_train=200, n_test=2)
    one = ConvexExplainer(solver="exact").fit(world.delta_phi).explain(world.delta_phi[17])
    assert one.indices.tolist() == [17] and one.residual <= 1e-10
    capped = ConvexExplainer(solver="exact", max_size=2).fit(points).explain(target)
    assert len(capped.indices) <= 2
    with pytest.raises(ValueError, match="solver='qp'"):
        ConvexExplainer(solver="qp")


def test_knn_union_matches_the_union_size_and_keeps_per_item_prefixes() -> None:
    """``knn_union``: each item's set is a prefix of its nearest-first order at least as long as its per-item size,
    the union has exactly the requested size, and a union already too large is trimmed to it. An implementation that
    pads with random pairs, or overshoots the size, fails."""  # noqa: D205
    world = make_world(0, n_train=400, n_test=6)
    points, targets = world.delta_phi, world.test_phi[:, 0]
    sizes = [3, 5, 2, 4, 1, 6]
    per_item = np.unique(np.concatenate([knn_select(points, t, k) for t, k in zip(targets, sizes, strict=True)]))
    for union_size in (len(per_item) + 17, len(per_item) - 4):
        sets = knn_union_select(points, targets, sizes, union_size)
        assert len(np.unique(np.concatenate(sets))) == union_size
        for t, got in zip(targets, sets, strict=True):
            assert got.tolist() == knn_select(points, t, len(got)).tolist()
        lengths = np.array([len(got) for got in sets])
        if union_size > len(per_item):
            assert (lengths >= sizes).all() and (lengths > sizes).any()
        else:
            assert (lengths <= sizes).all() and (lengths < sizes).any()


def test_infeasible_drop_leaves_the_infeasible_items_out_of_s_all() -> None:
    """``infeasible``: ``keep`` (the card) unions every best-effort set; ``drop`` unions only the feasible items' sets,
    for the convex selector and for the per-item baselines (matched on the same items); the provenance keeps every
    item with ``used``. At τ 0.3 the greedy explains some of seed 0's first 12 test responses within τ, not all."""  # noqa: D205
    world = make_world(0, n_train=600, n_test=12)
    theta = fit_bt(world.delta_phi, steps=500)
    rl = rlhf_choice(world.test_phi, world.sft_logits, theta)
    items = np.arange(12)
    targets = world.test_phi[items, rl[items]]
    explainer = ConvexExplainer(tau=0.3).fit(world.delta_phi)
    convex = [explainer.explain(t) for t in targets]
    feasible = np.array([e.feasible for e in convex])
    assert 0 < feasible.sum() < len(feasible)
    union = lambda sets: np.unique(np.concatenate(sets))  # noqa: E731
    for selector in ("convex", "knn"):
        kept, forget_keep = select_forget_set(world.delta_phi, targets, items, theta, world.corrupted, selector,
                                              explainer, 0, "keep")  # fmt: skip
        dropped, forget_drop = select_forget_set(world.delta_phi, targets, items, theta, world.corrupted, selector,
                                                 explainer, 0, "drop")  # fmt: skip
        assert [e["used"] for e in kept] == [True] * len(items)
        assert [e["used"] for e in dropped] == feasible.tolist()
        np.testing.assert_array_equal(forget_keep, union([e["indices"] for e in kept]))
        np.testing.assert_array_equal(forget_drop, union([e["indices"] for e, f in zip(dropped, feasible) if f]))
        assert len(forget_drop) < len(forget_keep)


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
