"""Old path ``datamodules.kanswer``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.classification.kanswer_datamodule``
- ``datamodules.classification.kanswer_synthetic``
"""

from datamodules.classification.kanswer_datamodule import KAnswerDataModule
from datamodules.classification.kanswer_synthetic import kanswer_data

__all__ = ["kanswer_data", "KAnswerDataModule"]
