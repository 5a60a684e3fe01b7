"""Gaussian additive-teacher data (``emergence``): x ~ N(0, I_d), y = Σ_p a_p σ(⟨x, v_p⟩) with Hermite σ."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``datamodules.gaussian_teacher.GaussianAdditiveTeacherDataModule`` (the card's path), imported on demand."""
    if name == "GaussianAdditiveTeacherDataModule":
        from datamodules.gaussian_teacher.datamodule import GaussianAdditiveTeacherDataModule

        return GaussianAdditiveTeacherDataModule
    raise AttributeError(f"module 'datamodules.gaussian_teacher' has no attribute {name!r}")
