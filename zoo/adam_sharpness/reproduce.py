"""`zoo reproduce adam_sharpness`: the card's claims C1-C4 (gated) and the exploratory arms (logged) at CPU scale.

Every arm is a config under ``configs/adam_sharpness/`` fitted in-process by the core harness with all seeds as one
replica batch (``--data.init_args.n_replicas=N``; replica r has data and init seed r and noise seed 1000 + r), so an
arm re-runs by hand as ``zoo fit -c configs/adam_sharpness/<arm>.yaml --data.init_args.n_replicas=5``. All arms see
the same data and noise seeds. Basis pursuit (``scipy.optimize.linprog``) runs on the CI data of each seed.

``--quick`` (``QUICK_SEEDS`` = 5): the CI-scale arms (d=40, k=3, n=20, δ=0.5, lr=0.01, 5e4 steps): Adam, SGD,
RMSProp, AdamE e ∈ {0.25, 0.75}, Adalayer, Adam-mini, torch Adam, and the δ = 0 ablation of Adam and SGD. The full run
adds AdamE e = 0, the β2-scheme sweep (s = 1.5, 2.5) and the d=100 pair (2e5 steps; C2 also read there); the full run's
default is the card's 5 seeds (``FULL_SEEDS``). Claims over seeds need all seeds but one
(4/5; with 3 seeds the card's 2/3 rule).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from zoo.core.reproduce import Claim, Report, config_path, curve_styles, legend_outside, parallel_map, save_figure

QUICK_SEEDS = 5
#: The card's protocol: seeds 0-4 (the full run's default; ``--seeds N`` overrides).
FULL_SEEDS = 5
#: arm name -> config file; ``QUICK_ARMS`` run in both modes, ``FULL_ARMS`` only in the full run.
QUICK_ARMS = {
    "adam": "default", "sgd": "sgd", "rmsprop": "rmsprop", "adame e=0.25": "adame_0.25",
    "adame e=0.75": "adame_0.75", "adalayer": "adalayer", "adam_mini": "adam_mini", "torch_adam": "torch_adam",
    "adam δ=0": "no_noise_adam", "sgd δ=0": "no_noise_sgd",
}  # fmt: skip
FULL_ARMS = {
    "adame e=0": "adame_0", "adam β2 s=1.5": "beta2_scheme_1.5", "adam β2 s=2.5": "beta2_scheme_2.5",
    "adam d100": "diagnet_d100", "sgd d100": "diagnet_d100_sgd",
}  # fmt: skip
#: δ of the configs' LabelNoiseCallback (C3's prediction (δ²/n)·diag H).
DELTA = 0.5


def run_arm(job: tuple[str, str, int]) -> dict[str, Any]:
    """Fit one arm with ``n`` replicas; return per-replica metrics, sharpness history, curves and C3's check."""
    from zoo.core.reproduce import fit, worker_setup

    worker_setup()
    from callbacks.label_noise import LabelNoiseCallback
    from callbacks.sharpness import SharpnessLogger
    from zoo.adam_sharpness.model import basis_pursuit, heldout_mse, sparsity

    name, config, n = job
    with tempfile.TemporaryDirectory() as tmp:  # the fit's run folder (config.yaml): never the working directory
        res = fit(config_path("adam_sharpness", config), [f"--data.init_args.n_replicas={n}"], seed=None, root=tmp)
    net, dm = res.model, res.datamodule
    noise = res.callback(LabelNoiseCallback)
    delta = noise.delta if noise is not None else 0.0
    out: dict[str, Any] = {
        "name": name, "config": config, "seconds": res.seconds, "steps": net.optimizer_steps,
        "metrics": net.replica_metrics(*dm.test), "history": res.callback(SharpnessLogger).history,
        "loss_curve": net.loss_curve, "delta": delta, "beta2": net.beta2,
        "preconditioner": net.preconditioner(delta) if delta > 0 and net.optimizer_name != "sgd" else [],
    }  # fmt: skip
    if name == "adam":  # basis pursuit on the same data, per seed
        Z, y = dm.train
        Zt, yt, _ = dm.test
        import torch

        w = torch.stack([basis_pursuit(Z[r], y[r]) for r in range(Z.shape[0])])
        bp = {"test_mse": heldout_mse(w, Zt, yt), **sparsity(w)}
        out["basis_pursuit"] = {k: v.tolist() for k, v in bp.items()}
    return out


def needed(n: int) -> int:
    """Seeds a claim over seeds needs: all but one (4/5; 2/3 with 3 seeds); all of 1 or 2."""
    return n - 1 if n >= 3 else n


def _final(arm: dict[str, Any], key: str) -> list[float]:
    return list(arm["history"][-1][key])


def check_claims(arms: dict[str, dict[str, Any]], quick: bool) -> list[Claim]:
    """The card's claims from the arms' results (``tests/adam_sharpness/test_reproduce.py`` perturbs them)."""
    adam, sgd = arms["adam"]["metrics"], arms["sgd"]["metrics"]
    n = len(adam["l_half"])
    k = needed(n)
    lower = sum(a < s for a, s in zip(adam["l_half"], sgd["l_half"], strict=True))
    ratio = median(a / s for a, s in zip(adam["l_half"], sgd["l_half"], strict=True))
    mse_a, mse_s = median(adam["test_mse"]), median(sgd["test_mse"])
    pre = arms["adam"]["preconditioner"]
    corr = median(c["corr"] for c in pre) if pre else math.nan
    pratio = median(c["ratio"] for c in pre) if pre else math.nan
    sq_a, sq_s = _final(arms["adam"], "tr_sqrt_diagH"), _final(arms["sgd"], "tr_sqrt_diagH")
    tr_a, tr_s = _final(arms["adam"], "trH"), _final(arms["sgd"], "trH")
    c4 = sum(a < s for a, s in zip(sq_a, sq_s, strict=True))
    claims = [
        Claim(f"C1 sparsity: seeds with Σ√|w| lower for Adam (of {n})", lower, ">=", k,
              f"Adam {[round(x, 2) for x in adam['l_half']]}, SGD {[round(x, 2) for x in sgd['l_half']]}"),
        Claim("C1 sparsity: median over seeds of Σ√|w| Adam/SGD", ratio, "<=", 0.6, "card reference about 0.4"),
        Claim("C2 generalisation: median test MSE Adam", mse_a, "<", 0.01,
              f"per seed {[round(x, 4) for x in adam['test_mse']]}"),
        Claim("C2 generalisation: median test MSE Adam / SGD", mse_a / mse_s if mse_s > 0 else math.nan, "<", 0.5,
              f"SGD per seed {[round(x, 4) for x in sgd['test_mse']]} (median {mse_s:.4f})"),
        Claim("C3 mechanism: median corr(v, (δ²/n)·diag H), Adam", corr, ">", 0.9,
              f"per seed {[round(c['corr'], 4) for c in pre]}; H = (1/n)Σ∇f∇fᵀ (card)"),
        Claim("C3 mechanism: median of median ratio v / ((δ²/n)·diag H)", pratio, "in", [0.7, 1.3],
              f"per seed {[round(c['ratio'], 3) for c in pre]}"),
        Claim(f"C4 consistency (follows from C1): seeds with callback tr diag(H)^½ lower for Adam (of {n})", c4, ">=",
              k, f"Adam {[round(x, 2) for x in sq_a]}, SGD {[round(x, 2) for x in sq_s]}; closed form "
              "2Σ(|u|+|v|) ≥ 2Σ√|w|"),
        Claim(f"info: seeds with tr H lower for Adam (of {n}; not gated)", sum(a < s for a, s in zip(tr_a, tr_s,
              strict=True)), ">=", 0, f"Adam {[round(x, 2) for x in tr_a]}, SGD {[round(x, 2) for x in tr_s]}",
              asserted=False),
        Claim("info: median ‖w‖₁ Adam / SGD (SGD's ℓ1 drift unfinished)", median(adam["l1"]) / median(sgd["l1"]),
              ">=", 0, "card: Adam also lower on ‖w‖₁ at these budgets", asserted=False),
    ]  # fmt: skip
    med = {name: median(a["metrics"]["l_half"]) for name, a in arms.items()}
    order = ("adam", "adam_mini", "adalayer", "sgd")
    claims.append(Claim("info: ordering Adam ≈ Adam-mini < Adalayer ≈ SGD (median Σ√|w|)",
                        float(max(med["adam"], med["adam_mini"]) < min(med["adalayer"], med["sgd"])), ">=", 1,
                        ", ".join(f"{o} {med[o]:.2f}" for o in order), asserted=False))  # fmt: skip
    claims.append(Claim("info: δ=0 ablation, median Σ√|w| Adam/SGD (separation needs noise)",
                        median(a / s for a, s in zip(arms["adam δ=0"]["metrics"]["l_half"],
                                                    arms["sgd δ=0"]["metrics"]["l_half"], strict=True)),
                        ">", 0.6, "no separation expected without label noise", asserted=False))  # fmt: skip
    if "adam d100" in arms:
        a100, s100 = median(arms["adam d100"]["metrics"]["test_mse"]), median(arms["sgd d100"]["metrics"]["test_mse"])
        claims += [
            Claim("C2 at d=100: median test MSE Adam", a100, "<", 0.01, "card reference 0.0015"),
            Claim("C2 at d=100: median test MSE Adam / SGD", a100 / s100 if s100 > 0 else math.nan, "<", 0.5,
                  f"SGD median {s100:.4f} (card 0.093)"),
        ]  # fmt: skip
    return claims


def run(seeds: tuple[int, ...], quick: bool, out: Path, progress: Callable[[str], None],
        options: dict[str, str] | None = None) -> Report:  # fmt: skip
    """Run every arm with ``len(seeds)`` replicas, then the claims, the table and the plots."""
    n = len(seeds)
    if seeds != tuple(range(n)):
        raise ValueError(f"zoo reproduce adam_sharpness: seeds must be 0..N-1 (replicas); got {seeds}")
    arms_cfg = dict(QUICK_ARMS) if quick else {**QUICK_ARMS, **FULL_ARMS}
    progress(f"{len(arms_cfg)} arms, {n} seeds each as one replica batch")
    jobs = sorted(((name, cfg, n) for name, cfg in arms_cfg.items()), key=lambda j: "d100" not in j[0])
    results = parallel_map(run_arm, jobs, workers=2)
    arms = {r["name"]: r for r in results}
    for r in results:
        progress(f"{r['name']}: {r['steps']} steps x {n} seeds in {r['seconds']:.1f} s")
    claims = check_claims(arms, quick)
    lines = [
        "| arm | β2 | median test MSE | median ‖w−w*‖² | median Σ√|w| | median ‖w‖₁ | median nbig | support "
        "recovered | median tr H | median tr diag(H)^½ | fit s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    metrics: dict[str, Any] = {"arms": {}}
    for name in arms_cfg:
        a = arms[name]
        m = a["metrics"]
        row = {k: median(v) for k, v in m.items()}
        row["support_fraction"] = sum(m.get("support", [])) / n if "support" in m else math.nan
        row["trH"], row["tr_sqrt_diagH"] = median(_final(a, "trH")), median(_final(a, "tr_sqrt_diagH"))
        metrics["arms"][name] = {"per_seed": m, "median": row, "seconds": a["seconds"], "beta2": a["beta2"],
                                 "preconditioner": a["preconditioner"], "config": a["config"]}  # fmt: skip
        b2 = "—" if a["beta2"] is None else f"{a['beta2']:.4g}"
        lines.append(f"| {name} | {b2} | {row['test_mse']:.4f} | {row.get('w_err', math.nan):.4f} | "
                     f"{row['l_half']:.2f} | {row['l1']:.2f} | {row['nbig']:.0f} | {row['support_fraction']:.2f} | "
                     f"{row['trH']:.2f} | {row['tr_sqrt_diagH']:.2f} | {a['seconds']:.0f} |")  # fmt: skip
    bp = arms["adam"]["basis_pursuit"]
    metrics["basis_pursuit"] = bp
    lines.append(f"| basis pursuit (ℓ1 oracle) | — | {median(bp['test_mse']):.4f} | — | {median(bp['l_half']):.2f} | "
                 f"{median(bp['l1']):.2f} | {median(bp['nbig']):.0f} | — | — | — | — |")  # fmt: skip
    curves = {name: {"loss": arms[name]["loss_curve"], "history": arms[name]["history"]} for name in arms_cfg}
    metrics["curves"] = curves
    table = (f"{n} seeds (replicas), CI scale d=40, k=3, n=20, δ=0.5, lr=0.01, 5e4 steps (d100 arms: d=100, k=5, "
             "n=40, 2e5 steps); medians over seeds.\n\n" + "\n".join(lines))  # fmt: skip
    plots = _plots(curves, out)
    return Report(claims=claims, metrics=metrics, table=table, plots=plots)


def _plots(curves: dict[str, dict[str, Any]], out: Path) -> list[str]:
    """Clean training loss and the callback's sharpness trajectories (median over seeds) vs optimizer steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in curves if "d100" not in n]
    fig, ax = plt.subplots(figsize=(8.5, 5))
    for name, style in zip(names, curve_styles(len(names)), strict=True):
        rows = curves[name]["loss"]
        ax.semilogy([r[0] for r in rows], [max(median(r[1:]), 1e-12) for r in rows], label=name, lw=1.2, **style)
    ax.set_xlabel("optimizer steps")
    ax.set_ylabel("clean training loss (median over seeds, log scale, floored at 1e-12)")
    ax.set_title("adam_sharpness: clean-label training loss, CI scale (d=40, k=3, n=20, δ=0.5)", fontsize=9)
    legend_outside(ax)
    paths = [save_figure(fig, out, "adam_sharpness_loss.png")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, label in ((axes[0], "tr_sqrt_diagH", "tr diag(H)^{1/2}"), (axes[1], "trH", "tr H")):
        for name, style in zip(names, curve_styles(len(names)), strict=True):
            hist = curves[name]["history"]
            ax.plot([h["step"] for h in hist], [median(h[key]) for h in hist], label=name, lw=1.2, **style)
        ax.set_xlabel("optimizer steps")
        ax.set_ylabel(f"{label} of the clean loss (median over seeds)")
        ax.set_title(f"adam_sharpness: {label} during training (SharpnessLogger)", fontsize=9)
    legend_outside(axes[1])
    paths.append(save_figure(fig, out, "adam_sharpness_sharpness.png"))
    return paths
