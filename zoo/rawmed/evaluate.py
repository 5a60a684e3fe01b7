"""The RawMed evaluator command: read a real and a synthetic event-table folder, print and save every metric.

``main(["--real-test", DIR, "--synthetic", DIR, ...])`` reads the folders with ``datamodules.ehr.folder.read_folder``,
runs :func:`zoo.rawmed.metrics.evaluate`, prints the metrics table and writes ``metrics.json``, ``report.md`` and the
plots (:func:`write_report`) into ``--out``. A bad folder or option stops with one line ``zoo evaluate: error: ...``
and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zoo.rawmed.metrics import (
    PARTS,
    TABLE_SPECS,
    TABLES,
    Folder,
    association_matrix,
    event_counts,
    format_table,
    time_gaps,
)

#: The items whose value histograms :func:`write_report` draws (the most frequent real items with values).
TOP_ITEMS = 4
#: The numeric column drawn per table in the marginal plots [ours].
VALUE_COLUMN = {"labevents": "valuenum", "prescriptions": "dose_val_rx", "inputevents": "amount"}


def _marginals(real: Folder, synthetic: Folder, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.core.reproduce import curve_styles, save_figure

    rows = []  # (table, item, real values, synthetic values) of the most frequent real items with values
    for table in TABLES:
        spec, col = TABLE_SPECS[table], VALUE_COLUMN[table]
        r = real[1][table]
        counts = r.loc[r[col].notna(), spec.item].value_counts()
        rows += [(table, item, n) for item, n in counts.items()]
    rows = sorted(rows, key=lambda x: -x[2])[:TOP_ITEMS]
    fig, axes = plt.subplots(1, max(len(rows), 1), figsize=(3.6 * max(len(rows), 1), 3.0), squeeze=False)
    styles = curve_styles(2, points=20)
    for ax, (table, item, _) in zip(axes[0], rows, strict=False):
        spec, col = TABLE_SPECS[table], VALUE_COLUMN[table]
        frames = [f[1][table] for f in (real, synthetic)]
        values = [f.loc[f[spec.item] == item, col].dropna().to_numpy(float) for f in frames]
        pooled = np.concatenate(values)
        edges = np.histogram_bin_edges(pooled, bins=20) if pooled.size else np.linspace(0, 1, 21)
        centres = (edges[:-1] + edges[1:]) / 2
        for vals, name, style in zip(values, ("real", "synthetic"), styles, strict=True):
            density = np.histogram(vals, bins=edges)[0] / max(vals.size, 1)
            ax.step(centres, density, where="mid", label=name, **style)
        ax.set_title(f"{item} ({table})", fontsize=8)
        ax.set_xlabel(col)
        ax.set_ylabel("fraction of rows")
        ax.legend(fontsize=7)
    if not rows:
        axes[0][0].set_title("no item with values in the real data")
    fig.suptitle("Marginals: value histograms of the most frequent items, real vs synthetic")
    return save_figure(fig, out, "marginals.png")


def _correlations(real: Folder, synthetic: Folder, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.core.reproduce import save_figure

    fig, axes = plt.subplots(
        len(TABLES), 3, figsize=(10.5, 4.4 * len(TABLES)), squeeze=False, gridspec_kw={"width_ratios": [1, 1, 0.05]}
    )
    image = None
    for row, table in enumerate(TABLES):
        spec = TABLE_SPECS[table]
        cats = [c for c in spec.columns if c not in spec.numeric]
        for col, (name, folder) in enumerate((("real", real), ("synthetic", synthetic))):
            mat = association_matrix(folder[1][table], spec.numeric, cats)
            ax = axes[row][col]
            image = ax.imshow(mat.to_numpy(), vmin=-1, vmax=1, cmap="coolwarm")
            ax.set_xticks(range(len(mat)), mat.columns, rotation=90, fontsize=6)
            ax.set_yticks(range(len(mat)), mat.index, fontsize=6)
            ax.set_title(f"{table}: {name}", fontsize=9)
            ax.set_xlabel("given column y")
            ax.set_ylabel("column x (C[x, y])")
        axes[row][2].set_visible(row == 0)
    bar = fig.colorbar(image, cax=axes[0][2], label="association C[x, y]")
    bar.ax.set_xlabel("C", fontsize=7)
    fig.suptitle("Association matrices (Pearson, correlation ratio, Theil's U), real vs synthetic")
    return save_figure(fig, out, "correlations.png")


def _temporal(real: Folder, synthetic: Folder, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.core.reproduce import curve_styles, save_figure

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    styles = curve_styles(2)
    panels = (
        (axes[0], [time_gaps(f[1]) for f in (real, synthetic)], "gap between consecutive events (minutes)"),
        (axes[1], [event_counts(f) for f in (real, synthetic)], "events per stay"),
    )
    for ax, samples, label in panels:
        for values, name, style in zip(samples, ("real", "synthetic"), styles, strict=True):
            xs = np.sort(values)
            ax.plot(xs, np.arange(1, xs.size + 1) / max(xs.size, 1), label=name, drawstyle="steps-post", **style)
        ax.set_xlabel(label)
        ax.set_ylabel("empirical CDF")
        ax.legend(fontsize=7)
    axes[0].set_title("Time gaps (all tables pooled)", fontsize=9)
    axes[1].set_title("Event counts per stay", fontsize=9)
    fig.suptitle("Temporal distributions, real vs synthetic")
    return save_figure(fig, out, "temporal.png")


def write_report(metrics: dict[str, Any], real_test: Folder, synthetic: Folder, out_dir: str | Path) -> list[str]:
    """Write ``report.md`` and the plots (marginals, association matrices, time gaps and event counts) to ``out_dir``.

    Args:
        metrics: what :func:`zoo.rawmed.metrics.evaluate` returned.
        real_test: the real test folder.
        synthetic: the synthetic folder.
        out_dir: the output folder (created).

    Returns:
        The paths written, ``report.md`` first.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = [_marginals(real_test, synthetic, out), _correlations(real_test, synthetic, out)]
    plots.append(_temporal(real_test, synthetic, out))
    lines = [
        "# RawMed evaluation",
        "",
        f"Real test: {len(real_test[0])} stays; synthetic: {len(synthetic[0])} stays. Lower is better for CDE, I-CDE,"
        " PCC, KS, ER and SMAPE; higher for CorAcc, F1 and AUROC; MIA accuracy is ideal at 0.5.",
        "",
        format_table(metrics),
        "",
        *(f"![{Path(p).stem}]({Path(p).name})" for p in plots),
        "",
    ]
    report = out / "report.md"
    report.write_text("\n".join(lines), encoding="utf-8")
    return [str(report), *plots]


def _json_safe(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}


def parser() -> argparse.ArgumentParser:
    """The evaluator's command line."""
    p = argparse.ArgumentParser(prog="zoo evaluate rawmed", description="Evaluate a synthetic EHR folder (RawMed).")
    p.add_argument("--real-test", required=True, metavar="DIR", help="real test split (event-table folder)")
    p.add_argument("--synthetic", required=True, metavar="DIR", help="synthetic folder (event-table folder)")
    p.add_argument("--real-train", metavar="DIR", help="real train split (TRTR arms, de-duplication, MIA members)")
    p.add_argument("--holdout", metavar="DIR", help="real holdout split (MIA non-members, KCl on test+holdout)")
    p.add_argument("--obs-hours", type=int, default=12, help="observation window in hours (default 12)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="metric parts to run (default all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the GBMs, the LSTM and the MIA draw (default 0)")
    p.add_argument("--out", default="rawmed_eval", metavar="DIR", help="output folder (default rawmed_eval)")
    return p


def main(argv: Sequence[str], reader: Callable[[str], Folder] | None = None) -> int:
    """Run the evaluator; returns the exit code (0, or 2 after one ``zoo evaluate: error: ...`` line).

    Args:
        argv: the command line after ``zoo evaluate rawmed``.
        reader: reads a folder (default ``datamodules.ehr.folder.read_folder``).
    """
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as exc:
        return 2 if exc.code else 0
    if args.obs_hours < 1:
        print(f"zoo evaluate: error: --obs-hours={args.obs_hours}: expected an integer >= 1", file=sys.stderr)
        return 2
    if reader is None:
        from datamodules.ehr.folder import read_folder as reader
    from zoo.rawmed.metrics import evaluate

    try:
        folders = {
            name: None if path is None else reader(path)
            for name, path in (
                ("real_test", args.real_test), ("synthetic", args.synthetic), ("real_train", args.real_train),
                ("holdout", args.holdout),
            )
        }  # fmt: skip
        metrics = evaluate(**folders, obs_hours=args.obs_hours, parts=tuple(args.parts), seed=args.seed)
    except (ValueError, FileNotFoundError) as exc:
        print(f"zoo evaluate: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    print(format_table(metrics))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(_json_safe(metrics), indent=1), encoding="utf-8")
    written = write_report(metrics, folders["real_test"], folders["synthetic"], out)
    print(f"wrote {out / 'metrics.json'} and {', '.join(written)}")
    return 0


__all__ = ["main", "parser", "write_report"]
