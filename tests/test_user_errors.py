"""Bad input through the real `zoo` entry point: one clear line, exit code 2, no traceback (issue #19).

The zoo's own bad-input errors (a ValueError or FileNotFoundError raised by its code) reach the user as
`zoo: error: <message>` even when jsonargparse wrapped them while building a module or datamodule; jsonargparse's own
parse errors are condensed to one line naming the option; programming errors and `ZOO_DEBUG=1` keep the traceback.
Each method's loaders and values have their table in `tests/<slug>/test_bad_inputs.py` (checked below to exist).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, assert_user_error

from zoo.core.registry import manifests
from zoo.launcher import user_error

#: (config, flags, the message's line)
BAD_INPUTS = [
    ("configs/coop_se/default.yaml", ["--data.init_args.m=0"], "--data.init_args.m=0: expected at least 1 agent"),
    ("configs/craft/default.yaml", ["--model.init_args.pretrained=/nonexistent.ckpt"],
     "pretrained='/nonexistent.ckpt': no such local file or folder (the zoo never downloads)"),
    ("configs/uam/default.yaml", ["--model.init_args.lr=-0.01"],
     "--model.init_args.lr=-0.01: expected a finite number >= 0"),
]  # fmt: skip


UAM = ["fit", "-c", str(ROOT / "configs/uam/default.yaml"), "--trainer.fast_dev_run=1"]
DM = "datamodules.classification.unlearning_datamodule.UnlearningDataModule"
#: jsonargparse's own errors (a wrong type, an unknown option or class, a literal, a missing config): (flags, line)
PARSE_ERRORS = [
    (["--data.init_args.batch_size=abc"], f"--data.init_args.batch_size='abc': expected an int ({DM})"),
    (["--data.init_args.bogus=1"], f"--data.init_args.bogus: not an option of {DM}"),
    (["--model.init_args.arch=xx"],
     "--model.init_args.arch='xx': expected one of 'mlp', 'cnn', 'resnet18' (zoo.uam.module.UnlearnClassifierModule)"),
    (["--trainer.max_epochs=abc"], "--trainer.max_epochs='abc': expected an int"),
    (["--model=foo.Bar"], "--model='foo.Bar': No module named 'foo'"),
    (["--bogus=1"], "unrecognized arguments: --bogus=1"),
    (["-c", "/nonexistent.yaml"], "-c/--config: File does not exist: '/nonexistent.yaml'"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "line"), PARSE_ERRORS, ids=[f[-1].split("=")[0] for f, _ in PARSE_ERRORS])
def test_parse_errors_are_one_line(flags: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error([*UAM, *flags], line, capsys)


def test_every_method_has_a_bad_input_table() -> None:
    """Each method's loaders and values are covered by its own table, run through the entry point."""
    import importlib.util

    for slug in manifests():
        path = ROOT / "tests" / slug / "test_bad_inputs.py"
        assert path.is_file(), f"{path} is missing"
        spec = importlib.util.spec_from_file_location(f"bad_inputs_{slug}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        assert len(module.BAD_INPUTS) >= 5, f"{path}: only {len(module.BAD_INPUTS)} bad inputs"


def _zoo(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ZOO_DEBUG"}
    environ.update({"PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", **env})
    return subprocess.run([sys.executable, "-m", "zoo", *args], capture_output=True, text=True, env=environ,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize(("config", "flags", "line"), BAD_INPUTS, ids=[c.split("/")[1] for c, _, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(config: str, flags: list[str], line: str, tmp_path) -> None:
    out = _zoo("fit", "-c", str(ROOT / config), *flags, "--trainer.fast_dev_run=1",
               f"--trainer.default_root_dir={tmp_path}")  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == f"zoo: error: {line}"
    assert "Traceback" not in out.stderr


def test_zoo_debug_keeps_the_traceback(tmp_path) -> None:
    config, flags, _ = BAD_INPUTS[0]
    out = _zoo("fit", "-c", str(ROOT / config), *flags, f"--trainer.default_root_dir={tmp_path}", ZOO_DEBUG="1")
    assert out.returncode == 1 and "Traceback" in out.stderr


def test_only_the_zoos_own_bad_input_errors_are_shortened() -> None:
    """A ValueError the zoo raises (here Claim's operator check), also behind a wrapping exception as jsonargparse
    chains it, is a user error; a TypeError from the zoo, or a ValueError raised outside the zoo, is not."""
    from zoo.core.reproduce import Claim

    def zoo_value_error() -> BaseException:
        try:
            Claim("a", 1.0, "!=", 0.0)  # type: ignore[arg-type]
        except ValueError as exc:
            return exc
        raise AssertionError("Claim accepted an unknown operator")

    inner = zoo_value_error()
    assert user_error(inner) is inner
    try:
        raise RuntimeError("Does not validate against any of the Union subtypes") from inner
    except RuntimeError as wrapped:
        assert user_error(wrapped) is inner
    try:
        int("x")
    except ValueError as outside:
        assert user_error(outside) is None
    try:
        Claim("a", 1.0, ">=", 0.0).holds + "x"  # type: ignore[operator]
    except TypeError as programming:
        assert user_error(programming) is None


def test_json_records_refuse_repeated_keys_and_non_utf8(tmp_path) -> None:
    """The shared JSON/JSONL reader of the instruction, MATH, GSM8K and preference readers: a key repeated in one
    object is an error (json keeps the last value silently), and so is a file that is not UTF-8 (pathlib's
    UnicodeDecodeError is not a zoo message)."""
    from pathlib import Path

    from datamodules.common.json_records import read_json_records

    jsonl = Path(tmp_path / "a.jsonl")
    jsonl.write_text('{"q": "1+1", "a": "2"}\n\n{"q": "2+2", "a": "4", "a": "5"}\n')
    with pytest.raises(ValueError, match=r"a\.jsonl: line 3: key 'a' appears twice in one object"):
        read_json_records(jsonl, lambda line, i: f"line {line}")
    listed = Path(tmp_path / "b.json")
    listed.write_text('[{"q": 1, "q": 2}]')
    with pytest.raises(ValueError, match=r"b\.json: key 'q' appears twice"):
        read_json_records(listed, lambda line, i: f"line {line}")
    latin = Path(tmp_path / "c.jsonl")
    latin.write_bytes('{"q": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"c\.jsonl: not UTF-8 text .*; expected a UTF-8 JSON list or JSONL file"):
        read_json_records(latin, lambda line, i: f"line {line}")
    good = Path(tmp_path / "d.jsonl")
    good.write_text('{"q": "1+1", "a": "2"}\n')
    assert read_json_records(good, lambda line, i: f"line {line}") == [("line 1", {"q": "1+1", "a": "2"})]


def test_a_zoo_error_that_rewords_an_inner_one_wins() -> None:
    """A zoo error raised while handling another (with or without `from None`) is the message shown, not the inner
    one it rewords; jsonargparse's wrapper around it still leads to it."""
    from zoo.core import checks

    def reword(suppress: bool) -> None:
        try:
            checks.fail("--inner", 1, "the low-level message")
        except ValueError:
            if not suppress:
                checks.fail("--outer", 2, "the reworded message")
            try:
                checks.fail("--outer", 2, "the reworded message")
            except ValueError as outer:
                raise outer from None

    for suppress in (False, True):
        try:
            reword(suppress)
        except ValueError as outer:
            assert user_error(outer) is outer and str(outer).startswith("--outer=2")
            try:
                raise RuntimeError("Does not validate against any of the Union subtypes") from outer
            except RuntimeError as wrapped:
                assert user_error(wrapped) is outer
