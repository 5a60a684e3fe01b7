"""Prompt -> response datasets for causal LMs: the dataset and its right-padding collate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset


class PromptResponseDataset(Dataset):
    """``(prompt ids, response ids)`` pairs; ``answers`` keeps each example's reference string when it has one."""

    def __init__(self, examples: list[tuple[list[int], list[int]]], answers: list[str] | None = None) -> None:
        self.examples, self.answers = examples, answers

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> tuple[list[int], list[int], int]:
        prompt, response = self.examples[i]
        return prompt, response, i


def collate_prompt_response(items: Sequence[tuple[Any, ...]], pad_id: int) -> dict[str, Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 on prompt and padding).

    Items are ``(prompt, response)`` or ``(prompt, response, index)``; with indices the batch also has ``index``
    (the examples' positions in their split, which ``p_source: sampled`` reads).
    """
    length = max(len(it[0]) + len(it[1]) for it in items)
    ids = torch.full((len(items), length), pad_id, dtype=torch.long)
    labels = torch.full((len(items), length), -100, dtype=torch.long)
    attn = torch.zeros((len(items), length), dtype=torch.long)
    out: dict[str, Tensor] = {}
    if all(len(it) == 3 for it in items):
        out["index"] = torch.tensor([it[2] for it in items], dtype=torch.long)
    for row, (p, r, *_) in enumerate(items):
        seq = p + r
        ids[row, : len(seq)] = torch.tensor(seq)
        attn[row, : len(seq)] = 1
        labels[row, len(p) : len(seq)] = torch.tensor(r)
    return {"input_ids": ids, "attention_mask": attn, "labels": labels, **out}
