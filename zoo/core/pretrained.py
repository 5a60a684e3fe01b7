"""Loading pretrained weights for fine-tuning (never downloads)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn


def drop_shape_mismatches(net: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop entries whose shape differs from the network's, warning with the key and both shapes."""
    own = net.state_dict()
    kept = {}
    for key, value in state.items():
        if key in own and own[key].shape != value.shape:
            warnings.warn(
                f"pretrained: dropping {key!r}: checkpoint shape {tuple(value.shape)} != model shape "
                f"{tuple(own[key].shape)} (changed head or input layer)",
                stacklevel=3,
            )
            continue
        kept[key] = value
    return kept


def log_missing_unexpected(source: str, result: Any) -> None:
    """Warn about missing and unexpected keys of a non-strict ``load_state_dict``."""
    if result.missing_keys:
        warnings.warn(f"pretrained={source!r}: missing keys (left at init): {list(result.missing_keys)}", stacklevel=3)
    if result.unexpected_keys:
        warnings.warn(f"pretrained={source!r}: unexpected keys (ignored): {list(result.unexpected_keys)}", stacklevel=3)


def load_pretrained(net: nn.Module, source: str, prefix: str = "model.") -> Any:
    """Load weights into ``net`` from a Lightning checkpoint, a plain state dict or a local Hugging Face folder.

    Args:
        net: the network to fill (``self.model`` of a module).
        source: a local path; a hub id is refused since the zoo never downloads.
        prefix: the prefix stripped from checkpoint keys (Lightning stores ``model.<key>``).

    Returns:
        The ``load_state_dict`` result (missing and unexpected keys), or the hook's result for a folder.
    """
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"pretrained={source!r}: no such local file or folder (the zoo never downloads)")
    if path.is_dir():
        if not hasattr(net, "load_hf"):
            raise ValueError(f"pretrained={source!r} is a folder, but {type(net).__name__} has no `load_hf` hook")
        return net.load_hf(path)
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(blob, dict):
        raise ValueError(f"pretrained={source!r}: expected a checkpoint or a state dict, found {type(blob).__name__}")
    raw = blob.get("state_dict", blob)
    state = {k.removeprefix(prefix): v for k, v in raw.items() if isinstance(v, torch.Tensor)}
    result = net.load_state_dict(drop_shape_mismatches(net, state), strict=False)
    log_missing_unexpected(source, result)
    return result
