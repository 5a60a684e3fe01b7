"""UnlearningDataModule: the forget/retain/test splits of each mode, the phases, and clear errors on bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules.classification.unlearning_datamodule import UnlearningDataModule

torch.set_num_threads(1)


def test_mislabeled_mode_flips_exactly_the_forget_set() -> None:
    """Every forget label differs from its true label, no retain label changed, |D_f| = floor(n/10); catches flips
    that can land on the true class or leak into the retain set."""
    dm = UnlearningDataModule(mode="mislabeled", seed=0)
    x, y_used = dm.split("train")
    _, y_true = dm.split("forget_true")
    _, y_forget = dm.split("forget")
    assert len(y_used) == 1257 and len(y_forget) == 125 and len(dm.split("test")[1]) == 540
    assert bool((y_forget != y_true).all())
    mask = dm._tensor("is_forget")
    assert torch.equal(dm._tensor("y_train")[~mask], dm._tensor("y_true")[~mask])
    assert float(x.max()) <= 1.0 and x.shape[1] == dm.input_dim == 64
    again = UnlearningDataModule(mode="mislabeled", seed=0)
    assert again.split_info()["forget_indices"] == dm.split_info()["forget_indices"]
    assert (
        UnlearningDataModule(mode="mislabeled", seed=1).split_info()["forget_indices"]
        != dm.split_info()["forget_indices"]
    )


def test_classwise_and_random_modes() -> None:
    """Classwise forgets every sample of the class and drops it from the test metrics; random is stratified."""
    cw = UnlearningDataModule(mode="classwise", forget_class=3)
    assert bool((cw.split("forget")[1] == 3).all()) and not bool((cw.split("retain")[1] == 3).any())
    assert not bool((cw.split("test")[1] == 3).any()) and bool((cw.split("test_forget_class")[1] == 3).all())
    rnd = UnlearningDataModule(mode="random", forget_fraction=0.1)
    _, y = rnd.split("forget")
    counts = np.bincount(y.numpy(), minlength=10)
    assert counts.sum() == 125 and counts.max() - counts.min() <= 2


def test_phases_serve_the_right_training_sets() -> None:
    """original = all training data, retrain = retain only, unlearn = {forget, retain} with one retain epoch."""
    dm = UnlearningDataModule(batch_size=64, forget_batch_size=32)
    assert sum(len(b[1]) for b in dm.with_phase("original").train_dataloader()) == 1257
    assert sum(len(b[1]) for b in dm.retrain_oracle().train_dataloader()) == 1257 - 125
    loader = dm.train_dataloader()
    batches = list(iter(loader))
    assert len(batches) == len(dm.retain_dataloader())
    first = batches[0][0] if isinstance(batches[0], tuple) else batches[0]
    assert set(first) == {"forget", "retain"} and len(first["forget"][1]) == 32 and len(first["retain"][1]) == 64


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"source": "imagenet"}, "source='imagenet'"),
        ({"mode": "boundary"}, "mode='boundary'"),
        ({"source": "cifar10"}, "set --data.init_args.path"),
        ({"forget_fraction": 1.5}, "forget_fraction=1.5"),
        ({"mode": "classwise", "forget_class": 12}, "forget_class=12"),
        ({"phase": "eval"}, "phase='eval'"),
        ({"batch_size": 0}, "--data.init_args.batch_size=0: expected an integer >= 1"),
        ({"forget_batch_size": True}, "--data.init_args.forget_batch_size=True: expected an integer >= 1"),
        ({"test_fraction": 0.0}, r"--data.init_args.test_fraction=0.0: expected a number in \(0, 1\)"),
        ({"max_train": 0}, "--data.init_args.max_train=0: expected an integer >= 1"),
        ({"seed": -1}, "--data.init_args.seed=-1: expected an integer >= 0"),
    ],
)
def test_bad_settings_name_the_flag(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        UnlearningDataModule(**kwargs)


def test_real_cifar_folder_flows_through(tmp_path: Path) -> None:
    """A tiny synthesized CIFAR-10 folder is read, normalised and flattened to 3072 features; a malformed batch
    raises naming the file."""
    import pickle

    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = {b"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), b"labels": list(range(10)) * 2}
        (root / name).write_bytes(pickle.dumps(data))
    (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": [f"c{i}".encode() for i in range(10)]}))
    dm = UnlearningDataModule(source="cifar10", path=str(tmp_path), mode="random", forget_fraction=0.1)
    x, y = dm.split("train")
    assert x.shape == (100, 3072) and dm.input_dim == 3072 and len(dm.split("forget")[1]) == 10
    (root / "data_batch_2").write_bytes(pickle.dumps({b"labels": [0]}))
    with pytest.raises(ValueError, match="data_batch_2"):
        UnlearningDataModule(source="cifar10", path=str(tmp_path)).setup()


def test_options_the_source_would_ignore_are_an_error(tmp_path: Path) -> None:
    """Issue #19: `path` with digits/mnist and `label: coarse` with anything but CIFAR-100 used to be ignored (a user
    pointing at their own folder trained on sklearn digits); both now name the option and the source."""
    with pytest.raises(ValueError, match=r"--data.init_args.path='.*': expected null for source=digits"):
        UnlearningDataModule(source="digits", path=str(tmp_path))
    with pytest.raises(ValueError, match=r"--data.init_args.label='coarse': expected 'fine' for source=cifar10"):
        UnlearningDataModule(source="cifar10", path=str(tmp_path), label="coarse")


def test_a_forget_fraction_that_selects_nothing_fails_at_setup() -> None:
    """floor(1257 * 0.0005) = 0: the empty forget set used to surface in train_dataloader, after the callback had
    trained the original for 120 epochs; setup (which Lightning runs before any callback trains) now names it."""
    dm = UnlearningDataModule(mode="random", forget_fraction=0.0005)
    with pytest.raises(ValueError, match=r"forget_fraction=0.0005: expected a fraction selecting at least 1 of the "
                                         r"1257 training samples"):  # fmt: skip
        dm.setup()


class _Untouchable:
    """A stand-in for the dataset's test arrays that fails on any use (the validation problem must never read it)."""

    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"the test split was read ({name})")

    def __len__(self) -> int:
        raise AssertionError("the test split was read (len)")

    def __getitem__(self, key: object) -> None:
        raise AssertionError("the test split was read (index)")


def _poisoned_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve digits' training pool with an untouchable test split."""
    real = UnlearningDataModule._load

    def load(self: UnlearningDataModule) -> tuple:
        train, _ = real(self)
        return train, (_Untouchable(), _Untouchable())

    monkeypatch.setattr(UnlearningDataModule, "_load", load)


@pytest.mark.parametrize("mode", ["mislabeled", "random", "classwise"])
def test_validation_problem_reads_only_the_training_pool(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """``holdout: validation`` (issue #21, the data a rho or gamma_0 choice may read): a stratified fifth of the
    training pool is its evaluation split, forget and retain come from the rest, the test split is never read
    (an untouchable stand-in) and the default split is unchanged. Catches a choice that evaluates on the test split
    (the old protocol had no validation data at all)."""
    default = UnlearningDataModule(mode=mode)
    before = default.split_info()
    _poisoned_load(monkeypatch)
    with pytest.raises(AssertionError, match="test split was read"):  # the stand-in does catch a read
        UnlearningDataModule(mode=mode).setup()
    val = UnlearningDataModule(mode=mode).validation_problem()
    assert val.holdout == "validation" and val.mode == mode
    val.setup()
    x_val, y_val = val.split("test")
    x_train, _ = val.split("train")
    n_pool = 1257
    assert len(x_train) + len(y_val) + len(val.split("test_forget_class")[1]) == n_pool
    assert abs(len(x_train) - 0.8 * n_pool) <= 1
    pool = {tuple(r) for r in default.split("train")[0].tolist()}
    assert all(tuple(r) in pool for r in [*x_val.tolist(), *x_train.tolist()])  # all drawn from the training pool
    for loader in val.eval_dataloaders().values():  # every evaluation loader runs without touching the test split
        assert sum(len(b[1]) for b in loader) > 0
    monkeypatch.undo()
    assert UnlearningDataModule(mode=mode).split_info() == before  # the default split is unchanged
    with pytest.raises(ValueError, match="holdout='dev'"):
        UnlearningDataModule(holdout="dev")  # type: ignore[arg-type]


def _idx_folder(root: Path, train: np.ndarray, test: np.ndarray, seed: int = 0) -> str:
    """An MNIST-style IDX folder holding ``train``/``test`` uint8 images (N, 28, 28) with seeded labels."""
    import struct

    root.mkdir()
    labels = np.random.default_rng(seed)
    for stem, images in (("train", train), ("t10k", test)):
        for kind, a in (("images-idx3", images), ("labels-idx1", labels.integers(0, 10, len(images), dtype=np.uint8))):
            header = bytes([0, 0, 0x08, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape)
            (root / f"{stem}-{kind}-ubyte").write_bytes(header + a.tobytes())
    return str(root)


def test_idx_centering_makes_an_inverted_folder_the_same_problem(tmp_path: Path) -> None:
    """Issue #21, 8(b): ``input_norm: auto`` centres the 784-pixel sources on the training pool's per-pixel mean, so
    an inverted folder (255 - pixels) gives exactly the negated features of the plain one (the same problem for a
    sign-symmetric MLP; uncentred, its input energy was ~8x MNIST's and the default run diverged). The test split is
    shifted by the *training* mean, the validation problem by its own training part's mean, ``none`` keeps
    pixels / 255 and digits stays as the card has it. Catches a mean taken over the test split, a per-split mean, or
    centering that leaks into digits."""
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, (60, 28, 28), dtype=np.uint8)
    train[:, :4] = 0  # a dark border, as MNIST's
    test = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
    plain = _idx_folder(tmp_path / "plain", train, test)
    inverted = _idx_folder(tmp_path / "inverted", 255 - train, 255 - test)
    kw = {"source": "idx", "mode": "random"}
    a, b = UnlearningDataModule(path=plain, **kw), UnlearningDataModule(path=inverted, **kw)
    assert a.input_norm == "center" and a.split_info()["input_norm"] == "center"
    for split in ("train", "test", "forget", "retain"):
        np.testing.assert_allclose(a.split(split)[0].numpy(), -b.split(split)[0].numpy(), atol=1e-6)
    x_train, x_test = a.split("train")[0].numpy(), a.split("test")[0].numpy()
    mean = train.reshape(60, -1).astype(np.float64).mean(0) / 255
    np.testing.assert_allclose(x_train.mean(0), 0.0, atol=1e-6)
    np.testing.assert_allclose(x_test, test.reshape(20, -1) / 255 - mean, atol=1e-6)  # the training mean
    assert abs(x_test.mean()) > 1e-3  # ... not the test split's own
    raw = UnlearningDataModule(path=plain, input_norm="none", **kw)
    np.testing.assert_allclose(raw.split("test")[0].numpy(), test.reshape(20, -1) / 255, atol=1e-6)
    val = UnlearningDataModule(path=plain, holdout="validation", **kw)
    np.testing.assert_allclose(val.split("train")[0].numpy().mean(0), 0.0, atol=1e-6)
    digits = UnlearningDataModule()
    assert digits.input_norm == "none" and float(digits.split("train")[0].min()) == 0.0
    with pytest.raises(ValueError, match=r"--data.init_args.input_norm='standard': expected one of 'auto', 'center'"):
        UnlearningDataModule(input_norm="standard")  # type: ignore[arg-type]
