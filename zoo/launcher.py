"""The ``zoo`` console script: answers ``zoo``/``zoo --help``/``zoo --version`` without importing torch or lightning.

Importing lightning costs about 7 s on a 2-core machine, so the top-level help is static; every other call goes to
:func:`zoo.core.cli.main` (LightningCLI), whose ``zoo fit --help`` lists every flag.
"""

from __future__ import annotations

import os
import sys

import zoo

USAGE = """usage: zoo {fit,validate,test,predict,list,reproduce,evaluate} ...

zoo: a PyTorch Lightning module zoo of NeurIPS 2025 methods (LightningCLI in subclass mode).

subcommands:
  fit         train a method:        zoo fit -c configs/<slug>/default.yaml [--trainer.max_epochs=...]
  validate    validate a checkpoint: zoo validate -c CONFIG --ckpt_path RUN.ckpt
  test        test a checkpoint:     zoo test -c CONFIG --ckpt_path RUN.ckpt
  predict     predict:               zoo predict -c CONFIG --ckpt_path RUN.ckpt
  list        list the methods:      zoo list [--json|--markdown]
  reproduce   re-check a paper's claims at CPU scale: zoo reproduce <slug>|--all [--quick] [--seeds N] [--out DIR]
  evaluate    a method's own evaluation tool on files: zoo evaluate <slug> --help (e.g. rawmed: synthetic vs real EHR)

options:
  -h, --help  show this message (`zoo fit --help` lists every flag of fit)
  --version   print the version
"""


def main() -> None:
    """Entry point of ``zoo`` and ``python -m zoo``."""
    argv = sys.argv[1:]
    if argv in ([], ["-h"], ["--help"]):
        print(USAGE, end="")
        return
    if argv == ["--version"]:
        print(zoo.__version__)
        return
    if argv[:1] == ["list"]:
        from zoo.core.registry import list_command

        try:
            code = list_command(argv[1:])
            sys.stdout.flush()
        except BrokenPipeError:  # `zoo list --json | head`: the reader left, which is no error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = 0
        sys.exit(code)
    if argv[:1] == ["reproduce"]:
        from zoo.core.reproduce import dispatch

        sys.exit(dispatch(argv))
    if argv[:1] == ["evaluate"]:
        sys.exit(evaluate(argv[1:]))
    from zoo.core.cli import main as cli_main

    try:
        cli_main()
    except Exception as exc:  # a user error is one line and exit code 2; anything else keeps its traceback
        cause = user_error(exc)
        if cause is None or os.environ.get("ZOO_DEBUG") == "1":
            raise
        print(f"zoo: error: {cause}", file=sys.stderr)
        sys.exit(2)


def evaluate(argv: list[str]) -> int:
    """``zoo evaluate <slug> ARGS``: the method's evaluation tool on files (its manifest's ``evaluate``).

    A user error inside it is one line and exit code 2, as for ``zoo fit``.
    """
    import importlib

    from zoo.core.registry import manifests

    tools = {slug: m.evaluate for slug, m in sorted(manifests().items()) if m.evaluate}
    if not argv or argv[0] not in tools:
        print(f"usage: zoo evaluate {{{','.join(tools)}}} ARGS (`zoo evaluate <slug> --help` for the arguments)",
              file=sys.stderr)  # fmt: skip
        return 2
    module, function = tools[argv[0]].split(":")
    try:
        return int(getattr(importlib.import_module(module), function)(argv[1:]) or 0)
    except Exception as exc:
        cause = user_error(exc)
        if cause is None or os.environ.get("ZOO_DEBUG") == "1":
            raise
        print(f"zoo: error: {cause}", file=sys.stderr)
        return 2


#: Exceptions the zoo raises on purpose for bad input (a file, a value, a missing checkpoint), with a message.
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError)
#: Folders of the zoo's own code: an exception raised there is the zoo's message, not a library's.
_OWN = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
             for d in ("zoo", "datamodules", "callbacks"))  # fmt: skip


def user_error(exc: BaseException) -> BaseException | None:
    """The zoo's own bad-input error behind ``exc``, or ``None`` for a programming error.

    jsonargparse wraps an error raised while a module or datamodule is built into "Does not validate against any of the
    Union subtypes" (the original is the chained cause). Walking the chain from the outside in (``__cause__``, or
    ``__context__`` unless ``raise ... from None`` suppressed it), the first exception raised by the zoo's own code
    with one of :data:`USER_ERRORS` is the message a user needs: a zoo error that re-raises an inner one with a better
    message wins over the inner one.
    """
    import traceback

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = traceback.extract_tb(exc.__traceback__)
        if isinstance(exc, USER_ERRORS) and frames and frames[-1].filename.startswith(_OWN):
            return exc
        exc = exc.__cause__ if exc.__cause__ is not None or exc.__suppress_context__ else exc.__context__
    return None
