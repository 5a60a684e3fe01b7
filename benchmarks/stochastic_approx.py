"""Stochastic-approximation cores (issue #9): the vectorised zoo cores against plain-Python loop references.

In one process, side by side on the same streams:
- avg_reward_q: replica-updates/s of the vectorised Q-learning core (``q_update_chunk``) vs a per-replica Python loop
  at R = 64 (card target ≥ 10×); the Lightning path (chunk_len 1000) vs the pure core (card: within 1.5×); the time of
  4e5 steps × 64 replicas (card ≤ 60 s on 2 cores).
- coop_se: rounds/s of the vectorised Coop-SE core vs a per-agent Python loop at m = 16, T = 2e4 (card target ≥ 10×);
  the Lightning path (rounds_per_step 1000) vs the bare core (card ≥ 0.8×); the ring-buffer memory at T = 1e6, m = 64
  (card < 1 GB).

Each half lives next to its method (``benchmarks/_stochastic_approx_<slug>.py``) and prints its own lines, ratios
included; timing never enters the tests.

    python benchmarks/stochastic_approx.py [--quick] [--only avg_reward_q|coop_se]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import torch

HALVES = ("avg_reward_q", "coop_se")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test of the script)")
    parser.add_argument("--only", choices=HALVES, default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    for slug in [args.only] if args.only else HALVES:
        start = time.perf_counter()
        print(f"== {slug} ==", flush=True)
        for line in importlib.import_module(f"_stochastic_approx_{slug}").run(quick=args.quick):
            print(line, flush=True)
        print(f"({slug}: {time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
