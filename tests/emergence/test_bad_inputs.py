"""Bad input through the real `zoo` entry: every emergence on-disk format and value, one line, exit 2.

Each row runs `zoo fit -c configs/emergence/default.yaml <args> --trainer.fast_dev_run=1` in this process and expects
`zoo: error: <line>` as the last stderr line, before any update. The `.npz` files are written by the `files` fixture
into the test's folder, which is the working directory (conftest), so paths are relative. Unknown enum values
(`--model.init_args.second_layer=joint`) are refused by jsonargparse against the Literal type before the zoo's code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_user_error, bad_inputs

from datamodules.gaussian_teacher.teacher import make_teacher

CONFIG = ["fit", "-c", str(ROOT / "configs/emergence/default.yaml")]


def _t(name: str) -> str:
    return f"--data.init_args.teacher_path={name}"


def _d(name: str) -> str:
    return f"--data.init_args.dataset_path={name}"


ONE = "--data.init_args.n_replicas=1"
SAMPLES = ["--model.init_args.population_mode=false", ONE]

#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # teacher .npz (V P×d orthonormal rows, a P, a >= 0, Σa² = 1)
    ("teacher_missing_file", [_t("missing.npz")],
     "--data.init_args.teacher_path='missing.npz': no such file (expected an .npz with keys V (P×d), a (P,))"),
    ("teacher_not_npz", [_t("junk.npz")], "junk.npz: not an .npz archive (no zip header); write it with numpy.savez"),
    ("teacher_missing_a", [_t("no_a.npz")], "no_a.npz: missing key 'a'; found ['V'], expected V (P×d), a (P,)"),
    ("teacher_not_orthonormal", [_t("skew.npz")],
     "skew.npz: rows of 'V' are not orthonormal: max |VVᵀ − I| = 0.5; expected < 1e-6"),
    ("teacher_negative_a", [_t("neg.npz")], "neg.npz: key 'a' has a negative entry at p=1: -0.6; expected a >= 0"),
    ("teacher_norm", [_t("norm.npz")],
     "norm.npz: Σa² = 4 (deviation 3); expected 1 within 1e-6 (or set normalize: true)"),
    ("teacher_a_shape", [_t("a_shape.npz")], "a_shape.npz: key 'a' has shape (3,); expected (2,) to match V (P, d)"),
    ("teacher_nan", [_t("nan.npz")], "nan.npz: key 'V' has a non-finite value"),
    ("teacher_text", [_t("text.npz")], "text.npz: key 'a' has dtype <U32; expected real numbers"),
    ("teacher_and_dataset", [_t("ok.npz"), _d("data.npz")],
     "--data.init_args.teacher_path and dataset_path: give one (a dataset may carry V, a)"),
    # dataset .npz (X n×d, y n, optional V, a)
    ("dataset_missing_y", [_d("no_y.npz"), *SAMPLES],
     "no_y.npz: missing key 'y'; found ['X'], expected X (n×d), y (n,)"),
    ("dataset_y_length", [_d("short_y.npz"), *SAMPLES],
     "short_y.npz: key 'y' has shape (4,); expected (5,) to match X (n, d)"),
    ("dataset_X_1d", [_d("flat_x.npz"), *SAMPLES], "flat_x.npz: key 'X' has shape (5,); expected (n, d)"),
    ("dataset_inf", [_d("inf.npz"), *SAMPLES], "inf.npz: key 'X' has a non-finite value"),
    ("dataset_unknown_key", [_d("extra.npz"), *SAMPLES],
     "extra.npz: unknown key(s) ['w']; expected X, y and optional V, a"),
    ("dataset_V_without_a", [_d("v_only.npz"), *SAMPLES], "v_only.npz: has V without a; a teacher needs both"),
    ("dataset_V_width", [_d("v_width.npz"), *SAMPLES],
     "v_width.npz: key 'V' has shape (2, 4); expected (P, 3) to match X"),
    ("dataset_replicas", [_d("data.npz"), "--model.init_args.population_mode=false"],
     "--data.init_args.n_replicas=4: expected 1 with dataset_path (one sample on disk)"),
    # values: data
    ("P_above_d", ["--data.init_args.P=500"], "--data.init_args.P=500: expected an integer <= d=400 (orthonormal "
     "directions)"),
    ("beta_negative", ["--data.init_args.beta=-1"], "--data.init_args.beta=-1.0: expected a finite number >= 0"),
    ("batch_size_0", ["--data.init_args.batch_size=0"], "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("online_and_n_train", ["--data.init_args.online=true", "--data.init_args.n_train=10"],
     "--data.init_args.online=true with n_train: choose fresh samples (online) or a fixed sample (n_train), not "
     "both"),
    ("noise_negative", ["--data.init_args.label_noise_std=-0.1"],
     "--data.init_args.label_noise_std=-0.1: expected a finite number >= 0"),
    ("mix_missing", ["--data.init_args.activation=hermite_mix", "--model.init_args.activation=hermite_mix"],
     "--data.init_args.mix_coeffs=None: expected a list of finite c_k (index = degree k)"),
    ("mix_odd", ["--data.init_args.activation=hermite_mix", "--data.init_args.mix_coeffs=[0,0,0,0.5,1]"],
     "--data.init_args.mix_coeffs=[0.0, 0.0, 0.0, 0.5, 1.0]: odd degree(s) [3] nonzero; σ must be even"),
    # values: model
    ("lr_0", ["--model.init_args.lr=0"], "--model.init_args.lr=0.0: expected a finite number > 0"),
    ("m_0", ["--model.init_args.m=0"], "--model.init_args.m=0: expected an integer >= 1"),
    ("inner_steps_0", ["--model.init_args.inner_steps=0"], "--model.init_args.inner_steps=0: expected an integer >= 1"),
    ("lr_a_negative", ["--model.init_args.lr_a=-0.1"], "--model.init_args.lr_a=-0.1: expected a finite number > 0"),
    ("ridge_negative", ["--model.init_args.ridge=-1"], "--model.init_args.ridge=-1.0: expected a finite number >= 0"),
    ("activation_mismatch", ["--model.init_args.activation=he6"],
     "--model.init_args.activation='he6' differs from the data's activation='he4' (and mix_coeffs): set them equal"),
    ("population_with_online_data", ["--data.init_args.online=true"],
     "--model.init_args.population_mode=true needs population data; the datamodule is online (set "
     "--data.init_args.online=false, n_train=null, no dataset_path)"),
    ("samples_without_data", ["--model.init_args.population_mode=false"],
     "--model.init_args.population_mode=false needs samples: set --data.init_args.online=true or n_train"),
    # values: OverlapLogger (a listed callback: replaced by a second config file)
    ("logger_thresholds", ["-c", "thresholds.yaml"],
     "OverlapLogger.thresholds=[0.9, 0.3]: expected increasing values in (0, 1)"),
    ("logger_every_0", ["-c", "every_0.yaml"], "OverlapLogger.every_n_steps=0: expected an integer >= 1"),
]  # fmt: skip


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    """The malformed teacher and dataset files and callback configs of :data:`BAD_INPUTS`, in the working directory."""
    V, a = (t[0].numpy() for t in make_teacher(4, 2, 1.5, [0]))
    X = np.random.default_rng(0).normal(size=(5, 3))
    y = np.ones(5)

    def save(name: str, **arrays: np.ndarray) -> None:
        with open(tmp_path / name, "wb") as fh:
            np.savez(fh, **arrays)

    skew = V.copy()
    skew[1] = (V[0] + V[1] * np.sqrt(3)) / 2  # unit norm, ⟨v_0, v_1⟩ = 0.5
    nan = V.copy()
    nan[0, 0] = np.nan
    inf = X.copy()
    inf[2, 1] = np.inf
    for name, arrays in {
        "ok.npz": {"V": V, "a": a}, "no_a.npz": {"V": V}, "skew.npz": {"V": skew, "a": a},
        "neg.npz": {"V": V, "a": np.array([0.8, -0.6])}, "norm.npz": {"V": V, "a": 2 * a},
        "a_shape.npz": {"V": V, "a": np.ones(3) / np.sqrt(3)}, "nan.npz": {"V": nan, "a": a},
        "text.npz": {"V": V, "a": a.astype(str)}, "data.npz": {"X": X, "y": y},
        "no_y.npz": {"X": X}, "short_y.npz": {"X": X, "y": y[:4]}, "flat_x.npz": {"X": y, "y": y},
        "inf.npz": {"X": inf, "y": y}, "extra.npz": {"X": X, "y": y, "w": y},
        "v_only.npz": {"X": X, "y": y, "V": V[:, :3]}, "v_width.npz": {"X": X, "y": y, "V": V, "a": a},
    }.items():  # fmt: skip
        save(name, **arrays)
    (tmp_path / "junk.npz").write_text("V,a\n1,1\n")
    logger = "trainer:\n  callbacks:\n    - class_path: callbacks.overlap_logger.OverlapLogger\n"
    logger += "      init_args: {{{}}}\n"
    for name, args in (("thresholds", "thresholds: [0.9, 0.3]"), ("every_0", "every_n_steps: 0")):
        (tmp_path / f"{name}.yaml").write_text(logger.format(args))
    return tmp_path


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(files: Path, args: list[str], line: str, capsys) -> None:
    assert_user_error([*CONFIG, *args, "--trainer.fast_dev_run=1"], line, capsys)
