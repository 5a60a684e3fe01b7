"""Base LightningDataModule of the zoo and the data protocol callbacks rely on."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningDataModule


class ZooDataModule(LightningDataModule):
    """Base class for every zoo datamodule.

    Link sources (``input_dim``, ``num_classes``) default to ``None`` and are set in ``__init__`` from arguments or
    a cheap look at the file header, so that ``LightningCLI`` can link them into the model before ``setup()``.
    """

    #: Feature dimension linked into ``model.init_args.input_dim`` (``None`` when the model does not need it).
    input_dim: int | None = None
    #: Number of classes linked into ``model.init_args.num_classes``.
    num_classes: int | None = None
    #: Node-id space size (max id + 1) of graph data, linked into ``model.init_args.num_nodes``.
    num_nodes: int | None = None
    #: Smallest destination id of bipartite graph data, linked into ``model.init_args.dst_min``.
    dst_min: int | None = None
    #: Tokenizer vocabulary size of text data, linked into ``model.init_args.vocab_size``.
    vocab_size: int | None = None
    #: Input window length of forecasting data, linked into ``model.init_args.context_length``.
    context_length: int | None = None
    #: Forecast length of forecasting data, linked into ``model.init_args.horizon``.
    horizon: int | None = None


def require(datamodule: Any, method: str, who: str = "this callback") -> Any:
    """Return ``datamodule.<method>`` or raise an error naming the caller and the missing method.

    Args:
        datamodule: the trainer's datamodule (may be ``None``).
        method: name of the protocol method or attribute.
        who: the component that needs it, for the error message.
    """
    if datamodule is None:
        raise RuntimeError(f"{who} needs a datamodule providing `{method}`, but the trainer has no datamodule")
    if not hasattr(datamodule, method):
        raise AttributeError(
            f"{who} needs `{type(datamodule).__name__}.{method}`, which this datamodule does not provide"
        )
    return getattr(datamodule, method)
