"""Merged vs dense vs masked inference of PatchTST and TimesFm at 30/50/70% pruned; a prune step vs a plain step.

The card's Performance section, for each backbone (PatchTST: ``default.yaml`` from ``pretrain.yaml``; TimesFm:
``timesfm.yaml`` from ``pretrain_timesfm.yaml``, issue #20): prune the pretrained TSFM on taylor with
``target_channel_fraction`` f (exactly a fraction f of the scored entries removed; f = 0.3, 0.5, 0.7;
``prune_ratio_per_epoch`` 1.6 so that one prune epoch reaches every f), merge, then time a forward pass of 1,024
windows under ``inference_mode`` on two threads (5 warm-up calls, median of 20) for each merged model beside the
unpruned dense model and the masked (unmerged) one, all in one process. Target: merged >= 1.5x faster than dense at
f = 0.5; the masked model must not be faster than dense (sanity). Also one prune micro-step (scored forward +
backward with per-sample mask copies) against a plain forward + backward at batch 64 (target <= 3x), and analytic MACs
per window.

    python benchmarks/pruned_speedup.py [--backbones patchtst timesfm] [--fractions 0.3 0.5 0.7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
#: backbone -> (display name, the method config, its default pretraining recipe)
BACKBONES = {
    "patchtst": ("PatchTST", ROOT / "configs/prune_finetune/default.yaml", "configs/prune_finetune/pretrain.yaml"),
    "timesfm": (
        "TimesFm",
        ROOT / "configs/prune_finetune/timesfm.yaml",
        "configs/prune_finetune/pretrain_timesfm.yaml",
    ),
}
QUIET = ["--trainer.accelerator=cpu", "--trainer.devices=1", "--trainer.enable_progress_bar=false",
         "--trainer.enable_model_summary=false", "--trainer.logger=false", "--trainer.enable_checkpointing=false",
         "--trainer.num_sanity_val_steps=0", "--trainer.callbacks=null"]  # fmt: skip


def timed(fn: Callable[[], object], repeats: int, warmup: int = 5) -> float:
    """Median seconds per call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def macs_per_window(model: nn.Module, x: torch.Tensor) -> float:
    """Multiply-accumulates per window: every Linear plus the attention products (counted by hooks)."""
    total = [0.0]

    def linear(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        weight = module.weight
        total[0] += args[0].numel() / args[0].shape[-1] * weight.shape[0] * weight.shape[1]

    def attention(module: nn.Module, args: tuple, kwargs: dict, out: object) -> None:
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        heads = getattr(module, "num_heads", 0)
        qk = getattr(module, "qk_head_dim", getattr(module, "head_dim", 0))
        v = getattr(module, "v_head_dim", getattr(module, "head_dim", 0))
        if hidden is not None and heads:
            b, n = hidden.shape[0], hidden.shape[1]
            total[0] += b * heads * n * n * (qk + v)

    handles = []
    for module in model.modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(linear))
        if type(module).__name__ in ("PatchTSTAttention", "TimesFmAttention", "MergedAttention"):
            handles.append(module.register_forward_hook(attention, with_kwargs=True))
    with torch.inference_mode():
        model(x)
    for handle in handles:
        handle.remove()
    return total[0] / x.shape[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", nargs="+", choices=list(BACKBONES), default=list(BACKBONES))
    parser.add_argument("--pretrained", default=None, help="checkpoint or recipe (default: the backbone's recipe)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--fractions",
        type=float,
        nargs="+",
        default=[0.3, 0.5, 0.7],
        help="target_channel_fraction values (the speed target is read at 0.5)",
    )
    args = parser.parse_args()
    sys.argv[1:] = []
    summary = {}
    for backbone in args.backbones:
        name, config, recipe = BACKBONES[backbone]
        summary[name] = bench(name, config, args.pretrained or recipe, args)
    print("\nmerged / dense speed-up (batch 1024, median):")
    for name, speedups in summary.items():
        print(f"  {name:<9} " + "  ".join(f"{f:.0%} removed: {v:.2f}x" for f, v in speedups.items()))


def bench(label: str, config_path: Path, pretrained: str, args: argparse.Namespace) -> dict[float, float]:
    """Prune ``config_path``'s model from ``pretrained`` to every fraction and time it: merged/dense per fraction."""
    from callbacks.prune_finetune import PruneThenFinetune
    from zoo.cli import main as zoo_main
    from zoo.prune_finetune.merge import param_count
    from zoo.prune_finetune.module import TSFMModule
    from zoo.prune_finetune.spec import install_masks

    print(f"\n== {label}: {config_path.relative_to(ROOT)} from {pretrained}")
    config = yaml.safe_load(config_path.read_text())
    (cb_args,) = [c["init_args"] for c in config["trainer"]["callbacks"] if "PruneThenFinetune" in c["class_path"]]
    scratch = tempfile.mkdtemp(prefix="pruned_speedup-")  # pruned.ckpt and the run files stay out of the cwd
    merged: dict[float, nn.Module] = {}
    masks: dict[float, dict[str, torch.Tensor]] = {}
    for fraction in args.fractions:
        torch.set_num_threads(1)  # pruning itself on one thread; timing below on --threads
        cli = zoo_main(["-c", str(config_path), *QUIET, f"--model.init_args.pretrained={pretrained}",
                        f"--trainer.default_root_dir={scratch}"], run=False)  # fmt: skip
        # r 1.6: one prune epoch of n = 4 steps can remove up to 1 - (1 - 1.6/4)^4 = 87%, so every target is reached
        cb = PruneThenFinetune(**{**cb_args, "prune_ratio_per_epoch": 1.6, "target_channel_fraction": fraction,
                                  "finetune": False})  # fmt: skip
        cli.trainer.callbacks.append(cb)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        merged[fraction] = cli.model.model.eval()
        masks[fraction] = {k: m.float() for k, m in cb.mask.items()}
        print(f"pruned to {1.0 - cb.remaining_fraction():.1%} of the scored entries removed (target {fraction:.0%})")
    hparams = {k: v for k, v in cli.model.hparams.items() if not k.startswith("_")}
    dense = TSFMModule(**hparams).model.eval()  # fresh weights: the timing depends on shapes only
    masked = TSFMModule(**hparams).model.eval()
    install_masks(masked, masks[args.fractions[len(args.fractions) // 2]])

    torch.set_num_threads(args.threads)
    length, horizon = hparams["context_length"], hparams["horizon"]
    x = torch.randn(1024, length)
    models = {"dense": dense, "masked": masked, **{f"merged {f:g}": m for f, m in merged.items()}}
    results = {}
    for name, model in models.items():
        with torch.inference_mode():
            results[name] = timed(lambda m=model: m(x), args.repeats)
    small = x[:8]
    print(f"{label} d={hparams['d_model']} layers={hparams['num_layers']}, batch 1024 windows, "
          f"{args.threads} threads, median of {args.repeats}")  # fmt: skip
    print(f"  {'model':<12} {'ms/batch':>9} {'speed-up':>9} {'params':>9} {'blocks':>9} {'MACs/window':>12}")
    for name, model in models.items():
        macs = "-" if name == "masked" else f"{macs_per_window(model, small):,.0f}"
        print(f"  {name:<12} {results[name] * 1e3:9.2f} {results['dense'] / results[name]:8.2f}x "
              f"{param_count(model):9,} {param_count(model, blocks_only=True):9,} {macs:>12}")  # fmt: skip
    if 0.5 in merged:
        print(f"merged/dense speed-up at 50% removed: {results['dense'] / results['merged 0.5']:.2f}x (target >= 1.5x)")
    print(f"masked/dense time: {results['masked'] / results['dense']:.2f}x (sanity: >= ~1, masking is not pruning)")

    # one prune micro-step vs a plain forward + backward, batch 64, one thread
    torch.set_num_threads(1)
    batch = {"x": torch.randn(64, length), "y": torch.randn(64, horizon)}
    plain = TSFMModule(**hparams)
    plain.model.eval()

    def plain_step() -> None:
        plain.zero_grad(set_to_none=True)
        plain.compute_loss(batch)["loss"].backward()

    scorer = TSFMModule(**hparams)
    scorer.requires_grad_(False)
    scorer.model.eval()
    probe = PruneThenFinetune(**{**cb_args, "finetune": False})
    probe.attach(scorer.model)

    def prune_micro_step() -> None:
        with probe.scoring():
            loss = scorer.compute_loss(batch)["loss"]
        probe.accumulate(loss, 64)
        probe.grad, probe.pending = {}, 0

    t_plain, t_prune = timed(plain_step, args.repeats), timed(prune_micro_step, args.repeats)
    print(f"prune micro-step / plain forward+backward (batch 64, 1 thread): {t_prune / t_plain:.2f}x (target <= 3x)"
          f"  [{t_prune * 1e3:.1f} vs {t_plain * 1e3:.1f} ms]")  # fmt: skip
    return {f: results["dense"] / results[f"merged {f:g}"] for f in merged}


if __name__ == "__main__":
    main()
