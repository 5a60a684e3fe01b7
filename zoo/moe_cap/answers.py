"""Gold answers, prediction extraction, exact match and token F1 (card ``moe_cap``, "Data" and "Metrics").

GSM8K golds are the text after the last ``####`` (:func:`gsm8k_gold`). A model's output is reduced to its final answer
by :func:`extract_prediction` (after the last ``####``, else after the last "answer is", else the last number: the first
two rules follow the public MoE-CAP code, the fallback is ours). :func:`normalise` then strips whitespace, commas, ``$``
and a trailing period; :func:`exact_match` and :func:`f1` compare normalised strings, reading numbers as numbers.

Pure Python: no torch import.
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal, InvalidOperation

#: A number in model output: optional minus, digits with optional thousands commas, optional decimals.
_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
#: A whole normalised token that reads as a decimal number (no exponent, no ``nan``/``inf``).
_NUMERIC_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_ANSWER_IS_RE = re.compile(r"answer is", re.IGNORECASE)
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _drop_thousands_commas(s: str) -> str:
    """``1,234,567`` -> ``1234567``; commas not between a digit and three digits stay."""
    return _THOUSANDS_RE.sub("", s)


def gsm8k_gold(answer: str) -> str | None:
    """The gold of a GSM8K answer: the text after the last ``####``, stripped, thousands commas removed.

    Args:
        answer: the dataset's ``answer`` field (worked solution ending in ``#### <final answer>``).

    Returns:
        The final answer (``"#### 1,234"`` -> ``"1234"``; may be empty when nothing follows the marker); None if the
        text has no ``####``.
    """
    if "####" not in answer:
        return None
    return _drop_thousands_commas(answer.rsplit("####", 1)[1].strip())


def _after_marker(segment: str) -> str:
    """The answer in the text that follows a marker: its leading number if it starts with one, else its first line."""
    line = segment.strip().split("\n", 1)[0].strip().lstrip(":").strip()
    m = re.match(r"\$?\s*(" + _NUMBER_RE.pattern + ")", line)
    if m:
        return m.group(1).replace(",", "")
    return line


def _last_number(text: str) -> str | None:
    """The last number in ``text``, commas removed; a ``-`` right after a digit or letter is a minus, not a sign."""
    last = None
    for m in _NUMBER_RE.finditer(text):
        value = m.group(0)
        if value.startswith("-") and m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == ")"):
            value = value[1:]
        last = value
    return None if last is None else last.replace(",", "")


def extract_prediction(text: str, fallback_last_number: bool = True) -> str:
    r"""The final answer in a model's output.

    Rules, first match wins: the text after the last ``####``; the text after the last "answer is" (any case); with
    ``fallback_last_number``, the last number in the text (integers, decimals, negatives, thousands commas); else the
    stripped text. After a marker the answer is the leading number of the text that follows (commas removed, a ``$``
    skipped), or, when that text does not start with a number, its first line, stripped (a leading ``:`` dropped).

    Examples: ``"#### 1,234\nfoo"`` -> ``"1234"``; ``"The answer is 42."`` -> ``"42"``; ``"so 3 and -7"`` -> ``"-7"``;
    ``"12-3"`` -> ``"3"`` (a minus after a digit is an operator).

    Args:
        text: the generated continuation.
        fallback_last_number: use the last number when no marker is present (ours; the public code stops at the
            markers).

    Returns:
        The extracted answer (not yet normalised: pass it to :func:`exact_match` / :func:`f1`).
    """
    if "####" in text:
        return _after_marker(text.rsplit("####", 1)[1])
    found = list(_ANSWER_IS_RE.finditer(text))
    if found:
        return _after_marker(text[found[-1].end() :])
    if fallback_last_number and (number := _last_number(text)) is not None:
        return number
    return text.strip()


def normalise(s: str) -> str:
    """Strip, drop every comma and ``$``, drop one trailing ``.``, collapse whitespace runs to one space.

    Case is kept. ``" $1,234. "`` -> ``"1234"``.

    Args:
        s: an answer string.

    Returns:
        The normalised string.
    """
    s = re.sub(r"\s+", " ", s.replace(",", "").replace("$", "")).strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    return s


def _canonical_token(token: str) -> str:
    """A numeric token as its canonical decimal (``"42.0"`` -> ``"42"``, ``"-0"`` -> ``"0"``); others unchanged."""
    if not _NUMERIC_RE.fullmatch(token):
        return token
    try:
        value = Decimal(token)
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        return token
    if value == 0:
        return "0"
    return format(value.normalize(), "f")


def _tokens(s: str) -> list[str]:
    """Whitespace tokens of the normalised string, numbers canonicalised."""
    return [_canonical_token(t) for t in normalise(s).split(" ") if t]


def exact_match(pred: str, gold: str) -> bool:
    """Whether ``pred`` equals ``gold`` after :func:`normalise`, with numbers compared as numbers.

    Every whitespace token that reads as a decimal number is compared by value (``"42.0" == "42"``,
    ``"-3" == "-3.00"``, ``"$1,000" == "1000"``), so a whole numeric string is the one-token case.

    Args:
        pred: the extracted prediction.
        gold: the gold answer.
    """
    return _tokens(pred) == _tokens(gold)


def f1(pred: str, gold: str) -> float:
    """SQuAD-style token F1: multiset overlap of whitespace tokens after :func:`normalise` (numbers canonicalised).

    Both empty -> 1.0; exactly one empty -> 0.0; no common token -> 0.0. Unlike SQuAD, case, articles and punctuation
    other than commas/``$``/a trailing period are kept (the card's normalisation), so ``f1("the cat sat", "the cat")``
    is 0.8.

    Args:
        pred: the extracted prediction.
        gold: the gold answer.
    """
    p, g = _tokens(pred), _tokens(gold)
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def em_f1(preds: list[str], golds: list[str]) -> tuple[float, float]:
    """Mean exact match and mean F1 over paired predictions and golds.

    Args:
        preds: extracted predictions, one per item.
        golds: gold answers, same order.

    Returns:
        ``(em, f1)``; ``(nan, nan)`` for zero items (a mean over nothing is undefined).

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(preds) != len(golds):
        raise ValueError(f"em_f1: {len(preds)} predictions but {len(golds)} golds; expected one prediction per gold")
    if not preds:
        return float("nan"), float("nan")
    n = len(preds)
    return sum(exact_match(p, g) for p, g in zip(preds, golds)) / n, sum(f1(p, g) for p, g in zip(preds, golds)) / n
