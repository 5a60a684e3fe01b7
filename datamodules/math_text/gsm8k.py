"""Reader for GSM8K-style JSONL prompts (``question``/``answer``), with one-line errors."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from datamodules.common.json_records import read_json_records
from zoo.moe_cap.answers import gsm8k_gold


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
