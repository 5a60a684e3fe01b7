"""Reader for instruction records (Alpaca-style JSON/JSONL) into grammar samples.

The real format is an Alpaca-style JSON list or JSONL of ``{"instruction", "input", "output"}`` records
(``read_instruction_records``); prompts are the whitespace-split instruction and input words, and a record is harmful
when its output starts with the refusal word (``REFUSE`` by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datamodules.common.json_records import read_json_records
from datamodules.instructions.synthetic import Sample
from datamodules.instructions.vocab import BOS, EOS, REFUSE, SEP, SPECIAL_TOKENS

#: Keys of an instruction record.
RECORD_FIELDS: tuple[str, ...] = ("instruction", "input", "output")


def _raw_records(path: Path) -> list[tuple[str, Any]]:
    """``(where, object)`` per record (``datamodules.common.json_records``); text that is not UTF-8 names the file."""
    expected = "an Alpaca-style JSON list or JSONL of instruction records"
    return read_json_records(path, lambda line, i: f"record {i} (line {line})", expected)


def read_instruction_records(path: str | Path) -> list[dict[str, str]]:
    """Read an Alpaca-style JSON list or JSONL file of ``{"instruction", "input", "output"}`` records.

    A file whose first non-blank character is ``[`` is read as one JSON list, any other as JSONL (one object per
    line, blank lines skipped). Extra keys are ignored. Record indices in errors count records from 0.

    Args:
        path: the file, or ``synthetic:<n>[:<seed>]``: the card's grammar written once as Alpaca-style JSONL into
            ``$ZOO_CACHE/instructions`` (:func:`datamodules.instructions.alpaca.resolve_records_path`), then read.

    Returns:
        The records (``instruction``, ``input``, ``output`` only), in file order.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: text that is not UTF-8, invalid JSON (naming the line), no records, a record that is not an
            object, a missing ``instruction`` or ``output``, a non-string value, an empty instruction or output, or a
            special token (``[SEP]``, ``[EOS]``, ...) written in a field (naming the file, the record index and the
            field), a malformed ``synthetic:`` value. A missing ``input`` is read as ``""``, as Alpaca-style files
            often omit it.
    """
    if isinstance(path, str) and path.startswith("synthetic:"):
        from datamodules.instructions.alpaca import resolve_records_path

        path = resolve_records_path(path)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; expected an Alpaca-style JSON list or JSONL of instruction "
                                "records")  # fmt: skip
    raw = _raw_records(path)
    if not raw:
        raise ValueError(f"{path}: no records; expected objects with instruction, input and output")
    records = []
    for where, obj in raw:
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: {where}: expected a JSON object, found {type(obj).__name__}")
        obj = {"input": "", **obj}  # many Alpaca-style files omit an empty input
        for key in RECORD_FIELDS:
            if key not in obj:
                raise ValueError(
                    f"{path}: {where}: missing field {key!r}; expected instruction, input and output, found keys "
                    f"{sorted(obj)}"
                )
            if not isinstance(obj[key], str):
                raise ValueError(f"{path}: {where}: field {key!r}: expected str, found {type(obj[key]).__name__}")
        for key in ("instruction", "output"):  # an empty instruction leaves the prompt [BOS] [SEP]
            if not obj[key].strip():
                raise ValueError(f"{path}: {where}: field {key!r}: expected a non-empty string, found {obj[key]!r}")
        for key in RECORD_FIELDS:  # a literal [SEP] or [EOS] would silently become the structure token
            if special := sorted(set(obj[key].split()) & set(SPECIAL_TOKENS)):
                raise ValueError(f"{path}: {where}: field {key!r}: contains the special token {special[0]!r}; "
                                 f"expected text without {list(SPECIAL_TOKENS)}")  # fmt: skip
        records.append({key: obj[key] for key in RECORD_FIELDS})
    return records


def records_to_samples(
    records: Sequence[dict[str, str]], refusal_word: str = REFUSE, origin: str = "records"
) -> list[Sample]:
    """Word-level samples of instruction records.

    Prompt ``[BOS] <instruction words> <input words> [SEP]``, response ``<output words> [EOS]`` (whitespace split).
    For real data the refusal marker is the first output word: a record is harmful when its output starts with
    ``refusal_word``. ``op`` is ``None`` and ``digits`` empty.

    Args:
        records: records as returned by :func:`read_instruction_records`.
        refusal_word: the first output word that marks a refusal (a harmful prompt).
        origin: label of the source in ``Sample.origin`` (usually the file name).

    Returns:
        The clean samples.
    """
    samples = []
    for i, rec in enumerate(records):
        out_words = rec["output"].split()
        samples.append(
            Sample(
                prompt=[BOS, *rec["instruction"].split(), *rec["input"].split(), SEP],
                response=[*out_words, EOS],
                harmful=bool(out_words) and out_words[0] == refusal_word,
                origin=f"{origin} record {i}",
            )
        )
    return samples
