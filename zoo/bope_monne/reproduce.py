"""``zoo reproduce bope_monne``: the card's claims 1-5 (with its binding revision) on the Lightning path.

Every arm is a config under ``configs/bope_monne/`` run by ``zoo fit`` in-process (by hand: ``zoo fit -c
configs/bope_monne/<arm>.yaml --seed_everything=<s> --data.init_args.seed=<s> [--data.init_args.dm_noise=probit]``);
one fit is one BOPE replication (8 Sobol designs, one random comparison, 15 PE comparisons, then 3 batches of q = 2
with 5 comparisons before each later batch). The claims come from the runs' numbers by :func:`check_claims` alone,
so ``tests/bope_monne/test_reproduce.py`` feeds it perturbed numbers and sees each asserted claim fail. U is the
normalised utility ``(g − g_rand)/(g* − g_rand)``; "final U" is the best evaluated design's after the last batch,
"PE-stage U" the recommendation ``argmax score(μ_f(x))`` after the first 15 comparisons.

Full protocol (VehicleSafety-PWL, seeds 0-9, every arm noise-free and with the probit DM σ = 0.1587):

1. **Integration sanity**: the oracle's median final U ≥ every arm's median final U − 0.02 (noise-free; the oracle
   has no PE stage, so its final U is compared: revision).
2. **PE-stage quality** (revision): MoNNE's median PE-stage U ≥ PairwiseGP-EUBO's − 0.05, and its median held-out
   pairwise accuracy ≥ PairwiseGP's − 0.02 (noise-free, 15 comparisons).
3. **Closed loop**: MoNNE's final U beats Random experiments in ≥ 8/10 paired seeds, and its median is ≥ PairwiseGP's
   − 0.05.
4. **Monotonicity matters** (probit DM, 15 comparisons): MoNNE ≥ non-monotone in median PE-stage U (**not
   reproduced**: printed as info, see the method page), with ≥ 6/10 paired wins (gated); the held-out accuracy gap
   is reported beside it.
5. **Noise robustness**: MoNNE's median drop in final U from noise-free to probit ≤ PairwiseGP's drop + 0.05; the
   number of wrong DM answers per arm and the utility gap of each arm's PE pairs are reported (why the drop is small).

Reported beside them: random-f PE and MoNNE with M = 1. ``--set problems=all`` adds DTLZ2-PWL, CarCab-PWL and
VehicleSafety-Kumaraswamy (MoNNE, PairwiseGP, oracle, random; noise-free), reported without gates.

``--quick`` (revision): 3 seeds, VehicleSafety-PWL noise-free, arms MoNNE, PairwiseGP, oracle, random; gates claim 1
with a 0.05 margin and claim 3 as "MoNNE > Random in ≥ 2/3 seeds"; claim 2 is printed as info.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from statistics import median
from typing import Any

from zoo.core.reproduce import Claim, Report, config_path, curve_styles, fit, legend_outside, parallel_map, save_figure

QUICK_SEEDS = 3
FULL_SEEDS = 10
OPTIONS: dict[str, tuple[str, ...]] = {"problems": ("vehicle_safety_pwl", "all")}

#: Arm name -> config under ``configs/bope_monne/``.
ARMS = {"MoNNE": "default", "PairwiseGP-EUBO": "pairwise_gp", "Random-f": "random_f", "Non-monotone": "nonmonotone",
        "MoNNE M=1": "monne_m1", "Oracle": "oracle", "Random": "random"}  # fmt: skip
#: Arms whose runs do not depend on the decision maker (run once, noise-free).
DM_FREE = ("Oracle", "Random")
QUICK_ARMS = ("MoNNE", "PairwiseGP-EUBO", "Oracle", "Random")
#: The extra problems of ``--set problems=all`` (problem, utility).
EXTRA = (("dtlz2", "pwl"), ("car_cab", "pwl"), ("vehicle_safety", "kumaraswamy"))
MAIN = "vehicle_safety-pwl"
Job = tuple[str, str, str, int]  # (setting, arm, noise, seed)


def run_job(job: Job) -> dict[str, Any]:
    """Fit one replication; return its per-stage history and seconds as primitives."""
    from zoo.core.reproduce import worker_setup

    worker_setup()
    setting, arm, noise, seed = job
    problem, utility = setting.split("-")
    overrides = (f"--data.init_args.problem={problem}", f"--data.init_args.utility={utility}",
                 f"--data.init_args.dm_noise={noise}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bope_monne_") as root:
        result = fit(config_path("bope_monne", ARMS[arm]), overrides, seed=seed, root=root)
    history = [{k: float(v) for k, v in h.items()} for h in result.model.history]
    return {"setting": setting, "arm": arm, "noise": noise, "seed": seed, "history": history,
            "seconds": round(result.seconds, 2)}  # fmt: skip


def jobs(seeds: list[int] | tuple[int, ...], quick: bool, problems: str = "vehicle_safety_pwl") -> list[Job]:
    """Every (setting, arm, noise, seed) the protocol runs, the longest first."""
    out: list[Job] = []
    arms = QUICK_ARMS if quick else tuple(ARMS)
    for s in seeds:
        for arm in arms:
            noises = ("none",) if quick or arm in DM_FREE else ("none", "probit")
            out += [(MAIN, arm, noise, s) for noise in noises]
    if problems == "all" and not quick:
        for problem, utility in EXTRA:
            for s in seeds:
                out += [(f"{problem}-{utility}", arm, "none", s) for arm in QUICK_ARMS]
    weight = {"Non-monotone": 0, "MoNNE": 1, "Random-f": 2, "PairwiseGP-EUBO": 3, "MoNNE M=1": 4}
    return sorted(out, key=lambda j: weight.get(j[1], 9))


def _runs(runs: list[dict[str, Any]], arm: str, noise: str = "none", setting: str = MAIN) -> list[dict[str, Any]]:
    noise = "none" if arm in DM_FREE else noise
    return sorted((r for r in runs if r["arm"] == arm and r["noise"] == noise and r["setting"] == setting),
                  key=lambda r: r["seed"])  # fmt: skip


def final_u(runs: list[dict[str, Any]], arm: str, noise: str = "none", setting: str = MAIN) -> dict[int, float]:
    """Seed -> U of the best evaluated design after the last batch."""
    return {r["seed"]: r["history"][-1]["u"] for r in _runs(runs, arm, noise, setting)}


def pe_stage(runs: list[dict[str, Any]], arm: str, key: str = "pe_u", noise: str = "none",
             setting: str = MAIN) -> dict[int, float]:  # fmt: skip
    """Seed -> a first-stage PE diagnostic (``pe_u``, ``acc``, ``tau``) after the first 15 comparisons."""
    return {r["seed"]: r["history"][0][key] for r in _runs(runs, arm, noise, setting)}


def _med(values: dict[int, float]) -> float:
    return float(median(values.values())) if values else float("nan")


def _wins(a: dict[int, float], b: dict[int, float], strict: bool = True) -> int:
    return sum((a[s] > b[s]) if strict else (a[s] >= b[s]) for s in a if s in b)


def check_claims(runs: list[dict[str, Any]], quick: bool) -> list[Claim]:
    """The claims from the runs' numbers (see the module docstring)."""
    oracle, monne, gp, rand = (final_u(runs, a) for a in ("Oracle", "MoNNE", "PairwiseGP-EUBO", "Random"))
    n = len(monne)
    margin = 0.05 if quick else 0.02
    arms = [a for a in (QUICK_ARMS if quick else ARMS) if a != "Oracle"]
    best = max(arms, key=lambda a: _med(final_u(runs, a)))
    finals = " · ".join(f"{a} {_med(final_u(runs, a)):.3f}" for a in ("Oracle", *arms))
    claims = [
        Claim(f"1 oracle median final U − best other arm's ({best}) + {margin} (oracle: final-stage U, no PE stage)",
              _med(oracle) - _med(final_u(runs, best)) + margin, ">=", 0.0, finals),
    ]  # fmt: skip
    pe_m, pe_g = pe_stage(runs, "MoNNE"), pe_stage(runs, "PairwiseGP-EUBO")
    acc_m, acc_g = pe_stage(runs, "MoNNE", "acc"), pe_stage(runs, "PairwiseGP-EUBO", "acc")
    claims += [
        Claim("2 MoNNE − PairwiseGP median PE-stage U (15 comparisons) + 0.05", _med(pe_m) - _med(pe_g) + 0.05, ">=",
              0.0, f"MoNNE {_med(pe_m):.3f}, PairwiseGP {_med(pe_g):.3f}", asserted=not quick),
        Claim("2 MoNNE − PairwiseGP median held-out pairwise accuracy + 0.02", _med(acc_m) - _med(acc_g) + 0.02, ">=",
              0.0, f"MoNNE {_med(acc_m):.3f}, PairwiseGP {_med(acc_g):.3f}", asserted=not quick),
    ]  # fmt: skip
    need = 2 if quick else 8
    claims.append(Claim(f"3 seeds where MoNNE's final U beats Random's (of {n}; need {need})", _wins(monne, rand), ">=",
                        need, f"MoNNE median {_med(monne):.3f}, Random {_med(rand):.3f}"))  # fmt: skip
    if quick:
        return claims
    claims.append(Claim("3 MoNNE − PairwiseGP median final U + 0.05", _med(monne) - _med(gp) + 0.05, ">=", 0.0,
                        f"MoNNE {_med(monne):.3f}, PairwiseGP {_med(gp):.3f}"))  # fmt: skip
    pm, pn = pe_stage(runs, "MoNNE", noise="probit"), pe_stage(runs, "Non-monotone", noise="probit")
    am, an = pe_stage(runs, "MoNNE", "acc", "probit"), pe_stage(runs, "Non-monotone", "acc", "probit")
    claims += [
        Claim("4 (not reproduced) MoNNE − non-monotone median PE-stage U, probit DM", _med(pm) - _med(pn), ">=", 0.0,
              f"MoNNE {_med(pm):.3f}, non-monotone {_med(pn):.3f}", asserted=False),
        Claim(f"4 seeds where MoNNE's PE-stage U ≥ non-monotone's, probit DM (of {len(pm)}; need 6)",
              _wins(pm, pn, strict=False), ">=", 6),
        Claim("4 MoNNE − non-monotone median held-out accuracy, probit DM (reported)", _med(am) - _med(an), ">=", 0.0,
              f"MoNNE {_med(am):.3f}, non-monotone {_med(an):.3f}", asserted=False),
    ]  # fmt: skip
    monne_p, gp_p = final_u(runs, "MoNNE", "probit"), final_u(runs, "PairwiseGP-EUBO", "probit")
    drop_m, drop_g = _med(monne) - _med(monne_p), _med(gp) - _med(gp_p)
    drops = f"MoNNE drop {drop_m:.3f}, PairwiseGP {drop_g:.3f}"
    claims.append(Claim("5 PairwiseGP's median final-U drop (noise-free → probit) + 0.05 − MoNNE's",
                        drop_g + 0.05 - drop_m, ">=", 0.0, drops))  # fmt: skip
    why = ("MoNNE", "PairwiseGP-EUBO", "Random-f")
    errors = {a: _med(pe_stage(runs, a, "dm_errors", "probit")) for a in why}
    gaps = {a: _med(pe_stage(runs, a, "pair_gap")) for a in why}
    detail = " · ".join(f"{a} {errors[a]:g} (median |Δg| of its PE pairs {gaps[a]:.2f})" for a in why)
    claims.append(Claim("5 probit DM: median wrong answers in the first 16 comparisons, MoNNE (reported)",
                        errors["MoNNE"], ">=", 0.0, detail, asserted=False))  # fmt: skip
    for arm in ("Random-f", "MoNNE M=1"):
        claims.append(Claim(f"{arm} median PE-stage U (reported)", _med(pe_stage(runs, arm)), ">=", 0.0,
                            f"MoNNE {_med(pe_m):.3f}", asserted=False))  # fmt: skip
    failures = sum(r["history"][-1].get("fit_failures", 0.0) > 0 for r in runs)
    claims.append(Claim("runs whose PairwiseGP fit needed the fallback (reported)", failures, ">=", 0, asserted=False))
    return claims


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    import numpy as np

    q = np.percentile(values, [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: per setting, arm and DM noise the medians [IQR] of final U, PE-stage U, accuracy, τ, seconds."""
    lines = ["| setting | arm | DM | final U | PE-stage U | held-out acc | Kendall τ | regret | s/run | n |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    keys = sorted({(r["setting"], r["arm"], r["noise"]) for r in runs},
                  key=lambda k: (k[0] != MAIN, k[0], list(ARMS).index(k[1]), k[2]))  # fmt: skip
    for setting, arm, noise in keys:
        group = _runs(runs, arm, noise, setting)

        def cell(values: list[float]) -> str:
            if not values:
                return "–"
            lo, mid, hi = _quartiles(values)
            return f"{mid:.3f} [{lo:.3f}, {hi:.3f}]"

        first = [r["history"][0] for r in group]
        lines.append(
            f"| {setting} | {arm} | {noise} | {cell([r['history'][-1]['u'] for r in group])} | "
            f"{cell([h['pe_u'] for h in first if 'pe_u' in h])} | {cell([h['acc'] for h in first if 'acc' in h])} | "
            f"{cell([h['tau'] for h in first if 'tau' in h])} | {cell([r['history'][-1]['regret'] for r in group])} "
            f"| {median(r['seconds'] for r in group):.1f} | {len(group)} |"
        )
    return "\n".join(lines)


def plot_stages(runs: list[dict[str, Any]], out: Path) -> str:
    """Median U of the best evaluated design after each batch (IQR band), per arm; noise-free and probit panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    noises = sorted({r["noise"] for r in runs if r["setting"] == MAIN and r["arm"] not in DM_FREE})
    fig, axes = plt.subplots(1, len(noises), figsize=(6 * len(noises), 4.2), squeeze=False, sharey=True)
    arms = [a for a in ARMS if any(r["arm"] == a for r in runs)]
    styles = curve_styles(len(arms))
    for ax, noise in zip(axes[0], noises, strict=True):
        for arm, style in zip(arms, styles, strict=True):
            group = _runs(runs, arm, noise)
            if not group:
                continue
            stages = range(1, min(len(r["history"]) for r in group) + 1)
            qs = [_quartiles([r["history"][t - 1]["u"] for r in group]) for t in stages]
            ax.plot(list(stages), [q[1] for q in qs], label=f"{arm} (n={len(group)})", **style)
            ax.fill_between(list(stages), [q[0] for q in qs], [q[2] for q in qs], alpha=0.12)
        ax.set_title(f"VehicleSafety-PWL, DM {'noise-free' if noise == 'none' else 'probit σ=0.1587'}")
        ax.set_xlabel("batch (stage)")
        ax.set_xticks(list(range(1, 4)))
    axes[0][0].set_ylabel("normalised utility U of the best design (median, IQR)")
    legend_outside(axes[0][-1])
    return save_figure(fig, out, "bope_monne_utility_by_stage.png")


def plot_pe_stage(runs: list[dict[str, Any]], out: Path) -> str:
    """PE-stage U and held-out accuracy after the first 15 comparisons, per preference arm (every seed a point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in ARMS if a not in DM_FREE and any(r["arm"] == a for r in runs)]
    noises = sorted({r["noise"] for r in runs if r["arm"] in arms})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(noises)
    for ax, key, label in ((axes[0], "pe_u", "PE-stage U (recommendation)"),
                           (axes[1], "acc", "held-out pairwise accuracy")):  # fmt: skip
        for j, (noise, style) in enumerate(zip(noises, curve_styles(len(noises)), strict=True)):
            xs, ys = [], []
            for i, arm in enumerate(arms):
                vals = list(pe_stage(runs, arm, key, noise).values())
                xs += [i + (j - (len(noises) - 1) / 2) * width] * len(vals)
                ys += vals
            ax.plot(xs, ys, linestyle="none", marker=style["marker"], alpha=0.6,
                    label="noise-free DM" if noise == "none" else "probit DM")  # fmt: skip
        ax.set_xticks(range(len(arms)))
        ax.set_xticklabels(arms, rotation=25, ha="right")
        ax.set_ylabel(label)
        ax.set_xlabel("arm")
        ax.set_title(f"{label.split(' (')[0]} after 15 comparisons")
        ax.set_xlim(-0.5, len(arms) - 0.5)
    fig.suptitle("VehicleSafety-PWL: the first preference-exploration stage, every seed a point")
    legend_outside(axes[1])
    return save_figure(fig, out, "bope_monne_pe_stage.png")


def run(seeds: list[int] | tuple[int, ...], quick: bool, out: Path, progress: Any,
        options: dict[str, str] | None = None) -> Report:  # fmt: skip
    """The protocol (see the module docstring)."""
    problems = (options or {}).get("problems", "vehicle_safety_pwl")
    todo = jobs(seeds, quick, problems)
    progress(f"{len(todo)} replications on 2 worker processes")
    runs = parallel_map(run_job, todo, workers=2)
    for r in sorted(runs, key=lambda r: (r["setting"], r["arm"], r["noise"], r["seed"])):
        first, last = r["history"][0], r["history"][-1]
        pe = f", PE-stage U {first['pe_u']:.3f}, acc {first['acc']:.3f}" if "pe_u" in first else ""
        progress(f"{r['setting']} {r['arm']} DM {r['noise']} seed {r['seed']}: final U {last['u']:.3f}{pe} "
                 f"({r['seconds']:.1f} s)")  # fmt: skip
    claims = check_claims(runs, quick)
    plots = [plot_stages(runs, out), plot_pe_stage(runs, out)]
    return Report(claims=claims, metrics={"runs": runs}, table=table(runs), plots=plots)
