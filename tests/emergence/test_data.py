"""The Gaussian additive-teacher datamodule and its readers: modes, labels, determinism, file formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules.gaussian_teacher.datamodule import GaussianAdditiveTeacherDataModule
from datamodules.gaussian_teacher.readers import from_dataset_npz, from_teacher_npz
from datamodules.gaussian_teacher.teacher import make_teacher
from zoo.emergence.model import teacher_output


def test_population_mode_yields_step_indices_and_the_teacher() -> None:
    """Population: step indices, one teacher per replica seed (teacher_seed + r), shapes linked into the module."""
    dm = GaussianAdditiveTeacherDataModule(d=20, P=3, n_replicas=2, teacher_seed=5)
    assert dm.mode == "population" and (dm.input_dim, dm.n_replicas, dm.P) == (20, 2, 3)
    it = iter(dm.train_dataloader())
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    V, a = make_teacher(20, 3, 1.5, [5, 6])
    torch.testing.assert_close(dm.V, V)
    torch.testing.assert_close(dm.a_star, a)


def test_online_batches_are_fresh_seeded_and_labelled_by_the_teacher() -> None:
    """Online: (chunk, R, B, d) fresh Gaussians with y = f*(x) (+ noise), the same for the same data_seed, different
    across batches: catches a frozen stream or labels from another teacher."""
    kw = {"d": 10, "P": 2, "n_replicas": 2, "online": True, "batch_size": 16, "chunk": 3}
    dm, again = GaussianAdditiveTeacherDataModule(**kw), GaussianAdditiveTeacherDataModule(**kw)
    b0, b1 = dm.batch(0), dm.batch(1)
    assert b0["x"].shape == (3, 2, 16, 10) and b0["y"].shape == (3, 2, 16)
    torch.testing.assert_close(b0["x"], again.batch(0)["x"])
    assert not torch.allclose(b0["x"], b1["x"])
    torch.testing.assert_close(b0["y"][1], teacher_output(dm.V, dm.a_star, b0["x"][1], dm.coeffs))
    noisy = GaussianAdditiveTeacherDataModule(**kw, label_noise_std=0.5).batch(0)
    resid = noisy["y"] - teacher_output(dm.V, dm.a_star, noisy["x"].flatten(0, 0)[0], dm.coeffs)
    assert 0.3 < float(resid[0].std()) < 0.7  # first minibatch's noise has the asked scale


def test_finite_sample_minibatches_come_from_the_sample() -> None:
    """n_train: every minibatch row is a row of the fixed sample; B >= n gives the full batch."""
    dm = GaussianAdditiveTeacherDataModule(d=6, P=2, n_train=40, batch_size=8, chunk=2)
    assert dm.mode == "finite"
    batch = dm.batch(3)
    X = dm.sample["X"][0]
    for row in batch["x"][0, 0]:
        assert bool(((X - row).abs().sum(-1) < 1e-12).any())
    small = GaussianAdditiveTeacherDataModule(d=6, P=2, n_train=5, batch_size=8)
    full = small.batch(0)
    assert full["x"].shape == (1, 1, 5, 6)
    torch.testing.assert_close(full["x"][0], small.sample["X"])
    torch.testing.assert_close(full["y"][0], small.sample["y"])


def test_teacher_npz_round_trip_and_normalize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A generated teacher written as .npz reads back exactly; Σa² ≠ 1 is refused with the deviation, or rescaled
    (and said) with normalize=True."""
    V, a = make_teacher(12, 3, 1.0, [0])
    np.savez(tmp_path / "t.npz", V=V[0].numpy(), a=a[0].numpy())
    V2, a2 = from_teacher_npz(str(tmp_path / "t.npz"))
    torch.testing.assert_close(V2, V[0])
    torch.testing.assert_close(a2, a[0])
    np.savez(tmp_path / "t2.npz", V=V[0].numpy(), a=2 * a[0].numpy())
    with pytest.raises(ValueError, match=r"Σa² = 4 \(deviation 3\)"):
        from_teacher_npz(str(tmp_path / "t2.npz"))
    _, a3 = from_teacher_npz(str(tmp_path / "t2.npz"), normalize=True)
    torch.testing.assert_close(a3, a[0])
    assert "rescaled a by 0.5" in capsys.readouterr().err
    dm = GaussianAdditiveTeacherDataModule(teacher_path=str(tmp_path / "t.npz"), n_replicas=2)
    assert dm.input_dim == 12 and dm.V.shape == (2, 3, 12)


def test_dataset_npz(tmp_path: Path) -> None:
    """A sample .npz (X, y, optional V, a) becomes the finite-mode sample of one replica."""
    V, a = make_teacher(8, 2, 1.5, [0])
    X = torch.randn(30, 8, dtype=torch.float64)
    y = teacher_output(V, a, X.unsqueeze(0), {4: 1.0})[0]
    np.savez(tmp_path / "d.npz", X=X.numpy(), y=y.numpy(), V=V[0].numpy(), a=a[0].numpy())
    blob = from_dataset_npz(str(tmp_path / "d.npz"))
    torch.testing.assert_close(blob["y"], y)
    dm = GaussianAdditiveTeacherDataModule(dataset_path=str(tmp_path / "d.npz"), batch_size=4)
    assert dm.mode == "finite" and dm.input_dim == 8 and dm.n_train == 30 and dm.V.shape == (1, 2, 8)
