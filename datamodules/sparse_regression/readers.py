"""On-disk sparse-regression data: ``.npz`` (keys Z, y, optional w_star, Z_test, y_test) or CSV (z_0..z_{d-1}, y).

Every problem is one line naming the file, the key or column, what was expected and what was found. Nothing is coerced,
dropped or clipped.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

REQUIRED, OPTIONAL = ("Z", "y"), ("w_star", "Z_test", "y_test")


def _real(path: str, key: str, a: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "fiub" or a.dtype.kind == "b":
        raise ValueError(f"{path}: key {key!r} has dtype {a.dtype}; expected real numbers")
    if not np.isfinite(a).all():
        raise ValueError(f"{path}: key {key!r} has a non-finite value at index "
                         f"{tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])}")  # fmt: skip
    return a.astype(np.float64)


def check_arrays(path: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validate keys, dtypes, finiteness and shapes; return float64 arrays."""
    if missing := [k for k in REQUIRED if k not in arrays]:
        raise ValueError(f"{path}: missing key(s) {missing}; found {sorted(arrays)}, expected Z (n×d), y (n,) and "
                         "optional w_star (d,), Z_test, y_test")  # fmt: skip
    if unknown := sorted(set(arrays) - set(REQUIRED) - set(OPTIONAL)):
        raise ValueError(f"{path}: unknown key(s) {unknown}; expected Z, y, w_star, Z_test, y_test")
    out = {k: _real(path, k, np.asarray(v)) for k, v in arrays.items()}
    Z, y = out["Z"], out["y"]
    if Z.ndim != 2 or Z.shape[0] < 1 or Z.shape[1] < 1:
        raise ValueError(f"{path}: Z has shape {Z.shape}; expected (n, d) with n, d >= 1")
    if y.ndim != 1:
        raise ValueError(f"{path}: y has shape {y.shape}; expected (n,) = ({Z.shape[0]},)")
    if y.shape[0] != Z.shape[0]:
        raise ValueError(f"{path}: Z has {Z.shape[0]} rows but y has {y.shape[0]}")
    d = Z.shape[1]
    if "w_star" in out and out["w_star"].shape != (d,):
        raise ValueError(f"{path}: w_star has shape {out['w_star'].shape}; expected ({d},) to match Z {Z.shape}")
    if ("Z_test" in out) != ("y_test" in out):
        raise ValueError(f"{path}: Z_test and y_test come together; found only "
                         f"{'Z_test' if 'Z_test' in out else 'y_test'}")  # fmt: skip
    if "Z_test" in out:
        Zt, yt = out["Z_test"], out["y_test"]
        if Zt.ndim != 2 or Zt.shape[1] != d:
            raise ValueError(f"{path}: Z_test has shape {Zt.shape}; expected (m, {d}) to match Z {Z.shape}")
        if yt.shape != (Zt.shape[0],):
            raise ValueError(f"{path}: Z_test has {Zt.shape[0]} rows but y_test has shape {yt.shape}")
    return out


def from_npz(path: str) -> dict[str, np.ndarray]:
    """Read and validate an ``.npz`` problem."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such file (expected an .npz with keys Z, y and optional w_star, Z_test, y_test)")
    if not zipfile.is_zipfile(p):
        raise ValueError(f"{path}: not an .npz archive (no zip header); write it with numpy.savez")
    with np.load(p, allow_pickle=False) as blob:
        arrays = {k: blob[k] for k in blob.files}
    return check_arrays(path, arrays)


def from_csv(path: str) -> dict[str, np.ndarray]:
    """Read a CSV with header ``z_0, …, z_{d-1}, y`` (one row per sample) and validate it."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such file (expected a CSV with columns z_0 … z_(d-1), y)")
    frame = pd.read_csv(p)
    cols = list(frame.columns)
    if "y" not in cols:
        raise ValueError(f"{path}: missing column 'y'; expected columns z_0 … z_(d-1), y")
    zs = [c for c in cols if c != "y"]
    d = len(zs)
    expected = [f"z_{i}" for i in range(d)]
    if zs != expected:
        missing = sorted(set(expected) - set(zs), key=lambda c: int(c[2:]))
        extra = [c for c in zs if c not in expected]
        what = f"missing {missing}" if missing else ""
        what += ("; " if what and extra else "") + (f"extra {extra}" if extra else "")
        raise ValueError(f"{path}: columns {what or 'out of order'}; expected z_0 … z_{d - 1}, y")
    return check_arrays(path, {"Z": frame[zs].to_numpy(), "y": frame["y"].to_numpy()})


def load(path: str) -> dict[str, np.ndarray]:
    """Dispatch on the suffix: ``.npz`` or ``.csv``."""
    if path.endswith(".npz"):
        return from_npz(path)
    if path.endswith(".csv"):
        return from_csv(path)
    raise ValueError(f"--data.init_args.path={path!r}: expected a .npz or .csv file")
