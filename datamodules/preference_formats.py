"""Old path ``datamodules.preference_formats``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.preference.readers``
"""

from datamodules.preference.readers import (
    PREFERENCE_KEYS,
    TEST_KEYS,
    TRAIN_KEYS,
    read_feature_npz,
    read_preference_jsonl,
)

__all__ = ["PREFERENCE_KEYS", "TEST_KEYS", "TRAIN_KEYS", "read_feature_npz", "read_preference_jsonl"]
