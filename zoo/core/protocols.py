"""Checking the typing ``Protocol`` a callback expects of its module or datamodule, with one named error.

A callback declares what it needs as a ``Protocol`` next to itself (e.g. ``callbacks.unlearning.Unlearnable``) and
calls :func:`check` where it starts (``setup``), so a module that lacks a member fails before training with an error
naming the callback, the class and every missing member, instead of an ``AttributeError`` deep inside a step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


def members(protocol: type) -> tuple[str, ...]:
    """The members a ``Protocol`` class declares (methods, properties and annotated attributes), in order.

    Members of base protocols come first; names starting with ``_`` are left out.
    """
    names: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        for name in (*cls.__dict__.get("__annotations__", {}), *cls.__dict__):
            if not name.startswith("_"):  # dunders and typing's machinery (``_is_protocol``, ``_abc_impl``)
                names[name] = None
    return tuple(names)


def missing_members(obj: Any, protocol: type, extra: Iterable[str] = ()) -> list[str]:
    """The members of ``protocol`` (and the ``extra`` names) that ``obj`` lacks, in declaration order."""
    return [name for name in (*members(protocol), *extra) if not hasattr(obj, name)]


def check(obj: Any, protocol: type, who: str, what: str = "module", extra: Iterable[str] = ()) -> Any:
    """Return ``obj`` if it has every member of ``protocol``, else raise an error naming all that it lacks.

    Args:
        obj: the module or datamodule a callback drives (may be ``None`` for a missing datamodule).
        protocol: the ``typing.Protocol`` class the callback declares.
        who: the callback (with its deciding option when the needs depend on it), e.g. ``UnlearningCallback``.
        what: ``module`` or ``datamodule``, for the message.
        extra: further member names needed in this configuration (e.g. by the chosen strategy).

    Raises:
        RuntimeError: ``obj`` is ``None`` (the trainer has no datamodule).
        AttributeError: members are missing; the message names the callback, the class, the protocol and each
            missing member as ``Class.member``.
    """
    if obj is None:
        needed = ", ".join(f"`{m}`" for m in (*members(protocol), *extra))
        raise RuntimeError(f"{who} needs a {what} providing {needed} ({protocol.__name__}), but the trainer has none")
    if missing := missing_members(obj, protocol, extra):
        name = type(obj).__name__
        listed = ", ".join(f"`{name}.{m}`" for m in missing)
        raise AttributeError(
            f"{who} needs the {what} to follow {protocol.__name__}: {listed} missing (the {what} is {name}, "
            f"from {type(obj).__module__})"
        )
    return obj
