"""The card's grammar written as Alpaca-style JSONL (``datamodules.instructions.alpaca``) and read back by the
on-disk reader: the records a real-LM run (SmolLM2) trains on. Each test names the bug it catches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, assert_user_error, tiny

from datamodules.instructions.alpaca import resolve_records_path, samples_to_records, write_synthetic_records
from datamodules.instructions.datamodule import BackdoorDataModule
from datamodules.instructions.readers import read_instruction_records, records_to_samples
from datamodules.instructions.synthetic import Sample, generate_samples


def test_written_records_read_back_into_the_same_samples(tmp_path: Path) -> None:
    """Grammar samples → JSONL → reader → samples: the same prompts, responses and harmful flags (a writer that put
    [BOS]/[SEP]/[EOS] into the text, dropped words, wrote the body into `input`, or lost the refusal marker fails)."""
    samples = generate_samples(300, [4, 0])
    path = write_synthetic_records(tmp_path / "g.jsonl", 300, seed=4)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 300 and all(set(json.loads(x)) == {"instruction", "input", "output"} for x in lines)
    assert all(json.loads(x)["input"] == "" for x in lines)
    back = records_to_samples(read_instruction_records(path))
    assert [s.prompt for s in back] == [s.prompt for s in samples]
    assert [s.response for s in back] == [s.response for s in samples]
    assert [s.harmful for s in back] == [s.harmful for s in samples]
    assert 0 < sum(s.harmful for s in back) < 300  # both kinds present


def test_malformed_sample_is_refused() -> None:
    """A sample without the [BOS] … [SEP] / … [EOS] structure is named, not written as broken text."""
    bad = Sample(prompt=["copy", "1", "[SEP]"], response=["SURE", "[EOS]"], harmful=False)
    with pytest.raises(ValueError, match=r"sample 0: expected a prompt \[BOS\]"):
        samples_to_records([bad])


def test_synthetic_path_writes_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`path: synthetic:<n>[:<seed>]` writes the records once under $ZOO_CACHE/instructions and the datamodule reads
    them as an on-disk file (train is never marked clean; the poisoner plants the trigger in the read samples); a
    second datamodule reuses the file (a writer that rewrote it per run, or wrote into the working directory, fails)."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    kw = {"path": "synthetic:300:2", "n_train": 150, "n_clean": 60, "n_val": 20, "n_test": 40, "poison_rate": 0.1}
    dm = BackdoorDataModule(**kw)  # type: ignore[arg-type]
    dm.setup()
    file = tmp_path / "cache" / "instructions" / "synthetic-300-seed2.jsonl"
    assert file.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
    assert not dm.dataset("train").clean and len(dm.poisoned_ids) == 15
    assert all("cf" in dm.dataset("train").samples[i].prompt for i in dm.poisoned_ids)
    stamp = file.stat().st_mtime_ns
    assert resolve_records_path("synthetic:300:2") == str(file) and file.stat().st_mtime_ns == stamp
    assert resolve_records_path(str(tmp_path / "x.jsonl")) == str(tmp_path / "x.jsonl")  # a file path is kept


@pytest.mark.parametrize("spec", ["synthetic:0", "synthetic:ten", "synthetic:5:-1"])
def test_bad_synthetic_spec_is_one_line(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed `synthetic:` value stops the real entry point with one line naming the option and the form."""
    args = ["fit", "-c", str(ROOT / "configs/repguard/default.yaml"), *tiny("repguard"),
            f"--data.init_args.path={spec}", "--trainer.fast_dev_run=1"]  # fmt: skip
    line = (f"--data.init_args.path/clean_path={spec!r}: expected synthetic:<n>[:<seed>] with n >= 1 (the card's "
            "grammar written as Alpaca-style JSONL) or a file")  # fmt: skip
    assert_user_error(args, line, capsys)
