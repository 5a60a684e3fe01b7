"""The oracle optimum ``g* = max_x g(f(x))``, the random median ``g_rand`` and the normalised utility U.

Card ``bope_monne``, sections Data (oracle optimum) and Metrics: ``U(x) = (g(f(x)) − g_rand)/(g* − g_rand)``.
The oracle does ``restarts`` L-BFGS-B runs (scipy, autograd gradients, bounds = the box), each started from the best
of ``raw`` scrambled Sobol designs (seed ``seed + restart``). Results are cached per (problem, utility) in the process
and in ``$ZOO_CACHE/bope_monne/oracle-<problem>-<utility>.json``; a cache file that does not hold a design in the box
whose recomputed utility equals the stored one is recomputed, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.quasirandom import SobolEngine

from datamodules.multiobjective.problems import OutcomeProblem
from zoo.core.cache import cache_dir
from zoo.core.messages import say

#: Bumped when the search changes, so older cache files are recomputed.
ORACLE_VERSION = 1
#: Relative tolerance between a cached g* and its recomputation at the cached x*.
CACHE_RTOL = 1e-9

_MEMO: dict[str, tuple[Tensor, float]] = {}


def _utility_name(utility: nn.Module) -> str:
    return getattr(utility, "name", "") or type(utility).__name__.lower()


def _fingerprint(problem: OutcomeProblem, utility: nn.Module, restarts: int, raw: int, seed: int) -> str:
    """A key that changes with the problem, the utility's class and constants, and the search settings."""
    digest = hashlib.sha256(repr((ORACLE_VERSION, problem, type(utility).__qualname__, restarts, raw, seed)).encode())
    for key, buffer in sorted(utility.state_dict().items()):
        digest.update(key.encode())
        digest.update(buffer.detach().to(torch.float64).cpu().numpy().tobytes())
    return digest.hexdigest()


def sobol_designs(problem: OutcomeProblem, n: int, seed: int) -> Tensor:
    """``n`` scrambled Sobol designs (``SobolEngine(d, scramble=True, seed=seed)``) scaled to the box, float64."""
    lo, hi = problem.bounds()
    unit = SobolEngine(problem.d, scramble=True, seed=seed).draw(n, dtype=torch.float64)
    return lo + (hi - lo) * unit


def _value(problem: OutcomeProblem, utility: nn.Module, x: Tensor) -> float:
    with torch.no_grad():
        return float(utility(problem(x)))


def _search(problem: OutcomeProblem, utility: nn.Module, restarts: int, raw: int, seed: int) -> tuple[Tensor, float]:
    """The multi-start L-BFGS-B search (no cache)."""
    import numpy as np
    from scipy.optimize import minimize

    box = problem.bounds().T.numpy().tolist()

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        value = -utility(problem(xt))
        (grad,) = torch.autograd.grad(value, xt)
        return float(value.detach()), grad.numpy()

    best_x, best_g = None, -math.inf
    for restart in range(restarts):
        start = sobol_designs(problem, raw, seed + restart)
        with torch.no_grad():
            x0 = start[utility(problem(start)).argmax()]
        result = minimize(objective, x0.numpy(), jac=True, method="L-BFGS-B", bounds=box)
        for x in (torch.tensor(result.x, dtype=torch.float64), x0):  # the start when L-BFGS-B ends lower (a kink)
            g = _value(problem, utility, x)
            if g > best_g:
                best_x, best_g = x, g
    return best_x, best_g


def _read_cache(path: Path, problem: OutcomeProblem, utility: nn.Module, key: str) -> tuple[Tensor, float] | None:
    """The cached (x*, g*), or ``None`` when the file is missing, unreadable or does not check out."""
    if not path.is_file():
        return None
    try:
        blob = json.loads(path.read_text())
        if blob["fingerprint"] != key:
            raise ValueError("computed for other settings")
        x = torch.tensor(blob["x"], dtype=torch.float64)
        g = float(blob["g"])
        lo, hi = problem.bounds()
        if x.shape != (problem.d,) or not (bool(((x >= lo) & (x <= hi)).all()) and math.isfinite(g)):
            raise ValueError("x* is not a design in the box")
        if not math.isclose(_value(problem, utility, x), g, rel_tol=CACHE_RTOL, abs_tol=CACHE_RTOL):
            raise ValueError("g* does not match g(f(x*))")
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        say(f"{path}: oracle cache not usable ({type(exc).__name__}: {exc}); recomputing it")
        return None
    return x, g


def _write_cache(path: Path, problem: OutcomeProblem, utility: nn.Module, key: str, x: Tensor, g: float) -> None:
    blob = {"problem": problem.name, "utility": _utility_name(utility), "fingerprint": key, "x": x.tolist(), "g": g}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(blob, indent=1))
    os.replace(tmp, path)  # atomic: parallel workers never read a half-written file


def cache_path(problem: OutcomeProblem, utility: nn.Module) -> Path:
    """``$ZOO_CACHE/bope_monne/oracle-<problem>-<utility>.json``."""
    return cache_dir("bope_monne") / f"oracle-{problem.name}-{_utility_name(utility)}.json"


def clear_memo() -> None:
    """Forget the in-process oracle results (the files stay)."""
    _MEMO.clear()


def optimum(problem: OutcomeProblem, utility: nn.Module, restarts: int = 10, raw: int = 128,
            seed: int = 0) -> tuple[Tensor, float]:  # fmt: skip
    """The oracle optimum of ``g(f(x))`` over the box.

    Args:
        problem: the outcome function.
        utility: the true utility ``g``.
        restarts: L-BFGS-B runs.
        raw: Sobol designs per restart, the best of which starts it.
        seed: Sobol seed of the first restart (restart r uses ``seed + r``).

    Returns:
        ``x*`` float64 ``(d,)`` and ``g* = g(f(x*))``.
    """
    key = _fingerprint(problem, utility, restarts, raw, seed)
    if key in _MEMO:
        x, g = _MEMO[key]
        return x.clone(), g
    path = cache_path(problem, utility)
    found = _read_cache(path, problem, utility, key)
    if found is None:
        found = _search(problem, utility, restarts, raw, seed)
        _write_cache(path, problem, utility, key, *found)
    _MEMO[key] = found
    return found[0].clone(), found[1]


def random_median(problem: OutcomeProblem, utility: nn.Module, n: int = 1024) -> float:
    """``g_rand``: the median of ``g(f(x))`` over ``n`` fixed Sobol designs (``SobolEngine(d, scramble=True, seed=0)``).

    For even ``n`` the median is the mean of the two middle values (``torch.quantile(·, 0.5)``).
    """
    with torch.no_grad():
        return float(torch.quantile(utility(problem(sobol_designs(problem, n, 0))), 0.5))


def normalised_utility(g: Tensor | float, g_star: float, g_rand: float) -> Tensor | float:
    """``U = (g − g_rand)/(g* − g_rand)``: 1 at the oracle optimum, 0 at the random median."""
    if not g_star > g_rand:
        raise ValueError(f"normalised_utility: g*={g_star} is not above g_rand={g_rand}; U is undefined")
    return (g - g_rand) / (g_star - g_rand)
