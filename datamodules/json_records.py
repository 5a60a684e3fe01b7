"""Old path ``datamodules.json_records``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.common.json_records``
"""

from datamodules.common.json_records import read_json_records

__all__ = ["read_json_records"]
