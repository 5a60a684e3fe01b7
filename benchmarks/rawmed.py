"""rawmed: the card's Performance figures, measured side by side in one process on one thread.

- **Sampling** (``perf/sample_tokens_per_s``): the stage-2 transformer (CPU default: 4 layers, d 128, 4 heads, FFN
  512, K 256, 2 time digits + 8 codes per event) sampled with the per-layer KV cache vs the naive full recompute of
  the prefix at every step, same model, same generator, same masks. Card: batch 256, length 642 (64·10 + 2); target
  ≥ 5×. The naive sampler is O(T²): at batch 256 it needs minutes per prefix on one thread, so both samplers run the
  same prefixes (``--lengths``, default 22, 42, 82) at ``--batch`` and the cache alone also runs the full 642; the
  ratio is printed per length (it grows with the length).
- **Stage 1** (``perf/events_per_s``): training steps (forward, backward, AdamW) of the CPU event RQ-VAE (L 64, F 64,
  L_z 4, F_z 64, K 256, D 2) on random event-like ids, batch ``--events`` (card: 4,096). Target ≥ 2k events/s.

- **Evaluator**: ``zoo.rawmed.metrics.evaluate`` on 1k real vs 1k synthetic stays of the embedded generator (the
  test split of a 6,667-stay cohort against 1,000 other generated stays), fidelity + temporal + privacy (the card:
  "without TSTR and next-event"; target ≤ 60 s), then TSTR utility and predictive similarity timed apart.

    python benchmarks/rawmed.py [--batch 256] [--lengths 22 42 82] [--full 642] [--events 4096] [--repeats 1]

No assertions: it prints the measurements, ratios and targets.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import torch
from _timing import timed


def sample_fixed(model, n: int, length: int, use_cache: bool, seed: int) -> torch.Tensor:
    """Sample ``n`` rows of ``length`` tokens at top-k 64 from ``seed``."""
    return model.sample(n, length, top_k=64, generator=torch.Generator().manual_seed(seed), use_cache=use_cache)


def sampling(batch: int, lengths: list[int], full: int, repeats: int) -> Iterator[str]:
    """Cached vs naive sampling throughput per prefix length, and the cached sampler at the full length."""
    from zoo.rawmed.model import EventAR

    torch.manual_seed(0)
    model = EventAR(K=256, time_len=2, codes_per_event=8, layers=4, d=128, heads=4, ffn=512,
                    max_len=max(full, *lengths)).eval()  # fmt: skip
    with torch.no_grad():  # EOS/PAD get no mass, so no stay ends early and both samplers run every step
        model.proj.bias[[model.EOS, model.PAD]] = -1e4
    yield f"sampling: EventAR 4 layers, d 128, 4 heads, FFN 512, K 256; batch {batch}; tokens/s = batch·(length−1)/s"
    sample_fixed(model, batch, 12, True, 0)  # warm-up
    sample_fixed(model, batch, 12, False, 0)
    for length in lengths:
        t_cache, a = timed(lambda: sample_fixed(model, batch, length, True, 0), repeats, warmup=False)  # noqa: B023
        t_naive, b = timed(lambda: sample_fixed(model, batch, length, False, 0), repeats, warmup=False)  # noqa: B023
        same = "identical" if torch.equal(a, b) else "DIFFERENT"
        tok = batch * (length - 1)
        yield (
            f"  length {length:4d}: cached {tok / t_cache:8.0f} tok/s ({t_cache:7.2f} s), naive {tok / t_naive:8.0f} "
            f"tok/s ({t_naive:7.2f} s); cached/naive {t_naive / t_cache:5.1f}x (target >= 5x at 642); samples {same}"
        )
    if full:
        t_cache, _ = timed(lambda: sample_fixed(model, batch, full, True, 0), 1, warmup=False)
        tok = batch * (full - 1)
        yield f"  length {full:4d}: cached {tok / t_cache:8.0f} tok/s ({t_cache:7.2f} s); naive not run (O(T^2))"


def event_ids(n: int, L: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random event-like rows: words and digits up to a random length, then [SEP] and [PAD]."""
    gen = torch.Generator().manual_seed(seed)
    pos = torch.arange(L).expand(n, L)
    length = torch.randint(L // 4, L - 1, (n, 1), generator=gen)
    inside = pos < length
    is_value = inside & (pos % 3 == 2)
    input_ids = torch.where(inside, torch.randint(14, vocab, (n, L), generator=gen), 0)
    input_ids = torch.where(is_value, torch.randint(4, 14, (n, L), generator=gen), input_ids)
    input_ids = input_ids.masked_fill(pos == length, 3)
    type_ids = torch.where(is_value, 3, torch.where(inside, 2, 0)).masked_fill(pos == length, 6)
    dpe_ids = torch.where(is_value, torch.randint(0, 14, (n, L), generator=gen), 14)
    return input_ids, type_ids, dpe_ids


def stage_one(events: int, vocab: int, repeats: int) -> Iterator[str]:
    """Training steps per second of the CPU event RQ-VAE, in events/s."""
    from zoo.rawmed.model import EventRQVAE

    torch.manual_seed(0)
    model = EventRQVAE(vocab, L=64, F=64, L_z=4, F_z=64, K=256, D=2).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    batch = event_ids(events, 64, vocab, seed=0)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(*batch)["loss"].backward()
        opt.step()

    yield f"stage 1: EventRQVAE L 64, F 64, L_z 4, F_z 64, K 256, D 2, vocab {vocab}; batch {events}"
    seconds, _ = timed(step, repeats, warmup=True)
    yield (
        f"  training step {seconds:.2f} s: {events / seconds:7.0f} events/s (target >= 2000 events/s; "
        f"{events / seconds / 2000:.2f}x the target)"
    )
    t_enc, _ = timed(lambda: model.encode(*batch), repeats, warmup=True)
    yield f"  encode (eval, no grad) {t_enc:.2f} s: {events / t_enc:7.0f} events/s"


def evaluator(stays: int) -> Iterator[str]:
    """The evaluator's time on ``stays`` real vs ``stays`` synthetic stays, per part."""
    import tempfile

    from datamodules.ehr.datamodule import EHRDataModule
    from datamodules.ehr.folder import read_folder
    from zoo.rawmed.metrics import evaluate

    n = int(stays / 0.15) + 1  # the test split is 15 %
    with tempfile.TemporaryDirectory() as tmp:
        dm = EHRDataModule(n_stays=n, seed=0)
        real = read_folder(dm.write_split("test", f"{tmp}/test"))
        other = EHRDataModule(n_stays=n, seed=1)
        synthetic = read_folder(other.write_split("test", f"{tmp}/syn"))
        train = read_folder(dm.write_split("train", f"{tmp}/train"))
        holdout = read_folder(dm.write_split("holdout", f"{tmp}/holdout"))
    yield f"evaluator on {len(real[0])} real vs {len(synthetic[0])} synthetic stays:"
    for parts in (("fidelity", "temporal", "privacy"), ("utility",), ("predictive",)):
        seconds, _ = timed(lambda p=parts: evaluate(real, synthetic, train, holdout, parts=p), 1, warmup=False)
        target = " (target <= 60 s)" if parts[0] == "fidelity" else ""
        yield f"  {'+'.join(parts)}: {seconds:.2f} s{target}"


def main() -> None:
    """Print the measurements, their ratios and targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="sampling batch (card: 256)")
    parser.add_argument("--lengths", type=int, nargs="*", default=[22, 42, 82], help="prefixes run by both samplers")
    parser.add_argument("--full", type=int, default=642, help="full length run by the cached sampler (0: skip)")
    parser.add_argument("--events", type=int, default=4096, help="stage-1 batch (card: 4096)")
    parser.add_argument("--vocab", type=int, default=400, help="stage-1 word vocabulary size")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-sampling", action="store_true")
    parser.add_argument("--skip-stage1", action="store_true")
    parser.add_argument("--skip-evaluator", action="store_true")
    parser.add_argument("--stays", type=int, default=1000, help="evaluator: real and synthetic stays (card: 1k)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"rawmed benchmark, torch {torch.__version__}, {torch.get_num_threads()} thread")
    if not args.skip_sampling:
        for line in sampling(args.batch, args.lengths, args.full, args.repeats):
            print(line, flush=True)
    if not args.skip_stage1:
        for line in stage_one(args.events, args.vocab, args.repeats):
            print(line, flush=True)
    if not args.skip_evaluator:
        for line in evaluator(args.stays):
            print(line, flush=True)


if __name__ == "__main__":
    main()
