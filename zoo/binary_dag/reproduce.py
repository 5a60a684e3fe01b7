"""``zoo reproduce binary_dag``: the card's claims C1-C5 (with its binding revision) on the Lightning path.

Every arm is a config under ``configs/binary_dag/`` run by ``zoo fit`` in-process (by hand: ``zoo fit -c
configs/binary_dag/<config>.yaml --seed_everything=<s> --data.init_args.seed=<s> [flags]``); the claims come from
the runs' numbers by :func:`check_claims` alone, so ``tests/binary_dag/test_reproduce.py`` feeds it perturbed numbers
and sees each asserted claim fail.

- **C1** (interaction5, n = 20k, seeds 0-4): the two-stage median CPDAG-SHD ≤ 1 and first-order logistic NOTEARS
  ≥ 2.
- **C2** (revision: n = 100k): the DP-BIC oracle has CPDAG-SHD 0 in ≥ 4/5 seeds.
- **C3** (revision: closed form, deterministic): on interaction5 (n = 20k, seed 0) the complete DAG in 3 random orders
  has the same saturated NLL (empirical conditional tables; relative spread ≤ 1e-6), while the first-order NLLs
  (fitted logistic regressions) differ. The card's "> 1e-4" does not hold on this fixture (measured 2e-6 to 2e-5):
  the zoo gates "> 1e-6", the equality tolerance, and prints the card's bound as info (method page).
- **C4** (full run; ER-1, d = 10, n = 10k, interaction conditionals): median CPDAG-SHD two-stage < first-order and
  two-stage ≤ HC-BIC + 2: **not reproduced** (method page), printed as info; gated instead is the diagnosis's
  correctness half, stage 2 on the true topological order recovering the CPDAG (median CPDAG-SHD ≤ 1), with the
  number of true edges each stage-1 order reverses beside it. PC, DAGMA-logistic and the joint saturated learner are
  reported.
- **C5** (full run; harness regression, seed 0, n = 1000, native states): HC-BIC CPDAG-SHD asia 1, child 4, sachs 2
  (± 2) and PC 8, 16, 14 are **reported only**: the card gates them only with pgmpy pinned to 1.1.2 (the extra pins
  ``>=1.0,<1.3``), and pgmpy 1.1.2 breaks score ties in the iteration order of a set of node-name pairs, which
  changes with the process's hash seed (asia 1 or 7, sachs 5 or 7, child 4 or 6 over ``PYTHONHASHSEED`` 0-7 with
  string names); the zoo hands pgmpy integer labels, which makes it deterministic (asia 7, child 6, sachs 5).

Reported without gates (card): the small-n results (n = 2k, 5k; full run) and the joint saturated variant
(``mvb_notears``; seed 0 in ``--quick``, every seed in the full run).
``--quick``: interaction5 only (C1-C3 and the joint row), ``QUICK_SEEDS = 5``.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

from zoo.core.reproduce import Claim, Report, config_path, curve_styles, fit, legend_outside, parallel_map, save_figure

QUICK_SEEDS = 5
FULL_SEEDS = 5
OPTIONS: dict[str, tuple[str, ...]] = {}

#: C1's sample size, C2's (the card's revision), and the small-n sweep (reported).
N_C1, N_C2, SMALL_N = 20_000, 100_000, (2_000, 5_000)
#: C4's synthetic benchmark (the flags on top of ``default.yaml``'s data; the ER data of each arm's config).
ER = ("--data.class_path=datamodules.binary.datamodule.BinaryMVBDataModule", "--data.init_args.graph=er",
      "--data.init_args.d=10", "--data.init_args.k=1", "--data.init_args.n=10000",
      "--data.init_args.conditional=interaction")  # fmt: skip
#: C5's recorded HC-BIC and PC CPDAG-SHDs (pgmpy 1.1.2, seed 0, n = 1000, native states; the card's revision), reported.
C5_HC = {"asia": 1, "child": 4, "sachs": 2}
C5_PC = {"asia": 8, "child": 16, "sachs": 14}
#: Arm name -> config.
ARMS = {"two-stage": "interaction5", "first-order": "first_order", "oracle": "oracle", "joint saturated": "mvb_notears",
        "HC-BIC": "hc_bic", "PC": "pc", "DAGMA-logistic": "dagma_logistic"}  # fmt: skip


def _n(n: int) -> str:
    return f"--data.init_args.n={n}"


def run_job(job: tuple[str, str, str, tuple[str, ...], int]) -> dict[str, Any]:
    """Fit one arm for one seed; return its metrics, estimate and seconds as primitives."""
    from zoo.core.reproduce import worker_setup

    worker_setup()
    setting, arm, config, overrides, seed = job
    with tempfile.TemporaryDirectory(prefix="binary_dag_") as root:
        result = fit(config_path("binary_dag", config), overrides, seed=seed, root=root)
    metrics = {k.split("/", 1)[1]: v for k, v in result.metrics.items() if k.startswith(("final/", "train/bic"))}
    estimate = result.model.estimate.numpy().astype(int).tolist()
    out = {"setting": setting, "arm": arm, "seed": seed, "metrics": metrics, "estimate": estimate,
           "seconds": round(result.seconds, 2)}  # fmt: skip
    truth = result.datamodule.truth
    if arm == "two-stage" and truth is not None:  # C4's diagnosis: stage 1's order, and stage 2 on the true order
        import numpy as np

        from zoo.binary_dag import graphs, score

        problem = result.datamodule.problem()
        order = result.model.order.tolist()
        pos = {v: i for i, v in enumerate(order)}
        out["order_violations"] = int(sum(pos[j] < pos[i] for i, j in zip(*np.nonzero(truth), strict=True)))
        out["true_edges"] = int(truth.sum())
        oracle_order = score.prune_to_order(problem["x"], graphs.topological_order(truth), problem["card"],
                                            max_parents=result.model.max_parents, pen=result.model.pen,
                                            lam0=result.model.lam0)  # fmt: skip
        out["true_order_shd"] = graphs.cpdag_shd(truth, oracle_order)
    return out


def jobs(seeds: list[int], quick: bool) -> list[tuple[str, str, str, tuple[str, ...], int]]:
    """Every (setting, arm, config, overrides, seed) the protocol runs."""
    out = []
    for s in seeds:
        out += [("interaction5 n=20k", "two-stage", "interaction5", (_n(N_C1),), s),
                ("interaction5 n=20k", "first-order", "first_order", (_n(N_C1),), s),
                ("interaction5 n=100k", "oracle", "oracle", (_n(N_C2),), s),
                ("interaction5 n=20k", "oracle", "oracle", (_n(N_C1),), s)]  # fmt: skip
        if s == seeds[0] or not quick:
            out.append(("interaction5 n=20k", "joint saturated", "mvb_notears", (_n(N_C1),), s))
        for n in () if quick else SMALL_N:
            for arm in ("two-stage", "first-order", "oracle"):
                out.append((f"interaction5 n={n // 1000}k", arm, ARMS[arm], (_n(n),), s))
    if not quick:
        for s in seeds:
            for arm in ("two-stage", "first-order", "HC-BIC", "PC", "DAGMA-logistic"):
                config = "default" if arm == "two-stage" else ARMS[arm]
                out.append(("ER-1 d=10 n=10k", arm, config, ER, s))
        out.append(("ER-1 d=10 n=10k", "joint saturated", "mvb_notears", (*ER, "--trainer.max_epochs=100"), 0))
        for name in C5_HC:
            data = ("--data.class_path=datamodules.binary.datamodule.PgmpyBIFDataModule",
                    f"--data.init_args.name={name}", "--data.init_args.n=1000",
                    "--data.init_args.binarize=null")  # fmt: skip
            for arm in ("HC-BIC", "PC"):
                out.append((f"{name} native n=1k", arm, ARMS[arm], data, 0))
    # the longest jobs first, so two workers finish together
    weight = {"joint saturated": 0, "DAGMA-logistic": 1, "PC": 2, "two-stage": 3, "first-order": 4}
    return sorted(out, key=lambda j: weight.get(j[1], 9))


def identity_check(seed: int = 0, n: int = N_C1, n_orders: int = 3) -> dict[str, Any]:
    """C3: the complete DAG in ``n_orders`` random orders, saturated NLL (closed form) and first-order NLL (fitted)."""
    import numpy as np
    import torch

    from datamodules.binary.synthetic import interaction5
    from zoo.binary_dag.model import complete_dag, dag_nll
    from zoo.binary_dag.score import saturated_nll

    x, _ = interaction5(n, seed)
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(5).tolist() for _ in range(n_orders)]
    sat, first = [], []
    for order in orders:
        adj = np.zeros((5, 5), dtype=bool)
        for i, j in enumerate(order):
            adj[order[:i], j] = True
        sat.append(saturated_nll(x, adj, (2,) * 5))
        first.append(dag_nll(torch.from_numpy(x.astype(np.float64)), complete_dag(order), max_order=1))
    spread = lambda v: (max(v) - min(v)) / abs(min(v))  # noqa: E731
    return {"orders": orders, "saturated_nll": sat, "first_order_nll": first, "saturated_spread": spread(sat),
            "first_order_spread": spread(first)}  # fmt: skip


def pgmpy_version() -> str:
    """The installed pgmpy version (written beside the C5 numbers)."""
    import pgmpy

    return str(pgmpy.__version__)


def shd(runs: list[dict[str, Any]], setting: str, arm: str) -> list[float]:
    """The CPDAG-SHDs of ``arm`` on ``setting`` over the seeds run."""
    return [r["metrics"]["cpdag_shd"] for r in runs if r["setting"] == setting and r["arm"] == arm]


def check_claims(runs: list[dict[str, Any]], identity: dict[str, Any], quick: bool, version: str) -> list[Claim]:
    """The claims from the runs' numbers alone (see the module docstring)."""
    i20, i100 = "interaction5 n=20k", "interaction5 n=100k"
    two, first, oracle = shd(runs, i20, "two-stage"), shd(runs, i20, "first-order"), shd(runs, i100, "oracle")
    joint = shd(runs, i20, "joint saturated")
    claims = [
        Claim("C1 two-stage median CPDAG-SHD, interaction5 n=20k", _median(two), "<=", 1,
              f"per seed {two}"),
        Claim("C1 first-order median CPDAG-SHD, interaction5 n=20k", _median(first), ">=", 2,
              f"per seed {first}"),
        Claim("C2 fraction of seeds with oracle CPDAG-SHD 0 (n=100k)", _fraction_zero(oracle), ">=", 0.8,
              f"per seed {oracle} (card: >= 4/5)"),
        Claim("C3 saturated complete-DAG NLL relative spread (x1e-6)", 1e6 * identity["saturated_spread"], "<=", 1.0,
              f"orders {identity['orders']}: {identity['saturated_nll']}"),
        Claim("C3 first-order complete-DAG NLL relative spread (x1e-6)", 1e6 * identity["first_order_spread"], ">",
              1.0, f"{identity['first_order_nll']} (the zoo's bound: the equality tolerance)"),
        Claim("C3 same, the card's bound 1e-4 (x1e-6; not met on interaction5)", 1e6 * identity["first_order_spread"],
              ">", 100.0, "card text; the identity holds, the fixture's first-order spread is smaller",
              asserted=False),
        Claim("joint saturated median CPDAG-SHD, interaction5 n=20k", _median(joint), "<=", 1,
              f"per seed {joint} (card: fragile, reported only)", asserted=False),
    ]  # fmt: skip
    for n in () if quick else SMALL_N:
        setting = f"interaction5 n={n // 1000}k"
        for arm in ("two-stage", "first-order", "oracle"):
            values = shd(runs, setting, arm)
            claims.append(Claim(f"small n: {arm} median CPDAG-SHD, {setting}", _median(values), "<=", 1,
                                f"per seed {values} (reported only)", asserted=False))  # fmt: skip
    if quick:
        return claims
    er = "ER-1 d=10 n=10k"
    er_two, er_first, er_hc = shd(runs, er, "two-stage"), shd(runs, er, "first-order"), shd(runs, er, "HC-BIC")
    two_runs = [r for r in runs if r["setting"] == er and r["arm"] == "two-stage"]
    violations = [r.get("order_violations", math.nan) for r in two_runs]
    claims += [
        # not reproduced (method page): reported, with the diagnosis below gated
        Claim("C4 (not reproduced) median CPDAG-SHD first-order − two-stage, ER-1 d=10",
              _median(er_first) - _median(er_two), ">", 0, f"two-stage {er_two}, first-order {er_first}",
              asserted=False),
        Claim("C4 (not reproduced) median CPDAG-SHD two-stage − HC-BIC, ER-1 d=10", _median(er_two) - _median(er_hc),
              "<=", 2, f"two-stage {er_two}, HC-BIC {er_hc}", asserted=False),
        # implementation correctness: stage 2 recovers the CPDAG from the true order, so stage 1's order is the gap
        Claim("C4 stage 2 on the true topological order: median CPDAG-SHD, ER-1 d=10",
              _median([r.get("true_order_shd", math.nan) for r in two_runs]), "<=", 1,
              f"per seed {[r.get('true_order_shd') for r in two_runs]}; stage 1's orders reverse {violations} of "
              f"{[r.get('true_edges') for r in two_runs]} true edges"),
    ]  # fmt: skip
    for arm in ("PC", "DAGMA-logistic", "joint saturated"):
        values = shd(runs, er, arm)
        claims.append(Claim(f"C4 {arm} median CPDAG-SHD (reported), ER-1 d=10", _median(values), ">=",
                            _median(er_two), f"per seed {values}; the card's expected ordering puts it at or above "
                            "the two-stage method (unverified)", asserted=False))  # fmt: skip
    for name, recorded in C5_HC.items():
        values = shd(runs, f"{name} native n=1k", "HC-BIC")
        claims.append(Claim(f"C5 HC-BIC CPDAG-SHD {name} (recorded {recorded} ± 2, reported)", _median(values), "in",
                            [recorded - 2, recorded + 2], f"pgmpy {version}; report-only (hash-seed ties)",
                            asserted=False))  # fmt: skip
        pc = shd(runs, f"{name} native n=1k", "PC")
        claims.append(Claim(f"C5 PC CPDAG-SHD {name} (recorded {C5_PC[name]} ± 2, reported)", _median(pc), "in",
                            [C5_PC[name] - 2, C5_PC[name] + 2], f"pgmpy {version}", asserted=False))  # fmt: skip
    return claims


def _median(values: list[float]) -> float:
    return float(median(values)) if values else math.nan


def _fraction_zero(values: list[float]) -> float:
    return sum(v == 0 for v in values) / len(values) if values else math.nan


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: per setting and arm, median [min, max] CPDAG-SHD, median DAG-SHD, skeleton F1, seconds, seeds."""
    lines = ["| setting | method | CPDAG-SHD median [min, max] | DAG-SHD | skeleton F1 | edges | s per fit | seeds |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    keys = list(dict.fromkeys((r["setting"], r["arm"]) for r in runs))
    order = {name: i for i, name in enumerate(ARMS)}
    keys.sort(key=lambda k: (_setting_rank(k[0]), order.get(k[1], 99)))
    for setting, arm in keys:
        rs = [r for r in runs if r["setting"] == setting and r["arm"] == arm]
        c = [r["metrics"]["cpdag_shd"] for r in rs]
        med = lambda key: _median([r["metrics"][key] for r in rs])  # noqa: E731
        lines.append(f"| {setting} | {arm} | {_median(c):g} [{min(c):g}, {max(c):g}] | {med('dag_shd'):g} | "
                     f"{med('skel_f1'):.2f} | {med('n_edges_est'):g} | {_median([r['seconds'] for r in rs]):.1f} | "
                     f"{len(rs)} |")  # fmt: skip
    return "\n".join(lines)


def _setting_rank(setting: str) -> tuple[int, float]:
    if setting.startswith("interaction5"):
        return (0, float(setting.split("n=")[1].rstrip("k")))
    return (1 if setting.startswith("ER") else 2, 0.0)


def plot_graphs(runs: list[dict[str, Any]], out: Path) -> str:
    """Estimated vs true CPDAGs on interaction5 n=20k, seed 0 (or the first seed run): one panel per learner."""
    import matplotlib.pyplot as plt
    import numpy as np

    from datamodules.binary.synthetic import INTERACTION5_EDGES
    from zoo.binary_dag.graphs import cpdag

    truth = np.zeros((5, 5), dtype=bool)
    for i, j in INTERACTION5_EDGES:
        truth[i, j] = True
    first_seed = min(r["seed"] for r in runs)
    panels = [("truth", truth, None)]
    for arm in ("two-stage", "first-order", "oracle", "joint saturated"):
        for r in runs:
            if r["setting"] == "interaction5 n=20k" and r["arm"] == arm and r["seed"] == first_seed:
                panels.append((arm, np.array(r["estimate"], dtype=bool), r["metrics"]["cpdag_shd"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.3), sharey=True)
    pos = {0: (0.0, 1.0), 1: (1.0, 1.0), 2: (0.5, 0.5), 3: (0.0, 0.0), 4: (1.0, 0.0)}
    true_cp = cpdag(truth)
    for ax, (name, adj, value) in zip(np.atleast_1d(axes), panels, strict=True):
        cp = cpdag(adj)
        for i in range(5):
            for j in range(5):
                if not cp[i, j] or (cp[j, i] and j < i):
                    continue
                undirected = bool(cp[j, i])
                right = (true_cp[i, j] == cp[i, j]) and (true_cp[j, i] == cp[j, i])
                colour = "black" if right else "tab:red"
                (x0, y0), (x1, y1) = pos[i], pos[j]
                ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops={
                    "arrowstyle": "-" if undirected else "-|>", "color": colour, "lw": 1.6,
                    "shrinkA": 11, "shrinkB": 11, "linestyle": "--" if undirected else "-"})  # fmt: skip
        for i in range(5):  # true adjacencies the estimate lacks: light grey, dotted
            for j in range(i + 1, 5):
                if (true_cp[i, j] or true_cp[j, i]) and not (cp[i, j] or cp[j, i]):
                    (x0, y0), (x1, y1) = pos[i], pos[j]
                    ax.plot([x0, x1], [y0, y1], color="0.7", linestyle=":", linewidth=1.4, zorder=1)
        for node, (px, py) in pos.items():
            ax.scatter([px], [py], s=380, color="white", edgecolors="black", zorder=3)
            ax.text(px, py, f"X{node}", ha="center", va="center", fontsize=8, zorder=4)
        ax.set_xlim(-0.3, 1.3)
        ax.set_ylim(-0.3, 1.3)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("CPDAG (dashed: undirected; grey dotted: missed)")
        ax.set_title(name if value is None else f"{name}: CPDAG-SHD {value:g}", fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("red: differs from the true CPDAG")
    fig.suptitle(f"interaction5, n = 20k, seed {first_seed}: estimated vs true CPDAG")
    return save_figure(fig, out, "binary_dag_graphs.png")


def plot_shd_by_n(runs: list[dict[str, Any]], out: Path) -> str:
    """Median CPDAG-SHD by n on interaction5 for the two-stage method, first-order NOTEARS and the oracle."""
    import matplotlib.pyplot as plt

    arms = ("two-stage", "first-order", "oracle")
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for arm, style in zip(arms, curve_styles(len(arms), points=4), strict=True):
        ns = sorted({_setting_rank(r["setting"])[1] for r in runs if r["arm"] == arm and
                     r["setting"].startswith("interaction5")})  # fmt: skip
        ys = [_median(shd(runs, f"interaction5 n={n:g}k", arm)) for n in ns]
        ax.plot([n * 1000 for n in ns], ys, label=arm, **style)
    ax.set_xscale("log")
    ax.set_xlabel("samples n")
    ax.set_ylabel("median CPDAG-SHD over seeds")
    ax.set_title("interaction5: CPDAG-SHD by sample size")
    legend_outside(ax)
    return save_figure(fig, out, "binary_dag_shd_by_n.png")


def run(seeds: list[int], quick: bool, out: Path, progress: Any, options: dict[str, str] | None = None) -> Report:
    """The protocol (see the module docstring)."""
    todo = jobs(seeds, quick)
    progress(f"{len(todo)} fits on 2 worker processes, then the C3 identity")
    runs = parallel_map(run_job, todo, workers=2)
    for r in runs:
        progress(f"{r['setting']} {r['arm']} seed {r['seed']}: CPDAG-SHD {r['metrics']['cpdag_shd']:g} "
                 f"({r['seconds']:.1f} s)")  # fmt: skip
    identity = identity_check()
    version = pgmpy_version()
    claims = check_claims(runs, identity, quick, version)
    plots = [plot_graphs(runs, out), plot_shd_by_n(runs, out)]
    metrics = {"runs": runs, "identity": identity, "pgmpy": version}
    return Report(claims=claims, metrics=metrics, table=table(runs), plots=plots)
