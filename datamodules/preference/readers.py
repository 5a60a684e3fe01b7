"""On-disk preference formats for ``xrlhf`` (card "Real on-disk formats"): HH-RLHF-style jsonl and precomputed features.

- **Preference jsonl**: one object per line with string ``prompt``, ``chosen`` and ``rejected`` (extra keys such as
  ``Dahoas/full-hh-rlhf``'s ``response`` are ignored). ``chosen == rejected`` cannot orient a comparison and raises.
- **Feature ``.npz``**: training side ``delta_phi`` (n, d) float, winner − loser, optional ``pair_id`` (n,) and
  ``corrupted`` (n,) ground truth; test side ``phi_candidates`` (m, M, d), ``sft_logits`` (m, M), ``r_eval`` (m, M).

Errors name the file, the line or key, the expectation and what was found.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.common.json_records import read_json_records

PREFERENCE_KEYS = ("prompt", "chosen", "rejected")
TRAIN_KEYS = ("delta_phi",)
TEST_KEYS = ("phi_candidates", "sft_logits", "r_eval")
CANDIDATE_KEYS = ("prompt", "responses", "sft_logits", "r_eval")


def _records(path: Path, what: str) -> list[tuple[str, Any]]:
    """``(where, object)`` per record (``datamodules.common.json_records``); text that is not UTF-8 names the file."""
    return read_json_records(path, lambda line, i: f"line {line}", what)


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
    for where, obj in _records(path, f"jsonl with {list(PREFERENCE_KEYS)}"):
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
        ValueError: not an ``.npz`` archive, a missing key, a non-numeric or boolean feature array, ``corrupted``
            that is neither bool nor 0/1, a wrong rank, disagreeing d / n / m / M, fewer than 2 candidates, or NaN,
            naming the keys and shapes.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such feature file (expected .npz with delta_phi[, test arrays])")
    arrays = _load_npz(path)
    if "delta_phi" not in arrays:
        raise ValueError(f"{path}: missing key 'delta_phi' (n, d); found keys {sorted(arrays)}")
    delta = _real(path, "delta_phi", arrays["delta_phi"])
    if delta.ndim != 2 or len(delta) == 0:
        raise ValueError(f"{path}: delta_phi: expected a non-empty (n, d) array, found shape {delta.shape}")
    n, d = delta.shape
    out: dict[str, Any] = {"delta_phi": delta, "pair_id": None, "corrupted": None}
    for key in ("pair_id", "corrupted"):
        if key in arrays:
            if arrays[key].shape != (n,):
                raise ValueError(f"{path}: {key}: expected shape ({n},) to match delta_phi {delta.shape}, "
                                 f"found {arrays[key].shape}")  # fmt: skip
            out[key] = _flags(path, arrays[key]) if key == "corrupted" else arrays[key]
    present = [k for k in TEST_KEYS if k in arrays]
    if present:
        if missing := [k for k in TEST_KEYS if k not in arrays]:
            raise ValueError(f"{path}: test side incomplete: missing {missing}; found {present}")
        phi, sft, r_eval = (_real(path, k, arrays[k]) for k in TEST_KEYS)
        if phi.ndim != 3 or phi.shape[2] != d:
            raise ValueError(f"{path}: phi_candidates: expected (m, M, d={d}) to match delta_phi {delta.shape}, "
                             f"found {phi.shape}")  # fmt: skip
        if phi.shape[0] < 1 or phi.shape[1] < 2:  # no prompt, or no choice between candidates: nothing to explain
            raise ValueError(f"{path}: phi_candidates: expected m >= 1 test prompts with M >= 2 candidates each, "
                             f"found shape {phi.shape}")  # fmt: skip
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


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive; anything else (a ``.npy``, a pickle, text, an empty file) names the file."""
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: empty file; expected a .npz archive of named numeric arrays")
    reason = "a single .npy array"
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded as blob:
                return {k: blob[k] for k in blob.files}
    except (ValueError, OSError, EOFError) as err:  # pickled or object data, a bad zip, a truncated file
        reason = str(err).split(". ")[0] or type(err).__name__
    raise ValueError(f"{path}: not a .npz archive of named numeric arrays ({reason})")


def _real(path: Path, key: str, array: np.ndarray) -> np.ndarray:
    """``array`` as float64 when it holds real numbers (bool, complex, str or object dtypes name the key)."""
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise ValueError(f"{path}: {key}: expected real numbers, found dtype {array.dtype}")
    return array.astype(np.float64)


def _flags(path: Path, array: np.ndarray) -> np.ndarray:
    """The ``corrupted`` ground truth as bool: a bool array, or integers that are all 0 or 1 (nothing else is cast)."""
    if array.dtype == bool:
        return array
    if np.issubdtype(array.dtype, np.integer) and np.isin(array, (0, 1)).all():
        return array.astype(bool)
    raise ValueError(f"{path}: corrupted: expected bool or 0/1 flags, found dtype {array.dtype}")


def read_candidate_jsonl(path: str | Path) -> dict[str, Any]:
    """The test side of the tiny-LM path from a jsonl (see the module docstring for the format).

    Returns:
        ``prompts`` (list of m str), ``responses`` (m lists of M str), ``sft_logits`` and ``r_eval`` ``(m, M)``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid JSON, a missing key, a wrong type, a list whose length differs from ``responses`` or
            from the first line's M, a non-finite number, or no records; the message names file, line and key.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such test file (expected jsonl with {list(CANDIDATE_KEYS)})")
    prompts: list[str] = []
    responses: list[list[str]] = []
    sft: list[list[float]] = []
    r_eval: list[list[float]] = []
    width: int | None = None
    for where, obj in _records(path, f"jsonl with {list(CANDIDATE_KEYS)}"):
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: {where}: expected a JSON object with {list(CANDIDATE_KEYS)}, "
                             f"found {type(obj).__name__}")  # fmt: skip
        if missing := [k for k in CANDIDATE_KEYS if k not in obj]:
            raise ValueError(f"{path}: {where}: missing key {missing[0]!r}; expected {list(CANDIDATE_KEYS)}, found "
                             f"keys {sorted(map(str, obj))}")  # fmt: skip
        if not isinstance(obj["prompt"], str):
            raise ValueError(f"{path}: {where}: key 'prompt': expected str, found {type(obj['prompt']).__name__}")
        cands = obj["responses"]
        if not isinstance(cands, list) or not cands or not all(isinstance(c, str) for c in cands):
            raise ValueError(f"{path}: {where}: key 'responses': expected a non-empty list of str, found {cands!r:.80}")
        if len(cands) < 2:  # one candidate: the policy has no choice, so no response can be unsatisfactory
            raise ValueError(f"{path}: {where}: key 'responses': expected at least 2 candidates, found {len(cands)}")
        width = len(cands) if width is None else width
        if len(cands) != width:
            raise ValueError(f"{path}: {where}: key 'responses': expected M={width} candidates (as on the first "
                             f"line), found {len(cands)}")  # fmt: skip
        row = {}
        for key in ("sft_logits", "r_eval"):
            values = obj[key]
            if not isinstance(values, list) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                                       for v in values):  # fmt: skip
                raise ValueError(f"{path}: {where}: key {key!r}: expected a list of {width} numbers, found "
                                 f"{values!r:.80}")  # fmt: skip
            if len(values) != len(cands):
                raise ValueError(f"{path}: {where}: key {key!r}: expected {len(cands)} values (one per response), "
                                 f"found {len(values)}")  # fmt: skip
            if not all(math.isfinite(v) for v in values):
                raise ValueError(f"{path}: {where}: key {key!r}: contains NaN or inf")
            row[key] = [float(v) for v in values]
        prompts.append(obj["prompt"])
        responses.append(list(cands))
        sft.append(row["sft_logits"])
        r_eval.append(row["r_eval"])
    if not prompts:
        raise ValueError(f"{path}: no records; expected one JSON object per line with {list(CANDIDATE_KEYS)}")
    return {"prompts": prompts, "responses": responses, "sft_logits": np.asarray(sft, dtype=np.float64),
            "r_eval": np.asarray(r_eval, dtype=np.float64)}  # fmt: skip


def read_corrupted_flags(path: str | Path) -> np.ndarray | None:
    """The optional boolean ``corrupted`` ground truth of a preference jsonl: on every line, or on none (None).

    Raises:
        ValueError: the key on some lines only, or not a bool; names the file and the line.
    """
    path = Path(path)
    flags: list[bool | None] = []
    where_of: list[str] = []
    for where, obj in _records(path, "jsonl"):
        value = obj.get("corrupted") if isinstance(obj, dict) else None
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{path}: {where}: key 'corrupted': expected bool, found {type(value).__name__}")
        flags.append(value)
        where_of.append(where)
    present = [f is not None for f in flags]
    if not any(present):
        return None
    if not all(present):
        where = where_of[present.index(False)]
        raise ValueError(f"{path}: {where}: key 'corrupted' is missing here but present on other lines; give it on "
                         f"every line or on none")  # fmt: skip
    return np.asarray(flags, dtype=bool)
