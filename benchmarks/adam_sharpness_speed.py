"""adam_sharpness speed, side by side in one process (card, Performance; one thread).

1. Lightning path (``DiagonalLinearNet``, inner_steps=100, label noise, no logger) vs a bare torch loop on the same
   model, optimizer and noise: optimizer steps per second, ratio (target >= 0.75).
2. Vectorised 5 seeds (one replica batch) vs 5 sequential one-seed runs, bare loop: speed-up (target >= 3x).
3. ``SharpnessLogger`` at the card's settings (every_n_steps=1000, n_probes=64; ``auto`` = exact for the 400
   parameters of 5 replicas, and Hutchinson forced) vs no callback, Lightning path: overhead of the whole fit (which
   includes a measurement at the start and the end, so short runs overstate it) and of one measurement relative to
   1000 steps (target <= 10%).

Runs are interleaved and the median of ``--repeats`` is reported.

    python benchmarks/adam_sharpness_speed.py [--steps 5000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000, help="optimizer steps per timed run (multiple of 100)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import lightning.pytorch as pl

    from callbacks.label_noise import LabelNoise, LabelNoiseCallback
    from callbacks.sharpness import SharpnessLogger
    from datamodules.sparse_regression.datamodule import SparseRegressionDataModule
    from zoo.adam_sharpness.model import replica_losses
    from zoo.adam_sharpness.module import DiagonalLinearNet
    from zoo.core.reproduce import worker_setup

    worker_setup()  # one thread, Lightning's notices dropped
    warnings.filterwarnings("ignore")
    chunks = args.steps // 100

    def data(replicas: int, seed: int = 0) -> SparseRegressionDataModule:
        dm = SparseRegressionDataModule(n_test=1000, seed=seed, n_replicas=replicas, batches_per_epoch=chunks)
        dm.setup()
        return dm

    def bare(replicas: int, seed: int = 0) -> float:
        """A plain loop: forward, backward, step, fresh noise each step (no Lightning)."""
        dm = data(replicas, seed)
        net = DiagonalLinearNet(n_replicas=replicas, init_seed=seed)
        opt = net.configure_optimizers()
        noise = LabelNoise(0.5, noise_seed=1000 + seed, n_replicas=replicas)
        Z, y = dm.train
        start = time.perf_counter()
        for _ in range(chunks):
            noisy = noise.noisy(y, 100)
            for t in range(100):
                opt.zero_grad()
                replica_losses(net.model(Z), noisy[t]).sum().backward()
                opt.step()
        return time.perf_counter() - start

    def lightning(replicas: int, callbacks: list) -> float:
        dm = data(replicas)
        net = DiagonalLinearNet(n_replicas=replicas)
        trainer = pl.Trainer(max_steps=chunks, accelerator="cpu", logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                             limit_val_batches=0, callbacks=[LabelNoiseCallback(0.5), *callbacks])  # fmt: skip
        start = time.perf_counter()
        trainer.fit(net, datamodule=dm)
        return time.perf_counter() - start

    def card_logger() -> SharpnessLogger:
        return SharpnessLogger(method="auto", every_n_steps=1000, n_probes=64)

    runs: dict[str, list[float]] = {k: [] for k in ("bare1", "light1", "bare5", "seq5", "light5", "exact", "hutch")}
    lightning(1, [])  # warm-up
    bare(1)
    for _ in range(args.repeats):
        runs["bare1"].append(bare(1))
        runs["light1"].append(lightning(1, []))
        runs["bare5"].append(bare(5))
        runs["seq5"].append(sum(bare(1, seed) for seed in range(5)))
        runs["light5"].append(lightning(5, []))
        runs["exact"].append(lightning(5, [card_logger()]))
        hutch = SharpnessLogger(method="hutchinson", every_n_steps=1000, n_probes=64)
        runs["hutch"].append(lightning(5, [hutch]))
    med = {k: statistics.median(v) for k, v in runs.items()}
    dm = data(5)
    net = DiagonalLinearNet(n_replicas=5)
    net._clean = dm.train
    per_call = {}
    for method in ("exact", "hutchinson"):
        logger = SharpnessLogger(method=method, n_probes=64)
        logger.measure(net)  # warm-up
        start = time.perf_counter()
        for _ in range(20):
            logger.measure(net)
        per_call[method] = (time.perf_counter() - start) / 20
    steps = chunks * 100
    print(f"one thread, {steps} optimizer steps per run, median of {args.repeats} (d=40, n=20, Adam without bias "
          "correction)")  # fmt: skip
    print(f"bare loop 1 seed:        {steps / med['bare1']:8.0f} steps/s")
    print(f"Lightning path 1 seed:   {steps / med['light1']:8.0f} steps/s")
    print(f"Lightning / bare loop:   {med['bare1'] / med['light1']:.2f}x (target >= 0.75)")
    print(f"5 seeds vectorised:      {med['bare5']:.2f} s; 5 sequential: {med['seq5']:.2f} s; speed-up "
          f"{med['seq5'] / med['bare5']:.2f}x (target >= 3x)")  # fmt: skip
    per_1000 = 1000 * med["light5"] / steps
    for method, key in (("exact (auto, 400 params)", "exact"), ("Hutchinson (64 probes)", "hutchinson")):
        fit = med["exact" if key == "exact" else "hutch"]
        print(
            f"SharpnessLogger {method}: fit overhead {fit / med['light5'] - 1:+.1%}; one measurement "
            f"{1e3 * per_call[key]:.1f} ms = {per_call[key] / per_1000:.1%} of 1000 steps (target <= 10%)"
        )


if __name__ == "__main__":
    main()
