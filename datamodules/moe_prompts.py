"""Old path ``datamodules.moe_prompts``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.math_text.arith_em``
- ``datamodules.math_text.gsm8k``
- ``datamodules.math_text.prompt_datamodule``
"""

from datamodules.math_text.arith_em import ARITH_OPS, MAX_DIGITS, arith_em_items, arith_em_splits
from datamodules.math_text.gsm8k import read_gsm8k_jsonl
from datamodules.math_text.prompt_datamodule import MoEPromptDataModule, collate_prompts

__all__ = [
    "arith_em_items",
    "arith_em_splits",
    "ARITH_OPS",
    "collate_prompts",
    "MAX_DIGITS",
    "MoEPromptDataModule",
    "read_gsm8k_jsonl",
]
