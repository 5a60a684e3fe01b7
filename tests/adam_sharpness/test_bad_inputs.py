"""Bad input through the real `zoo` entry: every adam_sharpness on-disk format and value, one line, exit 2.

Each row runs `zoo fit -c configs/adam_sharpness/default.yaml <args> --trainer.fast_dev_run=1` in this process and
expects `zoo: error: <line>` as the last stderr line, before any step. Files are written by the shared
`table_files` fixture (:data:`FILES`) or by `arrays` below (the .npz), into the folder the rows call `{tmp}`.
Callback values come in a second config file (a listed callback has no single flag). A value of the wrong type
(``SharpnessLogger.blocks: layer``) is refused by jsonargparse against the type before the zoo's code runs, so it has
no row here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_user_error, bad_inputs

CONFIG = ["fit", "-c", str(ROOT / "configs/adam_sharpness/default.yaml")]
CB = "trainer:\n  callbacks:\n    - class_path: callbacks.{}\n      init_args: {{{}}}\n"


def _path(name: str) -> str:
    return f"--data.init_args.path={{tmp}}/{name}"


#: name -> text, written into {tmp} by the `table_files` fixture.
FILES = {
    "ok.csv": "z_0,z_1,y\n1,-1,0.5\n-1,1,-0.5\n1,1,0\n-1,-1,0\n1,-1,0.5\n",
    "no_y.csv": "z_0,z_1\n1,-1\n",
    "extra.csv": "z_0,z_1,z_5,y\n1,-1,1,0.5\n",
    "text.csv": "z_0,z_1,y\n1,a,0.5\n",
    "junk.npz": "Z,y\n1,2\n",
    "data.txt": "1 2 3\n",
    "exact_limit.yaml": CB.format("sharpness.SharpnessLogger", "method: exact, max_exact_params: 100"),
    "backpack.yaml": CB.format("sharpness.SharpnessLogger", "method: backpack"),
    "every_0.yaml": CB.format("sharpness.SharpnessLogger", "every_n_steps: 0"),
    "exponent_1.yaml": CB.format("sharpness.SharpnessLogger", "exponent: 1.0"),
    "delta_neg.yaml": CB.format("label_noise.LabelNoiseCallback", "delta: -0.5"),
    "flip_2.yaml": CB.format("label_noise.LabelNoiseCallback", "delta: 2.0, kind: flip"),
}

#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # .npz: Z (n×d), y (n,), optional w_star (d,), Z_test, y_test
    ("npz_missing_file", [_path("missing.npz")],
     "{tmp}/missing.npz: no such file (expected an .npz with keys Z, y and optional w_star, Z_test, y_test)"),
    ("npz_not_zip", [_path("junk.npz")], "{tmp}/junk.npz: not an .npz archive (no zip header); write it with "
     "numpy.savez"),
    ("npz_rows", [_path("rows.npz")], "{tmp}/rows.npz: Z has 19 rows but y has 20"),
    ("npz_missing_y", [_path("no_y.npz")],
     "{tmp}/no_y.npz: missing key(s) ['y']; found ['Z'], expected Z (n×d), y (n,) and optional w_star (d,), Z_test, "
     "y_test"),
    ("npz_unknown_key", [_path("extra.npz")],
     "{tmp}/extra.npz: unknown key(s) ['X']; expected Z, y, w_star, Z_test, y_test"),
    ("npz_w_star_shape", [_path("w.npz")], "{tmp}/w.npz: w_star has shape (3,); expected (4,) to match Z (20, 4)"),
    ("npz_nan", [_path("nan.npz")], "{tmp}/nan.npz: key 'Z' has a non-finite value at index (2, 1)"),
    ("npz_test_alone", [_path("half.npz")], "{tmp}/half.npz: Z_test and y_test come together; found only Z_test"),
    ("npz_test_width", [_path("tw.npz")], "{tmp}/tw.npz: Z_test has shape (5, 3); expected (m, 4) to match Z (20, 4)"),
    ("npz_text", [_path("str.npz")], "{tmp}/str.npz: key 'y' has dtype <U3; expected real numbers"),
    # CSV: z_0 … z_{d-1}, y
    ("csv_missing_y", [_path("no_y.csv")], "{tmp}/no_y.csv: missing column 'y'; expected columns z_0 … z_(d-1), y"),
    ("csv_extra_column", [_path("extra.csv")],
     "{tmp}/extra.csv: columns missing ['z_2']; extra ['z_5']; expected z_0 … z_2, y"),
    ("csv_text", [_path("text.csv")], "{tmp}/text.csv: key 'Z' has dtype object; expected real numbers"),
    ("path_suffix", [_path("data.txt")], "--data.init_args.path='{tmp}/data.txt': expected a .npz or .csv file"),
    # values: data
    ("k_above_d", ["--data.init_args.k=50"], "--data.init_args.k=50: expected an integer in [0, 40]"),
    ("n_0", ["--data.init_args.n=0"], "--data.init_args.n=0: expected an integer >= 1"),
    ("holdout_1", ["--data.init_args.holdout=1.0"], "--data.init_args.holdout=1.0: expected a number in (0, 1)"),
    # values: model
    ("lr_0", ["--model.init_args.lr=0"], "--model.init_args.lr=0.0: expected a finite number > 0"),
    ("beta2_negative", ["--model.init_args.lr=0.5", "--model.init_args.scheme=1"],
     "--model.init_args.C=10.0, scheme=1.0, lr=0.5: beta2 = 1 - C*lr^scheme = 1 - 10*0.5^1 = -4 <= 0: expected "
     "C*lr^scheme < 1 (lower C or lr, or raise scheme)"),
    ("beta1_1", ["--model.init_args.beta1=1.0"], "--model.init_args.beta1=1.0: expected a number in [0, 1)"),
    ("exponent_negative", ["--model.init_args.exponent=-0.5"],
     "--model.init_args.exponent=-0.5: expected a finite number >= 0"),
    ("exponent_with_sgd", ["--model.init_args.optimizer=sgd", "--model.init_args.exponent=0.5"],
     "--model.init_args.exponent=0.5 does not apply to optimizer='sgd' (it sets v^e of the AdaptiveGM presets; use "
     "adame)"),
    ("beta1_with_sgd", ["--model.init_args.optimizer=sgd", "--model.init_args.beta1=0.9"],
     "--model.init_args.beta1=0.9 does not apply to optimizer='sgd' (plain SGD has no momentum; use adame with "
     "exponent 0 for momentum)"),
    ("inner_steps_0", ["--model.init_args.inner_steps=0"], "--model.init_args.inner_steps=0: expected an integer >= 1"),
    ("init_scale_0", ["--model.init_args.init_scale=0"],
     "--model.init_args.init_scale=0.0: expected a finite number > 0"),
    # values: callbacks
    ("exact_over_limit", ["-c", "{tmp}/exact_limit.yaml"],
     "SharpnessLogger.method='exact': the module has 400 trainable parameters > max_exact_params=100; use "
     "method=auto or hutchinson"),
    ("backpack", ["-c", "{tmp}/backpack.yaml"],
     "SharpnessLogger.method='backpack': not available in v1 (BackPACK's DiagHessian covers standard layers only, "
     "not the diagonal net's u⊙u − v⊙v); use exact or hutchinson"),
    ("every_0", ["-c", "{tmp}/every_0.yaml"], "SharpnessLogger.every_n_steps=0: expected an integer >= 1"),
    ("exponent_1", ["-c", "{tmp}/exponent_1.yaml"], "SharpnessLogger.exponent=1.0: expected a number in [0, 1)"),
    ("delta_negative", ["-c", "{tmp}/delta_neg.yaml"],
     "LabelNoiseCallback.delta=-0.5: expected a finite number >= 0"),
    ("flip_probability", ["-c", "{tmp}/flip_2.yaml"], "LabelNoiseCallback.delta=2.0: expected a number in [0, 1]"),
]  # fmt: skip


@pytest.fixture()
def arrays(table_files: Path) -> Path:
    """The malformed .npz files of :data:`BAD_INPUTS` next to :data:`FILES`."""
    Z, y = np.ones((20, 4)), np.ones(20)
    Zn = Z.copy()
    Zn[2, 1] = np.nan
    for name, blob in {
        "rows.npz": {"Z": np.ones((19, 4)), "y": y}, "no_y.npz": {"Z": Z}, "extra.npz": {"Z": Z, "y": y, "X": y},
        "w.npz": {"Z": Z, "y": y, "w_star": np.ones(3)}, "nan.npz": {"Z": Zn, "y": y},
        "half.npz": {"Z": Z, "y": y, "Z_test": Z}, "tw.npz": {"Z": Z, "y": y, "Z_test": np.ones((5, 3)),
                                                               "y_test": np.ones(5)},
        "str.npz": {"Z": Z, "y": np.array(["a"] * 20, dtype="<U3")},
    }.items():  # fmt: skip
        with open(table_files / name, "wb") as fh:
            np.savez(fh, **blob)
    return table_files


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(arrays: Path, args: list[str], line: str, capsys) -> None:
    assert_user_error([*CONFIG, *args, "--trainer.fast_dev_run=1"], line, capsys, arrays)
