"""MoECAPCallback overhead on evaluation throughput, side by side in one process (card ``moe_cap``, Performance).

``trainer.validate`` of the same module, data and threads with and without the callback, interleaved; the ratio of
the medians of ``--repeats`` runs is printed against the target (<= 1.05x). Size: the tiny-Mixtral shape at d = 256,
4 layers (E 8, k 2), batch 8, 32 new tokens per prompt (a forward takes a few ms on one thread). The callback runs
with ``hardware=cpu_measured`` (measured once, cached, before the timed runs) and ``flop_check`` off, as by default.
A second line times the hooks alone (the generation loop of the same batches with and without the router trace,
without the stage-end summary, JSON and radar PNG, a fixed ~0.1 s per stage). 64 prompts = the datamodule's default.
``--d 64 --layers 2`` times the card's 2-layer test size, where the Python hooks weigh relatively most.

    python benchmarks/moe_cap_overhead.py [--repeats 5] [--d 256] [--layers 4] [--items 64]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    import logging

    from lightning.pytorch import Trainer

    from callbacks.moe_cap import MoECAPCallback, RouterTrace
    from datamodules.moe_prompts import MoEPromptDataModule
    from zoo.moe_cap.hardware import measure_cpu_spec
    from zoo.moe_cap.module import MoEEvalModule

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    module = MoEEvalModule(family="mixtral", hidden_size=args.d, num_layers=args.layers,
                           max_new_tokens=args.new_tokens, do_sample=True)  # fmt: skip
    data = MoEPromptDataModule(n_items=args.items, batch_size=8)
    measure_cpu_spec("fp32")  # cached: the timed runs do not re-measure
    out = tempfile.mkdtemp()

    def validate(with_callback: bool) -> float:
        callbacks = [MoECAPCallback(hardware="cpu_measured", out_dir=out)] if with_callback else []
        trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                          enable_checkpointing=False, callbacks=callbacks)  # fmt: skip
        start = time.perf_counter()
        trainer.validate(module, datamodule=data, verbose=False)
        return time.perf_counter() - start

    data.setup("validate")
    batches = list(data.val_dataloader())

    def generate(traced: bool) -> float:
        hf = module.model.hf.eval()
        trace = RouterTrace(hf, 8, 2).attach() if traced else None
        start = time.perf_counter()
        with torch.inference_mode():  # as under trainer.validate
            for i, batch in enumerate(batches):
                module.generate(batch["prompt"], seed=i)
        seconds = time.perf_counter() - start
        if trace is not None:
            trace.detach()
        return seconds

    validate(False), validate(True), generate(False), generate(True)  # warm-up
    times: dict[str, list[float]] = {"plain": [], "MoE-CAP": [], "generate": [], "generate traced": []}
    for _ in range(args.repeats):
        times["plain"].append(validate(False))
        times["MoE-CAP"].append(validate(True))
        times["generate"].append(generate(False))
        times["generate traced"].append(generate(True))
    med = {k: statistics.median(v) for k, v in times.items()}
    forwards = args.items // 8 * args.new_tokens
    print(
        f"tiny Mixtral d={args.d}, {args.layers} layers, E 8 k 2, batch 8, {args.new_tokens} new tokens, "
        f"{args.items} prompts ({forwards} forwards), 1 thread; median of {args.repeats} interleaved validates"
    )
    for key, value in med.items():
        print(f"  {key:<16} {value:7.3f} s  ({1000 * value / forwards:.2f} ms per forward)")
    print(f"MoE-CAP / plain validate time: {med['MoE-CAP'] / med['plain']:.3f}x (target <= 1.05x)")
    print(f"hooks only, traced / plain generation: {med['generate traced'] / med['generate']:.3f}x")


if __name__ == "__main__":
    main()
