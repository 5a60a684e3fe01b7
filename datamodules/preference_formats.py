"""On-disk preference formats for ``xrlhf`` (card "Real on-disk formats"): HH-RLHF-style jsonl and precomputed features.

- **Preference jsonl**: one object per line with string ``prompt``, ``chosen`` and ``rejected`` (extra keys such as
  ``Dahoas/full-hh-rlhf``'s ``response`` are ignored). ``chosen == rejected`` cannot orient a comparison and raises.
- **Feature ``.npz``**: training side ``delta_phi`` (n, d) float, winner − loser, optional ``pair_id`` (n,) and
  ``corrupted`` (n,) ground truth; test side ``phi_candidates`` (m, M, d), ``sft_logits`` (m, M), ``r_eval`` (m, M).

Errors name the file, the line or key, the expectation and what was found.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.json_records import read_json_records

PREFERENCE_KEYS = ("prompt", "chosen", "rejected")
TRAIN_KEYS = ("delta_phi",)
TEST_KEYS = ("phi_candidates", "sft_logits", "r_eval")


def read_preference_jsonl(path: str | Path) -> list[dict[str, str]]:
    """``[{"prompt", "chosen", "rejected"}]`` from a jsonl (or JSON list) file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid JSON, a record that is not an object, a missing or non-string key, ``chosen == rejected``,
            or no records; the message names the file and the line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such preference file (expected jsonl with prompt, chosen, rejected)")
    records = []
    for where, obj in read_json_records(path, lambda line, i: f"line {line}"):
        if not isinstance(obj, Mapping):
            raise ValueError(f"{path}: {where}: expected a JSON object with {list(PREFERENCE_KEYS)}, "
                             f"found {type(obj).__name__}")  # fmt: skip
        for key in PREFERENCE_KEYS:
            if key not in obj:
                raise ValueError(f"{path}: {where}: missing key {key!r}; expected {list(PREFERENCE_KEYS)}, found "
                                 f"keys {sorted(map(str, obj))}")  # fmt: skip
            if not isinstance(obj[key], str):
                raise ValueError(f"{path}: {where}: key {key!r}: expected str, found {type(obj[key]).__name__}")
        if obj["chosen"] == obj["rejected"]:
            raise ValueError(f"{path}: {where}: chosen == rejected; a comparison needs two different responses")
        records.append({key: obj[key] for key in PREFERENCE_KEYS})
    if not records:
        raise ValueError(f"{path}: no records; expected one JSON object per line with {list(PREFERENCE_KEYS)}")
    return records


def read_feature_npz(path: str | Path) -> dict[str, Any]:
    """The arrays of a precomputed-feature ``.npz``, shape-checked against each other.

    Returns:
        ``delta_phi`` (n, d), ``pair_id`` (n,) or None, ``corrupted`` (n,) bool or None, and the test side
        (``phi_candidates``, ``sft_logits``, ``r_eval``) or None when the file has none of it.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing key, a wrong rank, disagreeing d / n / m / M, or NaN, naming the keys and shapes.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such feature file (expected .npz with delta_phi[, test arrays])")
    with np.load(path, allow_pickle=False) as blob:
        arrays = {k: blob[k] for k in blob.files}
    if "delta_phi" not in arrays:
        raise ValueError(f"{path}: missing key 'delta_phi' (n, d); found keys {sorted(arrays)}")
    delta = arrays["delta_phi"].astype(np.float64)
    if delta.ndim != 2 or len(delta) == 0:
        raise ValueError(f"{path}: delta_phi: expected a non-empty (n, d) array, found shape {delta.shape}")
    n, d = delta.shape
    out: dict[str, Any] = {"delta_phi": delta, "pair_id": None, "corrupted": None}
    for key in ("pair_id", "corrupted"):
        if key in arrays:
            if arrays[key].shape != (n,):
                raise ValueError(f"{path}: {key}: expected shape ({n},) to match delta_phi {delta.shape}, "
                                 f"found {arrays[key].shape}")  # fmt: skip
            out[key] = arrays[key].astype(bool) if key == "corrupted" else arrays[key]
    present = [k for k in TEST_KEYS if k in arrays]
    if present:
        if missing := [k for k in TEST_KEYS if k not in arrays]:
            raise ValueError(f"{path}: test side incomplete: missing {missing}; found {present}")
        phi, sft, r_eval = (arrays[k].astype(np.float64) for k in TEST_KEYS)
        if phi.ndim != 3 or phi.shape[2] != d:
            raise ValueError(f"{path}: phi_candidates: expected (m, M, d={d}) to match delta_phi {delta.shape}, "
                             f"found {phi.shape}")  # fmt: skip
        for key, value in (("sft_logits", sft), ("r_eval", r_eval)):
            if value.shape != phi.shape[:2]:
                raise ValueError(f"{path}: {key}: expected shape {phi.shape[:2]} (m, M) to match phi_candidates "
                                 f"{phi.shape}, found {value.shape}")  # fmt: skip
        out.update(phi_candidates=phi, sft_logits=sft, r_eval=r_eval)
    else:
        out.update(phi_candidates=None, sft_logits=None, r_eval=None)
    for key in ("delta_phi", *TEST_KEYS):
        if out.get(key) is not None and not np.isfinite(out[key]).all():
            raise ValueError(f"{path}: {key}: contains NaN or inf")
    return out
