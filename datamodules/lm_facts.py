"""Old path ``datamodules.lm_facts``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.text.facts``
- ``datamodules.text.readers``
- ``datamodules.text.tokenizer``
- ``zoo.core.lm`` (the SmolLM2 locator, lazily)
"""

from __future__ import annotations

from typing import Any

from datamodules.text.facts import (
    FORGET_ATTRIBUTES,
    MCQ_STEM,
    RETAIN_ATTRIBUTES,
    TEMPLATES,
    FactSet,
    MCQItem,
    make_facts,
)
from datamodules.text.readers import read_mcq_jsonl, read_text_jsonl
from datamodules.text.tokenizer import SPECIAL_TOKENS, WordTokenizer

__all__ = [
    "FactSet",
    "FORGET_ATTRIBUTES",
    "make_facts",
    "MCQ_STEM",
    "MCQItem",
    "read_mcq_jsonl",
    "read_text_jsonl",
    "RETAIN_ATTRIBUTES",
    "SPECIAL_TOKENS",
    "TEMPLATES",
    "WordTokenizer",
]


def __getattr__(name: str) -> Any:
    """The SmolLM2 locator moved to ``zoo.core.lm``; its old names stay importable here (lazily: no torch import)."""
    if name in ("SMOLLM2_GGUF", "SMOLLM2_PIP", "locate_smollm2"):
        from zoo.core import lm

        return getattr(lm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
