r"""MATH-style final answers: ``\boxed{}`` extraction, normalisation and sympy equivalence."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

#: Longest normalised answer that sympy mode will parse; longer strings compare as strings only.
MAX_SYMPY_CHARS = 200

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


# ----------------------------------------------------------------------------------------------------------------
# \boxed{...} extraction and normalisation
# ----------------------------------------------------------------------------------------------------------------


def _group_end(text: str, open_at: int) -> int | None:
    r"""Index just past the ``}`` matching the ``{`` at ``open_at``; None if unbalanced.

    A backslash escapes the next character, so ``\{`` and ``\}`` are not counted.
    """
    depth, i = 0, open_at
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _box_at(text: str, end: int) -> tuple[str, int] | None:
    """``(content, end index)`` of the argument of the box command ending at ``text[end]``; None if malformed."""
    i = end
    while i < len(text) and text[i] in " \t\n":
        i += 1
    if i < len(text) and text[i] == "{":
        close = _group_end(text, i)
        return None if close is None else (text[i + 1 : close - 1], close)
    if i > end and i < len(text):  # `\boxed 5` (minerva): a single token up to whitespace or `$`
        m = re.match(r"[^\s$]+", text[i:])
        if m:
            return m.group(0), i + m.end()
    return None


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (or ``\fbox{...}``) in ``text``.

    Nested braces are balanced (``\boxed{\frac{1}{2}}`` -> ``\frac{1}{2}``) and escaped braces ``\{``/``\}`` are
    not counted. As in MATH/minerva, ``\boxed 5`` (the command, whitespace, then one token up to whitespace or
    ``$``) gives ``5``. "Last" is the last command by position; if that one is unbalanced, the result is None.

    Args:
        text: a solution or a model completion.

    Returns:
        The content, verbatim; None if there is no box command or the last one is unbalanced or has no argument.
    """
    matches = list(_BOX_RE.finditer(text))
    if not matches:
        return None
    found = _box_at(text, matches[-1].end())
    return None if found is None else found[0]


def _strip_period(s: str) -> str:
    """Drop one trailing period (not an ellipsis ``..``)."""
    s = s.strip()
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    return s


def normalize_answer(s: str) -> str:
    r"""Normalise a final answer for comparison (card "Real formats"; conservative minerva subset).

    In order:

    1. remove every ``\$`` (an escaped dollar, i.e. a currency sign), then every ``$``;
    2. remove ``\left`` and ``\right`` (as whole commands, so ``\rightarrow`` stays) and the thin negative space
       ``\!``; rewrite ``\dfrac`` and ``\tfrac`` as ``\frac`` (lm-evaluation-harness minerva does the same);
    3. strip whitespace and one trailing period (an ellipsis ``..`` is kept);
    4. if the whole string is one ``\boxed{...}``/``\fbox{...}`` (or ``\boxed 5``), keep its content, then repeat
       step 3 (so ``\boxed{5}.`` and ``\boxed{5.}`` both give ``5``);
    5. collapse every run of whitespace to one space.

    Nothing else changes: case, ``\text{...}``, units, commas and ``=`` are kept.

    Args:
        s: the answer string.

    Returns:
        The normalised string.
    """
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)
    s = s.replace("\\!", "")
    s = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", s)
    s = _strip_period(s)
    m = _BOX_RE.match(s)
    if m:
        found = _box_at(s, m.end())
        if found is not None and found[1] == len(s):
            s = _strip_period(found[0])
    return re.sub(r"\s+", " ", s)


# ----------------------------------------------------------------------------------------------------------------
# equivalence
# ----------------------------------------------------------------------------------------------------------------


#: Multi-letter names allowed through to sympy; every other run of letters becomes single-letter symbols.
_NAMES = frozenset({"sqrt", "pi"})
#: LaTeX commands that become nothing (spacing) or an operator.
_DROP = frozenset({",", ";", ":", " ", "!", "left", "right"})
_OPS = {"cdot": "*", "times": "*", "div": "/", "pi": " pi "}


def _tex_arg(s: str, i: int) -> tuple[str, int] | None:
    r"""One macro argument at ``s[i:]``: a brace group's content, a command (``\pi``) or one character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return None
    if s[i] == "{":
        close = _group_end(s, i)
        return None if close is None else (s[i + 1 : close - 1], close)
    if s[i] == "\\":
        m = re.match(r"\\(?:[A-Za-z]+|.)", s[i:])
        return (m.group(0), i + m.end()) if m else None
    if s[i] == "}":
        return None
    return s[i], i + 1


def _tex_to_python(s: str) -> str | None:
    r"""Rewrite a small LaTeX subset as Python arithmetic; None for anything outside it.

    ``\frac{a}{b}`` -> ``((a)/(b))`` (also ``\frac12``), ``\sqrt{x}`` -> ``sqrt((x))``, ``\sqrt[n]{x}`` ->
    ``((x)**(1/(n)))``, ``^`` -> ``**``, ``{``/``}`` -> ``(``/``)``, ``\pi`` -> ``pi``, ``\cdot``/``\times`` ->
    ``*``, ``\div`` -> ``/``; spacing commands vanish. Any other command gives None.
    """
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", s[i:])
            if m is None:
                return None
            name, i = m.group(1), i + m.end()
            if name == "frac":
                num = _tex_arg(s, i)
                den = None if num is None else _tex_arg(s, num[1])
                if num is None or den is None:
                    return None
                a, b = _tex_to_python(num[0]), _tex_to_python(den[0])
                if a is None or b is None:
                    return None
                out.append(f"(({a})/({b}))")
                i = den[1]
            elif name == "sqrt":
                index = None
                while i < len(s) and s[i] == " ":
                    i += 1
                if i < len(s) and s[i] == "[":
                    close = s.find("]", i)
                    if close < 0:
                        return None
                    index, i = _tex_to_python(s[i + 1 : close]), close + 1
                    if index is None:
                        return None
                arg = _tex_arg(s, i)
                x = None if arg is None else _tex_to_python(arg[0])
                if arg is None or x is None:
                    return None
                out.append(f" sqrt(({x})) " if index is None else f"(({x})**(1/({index})))")
                i = arg[1]
            elif name in _OPS:
                out.append(_OPS[name])
            elif name not in _DROP:
                return None
        elif c == "{":
            close = _group_end(s, i)
            inner = None if close is None else _tex_to_python(s[i + 1 : close - 1])
            if close is None or inner is None:
                return None
            out.append(f"({inner})")
            i = close
        elif c == "}":
            return None
        else:
            out.append("**" if c == "^" else c)
            i += 1
    return "".join(out)


def _to_code(s: str) -> str | None:
    """Python source for sympy, or None when ``s`` is outside the safe subset.

    After the LaTeX rewrite only digits, letters, ``+-*/().`` and spaces may remain; thousands separators
    (``1,000``) are dropped first. A run of letters other than ``sqrt``/``pi`` is split into single-letter symbols,
    so no other name (``eval``, ``open``, ...) ever reaches ``eval``.
    """
    if re.fullmatch(r"\s*-?\d{1,3}(,\d{3})+(\.\d+)?\s*", s):
        s = s.replace(",", "")
    code = _tex_to_python(s)
    if code is None or not code.strip() or not re.fullmatch(r"[0-9A-Za-z+\-*/(). ]*", code):
        return None
    return re.sub(r"[A-Za-z]+", lambda m: f" {m.group(0) if m.group(0) in _NAMES else ' '.join(m.group(0))} ", code)


def _too_big(expr: Any) -> bool:
    """Whether ``expr`` (parsed unevaluated) has a power that would be expensive to evaluate or simplify.

    Refused: a numeric exponent above 1000 in magnitude, or a numeric power with more than ~10,000 digits.
    """
    import sympy

    for node in sympy.preorder_traversal(expr):
        if not isinstance(node, sympy.Pow) or node.exp.free_symbols:
            continue
        e = complex(sympy.N(node.exp, 15))
        if not math.isfinite(abs(e)) or abs(e) > 1000:
            return True
        if not node.base.free_symbols:
            b = complex(sympy.N(node.base, 15))
            if not math.isfinite(abs(b)) or abs(e) * math.log10(max(abs(b), 2.0)) > 10_000:
                return True
    return False


def _parse(code: str) -> Any:
    """Parse safe ``code`` (from :func:`_to_code`) with a restricted namespace; raises on failure."""
    import sympy
    from sympy.parsing.sympy_parser import implicit_multiplication, parse_expr, standard_transformations

    names = {"__builtins__": {}, "sqrt": sympy.sqrt, "pi": sympy.pi}
    names |= {k: getattr(sympy, k) for k in ("Add", "Mul", "Pow", "Integer", "Float", "Rational", "Symbol")}
    letters = {c: sympy.Symbol(c) for c in set(re.findall(r"\b[A-Za-z]\b", code))}
    transformations = (*standard_transformations, implicit_multiplication)
    lazy = parse_expr(code, local_dict=dict(letters), global_dict=dict(names), transformations=transformations,
                      evaluate=False)  # fmt: skip
    if _too_big(lazy):
        raise ValueError("expression too large to evaluate")
    return parse_expr(code, local_dict=dict(letters), global_dict=dict(names), transformations=transformations)


def _sympy_equal(pred: str, ref: str) -> bool:
    """Whether ``pred - ref`` simplifies to zero; False on anything unparseable, too long or too large."""
    if len(pred) > MAX_SYMPY_CHARS or len(ref) > MAX_SYMPY_CHARS:
        return False
    codes = _to_code(pred), _to_code(ref)
    if codes[0] is None or codes[1] is None:
        return False
    try:
        import sympy

        a, b = _parse(codes[0]), _parse(codes[1])
        if not isinstance(a, sympy.Expr) or not isinstance(b, sympy.Expr):
            return False
        diff = sympy.simplify(a - b)
        return bool(diff == 0 or diff.is_zero)
    except Exception:  # any parser or simplifier failure means "not shown equal"
        return False


def answers_equivalent(pred: str, ref: str, mode: Literal["string", "sympy"] = "string") -> bool:
    r"""Whether a predicted answer matches the reference (card ``answer_equivalence``).

    ``string``: the :func:`normalize_answer` forms are equal. ``sympy``: the same, or else both normalised forms lie
    in a small LaTeX subset (numbers, single-letter variables, ``+ - * / ^``, braces and parentheses, ``\frac``,
    ``\sqrt``, ``\pi``, ``\cdot``, ``\times``, ``\div``, implicit multiplication such as ``2x``), each is at most
    :data:`MAX_SYMPY_CHARS` characters, and ``sympy.simplify(pred - ref)`` is zero. The subset is parsed with a
    restricted namespace (``sympy.parsing.latex`` needs antlr, and ``sympify`` on raw text would run arbitrary
    Python). Weird input never raises: it compares unequal. ``0.5`` equals ``\frac{1}{2}``; ``0.333`` does not
    equal ``\frac{1}{3}``.

    Args:
        pred: the predicted answer (e.g. ``last_boxed`` of a completion).
        ref: the reference answer.
        mode: ``string`` (default) or ``sympy``.

    Returns:
        Whether the two are judged equal.

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in ("string", "sympy"):
        raise ValueError(f"answer_equivalence={mode!r}: expected 'string' or 'sympy'")
    if not isinstance(pred, str) or not isinstance(ref, str):
        return False
    p, r = normalize_answer(pred), normalize_answer(ref)
    if p == r:
        return True
    match mode:
        case "string":
            return False
        case "sympy":
            return _sympy_equal(p, r)
