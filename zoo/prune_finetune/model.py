"""The zoo's tiny TSFMs: transformers' PatchTST (default) or TimesFm as univariate direct multi-step forecasters.

Pure torch + transformers (no Lightning). :class:`Forecaster` maps a context window ``x (B, L)`` to a forecast
``(B, H)``; channels are independent (each sample is one channel of one series), as in the card. The pruning spec
(``spec.py``) finds PatchTST's encoder layers under ``net.model.encoder.layers`` and TimesFm's decoder layers under
``net.decoder.layers``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn

from zoo.prune_finetune.lora import fold_on_load
from zoo.prune_finetune.timesfm import timesfm_config, timesfm_forecast

__all__ = ["Forecaster", "horizon_errors", "patchtst_config", "timesfm_config"]

NormType = Literal["batchnorm", "layernorm"]
Scaling = Literal["std", "mean", "none"]


def patchtst_config(
    context_length: int = 336,
    horizon: int = 96,
    d_model: int = 64,
    num_layers: int = 3,
    heads: int = 4,
    ffn_dim: int = 256,
    patch_length: int = 16,
    patch_stride: int = 16,
    norm_type: NormType = "batchnorm",
    pre_norm: bool = True,
    scaling: Scaling = "std",
    dropout: float = 0.0,
    activation: Literal["gelu", "relu"] = "gelu",
) -> object:
    """A one-channel ``PatchTSTConfig`` with a flatten head (the PatchTST paper's forecasting head, no pooling).

    Args:
        context_length: input window L.
        horizon: forecast length H.
        d_model: hidden size.
        num_layers: encoder layers.
        heads: attention heads.
        ffn_dim: FFN inner size.
        patch_length: patch length.
        patch_stride: patch stride.
        norm_type: ``batchnorm`` (PatchTST's default) or ``layernorm``.
        pre_norm: normalise before each sub-layer.
        scaling: per-window input scaling inside the model (``std``: standardise, de-standardise the output).
        dropout: attention, FFN, positional and head dropout.
        activation: FFN activation (``relu`` makes dead channels possible, used by the card's dead-channel test).

    Returns:
        The ``transformers.PatchTSTConfig``.
    """
    from transformers import PatchTSTConfig

    if context_length < patch_length:
        raise ValueError(f"context_length={context_length} is shorter than patch_length={patch_length}")
    if d_model % heads:
        raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
    return PatchTSTConfig(
        num_input_channels=1,
        context_length=context_length,
        prediction_length=horizon,
        patch_length=patch_length,
        patch_stride=patch_stride,
        d_model=d_model,
        num_attention_heads=heads,
        num_hidden_layers=num_layers,
        ffn_dim=ffn_dim,
        norm_type=norm_type,
        pre_norm=pre_norm,
        scaling=None if scaling == "none" else scaling,
        pooling_type=None,
        channel_attention=False,
        attention_dropout=dropout,
        ff_dropout=dropout,
        positional_dropout=dropout,
        head_dropout=dropout,
        path_dropout=0.0,
        activation_function=activation,
        do_mask_input=False,
    )


def _model_class(config: object) -> type[nn.Module]:
    """``PatchTSTForPrediction`` or ``TimesFmModelForPrediction`` for a config of either."""
    import transformers

    name = type(config).__name__
    classes = {"PatchTSTConfig": "PatchTSTForPrediction", "TimesFmConfig": "TimesFmModelForPrediction"}
    if name not in classes:
        raise ValueError(f"Forecaster: expected a PatchTSTConfig or TimesFmConfig, got {name}")
    return getattr(transformers, classes[name])


class Forecaster(nn.Module):
    """``x (B, L) -> forecast (B, H)`` through ``PatchTSTForPrediction`` or ``TimesFmModelForPrediction``.

    One channel per sample. TimesFm runs one decoding step of its decoder and head on the whole window (no padding,
    frequency id 0) and returns the mean output of the last patch, which is what its own ``forward`` returns when
    ``horizon_length`` is the horizon, without the per-series Python loop.

    A state dict of the network with LoRA adapters (``lora.add_lora``) loads into one without them with the
    adapters folded into the weights (``lora.fold_lora_state_``).

    Args:
        config: a ``PatchTSTConfig`` (see :func:`patchtst_config`) or ``TimesFmConfig`` (see :func:`timesfm_config`).
    """

    def __init__(self, config: object) -> None:
        super().__init__()
        self.net = _model_class(config)(config)
        self.register_load_state_dict_pre_hook(fold_on_load)

    @property
    def config(self) -> object:
        """The wrapped model's ``PatchTSTConfig`` or ``TimesFmConfig``."""
        return self.net.config

    @property
    def backbone(self) -> str:
        """``patchtst`` or ``timesfm``."""
        return "timesfm" if type(self.net.config).__name__ == "TimesFmConfig" else "patchtst"

    def forward(self, x: Tensor) -> Tensor:
        """Forecast the next ``H`` values of each window ``x (B, L)``."""
        if x.dim() != 2:
            raise ValueError(f"Forecaster: expected x of shape (B, L), got {tuple(x.shape)}")
        if self.backbone == "timesfm":
            return timesfm_forecast(self.net, x)
        out = self.net(past_values=x.unsqueeze(-1)).prediction_outputs  # (B, H, 1)
        return out.squeeze(-1)

    def load_hf(self, path: Path) -> None:
        """Load a local Hugging Face ``PatchTSTForPrediction`` or ``TimesFmModelForPrediction`` folder (offline).

        Raises:
            ValueError: if the folder's model does not match this one's context length, horizon, patching or (for
                PatchTST) channel count.
        """
        loaded = type(self.net).from_pretrained(str(path), local_files_only=True)
        want, got = self.net.config, loaded.config
        keys = ("context_length", "prediction_length", "num_input_channels", "patch_length", "patch_stride")
        if self.backbone == "timesfm":
            keys = ("context_length", "horizon_length", "patch_length")
        for key in keys:
            if getattr(want, key) != getattr(got, key):
                raise ValueError(
                    f"pretrained={str(path)!r}: {key}={getattr(got, key)} in its config.json, but this module was "
                    f"built with {key}={getattr(want, key)}; set the module's arguments to match the checkpoint"
                )
        self.net = loaded


def horizon_errors(pred: Tensor, target: Tensor, horizons: list[int]) -> dict[str, Tensor]:
    """Sums of squared and absolute errors over the first ``h`` steps for each ``h`` (for streaming means).

    Args:
        pred: forecasts ``(B, H)``.
        target: true values ``(B, H)``.
        horizons: horizons ``h <= H`` (``truncate`` mode: one H-step model scored on its first h steps).

    Returns:
        ``{"se@h": sum of squared errors, "ae@h": sum of absolute errors}`` per horizon, float64 scalars; divide by
        ``B * h`` summed over batches for MSE and MAE.
    """
    out: dict[str, Tensor] = {}
    diff = (pred - target).double()
    for h in horizons:
        if h > diff.shape[1]:
            raise ValueError(f"horizon {h} exceeds the model's forecast length {diff.shape[1]}")
        d = diff[:, :h]
        out[f"se@{h}"] = d.square().sum()
        out[f"ae@{h}"] = d.abs().sum()
    return out


def mse(pred: Tensor, target: Tensor) -> Tensor:
    """Mean squared error over all windows and steps (the training loss)."""
    return torch.mean((pred - target) ** 2)
