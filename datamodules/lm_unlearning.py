"""Old path ``datamodules.lm_unlearning``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.text.unlearning_datamodule``
"""

from datamodules.text.unlearning_datamodule import LMUnlearningDataModule, Phase

__all__ = ["LMUnlearningDataModule", "Phase"]
