"""Card tests 1-3 and 8: scaling with m, diameter-free regret, no communication, safety (statistical, seeded)."""

from __future__ import annotations

import pytest

from coop_se.helpers import run


@pytest.fixture(scope="module")
def regret() -> dict[str, float]:
    """Mean individual regret (mean over 2 seeds as replicas) at T = 1e4 on the card's arms."""
    out = {}
    for label, alg, graph, m in [
        ("se1", "se", "path", 1),
        ("path4", "coop_se", "path", 4),
        ("path8", "coop_se", "path", 8),
        ("complete8", "coop_se", "complete", 8),
        ("nocomm8", "no_comm", "path", 8),
    ]:
        out[label] = float(run(alg, graph, m, T=10_000, R=2).regret.mean())
    return out


def test_scaling_with_m(regret) -> None:
    """Test 1: Reg(8) < 0.3 Reg(1) and Reg(4)/Reg(8) in [1.5, 2.5] (fails when samples are not shared or are
    double-counted)."""
    assert regret["path8"] < 0.3 * regret["se1"], regret
    assert 1.5 <= regret["path4"] / regret["path8"] <= 2.5, regret


def test_diameter_free(regret) -> None:
    """Test 2: the path (diameter 7) and the complete graph give the same regret within 10% at m=8 (fails when
    messages are not relayed beyond neighbours or the delay is mis-modelled)."""
    assert abs(regret["path8"] - regret["complete8"]) < 0.1 * regret["complete8"], regret


def test_no_communication_is_single_agent(regret) -> None:
    """Test 3: no_comm(8) / se(1) in [0.9, 1.3] (independent agents gain nothing from m)."""
    assert 0.9 <= regret["nocomm8"] / regret["se1"] <= 1.3, regret


@pytest.mark.parametrize(("alg", "m"), [("se", 1), ("coop_se", 4)])
def test_best_arm_never_eliminated(alg: str, m: int) -> None:
    """Test 8: in 20 seeds (replicas) at T = 1e4, c = 2, the best arm stays active for every agent."""
    sim = run(alg, "path", m, T=10_000, R=20)
    assert int(sim.best_elim.sum()) == 0
    assert bool(sim.active[..., 0].all())
    assert int((sim.elim_round[..., 1:] > 0).sum()) > 0  # eliminations did happen (the test is not vacuous)
