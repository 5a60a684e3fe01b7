"""Bad input through the real `zoo` entry (issue #19): every avg_reward_q on-disk format and value, one line, exit 2.

Each row runs `zoo fit -c configs/avg_reward_q/default.yaml <args> --trainer.fast_dev_run=1` in this process and
expects `zoo: error: <line>` as the last stderr line, before any transition is sampled. The `.npz` MDPs are written
by the `files` fixture into the test's folder, which is the working directory (conftest), so paths are relative. An
unknown enum value (`--data.init_args.behaviour=greedy`) is refused by jsonargparse against the Literal type before
the zoo's code runs, so it has no row here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_user_error, bad_inputs

from datamodules.decision.mdp import random_mdp

CONFIG = ["fit", "-c", str(ROOT / "configs/avg_reward_q/default.yaml")]
KEYS = "expected P (S×A×S), R (S×A)"


def _path(name: str) -> str:
    return f"--data.init_args.path={name}"


#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # .npz MDP (P S×A×S, R S×A, optional pi_b S×A)
    ("npz_missing_file", [_path("missing.npz")],
     "--data.init_args.path='missing.npz': no such file (expected an .npz with keys P, R and optional pi_b)"),
    ("npz_empty_file", [_path("empty.npz")],
     "empty.npz: not an .npz archive (no zip header); write the MDP with numpy.savez or save_npz"),
    ("npz_malformed", [_path("junk.npz")],
     "junk.npz: not an .npz archive (no zip header); write the MDP with numpy.savez or save_npz"),
    ("npz_single_array", [_path("array.npz")],
     "array.npz: a single array, not an .npz archive with keys P (S×A×S), R (S×A), optional pi_b"),
    ("npz_missing_P", [_path("no_p.npz")], f"no_p.npz: missing key 'P'; found ['R'], {KEYS}"),
    ("npz_missing_R", [_path("no_r.npz")], f"no_r.npz: missing key 'R'; found ['P'], {KEYS}"),
    ("npz_unknown_key", [_path("pib.npz")],
     "pib.npz: unknown key(s) ['pib']; expected P (S×A×S), R (S×A) and optional pi_b (S×A)"),
    ("npz_P_shape", [_path("flat.npz")], "flat.npz: key 'P' has shape (2, 2); expected (S, A, S) with P[s, a, s']"),
    ("npz_R_shape", [_path("r_shape.npz")],
     "r_shape.npz: key 'R' has shape (2, 3); expected (S, A) = (3, 2) to match 'P'"),
    ("npz_wrong_type", [_path("text.npz")],
     "text.npz: key 'R' has dtype <U32; expected an array of real numbers (float or integer)"),
    ("npz_row_sum", [_path("row.npz")], "row.npz: key 'P' row (s,a)=(1,0) sums to 1.5; expected 1 within 1e-08"),
    ("npz_negative_P", [_path("neg.npz")], "neg.npz: key 'P' is negative at (s,a)=(0,1), s'=0: -0.5"),
    ("npz_nan_R", [_path("nan.npz")], "nan.npz: key 'R' has a non-finite value at (s,a)=(2, 1)"),
    ("npz_pi_b_row", [_path("pi_row.npz")], "pi_row.npz: key 'pi_b' row s=2 sums to 0.5; expected 1"),
    ("npz_no_pi_b_for_file", [_path("ok.npz"), "--data.init_args.behaviour=file"],
     "ok.npz: behaviour=file needs the key 'pi_b' (S×A); found only P and R"),
    ("npz_pi_b_with_eps_greedy", [_path("pi.npz"), "--data.init_args.behaviour=eps_greedy"],
     "pi.npz: has 'pi_b' but behaviour='eps_greedy'; use behaviour=file or remove pi_b"),
    ("npz_reducible", [_path("stuck.npz")],
     "stuck.npz with behaviour='uniform': the behaviour chain is not irreducible: it has 3 recurrent classes (μ is not "
     "unique; change pi_b/behaviour or the MDP)"),
    ("npz_start_state", [_path("ok.npz"), "--data.init_args.start_state=3"],
     "--data.init_args.start_state=3: expected an integer in [0, 2]"),
    ("behaviour_file_without_path", ["--data.init_args.behaviour=file"],
     "--data.init_args.behaviour=file needs --data.init_args.path (an .npz with pi_b)"),
    ("min_gap_with_path", [_path("ok.npz"), "--data.init_args.min_gap=1.0"],
     "--data.init_args.min_gap searches generated instances; it cannot apply to path="),
    # values: data
    ("chunk_len_0", ["--data.init_args.chunk_len=0"], "--data.init_args.chunk_len=0: expected an integer >= 1"),
    ("steps_0", ["--data.init_args.steps=0"], "--data.init_args.steps=0: expected an integer >= 1"),
    ("negative_replicas", ["--data.init_args.n_replicas=-1"],
     "--data.init_args.n_replicas=-1: expected an integer >= 1"),
    ("probability_1.5", ["--data.init_args.epsilon=1.5"], "--data.init_args.epsilon=1.5: expected a number in [0, 1]"),
    ("negative_min_gap", ["--data.init_args.min_gap=-1"],
     "--data.init_args.min_gap=-1.0: expected a finite number >= 0"),
    ("min_gap_iid", ["--data.init_args.min_gap=1", "--data.init_args.behaviour=iid_uniform"],
     "--data.init_args.min_gap with behaviour=iid_uniform: μ is uniform there, so the gap sp(Q̄ − Q*) is 0 for every "
     "instance; set min_gap: null"),
    ("start_state_out_of_range", ["--data.init_args.start_state=6"],
     "--data.init_args.start_state=6: expected an integer in [0, 5]"),
    ("ref_mismatch", ["--data.init_args.ref_state=1"],
     "data ref (ref_state, ref_action)=(1, 0) != model (0, 0): set them equal"),
    # values: model
    ("stepsize_0", ["--model.init_args.alpha=0"], "--model.init_args.alpha=0.0: expected a finite number > 0"),
    ("universal_alpha_0", ["--model.init_args.algorithm=universal", "--model.init_args.universal_alpha=0"],
     "--model.init_args.universal_alpha=0.0: expected a finite number > 0"),
    ("discount_1.5", ["--model.init_args.gamma=1.5"], "--model.init_args.gamma=1.5: expected a number in [0, 1)"),
    ("ref_action_out_of_range", ["--model.init_args.ref_action=2"],
     "--model.init_args.ref_action=2: expected an integer in [0, 1]"),
    ("stepsize_contradiction", ["--model.init_args.stepsize=universal"],
     "--model.init_args.stepsize='universal' contradicts algorithm='adaptive' (stepsize is for the baselines rvi_q, "
     "differential_q, discounted_q)"),
    # values: SpanSeminormLogger (a listed callback: replaced by a second config file)
    ("logger_points_1", ["-c", "points_1.yaml"], "SpanSeminormLogger.n_points=1: expected an integer >= 2"),
    ("logger_k_max_below_k_min", ["-c", "k_max_50.yaml"], "SpanSeminormLogger.k_max=50: expected an integer >= 100"),
]  # fmt: skip


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    """The malformed MDP files and callback configs of :data:`BAD_INPUTS`, in the working directory."""
    P, R = random_mdp(3, 2, 0.5, 0)
    pi_b = np.full((3, 2), 0.5)

    def save(name: str, **arrays: np.ndarray) -> None:
        with open(tmp_path / name, "wb") as fh:  # np.savez would append .npz to a name without it
            np.savez(fh, **arrays)

    row, neg, nan, pi_row, stuck = P.copy(), P.copy(), R.copy(), pi_b.copy(), np.zeros((3, 2, 3))
    row[1, 0, 0] += 0.5
    neg[0, 1, :2] = neg[0, 1, 0] - 0.5 - neg[0, 1, 0], neg[0, 1, 1] + 0.5 + neg[0, 1, 0]
    neg[0, 1, 2] = 1.0 - neg[0, 1, :2].sum()
    nan[2, 1] = np.nan
    pi_row[2] = [0.25, 0.25]
    stuck[0, :, 0] = stuck[1, :, 1] = stuck[2, :, 2] = 1.0  # every state absorbing
    for name, arrays in {
        "no_p.npz": {"R": R}, "no_r.npz": {"P": P}, "pib.npz": {"P": P, "R": R, "pib": pi_b},
        "flat.npz": {"P": np.eye(2), "R": R}, "r_shape.npz": {"P": P, "R": R.T},
        "text.npz": {"P": P, "R": R.astype(str)},
        "row.npz": {"P": row, "R": R}, "neg.npz": {"P": neg, "R": R},
        "nan.npz": {"P": P, "R": nan},
        "pi_row.npz": {"P": P, "R": R, "pi_b": pi_row}, "ok.npz": {"P": P, "R": R},
        "pi.npz": {"P": P, "R": R, "pi_b": pi_b},
        "stuck.npz": {"P": stuck, "R": R},
    }.items():  # fmt: skip
        save(name, **arrays)
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "junk.npz").write_text("P,R\n0.5,1\n")
    with open(tmp_path / "array.npz", "wb") as fh:
        np.save(fh, P)
    logger = "trainer:\n  callbacks:\n    - class_path: callbacks.span_logger.SpanSeminormLogger\n"
    logger += "      init_args: {{{}}}\n"
    for name, args in (("points_1", "n_points: 1"), ("k_max_50", "k_min: 100, k_max: 50")):
        (tmp_path / f"{name}.yaml").write_text(logger.format(args))
    return tmp_path


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(files: Path, args: list[str], line: str, capsys) -> None:
    assert_user_error([*CONFIG, *args, "--trainer.fast_dev_run=1"], line, capsys)
