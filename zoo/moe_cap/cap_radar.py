"""The CAP radar (card ``moe_cap``, "CAP radar"): Cost, Accuracy and Performance scores and their polar plot.

Scores (base ``b = 20``, over the systems drawn together): Performance from TPOT (lower is better)
``b + (max − v)/(max − min)·(100 − b)``; Cost ``b + (T − min(v, T))/T·(100 − b)`` with ``T = cost_cap`` (default: the
largest cost drawn); Accuracy from EM ``b + (v − min)/(1 − min)·(100 − b)``. A degenerate axis (max = min, min EM = 1,
or T = 0) scores 100 for every system. The public code draws with plotly; here matplotlib's Agg canvas writes a PNG
without touching pyplot or the global backend.

This module is ``zoo.moe_cap.cap_radar`` (not ``radar``) so that the package attribute ``zoo.moe_cap.radar`` is
always the :func:`radar` function: a submodule named ``radar`` would replace it once imported.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from zoo.core.reproduce import curve_styles

#: The paper's system classes: which two of Cost, Accuracy, Performance a system favours.
CAP_CLASSES = {
    "PA": "performance + accuracy (SGLang, vLLM)",
    "PC": "performance + cost (K-Transformers, quantised)",
    "CA": "cost + accuracy (MoE-Infinity, offloading)",
}
#: The radar's axes, in drawing order (counter-clockwise from the top).
AXES = ("cost", "accuracy", "performance")
_KEYS = ("tpot_s", "cost_usd", "em")


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
    """Draw the CAP radar of ``systems`` to a PNG.

    One closed polygon per system on polar axes Cost / Accuracy / Performance (radius 0–100, scores from
    :func:`radar_scores`), labelled by ``system_name`` and its three scores (systems that tie share a polygon), in the
    zoo's style cycle (``zoo.core.reproduce.curve_styles``). An optional ``cap_class`` joins the legend label: ``PA`` =
    performance + accuracy (SGLang, vLLM), ``PC`` = performance + cost (K-Transformers, quantised), ``CA`` = cost +
    accuracy (MoE-Infinity, offloading).

    Args:
        systems: Dicts with ``tpot_s``, ``cost_usd``, ``em`` and optionally ``system_name``, ``cap_class``.
        path: The PNG to write (parent folders are created).
        cost_cap: See :func:`radar_scores`.
        title: Figure title (default ``"CAP radar (scores 20–100, farther out is better)"``).

    Returns:
        ``path`` as a ``Path``.

    Raises:
        ValueError: Invalid values, or a ``cap_class`` outside ``PA|PC|CA``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    scores = radar_scores(systems, cost_cap=cost_cap)
    for i, system in enumerate(systems):
        if system.get("cap_class") is not None and system["cap_class"] not in CAP_CLASSES:
            raise ValueError(f"radar: system {_label(system, i)!r}: cap_class={system['cap_class']!r}; expected one "
                             f"of {'|'.join(CAP_CLASSES)} or None")  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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
    fig.suptitle(title or "CAP radar (scores 20–100, farther out is better)", fontsize=10)
    if systems:
        ax.legend(loc="upper left", bbox_to_anchor=(1.12, 1.1), fontsize="small")
    fig.subplots_adjust(left=0.06, right=0.5, top=0.8, bottom=0.06)  # room for the legend, one render pass
    fig.savefig(path, dpi=100)
    return path


def _load_records(file: Path) -> list[dict[str, Any]]:
    """The radar systems of one saved record file (a record dict or a list of them)."""
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from err
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


def radar(
    systems_json: str | Path | list[str | Path], out: str | Path | None = None, cost_cap: float | None = None
) -> Path:
    """Redraw the CAP radar from saved records (``moecap_{stage}.json`` files of several runs).

    Args:
        systems_json: One file or a list of files; each holds one record dict or a list of them, with
            ``system_name`` and ``means`` (``tpot_s``, ``cost_usd``, ``em`` among others; optional ``cap_class``).
        out: The PNG (default ``cap_radar.png`` next to the first file).
        cost_cap: See :func:`radar_scores`.

    Returns:
        The PNG's path.

    Raises:
        ValueError: No files, invalid JSON, or a missing key (the message names the file and the key).
    """
    files = [Path(systems_json)] if isinstance(systems_json, str | Path) else [Path(f) for f in systems_json]
    if not files:
        raise ValueError("radar: systems_json: expected at least one record file, got an empty list")
    systems = [system for file in files for system in _load_records(file)]
    return draw_radar(systems, Path(out) if out is not None else files[0].parent / "cap_radar.png", cost_cap=cost_cap)
