"""On-disk formats of the Gaussian additive teacher: a teacher ``.npz`` (V, a) and a dataset ``.npz`` (X, y)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from zoo.core.messages import say


def _load(path: str, option: str, keys: str) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{option}={path!r}: no such file (expected an .npz with keys {keys})")
    if not zipfile.is_zipfile(p):
        raise ValueError(f"{path}: not an .npz archive (no zip header); write it with numpy.savez")
    with np.load(p, allow_pickle=False) as blob:
        return {k: blob[k] for k in blob.files}


def _real(path: str, key: str, value: np.ndarray, ndim: int, shape: str) -> np.ndarray:
    if value.dtype.kind not in "fiu":
        raise ValueError(f"{path}: key {key!r} has dtype {value.dtype}; expected real numbers")
    if value.ndim != ndim:
        raise ValueError(f"{path}: key {key!r} has shape {value.shape}; expected {shape}")
    if not np.isfinite(value).all():
        raise ValueError(f"{path}: key {key!r} has a non-finite value")
    return value.astype(np.float64)


def check_teacher(path: str, V: np.ndarray, a: np.ndarray, normalize: bool = False) -> tuple[Tensor, Tensor]:
    """Validate V (P×d, orthonormal rows to 1e-6) and a (P,, a >= 0, Σa² = 1 to 1e-6; ``normalize`` rescales a)."""
    V = _real(path, "V", V, 2, "(P, d)")
    a = _real(path, "a", a, 1, "(P,)")
    if a.shape[0] != V.shape[0]:
        raise ValueError(f"{path}: key 'a' has shape {a.shape}; expected ({V.shape[0]},) to match V (P, d)")
    if V.shape[0] > V.shape[1]:
        raise ValueError(f"{path}: key 'V' has shape {V.shape}: P > d rows cannot be orthonormal")
    dev = float(np.abs(V @ V.T - np.eye(V.shape[0])).max())
    if dev >= 1e-6:
        raise ValueError(f"{path}: rows of 'V' are not orthonormal: max |VVᵀ − I| = {dev:.3g}; expected < 1e-6")
    if (a < 0).any():
        raise ValueError(
            f"{path}: key 'a' has a negative entry at p={int(np.argmin(a))}: {a.min():.4g}; expected a >= 0"
        )
    norm = float((a**2).sum())
    if abs(norm - 1) >= 1e-6:
        if not normalize:
            raise ValueError(f"{path}: Σa² = {norm:.6g} (deviation {abs(norm - 1):.3g}); expected 1 within 1e-6 "
                             "(or set normalize: true)")  # fmt: skip
        say(f"{path}: Σa² = {norm:.6g}; rescaled a by {1 / np.sqrt(norm):.6g} (normalize: true)")
        a = a / np.sqrt(norm)
    return torch.from_numpy(V), torch.from_numpy(a)


def from_teacher_npz(path: str, normalize: bool = False, option: str = "teacher_path") -> tuple[Tensor, Tensor]:
    """Read a teacher: keys ``V`` (P×d, orthonormal rows) and ``a`` (P,); returns float64 (V, a)."""
    blob = _load(path, option, "V (P×d), a (P,)")
    for key in ("V", "a"):
        if key not in blob:
            raise ValueError(f"{path}: missing key {key!r}; found {sorted(blob)}, expected V (P×d), a (P,)")
    return check_teacher(path, blob["V"], blob["a"], normalize)


def from_dataset_npz(path: str, option: str = "dataset_path") -> dict[str, Tensor]:
    """Read a sample: keys ``X`` (n×d) and ``y`` (n,), optional ``V``, ``a`` (a teacher, for overlap metrics)."""
    blob = _load(path, option, "X (n×d), y (n,), optional V, a")
    for key in ("X", "y"):
        if key not in blob:
            raise ValueError(f"{path}: missing key {key!r}; found {sorted(blob)}, expected X (n×d), y (n,)")
    if unknown := sorted(set(blob) - {"X", "y", "V", "a"}):
        raise ValueError(f"{path}: unknown key(s) {unknown}; expected X, y and optional V, a")
    X = _real(path, "X", blob["X"], 2, "(n, d)")
    y = _real(path, "y", blob["y"], 1, "(n,)")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"{path}: key 'y' has shape {y.shape}; expected ({X.shape[0]},) to match X (n, d)")
    out = {"X": torch.from_numpy(X), "y": torch.from_numpy(y)}
    if ("V" in blob) != ("a" in blob):
        raise ValueError(f"{path}: has {'V' if 'V' in blob else 'a'} without {'a' if 'V' in blob else 'V'}; "
                         "a teacher needs both")  # fmt: skip
    if "V" in blob:
        V, a = check_teacher(path, blob["V"], blob["a"])
        if V.shape[1] != X.shape[1]:
            raise ValueError(f"{path}: key 'V' has shape {tuple(V.shape)}; expected (P, {X.shape[1]}) to match X")
        out["V"], out["a"] = V, a
    return out
