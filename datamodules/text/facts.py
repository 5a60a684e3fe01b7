"""Synthetic two-domain facts for the UAM card's LM protocol: the seeded generator, its sentences and MCQ items.

The synthetic default (``make_facts``) is a seeded fact-injection task: a *forget* domain of fictional species
(``s00..s39`` x {habitat, diet, color}) and a *retain* domain of fictional towns (``t00..t39`` x {region, product,
festival}); every attribute has ``num_values`` value words. Each fact is written in three sentence templates and
asked as a 4-option multiple-choice item whose stem is the prefix of the second template, e.g.
``the habitat of s07 is`` -> ``marsh``. Ten extra species (``s40..s49``) with their own facts are never trained and
serve as non-members for membership inference.

Value words are distinct ordinary English words (one list per attribute, no word shared between attributes), so
the same data reads naturally for a pretrained tokenizer (SmolLM2) and is one token each for ``WordTokenizer``.

The real formats are read by :mod:`datamodules.text.readers` and tokenised by :mod:`datamodules.text.tokenizer`.
This module uses only the standard library and numpy (no lightning, no transformers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
