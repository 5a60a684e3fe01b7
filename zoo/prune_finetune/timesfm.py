"""TimesFm pieces of the zoo's TSFM: the tiny config, the one-step direct forecast, and the query-scale constant.

transformers' ``TimesFmModelForPrediction`` (installed: 5.25) is a decoder-only patch transformer. Its attention
scales the query per dimension by ``softplus(scaling) * 1.442695041 / sqrt(head_dim)`` (one learnable vector of
length head_dim shared by the heads) and multiplies the scores by 1; the merge (``merge.py``) slices that vector per
head and kept dimension and keeps this constant of the *original* head_dim. Pure torch + transformers (no Lightning).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TIMESFM_QUERY_SCALE", "query_scale_factor", "timesfm_config", "timesfm_forecast"]

#: TimesFm's query-scale constant: ``softplus(scaling) * 1.442695041 / sqrt(head_dim)`` (``TimesFmAttention``).
TIMESFM_QUERY_SCALE = 1.442695041


def timesfm_config(
    context_length: int = 336,
    horizon: int = 96,
    d_model: int = 64,
    num_layers: int = 3,
    heads: int = 4,
    ffn_dim: int = 256,
    patch_length: int = 16,
    patch_stride: int | None = None,
    dropout: float = 0.0,
) -> object:
    """A tiny ``TimesFmConfig``: a point forecaster (no quantile heads) whose one output patch is the whole horizon.

    TimesFm is a decoder-only patch transformer: causal attention over non-overlapping input patches, a per-dimension
    learnable query scale, an MLP with its own LayerNorm, and a residual-block head mapping the last patch's state to
    ``horizon_length`` values. Here ``horizon_length = H``, so one decoding step forecasts the whole horizon (direct
    multi-step, as the zoo's PatchTST); ``quantiles`` is empty, so the only output is the mean trained with MSE.
    Sinusoidal positional embeddings are on (TimesFM 1.0; 2.0 relies on the causal mask alone).

    Args:
        context_length: input window L (a multiple of ``patch_length``).
        horizon: forecast length H (TimesFm's ``horizon_length``, the output patch).
        d_model: hidden size.
        num_layers: decoder layers.
        heads: attention heads (``head_dim = d_model / heads``).
        ffn_dim: MLP inner size (also the width of the input and output residual blocks).
        patch_length: input patch length.
        patch_stride: ``None`` or ``patch_length`` (TimesFm's patches do not overlap).
        dropout: attention dropout (TimesFm has no other dropout).

    Returns:
        The ``transformers.TimesFmConfig``.
    """
    from transformers import TimesFmConfig

    if patch_stride is not None and patch_stride != patch_length:
        raise ValueError(
            f"--model.init_args.patch_stride={patch_stride}: TimesFm's patches do not overlap, set it to "
            f"patch_length={patch_length}"
        )
    if context_length % patch_length:
        raise ValueError(
            f"--model.init_args.patch_length={patch_length}: TimesFm needs context_length={context_length} to be a "
            "multiple of it"
        )
    if d_model % heads:
        raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
    return TimesFmConfig(
        patch_length=patch_length,
        context_length=context_length,
        horizon_length=horizon,
        num_hidden_layers=num_layers,
        hidden_size=d_model,
        intermediate_size=ffn_dim,
        head_dim=d_model // heads,
        num_attention_heads=heads,
        quantiles=[],
        attention_dropout=dropout,
        use_positional_embedding=True,
    )


def timesfm_forecast(net: nn.Module, x: Tensor) -> Tensor:
    """``(B, H)`` forecasts of a ``TimesFmModelForPrediction`` whose one output patch is the horizon.

    One decoding step of the decoder and head on the whole window (no padding, frequency id 0), the mean output of
    the last patch: what ``net(past_values=x).mean_predictions`` returns for such a config, without its per-series
    Python loop.

    Raises:
        ValueError: if the windows are not ``context_length`` long.
    """
    config = net.config
    if x.shape[1] != config.context_length:
        raise ValueError(f"Forecaster: expected windows of {config.context_length} steps, got {x.shape[1]}")
    freq = torch.zeros(x.shape[0], 1, dtype=torch.long, device=x.device)
    out = net.decoder(past_values=x, past_values_padding=torch.zeros_like(x), freq=freq)
    forecast = net._postprocess_output(out.last_hidden_state, (out.loc, out.scale))  # (B, N, horizon, 1 + quantiles)
    return forecast[:, -1, :, 0]


def query_scale_factor(name: str, attn: nn.Module) -> float:
    """TimesFm's constant ``1.442695041 / sqrt(head_dim)``, checked against the module's own query scaling.

    Raises:
        ValueError: if the attention has no query-scaling method or it is not ``softplus(scaling) * factor``.
    """
    factor = TIMESFM_QUERY_SCALE / math.sqrt(attn.head_dim)
    method = getattr(attn, "_scale_query", None) or getattr(attn, "_per_dim_scaling", None)
    if method is None:
        raise ValueError(f"{name}.self_attn: no _scale_query method; unknown TimesFm attention layout")
    raw = attn.scaling.detach()
    with torch.no_grad():
        got = method(torch.ones(1, 1, 1, attn.head_dim, dtype=raw.dtype, device=raw.device)).flatten()
    if not torch.allclose(got, F.softplus(raw) * factor, rtol=1e-5, atol=0.0):
        raise ValueError(
            f"{name}.self_attn: its query scale is not softplus(scaling) * {TIMESFM_QUERY_SCALE} / sqrt(head_dim); "
            "this transformers version's TimesFm attention is a layout the merge does not know"
        )
    return factor
