"""pass@k metrics (card ``dco``, "Tests that must fail on a wrong implementation" item 7 and "Performance").

Each test's docstring names the bug it catches.
"""

from __future__ import annotations

import time
from fractions import Fraction
from math import comb, sqrt

import pytest
import torch

from zoo.dco.metrics import PassAtK, exact_pass_at_k, pass_at_k, pass_at_k_chunks

torch.set_num_threads(1)


def closed_form(n: int, c: int, k: int) -> float:
    """Reference ``1 − C(n−c,k)/C(n,k)`` in exact rational arithmetic (``comb`` is 0 when ``n − c < k``)."""
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


GRID = [(n, c, k) for n in (1, 2, 5, 10, 37, 256) for c in sorted({0, 1, 2, n // 3, n // 2, n - 1, n}) if 0 <= c <= n
        for k in sorted({1, 2, 4, 16, n // 2, n - 1, n}) if 1 <= k <= n]  # fmt: skip


def test_closed_form_grid() -> None:
    """Catches a wrong product range (off by one in i), ``k/i`` vs ``1/i``, or the complement taken twice."""
    n = torch.tensor([g[0] for g in GRID])
    c = torch.tensor([g[1] for g in GRID])
    for k in sorted({g[2] for g in GRID}):
        rows = [j for j, g in enumerate(GRID) if g[2] == k]
        got = pass_at_k(n[rows], c[rows], k)
        want = torch.tensor([closed_form(*GRID[j]) for j in rows], dtype=torch.float64)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize(("n", "c", "k", "want"), [(10, 0, 3, 0.0), (10, 8, 3, 1.0), (10, 10, 1, 1.0),
                                                   (256, 0, 256, 0.0), (256, 1, 256, 1.0), (7, 7, 7, 1.0)])  # fmt: skip
def test_edge_cases_exact(n: int, c: int, k: int, want: float) -> None:
    """c = 0 must be exactly 0 and n − c < k (k = n included) exactly 1, not 1 − tiny or NaN from log1p(−1)."""
    got = pass_at_k(torch.tensor([n]), torch.tensor([c]), k)
    assert got.item() == want
    assert pass_at_k(n, c, k).item() == want


@pytest.mark.parametrize(("n", "c", "k"), [(10, 3, 4), (20, 2, 5), (50, 5, 10), (16, 1, 1)])
def test_monte_carlo(n: int, c: int, k: int) -> None:
    """Catches an estimator biased away from sampling k of n without replacement (e.g. with-replacement 1-(1-c/n)^k)."""
    draws = 100_000
    g = torch.Generator().manual_seed(1000 * n + 10 * c + k)
    subsets = torch.rand(draws, n, generator=g).argsort(dim=1)[:, :k]
    hits = (subsets < c).any(dim=1).double()  # items 0..c-1 are the correct ones
    p = pass_at_k(n, c, k).item()
    sigma = sqrt(p * (1 - p) / draws)
    assert abs(hits.mean().item() - p) <= 3 * sigma
    with_replacement = 1 - (1 - c / n) ** k
    assert abs(with_replacement - p) > 3 * sigma or k == 1  # the test can tell the two apart


def test_monotone_in_k() -> None:
    """pass@k must be non-decreasing in k for every (n, c); a wrong table offset breaks it."""
    n = 40
    c = torch.arange(0, n + 1)
    values = torch.stack([pass_at_k(torch.full_like(c, n), c, k) for k in range(1, n + 1)])
    assert bool(torch.all(values[1:] >= values[:-1] - 1e-14))
    assert bool(torch.all((values >= 0) & (values <= 1)))


def test_raises() -> None:
    """k > n (for any problem), c > n, negative counts and k < 1 must raise, not return garbage."""
    with pytest.raises(ValueError, match=r"k=5.*n=4"):
        pass_at_k(torch.tensor([10, 4, 8]), torch.tensor([1, 1, 1]), 5)
    with pytest.raises(ValueError, match="c > n"):
        pass_at_k(torch.tensor([10, 4]), torch.tensor([1, 5]), 2)
    with pytest.raises(ValueError, match=">= 0"):
        pass_at_k(torch.tensor([10, 4]), torch.tensor([1, -1]), 2)
    with pytest.raises(ValueError, match="positive"):
        pass_at_k(10, 2, 0)
    with pytest.raises(ValueError, match="k=9"):
        pass_at_k_chunks(torch.zeros(3, 8, dtype=torch.bool), 9)
    with pytest.raises(ValueError, match="whole numbers"):
        pass_at_k(torch.tensor([10.0]), torch.tensor([2.5]), 1)


def test_vectorised_equals_scalar_varying_n() -> None:
    """Catches a vectorisation that uses one n (max or first) for every problem."""
    g = torch.Generator().manual_seed(0)
    n = torch.randint(16, 300, (200,), generator=g)
    c = (torch.rand(200, generator=g) * (n + 1)).long().clamp(max=n)
    c[:5] = 0
    c[5:10] = n[5:10]
    for k in (1, 4, 16):
        got = pass_at_k(n, c, k)
        scalar = torch.tensor([pass_at_k(int(a), int(b), k).item() for a, b in zip(n, c)], dtype=torch.float64)
        want = torch.tensor([closed_form(int(a), int(b), k) for a, b in zip(n, c)], dtype=torch.float64)
        torch.testing.assert_close(got, scalar, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-15)


def test_chunks_hand_written() -> None:
    """Chunks are disjoint, in order, and the n mod k tail is unused (catches overlapping windows or a padded tail)."""
    correct = torch.tensor([[1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1],  # chunks of 3: hit, miss, hit, miss; tail ignored
                            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],  # only the unused tail is correct
                            [0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0]]).bool()  # fmt: skip
    got = pass_at_k_chunks(correct, 3)
    assert got.dtype == torch.float64
    assert got.tolist() == [0.5, 0.0, 1.0]
    assert pass_at_k_chunks(correct, 13).tolist() == [1.0, 1.0, 1.0]
    assert pass_at_k_chunks(correct, 1).tolist() == [4 / 13, 1 / 13, 4 / 13]


@pytest.mark.parametrize(("n", "c", "k"), [(12, 4, 3), (13, 2, 4), (64, 3, 16)])
def test_chunks_unbiased(n: int, c: int, k: int) -> None:
    """Over random orders the chunk estimate averages to pass@k (catches chunks of the wrong size or counting)."""
    reps = 20_000
    g = torch.Generator().manual_seed(n + c + k)
    order = torch.rand(reps, n, generator=g).argsort(dim=1)
    est = pass_at_k_chunks(order < c, k)
    tol = 4 * est.std().item() / sqrt(reps)
    assert abs(est.mean().item() - pass_at_k(n, c, k).item()) <= tol


def test_exact_pass_at_k() -> None:
    """Catches float32 arithmetic, an unclamped p, and a naive 1 − (1 − p)**k that loses digits at tiny p."""
    p = torch.tensor([0.0, 0.01, 0.1, 0.3, 0.5, 0.9, 1.0], dtype=torch.float32)
    for k in (1, 4, 16, 256):
        got = exact_pass_at_k(p, k)
        assert got.dtype == torch.float64
        want = torch.tensor([1 - (1 - float(x)) ** k for x in p], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
        assert got[0].item() == 0.0 and got[-1].item() == 1.0
    assert exact_pass_at_k(torch.tensor([-0.1, 1.2]), 4).tolist() == [0.0, 1.0]
    tiny = 1e-12
    exact = float(1 - (1 - Fraction(tiny)) ** 256)
    got = exact_pass_at_k(torch.tensor([tiny], dtype=torch.float64), 256).item()
    assert abs(got - exact) <= 1e-6 * exact
    assert abs(exact - 2.56e-10) <= 1e-6 * exact
    assert abs((1 - (1 - tiny) ** 256) - exact) > 1e-6 * exact  # the naive form fails this check


def _correct(p: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rate = torch.rand(p, 1, generator=g) ** 3  # many hard problems, a few easy ones
    return torch.rand(p, n, generator=g) < rate


@pytest.mark.parametrize("estimator", ["unbiased", "chunks"])
def test_metric_two_updates_equal_one(estimator: str) -> None:
    """Catches state that is overwritten instead of accumulated, or a mean of per-update means."""
    a, b = _correct(30, 64, 1), _correct(70, 64, 2)
    split, whole = PassAtK(ks=(1, 4, 16, 64), estimator=estimator), PassAtK(ks=(1, 4, 16, 64), estimator=estimator)
    split.update(a)
    split.update(b)
    whole.update(torch.cat([a, b]))
    got, want = split.compute(), whole.compute()
    assert set(got) == {1, 4, 16, 64}
    for k in got:
        torch.testing.assert_close(got[k], want[k], rtol=1e-12, atol=0.0)


def test_metric_matches_functions_and_counts() -> None:
    """The metric is the mean of pass_at_k / pass_at_k_chunks over problems, also with n varying between updates."""
    a, b = _correct(20, 32, 3), _correct(50, 48, 4)
    unbiased, chunks, counts = (
        PassAtK(ks=(1, 4, 16)),
        PassAtK(ks=(1, 4, 16), estimator="chunks"),
        PassAtK(ks=(1, 4, 16)),
    )
    for x in (a, b):
        unbiased.update(x.int())
        chunks.update(x)
    counts.update_counts(torch.tensor([32] * 20 + [48] * 50), torch.cat([a.sum(1), b.sum(1)]))
    n, c = torch.tensor([32] * 20 + [48] * 50), torch.cat([a.sum(1), b.sum(1)])
    u, ch, co = unbiased.compute(), chunks.compute(), counts.compute()
    for k in (1, 4, 16):
        torch.testing.assert_close(u[k], pass_at_k(n, c, k).mean())
        torch.testing.assert_close(co[k], u[k])
        torch.testing.assert_close(ch[k], torch.cat([pass_at_k_chunks(a, k), pass_at_k_chunks(b, k)]).mean())
    torch.testing.assert_close(u[1], ch[1])  # k = 1: both are the fraction of correct samples
    assert not torch.allclose(u[16], ch[16])  # a chunk estimator that silently fell back to the unbiased one


@pytest.mark.parametrize("estimator", ["unbiased", "chunks"])
def test_metric_merge_state_is_cat(estimator: str) -> None:
    """DDP-style merge of two ranks equals one metric over all problems (cat states, not averaged means)."""
    a, b = _correct(10, 16, 5), _correct(90, 16, 6)
    r0, r1, whole = (PassAtK(ks=(1, 4, 16), estimator=estimator) for _ in range(3))
    r0.update(a)
    r1.update(b)
    whole.update(torch.cat([a, b]))
    r0.merge_state(r1)
    got, want = r0.compute(), whole.compute()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("estimator", ["unbiased", "chunks"])
def test_metric_k_above_n_raises(estimator: str) -> None:
    """A k larger than some problem's n must raise in compute, naming the k and the smallest n."""
    metric = PassAtK(ks=(1, 4, 16), estimator=estimator)
    metric.update(_correct(5, 32, 7))
    metric.update(_correct(5, 8, 8))
    with pytest.raises(ValueError, match=r"\[16\].*n=8"):
        metric.compute()


def test_metric_counts_after_compute_not_stale() -> None:
    """update_counts after compute must invalidate torchmetrics' compute cache (a bypassed update wrapper does not)."""
    metric = PassAtK(ks=(1,))
    metric.update_counts(torch.tensor([4, 4]), torch.tensor([0, 0]))
    assert metric.compute()[1].item() == 0.0
    metric.update_counts(4, torch.tensor([4, 4]))
    assert metric.compute()[1].item() == 0.5
    metric.update(torch.ones(4, 8, dtype=torch.bool))
    assert metric.compute()[1].item() == 0.75
    assert metric.update_count == 3


def test_metric_argument_errors() -> None:
    """Bad estimator names, counts in chunk mode, and non-[P, n] input fail loudly."""
    with pytest.raises(ValueError, match="estimator"):
        PassAtK(estimator="bootstrap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="per-sample"):
        PassAtK(estimator="chunks").update_counts(torch.tensor([4]), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"\[P, n\]"):
        PassAtK().update(torch.ones(8, dtype=torch.bool))
    with pytest.raises(ValueError, match="c > n"):
        PassAtK().update_counts(4, torch.tensor([5]))
    with pytest.raises(ValueError, match="n= and c="):
        PassAtK().update(n=4)


def test_timing_smoke_1e5_problems() -> None:
    """Card "Performance": 10⁵ problems with n = 256 (values checked; the time is printed, not asserted)."""
    p, n = 100_000, 256
    g = torch.Generator().manual_seed(9)
    c = torch.randint(0, n + 1, (p,), generator=g)
    nn = torch.full_like(c, n)
    start = time.perf_counter()
    values = {k: pass_at_k(nn, c, k) for k in (1, 4, 16, 64, 256)}
    fn_s = time.perf_counter() - start
    metric = PassAtK()
    start = time.perf_counter()
    metric.update_counts(nn, c)
    means = metric.compute()
    metric_s = time.perf_counter() - start
    correct = torch.rand(p, n, generator=g) < 0.1
    start = time.perf_counter()
    sampled = PassAtK()
    sampled.update(correct)
    from_samples = sampled.compute()
    sample_s = time.perf_counter() - start
    for v in values.values():
        assert v.shape == (p,) and bool(torch.all(torch.isfinite(v) & (v >= 0) & (v <= 1)))
    assert all(0.0 <= float(m) <= 1.0 for m in [*means.values(), *from_samples.values()])
    print(
        f"1e5 problems x n=256, ks 1..256: pass_at_k {fn_s * 1e3:.1f} ms; PassAtK from counts {metric_s * 1e3:.1f} ms, "
        f"from a [1e5, 256] bool tensor {sample_s * 1e3:.1f} ms"
    )
