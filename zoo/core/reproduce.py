"""``zoo list`` and ``zoo reproduce``, the Claim and Report types, and the one harness every protocol runs on.

A protocol is a module with ``run(seeds, quick, out, progress, options=None) -> Report`` (:data:`Run`), optionally
``OPTIONS`` (``--set KEY=VALUE`` choices), ``QUICK_SEEDS`` and ``FULL_SEEDS`` (the seeds of ``--quick`` and of the
full run when ``--seeds`` is not given; 1 and 3 by default). Its arms are configs under ``configs/<slug>/``
(:func:`config_path`); a worker process calls :func:`worker_setup` once and :func:`fit` per arm and seed, which runs
``zoo fit -c CONFIG --seed_everything=SEED ...`` in-process, so every arm of a report can be re-run by hand with the
same flags; claims read :func:`median` / :func:`median_over_seeds`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import multiprocessing
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from zoo.core.registry import METHODS

Op = Literal[">=", "<=", ">", "<", "in"]


@dataclass
class Claim:
    """One checked claim: ``value op threshold`` (``in``: ``threshold = [low, high]``).

    Args:
        name: short id and description, e.g. ``"C1 unseen: CRAFT mrr_unseen"``.
        value: the measured value (a median over seeds where the protocol says so).
        op: comparison operator.
        threshold: the bound, or ``[low, high]`` for ``in``.
        detail: what was compared, in words and numbers.
        asserted: ``False`` for claims that are printed but do not decide the exit code.
    """

    name: str
    value: float
    op: Op
    threshold: float | list[float]
    detail: str = ""
    asserted: bool = True

    @property
    def holds(self) -> bool:
        """Whether the claim holds (NaN never holds)."""
        if isinstance(self.value, float) and math.isnan(self.value):
            return False
        match self.op:
            case ">=":
                return self.value >= self.threshold
            case "<=":
                return self.value <= self.threshold
            case ">":
                return self.value > self.threshold
            case "<":
                return self.value < self.threshold
            case "in":
                low, high = self.threshold
                return low <= self.value <= high
        raise ValueError(f"unknown op {self.op!r}")

    def __post_init__(self) -> None:
        if self.op not in get_args(Op):
            raise ValueError(f"Claim {self.name!r}: unknown op {self.op!r}; expected one of {list(get_args(Op))}")

    def as_dict(self) -> dict[str, Any]:
        """JSON form with ``holds``."""
        return {**asdict(self), "holds": self.holds}

    def line(self) -> str:
        """One table line: ``name  value  op  threshold  PASS|FAIL``."""
        verdict = ("PASS" if self.holds else "FAIL") if self.asserted else ("info" if self.holds else "info-FAIL")
        bound = f"[{self.threshold[0]:.4g}, {self.threshold[1]:.4g}]" if self.op == "in" else f"{self.threshold:.4g}"
        return f"{self.name:<58} {self.value:>9.4f} {self.op:>3} {bound:<16} {verdict}"


@dataclass
class Report:
    """What a method's ``reproduce.run`` returns.

    Args:
        claims: the checked claims.
        metrics: every measured number, nested dicts of floats (written to JSON).
        table: a markdown table of the results for the method page.
        plots: PNG files the protocol wrote into the output folder.
    """

    claims: list[Claim]
    metrics: dict[str, Any] = field(default_factory=dict)
    table: str = ""
    plots: list[str] = field(default_factory=list)


class Progress:
    """One line per event with the elapsed time, flushed (long runs show what runs)."""

    def __init__(self, slug: str) -> None:
        self.slug, self.start = slug, time.time()

    def __call__(self, message: str) -> None:
        """Print ``[slug +12.3s] message``."""
        print(f"[{self.slug} +{time.time() - self.start:7.1f}s] {message}", flush=True)


def parallel_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int = 2) -> list[Any]:
    """Map ``fn`` over ``items`` in ``workers`` spawned processes (one torch thread each), keeping order."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=context) as pool:
        return list(pool.map(fn, items))


# --- plots: one style cycle, one readability check, one way to save -------------------------------------------------

#: The fixed style cycle of curves that may overlap (:func:`curve_styles`): curve ``i`` gets ``MARKERS[i % 5]`` and
#: ``LINESTYLES[i % 4]``.
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v")
LINESTYLES: tuple[str, ...] = ("-", "--", "-.", ":")
#: Marker spacing along a dense curve as a fraction of the axes diagonal (matplotlib's float ``markevery``).
MARK_EVERY = 0.1
#: A curve of at most this many points gets a marker on every point.
MARK_ALL = 20


class PlotWarning(UserWarning):
    """A reproduction plot that :func:`figure_problems` finds hard to read (warned by :func:`save_figure`)."""


def curve_styles(n: int, points: int | None = None) -> list[dict[str, Any]]:
    """``ax.plot`` keyword arguments for ``n`` curves that may overlap, so that no curve hides another.

    Curve ``i`` gets marker ``MARKERS[i % 5]`` and line style ``LINESTYLES[i % 4]``; 5 and 4 being coprime, the
    first 20 curves get 20 distinct (marker, line style) pairs, and curves 20-39 repeat them with filled markers.
    Markers are hollow and alternate large and small, so one drawn on another leaves both visible. Colours stay the
    axes' colour cycle's.

    Args:
        n: the number of curves.
        points: the most points a curve has, where known. Up to :data:`MARK_ALL`, every point gets a marker; beyond
            (or ``None``), a marker sits every :data:`MARK_EVERY` of the axes diagonal from a start staggered over the
            ``n`` curves, so coinciding curves show their markers side by side and no curve is crowded with them.
    """
    dense = points is None or points > MARK_ALL
    return [
        {
            "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[i % len(LINESTYLES)],
            "fillstyle": "none" if (i // (len(MARKERS) * len(LINESTYLES))) % 2 == 0 else "full",
            "markersize": 6.5 if i % 2 == 0 else 4.5,  # a small marker on a point shows inside a large one
            "markevery": (MARK_EVERY * i / n, MARK_EVERY) if dense else None,
        }
        for i in range(n)
    ]


def legend_outside(ax: Any, **kwargs: Any) -> Any:
    """A legend to the right of ``ax``, so that it covers no curve or bar (:func:`save_figure` keeps it in the PNG)."""
    return ax.legend(**{"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 7, **kwargs})


def figure_problems(fig: Any) -> list[str]:
    """What makes ``fig`` hard to read, one line each (empty: none found).

    Checked: a title (the figure's or an axes'); on every axes that draws something, an x label and a y label (a
    polar axes names its spokes instead; a y label shared with a labelled neighbour counts); wherever two artists
    carry labels, a legend (of that axes, another or the figure) naming them; within one axes, legend lines with
    distinct (marker, line style, fill) and legend patches with distinct colours (a line differing only in colour
    can lie exactly under another).
    """
    problems = []
    axes = [ax for ax in fig.axes if ax.lines or ax.patches or ax.collections or ax.containers]
    titles = [fig.get_suptitle(), *(ax.get_title(loc) for ax in fig.axes for loc in ("left", "center", "right"))]
    if not any(t.strip() for t in titles):
        problems.append("no title (set one saying what is plotted)")
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    in_legends = {text.get_text() for legend in legends for text in legend.get_texts()}
    for i, ax in enumerate(axes):
        where = f"axes {i}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        if ax.name != "polar":
            if not ax.get_xlabel().strip():
                problems.append(f"{where}: no x label")
            if not any(a.get_ylabel().strip() for a in ax.get_shared_y_axes().get_siblings(ax)):
                problems.append(f"{where}: no y label")
        handles, labels = ax.get_legend_handles_labels()
        if len(labels) >= 2 and not set(labels) <= in_legends:
            problems.append(f"{where}: {len(labels)} labelled artists but no legend naming them all")
        seen: dict[tuple[Any, ...], str] = {}
        for handle, label in zip(handles, labels, strict=True):
            key = _legend_look(handle)
            if key is None:
                continue
            if key in seen:
                problems.append(f"{where}: legend entries {seen[key]!r} and {label!r} look alike (same style)")
            seen.setdefault(key, label)
    return problems


def _legend_look(handle: Any) -> tuple[Any, ...] | None:
    """What tells a legend entry apart: a line's (marker, line style, fill), a patch's or bar's (colour, hatch)."""
    import numpy as np

    if hasattr(handle, "get_marker"):  # Line2D
        none = ("", " ", "None", None)
        marker, style = handle.get_marker(), handle.get_linestyle()
        return ("line", None if marker in none else marker, None if style in none else style, handle.get_fillstyle())
    patch = handle.patches[0] if getattr(handle, "patches", None) else handle  # a bar container: its first bar
    if not hasattr(patch, "get_facecolor"):
        return None
    colour = tuple(float(c) for c in np.ravel(patch.get_facecolor())[:4])
    return ("patch", colour, getattr(patch, "get_hatch", lambda: None)())


def save_figure(fig: Any, out: Path, name: str) -> str:
    """Save a matplotlib figure as ``out/name`` (tight layout and bounding box, 110 dpi), close it, return the path.

    Each of :func:`figure_problems` is warned as a :class:`PlotWarning` naming the file (the PNG is written anyway).
    """
    import matplotlib.pyplot as plt

    for problem in figure_problems(fig):
        warnings.warn(f"plot {name}: {problem}", PlotWarning, stacklevel=2)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return str(path)


# --- the reproduction harness ---------------------------------------------------------------------------------------

#: The repository root (``configs/`` lives here).
ROOT = Path(__file__).resolve().parents[2]

#: The one list of flags that keep an in-process fit quiet and single-threaded on the CPU: no progress bar, model
#: summary or logger (nothing here changes a number: the workers run one torch thread on the CPU anyway).
QUIET: tuple[str, ...] = (
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
    "--threads=1",
)
#: What :func:`fit` passes the seed to besides ``--seed_everything`` (a protocol adds e.g. a model's init seed).
SEED_ARGS: tuple[str, ...] = ("data.init_args.seed",)
#: Loggers and warning sources whose notices a worker drops (Lightning's and its dependencies'). Warnings raised by the
#: zoo's own code (``zoo``, ``callbacks``, ``datamodules``: e.g. ``load_pretrained``'s "dropping ..." and "missing
#: keys") stay visible.
NOISY_LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning_utilities")
NOISY_MODULES = (
    r"(lightning|lightning_fabric|lightning_utilities|pytorch_lightning|torch|torchmetrics|jsonargparse|transformers"
    r"|huggingface_hub|sklearn|numpy|scipy|networkx|matplotlib)(\..*)?$"
)
ZOO_MODULES = r"(zoo|callbacks|datamodules|benchmarks)(\..*)?$"


class Run(Protocol):
    """The one signature of every protocol's ``run``: ``reproduce`` calls it with ``options`` always given."""

    def __call__(
        self,
        seeds: tuple[int, ...],
        quick: bool,
        out: Path,
        progress: Callable[[str], None],
        options: dict[str, str] | None = None,
    ) -> Report:
        """Run the protocol on ``seeds`` (``quick``: its reduced form), writing plots into ``out``."""
        ...


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Args:
        metrics: the trainer's scalar ``callback_metrics`` after the run, as floats (empty when not run).
        seconds: wall time of ``trainer.fit`` (0 when not run).
        cli: the instantiated CLI (``.model``, ``.trainer``, ``.datamodule``), for what a protocol reads beyond metrics.
    """

    metrics: dict[str, float]
    seconds: float
    cli: Any

    @property
    def model(self) -> Any:
        """The fitted LightningModule."""
        return self.cli.model

    @property
    def trainer(self) -> Any:
        """The Trainer."""
        return self.cli.trainer

    @property
    def datamodule(self) -> Any:
        """The datamodule."""
        return self.cli.datamodule

    def callback(self, kind: type) -> Any:
        """The trainer's first callback of class ``kind`` (``None`` if it has none)."""
        return next((c for c in self.cli.trainer.callbacks if isinstance(c, kind)), None)


def config_path(slug: str, name: str) -> Path:
    """``configs/<slug>/<name>`` from the repository root (``.yaml`` appended when ``name`` has no suffix).

    Raises:
        FileNotFoundError: naming the missing file and the configs that exist.
    """
    path = ROOT / "configs" / slug / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if not path.is_file():
        known = ", ".join(sorted(p.name for p in path.parent.glob("*.yaml"))) or "none"
        raise FileNotFoundError(f"zoo reproduce {slug}: no config {path}; configs/{slug}/ has {known}")
    return path


def load_config(slug: str, name: str) -> dict[str, Any]:
    """The parsed YAML of :func:`config_path` (for protocols that run a method's core without a Trainer)."""
    import yaml

    return yaml.safe_load(config_path(slug, name).read_text(encoding="utf-8"))


def fit_args(
    config: str | Path,
    overrides: Sequence[str] = (),
    seed: int | None = 0,
    seed_args: Sequence[str] = SEED_ARGS,
    root: str | Path | None = None,
    checkpoints: bool = False,
) -> list[str]:
    """The ``zoo fit`` arguments :func:`fit` runs: ``-c config``, :data:`QUIET`, the seed, root, then ``overrides``.

    Args:
        config: the arm's config file (:func:`config_path`).
        overrides: the protocol's flags for this run (last, so they win), e.g. ``("--data.init_args.m=4",)``.
        seed: passed as ``--seed_everything`` and to every ``seed_args`` key; ``None`` keeps the config's seeds.
        seed_args: dotted init-arg keys that also take the seed.
        root: ``--trainer.default_root_dir`` (``None``: not passed).
        checkpoints: keep the configs' checkpointing (``False`` adds ``--trainer.enable_checkpointing=false``).
    """
    args = ["-c", str(config), *QUIET]
    if not checkpoints:
        args.append("--trainer.enable_checkpointing=false")
    if root is not None:
        args.append(f"--trainer.default_root_dir={root}")
    if seed is not None:
        args += [f"--seed_everything={seed}", *(f"--{key}={seed}" for key in seed_args)]
    return [*args, *overrides]


def build(
    config: str | Path,
    overrides: Sequence[str] = (),
    seed: int | None = 0,
    seed_args: Sequence[str] = SEED_ARGS,
    root: str | Path | None = None,
    checkpoints: bool = False,
) -> Any:
    """Instantiate ``zoo fit`` on :func:`fit_args` in-process without running it; returns the CLI object."""
    from zoo.core.cli import main  # lightning is imported only when a protocol fits

    return main(fit_args(config, overrides, seed, seed_args, root, checkpoints), run=False)


def fit(
    config: str | Path,
    overrides: Sequence[str] = (),
    seed: int | None = 0,
    seed_args: Sequence[str] = SEED_ARGS,
    root: str | Path | None = None,
    checkpoints: bool = False,
    prepare: Callable[[Any], None] | None = None,
) -> FitResult:
    """Fit one arm for one seed in-process, as ``zoo fit -c config --seed_everything=seed ... overrides`` would.

    Args:
        config: the arm's config file (:func:`config_path`).
        overrides: the protocol's flags for this run (e.g. ``--quick``'s steps), applied last.
        seed: the run's seed (see :func:`fit_args`); ``None`` keeps the config's.
        seed_args: dotted init-arg keys that also take the seed (default: the datamodule's ``seed``).
        root: ``--trainer.default_root_dir`` (``None``: not passed).
        checkpoints: keep the configs' checkpointing (a protocol reading ``best_model_score`` or ``ckpt_path="best"``).
        prepare: called with the CLI before ``trainer.fit`` (e.g. to add or configure a callback).

    Returns:
        The run's metrics (scalar ``callback_metrics`` as floats), fit seconds and the CLI.
    """
    cli = build(config, overrides, seed, seed_args, root, checkpoints)
    if prepare is not None:
        prepare(cli)
    start = time.time()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return FitResult(metrics=scalars(cli.trainer.callback_metrics), seconds=time.time() - start, cli=cli)


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The one-element entries of ``metrics`` (tensors or numbers) as floats."""
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def worker_setup() -> None:
    """Set up a worker process: one torch thread, Lightning's notices dropped, the zoo's own warnings kept.

    Lightning's info logs are raised to ERROR, and warnings attributed to Lightning, torch and the other libraries of
    :data:`NOISY_MODULES` are ignored; warnings attributed to the zoo's code (``zoo``, ``callbacks``, ``datamodules``),
    e.g. ``load_pretrained``'s shape-mismatch and missing-key warnings, are shown (once per place, Python's default).
    """
    import logging

    import lightning.pytorch  # noqa: F401 - importing it sets its loggers to INFO: raise them afterwards
    import torch

    torch.set_num_threads(1)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    quiet_warnings()


def quiet_warnings() -> None:
    """Ignore warnings from :data:`NOISY_MODULES` and of Lightning's own categories; show the zoo's own (see above)."""
    warnings.filterwarnings("ignore", module=NOISY_MODULES)
    warnings.filterwarnings("default", module=ZOO_MODULES)  # before the rule above: the zoo's warnings are shown
    try:
        from lightning.fabric.utilities.warnings import PossibleUserWarning
    except ImportError:  # pragma: no cover - lightning is a dependency
        return
    # Lightning's notices may name the zoo's code that called it (``rank_zero_warn``'s stacklevel): dropped all the same
    warnings.filterwarnings("ignore", category=PossibleUserWarning)


def median(values: Iterable[float]) -> float:
    """The median of ``values`` as a float; NaN when there are none (a claim on it fails, never passes)."""
    values = [float(v) for v in values]
    return statistics.median(values) if values else float("nan")


def median_over_seeds(results: Iterable[Mapping[str, Any]], value: Callable[[Any], float], **match: Any) -> float:
    """The :func:`median` of ``value(r)`` over the results whose keys equal ``match``.

    Example: ``median_over_seeds(runs, lambda r: r["results"]["CRAFT"]["mrr"], stream="A")``.
    """
    return median(value(r) for r in results if all(r[k] == v for k, v in match.items()))


def write_report(slug: str, report: Report, out: Path, seconds: float, settings: dict[str, Any]) -> dict[str, Any]:
    """Write ``out/<slug>.md`` and ``out/<slug>.json``; return the JSON object."""
    out.mkdir(parents=True, exist_ok=True)
    blob = {
        "slug": slug,
        "seconds": round(seconds, 1),
        "settings": settings,
        "metrics": report.metrics,
        "claims": [c.as_dict() for c in report.claims],
        "plots": report.plots,
    }
    (out / f"{slug}.json").write_text(json.dumps(blob, indent=2, default=_jsonable), encoding="utf-8")
    lines = [
        f"# zoo reproduce {slug}",
        "",
        f"Settings: {settings}; {seconds:.0f} s.",
        "",
        report.table,
        "",
        "| claim | value | op | threshold | verdict |",
        "|---|---|---|---|---|",
    ]
    for claim in report.claims:
        bound = claim.threshold if claim.op != "in" else f"[{claim.threshold[0]}, {claim.threshold[1]}]"
        verdict = ("PASS" if claim.holds else "FAIL") if claim.asserted else "info"
        lines.append(f"| {claim.name} | {claim.value:.4f} | {claim.op} | {bound} | {verdict} |")
    lines += [""] + [f"- {c.name}: {c.detail}" for c in report.claims if c.detail]
    lines += [""] + [f"![{Path(p).stem}]({Path(p).name})" for p in report.plots]
    (out / f"{slug}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return blob


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def protocol_options(slug: str, protocol: Any, given: dict[str, str]) -> dict[str, str]:
    """Check ``--set KEY=VALUE`` against the protocol's ``OPTIONS`` (key -> allowed values, the first the default).

    Returns every option with its value (defaults filled in); raises ``ValueError`` naming the key and the choices.
    """
    declared: dict[str, tuple[str, ...]] = getattr(protocol, "OPTIONS", {})
    for key, value in given.items():
        if key not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise ValueError(f"zoo reproduce {slug}: unknown option --set {key}=...; this protocol's options: {known}")
        if value not in declared[key]:
            raise ValueError(f"zoo reproduce {slug}: --set {key}={value!r} is not one of {list(declared[key])}")
    return {key: given.get(key, choices[0]) for key, choices in declared.items()}


def reproduce(slug: str, quick: bool, seeds: int | None, out: Path, options: dict[str, str] | None = None) -> int:
    """Run ``zoo.<slug>.reproduce.run`` and write its outputs; return 0 (all hold), 1 (one fails) or 2 (error).

    ``options`` are the protocol's own switches (``--set KEY=VALUE``, declared in the module's ``OPTIONS``); every
    protocol's ``run`` gets them (:data:`Run`), empty when it declares none.
    """
    if slug not in METHODS:
        print(f"zoo reproduce: unknown method {slug!r}; known: {', '.join(sorted(METHODS))}", file=sys.stderr)
        return 2
    progress = Progress(slug)
    try:
        protocol = importlib.import_module(f"zoo.{slug}.reproduce")
    except Exception:  # an error is exit code 2, never a silent pass
        traceback.print_exc()
        return 2
    # A protocol whose claims are medians over seeds may keep them in --quick (``QUICK_SEEDS``; default one seed);
    # one whose card defines its claims over another number of seeds declares ``FULL_SEEDS`` (default 3).
    n_seeds = (
        seeds
        if seeds is not None
        else getattr(protocol, "QUICK_SEEDS", 1)
        if quick
        else getattr(protocol, "FULL_SEEDS", 3)
    )
    try:
        chosen = protocol_options(slug, protocol, options or {})
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    settings: dict[str, Any] = {"quick": quick, "seeds": list(range(n_seeds)), **chosen}
    progress(f"start: quick={quick}, seeds={settings['seeds']}, out={out}" + "".join(
        f", {k}={v}" for k, v in chosen.items()))  # fmt: skip
    start = time.time()
    try:
        run: Run = protocol.run
        report: Report = run(seeds=tuple(range(n_seeds)), quick=quick, out=out, progress=progress, options=chosen)
    except Exception:  # an error is exit code 2, never a silent pass
        traceback.print_exc()
        return 2
    seconds = time.time() - start
    try:
        write_report(slug, report, out, seconds, settings)
    except Exception:  # an error is exit code 2, never a silent pass
        traceback.print_exc()
        return 2
    print(report.table)
    print()
    for claim in report.claims:
        print(claim.line())
    failed = [c.name for c in report.claims if c.asserted and not c.holds]
    asserted = [c for c in report.claims if c.asserted]
    info = [c for c in report.claims if not c.asserted]
    note = f" ({sum(c.holds for c in info)}/{len(info)} info claims hold, not asserted)" if info else ""
    progress(f"done in {seconds:.0f} s: {len(asserted) - len(failed)}/{len(asserted)} asserted claims hold{note}; "
             f"wrote {out}")  # fmt: skip
    return 1 if failed else 0


def dispatch(argv: Sequence[str]) -> int:
    """Handle ``zoo reproduce <slug>|--all [--quick] [--seeds N] [--out DIR]`` (``zoo list`` is the registry's)."""
    rest = list(argv[1:])
    parser = argparse.ArgumentParser(prog="zoo reproduce", description="Re-check a method's claims at CPU scale.")
    parser.add_argument("slug", nargs="?", help="method slug (see `zoo list`)")
    parser.add_argument("--all", action="store_true", help="run every method and write DIR/REPORT.md")
    parser.add_argument("--quick", action="store_true", help="one seed, reduced protocol (within 5 minutes)")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3, quick 1)")
    parser.add_argument("--out", default="reproduce_out", help="output folder (default reproduce_out)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a protocol option (see the method page), e.g. --set select_stage1_on=finetuned",
    )
    try:
        args = parser.parse_args(rest)
    except SystemExit as exc:
        return 2 if exc.code else 0
    if args.seeds is not None and args.seeds < 1:
        print("zoo reproduce: --seeds must be >= 1", file=sys.stderr)
        return 2
    options: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"zoo reproduce: --set expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        options[key] = value
    if options and args.all:
        print("zoo reproduce: --set applies to one method, not --all", file=sys.stderr)
        return 2
    out = Path(args.out)
    if args.all:
        codes = {slug: reproduce(slug, args.quick, args.seeds, out) for slug in METHODS}
        verdict = {0: "all claims hold", 1: "a claim fails", 2: "error"}
        index = ["# zoo reproduce --all", "", "| method | result | report |", "|---|---|---|"]
        index += [f"| {s} | {verdict[c]} | [{s}.md]({s}.md) |" for s, c in codes.items()]
        out.mkdir(parents=True, exist_ok=True)
        (out / "REPORT.md").write_text("\n".join(index) + "\n", encoding="utf-8")
        return max(codes.values(), default=0)
    if not args.slug:
        parser.print_usage(sys.stderr)
        return 2
    return reproduce(args.slug, args.quick, args.seeds, out, options)
