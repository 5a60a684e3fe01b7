"""Old path ``datamodules.math_formats``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.math_text.answers``
- ``datamodules.math_text.math_records``
"""

from datamodules.math_text.answers import MAX_SYMPY_CHARS, answers_equivalent, last_boxed, normalize_answer
from datamodules.math_text.math_records import RECORD_FIELDS, read_math_records, write_math_jsonl

__all__ = [
    "answers_equivalent",
    "last_boxed",
    "MAX_SYMPY_CHARS",
    "normalize_answer",
    "read_math_records",
    "RECORD_FIELDS",
    "write_math_jsonl",
]
