"""xrlhf on-disk formats (card tests 6 and 8): preference jsonl and precomputed-feature npz."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from datamodules.preference.readers import read_feature_npz, read_preference_jsonl


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_preference_jsonl_reads_and_ignores_extra_keys(tmp_path: Path) -> None:
    """HH-RLHF layout (an extra ``response`` key) reads; blank lines are skipped."""
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "Hi", "chosen": "a", "rejected": "b", "response": "a"}) + "\n\n"
                    + json.dumps({"prompt": "Yo", "chosen": "c", "rejected": "d"}) + "\n")  # fmt: skip
    assert read_preference_jsonl(path) == [{"prompt": "Hi", "chosen": "a", "rejected": "b"},
                                           {"prompt": "Yo", "chosen": "c", "rejected": "d"}]  # fmt: skip


@pytest.mark.parametrize(("row", "message"), [
    ({"prompt": "x", "chosen": "same", "rejected": "same"}, "line 2: chosen == rejected"),
    ({"prompt": "x", "chosen": "a"}, "line 2: missing key 'rejected'"),
    ({"prompt": "x", "chosen": 3, "rejected": "b"}, "line 2: key 'chosen': expected str"),
    (["not", "an", "object"], "line 2: expected a JSON object"),
])  # fmt: skip
def test_preference_jsonl_errors_name_the_line(tmp_path: Path, row: object, message: str) -> None:
    """Test 6 (loader part): ``chosen == rejected`` and malformed records raise, naming the file and line."""
    path = _jsonl(tmp_path / "p.jsonl", [{"prompt": "ok", "chosen": "a", "rejected": "b"}, row])
    with pytest.raises(ValueError, match=message):
        read_preference_jsonl(path)


def test_preference_jsonl_empty_and_missing(tmp_path: Path) -> None:
    """An empty file and a missing path fail clearly."""
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no records"):
        read_preference_jsonl(tmp_path / "e.jsonl")
    with pytest.raises(FileNotFoundError, match="no such preference file"):
        read_preference_jsonl(tmp_path / "none.jsonl")


def test_feature_npz_round_trip_and_d_mismatch(tmp_path: Path) -> None:
    """Test 8: a valid npz reads back; a d mismatch between delta_phi and phi_candidates names both shapes."""
    rng = np.random.default_rng(0)
    good = {"delta_phi": rng.standard_normal((10, 5)), "corrupted": np.zeros(10, bool),
            "phi_candidates": rng.standard_normal((3, 6, 5)), "sft_logits": rng.standard_normal((3, 6)),
            "r_eval": rng.standard_normal((3, 6))}  # fmt: skip
    np.savez(tmp_path / "good.npz", **good)
    out = read_feature_npz(tmp_path / "good.npz")
    np.testing.assert_array_equal(out["delta_phi"], good["delta_phi"])
    assert out["pair_id"] is None and out["phi_candidates"].shape == (3, 6, 5)
    np.savez(tmp_path / "bad.npz", **{**good, "phi_candidates": rng.standard_normal((3, 6, 4))})
    with pytest.raises(ValueError, match=r"\(10, 5\).*\(3, 6, 4\)"):
        read_feature_npz(tmp_path / "bad.npz")


@pytest.mark.parametrize(("change", "message"), [
    ({"sft_logits": np.zeros((3, 5))}, "sft_logits: expected shape \\(3, 6\\)"),
    ({"corrupted": np.zeros(9, bool)}, "corrupted: expected shape \\(10,\\)"),
    ({"r_eval": np.full((3, 6), np.nan)}, "r_eval: contains NaN"),
])  # fmt: skip
def test_feature_npz_shape_errors(tmp_path: Path, change: dict, message: str) -> None:
    """M / n mismatches and NaN raise with the key and the shapes."""
    rng = np.random.default_rng(1)
    arrays = {"delta_phi": rng.standard_normal((10, 5)), "corrupted": np.zeros(10, bool),
              "phi_candidates": rng.standard_normal((3, 6, 5)), "sft_logits": rng.standard_normal((3, 6)),
              "r_eval": rng.standard_normal((3, 6)), **change}  # fmt: skip
    np.savez(tmp_path / "f.npz", **arrays)
    with pytest.raises(ValueError, match=message):
        read_feature_npz(tmp_path / "f.npz")
    np.savez(tmp_path / "g.npz", phi=np.zeros(3))
    with pytest.raises(ValueError, match="missing key 'delta_phi'"):
        read_feature_npz(tmp_path / "g.npz")


def _arrays(**change: object) -> dict:
    rng = np.random.default_rng(2)
    return {"delta_phi": rng.standard_normal((10, 5)), "corrupted": np.zeros(10, bool),
            "phi_candidates": rng.standard_normal((3, 6, 5)), "sft_logits": rng.standard_normal((3, 6)),
            "r_eval": rng.standard_normal((3, 6)), **change}  # fmt: skip


@pytest.mark.parametrize(("change", "message"), [
    ({"delta_phi": np.ones((10, 5), bool)}, "delta_phi: expected real numbers, found dtype bool"),
    ({"r_eval": np.full((3, 6), "1.5")}, "r_eval: expected real numbers, found dtype <U3"),
    ({"corrupted": np.full(10, 0.5)}, "corrupted: expected bool or 0/1 flags, found dtype float64"),
    ({"corrupted": np.arange(10)}, "corrupted: expected bool or 0/1 flags, found dtype int64"),
    ({"phi_candidates": np.zeros((3, 1, 5)), "sft_logits": np.zeros((3, 1)), "r_eval": np.zeros((3, 1))},
     r"phi_candidates: expected m >= 1 test prompts with M >= 2 candidates each, found shape \(3, 1, 5\)"),
])  # fmt: skip
def test_feature_npz_is_never_cast_silently(tmp_path: Path, change: dict, message: str) -> None:
    """Issue #19: bool features and string rewards were cast to float, a float or 0..9 `corrupted` column to bool (0.5
    became True), and M = 1 (no choice, so no unsatisfactory item) emptied the forget set after the original trained."""
    np.savez(tmp_path / "f.npz", **_arrays(**change))
    with pytest.raises(ValueError, match=message):
        read_feature_npz(tmp_path / "f.npz")
    np.savez(tmp_path / "ok.npz", **_arrays(corrupted=np.array([0, 1] * 5)))  # 0/1 integers are flags
    assert read_feature_npz(tmp_path / "ok.npz")["corrupted"].tolist() == [False, True] * 5


def test_feature_file_that_is_not_an_npz_names_the_file(tmp_path: Path) -> None:
    """An empty file, text, a .npy and an object array gave numpy's traceback; each is now one line with the file."""
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "text.npz").write_text("delta_phi,1,2\n")
    np.save(tmp_path / "one.npy", np.zeros((3, 2)))
    np.savez(tmp_path / "obj.npz", delta_phi=np.array([{"a": 1}], dtype=object))
    for name, reason in [("empty.npz", "empty file"), ("text.npz", "not a .npz archive"),
                         ("one.npy", r"not a .npz archive .*a single .npy array"),
                         ("obj.npz", r"not a .npz archive .*Object arrays")]:  # fmt: skip
        with pytest.raises(ValueError, match=rf"{name}: {reason}"):
            read_feature_npz(tmp_path / name)


def test_preference_jsonl_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_bytes(json.dumps({"prompt": "caf\xe9", "chosen": "a", "rejected": "b"},
                                                  ensure_ascii=False).encode("latin-1"))  # fmt: skip
    with pytest.raises(ValueError, match=r"p.jsonl: not UTF-8 text"):
        read_preference_jsonl(tmp_path / "p.jsonl")
