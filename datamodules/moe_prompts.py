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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.json_records import read_json_records
from zoo.core.datamodule import SplitLoaders, ZooDataModule
from zoo.moe_cap.answers import gsm8k_gold

#: Operators the generator can draw.
ARITH_OPS: tuple[str, ...] = ("+", "-", "*")
#: Largest ``digits``: operands stay below 10**18, inside numpy's int64 draws.
MAX_DIGITS = 18
_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _draw_arith(rng: np.random.Generator, n: int, digits: int, ops: Sequence[str]) -> list[dict[str, str]]:
    """``n`` items from ``rng``; per item, in order: ``a``, ``b`` (one ``integers`` call each), then the op index."""
    high = 10**digits
    items = []
    for _ in range(n):
        a = int(rng.integers(0, high))
        b = int(rng.integers(0, high))
        op = ops[int(rng.integers(0, len(ops)))]
        items.append({"prompt": f"Q: {a}{op}{b}=? A:", "gold": str(_APPLY[op](a, b))})
    return items


def _check_arith(n_items: int, digits: int, ops: Sequence[str]) -> None:
    if n_items < 1:
        raise ValueError(f"--data.init_args.n_items={n_items} must be >= 1")
    if not 1 <= digits <= MAX_DIGITS:
        raise ValueError(f"--data.init_args.digits={digits} must be in [1, {MAX_DIGITS}]")
    if not ops:
        raise ValueError(f"--data.init_args.ops is empty; expected a non-empty subset of {list(ARITH_OPS)}")
    if unknown := [op for op in ops if op not in ARITH_OPS]:
        raise ValueError(f"--data.init_args.ops: unknown operator(s) {unknown}; expected a subset of {list(ARITH_OPS)}")
    if len(set(ops)) != len(ops):
        raise ValueError(
            f"--data.init_args.ops={list(ops)} repeats an operator; ops are drawn uniformly, list each once"
        )


def arith_em_splits(
    n_items: int, n_train: int, digits: int = 2, ops: Sequence[str] = ("+", "-"), seed: int = 0
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Evaluation and training items of ``arith_em`` from one ``numpy.random.default_rng(seed)``.

    The ``n_items`` evaluation items are drawn first, then the ``n_train`` training items from the same generator, so
    the evaluation items do not depend on ``n_train`` and equal :func:`arith_em_items` with the same arguments.

    Args:
        n_items: evaluation items.
        n_train: training items (may be 0).
        digits: operands are uniform integers in ``[0, 10**digits)``.
        ops: operators, drawn uniformly (a subset of ``"+"``, ``"-"``, ``"*"``).
        seed: the generator's seed.

    Returns:
        ``(eval_items, train_items)``.
    """
    _check_arith(n_items, digits, ops)
    if n_train < 0:
        raise ValueError(f"--data.init_args.n_train={n_train} must be >= 0")
    rng = np.random.default_rng(seed)
    return _draw_arith(rng, n_items, digits, ops), _draw_arith(rng, n_train, digits, ops)


def arith_em_items(
    n_items: int = 64, digits: int = 2, ops: Sequence[str] = ("+", "-"), seed: int = 0
) -> list[dict[str, str]]:
    """The card's ``arith_em`` items: ``{"prompt": "Q: {a}{op}{b}=? A:", "gold": str(a op b)}``.

    One ``numpy.random.default_rng(seed)``; draw order, per item: ``a = rng.integers(0, 10**digits)``, then ``b`` the
    same way, then the operator ``ops[rng.integers(0, len(ops))]``. Golds may be negative
    (``"Q: 3-7=? A:"`` -> ``"-4"``). Same arguments, same items; the first ``n`` items do not depend on ``n_items``.

    Args:
        n_items: number of items.
        digits: operands are uniform integers in ``[0, 10**digits)``.
        ops: operators, drawn uniformly (a subset of ``"+"``, ``"-"``, ``"*"``).
        seed: the generator's seed.

    Returns:
        The items, in draw order.
    """
    return arith_em_splits(n_items, 0, digits, ops, seed)[0]


def read_gsm8k_jsonl(
    path: str | Path,
    question_key: str = "question",
    answer_key: str = "answer",
    template: str = "Question: {q}\nAnswer:",
) -> list[dict[str, str]]:
    """Read a GSM8K-style JSONL file into ``{"prompt", "gold"}`` items (a JSON list of the same objects also works).

    One JSON object per line (blank lines skipped) with string fields ``question_key`` and ``answer_key``; extra keys
    are ignored. The prompt is ``template`` with ``{q}`` replaced by the question (a plain replacement, so other braces
    are kept); the gold is :func:`zoo.moe_cap.answers.gsm8k_gold` of the answer.

    Args:
        path: the ``.jsonl`` file.
        question_key: the question field.
        answer_key: the answer field (a worked solution ending in ``#### <final answer>``).
        template: the prompt, with ``{q}`` where the question goes.

    Returns:
        The items, in file order.

    Raises:
        ValueError: naming the file and the 1-based line (``record i`` for a JSON list): invalid JSON, a record that is
            not an object, a missing key (the keys found are listed), a non-string value, an answer without ``####`` or
            with nothing after it; or a file without records.
    """
    path = Path(path)
    expected = f"expected a JSON object with string keys {question_key!r} and {answer_key!r}"
    items = []
    for where, obj in read_json_records(path, lambda line, i: f"line {line}"):
        if not isinstance(obj, Mapping):
            raise ValueError(f"{path}: {where}: {expected}, found {type(obj).__name__}")
        for key, flag in ((question_key, "question_key"), (answer_key, "answer_key")):
            if key not in obj:
                raise ValueError(
                    f"{path}: {where}: missing key {key!r} (--data.init_args.{flag}); {expected}, "
                    f"found keys {sorted(map(str, obj))}"
                )
            if not isinstance(obj[key], str):
                raise ValueError(f"{path}: {where}: key {key!r}: expected str, found {type(obj[key]).__name__}")
        answer = obj[answer_key]
        gold = gsm8k_gold(answer)
        if gold is None:
            raise ValueError(
                f"{path}: {where}: key {answer_key!r} has no '####'; expected a GSM8K answer ending in "
                f"'#### <final answer>', found {answer[-60:]!r}"
            )
        if not gold:
            raise ValueError(
                f"{path}: {where}: key {answer_key!r}: nothing after the last '####', found {answer[-60:]!r}"
            )
        items.append({"prompt": template.replace("{q}", obj[question_key]), "gold": gold})
    if not items:
        raise ValueError(f"{path}: no records; {expected}, one per line")
    return items


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
        for name, value, low in (
            ("n_train", n_train, 1),
            ("batch_size", batch_size, 1),
            ("num_workers", num_workers, 0),
        ):
            if value < low:
                raise ValueError(f"--data.init_args.{name}={value} must be >= {low}")
        if max_items is not None and max_items < 1:
            raise ValueError(f"--data.init_args.max_items={max_items} must be >= 1 or null (all records)")
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
            self.eval_items = items[: self.max_items] if self.max_items is not None else items
            self.train_items = self.eval_items

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        common = {"batch_size": self.batch_size, "num_workers": self.num_workers, "collate_fn": collate_prompts}
        if split == "train":
            sampler = self._train_sampler(len(self.train_items), self.seed, self.batch_size)
            return DataLoader(_Items(self.train_items), sampler=sampler, **common)
        return DataLoader(_Items(self.eval_items), shuffle=False, **common)
