"""CRAFTNet speed on one CPU thread (card "Performance": >= 5,000 training events/s, >= 50,000 eval scores/s).

Training: forward + BPR + backward (and, separately, + an Adam step) at B=200, C=2 (positive + 1 negative), L=20,
d=64, N=2, heads=2, elapsed feature on (``--repeat`` adds CRAFT-R's repeat feature). Evaluation: no-grad forward at
B=200, C=101 (1 positive + 100 negatives). Windows have random lengths 0..L (left-aligned, zero padded).

Each figure is printed as median and best over timed steps; other processes on the machine move the median.

    python benchmarks/craft_net_speed.py [--repeat] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from zoo.craft.model import CRAFTNet, bpr_loss

B, L, D, N, H = 200, 20, 64, 2, 2
NUM_ROWS = 1001
TRAIN_TARGET, EVAL_TARGET = 5_000, 50_000


def make_batch(c: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    hist = torch.randint(1, NUM_ROWS, (B, L), generator=gen)
    lengths = torch.randint(0, L + 1, (B,), generator=gen)
    hist[torch.arange(L)[None, :] >= lengths[:, None]] = 0
    cand = torch.randint(1, NUM_ROWS, (B, c), generator=gen)
    elapsed = torch.rand(B, c, generator=gen) * 100.0
    repeat = torch.randint(0, 3, (B, c), generator=gen).float()
    return hist, cand, elapsed, repeat


def timed(fn: Callable[[int], None], steps: int, warmup: int = 3) -> tuple[float, float]:
    """Median and best seconds per call."""
    for i in range(warmup):
        fn(i)
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", action="store_true", help="CRAFT-R (repeat feature on)")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = CRAFTNet(NUM_ROWS, d=D, L=L, num_layers=N, heads=H, use_repeat=args.repeat)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True)
    train_batches = [make_batch(2, gen) for _ in range(8)]
    eval_batches = [make_batch(101, gen) for _ in range(4)]

    def fwd_bwd(i: int) -> None:
        s = net(*train_batches[i % len(train_batches)])
        net.zero_grad(set_to_none=True)
        bpr_loss(s[:, 0], s[:, 1]).backward()

    def train_step(i: int) -> None:
        fwd_bwd(i)
        opt.step()

    def evaluate(i: int) -> None:
        net(*eval_batches[i % len(eval_batches)])

    print(f"CRAFTNet d={D} L={L} N={N} heads={H} batch={B} repeat={args.repeat}, 1 thread, torch {torch.__version__}")
    net.train()
    for label, fn in (("train fwd+bwd", fwd_bwd), ("train fwd+bwd+Adam", train_step)):
        med, best = timed(fn, args.steps)
        print(
            f"  {label:20s} {B / med:8.0f} events/s median, {B / best:8.0f} best"
            f"   (target >= {TRAIN_TARGET}: ratio {B / med / TRAIN_TARGET:.2f} median)"
        )
    net.eval()
    with torch.inference_mode():
        med, best = timed(evaluate, max(args.steps // 4, 5))
    n = B * 101
    print(
        f"  {'eval C=101':20s} {n / med:8.0f} candidate-scores/s median, {n / best:8.0f} best"
        f"   (target >= {EVAL_TARGET}: ratio {n / med / EVAL_TARGET:.2f} median)"
    )


if __name__ == "__main__":
    main()
