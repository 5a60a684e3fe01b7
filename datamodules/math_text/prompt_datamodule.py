"""Evaluation prompts for MoE-CAP (card ``moe_cap``, "Data"): the embedded ``arith_em`` task or a GSM8K-style JSONL.

``path=None`` (default) draws the card's ``arith_em`` items: ``"Q: {a}{op}{b}=? A:"`` with gold ``str(a op b)``, a and b
uniform in ``[0, 10**digits)`` (:func:`arith_em_items`). ``path=`` reads one JSON object per line with a question and
a GSM8K answer (``... #### 72``); the prompt is ``template`` with ``{q}`` replaced by the question and the gold is the
text after the last ``####`` (:func:`read_gsm8k_jsonl`).

Items are ``{"prompt": str, "gold": str}``; batches are
``{"prompt": list[str], "gold": list[str], "index": LongTensor}`` (``index``: position in the split). Validation, test
and predict serve the evaluation items in order; training (for ``zoo fit``, which trains the LM loss on answer tokens)
serves the training items in a seeded per-epoch shuffle. Tokenisation is the module's job
(:func:`zoo.moe_cap.tokenizer.char_tokenizer` or a local folder's tokenizer).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.math_text.arith_em import _check_arith, arith_em_splits
from datamodules.math_text.gsm8k import read_gsm8k_jsonl
from zoo.core import checks
from zoo.core.datamodule import SplitLoaders, ZooDataModule
from zoo.core.messages import say


class _Items(Dataset):
    """A list of items; ``__getitem__`` returns ``(index, item)``."""

    def __init__(self, items: list[dict[str, str]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[int, dict[str, str]]:
        return i, self.items[i]


def collate_prompts(batch: Sequence[tuple[int, dict[str, str]]]) -> dict[str, Any]:
    """``[(index, item), ...]`` -> ``{"prompt": list[str], "gold": list[str], "index": LongTensor}``."""
    return {
        "prompt": [item["prompt"] for _, item in batch],
        "gold": [item["gold"] for _, item in batch],
        "index": torch.tensor([i for i, _ in batch], dtype=torch.long),
    }


class MoEPromptDataModule(SplitLoaders, ZooDataModule):
    """Prompts and golds for MoE-CAP evaluation (card ``moe_cap``, "Data").

    With ``path=None`` the evaluation items are ``arith_em`` (:func:`arith_em_items`) and the ``n_train`` training
    items are drawn from the same generator after them. With ``path=`` the file's records (the first ``max_items``)
    are both the evaluation and the training items; ``n_items``, ``n_train``, ``digits`` and ``ops`` are then unused.

    Args:
        path: a GSM8K-style JSONL file; ``None`` for the embedded ``arith_em`` generator.
        n_items: ``arith_em`` evaluation items (card: 64).
        digits: ``arith_em`` operands are uniform in ``[0, 10**digits)`` (card: 2).
        ops: ``arith_em`` operators, a subset of ``+``, ``-``, ``*`` (card: ``+``, ``-``).
        seed: the ``arith_em`` generator's seed and the training shuffle's seed.
        n_train: ``arith_em`` training items for ``zoo fit``.
        question_key: the file's question field.
        answer_key: the file's answer field (``... #### <final answer>``).
        template: the file's prompt, ``{q}`` replaced by the question (the generator uses ``"Q: {a}{op}{b}=? A:"``).
        max_items: keep the file's first ``max_items`` records (``None``: all).
        batch_size: items per batch, every split.
        num_workers: ``DataLoader`` workers.
    """

    def __init__(
        self,
        path: str | None = None,
        n_items: int = 64,
        digits: int = 2,
        ops: list[str] = ["+", "-"],  # copied in __init__, never mutated
        seed: int = 0,
        n_train: int = 512,
        question_key: str = "question",
        answer_key: str = "answer",
        template: str = "Question: {q}\nAnswer:",
        max_items: int | None = None,
        batch_size: int = 8,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        _check_arith(n_items, digits, ops)
        checks.integer(checks.data("seed"), seed, low=0)  # numpy's generators take no negative seed
        checks.integer(checks.data("n_train"), n_train)
        checks.integer(checks.data("batch_size"), batch_size)
        checks.integer(checks.data("num_workers"), num_workers, low=0)
        checks.optional_integer(checks.data("max_items"), max_items)
        if "{q}" not in template:
            raise ValueError(f"--data.init_args.template={template!r} has no '{{q}}' where the question goes")
        if path is not None and not Path(path).is_file():
            what = "is a directory" if Path(path).is_dir() else "does not exist"
            raise FileNotFoundError(f"--data.init_args.path={path} {what}; expected a GSM8K-style JSONL file")
        self.path, self.n_items, self.digits, self.ops, self.seed = path, n_items, digits, list(ops), seed
        self.n_train, self.question_key, self.answer_key, self.template = n_train, question_key, answer_key, template
        self.max_items, self.batch_size, self.num_workers = max_items, batch_size, num_workers
        #: Batch size of the evaluation loaders (``SplitLoaders`` convention).
        self.eval_batch_size = batch_size
        #: Evaluation items (validation, test and predict), filled by :meth:`setup`.
        self.eval_items: list[dict[str, str]] = []
        #: Training items, filled by :meth:`setup`.
        self.train_items: list[dict[str, str]] = []

    def setup(self, stage: str | None = None) -> None:
        """Draw or read the items (once)."""
        if self.eval_items:
            return
        if self.path is None:
            self.eval_items, self.train_items = arith_em_splits(
                self.n_items, self.n_train, self.digits, self.ops, self.seed
            )
        else:
            items = read_gsm8k_jsonl(self.path, self.question_key, self.answer_key, self.template)
            if self.max_items is not None and len(items) > self.max_items:
                say(f"{self.path}: serving the first {self.max_items} of {len(items)} records "
                    f"(--data.init_args.max_items={self.max_items})")  # fmt: skip
            self.eval_items = items[: self.max_items] if self.max_items is not None else items
            self.train_items = self.eval_items

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        common = {"batch_size": self.batch_size, "num_workers": self.num_workers, "collate_fn": collate_prompts}
        if split == "train":
            sampler = self._train_sampler(len(self.train_items), self.seed, self.batch_size)
            return DataLoader(_Items(self.train_items), sampler=sampler, **common)
        return DataLoader(_Items(self.eval_items), shuffle=False, **common)
