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
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from datamodules.ltsf import atomic_write, collate_windows, gather_windows
from zoo.core import ZooDataModule
from zoo.core.cache import cache_root

__all__ = [
    "DOMAIN_PERIODS",
    "CorpusWindows",
    "EpochWindowSampler",
    "TSFMPretrainDataModule",
    "corpus_cache_path",
    "corpus_layout",
    "gp_series",
    "make_corpus",
    "parametric_series",
]

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
    data = _generate(num_series, length, seed)
    if cache:
        atomic_write(path, lambda tmp: _save_npy(tmp, data))
    return data


def _save_npy(target: Path, data: np.ndarray) -> None:
    with open(target, "wb") as fh:  # a file object: np.save would append ".npy" to a path
        np.save(fh, data, allow_pickle=False)


# --------------------------------------------------------------------------------------------------------------
# windows and loaders
# --------------------------------------------------------------------------------------------------------------


class CorpusWindows(Dataset):
    """Windows of length L + H over corpus rows, addressed by flat ids ``series * n_starts + start``.

    With ``flat=None`` index i is the flat id itself (the training set, sampled by :class:`EpochWindowSampler`);
    otherwise index i maps to ``flat[i]`` (the fixed validation windows).

    Args:
        series: float32 (N, T) corpus tensor.
        n_starts: valid starts per series (T - L - H + 1).
        L: context length.
        H: horizon.
        first_series: series id of flat id 0.
        n_series: series covered.
        flat: optional int64 fixed flat ids.
    """

    def __init__(
        self,
        series: torch.Tensor,
        n_starts: int,
        L: int,
        H: int,
        first_series: int,
        n_series: int,
        flat: np.ndarray | None = None,
    ) -> None:
        self.series, self.n_starts, self.L, self.H = series, n_starts, L, H
        self.first_series, self.n_series = first_series, n_series
        self.flat = None if flat is None else torch.as_tensor(flat, dtype=torch.int64)

    def __len__(self) -> int:
        return self.n_series * self.n_starts if self.flat is None else len(self.flat)

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        if self.flat is not None:
            idx = self.flat[idx]
        rel = torch.div(idx, self.n_starts, rounding_mode="floor")
        start = idx - rel * self.n_starts
        channel = rel + self.first_series
        x, y = gather_windows(self.series, channel, start, self.L, self.H)
        return {"x": x, "y": y, "channel": channel, "start": start}

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}


class EpochWindowSampler(Sampler[int]):
    """``num_samples`` uniform window ids (with replacement) drawn from ``(seed, epoch)``.

    The same seed gives the same windows for an epoch; every epoch gets a fresh set. Lightning calls
    :meth:`set_epoch` before each epoch.

    Args:
        n: number of window ids.
        num_samples: windows per epoch.
        seed: base seed.
    """

    def __init__(self, n: int, num_samples: int, seed: int) -> None:
        self.n, self.num_samples, self.seed, self.epoch = n, num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's windows."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, 0x7E, self.epoch])
        return iter(rng.integers(0, self.n, self.num_samples).tolist())


def _check(flag: str, ok: bool, value: object, expected: str) -> None:
    """Raise a ValueError naming ``--data.init_args.<flag>`` when ``ok`` is false."""
    if not ok:
        raise ValueError(f"--data.init_args.{flag}={value!r}: expected {expected}")


class TSFMPretrainDataModule(ZooDataModule):
    """Random ``(series, start)`` windows of the synthetic corpus for TSFM pretraining (raw values, not scaled).

    Batches match :class:`datamodules.ltsf.LTSFDataModule`: ``x`` float32 (B, L), ``y`` float32 (B, H), ``channel``
    int64 (B,) (the corpus series index) and ``start`` int64 (B,). Values are raw: the model (PatchTST with
    ``scaling="std"``) normalises each window itself. The last ``val_series`` series are held out; validation uses
    ``val_windows`` fixed windows of them.

    Args:
        num_series: corpus size N.
        length: series length T (>= L + H).
        seed: corpus seed, also the seed of the window draws.
        context_length: L.
        horizon: H.
        batch_size: windows per batch (training and validation).
        steps_per_epoch: training batches per epoch (a fresh seeded set of windows each epoch).
        val_series: held-out series at the end of the corpus.
        val_windows: fixed validation windows drawn from the held-out series.
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        num_series: int = 4096,
        length: int = 512,
        seed: int = 0,
        context_length: int = 336,
        horizon: int = 96,
        batch_size: int = 64,
        steps_per_epoch: int = 500,
        val_series: int = 128,
        val_windows: int = 512,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        _check("num_series", num_series >= 2, num_series, ">= 2")
        _check("context_length", context_length >= 1, context_length, ">= 1")
        _check("horizon", horizon >= 1, horizon, ">= 1")
        _check("length", length >= context_length + horizon, length, f">= context_length + horizon = "
               f"{context_length + horizon}")  # fmt: skip
        _check("val_series", 1 <= val_series < num_series, val_series, f"in [1, num_series={num_series})")
        _check("val_windows", val_windows >= 1, val_windows, ">= 1")
        _check("batch_size", batch_size >= 1, batch_size, ">= 1")
        _check("steps_per_epoch", steps_per_epoch >= 1, steps_per_epoch, ">= 1")
        _check("num_workers", num_workers >= 0, num_workers, ">= 0")
        self.num_series, self.length, self.seed = num_series, length, seed
        self.context_length, self.horizon = context_length, horizon
        self.batch_size, self.steps_per_epoch = batch_size, steps_per_epoch
        self.val_series, self.val_windows, self.num_workers = val_series, val_windows, num_workers
        #: Starts per series, ``length - L - H + 1``.
        self.n_starts = length - context_length - horizon + 1
        #: Training series ``[0, num_series - val_series)``.
        self.n_train_series = num_series - val_series
        #: The corpus tensor float32 (N, T), after :meth:`setup`.
        self.corpus: torch.Tensor | None = None
        self.train_dataset: CorpusWindows | None = None
        self.val_dataset: CorpusWindows | None = None

    def setup(self, stage: str | None = None) -> None:
        """Load (or generate and cache) the corpus once and fix the validation windows.

        Args:
            stage: Lightning stage (unused).
        """
        if self.corpus is not None:
            return
        self.corpus = torch.from_numpy(make_corpus(self.num_series, self.length, self.seed))
        L, H = self.context_length, self.horizon
        self.train_dataset = CorpusWindows(self.corpus, self.n_starts, L, H, 0, self.n_train_series)
        rng = np.random.default_rng([self.seed, 0x7F])
        flat = rng.integers(0, self.val_series * self.n_starts, self.val_windows)
        self.val_dataset = CorpusWindows(self.corpus, self.n_starts, L, H, self.n_train_series, self.val_series, flat)

    def train_dataloader(self) -> DataLoader:
        """``steps_per_epoch`` batches of uniform (series, start) windows drawn from ``(seed, epoch)``."""
        self.setup()
        sampler = EpochWindowSampler(len(self.train_dataset), self.steps_per_epoch * self.batch_size, self.seed)
        return DataLoader(
            self.train_dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            collate_fn=collate_windows,
            num_workers=self.num_workers,
            pin_memory=False,
        )

    def val_dataloader(self) -> DataLoader:
        """The fixed validation windows of the held-out series, in draw order."""
        self.setup()
        return DataLoader(
            self.val_dataset,
            batch_size=self.batch_size,
            collate_fn=collate_windows,
            num_workers=self.num_workers,
            pin_memory=False,
        )
