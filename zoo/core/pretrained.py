"""Loading pretrained weights for fine-tuning (never downloads)."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.core.cache import cache_dir
from zoo.core.messages import say
from zoo.core.structure import STRUCTURE_KEY, apply_structure

#: Repository root (configs/ lives here), for recipe paths given relative to it.
ROOT = Path(__file__).resolve().parents[2]


def find_source(source: str) -> Path:
    """``source`` as given, else relative to the repository root (recipes named as ``configs/...``)."""
    path = Path(source)
    if not path.exists() and not path.is_absolute() and (ROOT / path).exists():
        return ROOT / path
    return path


def is_recipe(source: str) -> bool:
    """Whether a ``pretrained`` source names a training recipe (a zoo YAML config) rather than weights."""
    return Path(source).suffix in (".yaml", ".yml")


def recipe_cache_path(recipe: str | Path) -> Path:
    """Where the checkpoint a recipe trains is cached: ``$ZOO_CACHE/pretrained/<stem>-<sha256[:16]>.ckpt``.

    Only looks; training happens in the CLI (:func:`zoo.core.cli.train_recipe`) before any module is built.
    """
    path = find_source(str(recipe))
    if not path.is_file():
        raise FileNotFoundError(f"pretrained={str(recipe)!r}: no such recipe file (looked in . and {ROOT})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return cache_dir("pretrained") / f"{path.stem}-{digest}.ckpt"


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


def load_pretrained(
    net: nn.Module,
    source: str,
    prefix: str = "model.",
    on_structure: Callable[[dict[str, Any]], None] | None = None,
) -> Any:
    """Load weights into ``net`` from a checkpoint, a state dict, a local Hugging Face folder or a recipe.

    A recipe is a ``.yaml`` zoo config whose checkpoint the CLI trained and cached (:func:`recipe_cache_path`); a
    constructor never trains it.

    A checkpoint of a structurally changed network (``zoo_structure``, e.g. pruned and merged) first reshapes
    ``net`` to match.

    Args:
        net: the network to fill (``self.model`` of a module).
        source: a local path; a hub id is refused since the zoo never downloads.
        prefix: the prefix stripped from checkpoint keys (Lightning stores ``model.<key>``).
        on_structure: called with the checkpoint's structure record when it has one.

    Returns:
        The ``load_state_dict`` result (missing and unexpected keys), or the hook's result for a folder.
    """
    path = find_source(source)
    if is_recipe(source):
        path = recipe_cache_path(path)
        if not path.exists():
            raise FileNotFoundError(
                f"pretrained={source!r} is a training recipe that has not been trained yet: `zoo fit` trains and "
                f"caches it before building the module ({path}); from Python, call "
                f"zoo.core.cli.train_recipe({source!r}) first"
            )
    if not path.exists():
        raise FileNotFoundError(f"pretrained={source!r}: no such local file or folder (the zoo never downloads)")
    if path.is_dir():
        if not hasattr(net, "load_hf"):
            raise ValueError(f"pretrained={source!r} is a folder, but {type(net).__name__} has no `load_hf` hook")
        result = net.load_hf(path)
        say(f"pretrained={source}: loaded the Hugging Face model in {path}")
        return result
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(blob, dict):
        raise ValueError(f"pretrained={source!r}: expected a checkpoint or a state dict, found {type(blob).__name__}")
    if blob.get(STRUCTURE_KEY) is not None:
        apply_structure(net, blob[STRUCTURE_KEY])
        if on_structure is not None:
            on_structure(blob[STRUCTURE_KEY])
    raw = blob.get("state_dict", blob)
    state = {k.removeprefix(prefix): v for k, v in raw.items() if isinstance(v, torch.Tensor)}
    kept = drop_shape_mismatches(net, state)
    result = net.load_state_dict(kept, strict=False)
    log_missing_unexpected(source, result)
    loaded, total = len(kept) - len(result.unexpected_keys), len(net.state_dict())
    notes = [f"{n} {what}" for n, what in ((len(state) - len(kept), "dropped (shape)"),
             (len(result.missing_keys), "missing"), (len(result.unexpected_keys), "unexpected")) if n]  # fmt: skip
    say(f"pretrained={source}: loaded {loaded} of {total} tensors from {path}" + "".join(f"; {n}" for n in notes))
    return result
