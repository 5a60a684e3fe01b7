"""CRAFT vs TGN throughput, side by side in one process: same stream, batch size and threads.

Prints training events/s (positives per second, epochs 2+, as logged in ``perf/train_events_per_s``) and evaluation
candidate-scores/s (sum of 1+K over the test split / eval wall time, ``perf/eval_cand_per_s``) for both, and the
ratios CRAFT/TGN against the card's targets (the fits alternate CRAFT, TGN, CRAFT, ...; medians and the
per-pair training ratios are printed): training >= 2x TGN and >= 5,000 events/s on one thread at d=64, L=20,
N=2, batch 200; evaluation >= 50,000 candidate-scores/s (K=100). The TGN eval ratio is reported, not targeted.

    python benchmarks/craft_throughput.py [--epochs 3] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from zoo.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "craft"
QUIET = ["--trainer.accelerator=cpu", "--trainer.devices=1", "--trainer.enable_progress_bar=false",
         "--trainer.enable_model_summary=false", "--trainer.logger=false", "--trainer.enable_checkpointing=false",
         "--trainer.limit_val_batches=0", "--trainer.num_sanity_val_steps=0", "--trainer.callbacks=null"]  # fmt: skip


def measure(config: str, epochs: int) -> tuple[float, float]:
    cli = main(["-c", str(CONFIGS / config), *QUIET, f"--trainer.max_epochs={epochs}"], run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    train = float(cli.trainer.callback_metrics["perf/train_events_per_s"])
    cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)
    return train, float(cli.trainer.callback_metrics["perf/eval_cand_per_s"])


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs per fit (epoch 1 is warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="fits per model; medians are reported")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    sys.argv[1:] = []  # the fits get their arguments from measure(), not from this script's command line
    torch.set_num_threads(args.threads)
    runs: dict[str, list[tuple[float, float]]] = {"CRAFT": [], "TGN": []}
    for _ in range(args.repeats):  # interleaved, so a slow spell of a shared machine hits both models alike
        for name, config in (("CRAFT", "craft.yaml"), ("TGN", "tgn.yaml")):
            runs[name].append(measure(config, args.epochs))
    pairs = [c[0] / t[0] for c, t in zip(runs["CRAFT"], runs["TGN"], strict=True)]
    results = {n: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for n, rs in runs.items()}
    for name, (train, evaluate) in results.items():
        print(f"{name:<6} train {train:>9,.0f} events/s   eval {evaluate:>10,.0f} cand-scores/s")
    (ct, ce), (tt, te) = results["CRAFT"], results["TGN"]
    print(
        f"craft/tgn training events/s: {ct / tt:.2f}x (target >= 2.0x); per interleaved pair "
        f"{min(pairs):.2f}-{max(pairs):.2f}x, median {statistics.median(pairs):.2f}x"
    )
    print(f"craft training events/s: {ct:,.0f} (target >= 5,000 on {args.threads} thread(s))")
    print(f"craft eval candidate-scores/s: {ce:,.0f} (target >= 50,000)")
    print(f"craft/tgn eval candidate-scores/s: {ce / te:.2f}x (reported, no target)")


if __name__ == "__main__":
    run()
