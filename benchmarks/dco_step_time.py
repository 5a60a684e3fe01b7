"""DCO vs cross-entropy: training-step wall time on the noisy-addition LM task (card ``dco``, "Performance").

Both losses run on the same tiny GPT-2, the same batches and one thread, interleaved in one process; the ratio is
DCO / CE (target ≤ 1.05x). Also reported: the exact pass@k computation for 10^5 problems (target < 1 s) and the
batched sampler's throughput (sequences per second, one forward per decoding step).

    python benchmarks/dco_step_time.py [--steps 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def step_time(loss: str, batches: list[dict[str, torch.Tensor]], steps: int) -> float:
    """Mean seconds per optimizer step of ``CoverageLMModule(loss=...)``."""
    from zoo.dco.module import CoverageLMModule

    model = CoverageLMModule(loss=loss, dco_n=16 if loss == "dco" else 1)  # type: ignore[arg-type]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    for b in batches[:2]:  # warm-up
        model.compute_loss(b)["loss"].backward()
    start = time.perf_counter()
    for i in range(steps):
        out = model.compute_loss(batches[i % len(batches)])
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from datamodules.math_text.coverage_datamodule import CoverageLMDataModule
    from zoo.dco.metrics import pass_at_k
    from zoo.dco.module import CoverageLMModule
    from zoo.dco.sampling import sample_responses

    dm = CoverageLMDataModule()
    dm.setup()
    batches = list(dm.train_dataloader())
    ce, dco = [], []
    for _ in range(args.repeats):  # interleaved, so machine load hits both alike
        ce.append(step_time("ce", batches, args.steps))
        dco.append(step_time("dco", batches, args.steps))
    ce_s, dco_s = statistics.median(ce), statistics.median(dco)
    print(f"training step (batch 256, one thread): CE {1000 * ce_s:.1f} ms, DCO {1000 * dco_s:.1f} ms, "
          f"ratio DCO/CE {dco_s / ce_s:.3f}x (target <= 1.05x; medians of {args.repeats})")  # fmt: skip
    n = torch.full((100_000,), 256)
    c = torch.randint(0, 257, (100_000,))
    start = time.perf_counter()
    for k in (1, 4, 16, 64, 256):
        pass_at_k(n, c, k)
    print(f"pass@k for 10^5 problems, 5 values of k: {time.perf_counter() - start:.3f} s (target < 1 s)")
    model = CoverageLMModule()
    prompts = [p for p, _ in dm.splits["test"].examples[:200]]
    start = time.perf_counter()
    sample_responses(model.model.lm, prompts, n=64, max_new_tokens=3, eos_id=dm.eos_id)
    seconds = time.perf_counter() - start
    print(f"sampling 200 prompts x 64 samples x 3 tokens: {seconds:.2f} s ({200 * 64 / seconds:.0f} sequences/s)")


if __name__ == "__main__":
    main()
