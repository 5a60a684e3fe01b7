"""``zoo reproduce coop_se``: the card's protocol and claims C1–C5 on the vectorised core.

μ = [0.9, 0.8, 0.7, 0.6, 0.5] Bernoulli, T = 2e4, c = 2, seeds as replicas of one run; every run reads its arm's
config under ``configs/coop_se/`` (``RUNS``) with ``m``, the seed and the replica count as overrides: Coop-SE on the
path (``default.yaml``) for m ∈ {1, 2, 4, 8, 16} and on the complete graph (``complete.yaml``) for m ∈ {4, 8, 16};
``no_comm``, ``logsize``, ``logrounds``, ``flood_ucb``, ``consensus_ucb`` and ``congest`` at m = 8 (path). By hand,
e.g.
``zoo fit -c configs/coop_se/complete.yaml --data.init_args.m=4 --data.init_args.n_replicas=3``. The runs use the
vectorised core (``CoopBanditSim``, no Trainer). ``--quick`` keeps T, the seeds and every asserted claim, and drops
only the unasserted per-edge ``congest`` run and the two UCB baselines (info rows). The claims are computed from the
runs' numbers by :func:`claims` alone, so ``tests/coop_se/test_reproduce.py`` feeds each one perturbed numbers and
sees it fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from zoo.core.reproduce import (
    Claim,
    Report,
    curve_styles,
    legend_outside,
    load_config,
    parallel_map,
    save_figure,
    worker_setup,
)

#: The 3 seeds are replicas of one vectorised run, so --quick keeps them.
QUICK_SEEDS = 3
#: Card reference numbers (mean individual regret, mean of seeds 0-2).
REF_M1, REF_SLOPE = 1796.0, -0.94
PATH_M, COMPLETE_M = (1, 2, 4, 8, 16), (4, 8, 16)
#: Run label prefix -> (config under configs/coop_se/, m values); the label is ``f"{prefix} m={m}"``.
RUNS: dict[str, tuple[str, tuple[int, ...]]] = {
    "path": ("default", PATH_M),
    "complete": ("complete", COMPLETE_M),
    "no_comm": ("no_comm", (8,)),
    "logsize": ("logsize", (8,)),
    "logrounds": ("logrounds", (8,)),
}
#: C5: bits per directed edge per round of the log-size variant <= BITS_C * log2(m·A·T). A message has three fields
#: (arm, count, sum), each of at most ⌈log₂(mAT)⌉ bits; c = 3 was fixed before the first measurement.
BITS_C = 3.0
#: C5: the log-size variant's individual regret (mean and max agent) within this factor of Coop-SE's (issue #22).
LOGSIZE_RATIO = 1.5
#: Info-only runs (no asserted claim reads them): label -> config at m = 8, left out of ``--quick``.
INFO_RUNS: dict[str, str] = {
    "flood_ucb m=8": "flood_ucb",
    "consensus_ucb m=8 (zoo simplification)": "consensus_ucb",
    "congest m=8 (bandwidth 1)": "congest",
}


def simulate(job: tuple[str, str, int, tuple[int, ...]]) -> dict[str, Any]:
    """Run one (label, config, m, seeds) job on the bare core; return per-replica, per-agent numbers."""
    import time

    worker_setup()
    from datamodules.decision.bandit_datamodule import BanditGraphDataModule
    from zoo.coop_se.sim import CoopBanditSim

    label, config, m, seeds = job
    blob = load_config("coop_se", config)
    model, data = blob["model"]["init_args"], blob["data"]["init_args"]
    algorithm, graph, T = model["algorithm"], data["graph"], int(data["T"])
    data = {**data, "m": m, "seed": seeds[0], "n_replicas": len(seeds)}
    dm = BanditGraphDataModule(**data)
    keys = ("c", "log_arg", "selection", "own_delay", "bandwidth", "snapshot_delay", "messages_per_edge")
    sim = CoopBanditSim(algorithm, len(seeds), dm.n_agents, dm.n_arms, **{k: model[k] for k in keys if k in model})
    sim.attach(**dm.problem())
    start = time.perf_counter()
    sim.advance(T)
    seconds = time.perf_counter() - start
    keep = sim.curve_t > 0
    return {"label": label, "algorithm": algorithm, "graph": graph, "m": m, "seconds": seconds,
            "diameter": sim.diameter, "regret": sim.regret.tolist(), "metrics": sim.metrics(),
            "edge_peak": int(sim.edge_peak),
            "curve_t": sim.curve_t[keep].tolist(), "curve": sim.curve[..., keep].mean(1).mean(0).tolist(),
            "bound_bits": None}  # fmt: skip


def _jobs(seeds: tuple[int, ...], quick: bool) -> list[tuple[str, str, int, tuple[int, ...]]]:
    jobs = [(f"{prefix} m={m}", config, m, seeds) for prefix, (config, ms) in RUNS.items() for m in ms]
    if not quick:
        jobs += [(label, config, 8, seeds) for label, config in INFO_RUNS.items()]
    return jobs


def run(
    seeds: tuple[int, ...],
    quick: bool,
    out: Path,
    progress: Callable[[str], None],
    options: dict[str, str] | None = None,
) -> Report:
    """The card's protocol; returns claims C1–C5, the table, per-run metrics and the plots."""
    data = load_config("coop_se", "default")["data"]["init_args"]
    T, A = int(data["T"]), len(data["means"])
    seeds = tuple(seeds)
    jobs = _jobs(seeds, quick)
    # the slow per-edge congest run first, so the two workers finish together
    jobs.sort(key=lambda j: j[1] != "congest")
    progress(f"{len(jobs)} runs (T={T}, seeds {list(seeds)} as replicas) on 2 workers")
    results = {r["label"]: r for r in parallel_map(simulate, jobs, workers=2)}
    for r in results.values():
        progress(f"{r['label']:<40} mean {np.mean(r['regret']):8.1f}  ({r['seconds']:.1f} s)")
    checked = claims(results, T, A)
    path = {m: _mean(results, f"path m={m}") for m in PATH_M}
    comp = {m: _mean(results, f"complete m={m}") for m in COMPLETE_M}
    lines = ["| m | path: mean individual regret (max agent) | complete: mean |", "|---|---|---|"]
    for m in PATH_M:
        c = f"{comp[m]:.1f}" if m in comp else "—"
        lines.append(f"| {m} | {path[m]:.1f} ({_max_agent(results, f'path m={m}'):.1f}) | {c} |")
    lines += ["", "| run (m=8, path) | mean individual regret | max agent | messages/agent | bits/message | "
              "messages/edge/round (max) | bits/edge/round (max) | rounds with a message | snapshots |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, r in results.items():
        if label.startswith(("path", "complete")) and "m=8" not in label:
            continue
        met = r["metrics"]
        lines.append(f"| {label} | {_mean(results, label):.1f} | {_max_agent(results, label):.1f} | "
                     f"{met['messages_per_agent']:.0f} | {met['bits_per_message_max']:.0f} | "
                     f"{met['msgs_per_edge_round_max']:.0f} | {met['bits_per_edge_round_max']:.0f} | "
                     f"{met['comm_rounds']:.0f} | {met['comm_phases']:.0f} |")  # fmt: skip
    slope = _slope(path)
    metrics = {"T": T, "seeds": list(seeds), "slope": slope, "path": path, "complete": comp,
               "runs": {k: {kk: v for kk, v in r.items() if kk != "label"} for k, r in results.items()}}  # fmt: skip
    plots = _plots(results, path, comp, out, T)
    return Report(claims=checked, metrics=metrics, table="\n".join(lines), plots=plots)


def _mean(results: dict[str, Any], label: str) -> float:
    """Mean individual regret of a run, mean over seeds."""
    return float(np.mean(results[label]["regret"]))


def _max_agent(results: dict[str, Any], label: str) -> float:
    """Max-agent individual regret of a run, mean over seeds."""
    return float(np.mean(np.max(results[label]["regret"], axis=1)))


def _slope(path: dict[int, float]) -> float:
    """Least-squares slope of log(mean individual regret) against log m over m ∈ {2, 4, 8, 16}."""
    ms = np.array([2, 4, 8, 16], dtype=float)
    return float(np.polyfit(np.log(ms), np.log([path[int(m)] for m in ms]), 1)[0])


def claims(results: dict[str, Any], T: int, A: int) -> list[Claim]:
    """Claims C1–C5 and safety from the runs' numbers only.

    Args:
        results: run label -> ``{"regret": (seeds, m) per-agent regret, "metrics": sim.metrics(), "diameter": int}``
            (``simulate``'s output; ``congest m=8 (bandwidth 1)`` optional).
        T: horizon.
        A: number of arms.
    """

    def mean(label: str) -> float:
        return _mean(results, label)

    def max_agent(label: str) -> float:
        return _max_agent(results, label)

    path = {m: mean(f"path m={m}") for m in PATH_M}
    comp = {m: mean(f"complete m={m}") for m in COMPLETE_M}
    slope = _slope(path)
    nocomm, logr = mean("no_comm m=8"), mean("logrounds m=8")
    out = [
        Claim(
            "C1 path m=1 regret within ±15% of the card's 1796",
            path[1],
            "in",
            [0.85 * REF_M1, 1.15 * REF_M1],
            f"mean individual regret {path[1]:.1f} (card 1796)",
        ),
        Claim("C1 slope log Reg vs log m, m in {2,4,8,16}", slope, "in", [-1.1, -0.8], f"card {REF_SLOPE}"),
        Claim("C1 Reg(8)/Reg(1) on the path", path[8] / path[1], "<=", 0.2, "card 0.16"),
    ]
    for m in COMPLETE_M:
        gap = abs(path[m] - comp[m]) / comp[m]
        out.append(Claim(f"C2 diameter gap |path-complete|/complete m={m}", gap, "<=", 0.05,
                         f"path {path[m]:.1f}, complete {comp[m]:.1f}"))  # fmt: skip
    out += [
        Claim("C3 no_comm(8) / se(1)", nocomm / path[1], "in", [1.0, 1.3], f"no_comm {nocomm:.1f}; card 1.09"),
        Claim("C3 no_comm(8) / Coop-SE path(8)", nocomm / path[8], ">=", 5.0, "card 6.7"),
    ]
    for m in (4, 8, 16):
        label = f"path m={m}"
        out.append(Claim(f"C4 max-agent / mean-agent regret, path m={m}", max_agent(label) / mean(label), "<=", 1.1,
                         "card <= 1.056"))  # fmt: skip
    # C5, log-size messages: measured on the coop_se_logsize run (m = 8, path)
    ls, flood = results["logsize m=8"]["metrics"], results["path m=8"]["metrics"]
    log_mat = math.log2(8 * A * T)
    field = math.ceil(math.log2(8 * T + 1))  # sim.logsize_message_bits' count field
    out += [
        Claim(
            "C5 logsize bits per edge per round / log2(mAT)",
            ls["bits_per_edge_round_max"] / log_mat,
            "<=",
            BITS_C,
            f"{ls['bits_per_edge_round_max']:.0f} bits on the busiest directed edge in its busiest round "
            f"({ls['msgs_per_edge_round_max']:.0f} message(s) of {ls['bits_per_message_max']:.0f} bits), "
            f"log2(mAT) = {log_mat:.2f}; Coop-SE flooding: {flood['bits_per_edge_round_max']:.0f} "
            f"({flood['msgs_per_edge_round_max']:.0f} one-sample messages)",
        ),
        Claim(
            "C5 logsize largest count sent / its field's capacity",
            max(ls["value_max_count"], ls["value_max_sum"]) / (2**field - 1),
            "<=",
            1.0,
            f"largest count {ls['value_max_count']:.0f}, sum {ls['value_max_sum']:.0f} in a "
            f"{field}-bit field (⌈log2(mT+1)⌉)",
        ),
        Claim(
            "C5 logsize / Coop-SE mean individual regret, path m=8",
            mean("logsize m=8") / path[8],
            "<=",
            LOGSIZE_RATIO,
            f"logsize {mean('logsize m=8'):.1f}, Coop-SE {path[8]:.1f}",
        ),
        Claim(
            "C5 logsize / Coop-SE max-agent regret, path m=8",
            max_agent("logsize m=8") / max_agent("path m=8"),
            "<=",
            LOGSIZE_RATIO,
            f"logsize {max_agent('logsize m=8'):.1f}, Coop-SE {max_agent('path m=8'):.1f}",
        ),
    ]
    # C5, log rounds: the rounds in which some message moved, counted during play
    lr = results["logrounds m=8"]
    rounds, phases, diam = lr["metrics"]["comm_rounds"], lr["metrics"]["comm_phases"], lr["diameter"]
    k = math.floor(math.log2(T)) + 1
    out += [
        Claim(
            "C5 logrounds rounds with a message / (diameter·(⌊log2 T⌋+1))",
            rounds / (diam * k),
            "<=",
            1.0,
            f"{rounds:.0f} rounds in which a message moved ({phases:.0f} snapshots, each flooding for up to "
            f"diameter {diam} rounds); bound {diam}·{k} = {diam * k}",
        ),
        Claim(
            "info: logrounds rounds with a message vs ⌊log2 T⌋+1",
            rounds,
            "<=",
            float(k),
            "the literal count: a snapshot needs diameter hops, so it is not met with hop-by-hop relay "
            "(snapshot_delay: zero, one round per snapshot, gives it)",
            asserted=False,
        ),
        Claim("C5 logrounds regret above Coop-SE path(8)", logr, ">", path[8], f"Coop-SE {path[8]:.1f}"),
        Claim("C5 logrounds regret below no_comm(8)", logr, "<", nocomm, f"no_comm {nocomm:.1f}"),
        Claim(
            "info: coop_se bits per one-sample message - (⌈log2 m⌉+⌈log2 T⌉+⌈log2 A⌉+1)",
            max(
                results[f"{g} m={m}"]["metrics"]["bits_per_message_max"] - _bound(m, T, A)
                for g, mm in (("path", PATH_M), ("complete", COMPLETE_M))
                for m in mm
            ),  # fmt: skip
            "<=",
            0.0,
            "holds by construction (the fields are sized to these bounds); flooding's per-edge load grows with m",
            asserted=False,
        ),
        Claim(
            "safety: best-arm eliminations over all runs",
            float(sum(r["metrics"]["best_arm_eliminations"] for r in results.values())),
            "<=",
            0.0,
            "expected 0",
        ),
    ]
    if "congest m=8 (bandwidth 1)" in results:
        cg = results["congest m=8 (bandwidth 1)"]
        out.append(Claim("info: congest max messages per edge per round", float(cg["edge_peak"]), "<=", 1.0,
                         f"regret {mean(cg['label']):.1f} (reported, not gated)", asserted=False))  # fmt: skip
    return out


def _bound(m: int, T: int, A: int) -> float:
    """The card's C5 bound ⌈log₂m⌉+⌈log₂T⌉+⌈log₂A⌉+1 on a Bernoulli sample message (0 for m = 1: nothing is sent)."""
    from zoo.coop_se.sim import message_bits

    return 0.0 if m == 1 else float(message_bits(m, T, A, gaussian=False))


def _plots(results: dict[str, Any], path: dict[int, float], comp: dict[int, float], out: Path, T: int) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    instance = f"Bernoulli μ = 0.9…0.5, T = {T}, mean over agents and {len(results['path m=1']['regret'])} seeds"
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ms = sorted(path)
    path_style, comp_style = curve_styles(2, points=len(ms))
    ax.loglog(ms, [path[m] for m in ms], label="Coop-SE, path", **path_style)
    ax.loglog(sorted(comp), [comp[m] for m in sorted(comp)], label="Coop-SE, complete", **comp_style)
    ax.loglog(ms, [path[1] / m for m in ms], ":", color="gray", label="Reg(1)/m (linear speed-up)")
    ax.axhline(float(np.mean(results["no_comm m=8"]["regret"])), color="red", lw=0.8, label="no_comm m=8")
    ax.set_xlabel("agents m (log scale)")
    ax.set_ylabel("mean individual regret at T (reward)")
    ax.set_title(f"coop_se: regret vs number of agents (lower is better)\n{instance}", fontsize=9)
    ax.legend(fontsize=8)
    first = save_figure(fig, out, "coop_se_regret_vs_m.png")
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    shown = [(label, r) for label, r in results.items() if "m=8" in label or label == "path m=1"]
    for (label, r), style in zip(shown, curve_styles(len(shown)), strict=True):
        ax.loglog(r["curve_t"], np.maximum(r["curve"], 1e-1), label=label, **style)
    ax.set_xlabel("round t (log scale)")
    ax.set_ylabel("mean individual regret (reward; floor 0.1)")
    ax.set_title(f"coop_se: regret over rounds, path graph unless named (lower is better)\n{instance}", fontsize=9)
    legend_outside(ax)
    return [first, save_figure(fig, out, "coop_se_regret_curves.png")]
