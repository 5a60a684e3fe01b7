"""Old path ``datamodules.synthetic_tsfm``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.timeseries.corpus_windows``
- ``datamodules.timeseries.pretrain_datamodule``
- ``datamodules.timeseries.synthetic_corpus``
"""

# ruff: noqa: F401

from datamodules.timeseries.corpus_windows import CorpusWindows, EpochWindowSampler
from datamodules.timeseries.pretrain_datamodule import TSFMPretrainDataModule
from datamodules.timeseries.synthetic_corpus import (
    DOMAIN_PERIODS,
    GENERATOR_VERSION,
    JITTER,
    KERNELS,
    _cholesky_sample,
    _compose,
    _draw_composition,
    corpus_cache_path,
    corpus_layout,
    gp_series,
    make_corpus,
    parametric_series,
)

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
