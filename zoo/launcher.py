"""The ``zoo`` console script: answers ``zoo``/``zoo --help``/``zoo --version`` without importing torch or lightning.

Importing lightning costs about 7 s on a 2-core machine, so the top-level help is static; every other call goes to
:func:`zoo.core.cli.main` (LightningCLI), whose ``zoo fit --help`` lists every flag.
"""

from __future__ import annotations

import os
import sys

import zoo

USAGE = """usage: zoo {fit,validate,test,predict,list,reproduce} ...

zoo: a PyTorch Lightning module zoo of NeurIPS 2025 methods (LightningCLI in subclass mode).

subcommands:
  fit         train a method:        zoo fit -c configs/<slug>/default.yaml [--trainer.max_epochs=...]
  validate    validate a checkpoint: zoo validate -c CONFIG --ckpt_path RUN.ckpt
  test        test a checkpoint:     zoo test -c CONFIG --ckpt_path RUN.ckpt
  predict     predict:               zoo predict -c CONFIG --ckpt_path RUN.ckpt
  list        list the methods:      zoo list [--json|--markdown]
  reproduce   re-check a paper's claims at CPU scale: zoo reproduce <slug>|--all [--quick] [--seeds N] [--out DIR]

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
    from zoo.core.cli import main as cli_main

    cli_main()
