"""Card test 8: the label-noise contract of ``callbacks.label_noise``."""

from __future__ import annotations

import pytest
import torch

from callbacks.label_noise import LabelNoise, LabelNoiseCallback


def test_values_are_plus_minus_delta_and_fresh_each_step() -> None:
    """Catches noise drawn once (steps identical), wrong amplitude, or a biased coin."""
    noise = LabelNoise(0.5, noise_seed=1000, n_replicas=1)
    y = torch.zeros(1, 20, dtype=torch.float64)
    out = noise.noisy(y, 500)
    assert set(out.unique().tolist()) == {-0.5, 0.5}
    assert not torch.equal(out[0], out[1])
    big = noise.noisy(torch.zeros(1, 10000, dtype=torch.float64), 1)
    assert abs(float(big.mean())) < 0.02 * 0.5


def test_same_seed_same_sequence_and_block_draws_equal_step_draws() -> None:
    """The same noise_seed reproduces the sequence; one (T, n) block equals T one-step draws; replica r = seed + r."""
    y = torch.zeros(3, 7, dtype=torch.float64)
    a = LabelNoise(0.5, noise_seed=5, n_replicas=3).noisy(y, 40)
    b_noise = LabelNoise(0.5, noise_seed=5, n_replicas=3)
    b = torch.cat([b_noise.noisy(y, 1) for _ in range(40)])
    assert torch.equal(a, b)
    alone = LabelNoise(0.5, noise_seed=7, n_replicas=1).noisy(y[:1], 40)
    assert torch.equal(a[:, 2], alone[:, 0])


def test_flip_kind_flips_with_probability_delta() -> None:
    """``flip`` negates ±1 labels with probability δ."""
    y = torch.ones(1, 20000, dtype=torch.float64)
    out = LabelNoise(0.2, kind="flip", noise_seed=0).noisy(y, 1)
    assert set(out.unique().tolist()) == {-1.0, 1.0}
    assert abs(float((out < 0).double().mean()) - 0.2) < 0.01


def test_state_round_trip_resumes_the_stream() -> None:
    """state_dict / load_state_dict continue the same sequence (exact resume)."""
    y = torch.zeros(2, 5, dtype=torch.float64)
    a = LabelNoise(0.5, noise_seed=3, n_replicas=2)
    a.noisy(y, 10)
    state = a.state_dict()
    expected = a.noisy(y, 5)
    b = LabelNoise(0.5, noise_seed=99, n_replicas=2)
    b.load_state_dict(state)
    assert torch.equal(b.noisy(y, 5), expected)


def test_callback_checks_its_values() -> None:
    """A negative δ or a flip probability above 1 is refused, naming the field."""
    with pytest.raises(ValueError, match="LabelNoiseCallback.delta=-1"):
        LabelNoiseCallback(delta=-1.0)
    with pytest.raises(ValueError, match="LabelNoiseCallback.delta=1.5"):
        LabelNoiseCallback(delta=1.5, kind="flip")
