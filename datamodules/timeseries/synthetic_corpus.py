"""KernelSynth-style synthetic pretraining corpus for the zoo's tiny time-series foundation model (after Chronos).

Every detail is a zoo choice (prune_finetune card, "Pretraining corpus"): ``num_series`` series of length ``T``
(default 4,096 x 512, float32, seed 0). Each series draws a domain period set uniformly from {24, 168}, {48, 336},
{96, 672}, {7, 30}, {52}, {12}, {4}. Exactly half (``num_series // 2``, at seeded positions) are Gaussian-process
samples, the rest parametric:

- GP: ``j ~ U{1..5}`` kernels from the bank (tau = |t - t'| in steps) Constant ``c^2`` (c ~ U(.1, 1)), Linear
  ``s^2 t t' / T^2`` (s ~ U(.1, 1), ours), RBF ``exp(-tau^2 / (2 l^2))`` (l in {T/20, T/5, T}), Periodic
  ``exp(-2 sin^2(pi tau / p) / l_p^2)`` (p from the domain set x U(.95, 1.05), l_p in {.5, 1, 2}),
  RationalQuadratic (alpha = 1) ``(1 + tau^2 / (2 l^2))^-1`` (l in {T/10, T/2}), White ``s_w^2 [tau = 0]``
  (s_w in {.01, .1}); with probability 0.8 one of the j (at a random position) is a domain Periodic; they are
  folded left to right with + or x (equal probability) and sampled as ``chol(K + 1e-6 I) z`` in float64.
- Parametric: ``mu + beta t / T + sum_p A_p sin(2 pi t / p + phi_p)`` over the domain periods (A_p ~ U(.2, 2)) plus
  stationary AR(1) or AR(2) noise; with probability 0.3 a random walk (step std .05), with probability 0.2 level
  shifts (Poisson(1) of them, sizes N(0, 1)). mu ~ N(0, 1), beta ~ U(-2, 2), AR reciprocal roots ~ U(-.9, .9) and the
  innovation std ~ U(.05, .5) are ours.

Speed: every kernel but Linear is stationary, so compositions are evaluated on the length-T lag vector and expanded to
the Toeplitz matrix once (a gather); only compositions with a Linear term are built as T x T matrices. Choleskys run
batched over chunks of 64 matrices. The corpus is cached as ``$ZOO_CACHE/tsfm/corpus_<hash>.npy`` keyed by the
generator settings (write-then-rename).

Example:
    >>> corpus = make_corpus(num_series=8, length=64, seed=0, cache=False)
    >>> corpus.shape, corpus.dtype
    ((8, 64), dtype('float32'))
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.timeseries.cache import atomic_write
from zoo.core.cache import cache_root
from zoo.core.messages import say

#: Domain period sets; each series draws one uniformly.
DOMAIN_PERIODS: tuple[tuple[int, ...], ...] = ((24, 168), (48, 336), (96, 672), (7, 30), (52,), (12,), (4,))
#: Kernel bank (drawn uniformly for each non-forced kernel).
KERNELS = ("constant", "linear", "rbf", "periodic", "rq", "white")
#: Bumped whenever the generator changes meaning (part of the cache key).
GENERATOR_VERSION = 1
#: Jitter added to the kernel diagonal before the Cholesky.
JITTER = 1e-6
#: GP matrices per batched Cholesky call (64 x 512 x 512 float64 = 128 MB).
_CHUNK = 64


# --------------------------------------------------------------------------------------------------------------
# layout
# --------------------------------------------------------------------------------------------------------------


def corpus_layout(num_series: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Which series are GP samples and which domain each one has (a pure function of ``(num_series, seed)``).

    Args:
        num_series: corpus size.
        seed: corpus seed.

    Returns:
        ``{"is_gp": bool (N,) with exactly N // 2 True, "domain": int64 (N,) index into DOMAIN_PERIODS}``.
    """
    rng = np.random.default_rng([seed, 0])
    is_gp = rng.permutation(num_series) < num_series // 2
    domain = rng.integers(0, len(DOMAIN_PERIODS), num_series)
    return {"is_gp": is_gp, "domain": domain}


# --------------------------------------------------------------------------------------------------------------
# Gaussian-process half
# --------------------------------------------------------------------------------------------------------------


def _draw_kernel(rng: np.random.Generator, kind: str, periods: Sequence[int], T: int) -> tuple[str, float, float]:
    """One kernel of the bank as ``(kind, a, b)`` with its drawn hyperparameters."""
    match kind:
        case "constant" | "linear":
            return kind, float(rng.uniform(0.1, 1.0)), 0.0
        case "rbf":
            return kind, float(rng.choice([T / 20, T / 5, T])), 0.0
        case "periodic":
            p = float(periods[rng.integers(len(periods))]) * float(rng.uniform(0.95, 1.05))
            return kind, p, float(rng.choice([0.5, 1.0, 2.0]))
        case "rq":
            return kind, float(rng.choice([T / 10, T / 2])), 0.0
        case "white":
            return kind, float(rng.choice([0.01, 0.1])), 0.0
    raise ValueError(f"unknown kernel {kind!r}")


def _draw_composition(rng: np.random.Generator, periods: Sequence[int], T: int) -> tuple[list, list[str]]:
    """``j ~ U{1..5}`` kernels (one a domain Periodic with probability 0.8) and the j - 1 joining operators."""
    j = int(rng.integers(1, 6))
    forced = int(rng.integers(j)) if rng.random() < 0.8 else -1
    kernels = []
    for i in range(j):
        kind = "periodic" if i == forced else KERNELS[rng.integers(len(KERNELS))]
        kernels.append(_draw_kernel(rng, kind, periods, T))
    ops = ["+" if rng.random() < 0.5 else "*" for _ in range(j - 1)]
    return kernels, ops


def _kernel_value(kernel: tuple[str, float, float], tau: np.ndarray, tt: np.ndarray) -> np.ndarray:
    """A stationary kernel on the lag vector ``tau`` (T,), or the Linear kernel as a (T, T) matrix."""
    kind, a, b = kernel
    match kind:
        case "constant":
            return np.full(tau.shape, a * a)
        case "linear":
            return (a * a) * tt
        case "rbf":
            return np.exp(-(tau**2) / (2 * a * a))
        case "periodic":
            return np.exp(-2 * np.sin(np.pi * tau / a) ** 2 / (b * b))
        case "rq":  # alpha = 1
            return 1.0 / (1.0 + tau**2 / (2 * a * a))
        case "white":
            return np.where(tau == 0, a * a, 0.0)
    raise ValueError(f"unknown kernel {kind!r}")


def _toeplitz(v: np.ndarray, out: np.ndarray) -> None:
    """Write the symmetric Toeplitz matrix ``out[i, j] = v[|i - j|]`` (a strided view copy, no index gather)."""
    T = len(v)
    w = np.concatenate([v[:0:-1], v])  # w[T - 1 + k] = v[|k|]
    out[...] = np.lib.stride_tricks.sliding_window_view(w, T)[::-1]


def _compose(kernels: list, ops: list[str], tau: np.ndarray, tt: np.ndarray, out: np.ndarray) -> None:
    """Fold the kernels with their operators into ``out`` (T, T); vectors stay 1-D until a matrix (Linear) joins."""
    value = _kernel_value(kernels[0], tau, tt)
    for op, kernel in zip(ops, kernels[1:]):
        other = _kernel_value(kernel, tau, tt)
        if value.ndim != other.ndim:  # expand the stationary side to its Toeplitz matrix
            if value.ndim == 1:
                _toeplitz(value, out)
                value = out.copy()
            else:
                _toeplitz(other, out)
                other = out.copy()
        value = value + other if op == "+" else value * other
    if value.ndim == 1:
        _toeplitz(value, out)
    else:
        out[...] = value


def _cholesky_sample(K: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``chol(K + 1e-6 I) z`` for a stack (B, T, T) (``K`` is modified); a failing matrix retries with 10x jitter."""
    diag = np.arange(K.shape[-1])
    K[:, diag, diag] += JITTER
    try:
        chol = np.linalg.cholesky(K)
    except np.linalg.LinAlgError:
        chol = np.empty_like(K)
        for i in range(len(K)):
            jitter = JITTER
            while True:
                try:
                    chol[i] = np.linalg.cholesky(K[i])
                    break
                except np.linalg.LinAlgError:
                    K[i, diag, diag] += 9 * jitter
                    jitter *= 10
                    if jitter > 1e-1:
                        raise
            if jitter != JITTER:
                warnings.warn(f"synthetic_tsfm: a GP kernel needed jitter {jitter:g} (not {JITTER:g}) to factorise")
    return np.matmul(chol, z[..., None])[..., 0]


def gp_series(domains: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """GP samples, one per domain index, drawn in order from ``rng`` (kernel composition, then z ~ N(0, I)).

    Args:
        domains: int (M,) indices into :data:`DOMAIN_PERIODS`.
        length: T.
        rng: generator (consumed in series order).

    Returns:
        float64 (M, T).
    """
    T = length
    t = np.arange(T, dtype=np.float64)
    tau = t.copy()  # lags 0..T-1
    tt = np.outer(t, t) / (T * T)
    specs, z = [], np.empty((len(domains), T))
    for i, d in enumerate(domains):
        specs.append(_draw_composition(rng, DOMAIN_PERIODS[int(d)], T))
        z[i] = rng.standard_normal(T)
    out = np.empty((len(domains), T))
    K = np.empty((min(_CHUNK, len(specs)), T, T))
    for lo in range(0, len(specs), _CHUNK):
        chunk = specs[lo : lo + _CHUNK]
        for i, (kernels, ops) in enumerate(chunk):
            _compose(kernels, ops, tau, tt, K[i])
        out[lo : lo + len(chunk)] = _cholesky_sample(K[: len(chunk)], z[lo : lo + len(chunk)])
    return out


# --------------------------------------------------------------------------------------------------------------
# parametric half
# --------------------------------------------------------------------------------------------------------------


def parametric_series(domains: np.ndarray, length: int, rng: np.random.Generator, burn_in: int = 200) -> np.ndarray:
    """Trend + seasonal sinusoids + stationary AR(1|2) noise, optional random walk and level shifts, vectorised.

    Args:
        domains: int (M,) indices into :data:`DOMAIN_PERIODS`.
        length: T.
        rng: generator.
        burn_in: AR warm-up steps discarded (the noise starts near stationarity).

    Returns:
        float64 (M, T).
    """
    M, T = len(domains), length
    t = np.arange(T, dtype=np.float64)
    mu = rng.normal(0.0, 1.0, M)
    beta = rng.uniform(-2.0, 2.0, M)
    out = mu[:, None] + beta[:, None] * t / T
    width = max(len(p) for p in DOMAIN_PERIODS)
    period = np.ones((M, width))
    present = np.zeros((M, width))
    for i, d in enumerate(domains):
        p = DOMAIN_PERIODS[int(d)]
        period[i, : len(p)], present[i, : len(p)] = p, 1.0
    amp = rng.uniform(0.2, 2.0, (M, width)) * present
    phase = rng.uniform(0.0, 2 * np.pi, (M, width))
    out += (amp[:, :, None] * np.sin(2 * np.pi * t / period[:, :, None] + phase[:, :, None])).sum(1)
    # AR(p) from reciprocal roots in (-0.9, 0.9): stationary by construction
    order2 = rng.random(M) < 0.5
    r1, r2 = rng.uniform(-0.9, 0.9, (2, M))
    r2 = np.where(order2, r2, 0.0)
    phi1, phi2 = r1 + r2, -r1 * r2
    sigma = rng.uniform(0.05, 0.5, M)
    eps = rng.normal(0.0, 1.0, (burn_in + T, M)) * sigma
    noise = np.zeros((burn_in + T + 2, M))
    for i in range(burn_in + T):  # vectorised over the M series
        noise[i + 2] = phi1 * noise[i + 1] + phi2 * noise[i] + eps[i]
    out += noise[2 + burn_in :].T
    walk = rng.random(M) < 0.3
    steps = rng.normal(0.0, 0.05, (M, T))
    out += np.where(walk[:, None], np.cumsum(steps, axis=1), 0.0)
    shifted = rng.random(M) < 0.2
    for i in np.flatnonzero(shifted):
        for _ in range(int(rng.poisson(1.0))):
            out[i, int(rng.integers(1, T)) :] += rng.normal(0.0, 1.0)
    return out


# --------------------------------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------------------------------


def _settings(num_series: int, length: int, seed: int) -> dict[str, Any]:
    return {
        "generator": "kernelsynth",
        "version": GENERATOR_VERSION,
        "num_series": num_series,
        "length": length,
        "seed": seed,
    }


def corpus_cache_path(num_series: int = 4096, length: int = 512, seed: int = 0) -> Path:
    """``$ZOO_CACHE/tsfm/corpus_<hash>.npy``, the hash over the generator settings and version.

    Args:
        num_series: corpus size.
        length: series length.
        seed: corpus seed.

    Returns:
        The cache file path (it may not exist yet).
    """
    key = hashlib.sha256(json.dumps(_settings(num_series, length, seed), sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "tsfm" / f"corpus_{key}.npy"


def _generate(num_series: int, length: int, seed: int) -> np.ndarray:
    layout = corpus_layout(num_series, seed)
    out = np.empty((num_series, length), dtype=np.float32)
    gp = layout["is_gp"]
    out[gp] = gp_series(layout["domain"][gp], length, np.random.default_rng([seed, 1]))
    out[~gp] = parametric_series(layout["domain"][~gp], length, np.random.default_rng([seed, 2]))
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out).all(1))[0])
        raise RuntimeError(f"synthetic_tsfm: series {bad} has non-finite values (seed={seed}); please report")
    return out


def make_corpus(num_series: int = 4096, length: int = 512, seed: int = 0, cache: bool = True) -> np.ndarray:
    """The seeded KernelSynth-style corpus (float32 (num_series, length)); cached under ``$ZOO_CACHE/tsfm``.

    Args:
        num_series: number of series N (half GP, half parametric).
        length: series length T.
        seed: corpus seed (same seed, same corpus, on every machine with the same numpy).
        cache: read/write ``corpus_cache_path(...)``; ``False`` always generates and writes nothing.

    Returns:
        float32 (N, T).
    """
    if num_series < 1 or length < 2:
        raise ValueError(f"make_corpus: num_series={num_series}, length={length}; expected >= 1 and >= 2")
    path = corpus_cache_path(num_series, length, seed)
    if cache and path.is_file():
        try:
            data = np.load(path, allow_pickle=False)
            if data.shape == (num_series, length) and data.dtype == np.float32:
                return data
        except (OSError, ValueError):
            pass
        warnings.warn(f"synthetic_tsfm: {path} is unreadable or has the wrong shape; regenerating it")
    start = time.perf_counter()
    data = _generate(num_series, length, seed)
    if cache:
        atomic_write(path, lambda tmp: _save_npy(tmp, data))
        say(f"synthetic_tsfm: generated the pretraining corpus once ({num_series} series x {length}, seed {seed}) in "
            f"{time.perf_counter() - start:.1f} s; cached {path}")  # fmt: skip
    return data


def _save_npy(target: Path, data: np.ndarray) -> None:
    with open(target, "wb") as fh:  # a file object: np.save would append ".npy" to a path
        np.save(fh, data, allow_pickle=False)
