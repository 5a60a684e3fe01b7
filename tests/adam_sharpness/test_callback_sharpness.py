"""Card test 6: ``SharpnessLogger`` against the diag-net's closed form, Hutchinson, and another method's module."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer

from callbacks.label_noise import LabelNoiseCallback
from callbacks.sharpness import SharpnessLogger, sharpness_values
from datamodules.sparse_regression.datamodule import SparseRegressionDataModule
from datamodules.sparse_regression.synthetic import sparse_problem
from zoo.adam_sharpness.module import DiagonalLinearNet


def _interpolating_net(d: int = 40, k: int = 3, n: int = 20, replicas: int = 2) -> DiagonalLinearNet:
    """A net at a constructed point on the manifold: u_i = √max(w*_i, 0) + 0.01, v_i = √(u_i² − w*_i)."""
    net = DiagonalLinearNet(input_dim=d, n_replicas=replicas)
    Zs, ys, us, vs = [], [], [], []
    for r in range(replicas):
        p = sparse_problem(d, k, n, 10, "rademacher", r)
        w = torch.from_numpy(p["w_star"])
        u = w.clamp_min(0).sqrt() + 0.01
        us.append(u), vs.append((u * u - w).sqrt())
        Zs.append(torch.from_numpy(p["Z"])), ys.append(torch.from_numpy(p["y"]))
    with torch.no_grad():
        net.model.u.copy_(torch.stack(us)), net.model.v.copy_(torch.stack(vs))
    net._clean = (torch.stack(Zs), torch.stack(ys))
    assert float(net.sharpness_closure().detach()) < 1e-25  # on the manifold
    return net


def test_exact_matches_closed_form_per_replica() -> None:
    """Catches noisy-label Hessians, wrong flattening or replica mixing: tr H = 4Σ(u²+v²), tr√diag = 2Σ(|u|+|v|)."""
    net = _interpolating_net()
    cb = SharpnessLogger(method="exact", blocks=[list(range(40)), list(range(40))], exponent=0.25)
    out = cb.measure(net)
    u, v = net.model.u.detach(), net.model.v.detach()
    torch.testing.assert_close(out["trH"], 4 * (u * u + v * v).sum(1), rtol=0, atol=1e-8)
    torch.testing.assert_close(out["tr_sqrt_diagH"], 2 * (u.abs() + v.abs()).sum(1), rtol=0, atol=1e-8)
    pair = (2 * (u * u + v * v)).sqrt()  # |B| = 2, mean_B H = 2(u² + v²)
    torch.testing.assert_close(out["block_sqrt"], 2 * pair.sum(1), rtol=0, atol=1e-8)
    torch.testing.assert_close(out["tr_diagH_pow"], ((4 * u * u) ** 0.75 + (4 * v * v) ** 0.75).sum(1), rtol=0,
                               atol=1e-8)  # fmt: skip
    assert out["n_clamped"].tolist() == [0.0, 0.0]


def test_hutchinson_within_five_percent() -> None:
    """2000 probes give tr(H) within 5% of the exact value; n_clamped is reported (≥ 0)."""
    net = _interpolating_net(replicas=1)
    exact = SharpnessLogger(method="exact").measure(net)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = SharpnessLogger(method="hutchinson", n_probes=2000, seed=1).measure(net)
    assert abs(float(est["trH"][0]) / float(exact["trH"][0]) - 1) < 0.05
    assert float(est["n_clamped"][0]) >= 0
    clamped_warning = any("clamped to 0" in str(w.message) for w in caught)
    assert clamped_warning == (float(est["n_clamped"][0]) > 0)  # warned exactly when something was clamped


def test_auto_switches_and_exact_refuses_above_the_limit() -> None:
    """auto: exact up to max_exact_params, Hutchinson above; exact above the limit raises at setup."""
    net = _interpolating_net(replicas=1)  # 80 parameters
    assert SharpnessLogger(method="auto", max_exact_params=80).resolved_method(net) == "exact"
    assert SharpnessLogger(method="auto", max_exact_params=79).resolved_method(net) == "hutchinson"
    with pytest.raises(ValueError, match="80 trainable parameters > max_exact_params=10"):
        SharpnessLogger(method="exact", max_exact_params=10).setup(None, net, "fit")  # type: ignore[arg-type]


def test_block_values_by_hand() -> None:
    """Σ_B |B|·√mean_B H on a hand-made diagonal; ``tensor`` blocks are the parameter tensors."""
    diag = [torch.tensor([[1.0, 3.0]]), torch.tensor([[4.0, -2.0]])]
    out = sharpness_values(diag, 1, "tensor")
    assert float(out["block_sqrt"][0]) == pytest.approx(2 * 2.0**0.5 + 2 * 1.0)
    assert float(out["tr_sqrt_diagH"][0]) == pytest.approx(1 + 3**0.5 + 2) and float(out["n_clamped"][0]) == 1


class _Plain(torch.nn.Module):
    """Not a sharpness module."""


def test_protocol_error_names_the_missing_member() -> None:
    """A module without ``sharpness_closure`` fails at setup with one error naming it."""
    with pytest.raises(AttributeError, match="_Plain.sharpness_closure"):
        SharpnessLogger().setup(None, _Plain(), "fit")  # type: ignore[arg-type]


def test_on_another_methods_module() -> None:
    """The callback on uam's MLP classifier (another method, built here): equals autograd's Hessian diagonal."""
    from zoo.uam.module import UnlearnClassifierModule

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 6, generator=gen), torch.randint(0, 3, (16,), generator=gen)

    class WithClosure(UnlearnClassifierModule):
        def sharpness_closure(self) -> torch.Tensor:
            return F.cross_entropy(self(x), y)

    module = WithClosure(input_dim=6, num_classes=3, hidden=[5])
    named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
    out = SharpnessLogger(method="exact").measure(module)

    def loss(flat: torch.Tensor) -> torch.Tensor:
        params = dict(zip([k for k, _ in named], torch.split(flat, [p.numel() for _, p in named]), strict=True))
        params = {k: t.reshape(dict(named)[k].shape) for k, t in params.items()}
        return F.cross_entropy(torch.func.functional_call(module, params, (x,)), y)

    H = torch.autograd.functional.hessian(loss, torch.cat([p.detach().reshape(-1) for _, p in named]))
    diag = torch.diagonal(H)
    torch.testing.assert_close(float(out["trH"][0]), float(diag.sum()), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(float(out["tr_sqrt_diagH"][0]), float(diag.clamp_min(0).sqrt().sum()), rtol=1e-5,
                               atol=1e-7)  # fmt: skip
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="SharpnessLogger: Hutchinson")  # CE has negative diagonals
        est = SharpnessLogger(method="hutchinson", n_probes=3000).measure(module)
    assert abs(float(est["trH"][0]) / float(diag.sum()) - 1) < 0.1


def test_in_a_trainer_logs_on_schedule(tmp_path: object) -> None:
    """In a fit the callback measures every ``every_n_steps`` optimizer steps (module's counter) and at the end."""
    dm = SparseRegressionDataModule(d=10, k=2, n=8, n_test=50, n_replicas=2, batches_per_epoch=6)
    net = DiagonalLinearNet(input_dim=10, n_replicas=2, inner_steps=10, optimizer="adam_nobc")
    cb = SharpnessLogger(every_n_steps=20)
    trainer = Trainer(max_steps=5, callbacks=[LabelNoiseCallback(0.5), cb], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                      default_root_dir=str(tmp_path))  # fmt: skip
    trainer.fit(net, datamodule=dm)
    assert [h["step"] for h in cb.history] == [0, 20, 40, 50]
    assert "sharpness/tr_sqrt_diagH" in trainer.callback_metrics and len(cb.final["trH"]) == 2
