"""Base LightningDataModule of the zoo and the data protocol callbacks rely on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Sampler

#: The data -> model links: each name is a :class:`ZooDataModule` attribute (``None`` unless the data sets it), linked
#: by the CLI into ``model.init_args.<name>`` right after the datamodule is built. A method adds a name through its
#: manifest's ``shapes`` (see :func:`shape_names`), never by editing the CLI.
SHAPES: tuple[str, ...] = (
    "input_dim",
    "num_classes",
    "num_nodes",
    "dst_min",
    "vocab_size",
    "context_length",
    "horizon",
    "n_states",
    "n_actions",
    "n_replicas",
    "n_agents",
    "n_arms",
)


def shape_names() -> tuple[str, ...]:
    """:data:`SHAPES` followed by the names the methods' manifests add (each once)."""
    from zoo.core.registry import manifests

    extra = [name for m in manifests().values() for name in m.shapes]
    return tuple(dict.fromkeys((*SHAPES, *extra)))


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
    #: Number of states of a tabular MDP, linked into ``model.init_args.n_states``.
    n_states: int | None = None
    #: Number of actions of a tabular MDP, linked into ``model.init_args.n_actions``.
    n_actions: int | None = None
    #: Number of independent replica streams simulated side by side, linked into ``model.init_args.n_replicas``.
    n_replicas: int | None = None
    #: Number of agents of a multi-agent problem (graph nodes), linked into ``model.init_args.n_agents``.
    n_agents: int | None = None
    #: Number of bandit arms, linked into ``model.init_args.n_arms``.
    n_arms: int | None = None

    def __getattr__(self, name: str) -> Any:
        """A shape a manifest declares and this datamodule does not set is ``None``, like the ones above."""
        if not name.startswith("_") and name in shape_names():
            return None
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


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


class EpochSeededSampler(Sampler[int]):
    """A random permutation per epoch drawn from ``(seed, epoch)``: shuffles are reproducible and resume exactly.

    Lightning calls :meth:`set_epoch` before each epoch, so ``fit`` for 2 epochs equals ``fit`` 1 + resume 1. ``skip``
    drops the first indices of the *first* pass only: a run resumed mid-epoch continues the same permutation.

    Args:
        n: dataset length.
        seed: base seed.
        skip: indices of the first pass already consumed before a mid-epoch checkpoint.
    """

    def __init__(self, n: int, seed: int, skip: int = 0) -> None:
        self.n, self.seed, self.epoch, self.skip = n, seed, 0, skip

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's permutation."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist()
        skip, self.skip = self.skip, 0
        return iter(order[skip:])


class SplitLoaders:
    """Mixin for datamodules with ``train``/``val``/``test`` splits served by one ``_loader(split)`` method."""

    #: Training batches of the current epoch already consumed, for the next training loader (mid-epoch resume).
    _train_skip_batches: int = 0

    def _loader(self, split: str) -> DataLoader:
        raise NotImplementedError

    def resume_train_at(self, batches: int) -> None:
        """Make the next training loader start ``batches`` batches into the epoch's permutation.

        Lightning restarts a non-resumable loader at the start of the epoch after a mid-epoch checkpoint; a callback
        that counted the consumed batches (``PruneThenFinetune``) calls this so the resumed run sees exactly the
        batches the interrupted one had not (single device).
        """
        self._train_skip_batches = int(batches)

    def _train_sampler(self, n: int, seed: int, batch_size: int) -> EpochSeededSampler:
        """The training sampler, consuming a pending :meth:`resume_train_at` offset."""
        skip, self._train_skip_batches = self._train_skip_batches * batch_size, 0
        return EpochSeededSampler(n, seed, skip=skip)

    def train_dataloader(self) -> DataLoader:
        """The training split (a fresh ``(seed, epoch)`` permutation per epoch when the datamodule shuffles)."""
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        """The validation split, in order, ``eval_batch_size`` per batch."""
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        """The test split, in order, ``eval_batch_size`` per batch."""
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        """The test split."""
        return self._loader("test")
