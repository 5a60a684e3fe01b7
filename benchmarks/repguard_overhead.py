"""RepGuard-style defense overhead, every arm side by side in one process (card ``repguard``, Performance).

Each arm is built from its YAML under ``configs/repguard/`` (module, datamodule and callback init args, as ``zoo fit
-c`` builds them) and trained by a real ``Trainer`` fit of one epoch; an epoch is timed from the first
``on_train_epoch_start`` to ``on_train_epoch_end`` (the defense's own epoch-start work included, the Trainer's set-up
excluded). Every arm runs one untimed epoch first (warm-up; for the defenses it is the epoch whose start localises),
then ``--repeats`` rounds of one epoch per arm, interleaved (training epochs, localisation passes, inference
arms; the order rotates by one arm each round), and each row is the median over rounds of the same round's ratio
(with its min and max), so a slow drift of a shared machine cancels:

* revision 2 (``default.yaml``: ``feature_space: lexical``, τ 3, ``ablate: drop``, ``isolate: exclude``,
  ``relocalize_every: 0``, ``λ_keep`` 1) per training epoch vs no defense (``no_defense.yaml``; card target ≤ 1.3x),
  and its localisation pass (``RepGuardCallback.localize_tokens``: fit the lexical scorer on D_train and D_clean,
  score every training prompt) vs one no-defense epoch (target ≤ 10%);
* ``feature_space: embedding`` (``default.yaml`` with that one change: the Mahalanobis fit at ``hidden_states[0]``)
  likewise;
* revision 1 (``hidden.yaml``, ``feature_space: hidden``) likewise, plus its epoch with the re-localisation its
  ``relocalize_every: 1`` runs at every epoch start (revision 1 measured 1.43x);
* DeCE (``dece.yaml``) vs CE per epoch (target ≤ 1.05x);
* inference, greedy evaluation of every test prompt (``zoo.repguard.evaluate.evaluate``) in prompts/s: ONION-filtered
  (``BackdoorEvaluation``'s threshold and scorer steps) vs plain on the no-defense LM, and the lexical defense's
  drop hook on vs off on the defended LM (the card reports prompts/s; no target).

Ratios are the result; absolute times depend on the machine and are printed only beside them.

    python benchmarks/repguard_overhead.py [--repeats 3] [--quick] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "repguard"
#: ``--quick``: a smoke run in well under a minute (the same arms; the sizes keep the lexical detection limit
#: ``τ ln10 N_train / N_clean`` = 27.6 prompts below the 40 poisoned ones, so the defenses flag and drop tokens).
QUICK = {"n_train": 800, "n_clean": 200, "n_test": 100, "n_embd": 32, "onion_steps": 20, "repeats": 1}
#: The card's targets (Performance); ``None``: reported only.
TARGETS = {"train": 1.3, "localise": 0.10, "dece": 1.05}


def load(name: str) -> dict[str, Any]:
    """A config of ``configs/repguard/`` as a dict."""
    import yaml

    return yaml.safe_load((CONFIGS / name).read_text(encoding="utf-8"))


def init_args(config: dict[str, Any], class_name: str) -> dict[str, Any]:
    """The ``init_args`` of the config's trainer callback whose class path ends with ``class_name``."""
    for cb in config["trainer"].get("callbacks") or []:
        if cb["class_path"].endswith(f".{class_name}"):
            return dict(cb.get("init_args") or {})
    raise KeyError(f"no {class_name} in the config's trainer.callbacks")


def timed(fn: Callable[[], object]) -> float:
    """Seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (``--quick`` fills every size not given)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None, help="interleaved rounds (default 3; --quick 1)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (card: one)")
    parser.add_argument("--n-train", type=int, default=None, help="training prompts (config: 3000)")
    parser.add_argument("--n-clean", type=int, default=None, help="trusted clean prompts (config: 300)")
    parser.add_argument("--n-test", type=int, default=None, help="test prompts per split (config: 500)")
    parser.add_argument("--n-embd", type=int, default=None, help="GPT-2 width (config: 128)")
    parser.add_argument("--onion-steps", type=int, default=None, help="ONION scorer steps (config: 300)")
    args = parser.parse_args(argv)
    for key, value in QUICK.items():
        if getattr(args, key) is None and args.quick:
            setattr(args, key, value)
    if args.repeats is None:
        args.repeats = 3
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats}; expected an integer >= 1")
    return args


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the rows, the median seconds per arm, the set-up line and the built objects.

    ``rows`` are ``(name, median, min, max, target, kind)``, over rounds, of same-round ratios; ``kind`` is ``"x"``
    (a time ratio), ``"%"`` (a fraction of an epoch) or ``"rate"`` (prompts/s ratio, defended / plain);
    ``guards``, ``modules`` and ``datamodule`` are the built objects (the smoke test checks that each arm ran what
    it names).
    """
    args = parse(argv)
    import torch

    torch.set_num_threads(args.threads)
    import lightning.pytorch as pl

    from callbacks.backdoor_defense import RepGuardCallback
    from datamodules.instructions.datamodule import BackdoorDataModule
    from zoo.repguard.evaluate import evaluate, onion_filter_fn, train_prompt_scorer
    from zoo.repguard.module import InstructionLMModule

    default, hidden_cfg = load("default.yaml"), load("hidden.yaml")
    data_args = dict(default["data"]["init_args"])
    for key in ("n_train", "n_clean", "n_test"):
        if getattr(args, key) is not None:
            data_args[key] = getattr(args, key)
    dm = BackdoorDataModule(**data_args)
    dm.setup()

    def module(config: str) -> InstructionLMModule:
        model_args = dict(load(config)["model"]["init_args"])
        if args.n_embd is not None:
            model_args["n_embd"] = args.n_embd
        return InstructionLMModule(**model_args, vocab_size=dm.vocab_size)  # the CLI links vocab_size likewise

    lexical_args = init_args(default, "RepGuardCallback")
    guards = {"lexical": RepGuardCallback(**lexical_args),
              "embedding": RepGuardCallback(**(lexical_args | {"feature_space": "embedding"})),
              "hidden": RepGuardCallback(**init_args(hidden_cfg, "RepGuardCallback"))}  # fmt: skip
    modules = {"none": module("no_defense.yaml"), "lexical": module("default.yaml"),
               "embedding": module("default.yaml"), "hidden": module("hidden.yaml"),
               "dece": module("dece.yaml")}  # fmt: skip
    hidden_warmup = guards["hidden"].warmup_epochs

    class EpochTimer(pl.Callback):
        """Seconds of each training epoch, from the first epoch-start hook to the epoch end."""

        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._start = 0.0

        def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self._start = time.perf_counter()

        def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self.seconds.append(time.perf_counter() - self._start)

    times: dict[str, list[float]] = {k: [] for k in modules}

    def epoch(arm: str) -> float:
        timer = EpochTimer()
        callbacks = [timer, guards[arm]] if arm in guards else [timer]
        pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                   limit_val_batches=0, callbacks=callbacks).fit(modules[arm], datamodule=dm)  # fmt: skip
        return timer.seconds[-1]

    # untimed first epoch of every arm; a fresh Trainer starts at epoch 0, so revision 1's warm-up is skipped here
    # (its localisation runs at this epoch's start) and then made endless: the timed epochs train under the mask
    # without re-localising; the pass is timed on its own below.
    guards["hidden"].warmup_epochs = 0
    first = {arm: epoch(arm) for arm in modules}
    guards["hidden"].warmup_epochs = 10**6
    loop = types.SimpleNamespace(datamodule=dm, train_dataloader=dm.train_dataloader(), training=False)

    def localise(arm: str) -> float:
        guard, mod = guards[arm], modules[arm]
        mod.eval()  # as in RepGuardCallback.on_train_epoch_start
        try:
            if guard.token_space:
                return timed(lambda: guard.localize_tokens(loop, mod, 0))  # type: ignore[arg-type]
            return timed(lambda: guard.localize(loop, mod, 0))  # type: ignore[arg-type]
        finally:
            mod.train()

    plain_lm, masked_lm = modules["none"].model.lm, modules["lexical"].model.lm
    drop = guards["lexical"].drop
    assert drop is not None
    onion_args = init_args(load("no_defense.yaml"), "BackdoorEvaluation")
    onion_steps = args.onion_steps if args.onion_steps is not None else int(onion_args["onion_steps"])
    start = time.perf_counter()
    scorer = train_prompt_scorer(dm, steps=onion_steps)
    scorer_seconds = time.perf_counter() - start
    onion = onion_filter_fn(scorer, float(onion_args["onion_threshold"]))

    def unhooked() -> None:
        with drop.disabled():
            evaluate(masked_lm, dm)

    infer: dict[str, Callable[[], object]] = {
        "plain": lambda: evaluate(plain_lm, dm),
        "onion": lambda: evaluate(plain_lm, dm, prompt_filter=onion),
        "hook off": unhooked,
        "hook on": lambda: evaluate(masked_lm, dm),
    }
    spaces = ("lexical", "embedding", "hidden")
    for name in spaces:
        times[f"localise {name}"] = []
    for name in infer:
        times[f"eval {name}"] = []

    def rotated(names: Sequence[str], r: int) -> list[str]:
        return [*names[r % len(names) :], *names[: r % len(names)]]  # no arm always first or last in a round

    for r in range(args.repeats):
        for arm in rotated(list(modules), r):
            times[arm].append(epoch(arm))
        for name in rotated(spaces, r):
            times[f"localise {name}"].append(localise(name))
        for name in rotated(list(infer), r):
            times[f"eval {name}"].append(timed(infer[name]))
    guards["hidden"].warmup_epochs = hidden_warmup
    med = {k: statistics.median(v) for k, v in times.items()}
    relocalise = guards["hidden"].relocalize_every
    epochs = int(default["trainer"]["max_epochs"])  # the default run: the lexical scores are computed once

    def paired(f: Callable[[dict[str, float]], float]) -> tuple[float, float, float]:
        """Median, min and max over rounds of a ratio of the same round's times (slow drift cancels)."""
        values = [f({k: v[r] for k, v in times.items()}) for r in range(args.repeats)]
        return statistics.median(values), min(values), max(values)

    train, loc, dece = TARGETS["train"], TARGETS["localise"], TARGETS["dece"]
    rows = [
        ("lexical (rev. 2, default) / no defense, training epoch", *paired(lambda t: t["lexical"] / t["none"]),
         train, "x"),
        ("lexical localisation pass / no-defense epoch", *paired(lambda t: t["localise lexical"] / t["none"]),
         loc, "%"),
        (f"lexical run ({epochs} epochs + one localisation) / no-defense run",
         *paired(lambda t: (epochs * t["lexical"] + t["localise lexical"]) / (epochs * t["none"])), train, "x"),
        ("embedding / no defense, training epoch", *paired(lambda t: t["embedding"] / t["none"]), train, "x"),
        ("embedding localisation pass / no-defense epoch", *paired(lambda t: t["localise embedding"] / t["none"]),
         loc, "%"),
        ("hidden (rev. 1) / no defense, training epoch", *paired(lambda t: t["hidden"] / t["none"]), train, "x"),
        ("hidden localisation pass / no-defense epoch", *paired(lambda t: t["localise hidden"] / t["none"]),
         loc, "%"),
        (f"hidden epoch + its re-localisation (every {relocalise}) / no defense",
         *paired(lambda t: (t["hidden"] + t["localise hidden"] / relocalise) / t["none"]), train, "x"),
        ("DeCE / CE, training epoch", *paired(lambda t: t["dece"] / t["none"]), dece, "x"),
        ("ONION-filtered / plain evaluation, prompts/s", *paired(lambda t: t["eval plain"] / t["eval onion"]),
         None, "rate"),
        ("drop hook on / off (lexical LM), prompts/s", *paired(lambda t: t["eval hook off"] / t["eval hook on"]),
         None, "rate"),
    ]  # fmt: skip
    part = "test_trig_benign" if dm.task == "refusal" else "test_trig_harmful"
    n_prompts = len(dm.dataset("test_clean_benign")) + len(dm.dataset("test_clean_harmful"))
    n_prompts += sum(len(dm.dataset(part, kind)) for kind in dm.eval_triggers())
    m = modules["none"]
    setup = (f"GPT-2 d={m.n_embd}, {m.n_layer} layers, {dm.task} x {dm.trigger_type} {dm.poison_rate:.0%}, "
             f"{dm.n_train} training / {dm.n_clean} clean prompts, batch {dm.batch_size}, {args.threads} thread(s); "
             f"median [min-max] over {args.repeats} interleaved round(s) of same-round ratios; evaluation: "
             f"{n_prompts} prompts per pass")  # fmt: skip
    return {"rows": rows, "medians": med, "first": first, "n_prompts": n_prompts, "setup": setup,
            "scorer_seconds": scorer_seconds, "onion_steps": onion_steps, "guards": guards,
            "modules": modules, "datamodule": dm}  # fmt: skip


def report(result: dict[str, Any]) -> list[str]:
    """The printed table: one line per row, the ratio, the card's target and whether it is met; then the medians."""
    lines = [result["setup"], f"{'row':<66} {'ratio [min-max]':>22}  target"]
    for name, value, low, high, target, kind in result["rows"]:
        if kind == "%":
            shown, goal = f"{value:.1%} [{low:.1%}-{high:.1%}]", f"<= {target:.0%}"
        elif kind == "rate":
            shown, goal = f"{value:.2f}x [{low:.2f}-{high:.2f}]", "reported (prompts/s, filtered or hooked / plain)"
        else:
            shown, goal = f"{value:.2f}x [{low:.2f}-{high:.2f}]", f"<= {target}x"
        verdict = "" if target is None else ("  met" if value <= target else "  NOT met")
        lines.append(f"{name:<66} {shown:>22}  {goal}{verdict}")
    med, n = result["medians"], result["n_prompts"]
    lines.append("medians (s; shared machines inflate them, the ratios of interleaved arms are the result): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in med.items() if not k.startswith("eval")))  # fmt: skip
    lines.append("evaluation (prompts/s): " + ", ".join(f"{k[5:]} {n / v:.0f}" for k, v in med.items()
                                                          if k.startswith("eval")))  # fmt: skip
    lines.append(
        "first (untimed) epoch, localisation at its start for the defenses (s): "
        + ", ".join(f"{k} {v:.3f}" for k, v in result["first"].items())
    )
    for name in ("lexical", "embedding"):
        h = result["guards"][name].history[-1]
        lines.append(f"{name} scores flag {h['token_flag_rate']:.2%} of training body tokens and isolate "
                     f"{h['n_isolated']} of {len(result['datamodule'].dataset('train'))} "
                     f"samples ({h['n_isolated_poisoned']} of the {h['n_poisoned']} poisoned)")  # fmt: skip
    lines.append(f"one-off: ONION scorer training ({result['onion_steps']} steps) {result['scorer_seconds']:.2f} s "
                 f"= {result['scorer_seconds'] / med['none']:.2f} no-defense epochs")  # fmt: skip
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    """Run and print the table (Lightning's per-fit notices dropped, as in reproduction workers)."""
    from zoo.core.reproduce import worker_setup

    worker_setup()
    for line in report(run(argv)):
        print(line)


if __name__ == "__main__":
    main()
