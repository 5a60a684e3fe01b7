"""BOPE data: the test problems, the utilities, the probit decision maker, the oracle, the readers, the datamodules.

Card ``bope_monne``, tests 6 (problems and utility checksums), 7 (probit DM) and 8 (recorded-comparisons loader; its
malformed inputs are the table of ``test_bad_inputs.py``). Reference values and formulas are written here from the
card, not taken from the code under test.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import installed
from torch.quasirandom import SobolEngine

from datamodules.multiobjective import oracle
from datamodules.multiobjective.datamodule import BOPEDataModule, ComparisonsDataModule, generate_comparisons
from datamodules.multiobjective.decision_maker import ProbitDM
from datamodules.multiobjective.problems import PROBLEMS, make_problem
from datamodules.multiobjective.readers import read_comparisons, read_outcomes, write_comparisons, write_outcomes
from datamodules.multiobjective.utilities import (
    PROBIT_SIGMA,
    UTILITIES,
    KumaraswamyCDFProduct,
    Linear,
    NegL1Dist,
    PiecewiseLinear,
    make_utility,
)

F64 = torch.float64
PAIRS = [(p, u) for p in PROBLEMS for u in UTILITIES[p]]
#: BoTorch (the ``bope_monne`` extra) holds the reference test functions; scipy (which it brings) runs the oracle.
needs_botorch = pytest.mark.skipif(not installed("botorch"), reason="needs botorch (the bope_monne extra)")
needs_scipy = pytest.mark.skipif(not installed("scipy"), reason="needs scipy (the oracle; the bope_monne extra)")


def _botorch(name: str) -> object:
    """BoTorch's VehicleSafety or DTLZ2 (8d, 4 objectives), imported here so the rest runs without the extra."""
    from botorch.test_functions.multi_objective import DTLZ2, VehicleSafety

    return VehicleSafety() if name == "vehicle_safety" else DTLZ2(dim=8, num_objectives=4)


def _uniform(problem: str, n: int, seed: int) -> torch.Tensor:
    prob = make_problem(problem)
    lo, hi = prob.bounds()
    return lo + (hi - lo) * torch.rand(n, prob.d, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _phi(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF (reference, from math.erf)."""
    return 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


# ---------------------------------------------------------------- problems (card test 6)


@needs_botorch
@pytest.mark.parametrize("name", ["vehicle_safety", "dtlz2"])
def test_raw_objectives_match_botorch(name: str) -> None:
    """Catches a wrong coefficient or index in VehicleSafety's or DTLZ2's raw objectives (BoTorch's, 100 random x)."""
    x = _uniform(name, 100, 0)
    torch.testing.assert_close(make_problem(name).raw(x), _botorch(name).evaluate_true(x), atol=1e-6, rtol=0)


@needs_botorch
def test_vehicle_safety_outcome_is_negated_normalised_and_not_clipped() -> None:
    """Catches a missing negation, wrong lo/hi, or clipping of y to [0, 1] (y₁ = 1.0046 at x = 1)."""
    prob = make_problem("vehicle_safety")
    x = _uniform("vehicle_safety", 50, 1)
    lo = torch.tensor([-1704.0, -11.708, -0.26192], dtype=F64)
    hi = torch.tensor([-1661.9, -6.2136, -0.042879], dtype=F64)
    torch.testing.assert_close(
        prob(x), (-_botorch("vehicle_safety").evaluate_true(x) - lo) / (hi - lo), atol=1e-12, rtol=0
    )
    y_one = prob(torch.ones(5, dtype=F64))
    assert y_one[0] > 1.0 and abs(float(y_one[0]) - 1.0046) < 5e-5


def test_dtlz2_outcome_is_not_negated() -> None:
    """Catches a negated DTLZ2 (its outcome is f itself, in [0, 2.65])."""
    prob, x = make_problem("dtlz2"), _uniform("dtlz2", 50, 2)
    torch.testing.assert_close(prob(x), prob.raw(x), atol=0, rtol=0)
    assert bool((prob(x) >= 0).all())


def _car_cab_reference(x: list[float]) -> list[float]:
    """RE9-7-1 from the card's equations, stochastic variables at 0, normalised by the card's lo/hi."""
    x1, x2, x3, x4, x5, x6, x7 = x
    f = [
        -(1.98 + 4.9 * x1 + 6.67 * x2 + 6.98 * x3 + 4.01 * x4 + 1.75 * x5 + 1e-5 * x6 + 2.73 * x7),
        -0.16 + 0.3717 * x2 * x4,
        0.32 - (0.261 - 0.0159 * x1 * x2 - 0.019 * x2 * x7 + 0.0144 * x3 * x5),
        0.32 - (0.214 + 0.00817 * x5 + 0.03099 * x2 * x6 - 0.018 * x2 * x7 - 0.00364 * x5 * x6 - 0.018 * x2 * x2),
        0.32 - (0.74 - 0.61 * x2 + 0.227 * x2 * x2),
        32 - ((28.98 + 3.818 * x3 - 4.2 * x1 * x2) + (33.86 + 2.95 * x3 - 5.057 * x1 * x2) + (46.36 - 9.9 * x2)) / 3,
        32 - (4.72 - 0.5 * x4 - 0.19 * x2 * x3),
        4 - (10.58 - 0.674 * x1 * x2),
        9.9 - (16.45 - 0.489 * x3 * x7 - 0.843 * x5 * x6),
    ]
    lo = [-42.150, -0.47829, -115.63, -0.0072040, -0.18255, -10.168, 27.023, -8.0731, -6.4556]
    hi = [-16.0992, 0.9511, 112.7138, 0.2750, 0.1909, 14.4804, 28.9855, 0.5, 0.5]
    return [(v - a) / (b - a) for v, a, b in zip(f, lo, hi, strict=True)]


def test_car_cab_midpoint_checksum_and_equations() -> None:
    """Catches a wrong CarCab coefficient, bound or normalisation: the card's midpoint checksum (its 4 decimals; two
    entries, 0.375647 and 0.212347, sit 5e-5 from the card's 0.3757 and 0.2124) and the card's equations at 20 x."""
    prob = make_problem("car_cab")
    mid = prob(prob.bounds().mean(0))
    card = torch.tensor([0.5002, 0.4567, 0.5067, 0.3871, 0.3419, 0.3757, 0.4729, 0.2449, 0.2124], dtype=F64)
    torch.testing.assert_close(mid, card, atol=1e-4, rtol=0)
    x = _uniform("car_cab", 20, 3)
    reference = torch.tensor([_car_cab_reference(row) for row in x.tolist()], dtype=F64)
    torch.testing.assert_close(prob(x), reference, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_shapes_batches_and_gradients(name: str) -> None:
    """Catches a problem that drops batch dims, is not differentiable, or has the wrong box or bound shapes."""
    prob = make_problem(name)
    assert prob.bounds().shape == (2, prob.d) and prob.outcome_bounds().shape == (2, prob.k)
    assert bool((prob.bounds()[0] < prob.bounds()[1]).all())
    lo, hi = prob.bounds()
    x = lo + (hi - lo) * torch.rand(2, 3, prob.d, generator=torch.Generator().manual_seed(4), dtype=F64)
    x.requires_grad_(True)
    y = prob(x)
    assert y.shape == (2, 3, prob.k) and y.dtype == F64
    torch.testing.assert_close(y[1, 2], prob(x[1, 2]))
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert bool(torch.isfinite(grad).all()) and bool((grad != 0).any())
    with pytest.raises(ValueError, match=rf"expected \(\.\.\., {prob.d}\) designs"):
        prob(torch.zeros(prob.d + 1, dtype=F64))


def test_outcome_bounds_are_the_cards() -> None:
    """Catches wrong surrogate input bounds: [0,1]^k for VehicleSafety and CarCab, DTLZ2 hi (2.5366, …, 2.6484)."""
    for name in ("vehicle_safety", "car_cab"):
        prob = make_problem(name)
        torch.testing.assert_close(
            prob.outcome_bounds(), torch.stack((torch.zeros(prob.k), torch.ones(prob.k))).to(F64)
        )
    torch.testing.assert_close(make_problem("dtlz2").outcome_bounds(),
                               torch.tensor([[0.0] * 4, [2.5366, 2.5237, 2.5996, 2.6484]], dtype=F64))  # fmt: skip


# ---------------------------------------------------------------- utilities (card test 6)


def test_utility_checksums() -> None:
    """Catches wrong VehicleSafety utility parameters or forms: PWL(0.5,0.5,0.5) = −0.5, Kumaraswamy = 0.38706."""
    half = torch.full((3,), 0.5, dtype=F64)
    assert float(make_utility("vehicle_safety", "pwl")(half)) == pytest.approx(-0.5, abs=1e-12)
    assert float(make_utility("vehicle_safety", "kumaraswamy")(half)) == pytest.approx(0.38706, abs=5e-6)


def _pwl_reference(y: list[float], b1: list[float], b2: list[float], t: list[float]) -> float:
    return sum(a * v + (b - a) * s if v < s else b * v for v, a, b, s in zip(y, b1, b2, t, strict=True))


@pytest.mark.parametrize("problem", ["vehicle_safety", "dtlz2", "car_cab"])
def test_piecewise_linear_matches_the_card(problem: str) -> None:
    """Catches swapped slopes, a wrong threshold or shift, or wrong per-problem β (the card's values, 200 random y)."""
    params = {
        "vehicle_safety": ([2, 6, 8], [1, 2, 2], [0.5, 0.8, 0.8]),
        "dtlz2": ([4, 3, 2, 1], [0.4, 0.3, 0.2, 0.1], [1.0] * 4),
        "car_cab": ([7 - 0.25 * k for k in range(9)], [0.5, 0.4, 0.375, 0.35, 0.325, 0.3, 0.275, 0.25, 0.225],
                    [0.55 - 0.01 * k for k in range(9)]),
    }[problem]  # fmt: skip
    util = make_utility(problem, "pwl")
    hi = make_problem(problem).outcome_bounds()[1]
    y = torch.rand(200, len(hi), generator=torch.Generator().manual_seed(5), dtype=F64) * 1.4 * hi - 0.2 * hi
    expected = torch.tensor([_pwl_reference(row, *params) for row in y.tolist()], dtype=F64)
    torch.testing.assert_close(util(y), expected, atol=1e-12, rtol=0)
    t = torch.tensor(params[2], dtype=F64)  # continuous at the kinks
    torch.testing.assert_close(util(t - 1e-9), util(t), atol=1e-7, rtol=0)


def test_linear_and_neg_l1_parameters() -> None:
    """Catches a wrong CarCab linear β (2.25 down to 0.25 by 0.25) or a NegL1 centre other than f(0.5·1) of DTLZ2."""
    lin = make_utility("car_cab", "linear")
    assert isinstance(lin, Linear)
    torch.testing.assert_close(
        lin(torch.eye(9, dtype=F64)), torch.tensor([2.25 - 0.25 * i for i in range(9)], dtype=F64)
    )
    neg = make_utility("dtlz2", "neg_l1")
    c = math.cos(math.pi / 4)  # DTLZ2 at x = 0.5·1: g = 0 and every angle π/4
    centre = torch.tensor([c**3, c**3, c**2, c], dtype=F64)
    assert isinstance(neg, NegL1Dist) and float(neg(centre)) == pytest.approx(0.0, abs=1e-12)
    y = centre + torch.tensor([0.1, -0.2, 0.3, -0.4], dtype=F64)
    assert float(neg(y)) == pytest.approx(-1.0, abs=1e-12)


def test_kumaraswamy_is_finite_and_flat_outside_the_unit_box() -> None:
    """Catches a Kumaraswamy CDF without the clamp (NaN for y < 0, complex powers, or values past 1 for y > 1)."""
    util = make_utility("vehicle_safety", "kumaraswamy")
    y = torch.tensor([[-0.5, 0.5, 0.5], [1.5, 0.5, 0.5], [-3.0, 2.0, 9.0], [0.5, -0.01, 1.01]], dtype=F64)
    g = util(y)
    assert bool(torch.isfinite(g).all())
    torch.testing.assert_close(g, util(y.clamp(1e-6, 1 - 1e-6)), atol=0, rtol=0)
    assert bool(((g >= 0) & (g <= 1)).all())


@pytest.mark.parametrize(("problem", "name"), PAIRS)
def test_utilities_are_monotone_except_neg_l1(problem: str, name: str) -> None:
    """Catches a utility that decreases in some outcome (MoNNE's assumption) or a wrong ``monotone`` flag."""
    util = make_utility(problem, name)
    hi = make_problem(problem).outcome_bounds()[1]
    y = (torch.rand(500, len(hi), generator=torch.Generator().manual_seed(6), dtype=F64) * hi).requires_grad_(True)
    (grad,) = torch.autograd.grad(util(y).sum(), y)
    assert util.monotone == (name != "neg_l1")
    assert bool((grad >= 0).all()) == util.monotone


def test_make_utility_rejects_a_pair_not_of_the_problem() -> None:
    """Catches a silent fallback to some utility for a (problem, utility) pair the card does not define."""
    with pytest.raises(ValueError, match=r"utility 'linear': expected one of 'pwl', 'kumaraswamy' for "
                                         r"problem='vehicle_safety'"):  # fmt: skip
        make_utility("vehicle_safety", "linear")
    assert set(PROBIT_SIGMA) == set(PAIRS)
    assert isinstance(make_utility("car_cab", "pwl"), PiecewiseLinear)
    assert isinstance(make_utility("vehicle_safety", "kumaraswamy"), KumaraswamyCDFProduct)


# ---------------------------------------------------------------- probit decision maker (card test 7)


def _random_pairs(n: int, seed: int) -> torch.Tensor:
    prob = make_problem("vehicle_safety")
    return prob(_uniform("vehicle_safety", 2 * n, seed).reshape(n, 2, prob.d))


def test_probit_flip_rate_matches_the_model() -> None:
    """Catches a wrong flip probability (σ² or √2σ for σ, Φ for 1 − Φ, a missing |·|) or flips that ignore it: over
    pairs of nearby outcomes (|Δg| of the order of σ) the empirical flip rate is 1 − Φ(|Δg|/σ) within 0.01 overall and
    in each quartile of that probability. 80k pairs rather than the card's 20k: a quartile of 5000 pairs has a binomial
    sd of 0.0066 at p ≈ 0.33 (a correct DM misses 0.01 in 7 % of seeds); 20000 pairs bring it to 0.0033."""
    util, sigma = make_utility("vehicle_safety", "pwl"), 0.1587
    y1 = make_problem("vehicle_safety")(_uniform("vehicle_safety", 80000, 7))
    y2 = y1 + 0.05 * torch.randn(y1.shape, generator=torch.Generator().manual_seed(16), dtype=F64)
    y = torch.stack((y1, y2), dim=1)
    g = util(y)
    answer = ProbitDM(util, sigma, torch.Generator().manual_seed(8)).compare(y)
    better = (g[:, 1] > g[:, 0]).long()
    flipped = (answer[:, 0] != better).numpy()
    p = 1 - _phi((g[:, 0] - g[:, 1]).abs().numpy() / sigma)
    assert abs(flipped.mean() - p.mean()) < 0.01 and p.mean() > 0.1
    for chunk in np.array_split(np.argsort(p), 4):
        assert abs(flipped[chunk].mean() - p[chunk].mean()) < 0.01
    torch.testing.assert_close(ProbitDM(util, sigma, torch.Generator()).flip_probability(y[:, 0], y[:, 1]),
                               torch.tensor(p, dtype=F64), atol=1e-12, rtol=0)  # fmt: skip


@pytest.mark.parametrize(("problem", "name"), PAIRS)
def test_probit_sigma_table_reproduces_its_calibration(problem: str, name: str) -> None:
    """Catches a σ table entry swapped or mistyped, or a problem/utility on a grossly different scale from Lin et al.'s
    (e.g. VehicleSafety's f₁ range halved, CarCab's PWL thresholds shifted by 0.1; exact values are checked above):
    with the table's σ the DM errs on 10 % (± 0.01) of random pairs among the top 10 % of the utilities of 100k
    uniform designs, the calibration that defines the table (their ``determining_probit_noise`` notebook)."""
    prob, util, sigma = make_problem(problem), make_utility(problem, name), PROBIT_SIGMA[(problem, name)]
    generator = torch.Generator().manual_seed(17)
    lo, hi = prob.bounds()
    top = util(prob(lo + (hi - lo) * torch.rand(100000, prob.d, generator=generator, dtype=F64))).sort().values[-10000:]
    rates = []
    for _ in range(4):  # four random pairings of the top decile
        pairs = top[torch.randperm(10000, generator=generator)].reshape(-1, 2, 1).expand(-1, 2, prob.k)
        dm = ProbitDM(lambda y: y[..., 0], sigma, generator)  # the pairs hold utilities already
        rates.append(float(dm.flip_probability(pairs[:, 0], pairs[:, 1]).mean()))
    assert abs(sum(rates) / 4 - 0.10) < 0.01


def test_noise_free_dm_is_deterministic_and_right() -> None:
    """Catches random answers at σ = 0 (or σ → 0), a reversed winner, or a tie not going to the first outcome."""
    util = make_utility("vehicle_safety", "pwl")
    y = _random_pairs(500, 9)
    g = util(y)
    truth = torch.where(g[:, 1] > g[:, 0], 1, 0)
    for sigma, seed in ((0.0, 1), (0.0, 2), (1e-12, 3)):
        answer = ProbitDM(util, sigma, torch.Generator().manual_seed(seed)).compare(y)
        assert torch.equal(answer[:, 0], truth) and torch.equal(answer[:, 1], 1 - truth)
    tie = y[:3, :1].expand(3, 2, 3).clone()
    assert torch.equal(ProbitDM(util, 0.0, torch.Generator()).compare(tie), torch.tensor([[0, 1]] * 3))


def test_dm_answers_follow_the_generator_seed() -> None:
    """Catches a DM drawing from the global RNG instead of its generator (same seed must give the same answers)."""
    util, y = make_utility("vehicle_safety", "pwl"), _random_pairs(2000, 10)
    answers = [ProbitDM(util, 0.1587, torch.Generator().manual_seed(s)).compare(y) for s in (11, 11, 12)]
    torch.manual_seed(0)
    assert torch.equal(answers[0], answers[1]) and not torch.equal(answers[0], answers[2])


def test_comparisons_are_global_rows() -> None:
    """Catches pair-local indices returned where BoTorch needs rows ``offset + 2i`` / ``offset + 2i + 1``."""
    util, y = make_utility("vehicle_safety", "pwl"), _random_pairs(5, 13)
    dm = ProbitDM(util, 0.0, torch.Generator())
    comps = dm.comparisons(y, offset=4)
    flat = y.reshape(10, 3)
    rows = torch.cat((torch.zeros(4, 3, dtype=F64), flat))
    assert torch.equal(comps // 2 - 2, torch.arange(5).unsqueeze(-1).expand(5, 2))
    assert bool((util(rows[comps[:, 0]]) >= util(rows[comps[:, 1]])).all())


# ---------------------------------------------------------------- oracle and normalisation


@needs_scipy
def test_oracle_beats_random_designs() -> None:
    """Catches an oracle that maximises the wrong sign, leaves the box, or stops at a poor start (VS-PWL)."""
    prob, util = make_problem("vehicle_safety"), make_utility("vehicle_safety", "pwl")
    x_star, g_star = oracle.optimum(prob, util)
    lo, hi = prob.bounds()
    assert x_star.shape == (5,) and bool(((x_star >= lo) & (x_star <= hi)).all())
    assert g_star == pytest.approx(float(util(prob(x_star))), abs=1e-12)
    assert g_star >= float(util(prob(_uniform("vehicle_safety", 1024, 14))).max())


@pytest.mark.slow
@needs_scipy
@pytest.mark.parametrize(("problem", "name"), PAIRS)
def test_oracle_of_every_pair(problem: str, name: str) -> None:
    """Catches an oracle that fails on some problem (a kink, a flat clamp region, a 9-outcome problem): g* is at least
    the best of 1024 uniform designs and above g_rand, and x* is in the box."""
    prob, util = make_problem(problem), make_utility(problem, name)
    x_star, g_star = oracle.optimum(prob, util)
    lo, hi = prob.bounds()
    assert bool(((x_star >= lo) & (x_star <= hi)).all())
    assert g_star >= float(util(prob(_uniform(problem, 1024, 18))).max()) and g_star > oracle.random_median(prob, util)


def _cheap() -> tuple:
    return make_problem("vehicle_safety"), make_utility("vehicle_safety", "kumaraswamy")


@needs_scipy
def test_oracle_second_call_uses_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Catches an oracle that searches again on every call, in the process or across processes (the JSON file)."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    prob, util = _cheap()
    oracle.clear_memo()
    first = oracle.optimum(prob, util, restarts=2, raw=16)

    def fail(*args: object) -> None:
        raise AssertionError("searched again")

    monkeypatch.setattr(oracle, "_search", fail)
    path = oracle.cache_path(prob, util)
    saved = path.read_text()
    path.unlink()  # in the process, the memo answers without the file
    again = oracle.optimum(prob, util, restarts=2, raw=16)
    path.write_text(saved)
    oracle.clear_memo()  # a new process: only the file is left
    from_file = oracle.optimum(prob, util, restarts=2, raw=16)
    assert torch.equal(first[0], again[0]) and torch.equal(first[0], from_file[0]) and first[1] == from_file[1]
    assert (tmp_path / "bope_monne" / "oracle-vehicle_safety-kumaraswamy.json").is_file()


@needs_scipy
@pytest.mark.parametrize("corruption", ["garbage", "wrong_g", "outside_box"])
def test_corrupt_oracle_cache_is_recomputed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, corruption: str) -> None:
    """Catches a trusted cache file that is not JSON, whose g* is not g(f(x*)), or whose x* is outside the box."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    prob, util = _cheap()
    oracle.clear_memo()
    x_star, g_star = oracle.optimum(prob, util, restarts=2, raw=16)
    path = oracle.cache_path(prob, util)
    blob = json.loads(path.read_text())
    match corruption:
        case "garbage":
            path.write_text("{not json")
        case "wrong_g":
            path.write_text(json.dumps({**blob, "g": blob["g"] + 1.0}))
        case "outside_box":
            path.write_text(
                json.dumps({**blob, "x": [9.0] * 5, "g": float(util(prob(torch.full((5,), 9.0, dtype=F64))))})
            )
    calls = []
    search = oracle._search
    monkeypatch.setattr(oracle, "_search", lambda *a: calls.append(1) or search(*a))
    oracle.clear_memo()
    again = oracle.optimum(prob, util, restarts=2, raw=16)
    assert calls == [1] and again[1] == g_star and torch.equal(again[0], x_star)
    assert json.loads(path.read_text())["g"] == g_star  # rewritten


def test_random_median_is_fixed() -> None:
    """Catches a g_rand drawn from fresh random designs (it must be the median over 1024 fixed Sobol x, seed 0)."""
    prob, util = make_problem("dtlz2"), make_utility("dtlz2", "pwl")
    lo, hi = prob.bounds()
    x = lo + (hi - lo) * SobolEngine(8, scramble=True, seed=0).draw(1024, dtype=F64)
    expected = float(np.median(util(prob(x)).numpy()))
    torch.manual_seed(123)
    assert oracle.random_median(prob, util) == pytest.approx(expected, abs=1e-12)
    assert oracle.random_median(prob, util) == oracle.random_median(prob, util)


def test_normalised_utility() -> None:
    """Catches a U not equal to 1 at g* and 0 at g_rand, or a silent division by g* − g_rand ≤ 0."""
    assert oracle.normalised_utility(3.0, 3.0, 1.0) == 1.0 and oracle.normalised_utility(1.0, 3.0, 1.0) == 0.0
    torch.testing.assert_close(oracle.normalised_utility(torch.tensor([2.0, 0.0]), 3.0, 1.0), torch.tensor([0.5, -0.5]))
    with pytest.raises(ValueError, match="not above g_rand"):
        oracle.normalised_utility(1.0, 1.0, 1.0)


# ---------------------------------------------------------------- BOPE datamodule


def test_bope_datamodule_shapes_and_seeded_holdout() -> None:
    """Catches wrong shape links, holdout pairs that ignore the seed, or holdout outcomes that are not f(x) of x in
    the box (the documented recipe: ``torch.rand`` from ``Generator().manual_seed(seed)``, scaled to the box)."""
    dm = BOPEDataModule(problem="car_cab", utility="linear", n_holdout=50, seed=3)
    assert (dm.n_dims, dm.n_objectives) == (7, 9) and dm.holdout.shape == (50, 2, 9)
    prob = make_problem("car_cab")
    lo, hi = prob.bounds()
    x = lo + (hi - lo) * torch.rand(50, 2, 7, generator=torch.Generator().manual_seed(3), dtype=F64)
    torch.testing.assert_close(dm.holdout, prob(x), atol=0, rtol=0)
    same = BOPEDataModule(problem="car_cab", utility="linear", n_holdout=50, seed=3)
    other = BOPEDataModule(problem="car_cab", utility="linear", n_holdout=50, seed=4)
    assert torch.equal(dm.holdout, same.holdout) and not torch.equal(dm.holdout, other.holdout)
    batches = list(dm.train_dataloader())
    assert len(batches) == 1 and torch.equal(batches[0]["stage"], torch.zeros(1))


@pytest.mark.parametrize(("dm_noise", "sigma", "expected"), [("none", None, 0.0), ("probit", None, 0.1587),
                                                             ("probit", 0.05, 0.05), ("probit", 0.0, 0.0)])  # fmt: skip
def test_bope_sigma_in_effect(dm_noise: str, sigma: float | None, expected: float) -> None:
    """Catches a noise-free DM given the table's σ, or a probit DM ignoring an explicit σ or the card's table."""
    assert BOPEDataModule(dm_noise=dm_noise, sigma=sigma).sigma == expected


@needs_scipy
def test_bope_task() -> None:
    """Catches a task whose oracle is not the maximum over the holdout, whose U is not 1 at x*, or whose noisy
    evaluation has the wrong scale or ignores its generator."""
    dm = BOPEDataModule(noise_std=0.05, n_holdout=200)
    task = dm.task()
    assert task is dm.task()  # the oracle runs once
    assert task.g_star >= float(task.utility(task.holdout).max()) and task.g_star > task.g_rand
    assert float(task.normalised(task.x_star)) == pytest.approx(1.0, abs=1e-12)
    x = _uniform("vehicle_safety", 4000, 15)
    noisy = task.evaluate(x, torch.Generator().manual_seed(1))
    assert torch.equal(noisy, task.evaluate(x, torch.Generator().manual_seed(1)))
    assert float((noisy - task.problem(x)).std()) == pytest.approx(0.05, rel=0.05)
    assert torch.equal(BOPEDataModule().task().evaluate(x, torch.Generator()), task.problem(x))
    dm_answer = task.dm(torch.Generator().manual_seed(2)).compare(task.holdout[:10])
    assert dm_answer.shape == (10, 2) and task.dm(torch.Generator()).sigma == 0.0


# ---------------------------------------------------------------- comparisons datamodule and readers (card test 8)


def test_generated_comparisons_agree_with_the_truth() -> None:
    """Catches generated comparisons reversed, pairing an outcome with itself, or answered with noise when
    ``dm_noise: none``; a probit DM must err on some but few pairs."""
    dm = ComparisonsDataModule(n_points=60, n_comparisons=200)
    comps = torch.cat((dm.train_comps, dm.val_comps))
    g = dm.truth(dm.y)
    assert dm.y.shape == (60, 3) and dm.n_objectives == 3 and dm.names == ["y1", "y2", "y3"]
    assert bool((comps[:, 0] != comps[:, 1]).all()) and bool((g[comps[:, 0]] > g[comps[:, 1]]).all())
    noisy = ComparisonsDataModule(n_points=60, n_comparisons=200, dm_noise="probit")
    wrong = (g[noisy.train_comps[:, 0]] < g[noisy.train_comps[:, 1]]).float().mean()
    assert torch.equal(noisy.y, dm.y) and 0 < wrong < 0.2
    torch.testing.assert_close(dm.bounds(), make_problem("vehicle_safety").outcome_bounds())


def test_split_is_seeded_disjoint_and_complete() -> None:
    """Catches a train/val split that loses, duplicates or leaks comparisons, ignores val_fraction, or the seed."""
    dm = ComparisonsDataModule(n_points=40, n_comparisons=101, val_fraction=0.3, seed=5)
    _, _, comps = generate_comparisons(make_problem("vehicle_safety"), make_utility("vehicle_safety", "pwl"), 0.0,
                                       40, 101, 5)  # fmt: skip
    assert len(dm.val_comps) == 30 and len(dm.train_comps) == 71
    rows = Counter(map(tuple, comps.tolist()))  # a multiset: random pairs may repeat
    assert Counter(map(tuple, dm.train_comps.tolist())) + Counter(map(tuple, dm.val_comps.tolist())) == rows
    again = ComparisonsDataModule(n_points=40, n_comparisons=101, val_fraction=0.3, seed=5)
    assert torch.equal(again.train_comps, dm.train_comps) and torch.equal(again.y, dm.y)
    other = ComparisonsDataModule(n_points=40, n_comparisons=101, val_fraction=0.3, seed=6)
    assert not torch.equal(other.y, dm.y)
    train_batch, val_batch = next(iter(dm.train_dataloader())), next(iter(dm.val_dataloader()))
    assert torch.equal(train_batch["comps"], dm.train_comps) and torch.equal(val_batch["comps"], dm.val_comps)
    assert torch.equal(train_batch["y"], dm.y) and torch.equal(val_batch["y"], dm.y)


def test_recorded_files_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches a reader that changes values, reorders comparisons, or takes default bounds other than the columns'
    min/max (announced in one line); explicit lo/hi are used as given."""
    gen = ComparisonsDataModule(n_points=30, n_comparisons=50)
    comps = torch.cat((gen.train_comps, gen.val_comps))
    write_outcomes(str(tmp_path / "outcomes.csv"), gen.names, gen.y)
    write_comparisons(str(tmp_path / "comparisons.csv"), comps)
    names, y = read_outcomes(str(tmp_path / "outcomes.csv"), 3)
    assert names == gen.names and torch.equal(y, gen.y)
    assert torch.equal(read_comparisons(str(tmp_path / "comparisons.csv"), 30), comps)
    capsys.readouterr()
    dm = ComparisonsDataModule(str(tmp_path / "outcomes.csv"), str(tmp_path / "comparisons.csv"))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "surrogate input bounds from the columns' min/max" in err[0]
    torch.testing.assert_close(dm.bounds(), torch.stack((gen.y.min(0).values, gen.y.max(0).values)))
    assert dm.truth is None and dm.n_objectives == 3 and len(dm.train_comps) + len(dm.val_comps) == 50
    fixed = ComparisonsDataModule(str(tmp_path / "outcomes.csv"), str(tmp_path / "comparisons.csv"),
                                  lo=[0.0, 0.0, 0.0], hi=[1.0, 1.0, 1.0])  # fmt: skip
    assert torch.equal(fixed.bounds(), torch.tensor([[0.0] * 3, [1.0] * 3], dtype=F64))


def test_reader_skips_blank_lines_and_strips_cells(tmp_path: Path) -> None:
    """Catches a reader that chokes on blank lines or padding, or counts lines wrongly after a blank line."""
    (tmp_path / "o.csv").write_text(" a , b \n1.5, 2\n\n-3e-1 ,4\n\n")
    (tmp_path / "c.csv").write_text("winner, loser\n\n1,0\n0 , 1\n")
    names, y = read_outcomes(str(tmp_path / "o.csv"))
    assert names == ["a", "b"] and torch.equal(y, torch.tensor([[1.5, 2.0], [-0.3, 4.0]], dtype=F64))
    assert torch.equal(read_comparisons(str(tmp_path / "c.csv"), 2), torch.tensor([[1, 0], [0, 1]]))
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n\nx,4\n")
    with pytest.raises(ValueError, match="line 4, column 'a'"):
        read_outcomes(str(tmp_path / "bad.csv"))
