"""``GaussianAdditiveTeacherDataModule``: the additive Hermite teacher, exact (population) or sampled.

Teacher f*(x) = Σ_p a*_p·σ(⟨x, v_p⟩), x ~ N(0, I_d), V orthonormal (QR, ``teacher_seed + r`` for replica r), a*_p ∝
p^(−β) with Σa*² = 1 (``teacher.py``), σ a normalised Hermite activation (``hermite.py``). Three modes:

- population (``online: false``, ``n_train: null``): the loader yields step indices; the module uses the teacher
  (``V``, ``a_star``) analytically;
- online (``online: true``): every batch holds ``chunk`` fresh minibatches x (chunk, R, B, d), y (chunk, R, B) drawn
  from a generator seeded by ``(data_seed, batch index)``;
- finite (``n_train: int``): a fixed sample of n_train points per replica (``data_seed``), minibatches of B drawn with
  replacement from it (``B >= n_train``: the full batch).

``teacher_path`` reads a teacher ``.npz`` (V, a; one replica teacher for all), ``dataset_path`` a sample ``.npz`` (X, y,
optional V, a; ``n_replicas`` must be 1), see ``readers.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from datamodules.gaussian_teacher.hermite import ACTIVATIONS, Activation, check_mix, coefficients, sigma
from datamodules.gaussian_teacher.readers import from_dataset_npz, from_teacher_npz
from datamodules.gaussian_teacher.teacher import make_teacher
from zoo.core import checks
from zoo.core.datamodule import ZooDataModule


def teacher_labels(V: Tensor, a: Tensor, x: Tensor, coeffs: dict[int, float]) -> Tensor:
    """f*(x) for x (..., R, B, d), V (R, P, d), a (R, P) -> (..., R, B)."""
    return (sigma(torch.einsum("...rbd,rpd->...rbp", x, V), coeffs) * a.unsqueeze(-2)).sum(-1)


class _Stream(IterableDataset):
    """Endless batches: step indices (population) or chunks of minibatches (online / finite sample)."""

    def __init__(self, dm: GaussianAdditiveTeacherDataModule) -> None:
        self.dm = dm

    def __iter__(self) -> Iterator[Any]:
        for i in itertools.count():
            yield self.dm.batch(i)


class GaussianAdditiveTeacherDataModule(ZooDataModule):
    """Gaussian inputs and an additive power-law Hermite teacher (card ``emergence``, "Data").

    Args:
        d: input dimension (linked into the module as ``input_dim``).
        P: number of teacher directions.
        beta: power-law exponent β of a*_p ∝ p^(−β).
        activation: ``he4`` (He₄/√24), ``he6``, ``hermite_mix`` (``mix_coeffs``) or ``raw_z4`` (z⁴/√105, the
            information-exponent ablation).
        mix_coeffs: c_k on h_k = He_k/√k!, index = degree (``hermite_mix`` only; odd degrees 0).
        teacher_seed: replica r draws V from ``teacher_seed + r``.
        n_replicas: R, teachers/students side by side (seeds vectorised; linked into the module).
        online: fresh Gaussian minibatches instead of the exact population loss.
        batch_size: B, minibatch size (online and finite modes).
        chunk: minibatches per loader batch (online and finite modes; the module takes one step per minibatch).
        n_train: a fixed sample of this many points per replica (``null``: online or population).
        label_noise_std: standard deviation of Gaussian noise added to y (online and finite modes).
        data_seed: seed of the sampled inputs and noise.
        teacher_path: a teacher ``.npz`` (keys V (P×d), a (P,)) instead of the generated one.
        dataset_path: a sample ``.npz`` (keys X (n×d), y (n,), optional V, a); finite mode on that sample.
        normalize: rescale a file teacher's a to Σa² = 1 (said) instead of refusing it.
    """

    def __init__(self, d: int = 400, P: int = 8, beta: float = 1.5, activation: Activation = "he4",
                 mix_coeffs: list[float] | None = None, teacher_seed: int = 0, n_replicas: int = 1,
                 online: bool = False, batch_size: int = 256, chunk: int = 1, n_train: int | None = None,
                 label_noise_std: float = 0.0, data_seed: int = 0, teacher_path: str | None = None,
                 dataset_path: str | None = None, normalize: bool = False) -> None:  # fmt: skip
        super().__init__()
        checks.integer(checks.data("d"), d)
        checks.integer(checks.data("P"), P)
        checks.non_negative(checks.data("beta"), beta)
        checks.choice(checks.data("activation"), activation, ACTIVATIONS)
        if activation == "hermite_mix":
            check_mix(checks.data("mix_coeffs"), mix_coeffs)
        checks.integer(checks.data("teacher_seed"), teacher_seed, low=0)
        checks.integer(checks.data("n_replicas"), n_replicas)
        checks.integer(checks.data("batch_size"), batch_size)
        checks.integer(checks.data("chunk"), chunk)
        checks.optional_integer(checks.data("n_train"), n_train)
        checks.non_negative(checks.data("label_noise_std"), label_noise_std)
        checks.integer(checks.data("data_seed"), data_seed, low=0)
        if P > d and teacher_path is None and dataset_path is None:
            checks.fail(checks.data("P"), P, f"an integer <= d={d} (orthonormal directions)")
        if online and n_train is not None:
            raise ValueError("--data.init_args.online=true with n_train: choose fresh samples (online) or a fixed "
                             "sample (n_train), not both")  # fmt: skip
        if teacher_path is not None and dataset_path is not None:
            raise ValueError("--data.init_args.teacher_path and dataset_path: give one (a dataset may carry V, a)")
        self.coeffs = coefficients(activation, mix_coeffs)
        self.activation, self.mix_coeffs = activation, mix_coeffs
        self.online, self.batch_size, self.chunk, self.n_train = online, batch_size, chunk, n_train
        self.label_noise_std, self.data_seed = float(label_noise_std), data_seed
        self.sample: dict[str, Tensor] | None = None
        self.V: Tensor | None
        self.a_star: Tensor | None
        if dataset_path is not None:
            if n_replicas != 1:
                checks.fail(checks.data("n_replicas"), n_replicas, "1 with dataset_path (one sample on disk)")
            blob = from_dataset_npz(dataset_path, checks.data("dataset_path"))
            self.sample = {"X": blob["X"].unsqueeze(0), "y": blob["y"].unsqueeze(0)}
            self.V = blob["V"].unsqueeze(0) if "V" in blob else None
            self.a_star = blob["a"].unsqueeze(0) if "a" in blob else None
            d, self.n_train = int(blob["X"].shape[1]), int(blob["X"].shape[0])
        elif teacher_path is not None:
            V, a = from_teacher_npz(teacher_path, normalize, checks.data("teacher_path"))
            self.V, self.a_star = V.expand(n_replicas, *V.shape).clone(), a.expand(n_replicas, *a.shape).clone()
            d = int(V.shape[1])
        else:
            self.V, self.a_star = make_teacher(d, P, beta, [teacher_seed + r for r in range(n_replicas)])
        self.d, self.P = d, (None if self.V is None else int(self.V.shape[1]))
        #: Linked into the module's ``input_dim`` and ``n_replicas``.
        self.input_dim, self.n_replicas = d, n_replicas
        if self.sample is None and n_train is not None:
            gen = torch.Generator().manual_seed(data_seed)
            X = torch.randn(n_replicas, n_train, d, generator=gen, dtype=torch.float64)
            y = teacher_labels(self.V, self.a_star, X, self.coeffs)
            self.sample = {"X": X, "y": y + self.label_noise_std * torch.randn(y.shape, generator=gen, dtype=y.dtype)}

    @property
    def mode(self) -> str:
        """``population``, ``online`` or ``finite``."""
        return "online" if self.online else ("finite" if self.sample is not None else "population")

    def batch(self, i: int) -> Any:
        """Loader batch ``i``: the step index (population) or ``{"x": (chunk, R, B, d), "y": (chunk, R, B)}``."""
        if self.mode == "population":
            return torch.tensor(i, dtype=torch.int64)
        gen = torch.Generator().manual_seed(self.data_seed * 1_000_003 + i + 1)
        R, B = self.n_replicas, self.batch_size
        if self.mode == "online":
            x = torch.randn(self.chunk, R, B, self.d, generator=gen, dtype=torch.float64)
            y = teacher_labels(self.V, self.a_star, x, self.coeffs)
            if self.label_noise_std > 0:
                y = y + self.label_noise_std * torch.randn(y.shape, generator=gen, dtype=y.dtype)
            return {"x": x, "y": y}
        X, y = self.sample["X"], self.sample["y"]
        n = X.shape[1]
        if B >= n:
            return {"x": X.expand(self.chunk, *X.shape), "y": y.expand(self.chunk, *y.shape)}
        idx = torch.randint(0, n, (self.chunk, R, B), generator=gen)
        rows = torch.arange(R).view(1, R, 1)
        return {"x": X[rows, idx], "y": y[rows, idx]}

    def train_dataloader(self) -> DataLoader:
        """Endless batches (the run's length is ``trainer.max_steps``)."""
        return DataLoader(_Stream(self), batch_size=None, num_workers=0)
