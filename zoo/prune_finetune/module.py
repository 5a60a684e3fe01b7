"""Less is More: Unlocking Specialization of Time Series Foundation Models via Structured Pruning (NeurIPS 2025).

Prune-then-Finetune: a pretrained time-series foundation model (TSFM) is structurally pruned to the sub-network the
target task uses (per-sample Fisher channel scores, one global threshold, a progressive schedule on frozen weights),
merged into a physically smaller dense model, then fine-tuned. :class:`TSFMModule` is the zoo's TSFM (transformers'
PatchTST, or TimesFm with ``backbone: timesfm``, pretrained inside the zoo on a synthetic multi-domain corpus); the
mechanism is the shared callback ``callbacks.prune_finetune.PruneThenFinetune``, which works on any zoo module whose
``model`` holds PatchTST encoder layers or TimesFm decoder layers. ``lora_rank`` turns fine-tuning into the card's
``lora`` baseline (peft adapters on the blocks' q/k/v/o and FFN Linears, dense or merged; ``lora.py``).

Example:
    >>> from zoo.prune_finetune.module import TSFMModule
    >>> module = TSFMModule(context_length=64, horizon=16, d_model=16, num_layers=1, heads=2, ffn_dim=32,
    ...                     patch_length=8, patch_stride=8, eval_horizons=[8, 16])
    >>> import torch
    >>> module.model(torch.randn(3, 64)).shape
    torch.Size([3, 16])
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from zoo.core import checks
from zoo.core.module import ZooModule, adam_kernel
from zoo.core.structure import STRUCTURE_KEY
from zoo.prune_finetune.model import Forecaster, horizon_errors, mse, patchtst_config, timesfm_config

Split = Literal["val", "test"]


class TSFMModule(ZooModule):
    """PatchTST or TimesFm forecaster: MSE training on ``{"x": (B, L), "y": (B, H)}`` batches; MSE/MAE per horizon.

    Validation and test log ``<split>/mse@h`` and ``<split>/mae@h`` over the first ``h`` steps of each forecast for
    every ``h`` in ``eval_horizons`` (the card's ``horizon_mode: truncate``: one H-step model scored on its first
    24/48/96 steps), and their means over the horizons as ``<split>/mse`` and ``<split>/mae`` (the monitored
    value), in the datamodule's normalised space.

    Args:
        context_length: input window L (linked from the datamodule).
        horizon: forecast length H (linked from the datamodule).
        d_model: hidden size.
        num_layers: encoder layers.
        heads: attention heads.
        ffn_dim: FFN inner size.
        patch_length: patch length.
        patch_stride: patch stride.
        norm_type: ``batchnorm`` or ``layernorm``.
        pre_norm: normalise before each sub-layer.
        scaling: per-window scaling inside PatchTST (``std``, ``mean`` or ``none``).
        dropout: attention, FFN, positional and head dropout.
        activation: FFN activation.
        eval_horizons: horizons scored at validation and test (each ``<= horizon``).
        optimizer: ``adam`` (fine-tuning, official) or ``adamw`` (pretraining recipe).
        lr: learning rate.
        weight_decay: weight decay.
        lr_schedule: ``constant``; ``cosine`` (per step, linear warm-up over ``warmup_steps``, to 0 at the last
            step); ``type1`` (official fine-tuning schedule: constant for 3 epochs, then x0.9 per epoch).
        warmup_steps: warm-up steps of ``cosine``.
        pretrained: a checkpoint, state dict, local Hugging Face ``PatchTSTForPrediction`` (or, with ``backbone:
            timesfm``, ``TimesFmModelForPrediction``) folder, or a training recipe such as
            ``configs/prune_finetune/pretrain.yaml`` (trained once, cached).
        backbone: ``patchtst`` (transformers' ``PatchTSTForPrediction``) or ``timesfm`` (``TimesFmModelForPrediction``
            with one output patch of H steps and no quantile heads, see ``timesfm.timesfm_config``). TimesFm uses
            ``d_model``, ``num_layers``, ``heads``, ``ffn_dim``, ``patch_length`` (= ``patch_stride``) and ``dropout``
            (attention only); ``norm_type``, ``pre_norm``, ``scaling`` and ``activation`` are PatchTST's (TimesFm
            has RMS/LayerNorm before each sub-layer, first-patch scaling and a ReLU MLP).
        lora_rank: ``None`` fine-tunes every weight (full FT); an integer r puts peft LoRA adapters of rank r on the
            q/k/v/o and FFN Linears of every transformer layer (dense or merged, see ``zoo.prune_finetune.lora``) and
            freezes everything else (the card's ``lora`` baseline; ``configs/prune_finetune/lora.yaml``).
        lora_alpha: LoRA alpha, the update scaled by alpha / r; ``None``: 2 r (**ours**, the card fixes only r = 8).
        lora_dropout: dropout on the adapters' input.
    """

    monitor: ClassVar[str] = "val/mse"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "prune_finetune"

    def __init__(
        self,
        context_length: int = 336,
        horizon: int = 96,
        d_model: int = 64,
        num_layers: int = 3,
        heads: int = 4,
        ffn_dim: int = 256,
        patch_length: int = 16,
        patch_stride: int = 16,
        norm_type: Literal["batchnorm", "layernorm"] = "batchnorm",
        pre_norm: bool = True,
        scaling: Literal["std", "mean", "none"] = "std",
        dropout: float = 0.0,
        activation: Literal["gelu", "relu"] = "gelu",
        eval_horizons: list[int] | None = None,
        optimizer: Literal["adam", "adamw"] = "adam",
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        lr_schedule: Literal["constant", "cosine", "type1"] = "type1",
        warmup_steps: int = 0,
        pretrained: str | None = None,
        backbone: Literal["patchtst", "timesfm"] = "patchtst",
        lora_rank: int | None = None,
        lora_alpha: float | None = None,
        lora_dropout: float = 0.0,
    ) -> None:
        for name, value in (("context_length", context_length), ("horizon", horizon), ("d_model", d_model),
                            ("num_layers", num_layers), ("heads", heads), ("ffn_dim", ffn_dim),
                            ("patch_length", patch_length), ("patch_stride", patch_stride)):  # fmt: skip
            checks.integer(checks.model(name), value)
        if patch_length > context_length:
            checks.fail(checks.model("patch_length"), patch_length, f"an integer <= context_length={context_length}")
        if d_model % heads:
            checks.fail(checks.model("d_model"), d_model, f"a multiple of --model.init_args.heads={heads}")
        checks.choice(checks.model("norm_type"), norm_type, ("batchnorm", "layernorm"))
        checks.choice(checks.model("scaling"), scaling, ("std", "mean", "none"))
        checks.number(checks.model("dropout"), dropout, 0.0, 1.0, open_high=True)
        checks.choice(checks.model("activation"), activation, ("gelu", "relu"))
        checks.choice(checks.model("optimizer"), optimizer, ("adam", "adamw"))
        checks.choice(checks.model("lr_schedule"), lr_schedule, ("constant", "cosine", "type1"))
        checks.integer(checks.model("warmup_steps"), warmup_steps, low=0)
        checks.optional_integer(checks.model("lora_rank"), lora_rank)
        if lora_alpha is not None:
            checks.positive(checks.model("lora_alpha"), lora_alpha)
        checks.number(checks.model("lora_dropout"), lora_dropout, 0.0, 1.0, open_high=True)
        horizons = [24, 48, 96] if eval_horizons is None else list(eval_horizons)
        horizons = [h for h in horizons if h <= horizon] if eval_horizons is None else horizons
        if not horizons or not all(isinstance(h, int) and 1 <= h <= horizon for h in horizons):
            checks.fail(checks.model("eval_horizons"), eval_horizons, f"a non-empty list of integers in [1, "
                        f"horizon={horizon}]")  # fmt: skip
        self.eval_horizons = horizons
        self.optimizer_name, self.lr_schedule, self.warmup_steps = optimizer, lr_schedule, warmup_steps
        self._config = {
            "context_length": context_length, "horizon": horizon, "d_model": d_model, "num_layers": num_layers,
            "heads": heads, "ffn_dim": ffn_dim, "patch_length": patch_length, "patch_stride": patch_stride,
            "norm_type": norm_type, "pre_norm": pre_norm, "scaling": scaling, "dropout": dropout,
            "activation": activation,
        }  # fmt: skip
        self.backbone = backbone
        self.lora_rank, self.lora_dropout = lora_rank, lora_dropout
        self.lora_alpha = None if lora_rank is None else float(2 * lora_rank if lora_alpha is None else lora_alpha)
        self._sums: dict[str, Tensor] = {}
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)
        self.set_adapters(True)  # after `pretrained` (and the merged shapes it may carry) is loaded

    def configure_models(self) -> None:
        """Build the :class:`~zoo.prune_finetune.model.Forecaster` over PatchTST or TimesFm."""
        if self.backbone == "timesfm":
            keys = ("context_length", "horizon", "d_model", "num_layers", "heads", "ffn_dim", "patch_length")
            config = timesfm_config(**{k: self._config[k] for k in (*keys, "patch_stride", "dropout")})
        elif self.backbone == "patchtst":
            config = patchtst_config(**self._config)
        else:
            raise ValueError(f"--model.init_args.backbone={self.backbone!r}: expected 'patchtst' or 'timesfm'")
        self.model = Forecaster(config)

    def set_adapters(self, enabled: bool) -> None:
        """Inject (``True``) or remove (``False``) the LoRA adapters of ``lora_rank``; a no-op without ``lora_rank``.

        Injecting freezes every weight but the adapters; removing drops them unmerged and unfreezes every weight.
        ``PruneThenFinetune`` removes them for the prune phase (which scores and merges the plain network) and
        injects fresh ones on the merged network for the fine-tune.
        """
        if self.lora_rank is None:
            return
        from zoo.prune_finetune.lora import add_lora, has_lora, remove_lora

        if enabled and not has_lora(self.model):
            assert self.lora_alpha is not None
            add_lora(self.model, self.lora_rank, self.lora_alpha, self.lora_dropout)
        elif not enabled and has_lora(self.model):
            remove_lora(self.model)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Give the network the checkpoint's form before its weights load: merged shapes first, then adapters.

        A checkpoint with LoRA entries gets adapters on the (rebuilt) network when ``lora_rank`` is set; without
        ``lora_rank`` its adapters are folded into the weights as they load (``Forecaster``). A checkpoint without
        LoRA entries (e.g. the prune phase's) loads into the network without adapters.
        """
        from zoo.prune_finetune.lora import LORA_SCALING, has_lora

        state = checkpoint.get("state_dict") or {}
        wants = f"model.{LORA_SCALING}" in state
        structure = checkpoint.get(STRUCTURE_KEY)
        if has_lora(self.model) and (not wants or (structure is not None and structure != self.structure)):
            self.set_adapters(False)  # the plain network: as the checkpoint holds it, or to rebuild merged shapes on
        super().on_load_checkpoint(checkpoint)
        if wants:
            self.set_adapters(True)

    def forward(self, x: Tensor) -> Tensor:
        """Forecast ``(B, H)`` from context windows ``(B, L)``."""
        return self.model(x)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """MSE of the direct multi-step forecast (the pretraining, fine-tuning and pruning-score loss)."""
        return {"loss": mse(self.model(batch["x"]), batch["y"])}

    # -- evaluation ---------------------------------------------------------------------------------------------
    def _eval_start(self) -> None:
        self._sums = {}

    def _eval_step(self, batch: dict[str, Tensor]) -> None:
        errors = horizon_errors(self.model(batch["x"]), batch["y"], self.eval_horizons)
        errors["n"] = torch.tensor(float(batch["x"].shape[0]), dtype=torch.float64, device=self.device)
        for key, value in errors.items():
            self._sums[key] = self._sums.get(key, 0.0) + value.detach()

    def _eval_end(self, split: Split) -> None:
        if not self._sums:
            return
        sums = {k: self.trainer.strategy.reduce(v, reduce_op="sum") for k, v in self._sums.items()}
        values: dict[str, Tensor] = {}
        for h in self.eval_horizons:
            denominator = sums["n"] * h
            values[f"{split}/mse@{h}"] = (sums[f"se@{h}"] / denominator).float()
            values[f"{split}/mae@{h}"] = (sums[f"ae@{h}"] / denominator).float()
        values[f"{split}/mse"] = torch.stack([values[f"{split}/mse@{h}"] for h in self.eval_horizons]).mean()
        values[f"{split}/mae"] = torch.stack([values[f"{split}/mae@{h}"] for h in self.eval_horizons]).mean()
        self.log_dict(values)
        self._sums = {}

    def on_validation_epoch_start(self) -> None:
        """Reset the error sums."""
        self._eval_start()

    def on_test_epoch_start(self) -> None:
        """Reset the error sums."""
        self._eval_start()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate squared and absolute errors per horizon."""
        self._eval_step(batch)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate squared and absolute errors per horizon."""
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        """Log ``val/mse@h``, ``val/mae@h`` and their means ``val/mse``, ``val/mae``."""
        self._eval_end("val")

    def on_test_epoch_end(self) -> None:
        """Log ``test/mse@h``, ``test/mae@h`` and their means ``test/mse``, ``test/mae``."""
        self._eval_end("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """Forecasts (normalised space) with the batch's channel and start indices."""
        out = {"forecast": self.model(batch["x"])}
        for key in ("y", "channel", "start"):
            if key in batch:
                out[key] = batch[key]
        return out

    # -- optimisation -------------------------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        """Adam or AdamW over the trainable parameters, with the configured schedule."""
        params = [p for p in self.parameters() if p.requires_grad]
        if not params:
            return None
        kind = torch.optim.AdamW if self.optimizer_name == "adamw" else torch.optim.Adam
        opt = kind(params, lr=self.lr, weight_decay=self.weight_decay, **adam_kernel(params))
        if self.lr_schedule == "constant":
            return opt
        if self.lr_schedule == "type1":
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.9 ** max(0, epoch - 2))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warm = self.warmup_steps

        def cosine(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            progress = min((step - warm) / max(total - warm, 1), 1.0)
            return 0.5 * (1.0 + math.cos(math.pi * progress))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
