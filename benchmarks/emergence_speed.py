"""emergence: population-step throughput, seeds vectorised vs sequential, Lightning path vs bare loop (card
``emergence``, "Performance").

All in one process, one thread, the card's protocol size (d=400, m=16, P=8, he4, fixed a, lr 0.2), interleaved repeats,
medians printed side by side:

- 4 seeds as one replica batch (R=4) vs 4 sequential single-seed runs, same updates each: ratio sequential/vectorised
  (target >= 2.5x);
- ``Trainer.fit`` of ``TwoLayerHermiteStudent`` (``inner_steps=100``, R=4, with the ``OverlapLogger`` every step) vs
  the bare ``population_steps`` loop doing the same work (the per-update observer and, every 100 updates, the
  logger's row: overlaps, fixed and refit loss): ratio bare/Lightning time (target >= 0.75);
- online SGD samples per second at B=256, d=400 (R=1), for reference.

    python benchmarks/emergence_speed.py [--updates 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def bare(updates: int, seeds: list[int], observe: bool) -> float:
    """Seconds for ``updates`` population updates of one replica batch over ``seeds``; ``observe``: with the
    OverlapLogger's per-update observer and, every 100 updates, the row it records (overlaps, fixed and refit loss)."""
    from callbacks.overlap_logger import OverlapLogger
    from datamodules.gaussian_teacher.teacher import make_teacher
    from zoo.emergence.model import HermiteStudent, StepConfig, overlaps, population_loss, population_steps, refit

    V, astar = make_teacher(400, 8, 1.5, seeds)
    model = HermiteStudent(len(seeds), 16, 400, {4: 1.0}, 0.3, seeds[0])
    cfg = StepConfig(0.2, 0.0, {4: 1.0}, {4: 1.0})
    observers = [OverlapLogger(every_n_steps=1)._observe] if observe else []
    start = time.perf_counter()
    rows = []
    for t0 in range(0, updates, 100):
        population_steps(model, V, astar, cfg, 100, t0, observers)
        if observe:
            M = overlaps(model.W, V).abs().amax(-2)
            fixed = population_loss(model.W, model.a, V, astar, cfg.coeffs)
            refit_loss = population_loss(model.W, refit(model.W, V, astar, cfg.coeffs), V, astar, cfg.coeffs)
            rows.append((M.tolist(), fixed.tolist(), refit_loss.tolist()))
    return time.perf_counter() - start


def lightning(updates: int, seeds: int) -> float:
    """Seconds of ``Trainer.fit`` for ``updates`` updates (``inner_steps=100``) with the OverlapLogger."""
    import logging

    from lightning.pytorch import Trainer

    from callbacks.overlap_logger import OverlapLogger
    from datamodules.gaussian_teacher.datamodule import GaussianAdditiveTeacherDataModule
    from zoo.emergence.module import TwoLayerHermiteStudent

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    dm = GaussianAdditiveTeacherDataModule(n_replicas=seeds)
    module = TwoLayerHermiteStudent(n_replicas=seeds, input_dim=400, inner_steps=100)
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
             "enable_model_summary": False, "limit_val_batches": 0, "num_sanity_val_steps": 0}  # fmt: skip
    trainer = Trainer(max_steps=updates // 100, max_epochs=1, accelerator="cpu", devices=1,
                      callbacks=[OverlapLogger(every_n_steps=1)], **quiet)  # fmt: skip
    start = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    assert module.updates == updates
    return time.perf_counter() - start


def online(steps: int) -> float:
    """Samples per second of online minibatch SGD (B=256, d=400, R=1), labels included."""
    from datamodules.gaussian_teacher.datamodule import GaussianAdditiveTeacherDataModule
    from zoo.emergence.model import HermiteStudent, StepConfig, minibatch_step

    dm = GaussianAdditiveTeacherDataModule(online=True, batch_size=256)
    model = HermiteStudent(1, 16, 400, {4: 1.0}, 0.3, 0)
    cfg = StepConfig(0.2, 0.0, {4: 1.0}, {4: 1.0})
    start = time.perf_counter()
    for i in range(steps):
        b = dm.batch(i)
        minibatch_step(model, b["x"][0], b["y"][0], cfg)
    return steps * 256 / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import warnings

    warnings.filterwarnings("ignore")
    n = args.updates
    bare(200, [0, 1, 2, 3], True), lightning(200, 4)  # warm-up
    vec, seq, plain, lit = [], [], [], []
    for _ in range(args.repeats):
        vec.append(bare(n, [0, 1, 2, 3], False))
        seq.append(sum(bare(n, [s], False) for s in range(4)))
        plain.append(bare(n, [0, 1, 2, 3], True))
        lit.append(lightning(n, 4))
    v, s, p, li = (statistics.median(x) for x in (vec, seq, plain, lit))
    print(f"population updates/s, d=400 m=16 P=8: 4 seeds vectorised {4 * n / v:,.0f} seed-updates/s, "
          f"4 sequential {4 * n / s:,.0f} seed-updates/s")  # fmt: skip
    print(f"emergence vectorised/sequential speed-up (4 seeds): {s / v:.2f}x (target >= 2.5x)")
    print(f"emergence Lightning path / bare loop speed (inner_steps=100, R=4, OverlapLogger): {p / li:.2f} "
          f"(target >= 0.75; bare {p:.2f} s, Lightning {li:.2f} s for {n} updates)")  # fmt: skip
    print(f"online SGD, B=256, d=400, R=1: {online(200):,.0f} samples/s")


if __name__ == "__main__":
    main()
