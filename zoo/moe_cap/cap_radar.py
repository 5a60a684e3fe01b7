"""The CAP radar (card ``moe_cap``, "CAP radar"): Cost, Accuracy and Performance scores and their polar plot.

Scores (base ``b = 20``, over the systems drawn together): Performance from TPOT (lower is better)
``b + (max − v)/(max − min)·(100 − b)``; Cost ``b + (T − min(v, T))/T·(100 − b)`` with ``T = cost_cap`` (default: the
largest cost drawn); Accuracy from EM ``b + (v − min)/(1 − min)·(100 − b)``. A degenerate axis (max = min, min EM = 1,
or T = 0) scores 100 for every system. Every axis is normalised across the systems drawn, so a radar compares: one
system alone would score 100 / 20 / 20 whatever it measured, and :func:`draw_radar` refuses it.

Any set of runs goes on one radar from the shell (the callback's ``moecap_{stage}.json`` records, run folders holding
them, or a ``zoo reproduce moe_cap`` report ``moe_cap.json``)::

    python -m zoo.moe_cap.cap_radar runs/moe_cap/A/moecap_validate.json runs/moe_cap/B --out cap_radar.png

The public code draws with plotly; here matplotlib draws, saved through ``zoo.core.reproduce.save_figure``.

This module is ``zoo.moe_cap.cap_radar`` (not ``radar``) so that the package attribute ``zoo.moe_cap.radar`` is
always the :func:`radar` function: a submodule named ``radar`` would replace it once imported.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.core.reproduce import curve_styles, legend_outside, save_figure

#: The paper's system classes: which two of Cost, Accuracy, Performance a system favours.
CAP_CLASSES = {
    "PA": "performance + accuracy (SGLang, vLLM)",
    "PC": "performance + cost (K-Transformers, quantised)",
    "CA": "cost + accuracy (MoE-Infinity, offloading)",
}
#: The radar's axes, in drawing order (counter-clockwise from the top).
AXES = ("cost", "accuracy", "performance")
_KEYS = ("tpot_s", "cost_usd", "em")
#: The batch size of a reproduction report's systems that :func:`radar` draws by default.
REPRODUCE_BATCH = 8


def _label(system: dict[str, Any], i: int) -> str:
    return str(system.get("system_name", f"system {i}"))


def _values(systems: list[dict[str, Any]], key: str) -> list[float]:
    """``system[key]`` of every system as finite floats; a ``ValueError`` names the system and the key."""
    out = []
    for i, system in enumerate(systems):
        if key not in system:
            raise ValueError(f"radar: system {_label(system, i)!r} (index {i}) has no {key!r}; expected keys "
                             f"{list(_KEYS)}, found {sorted(system)}")  # fmt: skip
        v = system[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ValueError(f"radar: system {_label(system, i)!r}: {key}: expected a finite number >= 0, got {v!r}")
        if key == "em" and v > 1:
            raise ValueError(f"radar: system {_label(system, i)!r}: em: expected a fraction in [0, 1], got {v!r}")
        out.append(float(v))
    return out


def radar_scores(
    systems: list[dict[str, Any]], *, base: float = 20.0, cost_cap: float | None = None
) -> list[dict[str, float]]:
    """Radar scores in ``[base, 100]`` of each system.

    Args:
        systems: Dicts with ``tpot_s`` (seconds), ``cost_usd`` and ``em`` (a fraction in [0, 1]).
        base: The score of the worst system on an axis.
        cost_cap: The cost ``T`` that scores ``base``; costs at or above it score ``base`` (None: the largest cost).

    Returns:
        Per system ``{"performance", "cost", "accuracy"}``, in input order.

    Raises:
        ValueError: A missing or invalid value, or ``cost_cap <= 0``.
    """
    if cost_cap is not None and (isinstance(cost_cap, bool) or not math.isfinite(cost_cap) or cost_cap <= 0):
        raise ValueError(f"radar: cost_cap: expected None or a finite number > 0, got {cost_cap!r}")
    if not systems:
        return []
    tpot, cost, em = (_values(systems, key) for key in _KEYS)
    span = 100.0 - base
    hi, lo = max(tpot), min(tpot)
    perf = [100.0 if hi == lo else base + (hi - v) / (hi - lo) * span for v in tpot]
    cap = float(cost_cap) if cost_cap is not None else max(cost)
    cost_scores = [100.0 if cap == 0 else base + (cap - min(v, cap)) / cap * span for v in cost]
    em_lo = min(em)
    acc = [100.0 if em_lo == 1 else base + (v - em_lo) / (1 - em_lo) * span for v in em]
    return [{"performance": p, "cost": c, "accuracy": a} for p, c, a in zip(perf, cost_scores, acc, strict=True)]


def draw_radar(
    systems: list[dict[str, Any]], path: str | Path, *, cost_cap: float | None = None, title: str | None = None
) -> Path:
    """Draw the CAP radar of ``systems`` (two or more) to a PNG.

    One closed polygon per system on polar axes Cost / Accuracy / Performance (radius 0–100, scores from
    :func:`radar_scores`, normalised across the systems), labelled by ``system_name`` and its three scores (systems
    that tie share a polygon), in the zoo's style cycle (``zoo.core.reproduce.curve_styles``). An optional
    ``cap_class`` joins the legend label: ``PA`` = performance + accuracy (SGLang, vLLM), ``PC`` = performance + cost
    (K-Transformers, quantised), ``CA`` = cost + accuracy (MoE-Infinity, offloading).

    Args:
        systems: Dicts with ``tpot_s``, ``cost_usd``, ``em`` and optionally ``system_name``, ``cap_class``.
        path: The PNG to write (parent folders are created).
        cost_cap: See :func:`radar_scores`.
        title: Figure title (default ``"CAP radar of N systems (scores 20–100, farther out is better)"``).

    Returns:
        ``path`` as a ``Path``.

    Raises:
        ValueError: Fewer than two systems (one system's axes are degenerate), invalid values, or a ``cap_class``
            outside ``PA|PC|CA``.
    """
    if len(systems) < 2:
        raise ValueError(
            f"radar: a CAP radar compares systems: got {len(systems)}, need at least 2 (alone, a system scores "
            f"100 / 20 / 20 on performance / cost / accuracy whatever it measured); draw several runs: "
            f"python -m zoo.moe_cap.cap_radar RUN.json RUN.json ... --out cap_radar.png"
        )
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    scores = radar_scores(systems, cost_cap=cost_cap)
    for i, system in enumerate(systems):
        if system.get("cap_class") is not None and system["cap_class"] not in CAP_CLASSES:
            raise ValueError(f"radar: system {_label(system, i)!r}: cap_class={system['cap_class']!r}; expected one "
                             f"of {'|'.join(CAP_CLASSES)} or None")  # fmt: skip
    path = Path(path)
    fig = Figure(figsize=(9.0, 5.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(projection="polar")
    angles = [2 * math.pi * j / len(AXES) for j in range(len(AXES))]
    ax.set_theta_offset(math.pi / 2)
    ax.set_xticks(angles)
    ax.set_xticklabels(["Cost", "Accuracy", "Performance"])
    ax.set_ylim(0, 100)
    ax.set_yticks([20, 40, 60, 80, 100])
    ax.set_rlabel_position(60)  # radius labels between Cost and Accuracy, off the spokes
    styles = curve_styles(len(systems), points=len(AXES) + 1)  # no system's polygon hides another's
    for i, (system, score, style) in enumerate(zip(systems, scores, styles, strict=True)):
        radii = [score[axis] for axis in AXES]
        label = _label(system, i)
        if system.get("cap_class") is not None:
            label += f" ({system['cap_class']})"
        # the scores in the label: systems that tie share one polygon but still read apart
        label += ": " + ", ".join(f"{axis[0].upper()} {score[axis]:.0f}" for axis in AXES)
        (line,) = ax.plot([*angles, angles[0]], [*radii, radii[0]], label=label, **style)
        ax.fill([*angles, angles[0]], [*radii, radii[0]], color=line.get_color(), alpha=0.08)
    default = f"CAP radar of {len(systems)} systems (scores 20–100, farther out is better)"
    fig.suptitle(title or default, fontsize=10)
    legend_outside(ax, bbox_to_anchor=(1.12, 1.1), fontsize="small")
    return Path(save_figure(fig, path.parent, path.name))


def reproduction_systems(runs: list[dict[str, Any]], batch: int = REPRODUCE_BATCH) -> list[dict[str, Any]]:
    """Radar systems of a reproduction: one per family that ran at ``batch``, medians over its seeds.

    Args:
        runs: ``zoo reproduce moe_cap`` runs (``family``, ``batch``, ``means`` with ``tpot_s``, ``cost_usd``, ``em``).
        batch: The batch size whose runs are drawn.

    Returns:
        ``{"system_name": "hf-eager <family> b=<batch>", "tpot_s", "cost_usd", "em"}`` per family, in run order.
    """
    families = list(dict.fromkeys(r["family"] for r in runs if r["batch"] == batch))
    systems = []
    for family in families:
        means = [r["means"] for r in runs if r["family"] == family and r["batch"] == batch]
        system: dict[str, Any] = {"system_name": f"hf-eager {family} b={batch}"}
        for key in _KEYS:
            values = [m.get(key, 0.0 if key == "em" else None) for m in means]  # no accuracy scored: EM 0
            if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
                raise ValueError(f"radar: reproduction run {family} b={batch}: {key} missing or NaN in its means")
            system[key] = statistics.median(values)
        systems.append(system)
    return systems


def _load_records(file: Path, batch: int = REPRODUCE_BATCH) -> list[dict[str, Any]]:
    """The radar systems of one saved file: a record dict, a list of them, or a reproduction report."""
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from err
    if isinstance(data, dict) and data.get("slug") == "moe_cap" and "metrics" in data:  # `zoo reproduce` report
        runs = data["metrics"].get("runs") if isinstance(data["metrics"], dict) else None
        if not isinstance(runs, list) or not runs:
            raise ValueError(f"{file}: a reproduction report without 'metrics.runs'")
        systems = reproduction_systems(runs, batch)
        if not systems:
            found = sorted({r.get("batch") for r in runs})
            raise ValueError(f"{file}: no reproduction run at batch {batch}; batches found {found} (pass --batch)")
        return systems
    records = data if isinstance(data, list) else [data]
    systems = []
    for j, record in enumerate(records):
        where = f"{file}" + (f" (record {j})" if isinstance(data, list) else "")
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a record dict, got {type(record).__name__}")
        if "system_name" not in record:
            raise ValueError(f"{where}: missing key 'system_name'; found {sorted(record)}")
        means = record.get("means")
        if not isinstance(means, dict):
            raise ValueError(f"{where}: missing key 'means' (a dict with {list(_KEYS)}); found {sorted(record)}")
        if missing := [k for k in _KEYS if k not in means]:
            raise ValueError(f"{where}: 'means' lacks key(s) {missing}; expected {list(_KEYS)}")
        system = {"system_name": record["system_name"], **{k: means[k] for k in _KEYS}}
        if record.get("cap_class") is not None:
            system["cap_class"] = record["cap_class"]
        systems.append(system)
    return systems


def _record_files(source: Path) -> list[Path]:
    """``source`` itself, or the ``moecap_*.json`` records in a run folder (its tree, sorted)."""
    if source.is_dir():
        files = sorted(source.rglob("moecap_*.json"))
        if not files:
            raise ValueError(f"{source}: a folder without moecap_*.json records (the callback writes one per stage)")
        return files
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such record file or run folder")
    return [source]


def load_systems(sources: Sequence[str | Path], batch: int = REPRODUCE_BATCH) -> list[dict[str, Any]]:
    """The radar systems of record files, run folders and reproduction reports, with distinct names.

    A name that several sources share gets its file's folder (or file name) appended, so every polygon keeps its own
    legend entry: two runs of one config are both ``hf-eager-mixtral`` in their records.
    """
    pairs = [(file, system) for source in sources for file in _record_files(Path(source))
             for system in _load_records(file, batch)]  # fmt: skip
    files: dict[str, set[Path]] = {}
    for file, system in pairs:
        files.setdefault(system["system_name"], set()).add(file)
    systems = []
    for file, system in pairs:
        if len(files[system["system_name"]]) > 1:  # the name of runs in several files: say which file
            tag = f"{file.parent.name}/{file.stem}" if file.parent.name else file.stem
            system = {**system, "system_name": f"{system['system_name']} [{tag}]"}
        systems.append(system)
    names = [s["system_name"] for s in systems]
    seen: dict[str, int] = {}
    for system, name in zip(systems, names, strict=True):  # still alike (one file's list): number them
        if names.count(name) > 1:
            seen[name] = seen.get(name, 0) + 1
            system["system_name"] = f"{name} #{seen[name]}"
    return systems


def radar(
    systems_json: str | Path | list[str | Path], out: str | Path | None = None, cost_cap: float | None = None,
    *, batch: int = REPRODUCE_BATCH, title: str | None = None,
) -> Path:  # fmt: skip
    """Draw one CAP radar from saved runs (``moecap_{stage}.json`` records of several runs, their run folders, or a
    ``zoo reproduce moe_cap`` report), every axis normalised across all of them.

    Args:
        systems_json: One source or a list of them: a record file (one record dict or a list of them, with
            ``system_name`` and ``means`` holding ``tpot_s``, ``cost_usd``, ``em``; optional ``cap_class``), a run
            folder (its ``moecap_*.json``), or a reproduction report ``moe_cap.json`` (one system per family at
            ``batch``, medians over seeds).
        out: The PNG (default ``cap_radar.png`` next to the first source).
        cost_cap: See :func:`radar_scores`.
        batch: The batch size drawn from a reproduction report.
        title: Figure title (default: the number of systems).

    Returns:
        The PNG's path.

    Raises:
        ValueError: No sources, fewer than two systems in all, invalid JSON, or a missing key (the message names the
            file and the key).
        FileNotFoundError: A source that does not exist.
    """  # noqa: D205
    sources = [systems_json] if isinstance(systems_json, str | Path) else list(systems_json)
    if not sources:
        raise ValueError("radar: systems_json: expected at least one record file, got an empty list")
    systems = load_systems(sources, batch)
    first = Path(sources[0])
    default = (first if first.is_dir() else first.parent) / "cap_radar.png"
    return draw_radar(systems, Path(out) if out is not None else default, cost_cap=cost_cap, title=title)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zoo.moe_cap.cap_radar SOURCE [SOURCE ...] [--out PNG] [--cost-cap USD] [--batch B]``.

    Returns:
        The exit code: 0 with the PNG written (its path printed), 2 on a bad source or value (one ``zoo: error:``
        line).
    """
    parser = argparse.ArgumentParser(
        prog="python -m zoo.moe_cap.cap_radar",
        description="Draw the CAP radar of several MoE-CAP runs on one plot (axes normalised across them).",
    )
    parser.add_argument("sources", nargs="+", metavar="SOURCE",
                        help="moecap_{stage}.json records, run folders holding them, or a `zoo reproduce moe_cap` "
                             "report moe_cap.json (one system per family)")  # fmt: skip
    parser.add_argument("--out", default=None, help="the PNG (default: cap_radar.png beside the first source)")
    parser.add_argument("--cost-cap", type=float, default=None,
                        help="the cost (USD) that scores the base 20 (default: the largest cost drawn)")  # fmt: skip
    parser.add_argument("--batch", type=int, default=REPRODUCE_BATCH,
                        help=f"batch size drawn from a reproduction report (default {REPRODUCE_BATCH})")  # fmt: skip
    parser.add_argument("--title", default=None, help="figure title")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        path = radar(args.sources, out=args.out, cost_cap=args.cost_cap, batch=args.batch, title=args.title)
    except (ValueError, FileNotFoundError) as err:
        print(f"zoo: error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
