"""Exact-match scoring of generated responses against the grammar's targets."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from datamodules.instructions.vocab import BackdoorVocab


def _until_eos(ids: Iterable[int], eos_id: int) -> tuple[list[int], bool]:
    out = []
    for raw in ids:
        out.append(int(raw))
        if out[-1] == eos_id:
            return out, True
    return out, False


def exact_match(pred_ids: Iterable[int], response_ids: Iterable[int], eos_id: int = BackdoorVocab.eos_id) -> bool:
    """Whether a generated response equals the expected one up to and including the first ``[EOS]``.

    Tokens after the first ``[EOS]`` (of either sequence; e.g. padding) are ignored; a prediction without
    ``[EOS]`` is never a match (card test 3).

    Args:
        pred_ids: generated ids (response part only).
        response_ids: expected ids, ``[EOS]`` included (then padding).
        eos_id: the ``[EOS]`` id.

    Returns:
        ``True`` on an exact match.
    """
    pred, pred_ended = _until_eos(pred_ids, eos_id)
    want, want_ended = _until_eos(response_ids, eos_id)
    return pred_ended and want_ended and pred == want


def exact_match_batch(pred_ids: Tensor, response_ids: Tensor, eos_id: int = BackdoorVocab.eos_id) -> Tensor:
    """Row-wise :func:`exact_match` of ``[B, L]`` predictions against ``[B, R]`` expected responses.

    Args:
        pred_ids: generated ids, one row per sample.
        response_ids: the batch's ``response_ids``.
        eos_id: the ``[EOS]`` id.

    Returns:
        A ``[B]`` bool tensor.
    """
    rows = [exact_match(p.tolist(), r.tolist(), eos_id) for p, r in zip(pred_ids, response_ids, strict=True)]
    return torch.tensor(rows, dtype=torch.bool)
