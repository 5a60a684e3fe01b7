"""RepGuard-style defense overhead, side by side in one process (card, Performance).

Per training epoch on the poisoned grammar (refusal, BadNets word, the card's d 128 GPT-2, batch 64, one thread):
RepGuard-style (after warm-up: masked forward + independence term + clean-KL forwards) vs no defense (target
<= 1.3x); one localisation pass vs one epoch (target <= 10%); DeCE vs CE per epoch (target <= 1.05x); inference:
ONION-filtered vs plain greedy evaluation in prompts per second. Epochs are interleaved (no-defense, RepGuard, ...)
and the median of ``--repeats`` is reported.

    python benchmarks/repguard_overhead.py [--repeats 3] [--n-embd 128]
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from collections.abc import Callable

import torch


def timed(fn: Callable[[], object]) -> float:
    """Seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-embd", type=int, default=128)
    args = parser.parse_args()
    import lightning.pytorch as pl

    from callbacks.backdoor_defense import RepGuardCallback
    from datamodules.instructions.datamodule import BackdoorDataModule
    from zoo.repguard.evaluate import evaluate, onion_filter_fn, train_prompt_scorer
    from zoo.repguard.module import InstructionLMModule

    torch.set_num_threads(1)
    dm = BackdoorDataModule(task="refusal", trigger_type="badnets_word")
    dm.setup()

    def trainer(callbacks: list) -> pl.Trainer:
        return pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                          limit_val_batches=0, callbacks=callbacks)  # fmt: skip

    def module(loss: str = "ce") -> InstructionLMModule:
        return InstructionLMModule(vocab_size=dm.vocab_size, max_length=dm.max_length, n_embd=args.n_embd, loss=loss)

    plain, dece, defended = module(), module("dece"), module()
    guard = RepGuardCallback(warmup_epochs=0)
    trainer([guard]).fit(defended, datamodule=dm)  # first epoch: localisation at its start, mask from then on
    times: dict[str, list[float]] = {"no defense": [], "RepGuard-style": [], "DeCE": [], "localisation": []}
    for _ in range(args.repeats):
        times["no defense"].append(timed(lambda: trainer([]).fit(plain, datamodule=dm)))
        guard.warmup_epochs = 10**6  # masked training without re-localising: the per-epoch training cost
        times["RepGuard-style"].append(timed(lambda: trainer([guard]).fit(defended, datamodule=dm)))
        times["DeCE"].append(timed(lambda: trainer([]).fit(dece, datamodule=dm)))
        loop = types.SimpleNamespace(datamodule=dm, train_dataloader=dm.train_dataloader())
        times["localisation"].append(timed(lambda: guard.localize(loop, defended, 0)))  # type: ignore[arg-type]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"GPT-2 d={args.n_embd}, 4 layers, refusal x badnets_word, 3,000 training samples, batch 64, 1 thread; "
          f"median of {args.repeats} interleaved epochs")  # fmt: skip
    for k, v in med.items():
        print(f"  {k:<16} {v:7.2f} s")
    print(f"RepGuard-style / no defense per epoch: {med['RepGuard-style'] / med['no defense']:.2f}x (target <= 1.3x)")
    print(f"localisation pass / epoch: {med['localisation'] / med['no defense']:.1%} (target <= 10%)")
    print(f"DeCE / CE per epoch: {med['DeCE'] / med['no defense']:.2f}x (target <= 1.05x)")
    scorer = train_prompt_scorer(dm, steps=50)
    n = 2 * len(dm.dataset("test_clean_benign")) + len(dm.dataset("test_trig_benign", "badnets_word"))
    t_plain = timed(lambda: evaluate(plain.model.lm, dm))
    t_onion = timed(lambda: evaluate(plain.model.lm, dm, prompt_filter=onion_filter_fn(scorer, 0.0)))
    print(f"evaluation: plain {n / t_plain:.0f} prompts/s, ONION-filtered {n / t_onion:.0f} prompts/s "
          f"({t_onion / t_plain:.1f}x the time: one scorer forward per prompt word)")  # fmt: skip


if __name__ == "__main__":
    main()
