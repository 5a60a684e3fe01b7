"""Old path ``datamodules.preferences``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.preference.feature_datamodule``
"""

from datamodules.preference.feature_datamodule import (
    SELECTION_ARGS,
    SELECTORS,
    ForgetSelector,
    PreferenceDataModule,
    Selector,
    Target,
    UnlearnMode,
    deprecated_selection,
    planted_recall,
)

__all__ = [
    "ForgetSelector",
    "PreferenceDataModule",
    "SELECTION_ARGS",
    "SELECTORS",
    "Selector",
    "Target",
    "UnlearnMode",
    "deprecated_selection",
    "planted_recall",
]
