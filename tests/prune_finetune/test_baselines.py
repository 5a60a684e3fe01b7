"""The `lora` baseline (card "Baselines"): peft LoRA of rank r on the q/k/v/o and FFN Linears, dense and merged.

Tiny PatchTST and TimesFm (the merge tests' models: random biases, O(1) weights), dense and merged with random masks
(``fold`` and ``index`` residual slicing, a whole FFN merged into ``Bias``, a zero-width q/k), and the tiny
:class:`TSFMModule` on a short CSV. Every test names the wrong implementation it catches.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from callbacks.prune_finetune import PruneThenFinetune
from zoo.prune_finetune.lora import LORA_SCALING, add_lora, fold_lora_state_, has_lora, lora_targets, remove_lora
from zoo.prune_finetune.merge import Bias, IndexedLinear, merge_
from zoo.prune_finetune.module import TSFMModule

from . import test_merge as patchtst
from . import test_timesfm as timesfm
from .test_callback import TINY, _data, _trainer

torch.set_num_threads(1)

R = 2
P0, P1 = "model.encoder.layers.0", "model.encoder.layers.1"  # PatchTSTForPrediction
T0, T1 = "net.decoder.layers.0", "net.decoder.layers.1"  # Forecaster over TimesFm
ATTN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")


def _patchtst(merge: str | None) -> tuple[nn.Module, list[str], Tensor]:
    """(model, the Linears LoRA must adapt, input). Merged: layer 0's FFN -> Bias, layer 1's q/k width -> 0."""
    model = patchtst.make_model()
    x = patchtst.inputs(model)
    expected = [f"{p}.{n}" for p in (P0, P1) for n in (*ATTN, "self_attn.out_proj", "ff.0", "ff.3")]
    if merge is not None:
        masks = patchtst.random_masks(model, keep=0.8, seed=3)
        masks[f"{P0}.ff.0:out"][:] = 0.0
        masks[f"{P1}.self_attn.q_proj:out"][:] = 0.0
        merge_(model, masks, merge)
        assert isinstance(model.model.encoder.layers[0].ff, Bias)
        assert model.model.encoder.layers[1].self_attn.q_proj.out_features == 0
        expected = [n for n in expected if not n.startswith((f"{P0}.ff.", f"{P1}.self_attn.q_", f"{P1}.self_attn.k_"))]
    return model, expected, x


def _timesfm(merge: str | None) -> tuple[nn.Module, list[str], Tensor]:
    """(model, the Linears LoRA must adapt, input). Merged: layer 0's attention -> Bias/Zero."""
    model = timesfm.make_model()
    expected = [f"{p}.{n}" for p in (T0, T1) for n in (*ATTN, "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj")]
    if merge is not None:
        masks = timesfm.random_masks(model, keep=0.8, seed=3)
        masks[f"{T0}.self_attn.v_proj:out"][:] = 0.0
        merge_(model, masks, merge)
        expected = [f"{T0}.mlp.gate_proj", f"{T0}.mlp.down_proj"]
        expected += [f"{T1}.{n}" for n in (*ATTN, "self_attn.out_proj", "mlp.gate_proj", "mlp.down_proj")]
    return model, expected, timesfm.inputs()


def _forward(model: nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        return model(past_values=x).prediction_outputs if x.dim() == 3 else model(x)


CASES = {
    "patchtst": lambda: _patchtst(None),
    "patchtst-merged-fold": lambda: _patchtst("fold"),
    "patchtst-merged-index": lambda: _patchtst("index"),
    "timesfm": lambda: _timesfm(None),
    "timesfm-merged-index": lambda: _timesfm("index"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_targets_and_trainable_count_closed_form(case: str) -> None:
    """The adapted Linears are exactly the blocks' q/k/v/o and FFN Linears (none on a merged Zero/Bias or a zero-width
    side), the trainable parameters are only LoRA's, and their count is sum r (in + out) over those Linears. Catches
    targets matched too widely (the patch embedding or head) or too narrowly (a merged Linear peft did not wrap), a
    base weight left trainable, and an adapter on a Linear with nothing to learn."""
    model, expected, _ = CASES[case]()
    shapes = {n: (model.get_submodule(n).in_features, model.get_submodule(n).out_features) for n in expected}
    assert add_lora(model, R, 2.0 * R) == expected == lora_targets(model)
    trainable = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A.default." in n or ".lora_B.default." in n for n in trainable), list(trainable)
    assert sum(trainable.values()) == sum(R * (n_in + n_out) for n_in, n_out in shapes.values())
    indexed = [n for n in expected if isinstance(model.get_submodule(n).get_base_layer(), IndexedLinear)]
    assert bool(indexed) == case.endswith("index")


@pytest.mark.parametrize("case", list(CASES))
def test_initial_output_is_the_base_and_adapted_output_is_the_folded_weight(case: str) -> None:
    """At injection (B = 0) the output is the base model's exactly; with random A and B it equals the plain model with
    W + (alpha / r) B A folded in (``fold_lora_state_``, strict load). Catches a non-zero initial update, an adapter
    fed the full-width input of an IndexedLinear (index slicing) or scattered to the wrong rows, and a wrong fold."""
    model, _, x = CASES[case]()
    plain = copy.deepcopy(model)
    before = _forward(model, x)
    add_lora(model, R, 3.0)
    torch.testing.assert_close(_forward(model, x), before, atol=0, rtol=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.normal_(0.0, 0.5)
    adapted = _forward(model, x)
    assert not torch.allclose(adapted, before, atol=1e-3)
    state = dict(model.state_dict())
    assert float(state[LORA_SCALING]) == 3.0 / R
    assert fold_lora_state_(state) == len(lora_targets(model))
    plain.load_state_dict(state, strict=True)
    torch.testing.assert_close(_forward(plain, x), adapted, atol=1e-4, rtol=1e-4)
    remove_lora(model)  # dropped unmerged: the base model again
    assert not has_lora(model) and LORA_SCALING not in model.state_dict()
    torch.testing.assert_close(_forward(model, x), before, atol=0, rtol=0)


@pytest.mark.parametrize("backbone", ["patchtst", "timesfm"])
def test_only_the_adapters_train(backbone: str) -> None:
    """A few Adam steps of TSFMModule(lora_rank=2) leave every base parameter bit-identical and make every B
    non-zero. Catches an optimizer over all parameters (full fine-tuning) and adapters that never update."""
    torch.manual_seed(0)
    module = TSFMModule(**TINY, backbone=backbone, lora_rank=R, lr=1e-2, lr_schedule="constant")
    base = {n: p.detach().clone() for n, p in module.named_parameters() if ".lora_" not in n}
    optimizer = module.configure_optimizers()
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        batch = {"x": torch.randn(16, 32, generator=g), "y": torch.randn(16, 8, generator=g)}
        optimizer.zero_grad()
        module.compute_loss(batch)["loss"].backward()
        optimizer.step()
    params = dict(module.named_parameters())
    assert all(torch.equal(params[n], p) for n, p in base.items())
    lora_b = [p for n, p in params.items() if ".lora_B." in n]
    assert len(lora_b) == 12 and all(bool(p.abs().sum() > 0) for p in lora_b)
    assert module.lora_alpha == 2.0 * R and float(module.model.lora_scaling) == 2.0  # alpha defaults to 2 r


def test_lora_on_a_merged_checkpoint_round_trip(tmp_path: Path) -> None:
    """LoRA fine-tuning from a merged pruned checkpoint (index slicing): the adapters sit on the merged Linears, the
    Lightning checkpoint loads with weights_only=True, and load_from_checkpoint rebuilds the merged shapes, then the
    adapters, with identical forecasts; the same checkpoint as `pretrained` of a module without adapters, or loaded
    strictly with ``lora_rank=None``, is folded into its weights (same forecasts). Catches adapters injected before
    the merged shapes are rebuilt (shape or key errors) and a LoRA checkpoint loaded into a plain network with its
    adapters dropped."""
    torch.manual_seed(0)
    dense = TSFMModule(**TINY)
    structure = {"kind": "prune_finetune.merge", "data": merge_(dense.model, patchtst.random_masks(dense.model, 0.7),
                                                                 "index")}  # fmt: skip
    state = {f"model.{k}": v for k, v in dense.model.state_dict().items()}
    torch.save({"state_dict": state, "zoo_structure": structure}, tmp_path / "pruned.ckpt")
    module = TSFMModule(**TINY, lora_rank=R, lr=1e-2, pretrained=str(tmp_path / "pruned.ckpt"))
    assert module.structure == structure and any(isinstance(m, IndexedLinear) for m in module.modules())
    trainer = _trainer(tmp_path, [], limit_train_batches=3, limit_val_batches=1)
    trainer.fit(module, datamodule=_data(tmp_path))
    path = tmp_path / "lora.ckpt"
    trainer.save_checkpoint(path)
    blob = torch.load(path, weights_only=True)
    assert blob["hyper_parameters"]["lora_rank"] == R and blob["zoo_structure"] == structure
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    expected = module.eval().model(x).detach()
    with torch.no_grad():
        assert not torch.allclose(expected, dense.eval().model(x), atol=1e-4)  # the adapters trained
    loaded = TSFMModule.load_from_checkpoint(str(path)).eval()
    assert loaded.structure == structure and has_lora(loaded.model)
    assert sum(p.numel() for p in loaded.parameters() if p.requires_grad) == sum(
        p.numel() for p in module.parameters() if p.requires_grad
    )
    torch.testing.assert_close(loaded.model(x).detach(), expected, atol=0, rtol=0)
    for folded in (
        TSFMModule(**TINY, pretrained=str(path)),
        TSFMModule.load_from_checkpoint(str(path), lora_rank=None),
    ):
        assert folded.structure == structure and not has_lora(folded.eval().model)
        torch.testing.assert_close(folded.model(x).detach(), expected, atol=1e-5, rtol=1e-5)


def test_prune_then_lora_finetune(tmp_path: Path) -> None:
    """PruneThenFinetune on a module with lora_rank: the prune phase scores and merges the plain network
    (`pruned.ckpt` has no adapter), the fine-tune trains fresh adapters on the merged Linears only, and
    `finetune/best.ckpt` reloads with identical forecasts. Catches masks hooked on peft wrappers, adapters saved into
    the merged checkpoint, and a fine-tune that trains every merged weight."""
    torch.manual_seed(0)
    module = TSFMModule(**TINY, lora_rank=R, lr_schedule="constant")
    cb = PruneThenFinetune(prune_ratio_per_epoch=0.7, macro_batch_size=64, ft_lr=1e-2, ft_lr_schedule="constant")
    trainer = _trainer(tmp_path, [cb], limit_train_batches=4, limit_val_batches=1)
    trainer.fit(module, datamodule=_data(tmp_path))
    pruned = torch.load(tmp_path / "pruned.ckpt", weights_only=True)
    assert not any(".lora_" in k or LORA_SCALING in k for k in pruned["state_dict"])
    assert module.structure is not None and has_lora(module.model) and cb.phase == "finetuned"
    state = module.state_dict()
    for key, value in pruned["state_dict"].items():  # base weights as merged; BatchNorm statistics still adapt
        if "running_" not in key and "num_batches" not in key:
            stored = key if key in state else key.rsplit(".", 1)[0] + ".base_layer." + key.rsplit(".", 1)[1]
            assert torch.equal(state[stored], value), key
    assert any(bool(v.abs().sum() > 0) for k, v in state.items() if ".lora_B." in k)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    loaded = TSFMModule.load_from_checkpoint(str(tmp_path / "finetune" / "best.ckpt")).eval()
    assert loaded.structure == module.structure and has_lora(loaded.model)
    torch.testing.assert_close(loaded.model(x).detach(), module.eval().model(x).detach(), atol=0, rtol=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lora_rank", 0, "--model.init_args.lora_rank=0: expected an integer >= 1"),
        ("lora_rank", 2.5, "--model.init_args.lora_rank=2.5: expected an integer >= 1"),
        ("lora_alpha", 0.0, "--model.init_args.lora_alpha=0.0: expected a finite number > 0"),
        ("lora_dropout", 1.0, r"--model.init_args.lora_dropout=1.0: expected a number in \[0, 1\)"),
    ],
)
def test_bad_lora_values_name_the_option(field: str, value: float, message: str) -> None:
    """Each LoRA option is checked at construction, naming the flag (before peft or any data is touched)."""
    with pytest.raises(ValueError, match=f"^{message}$"):
        TSFMModule(**TINY, **{"lora_rank": 8, field: value})
