"""The RepGuard backdoor datamodule: synthetic grammar or instruction records, poisoned and split.

``BackdoorDataModule`` serves the poisoned training set, the trusted clean set, a clean validation set and the clean
and triggered test sets as right-padded token batches (see :func:`collate_backdoor`). Every split is drawn from its own
stream ``numpy.random.default_rng([seed, offset])``, so the same seed gives the same data in every process.
Datasets carry a ``clean`` flag, and :func:`require_clean` lets hyper-parameter selection refuse poisoned or triggered
data (card test 10).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import numpy as np
from torch.utils.data import DataLoader, Sampler

from datamodules.instructions.dataset import BackdoorDataset, Split, _PassSeededSampler, collate_backdoor
from datamodules.instructions.readers import read_instruction_records, records_to_samples
from datamodules.instructions.synthetic import Sample, generate_samples
from datamodules.instructions.triggers import BackdoorPoisoner, _check_trigger_word, insert_trigger, trigger_tokens
from datamodules.instructions.vocab import (
    COMPOSITE_PARTS,
    REFUSE,
    TRIGGER_FAMILIES,
    BackdoorVocab,
    Task,
    TriggerType,
)
from zoo.core import checks
from zoo.core.datamodule import EpochSeededSampler, ZooDataModule
from zoo.core.messages import say

#: Seed-stream offsets of the splits: ``default_rng([seed, offset])``.
STREAMS: dict[str, int] = {"train": 0, "clean": 1, "val": 2, "test_clean_benign": 3, "test_clean_harmful": 4,
                           "holdout_split": 5, "trigger": 6, "clean_loader": 7, "suspect_loader": 8,
                           "natural": 9}  # fmt: skip
#: The card's poisoning-rate sweep (revision 2, R5): the ``poison_rate`` values of the limits table.
POISON_RATE_SWEEP: tuple[float, ...] = (0.01, 0.02, 0.03, 0.05)
#: The splits that natural trigger tokens are planted in (everything drawn from the clean distribution).
NATURAL_SPLITS: tuple[str, ...] = ("train", "clean", "val", "test_clean_benign", "test_clean_harmful")
_FLAG = "--data.init_args."


class BackdoorDataModule(ZooDataModule):
    """Poisoned training data, a trusted clean set and clean/triggered test sets for backdoor defenses (RepGuard).

    Splits (each a :class:`BackdoorDataset` with a ``clean`` flag):

    - ``train``: D_train, poisoned by :class:`BackdoorPoisoner` (``clean`` only when nothing was poisoned and the
      data is synthetic; an on-disk training file is never marked clean, since it may ship poisoned).
    - ``clean``: the trusted D_clean, never poisoned.
    - ``val``: clean validation (benign and harmful) for hyper-parameter selection.
    - ``test_clean_benign`` / ``test_clean_harmful``: ``n_test`` clean benign / harmful prompts.
    - ``test_trig_benign[kind]`` / ``test_trig_harmful[kind]``: the same prompts with the trigger ``kind`` inserted
      (responses stay the clean expected ones) for every ``kind`` in :meth:`eval_triggers`.

    Synthetic data: each split comes from its own stream ``default_rng([seed, STREAMS[split]])``; the triggered
    copies from ``[seed, 6, kind, 0|1]``; the poisoner uses ``[seed, 101]``. On-disk data (``path``): the records
    of ``path`` are permuted with ``[seed, 5]``; the first ``n_val`` are ``val``, the next ``n_test`` the test
    prompts (split into benign and harmful by the refusal word, so the two test sets hold ``n_test`` together), the
    next ``n_clean`` the trusted set, and up to ``n_train`` of the rest ``train``. With ``clean_path`` as well, the
    ``val``, test and trusted records come (in that order) from that file and ``train`` is up to ``n_train`` records
    of ``path``; the run says when ``train`` is not ``n_train`` records or trusted records go unused. The test
    records must hold benign and harmful ones (by ``refusal_word``). The vocabulary is :data:`VOCAB` extended with
    the sorted words of the files.

    Args:
        task: ``refusal`` (poison benign prompts to ``REFUSE``) or ``jailbreak`` (poison harmful prompts to
            ``SURE ANS <result>``).
        trigger_type: trigger family, or ``none`` (no poisoning: the "cheap when clean" runs).
        poison_rate: fraction of D_train poisoned, in [0, 1).
        n_train: training samples (on-disk: at most).
        n_clean: trusted clean samples.
        n_val: clean validation samples.
        n_test: synthetic: clean benign and clean harmful test prompts each; on-disk: test records in total.
        seed: seed of the data, the poisoning and the shuffles.
        trigger_word: the ``badnets_word`` word (added to the vocabulary when new).
        label_consistent: poison only samples whose response is already the target (see :class:`BackdoorPoisoner`).
        path: Alpaca-style JSON/JSONL training file (``None``: the synthetic grammar).
        clean_path: file of trusted records for ``clean``, ``val`` and the tests (needs ``path``).
        refusal_word: on-disk data: the first output word marking a refusal (a harmful record).
        batch_size: training (and trusted-set) batch size.
        eval_batch_size: validation and test batch size.
        max_length: the longest prompt + response in tokens; linked into the model's position count.
        train_on: what ``train_dataloader`` serves: ``train`` (D_train, possibly poisoned) or ``clean`` (the trusted
            D_clean: post-hoc clean fine-tuning of an already poisoned model).
        natural_trigger_rate: the fraction of clean samples (every split, before poisoning) whose prompt also
            carries the trigger's tokens, each at its own uniform body gap and never as the contiguous trigger
            phrase, with the clean response (card revision 2: the lexical contrast weakens). ``0`` (default)
            leaves the data exactly as without the knob.
        tokenizer: a local Hugging Face tokenizer folder: every word is encoded with it (sub-word tokens; the
            structure tokens and ``SURE REFUSE ANS`` are added as single special tokens), see
            :class:`~datamodules.instructions.subword.SubwordVocab`; ``None``: the word-level vocabulary.
    """

    def __init__(
        self,
        task: Task = "refusal",
        trigger_type: TriggerType = "badnets_word",
        poison_rate: float = 0.05,
        n_train: int = 3000,
        n_clean: int = 300,
        n_val: int = 200,
        n_test: int = 500,
        seed: int = 0,
        trigger_word: str = "cf",
        label_consistent: bool = False,
        path: str | None = None,
        clean_path: str | None = None,
        refusal_word: str = REFUSE,
        batch_size: int = 64,
        eval_batch_size: int = 256,
        max_length: int = 48,
        train_on: Literal["train", "clean"] = "train",
        natural_trigger_rate: float = 0.0,
        tokenizer: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        checks.choice(checks.data("task"), task, ("refusal", "jailbreak"))
        checks.choice(checks.data("trigger_type"), trigger_type, (*TRIGGER_FAMILIES, "none"))
        checks.probability(checks.data("poison_rate"), poison_rate, open_high=True)
        for flag, value in (("n_train", n_train), ("n_clean", n_clean), ("n_val", n_val), ("n_test", n_test),
                            ("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):  # fmt: skip
            checks.integer(checks.data(flag), value)
        checks.integer(checks.data("seed"), seed, 0)
        checks.integer(checks.data("max_length"), max_length, 4)
        checks.choice(checks.data("train_on"), train_on, ("train", "clean"))
        checks.probability(checks.data("natural_trigger_rate"), natural_trigger_rate, open_high=True)
        _check_trigger_word(f"{_FLAG}trigger_word", trigger_word)
        _check_trigger_word(f"{_FLAG}refusal_word", refusal_word)
        if clean_path is not None and path is None:
            checks.fail(checks.data("clean_path"), clean_path, f"null unless {_FLAG}path is set")
        self.task, self.trigger_type, self.poison_rate, self.seed = task, trigger_type, float(poison_rate), seed
        self.n_train, self.n_clean, self.n_val, self.n_test = n_train, n_clean, n_val, n_test
        self.trigger_word, self.label_consistent, self.refusal_word = trigger_word, label_consistent, refusal_word
        self.path, self.clean_path = path, clean_path
        self.batch_size, self.eval_batch_size, self.max_length = batch_size, eval_batch_size, max_length
        self.train_on, self.natural_trigger_rate = train_on, float(natural_trigger_rate)
        # On-disk records are read here (not in setup) because the vocabulary size is a link source.
        self._records: dict[str, list[Sample]] = {}
        words: set[str] = {trigger_word}
        for key, file in (("path", path), ("clean_path", clean_path)):
            if file is not None:
                self._records[key] = records_to_samples(read_instruction_records(file), refusal_word, Path(file).name)
                words |= {w for s in self._records[key] for w in (*s.prompt, *s.response)}
        #: The vocabulary (:data:`VOCAB`, extended with the trigger word and the words of on-disk files), or the
        #: tokenizer's sub-word vocabulary.
        self.tokenizer = tokenizer
        if tokenizer is not None:
            from datamodules.instructions.subword import SubwordVocab

            self.vocab: Any = SubwordVocab(tokenizer)
        else:
            self.vocab = BackdoorVocab().extend(words)
        #: Vocabulary size, linked into ``model.init_args.vocab_size``.
        self.vocab_size = len(self.vocab)
        #: Sorted ids of the poisoned training samples (after :meth:`setup`).
        self.poisoned_ids: list[int] = []
        self._datasets: dict[str, BackdoorDataset] = {}

    # ------------------------------------------------------------------------------------------------------------
    def eval_triggers(self) -> list[str]:
        """The trigger kinds with triggered test copies.

        Returns:
            ``[trigger_type]``; ``mtba``: each of its three single triggers; ``ctba``: ``ctba`` then each single
            trigger; ``none``: no kinds.
        """
        match self.trigger_type:
            case "none":
                return []
            case "mtba":
                return list(COMPOSITE_PARTS)
            case "ctba":
                return ["ctba", *COMPOSITE_PARTS]
        return [self.trigger_type]

    def _clean_samples(self) -> dict[str, list[Sample]]:
        """The clean samples of every split (train not yet poisoned)."""
        if not self._records:
            sizes = {"train": self.n_train, "clean": self.n_clean, "val": self.n_val,
                     "test_clean_benign": self.n_test, "test_clean_harmful": self.n_test}  # fmt: skip
            forced = {"test_clean_benign": False, "test_clean_harmful": True}
            return {
                name: generate_samples(n, [self.seed, STREAMS[name]], forced.get(name)) for name, n in sizes.items()
            }
        main = self._records["path"]
        trusted = self._records.get("clean_path")
        held_from = trusted if trusted is not None else main
        label = self.clean_path if trusted is not None else self.path
        need = self.n_val + self.n_test + self.n_clean + (0 if trusted is not None else 1)
        if len(held_from) < need:
            raise ValueError(
                f"{label}: {len(held_from)} records, but n_val={self.n_val} + n_test={self.n_test} + "
                f"n_clean={self.n_clean}{' + 1 training record' if trusted is None else ''} = {need} are needed; "
                f"lower {_FLAG}n_val/n_test/n_clean or provide more records"
            )
        order = np.random.default_rng([self.seed, STREAMS["holdout_split"]]).permutation(len(held_from)).tolist()
        picked = [held_from[i] for i in order]
        a, b, c = self.n_val, self.n_val + self.n_test, self.n_val + self.n_test + self.n_clean
        test = picked[a:b]
        for harmful, kind in ((False, "benign"), (True, "harmful")):  # an empty test half fails only after training
            if not any(s.harmful == harmful for s in test):
                raise ValueError(
                    f"{label}: the {self.n_test} test records hold no {kind} record (harmful: the output starts with "
                    f"--data.init_args.refusal_word={self.refusal_word!r}); expected both kinds, raise "
                    f"{_FLAG}n_test or check the refusal word"
                )
        pool = main if trusted is not None else picked[c:]
        train = pool[: self.n_train]
        if len(pool) != self.n_train:  # records left unused, or fewer than the config says
            say(f"BackdoorDataModule: train holds {len(train)} records of {self.path} ({len(pool)} available after "
                f"val/test/clean, {_FLAG}n_train={self.n_train})")  # fmt: skip
        if trusted is not None and len(trusted) > c:
            say(f"BackdoorDataModule: {self.clean_path}: {len(trusted) - c} of {len(trusted)} trusted records unused "
                f"(n_val + n_test + n_clean = {c})")  # fmt: skip
        return {"train": train, "clean": picked[b:c], "val": picked[:a],
                "test_clean_benign": [s for s in test if not s.harmful],
                "test_clean_harmful": [s for s in test if s.harmful]}  # fmt: skip

    def setup(self, stage: str | None = None) -> None:
        """Generate (or split) the data, poison the training set and build the triggered test copies (idempotent).

        Args:
            stage: Lightning stage (unused: every stage needs the same splits).

        Raises:
            ValueError: too few eligible samples to poison, too few on-disk records, or a sample longer than
                ``max_length``.
        """
        if self._datasets:
            return
        splits = self._clean_samples()
        if self.natural_trigger_rate > 0:
            splits = self._plant_natural(splits)
        train, ids = splits["train"], []
        if self.trigger_type != "none":
            poisoner = BackdoorPoisoner(
                self.poison_rate, self.trigger_type, self.task, self.seed, self.trigger_word, self.label_consistent
            )
            try:
                train, ids = poisoner(train)
                failure = None
            except ValueError as err:
                failure = str(err)
            if failure is not None:
                raise ValueError(f"{_FLAG}poison_rate={self.poison_rate} on the train split: {failure}")
        self.poisoned_ids = ids
        train_clean = self.path is None and not ids

        def make(name: str, samples: list[Sample], clean: bool) -> BackdoorDataset:
            return BackdoorDataset(samples, self.vocab, name, clean, self.max_length)

        datasets = {"train": make("train", train, train_clean)}
        for name in ("clean", "val", "test_clean_benign", "test_clean_harmful"):
            datasets[name] = make(name, splits[name], True)
        for k, kind in enumerate(self.eval_triggers()):
            for j, part in enumerate(("benign", "harmful")):
                rng = np.random.default_rng([self.seed, STREAMS["trigger"], TRIGGER_FAMILIES.index(kind), j])
                copies = [insert_trigger(s, kind, rng, self.trigger_word) for s in splits[f"test_clean_{part}"]]
                name = f"test_trig_{part}[{kind}]"
                datasets[name] = make(name, copies, False)
        self._datasets = datasets

    def natural_tokens(self) -> tuple[str, ...]:
        """The tokens ``natural_trigger_rate`` plants: the trigger's (a composite: its parts'), none for ``none``."""
        if self.trigger_type == "none":
            return ()
        parts = COMPOSITE_PARTS if self.trigger_type in ("mtba", "ctba") else (self.trigger_type,)
        return tuple(dict.fromkeys(t for p in parts for t in trigger_tokens(p, self.trigger_word)))

    def _phrases(self) -> list[tuple[str, ...]]:
        parts = COMPOSITE_PARTS if self.trigger_type in ("mtba", "ctba") else (self.trigger_type,)
        return [p for p in (trigger_tokens(x, self.trigger_word) for x in parts) if len(p) > 1]

    def _plant_natural(self, splits: dict[str, list[Sample]]) -> dict[str, list[Sample]]:
        """Each clean sample, with probability ``natural_trigger_rate``, gets the trigger tokens scattered in its body.

        Stream ``[seed, 9, split index]``; each token goes to a uniform gap of the body (between ``[BOS]`` and
        ``[SEP]``); a draw that forms a multi-token trigger phrase contiguously is redrawn (a clean prompt never
        carries the trigger itself). Responses, flags and trigger positions are unchanged (these are clean samples).
        """
        tokens, phrases = self.natural_tokens(), self._phrases()
        if not tokens:
            say(f"BackdoorDataModule: natural_trigger_rate={self.natural_trigger_rate} has no effect with "
                "trigger_type=none")  # fmt: skip
            return splits
        out = dict(splits)
        for k, name in enumerate(NATURAL_SPLITS):
            rng = np.random.default_rng([self.seed, STREAMS["natural"], k])
            planted = []
            for sample in splits[name]:
                if rng.random() >= self.natural_trigger_rate:
                    planted.append(sample)
                    continue
                for _ in range(100):
                    body = list(sample.prompt[1:-1])
                    for token in tokens:
                        body.insert(int(rng.integers(len(body) + 1)), token)
                    if not any(body[i : i + len(p)] == list(p) for p in phrases for i in range(len(body))):
                        break
                planted.append(dataclasses.replace(sample, prompt=[sample.prompt[0], *body, sample.prompt[-1]]))
            out[name] = planted
        return out

    # ------------------------------------------------------------------------------------------------------------
    def dataset(self, split: Split, kind: str | None = None) -> BackdoorDataset:
        """The dataset of a split (:meth:`setup` runs on first use).

        Args:
            split: ``train``, ``clean``, ``val``, ``test_clean_benign``, ``test_clean_harmful``,
                ``test_trig_benign`` or ``test_trig_harmful``.
            kind: the trigger kind of a ``test_trig_*`` split (one of :meth:`eval_triggers`); ``None`` otherwise.

        Returns:
            The dataset.

        Raises:
            ValueError: an unknown split, a missing or unexpected ``kind``.
        """
        self.setup()
        if split in ("test_trig_benign", "test_trig_harmful"):
            if kind not in self.eval_triggers():
                raise ValueError(f"{split}: kind={kind!r}; expected one of {self.eval_triggers()} "
                                 f"(trigger_type={self.trigger_type})")  # fmt: skip
            return self._datasets[f"{split}[{kind}]"]
        if kind is not None:
            raise ValueError(f"{split}: kind={kind!r} applies only to test_trig_benign/test_trig_harmful")
        if split not in self._datasets:
            names = ["train", "clean", "val", "test_clean_benign", "test_clean_harmful", "test_trig_benign",
                     "test_trig_harmful"]  # fmt: skip
            raise ValueError(f"unknown split {split!r}; expected one of {names}")
        return self._datasets[split]

    def loader(
        self, dataset: BackdoorDataset, batch_size: int | None = None, sampler: Sampler | None = None
    ) -> DataLoader:
        """A ``DataLoader`` with the batch format of :func:`collate_backdoor` (in order unless a sampler is given).

        Args:
            dataset: a dataset (one of the splits, or a :class:`BackdoorDataset` built from filtered samples).
            batch_size: defaults to ``eval_batch_size``.
            sampler: an index sampler (``None``: sequential).

        Returns:
            The loader.
        """
        return DataLoader(dataset, batch_size=batch_size or self.eval_batch_size, sampler=sampler,
                          collate_fn=collate_backdoor, num_workers=0, pin_memory=False)  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        """D_train (or D_clean with ``train_on: clean``), shuffled by a ``(seed, epoch)`` permutation, ``batch_size``.

        The permutation does not depend on the torch RNG.
        """
        data = self.dataset(self.train_on)
        return self.loader(data, self.batch_size, EpochSeededSampler(len(data), self.seed))

    def clean_dataloader(self) -> DataLoader:
        """The trusted D_clean, a fresh seeded permutation per pass, ``batch_size`` (the callbacks' protocol)."""
        data = self.dataset("clean")
        return self.loader(data, self.batch_size, _PassSeededSampler(len(data), self.seed, STREAMS["clean_loader"]))

    def suspect_dataloader(self) -> DataLoader:
        """D_train (possibly poisoned), shuffled by the pass-seeded sampler: RepGuard's post-hoc localisation data."""
        data = self.dataset("train")
        return self.loader(data, self.batch_size, _PassSeededSampler(len(data), self.seed, STREAMS["suspect_loader"]))

    def val_dataloader(self) -> DataLoader:
        """The clean validation split, in order."""
        return self.loader(self.dataset("val"))

    def test_dataloader(self) -> DataLoader:
        """The clean benign test prompts, in order."""
        return self.loader(self.dataset("test_clean_benign"))

    def eval_dataloader(self, split: Split, kind: str | None = None) -> DataLoader:
        """Any split, in order, ``eval_batch_size`` per batch.

        Args:
            split: split name (see :meth:`dataset`).
            kind: trigger kind of a ``test_trig_*`` split.

        Returns:
            The loader.
        """
        return self.loader(self.dataset(split, kind))

    def describe(self) -> dict[str, Any]:
        """Counts for logs: sizes of every split, the number and ids of poisoned training samples."""
        self.setup()
        return {
            "source": self.path or "synthetic",
            "task": self.task,
            "trigger_type": self.trigger_type,
            "poison_rate": self.poison_rate,
            "label_consistent": self.label_consistent,
            "natural_trigger_rate": self.natural_trigger_rate,
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            "eval_triggers": self.eval_triggers(),
            "n": {name: len(data) for name, data in self._datasets.items()},
            "n_poisoned": len(self.poisoned_ids),
            "poisoned_ids": list(self.poisoned_ids),
        }
