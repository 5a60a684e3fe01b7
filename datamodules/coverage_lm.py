"""Old path ``datamodules.coverage_lm``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.math_text.addition``
- ``datamodules.math_text.coverage_datamodule``
- ``datamodules.math_text.prompt_response``
"""

from datamodules.math_text.addition import (
    ADDITION_VOCAB,
    BOS,
    EOS,
    EQUALS,
    PLUS,
    CharVocab,
    addition_examples,
    noise_table,
)
from datamodules.math_text.coverage_datamodule import CoverageLMDataModule, KeptSampler
from datamodules.math_text.prompt_response import PromptResponseDataset, collate_prompt_response

__all__ = [
    "addition_examples",
    "ADDITION_VOCAB",
    "BOS",
    "CharVocab",
    "collate_prompt_response",
    "CoverageLMDataModule",
    "EOS",
    "EQUALS",
    "KeptSampler",
    "noise_table",
    "PLUS",
    "PromptResponseDataset",
]
