"""The card's synthetic instruction grammar written as Alpaca-style JSONL (the real on-disk format).

A real-LM run (SmolLM2-135M) needs instruction records on disk, and the zoo downloads nothing: this writes the
grammar's clean samples as ``{"instruction", "input", "output"}`` records (instruction = the prompt's body words,
input ``""``, output = the response words without ``[EOS]``), which :func:`~datamodules.instructions.readers.
read_instruction_records` reads back into the same samples (``records_to_samples``: a refusal output marks a
harmful record). Poisoning stays the datamodule's (``BackdoorPoisoner`` on the words of instruction + input).

``--data.init_args.path=synthetic:<n>[:<seed>]`` writes ``n`` records once into
``$ZOO_CACHE/instructions/synthetic-<n>-seed<seed>.jsonl`` and reads that file (:func:`resolve_records_path`);
``python -m datamodules.instructions.alpaca OUT --n N --seed S`` writes one anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from datamodules.instructions.synthetic import Sample, generate_samples
from datamodules.instructions.vocab import BOS, EOS, SEP
from zoo.core.cache import cache_dir
from zoo.core.messages import say

#: ``path`` values that name generated grammar records: ``synthetic:<n>`` or ``synthetic:<n>:<seed>``.
SYNTHETIC_SPEC = re.compile(r"^synthetic:(\d+)(?::(\d+))?$")


def samples_to_records(samples: Sequence[Sample]) -> list[dict[str, str]]:
    """Alpaca-style records of clean word-level samples.

    Args:
        samples: samples whose prompt is ``[BOS] <body> [SEP]`` and response ``<words> [EOS]``.

    Returns:
        ``{"instruction": <body words>, "input": "", "output": <response words>}`` per sample (space-joined).

    Raises:
        ValueError: a sample without that structure (naming its index).
    """
    records = []
    for i, s in enumerate(samples):
        if len(s.prompt) < 3 or s.prompt[0] != BOS or s.prompt[-1] != SEP or not s.response or s.response[-1] != EOS:
            raise ValueError(f"sample {i}: expected a prompt [BOS] <words> [SEP] and a response <words> [EOS], found "
                             f"{s.prompt} / {s.response}")  # fmt: skip
        records.append({"instruction": " ".join(s.prompt[1:-1]), "input": "", "output": " ".join(s.response[:-1])})
    return records


def write_instruction_records(records: Sequence[dict[str, str]], path: str | Path) -> Path:
    """Write records as JSONL (one object per line, UTF-8), atomically (a temporary file renamed into place).

    Args:
        records: ``{"instruction", "input", "output"}`` objects.
        path: the output file (its folder is created).

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps({k: rec[k] for k in ("instruction", "input", "output")}, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def write_synthetic_records(path: str | Path, n: int, seed: int = 0) -> Path:
    """Write ``n`` clean grammar samples (``generate_samples(n, [seed, 0])``: 30% harmful) as Alpaca-style JSONL.

    Args:
        path: the output file.
        n: number of records (at least 1).
        seed: the grammar's seed.

    Returns:
        The path written.
    """
    if n < 1:
        raise ValueError(f"write_synthetic_records: n={n}; expected at least 1 record")
    return write_instruction_records(samples_to_records(generate_samples(n, [seed, 0])), path)


def resolve_records_path(path: str) -> str:
    """A records file for ``path``: ``synthetic:<n>[:<seed>]`` is written once into the cache; anything else is kept.

    Args:
        path: a file path, or ``synthetic:<n>`` / ``synthetic:<n>:<seed>``.

    Returns:
        The file to read.

    Raises:
        ValueError: a ``synthetic:`` value that is not ``synthetic:<n>[:<seed>]`` with ``n ≥ 1``.
    """
    if not path.startswith("synthetic:"):
        return path
    match = SYNTHETIC_SPEC.match(path)
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"--data.init_args.path/clean_path={path!r}: expected synthetic:<n>[:<seed>] with n >= 1 "
                         "(the card's grammar written as Alpaca-style JSONL) or a file")  # fmt: skip
    n, seed = int(match.group(1)), int(match.group(2) or 0)
    out = cache_dir("instructions") / f"synthetic-{n}-seed{seed}.jsonl"
    if not out.is_file():
        say(f"path={path}: writing {n} grammar records (seed {seed}) as Alpaca-style JSONL into {out}")
        write_synthetic_records(out, n, seed)
    return str(out)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m datamodules.instructions.alpaca OUT --n N --seed S``: write grammar records as JSONL."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output .jsonl file")
    parser.add_argument("--n", type=int, default=1000, help="number of records (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the grammar's seed (default 0)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n={args.n}: expected at least 1")
    print(write_synthetic_records(args.out, args.n, args.seed))


if __name__ == "__main__":
    main()
