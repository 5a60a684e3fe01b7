"""The reproduction harness of ``zoo.core.reproduce``: configs, in-process fits, quiet workers, medians, one ``run``."""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import time
import warnings
from pathlib import Path

import pytest
import torch

from zoo.core import reproduce as rep
from zoo.core.registry import METHODS


def test_median_and_median_over_seeds() -> None:
    """One median helper: a float, NaN for nothing (a claim on it fails); over seeds, filtered by equal keys."""
    assert rep.median([3, 1, 2]) == 2.0 and isinstance(rep.median([1, 2]), float) and rep.median([1, 2]) == 1.5
    assert math.isnan(rep.median([]))
    runs = [{"arm": "a", "seed": s, "v": float(s)} for s in range(3)] + [{"arm": "b", "seed": 0, "v": 10.0}]
    assert rep.median_over_seeds(runs, lambda r: r["v"], arm="a") == 1.0
    assert rep.median_over_seeds(runs, lambda r: r["v"], arm="b", seed=0) == 10.0
    assert math.isnan(rep.median_over_seeds(runs, lambda r: r["v"], arm="c"))


def test_config_path_and_fit_args() -> None:
    """Configs resolve from the repository root (a missing one names what exists); the fit arguments are the config,
    the quiet flags, the seed (``None``: the config's), then the protocol's overrides, last so they win."""
    path = rep.config_path("coop_se", "default")
    assert path == rep.ROOT / "configs" / "coop_se" / "default.yaml" and path.is_file()
    assert rep.config_path("coop_se", "default.yaml") == path
    assert rep.load_config("coop_se", "default")["model"]["class_path"].endswith("CooperativeBanditModule")
    with pytest.raises(FileNotFoundError, match="default.yaml"):
        rep.config_path("coop_se", "nope")
    args = rep.fit_args(path, ["--data.init_args.m=2"], seed=3, seed_args=("data.init_args.seed", "model.x"))
    assert args[:2] == ["-c", str(path)] and all(flag in args for flag in rep.QUIET)
    assert "--trainer.enable_checkpointing=false" in args and args[-1] == "--data.init_args.m=2"
    assert {"--seed_everything=3", "--data.init_args.seed=3", "--model.x=3"} <= set(args)
    kept = rep.fit_args(path, seed=None, root="/r", checkpoints=True)
    assert not any("seed" in a for a in kept) and "--trainer.default_root_dir=/r" in kept
    assert "--trainer.enable_checkpointing=false" not in kept


def test_fit_returns_metrics_of_a_tiny_config(tmp_path: Path) -> None:
    """``fit`` runs ``zoo fit`` in-process on a config with overrides for a seed and returns its metrics (floats), the
    fit time and the CLI; Coop-SE on 2 agents for 2000 rounds takes well under 5 s."""
    import datamodules.bandit_graph  # noqa: F401 - lightning, the CLI and the data imported before timing
    import zoo.cli  # noqa: F401

    overrides = ["--data.init_args.T=2000", "--data.init_args.m=2"]
    start = time.time()
    result = rep.fit(rep.config_path("coop_se", "default"), overrides, seed=1, root=tmp_path)
    assert time.time() - start < 5.0
    assert type(result.model).__name__ == "CooperativeBanditModule" and result.trainer.max_epochs == 1
    assert result.datamodule.n_agents == 2
    assert result.metrics["final/round"] == 2000.0 and result.metrics["final/regret_mean"] > 0
    assert all(isinstance(v, float) for v in result.metrics.values()) and 0 < result.seconds < 5.0
    again = rep.fit(rep.config_path("coop_se", "default"), overrides, seed=1, root=tmp_path)
    assert again.metrics == result.metrics  # the seed fixes the run
    assert result.callback(torch.nn.Module) is None


def test_quiet_workers_keep_the_zoos_warnings(tmp_path: Path) -> None:
    """``worker_setup`` drops Lightning's notices but keeps warnings raised for the zoo's own code, e.g.
    ``load_pretrained``'s shape-mismatch and missing-key warnings (a blanket ``ignore`` hid them)."""
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    from zoo.core.pretrained import load_pretrained

    state = tmp_path / "state.pt"
    torch.save({"weight": torch.zeros(4, 2), "bias": torch.zeros(4)}, state)
    # a caller inside the zoo, as ZooModule.configure_model is (the warnings name the caller of load_pretrained)
    scope = {"__name__": "zoo.core.module", "load_pretrained": load_pretrained, "torch": torch}
    exec("def load(path):\n    return load_pretrained(torch.nn.Linear(2, 3), path, prefix='')", scope)
    levels = {name: logging.getLogger(name).level for name in rep.NOISY_LOGGERS}
    threads = torch.get_num_threads()
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        rep.worker_setup()
        assert torch.get_num_threads() == 1
        assert all(logging.getLogger(name).level == logging.ERROR for name in rep.NOISY_LOGGERS)
        for module in ("lightning.pytorch.trainer.connectors.data_connector", "torch.utils.data", "jsonargparse"):
            warnings.warn_explicit(f"noise from {module}", UserWarning, "x.py", 1, module=module, registry={})
        warnings.warn_explicit("possible", PossibleUserWarning, "y.py", 1, module="zoo.fake", registry={})
        scope["load"](str(state))
    messages = [str(w.message) for w in caught]
    assert any("dropping 'weight'" in m for m in messages), messages
    assert any("missing keys" in m for m in messages), messages
    assert not any(m.startswith(("noise", "possible")) for m in messages), messages
    for name, level in levels.items():  # the rest of the session keeps its logging and threads
        logging.getLogger(name).setLevel(level)
    torch.set_num_threads(threads)


@pytest.mark.parametrize("slug", sorted(METHODS))
def test_every_protocol_has_the_one_run_signature(slug: str) -> None:
    """``reproduce`` calls every protocol alike: ``run(seeds, quick, out, progress, options=None) -> Report``."""
    protocol = importlib.import_module(f"zoo.{slug}.reproduce")
    params = inspect.signature(protocol.run).parameters
    assert list(params) == ["seeds", "quick", "out", "progress", "options"], slug
    assert params["options"].default is None
    assert all(p.default is inspect.Parameter.empty for name, p in params.items() if name != "options"), slug


# --- plots ------------------------------------------------------------------------------------------------------------


def test_curve_styles_give_every_curve_its_own_look() -> None:
    """Catches a style cycle under which two of N curves look alike (coop_se's regret curves hid two of five)."""
    for n in range(1, 21):
        styles = rep.curve_styles(n)
        assert len({(s["marker"], s["linestyle"]) for s in styles}) == n, n
        assert len({s["markevery"][0] for s in styles}) == n, n  # staggered starts: coinciding markers sit apart
        assert all(s["marker"] in rep.MARKERS and s["linestyle"] in rep.LINESTYLES for s in styles)
    forty = rep.curve_styles(40)
    assert len({(s["marker"], s["linestyle"], s["fillstyle"]) for s in forty}) == 40
    assert rep.curve_styles(3) == rep.curve_styles(3)  # a fixed cycle: the same curves look the same in every run
    assert all(s["markevery"] is None for s in rep.curve_styles(3, points=rep.MARK_ALL))  # sparse: every point
    assert all(s["markevery"] is not None for s in rep.curve_styles(3, points=rep.MARK_ALL + 1))


def test_save_figure_warns_on_an_unreadable_plot(tmp_path: Path) -> None:
    """Catches a plot saved without a title or axis labels, with look-alike legend entries or without a legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], label="a")
    ax.plot([1, 2], [1, 2], "C0", label="b")  # same colour, marker and line style: b lies exactly on a
    ax.legend()
    with pytest.warns(rep.PlotWarning) as record:
        path = rep.save_figure(fig, tmp_path, "bad.png")
    messages = " | ".join(str(w.message) for w in record)
    assert Path(path).stat().st_size > 0  # written anyway
    for expected in ("bad.png: no title", "no x label", "no y label", "'a' and 'b' look alike"):
        assert expected in messages, (expected, messages)
    fig, ax = plt.subplots()
    ax.bar([0], [1], label="a")
    ax.bar([1], [2], label="b")
    ax.set(title="t", xlabel="x", ylabel="y")
    assert rep.figure_problems(fig) == ["axes 0 ('t'): 2 labelled artists but no legend naming them all"]
    plt.close(fig)
    fig, ax = plt.subplots()
    for label, style in zip("abcde", rep.curve_styles(5), strict=True):
        ax.loglog(range(1, 50), range(1, 50), label=label, **style)  # five coinciding curves, each still visible
    ax.set(title="five curves (lower is better)", xlabel="t", ylabel="regret")
    rep.legend_outside(ax)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rep.PlotWarning)
        rep.save_figure(fig, tmp_path, "good.png")
