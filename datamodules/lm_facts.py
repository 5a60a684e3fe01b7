"""Language-model data for the UAM card: synthetic two-domain facts, a word tokenizer and the real-format readers.

The synthetic default (``make_facts``) is a seeded fact-injection task: a *forget* domain of fictional species
(``s00..s39`` x {habitat, diet, color}) and a *retain* domain of fictional towns (``t00..t39`` x {region, product,
festival}); every attribute has ``num_values`` value words. Each fact is written in three sentence templates and
asked as a 4-option multiple-choice item whose stem is the prefix of the second template, e.g.
``the habitat of s07 is`` -> ``marsh``. Ten extra species (``s40..s49``) with their own facts are never trained and
serve as non-members for membership inference.

Value words are distinct ordinary English words (one list per attribute, no word shared between attributes), so
the same data reads naturally for a pretrained tokenizer (SmolLM2) and is one token each for ``WordTokenizer``.

The real formats: WMDP-style MCQ jsonl (``read_mcq_jsonl``) and ``{"text": ...}`` corpora (``read_text_jsonl``).
This module uses only the standard library and numpy (no lightning, no transformers).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Special tokens, in id order: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")

#: Forget-domain attributes (fictional species) and their value words (at least 6 each).
FORGET_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "habitat": ("marsh", "tundra", "canyon", "reef", "steppe", "jungle", "glacier", "dune"),
    "diet": ("seeds", "krill", "nectar", "fungi", "insects", "algae", "bark", "pollen"),
    "color": ("amber", "teal", "crimson", "ivory", "violet", "ochre", "indigo", "olive"),
}
#: Retain-domain attributes (fictional towns) and their value words (at least 6 each).
RETAIN_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "region": ("north", "south", "east", "west", "coast", "highland", "valley", "delta"),
    "product": ("wool", "salt", "glass", "cheese", "copper", "silk", "timber", "honey"),
    "festival": ("lantern", "harvest", "kite", "music", "masks", "boat", "candle", "drum"),
}
#: Sentence templates per fact; ``{e}`` entity, ``{a}`` attribute, ``{v}`` value.
TEMPLATES: tuple[str, ...] = ("{e} has {a} {v} .", "the {a} of {e} is {v} .", "{e} : {a} = {v} .")
#: MCQ stem: the second template without its value and full stop.
MCQ_STEM = "the {a} of {e} is"


class WordTokenizer:
    """Word-level tokenizer over whitespace-split words.

    Ids 0-3 are ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``; the remaining ids are the vocabulary words in the order
    given (``from_texts`` sorts them, so the same texts always give the same ids). Unknown words map to ``<unk>``.

    Args:
        words: vocabulary words without the special tokens; must be unique and contain no whitespace.

    Example:
        >>> tok = WordTokenizer.from_texts(["s00 has diet krill ."])
        >>> tok.decode(tok.encode("s00 has diet krill ."))
        's00 has diet krill .'
    """

    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if clash := sorted(set(words) & set(SPECIAL_TOKENS)):
            raise ValueError(f"WordTokenizer: words {clash} clash with the special tokens {list(SPECIAL_TOKENS)}")
        if len(set(words)) != len(words):
            raise ValueError("WordTokenizer: vocabulary words must be unique")
        if bad := [w for w in words if not w or len(w.split()) != 1]:
            raise ValueError(f"WordTokenizer: words must be non-empty and whitespace-free, found {bad[:5]}")
        self.itos: list[str] = [*SPECIAL_TOKENS, *words]
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> WordTokenizer:
        """Build a tokenizer whose vocabulary is the sorted set of words in ``texts``.

        Args:
            texts: strings split on whitespace; special-token strings among the words are ignored.

        Returns:
            The tokenizer (deterministic: same texts in any order give the same ids).
        """
        words = {w for text in texts for w in text.split()} - set(SPECIAL_TOKENS)
        return cls(sorted(words))

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""
        return len(self.itos)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        """Map a string to ids.

        Args:
            text: whitespace-separated words.
            bos: prepend ``<bos>``.
            eos: append ``<eos>``.

        Returns:
            Token ids; unknown words become ``<unk>`` (3).
        """
        ids = [self.stoi.get(w, self.unk_id) for w in text.split()]
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def __call__(self, text: str) -> list[int]:
        """``encode(text)`` with ``<bos>`` and without ``<eos>``: the tokenizer is a ``str -> ids`` callable."""
        return self.encode(text)

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Map ids back to a space-joined string.

        Args:
            ids: token ids (ints or 0-d tensors).
            skip_special: drop ``<pad>``, ``<bos>`` and ``<eos>`` (``<unk>`` is always kept).

        Returns:
            The words joined by single spaces.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        words = []
        for raw in ids:
            i = int(raw)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"WordTokenizer.decode: id {i} outside [0, {self.vocab_size})")
            if skip_special and i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            words.append(self.itos[i])
        return " ".join(words)

    def to_dict(self) -> dict[str, list[str]]:
        """Primitive form for checkpoints and hyper-parameters: ``{"vocab": [all tokens in id order]}``."""
        return {"vocab": list(self.itos)}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> WordTokenizer:
        """Rebuild a tokenizer saved with ``to_dict``.

        Args:
            state: ``{"vocab": [...]}`` whose first four entries are the special tokens.

        Returns:
            The tokenizer with identical ids.

        Raises:
            ValueError: the ``vocab`` key is missing or does not start with the special tokens.
        """
        vocab = state.get("vocab") if isinstance(state, dict) else None
        if not isinstance(vocab, list) or tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            found = vocab[: len(SPECIAL_TOKENS)] if isinstance(vocab, list) else type(vocab).__name__
            raise ValueError(
                f"WordTokenizer.from_dict: expected 'vocab' starting with {list(SPECIAL_TOKENS)}, found {found}"
            )
        return cls(vocab[len(SPECIAL_TOKENS) :])


@dataclass
class MCQItem:
    """One 4-option multiple-choice item.

    Attributes:
        question: the stem used for option scoring (e.g. ``the habitat of s07 is``).
        choices: the four option strings (value words for the synthetic facts).
        answer: index of the correct choice, 0-3.
        subject: entity name for synthetic facts (e.g. ``s07``), the jsonl ``subject`` or ``""``.
    """

    question: str
    choices: list[str]
    answer: int
    subject: str = ""


@dataclass
class FactSet:
    """The synthetic two-domain fact data (see ``make_facts``).

    Attributes:
        forget_sentences: 3 sentences per forget fact (species), grouped by entity then attribute then template.
        retain_sentences: 3 sentences per retain fact (towns), same order.
        holdout_sentences: 3 sentences per holdout fact (species never trained; MIA non-members).
        forget_mcq: one item per forget fact.
        retain_mcq: one item per retain fact.
        holdout_mcq: one item per holdout fact (chance level for any model that never saw them).
        forget_facts: ``(entity, attribute, value)`` triples of the forget domain.
        retain_facts: triples of the retain domain.
        holdout_facts: triples of the holdout species.
        values: every attribute's value words (all possible MCQ options).
    """

    forget_sentences: list[str]
    retain_sentences: list[str]
    holdout_sentences: list[str]
    forget_mcq: list[MCQItem]
    retain_mcq: list[MCQItem]
    holdout_mcq: list[MCQItem] = field(default_factory=list)
    forget_facts: list[tuple[str, str, str]] = field(default_factory=list)
    retain_facts: list[tuple[str, str, str]] = field(default_factory=list)
    holdout_facts: list[tuple[str, str, str]] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)

    def texts(self) -> list[str]:
        """Every string a tokenizer must cover: all sentences, MCQ stems and all value words (holdout included)."""
        items = self.forget_mcq + self.retain_mcq + self.holdout_mcq
        return [
            *self.forget_sentences,
            *self.retain_sentences,
            *self.holdout_sentences,
            *(item.question for item in items),
            *(v for vals in self.values.values() for v in vals),
        ]


def _domain(
    rng_facts: np.random.Generator,
    rng_mcq: np.random.Generator,
    entities: list[str],
    attributes: dict[str, list[str]],
) -> tuple[list[tuple[str, str, str]], list[str], list[MCQItem]]:
    """Draw one domain's facts, sentences and MCQ items (facts first, then per-item distractors and answer slot)."""
    names = list(attributes)
    k = len(next(iter(attributes.values())))
    draws = rng_facts.integers(0, k, size=(len(entities), len(names)))
    facts = [(e, a, attributes[a][int(draws[i, j])]) for i, e in enumerate(entities) for j, a in enumerate(names)]
    sentences = [t.format(e=e, a=a, v=v) for e, a, v in facts for t in TEMPLATES]
    mcq = []
    for e, a, v in facts:
        others = [w for w in attributes[a] if w != v]
        distractors = [others[int(i)] for i in rng_mcq.choice(len(others), size=3, replace=False)]
        answer = int(rng_mcq.integers(0, 4))
        choices = distractors[:answer] + [v] + distractors[answer:]
        mcq.append(MCQItem(question=MCQ_STEM.format(a=a, e=e), choices=choices, answer=answer, subject=e))
    return facts, sentences, mcq


def make_facts(seed: int = 0, num_entities: int = 40, num_values: int = 6, holdout: int = 10) -> FactSet:
    """Seeded synthetic two-domain facts (UAM card, Data: "LM, synthetic two-domain facts").

    Forget domain: species ``s00..s{num_entities-1}`` x {habitat, diet, color}; retain domain: towns
    ``t00..t{num_entities-1}`` x {region, product, festival}; holdout: species ``s{num_entities}..`` (``holdout`` of
    them) with the forget attributes. Each attribute has the first ``num_values`` words of its list in
    ``FORGET_ATTRIBUTES``/``RETAIN_ATTRIBUTES``; each fact's value is uniform over them. Each MCQ item has the true
    value plus 3 distinct distractors drawn uniformly from the attribute's other values, and the answer slot is
    uniform over 0-3. Each of the forget/retain/holdout draws uses its own stream
    ``np.random.default_rng([seed, d])`` (facts) and ``[seed, d, 1]`` (MCQ), ``d`` = 0/1/2, so changing ``holdout``
    never changes the forget or retain facts.

    Args:
        seed: data seed.
        num_entities: species and towns per domain (card: 40).
        num_values: value words per attribute, 4-8 (card: 6).
        holdout: extra never-trained species for MIA (card: 10).

    Returns:
        The fact set (forget/retain/holdout sentences, MCQ items, fact triples, value lists).

    Raises:
        ValueError: ``num_values`` outside 4-8, ``num_entities`` < 1 or ``holdout`` < 0.
    """
    width = len(FORGET_ATTRIBUTES["habitat"])
    if not 4 <= num_values <= width:
        raise ValueError(f"make_facts: num_values={num_values}; expected 4..{width} (3 distractors + the true value)")
    if num_entities < 1 or holdout < 0:
        raise ValueError(f"make_facts: expected num_entities >= 1 and holdout >= 0, found {num_entities}, {holdout}")
    digits = max(2, len(str(num_entities + holdout - 1)))
    species = [f"s{i:0{digits}d}" for i in range(num_entities + holdout)]
    towns = [f"t{i:0{digits}d}" for i in range(num_entities)]
    f_attr = {a: list(v[:num_values]) for a, v in FORGET_ATTRIBUTES.items()}
    r_attr = {a: list(v[:num_values]) for a, v in RETAIN_ATTRIBUTES.items()}

    def rngs(d: int) -> tuple[np.random.Generator, np.random.Generator]:
        return np.random.default_rng([seed, d]), np.random.default_rng([seed, d, 1])

    forget = _domain(*rngs(0), species[:num_entities], f_attr)
    retain = _domain(*rngs(1), towns, r_attr)
    held = _domain(*rngs(2), species[num_entities:], f_attr)
    return FactSet(
        forget_sentences=forget[1],
        retain_sentences=retain[1],
        holdout_sentences=held[1],
        forget_mcq=forget[2],
        retain_mcq=retain[2],
        holdout_mcq=held[2],
        forget_facts=forget[0],
        retain_facts=retain[0],
        holdout_facts=held[0],
        values={**f_attr, **r_attr},
    )


def _jsonl_objects(path: str | Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """Yield ``(line_no, object)`` for each non-blank line; bad JSON or a non-object raises ``ValueError``."""
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no}: invalid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{line_no}: expected a JSON object, found {type(obj).__name__}")
            yield line_no, obj


def _require(path: str | Path, line_no: int, obj: dict[str, Any], key: str, expected: str) -> Any:
    """Return ``obj[key]`` or raise ``ValueError`` naming the line, the key and what was expected."""
    if key not in obj:
        raise ValueError(f"{path}:{line_no}: missing key {key!r}; expected {expected}, found keys {sorted(obj)}")
    return obj[key]


def _type_name(value: Any) -> str:
    return type(value).__name__


def read_mcq_jsonl(path: str | Path) -> list[MCQItem]:
    """Read a WMDP-style multiple-choice jsonl file.

    One JSON object per line: ``question`` (str), ``choices`` (list of exactly 4 str), ``answer`` (int 0-3),
    optional ``subject`` (str). Blank lines are skipped; other keys are ignored.

    Args:
        path: the jsonl file.

    Returns:
        The items in file order.

    Raises:
        ValueError: ``"{path}:{line_no}: ..."`` naming the key and what was expected vs found (bad JSON, missing key,
            wrong type, not 4 choices, answer outside 0-3).
    """
    items = []
    for line_no, obj in _jsonl_objects(path):
        where = f"{path}:{line_no}"
        question = _require(path, line_no, obj, "question", "str")
        if not isinstance(question, str):
            raise ValueError(f"{where}: key 'question': expected str, found {_type_name(question)}")
        choices = _require(path, line_no, obj, "choices", "a list of exactly 4 str")
        if not isinstance(choices, list):
            raise ValueError(f"{where}: key 'choices': expected a list of exactly 4 str, found {_type_name(choices)}")
        if len(choices) != 4:
            raise ValueError(f"{where}: key 'choices': expected exactly 4 choices, found {len(choices)}")
        if bad := [_type_name(c) for c in choices if not isinstance(c, str)]:
            raise ValueError(f"{where}: key 'choices': expected 4 str, found element type(s) {bad}")
        answer = _require(path, line_no, obj, "answer", "int 0-3")
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise ValueError(f"{where}: key 'answer': expected int 0-3, found {_type_name(answer)} {answer!r}")
        if not 0 <= answer <= 3:
            raise ValueError(f"{where}: key 'answer': expected int 0-3, found {answer}")
        subject = obj.get("subject", "")
        if not isinstance(subject, str):
            raise ValueError(f"{where}: key 'subject': expected str, found {_type_name(subject)}")
        items.append(MCQItem(question=question, choices=list(choices), answer=answer, subject=subject))
    return items


def read_text_jsonl(path: str | Path) -> list[str]:
    """Read a ``{"text": str}`` jsonl corpus (RMU forget/retain corpora).

    Args:
        path: the jsonl file; blank lines are skipped, other keys ignored.

    Returns:
        The texts in file order.

    Raises:
        ValueError: ``"{path}:{line_no}: ..."`` for bad JSON, a missing ``text`` key or a non-str value.
    """
    texts = []
    for line_no, obj in _jsonl_objects(path):
        text = _require(path, line_no, obj, "text", "str")
        if not isinstance(text, str):
            raise ValueError(f"{path}:{line_no}: key 'text': expected str, found {_type_name(text)}")
        texts.append(text)
    return texts


def __getattr__(name: str) -> Any:
    """The SmolLM2 locator moved to ``zoo.core.lm``; its old names stay importable here (lazily: no torch import)."""
    if name in ("SMOLLM2_GGUF", "SMOLLM2_PIP", "locate_smollm2"):
        from zoo.core import lm

        return getattr(lm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
