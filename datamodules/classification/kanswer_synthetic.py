"""The K-answer teacher generator of the dco card: features and labels from seeds."""

from __future__ import annotations

import numpy as np


def kanswer_data(seed: int, n_train: int = 600, n_test: int = 2000, n_val: int = 500, input_dim: int = 10,
                 teacher_hidden: int = 64, num_classes: int = 100, num_features: int = 300,
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """Features and labels of every split (float32 ``[n, num_features]``, int64 ``[n]``), all from ``seed``.

    Draw order: ``W1``, ``W2``, ``R``, then the train, test and validation inputs.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((input_dim, teacher_hidden))
    w2 = rng.standard_normal((teacher_hidden, num_classes))
    r = rng.standard_normal((input_dim, num_features)) / np.sqrt(input_dim)
    xs = {name: rng.standard_normal((n, input_dim)) for name, n in (("train", n_train), ("test", n_test),
                                                                     ("val", n_val))}  # fmt: skip
    feats = {k: np.maximum(x @ r, 0.0) for k, x in xs.items()}
    mean, std = feats["train"].mean(0), feats["train"].std(0)
    std = np.where(std > 0, std, 1.0)  # a feature dead on every training point stays 0
    return {k: (((f - mean) / std).astype(np.float32), np.argmax(np.tanh(xs[k] @ w1) @ w2, axis=1).astype(np.int64))
            for k, f in feats.items()}  # fmt: skip
