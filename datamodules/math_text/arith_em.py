"""The embedded ``arith_em`` task of the moe_cap card: seeded arithmetic prompts with gold answers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zoo.core import checks

#: Operators the generator can draw.
ARITH_OPS: tuple[str, ...] = ("+", "-", "*")
#: Largest ``digits``: operands stay below 10**18, inside numpy's int64 draws.
MAX_DIGITS = 18
_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _draw_arith(rng: np.random.Generator, n: int, digits: int, ops: Sequence[str]) -> list[dict[str, str]]:
    """``n`` items from ``rng``; per item, in order: ``a``, ``b`` (one ``integers`` call each), then the op index."""
    high = 10**digits
    items = []
    for _ in range(n):
        a = int(rng.integers(0, high))
        b = int(rng.integers(0, high))
        op = ops[int(rng.integers(0, len(ops)))]
        items.append({"prompt": f"Q: {a}{op}{b}=? A:", "gold": str(_APPLY[op](a, b))})
    return items


def _check_arith(n_items: int, digits: int, ops: Sequence[str]) -> None:
    checks.integer(checks.data("n_items"), n_items)
    checks.integer(checks.data("digits"), digits, 1, MAX_DIGITS)
    if not ops:
        raise ValueError(f"--data.init_args.ops is empty; expected a non-empty subset of {list(ARITH_OPS)}")
    if unknown := [op for op in ops if op not in ARITH_OPS]:
        raise ValueError(f"--data.init_args.ops: unknown operator(s) {unknown}; expected a subset of {list(ARITH_OPS)}")
    if len(set(ops)) != len(ops):
        raise ValueError(
            f"--data.init_args.ops={list(ops)} repeats an operator; ops are drawn uniformly, list each once"
        )


def arith_em_splits(
    n_items: int, n_train: int, digits: int = 2, ops: Sequence[str] = ("+", "-"), seed: int = 0
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Evaluation and training items of ``arith_em`` from one ``numpy.random.default_rng(seed)``.

    The ``n_items`` evaluation items are drawn first, then the ``n_train`` training items from the same generator, so
    the evaluation items do not depend on ``n_train`` and equal :func:`arith_em_items` with the same arguments.

    Args:
        n_items: evaluation items.
        n_train: training items (may be 0).
        digits: operands are uniform integers in ``[0, 10**digits)``.
        ops: operators, drawn uniformly (a subset of ``"+"``, ``"-"``, ``"*"``).
        seed: the generator's seed.

    Returns:
        ``(eval_items, train_items)``.
    """
    _check_arith(n_items, digits, ops)
    checks.integer(checks.data("n_train"), n_train, low=0)
    checks.integer(checks.data("seed"), seed, low=0)  # numpy's generators take no negative seed
    rng = np.random.default_rng(seed)
    return _draw_arith(rng, n_items, digits, ops), _draw_arith(rng, n_train, digits, ops)


def arith_em_items(
    n_items: int = 64, digits: int = 2, ops: Sequence[str] = ("+", "-"), seed: int = 0
) -> list[dict[str, str]]:
    """The card's ``arith_em`` items: ``{"prompt": "Q: {a}{op}{b}=? A:", "gold": str(a op b)}``.

    One ``numpy.random.default_rng(seed)``; draw order, per item: ``a = rng.integers(0, 10**digits)``, then ``b`` the
    same way, then the operator ``ops[rng.integers(0, len(ops))]``. Golds may be negative
    (``"Q: 3-7=? A:"`` -> ``"-4"``). Same arguments, same items; the first ``n`` items do not depend on ``n_items``.

    Args:
        n_items: number of items.
        digits: operands are uniform integers in ``[0, 10**digits)``.
        ops: operators, drawn uniformly (a subset of ``"+"``, ``"-"``, ``"*"``).
        seed: the generator's seed.

    Returns:
        The items, in draw order.
    """
    return arith_em_splits(n_items, 0, digits, ops, seed)[0]
