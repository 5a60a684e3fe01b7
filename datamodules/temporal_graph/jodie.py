"""Reader for the JODIE CSV layout (``user_id,item_id,timestamp,state_label,features...``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datamodules.temporal_graph.raw import (
    RawTemporal,
    TemporalFormatError,
    _features,
    _numeric,
    _order,
    _permute,
    _read_table,
    missing_file,
)


def _jodie_arrays(data: bytes, display: str) -> tuple[np.ndarray, ...]:
    """Parse JODIE bytes into (src, dst, t, label, msg) in file order (see :func:`parse_jodie`)."""
    tab = _read_table(data, display, header_lines=1, layout="user_id,item_id,timestamp,state_label,features...")
    n_cols = tab.frame.shape[1]
    if n_cols < 4:
        raise TemporalFormatError(
            f"{display}: line 2: expected at least 4 fields (user,item,timestamp,state_label[,features]), "
            f"found {n_cols}"
        )
    user = _numeric(tab, 0, "user id", integer=True, minimum=0)
    item = _numeric(tab, 1, "item id", integer=True, minimum=0)
    t = _numeric(tab, 2, "timestamp")
    label = _numeric(tab, 3, "state label", integer=True)
    msg = _features(tab, 4, "edge feature")
    # PyG/TGB map items to item + max(user) + 1 (0-based); +1 for the zoo's 1-based ids (= DyGLib ml_ ids).
    return user + 1, item + int(user.max()) + 2, t, label, msg


def parse_jodie(data: bytes, display: str, *, name: str, sort: bool = False) -> RawTemporal:
    """Parse the JODIE layout ``user_id,item_id,timestamp,state_label,f_1..f_F`` (also TGB ``tgbl-wiki``).

    The header names 5 columns while rows carry 4+F fields, so line 1 is skipped and no header is used. Users and
    items are 0-based in their own spaces: ``src = user + 1``, ``dst = item + max(user) + 2``. ``t`` stays float.

    Args:
        data: the csv bytes (a file's content, or the embedded generator's output).
        display: file name for error messages.
        name: dataset name.
        sort: stable-sort decreasing timestamps (said on stderr) instead of raising.

    Returns:
        The parsed stream.
    """
    src, dst, t, label, msg = _jodie_arrays(data, display)
    raw = RawTemporal(name=name, source=display, src=src, dst=dst, t=t, msg=msg, label=label)
    return _permute(raw, _order(t, display, 2, sort))


def read_jodie(path: str | Path, *, name: str | None = None, sort: bool = False) -> RawTemporal:
    """Read a JODIE ``<name>.csv`` file (see :func:`parse_jodie`).

    Args:
        path: the csv file.
        name: dataset name (default: the file stem).
        sort: stable-sort decreasing timestamps instead of raising.

    Returns:
        The parsed stream.
    """
    path = Path(path)
    if not path.is_file():
        raise missing_file(path, "JODIE csv")
    return parse_jodie(path.read_bytes(), str(path), name=name or path.stem, sort=sort)
