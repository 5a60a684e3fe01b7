"""`zoo reproduce adam_sharpness`: the `--quick` run end to end (slow; CI runs it), and every asserted claim can fail.

``check_claims`` gets a healthy made-up result (numbers shaped like the card's reference) that passes every asserted
claim; each perturbation mimics a broken implementation and must make exactly the claims it names fail.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import reproduce_quick

from zoo.adam_sharpness import reproduce as R


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_all_claims(tmp_path: Path) -> None:
    """Exit code 0 with C1 (2), C2 (2), C3 (2), C4 (1) asserted and holding; table, JSON and plots written."""
    reproduce_quick("adam_sharpness", tmp_path, {"C1": 2, "C2": 2, "C3": 2, "C4": 1},
                    ("adam_sharpness_loss.png", "adam_sharpness_sharpness.png"))  # fmt: skip


def _arm(l_half: list[float], mse: list[float], sq: list[float], pre: list[tuple[float, float]]) -> dict:
    return {"metrics": {"l_half": l_half, "test_mse": mse, "l1": [2.0] * 5}, "preconditioner":
            [{"corr": c, "ratio": r} for c, r in pre], "history": [{"step": 50000, "tr_sqrt_diagH": sq,
                                                                  "trH": [5.0] * 5}]}  # fmt: skip


def healthy() -> dict:
    """A result shaped like the card's reference (Adam sparser, lower MSE, v tracking (δ²/n)·diag H)."""
    adam = _arm([2.2, 2.5, 2.6, 2.3, 3.0], [0.002, 0.003, 0.46, 0.001, 0.002], [5.0, 5.5, 5.6, 5.1, 6.0],
                [(0.99, 1.1)] * 5)  # fmt: skip
    sgd = _arm([5.0, 6.0, 7.0, 5.5, 8.0], [0.03, 0.1, 0.48, 0.05, 0.2], [10.0, 12.0, 14.0, 11.0, 16.0], [])
    arms = {"adam": adam, "sgd": sgd, "adam_mini": adam, "adalayer": sgd, "adam δ=0": sgd, "sgd δ=0": sgd}
    return copy.deepcopy(arms)


def _set(arm: str, path: tuple[str, ...], value: object) -> Callable[[dict], None]:
    def apply(arms: dict) -> None:
        target = arms[arm]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


#: perturbation id -> (change, the asserted claim ids that must fail)
PERTURBATIONS = {
    "no_label_noise_same_sparsity": (_set("adam", ("metrics", "l_half"), [5.0, 6.0, 7.0, 5.5, 8.0]), {"C1"}),
    "adam_worse_generalisation": (_set("adam", ("metrics", "test_mse"), [0.05, 0.1, 0.5, 0.05, 0.2]), {"C2"}),
    "summed_gradients_ratio_n2": (_set("adam", ("preconditioner",), [{"corr": 0.99, "ratio": 400.0}] * 5), {"C3"}),
    "noise_drawn_once_uncorrelated": (_set("adam", ("preconditioner",), [{"corr": 0.2, "ratio": 1.0}] * 5), {"C3"}),
    "callback_noisy_labels": (
        _set("adam", ("history",), [{"step": 1, "tr_sqrt_diagH": [20.0] * 5, "trH": [5.0] * 5}]),
        {"C4"},
    ),  # fmt: skip
}


def _failing(arms: dict) -> set[str]:
    return {c.name.split(" ")[0] for c in R.check_claims(arms, quick=True) if c.asserted and not c.holds}


def test_healthy_result_passes() -> None:
    """The made-up healthy result passes every asserted claim (else the perturbations prove nothing)."""
    assert _failing(healthy()) == set()


@pytest.mark.parametrize("case", sorted(PERTURBATIONS))
def test_each_perturbation_fails_its_claims(case: str) -> None:
    """A broken number makes exactly the named claims fail."""
    change, expected = PERTURBATIONS[case]
    arms = healthy()
    change(arms)
    assert _failing(arms) == expected


def test_every_asserted_claim_has_a_perturbation() -> None:
    """A claim family added to the protocol without a perturbation here fails this test."""
    families = {c.name.split(" ")[0] for c in R.check_claims(healthy(), quick=True) if c.asserted}
    assert families == set().union(*(e for _, e in PERTURBATIONS.values()))
