"""Callback contracts as typing Protocols: a module or datamodule missing a member fails where the callback starts.

Each error names the callback, the class and every missing member (``Class.member``), before any training.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Protocol

import pytest

from callbacks.backdoor_defense import CleanData, Defendable, RepGuardCallback
from callbacks.moe_cap import ReportsAccuracy, _accuracy
from callbacks.prune_finetune import Prunable, PruneThenFinetune
from callbacks.span_logger import KGridModule, SpanSeminormLogger
from callbacks.unlearning import Unlearnable, UnlearningCallback, UnlearningData
from zoo.core.protocols import check, members


class Bare:
    """A module or datamodule with none of the members any callback needs."""

    hparams: dict = {}


def test_members_and_the_error_name_the_callback_the_class_and_each_missing_member() -> None:
    class Needs(Protocol):
        size: int

        def run(self, x: Any) -> None: ...

    class More(Needs, Protocol):
        def stop(self) -> None: ...

    assert members(More) == ("size", "run", "stop")
    with pytest.raises(AttributeError, match=r"^SomeCallback needs the module to follow More: `Bare.size`, "
                                             r"`Bare.run`, `Bare.stop` missing"):  # fmt: skip
        check(Bare(), More, "SomeCallback")
    with pytest.raises(RuntimeError, match=r"SomeCallback needs a datamodule providing `size`, `run`, `stop`"):
        check(None, More, "SomeCallback", "datamodule")
    full = SimpleNamespace(size=1, run=print, stop=print)
    assert check(full, More, "X") is full
    with pytest.raises(AttributeError, match=r"X needs the module to follow More: `SimpleNamespace.extra_member` "):
        check(full, More, "X", extra=("extra_member",))


@pytest.mark.parametrize(
    ("callback", "protocol", "who"),
    [
        (UnlearningCallback(strategy="scrub"), Unlearnable, "UnlearningCallback(strategy=scrub)"),
        (PruneThenFinetune(), Prunable, "PruneThenFinetune"),
        (RepGuardCallback(), Defendable, "RepGuardCallback(stage=train_time)"),
        (SpanSeminormLogger(), KGridModule, "SpanSeminormLogger"),
    ],
)
def test_a_module_missing_members_is_named_at_setup(callback: Any, protocol: type, who: str) -> None:
    """Every member of the callback's module protocol is listed, with the callback's name."""
    trainer = SimpleNamespace(datamodule=None, world_size=1, max_epochs=1)
    with pytest.raises(AttributeError) as err:
        callback.setup(trainer, Bare(), "fit")
    message = str(err.value)
    assert message.startswith(f"{who} needs the module to follow {protocol.__name__}")
    assert all(f"`Bare.{m}`" in message for m in members(protocol))
    if isinstance(callback, UnlearningCallback):  # the strategy's own needs are named too
        assert "`Bare.distill_loss`" in message and "`Bare.model`" in message


def test_a_datamodule_missing_members_is_named_at_setup() -> None:
    """The datamodule protocols: the unlearning phases, the span logger's ``steps``."""

    class Module:
        hparams: dict = {}
        gap_metrics = ()

        def forget_loss(self, batch: Any) -> Any: ...
        def retain_loss(self, batch: Any) -> Any: ...
        def unlearning_metrics(self, dm: Any) -> dict: ...
        def add_k_hook(self, ks: list[int], hook: Any) -> None: ...
        def metrics(self) -> dict: ...

    trainer = SimpleNamespace(datamodule=Bare(), world_size=1, max_epochs=1)
    expected = r"UnlearningCallback\(strategy=uam\) needs the datamodule to follow UnlearningData: `Bare.with_phase`, "
    with pytest.raises(AttributeError, match=expected + r"`Bare.split_info` missing"):
        UnlearningCallback().setup(trainer, Module(), "fit")
    with pytest.raises(AttributeError, match=r"SpanSeminormLogger\(k_max=None\) needs the datamodule .*`Bare.steps`"):
        SpanSeminormLogger().setup(trainer, Module(), "fit")
    with pytest.raises(RuntimeError, match="UnlearningCallback.*but the trainer has none"):
        UnlearningCallback().setup(SimpleNamespace(datamodule=None), Module(), "fit")
    assert isinstance(Module(), Unlearnable) and not isinstance(Bare(), UnlearningData)
    assert not isinstance(Bare(), CleanData)


def test_moecap_accuracy_is_an_optional_protocol() -> None:
    """A module with ``moecap_accuracy`` feeds the radar's accuracy axis; one without gives None."""

    class Scores:
        def moecap_accuracy(self, stage: str) -> dict[str, float]:
            return {"em": 1.0, "stage": stage}  # type: ignore[dict-item]

    assert isinstance(Scores(), ReportsAccuracy) and _accuracy(Scores(), "test") == {"em": 1.0, "stage": "test"}
    assert _accuracy(Bare(), "test") is None  # type: ignore[arg-type]
