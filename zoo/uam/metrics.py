"""Unlearning metrics: accuracies and the SVC membership-inference efficacy (SalUn / l1-sparse protocol)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

__all__ = ["label_probabilities", "svc_mia_efficacy"]


@torch.no_grad()
def label_probabilities(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[Tensor, Tensor]:
    """Softmax probability of each sample's own label, and whether the top-1 prediction equals that label.

    Args:
        model: classifier returning logits; evaluated in eval mode (the caller restores the mode).
        loader: ``(x, y)`` batches.
        device: where to run the model.

    Returns:
        ``(p_label (N,), correct (N,) bool)`` on the CPU.
    """
    model.eval()
    probs, correct = [], []
    for x, y in loader:
        logits = model(x.to(device)).float().cpu()
        probs.append(torch.softmax(logits, -1).gather(1, y[:, None]).squeeze(1))
        correct.append(logits.argmax(-1) == y)
    if not probs:
        return torch.zeros(0), torch.zeros(0, dtype=torch.bool)
    return torch.cat(probs), torch.cat(correct)


def svc_mia_efficacy(
    retain_p: Tensor,
    test_p: Tensor,
    forget_p: Tensor,
    seed: int = 0,
    flip_labels: bool = False,
    max_samples: int | None = None,
) -> float:
    """MIA-efficacy: 100 x the fraction of forget samples an SVC classifies as non-members (higher = more forgotten).

    The feature is the softmax probability of the sample's training label. ``SVC(C=3, gamma="auto", kernel="rbf")``
    is fitted on a balanced, seeded subsample of ``n = min(|D_r|, |test|)`` retain samples (members, 1) and ``n``
    test samples (non-members, 0), then predicts the forget samples.

    Args:
        retain_p: label probabilities on the retain set.
        test_p: label probabilities on the test set.
        forget_p: label probabilities on the forget set.
        seed: seed of the subsample.
        flip_labels: swap member and non-member labels (a sanity check: the score then flips).
        max_samples: at most this many members and as many non-members (``None``: ``n`` as above); the SVC's
            fit grows about quadratically with ``n`` (18,000 MNIST samples take seconds per evaluation).

    Returns:
        MIA-efficacy in percent.
    """
    from sklearn.svm import SVC

    n = min(len(retain_p), len(test_p), *(() if max_samples is None else (max_samples,)))
    if n == 0 or len(forget_p) == 0:
        raise ValueError(f"svc_mia_efficacy: needs retain, test and forget samples, got {len(retain_p)}, "
                         f"{len(test_p)}, {len(forget_p)}")  # fmt: skip
    rng = np.random.default_rng(seed)
    members = retain_p.numpy()[rng.choice(len(retain_p), n, replace=False)]
    others = test_p.numpy()[rng.choice(len(test_p), n, replace=False)]
    x = np.concatenate([members, others])[:, None].astype(np.float64)
    y = np.concatenate([np.ones(n), np.zeros(n)])
    if flip_labels:
        y = 1.0 - y
    clf = SVC(C=3, gamma="auto", kernel="rbf").fit(x, y)
    pred = clf.predict(forget_p.numpy()[:, None].astype(np.float64))
    return float(100.0 * (pred == 0).mean())
