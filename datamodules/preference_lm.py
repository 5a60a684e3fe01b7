"""Old path ``datamodules.preference_lm``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.preference.lm_datamodule``
- ``datamodules.preference.readers``
"""

from datamodules.preference.lm_datamodule import SELECTORS, PreferenceLMDataModule, Selector, Target
from datamodules.preference.readers import CANDIDATE_KEYS, read_candidate_jsonl, read_corrupted_flags

__all__ = [
    "CANDIDATE_KEYS",
    "PreferenceLMDataModule",
    "SELECTORS",
    "Selector",
    "Target",
    "read_candidate_jsonl",
    "read_corrupted_flags",
]
