"""Old path ``datamodules.unlearning``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.classification.unlearning_datamodule``
- ``datamodules.common.phases``
"""

from datamodules.classification.unlearning_datamodule import Mode, Source, UnlearningDataModule
from datamodules.common.phases import Phase, PhasedDataModule, batched_loader

__all__ = ["batched_loader", "Mode", "Phase", "PhasedDataModule", "Source", "UnlearningDataModule"]
