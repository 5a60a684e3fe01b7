"""MoECAPCallback overhead on evaluation throughput, side by side in one process (card ``moe_cap``, Performance).

``trainer.validate`` of the same module, data and threads, interleaved, in three arms: no callback; the router trace
alone (the per-forward hooks: expert pre-hooks, timing, records; no stage-end summary or files); the full
``MoECAPCallback`` (hooks + per-forward metrics, logging, ``moecap_validate.json``; ``cap_radar.png`` only with
``radar_with``, so not here; a fixed per-stage cost measured at ~0.13 s when the radar was still drawn by default).
The ratios of the medians of ``--repeats`` runs are printed against the target (<= 1.05x), for each stage length in
``--items`` (64 prompts = the datamodule's default; the fixed per-stage cost weighs less in a longer stage). Size
(the card): the tiny-Mixtral shape at d = 256, 4 layers (E 8, k 2), batch 8, 32 new tokens per prompt (a forward
takes a few ms on one thread). The callback runs with ``hardware=cpu_measured`` (measured once and cached before the
timed runs) and ``flop_check`` off, as by default. ``--d 64 --layers 2`` times the card's 2-layer test size, where
the Python hooks weigh relatively most.

    python benchmarks/moe_cap_overhead.py [--repeats 5] [--d 256] [--layers 4] [--items 64 256]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from typing import Any

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--items", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    import logging

    from lightning.pytorch import Callback, Trainer

    from callbacks.moe_cap import MoECAPCallback, RouterTrace, find_hf_model
    from datamodules.math_text.prompt_datamodule import MoEPromptDataModule
    from zoo.moe_cap.hardware import measure_cpu_spec
    from zoo.moe_cap.module import MoEEvalModule

    class TraceOnly(Callback):
        """The callback's hooks alone: attach at stage start, detach at the end, nothing computed or written."""

        def on_validation_start(self, trainer: Trainer, pl_module: Any) -> None:
            self.trace = RouterTrace(find_hf_model(pl_module), 8, 2).attach()

        def on_validation_end(self, trainer: Trainer, pl_module: Any) -> None:
            self.trace.detach()

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    module = MoEEvalModule(family="mixtral", hidden_size=args.d, num_layers=args.layers,
                           max_new_tokens=args.new_tokens, do_sample=True)  # fmt: skip
    measure_cpu_spec("fp32")  # cached: the timed runs do not re-measure
    out = tempfile.mkdtemp()
    arms = {"plain": lambda: [], "hooks only": lambda: [TraceOnly()],
            "MoE-CAP": lambda: [MoECAPCallback(hardware="cpu_measured", out_dir=out)]}  # fmt: skip
    print(f"tiny Mixtral d={args.d}, {args.layers} layers, E 8 k 2, batch 8, {args.new_tokens} new tokens, 1 thread; "
          f"median of {args.repeats} interleaved trainer.validate runs per arm")  # fmt: skip
    for items in args.items:
        data = MoEPromptDataModule(n_items=items, batch_size=8)

        def validate(arm: str, data: MoEPromptDataModule = data) -> float:
            trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                              enable_checkpointing=False, callbacks=arms[arm]())  # fmt: skip
            start = time.perf_counter()
            trainer.validate(module, datamodule=data, verbose=False)
            return time.perf_counter() - start

        for arm in arms:  # warm-up
            validate(arm)
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        for _ in range(args.repeats):
            for arm in arms:
                times[arm].append(validate(arm))
        med = {k: statistics.median(v) for k, v in times.items()}
        forwards = -(-items // 8) * args.new_tokens
        print(f"{items} prompts ({forwards} forwards):")
        for key, value in med.items():
            print(f"  {key:<11} {value:7.3f} s  ({1000 * value / forwards:.2f} ms per forward)")
        print(f"  hooks only / plain validate time: {med['hooks only'] / med['plain']:.3f}x (target <= 1.05x)")
        print(
            f"  MoE-CAP / plain validate time: {med['MoE-CAP'] / med['plain']:.3f}x (target <= 1.05x; "
            f"fixed stage-end cost {med['MoE-CAP'] - med['hooks only']:+.3f} s)"
        )


if __name__ == "__main__":
    main()
