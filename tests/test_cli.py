"""The `zoo` command: static top-level help, `list`, `reproduce` argument handling, short class names."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import QUIET, ROOT, TINY_CRAFT, TINY_DATA

from zoo.cli import main
from zoo.core.registry import CLASSES, METHODS


def test_help_is_fast_and_lazy() -> None:
    """`python -m zoo --help` answers quickly without importing torch, transformers or torch_geometric."""
    code = (
        "import runpy, sys; sys.argv=['zoo','--help']; runpy.run_module('zoo', run_name='__main__');"
        "bad=[m for m in ('torch','lightning','transformers','torch_geometric') if m in sys.modules];"
        "assert not bad, bad"
    )
    start = time.time()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "reproduce" in out.stdout and "fit" in out.stdout
    assert time.time() - start < 3.0


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["slug"] for r in rows] == list(METHODS)
    assert all(set(r) == {"slug", "module", "datamodule", "paper", "status"} for r in rows)


def test_list_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    assert "craft" in capsys.readouterr().out


def test_registry_paths_resolve() -> None:
    """Every registered class path imports (a typo would only show when a user runs it)."""
    import importlib

    for path in list(CLASSES.values()) + [m[k] for m in METHODS.values() for k in ("module", "datamodule")]:
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path


def test_reproduce_unknown_slug_is_error() -> None:
    assert main(["reproduce", "nope"]) == 2
    assert main(["reproduce", "craft", "--seeds", "0"]) == 2


def test_short_class_names(tmp_path) -> None:
    """`--model CRAFTModule --data TemporalLinkDataModule` resolve without full class paths."""
    cli = main(["--model=CRAFTModule", "--data=TemporalLinkDataModule", *QUIET, *TINY_DATA, *TINY_CRAFT], run=False)
    assert type(cli.model).__name__ == "CRAFTModule"
    assert cli.model.num_nodes == cli.datamodule.num_nodes  # linked from the data


def test_seed_defaults_to_zero() -> None:
    cli = main(["--model=CRAFTModule", "--data=TemporalLinkDataModule", *QUIET, *TINY_DATA, *TINY_CRAFT], run=False)
    assert cli.config["seed_everything"] == 0


def test_print_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fit", "-c", str(ROOT / "configs/craft/default.yaml"), "--print_config"])
    assert exc.value.code == 0
    assert "CRAFTModule" in capsys.readouterr().out


def test_impossible_config_names_the_flag() -> None:
    """d not divisible by heads is refused before training, naming the flag."""
    with pytest.raises(ValueError, match="model.init_args.d"):
        main(["--model=CRAFTModule", "--data=TemporalLinkDataModule", *QUIET, *TINY_DATA,
              "--model.init_args.d=15", "--model.init_args.heads=2"], run=False)  # fmt: skip


def test_reproduce_all_writes_report_index(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`zoo reproduce --all` runs every registered method and indexes them in REPORT.md (exit = worst code)."""
    import zoo.core.reproduce as rep

    calls = []
    monkeypatch.setattr(rep, "reproduce", lambda slug, quick, seeds, out, options=None: calls.append(
        (slug, quick, seeds)) or 1)  # fmt: skip
    assert main(["reproduce", "--all", "--quick", "--out", str(tmp_path)]) == 1
    assert calls == [(slug, True, None) for slug in METHODS]
    report = (tmp_path / "REPORT.md").read_text()
    assert all(f"[{slug}.md]" in report for slug in METHODS) and "a claim fails" in report


def test_reproduce_writes_json_with_claims(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON has slug, seconds, metrics and claims with name/holds/value/threshold/detail; a failing claim
    gives exit code 1 and an erroring protocol exit code 2."""
    import types

    import zoo.core.reproduce as rep

    def fake_run(seeds, quick, out, progress, options=None):
        progress("running")
        return rep.Report(claims=[rep.Claim("ok", 1.0, ">=", 0.5, "d"), rep.Claim("bad", 0.1, "in", [0.2, 0.3])],
                          metrics={"x": 1.0}, table="| t |")  # fmt: skip

    monkeypatch.setitem(sys.modules, "zoo.craft.reproduce", types.SimpleNamespace(run=fake_run))
    assert main(["reproduce", "craft", "--out", str(tmp_path)]) == 1
    blob = json.loads((tmp_path / "craft.json").read_text())
    assert blob["slug"] == "craft" and blob["metrics"] == {"x": 1.0} and blob["seconds"] >= 0
    assert [(c["name"], c["holds"]) for c in blob["claims"]] == [("ok", True), ("bad", False)]
    assert {"name", "holds", "value", "threshold", "detail"} <= blob["claims"][0].keys()

    def broken(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setitem(sys.modules, "zoo.craft.reproduce", types.SimpleNamespace(run=broken))
    assert main(["reproduce", "craft", "--out", str(tmp_path)]) == 2


def test_reproduce_protocol_options(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--set KEY=VALUE` reaches the protocol's run() as `options` (defaults filled in from its OPTIONS, recorded in
    the JSON settings); an unknown key, a value outside the declared choices, a malformed item and `--set` with
    `--all` are usage errors (exit 2) that name the problem, and the protocol never runs."""
    import types

    import zoo.core.reproduce as rep

    seen = []

    def fake_run(seeds, quick, out, progress, options):
        seen.append(options)
        return rep.Report(claims=[rep.Claim("ok", 1.0, ">=", 0.5)], metrics={}, table="| t |")

    fake = types.SimpleNamespace(run=fake_run, OPTIONS={"mode": ("a", "b"), "other": ("x", "y")})
    monkeypatch.setitem(sys.modules, "zoo.craft.reproduce", fake)
    assert main(["reproduce", "craft", "--out", str(tmp_path), "--set", "mode=b"]) == 0
    assert seen == [{"mode": "b", "other": "x"}]
    assert json.loads((tmp_path / "craft.json").read_text())["settings"]["mode"] == "b"
    for bad in (["--set", "nope=1"], ["--set", "mode=c"], ["--set", "mode"]):
        assert main(["reproduce", "craft", "--out", str(tmp_path), *bad]) == 2
    assert main(["reproduce", "--all", "--set", "mode=b", "--out", str(tmp_path)]) == 2
    assert len(seen) == 1
    with pytest.raises(ValueError, match="mode='c' is not one of"):
        rep.protocol_options("craft", fake, {"mode": "c"})
    with pytest.raises(ValueError, match="unknown option --set nope"):
        rep.protocol_options("craft", fake, {"nope": "1"})
    import zoo.prune_finetune.reproduce as pf

    assert rep.protocol_options("prune_finetune", pf, {}) == {"select_stage1_on": "finetuned"}


def test_claim_operators() -> None:
    """Every declared comparison works; an unknown one fails at construction, before a protocol's hours of work."""
    import math

    from zoo.core import reproduce as rep

    assert rep.Claim("a", 1.0, ">", 0.0).holds and not rep.Claim("a", 0.0, ">", 0.0).holds
    assert rep.Claim("a", -1.0, "<", 0.0).holds and not rep.Claim("a", 0.0, "<", 0.0).holds
    assert rep.Claim("a", 0.0, ">=", 0.0).holds and rep.Claim("a", 0.0, "<=", 0.0).holds
    assert not rep.Claim("a", math.nan, "<", 1.0).holds
    with pytest.raises(ValueError, match="unknown op"):
        rep.Claim("a", 1.0, "!=", 0.0)  # type: ignore[arg-type]


def test_list_into_a_closed_pipe_is_quiet() -> None:
    """`zoo list --json | head` must not end in a BrokenPipeError traceback (issue #19): the reader is gone before
    the first write here, which forces the broken pipe deterministically."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        out = subprocess.run([sys.executable, "-m", "zoo", "list", "--json"], stdout=write, stderr=subprocess.PIPE,
                             cwd=ROOT, text=True, timeout=60)  # fmt: skip
    finally:
        os.close(write)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


def test_known_noise_is_dropped_and_other_warnings_stay() -> None:
    """The CLI drops the listed harmless third-party notices by message (issue #19) and nothing else: a zoo warning
    such as load_pretrained's still shows, and Lightning's "Tip" adverts leave its log handler."""
    import logging
    import warnings

    from zoo.core.cli import quiet_known_noise

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_noise()
        warnings.warn("Starting from v1.9.0, `tensorboardX` has been removed as a dependency", UserWarning)
        warnings.warn("`LightningModule.configure_optimizers` returned `None`, this fit will run with no optimizer")
        warnings.warn("pretrained: dropping 'w': checkpoint shape (3, 3) != model shape (2, 2)", UserWarning)
    assert [str(w.message)[:22] for w in caught] == ["pretrained: dropping '"]
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # where rank_zero_info logs
    tip = logger.makeRecord(logger.name, logging.INFO, "", 0, "💡 Tip: try installing litlogger", None, None)
    seed = logger.makeRecord(logger.name, logging.INFO, "", 0, "Seed set to 0", None, None)
    assert not logger.filter(tip) and logger.filter(seed)


def test_reproduce_seed_counts_come_from_the_protocol(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `--seeds`, `--quick` runs ``QUICK_SEEDS`` (default 1) and the full run ``FULL_SEEDS`` (default 3);
    `--seeds N` overrides both (a protocol whose card defines its claims over 5 seeds runs 5 by default)."""
    import types

    import zoo.core.reproduce as rep

    seen: list[tuple[int, ...]] = []

    def fake_run(seeds, quick, out, progress, options=None):
        seen.append(seeds)
        return rep.Report(claims=[rep.Claim("ok", 1.0, ">=", 0.5)])

    protocol = types.SimpleNamespace(run=fake_run)
    monkeypatch.setitem(sys.modules, "zoo.craft.reproduce", protocol)
    for args in (["--quick"], [], ["--seeds", "2"]):
        assert main(["reproduce", "craft", *args, "--out", str(tmp_path)]) == 0
    protocol.QUICK_SEEDS, protocol.FULL_SEEDS = 4, 5
    for args in (["--quick"], [], ["--seeds", "2"]):
        assert main(["reproduce", "craft", *args, "--out", str(tmp_path)]) == 0
    assert [len(s) for s in seen] == [1, 3, 2, 4, 5, 2]
