"""Every asserted claim of `zoo reproduce dco` can fail (issue #22, deliverable 8).

`zoo.dco.reproduce.check_claims` turns evaluation histories into the card's claims. These tests feed it histories
built from the method page's measured numbers (K-answer seed 0, the noisy-addition medians of the full run), check
that every claim holds on them, and then perturb the numbers one claim reads (or substitute a broken implementation:
a "DCO" that trains like CE) and check that this claim, asserted, fails. A claim added to the protocol without a
perturbation here fails `test_every_asserted_claim_has_a_perturbation`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from zoo.dco.reproduce import KS, check_claims

#: K-answer test pass@k (k = 1, 4, 16, 64, 256) and test max-p per arm and step (method page, seed 0).
KANSWER = {
    "CE": {100: ([0.377, 0.568, 0.717, 0.818, 0.881], 0.629), 6000: ([0.417, 0.512, 0.590, 0.661, 0.722], 0.819)},
    "DCO 4": {6000: ([0.389, 0.551, 0.680, 0.775, 0.841], 0.688)},
    "DCO 16": {6000: ([0.314, 0.550, 0.741, 0.857, 0.918], 0.505)},
    "DCO 64": {6000: ([0.183, 0.439, 0.729, 0.901, 0.969], 0.268)},
}
#: Noisy addition per evaluation epoch (0-based, as logged): pass@1, pass@16, pass@256, train p̂ (full-run medians).
ADDITION = {
    "CE": {99: (0.021, 0.757, 0.975, 0.331), 199: (0.237, 0.809, 0.960, 0.335), 699: (0.255, 0.501, 0.704, 0.927)},
    "DCO 16": {99: (0.021, 0.760, 0.976, 0.030), 199: (0.200, 0.900, 0.990, 0.200), 699: (0.240, 0.947, 0.998, 0.272)},
}

Histories = dict[str, list[list[dict[str, float]]]]


def _kanswer_history(arm: str) -> list[dict[str, float]]:
    steps = dict(KANSWER[arm])
    steps.setdefault(100, steps[6000])  # arms other than CE are read at step 6000 only
    out = []
    for step, (passes, max_p) in sorted(steps.items()):
        out.append({"step": float(step), **{f"test/pass@{k}": v for k, v in zip(KS, passes, strict=True)},
                    "test/max_p": max_p})  # fmt: skip
    return out


def _addition_history(arm: str) -> list[dict[str, float]]:
    return [{"epoch": float(e), "test/pass@1": a, "test/pass@16": b, "test/pass@256": c, "train/p_hat": p}
            for e, (a, b, c, p) in sorted(ADDITION[arm].items())]  # fmt: skip


def _sampled(offset: float = 0.0) -> dict[str, dict[str, float]]:
    ka = {f"{kind}/pass@{k}": v for kind in ("exact", "sampled") for k, v in zip(KS, KANSWER["CE"][6000][0],
                                                                                   strict=True)}  # fmt: skip
    lm = {f"{kind}/pass@{k}": v for kind in ("exact", "sampled") for k, v in ((1, 0.25), (4, 0.5), (16, 0.75))}
    ka["sampled/pass@16"] += 0.004 + offset
    lm["sampled/pass@4"] -= 0.01 + offset
    return {"kanswer/CE/seed 0": ka, "lm/CE/seed 0": lm}


def _inputs(seeds: int) -> tuple[Histories, Histories, dict[str, dict[str, float]]]:
    ka = {arm: [_kanswer_history(arm) for _ in range(seeds)] for arm in KANSWER}
    lm = {arm: [_addition_history(arm) for _ in range(seeds)] for arm in ADDITION}
    return ka, lm, _sampled()


def _set(hists: list[list[dict[str, float]]], key: str, at: tuple[str, float], value: float) -> None:
    """Set ``key`` at the evaluation ``at = (field, value)`` of every seed's history."""
    for hist in hists:
        next(h for h in hist if h[at[0]] == at[1])[key] = value


def _get(hists: list[list[dict[str, float]]], key: str, at: tuple[str, float]) -> float:
    return next(h for h in hists[0] if h[at[0]] == at[1])[key]


S100, S6000, LAST = ("step", 100.0), ("step", 6000.0), ("epoch", 699.0)
Perturb = Callable[[Histories, Histories, dict[str, dict[str, float]]], None]

#: (claim name prefix, what breaks it): each perturbation moves only the numbers that claim reads.
PERTURBATIONS: list[tuple[str, Perturb]] = [
    ("C1 K-answer CE: pass@256", lambda ka, lm, s: _set(ka["CE"], "test/pass@256", S6000,
                                                        _get(ka["CE"], "test/pass@256", S100) - 0.05)),
    ("C1 K-answer CE: pass@1 ", lambda ka, lm, s: _set(ka["CE"], "test/pass@1", S6000,
                                                      _get(ka["CE"], "test/pass@1", S100) + 0.005)),
    ("C1 K-answer CE: test max-p", lambda ka, lm, s: _set(ka["CE"], "test/max_p", S6000,
                                                          _get(ka["CE"], "test/max_p", S100) + 0.05)),
    ("C2 K-answer: pass@16", lambda ka, lm, s: _set(ka["DCO 16"], "test/pass@16", S6000,
                                                    _get(ka["CE"], "test/pass@16", S6000) + 0.09)),
    ("C2 K-answer: pass@1 ", lambda ka, lm, s: _set(ka["DCO 16"], "test/pass@1", S6000,
                                                   _get(ka["CE"], "test/pass@1", S6000))),
    ("C3 frontier: CE best at k = 1", lambda ka, lm, s: _set(ka["DCO 4"], "test/pass@1", S6000,
                                                             _get(ka["CE"], "test/pass@1", S6000) + 0.01)),
    ("C3 frontier: CE best at no k", lambda ka, lm, s: _set(ka["CE"], "test/pass@4", S6000, 0.6)),
    ("C3 frontier: DCO 64 best at k = 64", lambda ka, lm, s: _set(ka["DCO 16"], "test/pass@64", S6000, 0.95)),
    ("C3 frontier: DCO 64 best at k = 256", lambda ka, lm, s: _set(ka["DCO 4"], "test/pass@256", S6000, 0.99)),
    ("C3 frontier: best pass@16", lambda ka, lm, s: _set(ka["DCO 4"], "test/pass@16", S6000, 0.77)),
    ("C4 test max-p", lambda ka, lm, s: _set(ka["DCO 64"], "test/max_p", S6000, 0.6)),
    ("check kanswer", lambda ka, lm, s: s.update(_sampled(offset=0.01))),
    ("check lm", lambda ka, lm, s: s.update(_sampled(offset=0.025))),
    ("C5 addition CE: pass@256", lambda ka, lm, s: _set(lm["CE"], "test/pass@256", LAST, 0.8)),
    ("C5 addition CE: final train", lambda ka, lm, s: _set(lm["CE"], "train/p_hat", LAST, 0.85)),
    ("C6 addition: pass@16", lambda ka, lm, s: _set(lm["DCO 16"], "test/pass@16", LAST, 0.74)),
    ("C6 addition DCO 16: final train", lambda ka, lm, s: _set(lm["DCO 16"], "train/p_hat", LAST, 0.55)),
]  # fmt: skip


def _claim(claims: list, prefix: str):  # noqa: ANN202
    found = [c for c in claims if c.name.removeprefix("info (--quick, one seed; gated on the 3-seed median): ")
             .startswith(prefix)]  # fmt: skip
    assert len(found) == 1, f"{prefix!r}: {[c.name for c in claims]}"
    return found[0]


@pytest.mark.parametrize("quick", [True, False])
def test_claims_hold_on_the_measured_numbers(quick: bool) -> None:
    claims = check_claims(*_inputs(1 if quick else 3), quick=quick)
    assert [c.name for c in claims if c.asserted and not c.holds] == []
    assert len([c for c in claims if c.asserted]) == (15 if quick else 17)


def test_every_asserted_claim_has_a_perturbation() -> None:
    claims = check_claims(*_inputs(3), quick=False)
    covered = {_claim(claims, prefix).name for prefix, _ in PERTURBATIONS}
    assert {c.name for c in claims if c.asserted} <= covered


@pytest.mark.parametrize(("prefix", "perturb"), PERTURBATIONS, ids=[p for p, _ in PERTURBATIONS])
def test_perturbed_numbers_fail_the_claim(prefix: str, perturb: Perturb) -> None:
    """The full protocol (3 seeds, medians): moving the claim's numbers past its threshold fails it, asserted."""
    ka, lm, sampled = _inputs(3)
    before = _claim(check_claims(ka, lm, sampled, quick=False), prefix)
    assert before.holds and before.asserted
    perturb(ka, lm, sampled)
    after = _claim(check_claims(ka, lm, sampled, quick=False), prefix)
    assert after.asserted and not after.holds, (after.name, after.value)


def test_quick_prints_claim_5_as_info_and_gates_the_rest() -> None:
    """`--quick` (card, "What `--quick` gates"): C5 fails on seed 0 without deciding the exit; C6 still gates."""
    ka, lm, sampled = _inputs(1)
    _set(lm["CE"], "test/pass@256", LAST, 0.823)  # the seed-0 CE loss spike: peak 0.975 − 0.823 < 0.2
    _set(lm["CE"], "train/p_hat", LAST, 0.770)
    claims = check_claims(ka, lm, sampled, quick=True)
    c5 = [c for c in claims if "C5" in c.name]
    assert len(c5) == 2 and all(not c.holds and not c.asserted and c.name.startswith("info") for c in c5)
    assert all(c.holds for c in claims if c.asserted)
    full = check_claims(*[{a: h * 3 for a, h in x.items()} for x in (ka, lm)], sampled, quick=False)
    assert all(c.asserted and not c.holds for c in full if "C5" in c.name)  # the same numbers, gated in full
    _set(lm["DCO 16"], "test/pass@16", LAST, 0.70)
    assert not _claim(check_claims(ka, lm, sampled, quick=True), "C6 addition: pass@16").holds


def test_a_dco_that_trains_like_ce_fails_the_rescue_frontier_and_ordering() -> None:
    """A broken implementation: every DCO arm returns CE's numbers (the factor ignored)."""
    ka, lm, sampled = _inputs(3)
    for arm in ("DCO 4", "DCO 16", "DCO 64"):
        ka[arm] = copy.deepcopy(ka["CE"])
    lm["DCO 16"] = copy.deepcopy(lm["CE"])
    failed = {c.name.split(":")[0] for c in check_claims(ka, lm, sampled, quick=False) if c.asserted and not c.holds}
    assert {"C2 K-answer", "C3 frontier", "C4 test max-p CE > DCO4 > DCO16 > DCO64 (1 = yes)",
            "C6 addition", "C6 addition DCO 16"} <= failed  # fmt: skip
