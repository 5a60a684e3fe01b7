"""Card test 9: the seeded generator and the on-disk readers (one-line errors naming both shapes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datamodules.sparse_regression.datamodule import SparseRegressionDataModule
from datamodules.sparse_regression.readers import from_csv, from_npz
from datamodules.sparse_regression.synthetic import MIN_ABS, sparse_problem


@pytest.mark.parametrize("seed", range(20))
def test_w_star_is_k_sparse_with_large_values(seed: int) -> None:
    """Exactly k non-zeros, each |value| ≥ 1e-2; labels are clean (y = Z w*); inputs are ±1."""
    p = sparse_problem(40, 3, 20, 100, "rademacher", seed)
    nz = p["w_star"][p["w_star"] != 0]
    assert nz.size == 3 and np.abs(nz).min() >= MIN_ABS
    assert np.array_equal(p["y"], p["Z"] @ p["w_star"]) and set(np.unique(p["Z"])) == {-1.0, 1.0}


def test_same_seed_same_data_and_replicas_use_seed_plus_r() -> None:
    """Replica r of the datamodule is the problem drawn from ``seed + r``."""
    dm = SparseRegressionDataModule(d=12, k=2, n=5, n_test=30, seed=3, n_replicas=3)
    dm.setup()
    p = sparse_problem(12, 2, 5, 30, "rademacher", 5)
    assert np.array_equal(dm.train[0][2].numpy(), p["Z"]) and np.array_equal(dm.test[2][2].numpy(), p["w_star"])


def test_npz_rejects_mismatched_shapes_naming_both(tmp_path: Path) -> None:
    """Card: 'Z has 19 rows but y has 20'."""
    path = tmp_path / "bad.npz"
    np.savez(path, Z=np.ones((19, 4)), y=np.ones(20))
    with pytest.raises(ValueError, match=r"bad.npz: Z has 19 rows but y has 20$"):
        from_npz(str(path))


def test_npz_without_test_set_uses_w_star_or_holds_out(tmp_path: Path) -> None:
    """No test set: fresh inputs labelled by w* when given, else a seeded 20% hold-out of the rows."""
    p = sparse_problem(8, 2, 10, 5, "rademacher", 0)
    np.savez(tmp_path / "w.npz", Z=p["Z"], y=p["y"], w_star=p["w_star"])
    np.savez(tmp_path / "h.npz", Z=p["Z"], y=p["y"])
    dm = SparseRegressionDataModule(path=str(tmp_path / "w.npz"), n_test=50)
    dm.setup()
    Zt, yt, w = dm.test
    assert Zt.shape == (1, 50, 8) and np.allclose((Zt[0] @ w[0]).numpy(), yt[0].numpy())
    dm = SparseRegressionDataModule(path=str(tmp_path / "h.npz"))
    dm.setup()
    assert dm.train[0].shape == (1, 8, 8) and dm.test[0].shape == (1, 2, 8) and np.isnan(dm.test[2].numpy()).all()


def test_csv_round_trip_and_column_errors(tmp_path: Path) -> None:
    """Columns z_0 … z_{d-1}, y; a missing or extra column is named."""
    p = sparse_problem(3, 1, 4, 5, "gaussian", 0)
    header = "z_0,z_1,z_2,y\n"
    rows = "".join(",".join(f"{v:.17g}" for v in (*z, t)) + "\n" for z, t in zip(p["Z"], p["y"], strict=True))
    (tmp_path / "ok.csv").write_text(header + rows)
    got = from_csv(str(tmp_path / "ok.csv"))
    assert np.array_equal(got["Z"], p["Z"]) and np.array_equal(got["y"], p["y"])
    (tmp_path / "gap.csv").write_text("z_0,z_2,y\n1,2,3\n")
    with pytest.raises(ValueError, match=r"missing \['z_1'\]; extra \['z_2'\]"):
        from_csv(str(tmp_path / "gap.csv"))
