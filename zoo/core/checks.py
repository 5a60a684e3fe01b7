"""Value checks at construction time that name the option a user set (issue #19).

Every module, datamodule and callback checks its shared hyperparameters (learning rates, batch sizes, epochs, fractions,
probabilities) in ``__init__`` with these helpers, so a bad value fails before any data is built, in one line that
names the option the way the user wrote it::

    --data.init_args.batch_size=0: expected an integer >= 1

The option is spelled by :func:`data`, :func:`model` or :func:`callback` (a callback has no single flag, so it is named
``<ClassName>.<field>``). Each check raises :class:`ValueError`; the ``zoo`` entry point prints it as
``zoo: error: <message>`` with exit code 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def data(name: str) -> str:
    """The flag of a datamodule argument: ``--data.init_args.<name>``."""
    return f"--data.init_args.{name}"


def model(name: str) -> str:
    """The flag of a module argument: ``--model.init_args.<name>``."""
    return f"--model.init_args.{name}"


def callback(owner: object | type, name: str) -> str:
    """A callback's argument, ``<ClassName>.<name>`` (a listed callback's argument has no single flag)."""
    cls = owner if isinstance(owner, type) else type(owner)
    return f"{cls.__name__}.{name}"


def fail(option: str, value: Any, expected: str) -> None:
    """Raise the one-line message ``<option>=<value!r>: expected <expected>``."""
    raise ValueError(f"{option}={value!r}: expected {expected}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def integer(option: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """``value`` is an integer in ``[low, high]`` (``high`` None: unbounded); returned unchanged."""
    if not (_is_int(value) and value >= low and (high is None or value <= high)):
        fail(option, value, f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]")
    return value


def optional_integer(option: str, value: Any, low: int = 1, high: int | None = None) -> int | None:
    """``None`` or :func:`integer`."""
    return None if value is None else integer(option, value, low, high)


def number(
    option: str, value: Any, low: float | None = None, high: float | None = None, *, open_low: bool = False,
    open_high: bool = False,
) -> float:  # fmt: skip
    """``value`` is a finite real number within the bounds (closed unless ``open_low``/``open_high``)."""
    ok = _is_real(value)
    if ok and low is not None:
        ok = value > low if open_low else value >= low
    if ok and high is not None:
        ok = value < high if open_high else value <= high
    if not ok:
        fail(option, value, _interval(low, high, open_low, open_high))
    return value


def positive(option: str, value: Any) -> float:
    """A finite number > 0 (a step size, a temperature, a scale)."""
    return number(option, value, 0.0, open_low=True)


def non_negative(option: str, value: Any) -> float:
    """A finite number >= 0 (a learning rate may be 0 to freeze, a weight decay, a penalty weight)."""
    return number(option, value, 0.0)


def probability(option: str, value: Any, *, open_low: bool = False, open_high: bool = False) -> float:
    """A number in ``[0, 1]`` (a rate, a fraction, a probability); ``open_low``/``open_high`` exclude an end."""
    return number(option, value, 0.0, 1.0, open_low=open_low, open_high=open_high)


def choice(option: str, value: Any, allowed: Iterable[Any]) -> Any:
    """``value`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        fail(option, value, "one of " + ", ".join(repr(a) for a in allowed))
    return value


def _interval(low: float | None, high: float | None, open_low: bool, open_high: bool) -> str:
    if low is not None and high is not None:
        return f"a number in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    if low is not None:
        return f"a finite number {'>' if open_low else '>='} {low:g}"
    if high is not None:
        return f"a finite number {'<' if open_high else '<='} {high:g}"
    return "a finite number"


__all__ = [
    "callback", "choice", "data", "fail", "integer", "model", "non_negative", "number", "optional_integer",
    "positive", "probability",
]  # fmt: skip
