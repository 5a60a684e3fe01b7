"""Test 9 (loaders: npz validation, mdptoolbox A×S×S, gymnasium dict) and the trajectory sampler."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules.decision.mdp import random_mdp
from datamodules.decision.mdp_datamodule import TabularMDPDataModule
from datamodules.decision.mdp_files import from_gymnasium_P, from_mdptoolbox, load_npz, save_npz


def _write(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return str(path)


def test_npz_row_not_summing_to_one_names_state_action(tmp_path: Path) -> None:
    P, R = random_mdp(3, 2, 0.5, 0)
    P[1, 0, 2] += 1e-6
    bad = _write(tmp_path / "bad.npz", P=P, R=R)
    with pytest.raises(ValueError, match=r"bad\.npz.*'P' row \(s,a\)=\(1,0\)"):
        load_npz(bad)
    with pytest.raises(ValueError, match=r"\(s,a\)=\(1,0\)"):
        TabularMDPDataModule(path=bad).setup()


def test_npz_other_errors(tmp_path: Path) -> None:
    P, R = random_mdp(3, 2, 0.5, 0)
    with pytest.raises(ValueError, match="missing key 'R'"):
        load_npz(_write(tmp_path / "a.npz", P=P))
    with pytest.raises(ValueError, match=r"'R' has shape \(2, 3\)"):
        load_npz(_write(tmp_path / "b.npz", P=P, R=R.T))
    neg = P.copy()
    neg[2, 1, 0] -= 0.5
    neg[2, 1, 1] += 0.5
    with pytest.raises(ValueError, match=r"negative at \(s,a\)=\(2,1\)"):
        load_npz(_write(tmp_path / "c.npz", P=neg, R=R))
    nan = R.copy()
    nan[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"'R' has a non-finite value at \(s,a\)=\(0, 1\)"):
        load_npz(_write(tmp_path / "d.npz", P=P, R=nan))
    with pytest.raises(ValueError, match=r"'pi_b' row s=1"):
        load_npz(_write(tmp_path / "e.npz", P=P, R=R, pi_b=np.array([[0.5, 0.5], [0.9, 0.2], [1.0, 0.0]])))
    (tmp_path / "f.npz").write_text("not an npz")
    with pytest.raises(ValueError, match="f.npz"):
        load_npz(str(tmp_path / "f.npz"))
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        TabularMDPDataModule(path=str(tmp_path / "missing.npz"))


def test_npz_round_trip_with_pi_b(tmp_path: Path) -> None:
    """A file with pi_b: shapes linked from the header; the file's behaviour policy defines μ."""
    P, R = random_mdp(4, 3, 0.5, 1)
    pi_b = np.tile([0.6, 0.3, 0.1], (4, 1))
    path = save_npz(str(tmp_path / "mdp.npz"), P, R, pi_b)
    dm = TabularMDPDataModule.from_file(path, n_replicas=2, steps=500)
    assert (dm.n_states, dm.n_actions) == (4, 3)
    dm.setup()
    mu = dm.truth["mu"]
    assert torch.allclose(mu / mu.sum(1, keepdim=True), torch.as_tensor(pi_b))
    with pytest.raises(ValueError, match="behaviour='eps_greedy'"):
        TabularMDPDataModule(path=path, behaviour="eps_greedy").setup()


def test_mdptoolbox_transposed() -> None:
    """Test 9: a 2×3×3 mdptoolbox P (A×S×S) becomes P[s, a, s'] = P_tb[a, s, s']; per-transition R → expectations."""
    P_tb = np.array([[[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]],
                     [[1.0, 0.0, 0.0], [0.1, 0.1, 0.8], [0.0, 0.0, 1.0]]])  # fmt: skip
    R_sa = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    P, R = from_mdptoolbox(P_tb, R_sa)
    assert P.shape == (3, 2, 3)
    for a in range(2):
        for s in range(3):
            assert np.array_equal(P[s, a], P_tb[a, s])
    assert np.array_equal(R, R_sa)
    R_ass = np.zeros((2, 3, 3))
    R_ass[1, 1, 2] = 10.0  # reward 10 on (s=1, a=1) -> s'=2, probability 0.8
    _, R2 = from_mdptoolbox(P_tb, R_ass)
    assert R2[1, 1] == pytest.approx(8.0) and R2.sum() == pytest.approx(8.0)
    with pytest.raises(ValueError, match="axis order"):
        from_mdptoolbox(P_tb, np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"\(A, S, S\)"):
        from_mdptoolbox(P.transpose(0, 2, 1)[:, :2], R_sa)
    dm = TabularMDPDataModule.from_mdptoolbox(P_tb, R_sa, n_replicas=2, steps=100)
    dm.setup()
    assert (dm.n_states, dm.n_actions) == (3, 2) and torch.equal(dm.truth["P"], torch.as_tensor(P))


def test_mdptoolbox_square_reward_needs_its_layout() -> None:
    """A = S: a 2-D R cannot tell R[s, a] from R[a, s], so it raises with the axis hint until r_layout says which."""
    P_tb = np.stack([np.eye(2), np.full((2, 2), 0.5)])
    R = np.array([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match="r_layout"):
        from_mdptoolbox(P_tb, R)
    assert np.array_equal(from_mdptoolbox(P_tb, R, "SA")[1], R)
    assert np.array_equal(from_mdptoolbox(P_tb, R, "AS")[1], R.T)


def test_malformed_npz_names_the_file(tmp_path: Path) -> None:
    """Not an archive, or a single .npy array under an .npz name: ValueError naming the file, at construction."""
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"junk.npz: not an \.npz archive \(no zip header\)"):
        TabularMDPDataModule(path=str(junk))
    single = tmp_path / "single.npz"
    with single.open("wb") as handle:
        np.save(handle, np.zeros(3))
    with pytest.raises(ValueError, match="single.npz: a single array"):
        TabularMDPDataModule(path=str(single))


def test_gymnasium_dict_terminal_redirected() -> None:
    """Test 9: 2 states, 2 actions; (1, 1) terminates with reward 1 and is redirected to reset_state 0."""
    P_gym = {
        0: {0: [(1.0, 0, 0.0, False)], 1: [(0.7, 1, 0.0, False), (0.3, 0, 0.5, False)]},
        1: {0: [(1.0, 0, 0.0, False)], 1: [(0.4, 1, 2.0, True), (0.6, 1, 0.0, False)]},
    }
    P, R = from_gymnasium_P(P_gym, reset_state=0)
    expected = np.zeros((2, 2, 2))
    expected[0, 0, 0] = 1.0
    expected[0, 1] = [0.3, 0.7]
    expected[1, 0, 0] = 1.0
    expected[1, 1] = [0.4, 0.6]  # the terminal 0.4 goes to state 0 instead of 1
    assert np.allclose(P, expected, atol=1e-15)
    assert np.allclose(R, [[0.0, 0.15], [0.0, 0.8]], atol=1e-15)
    with pytest.raises(ValueError, match=r"P\[0\]\[1\]"):
        from_gymnasium_P({0: {0: [(1.0, 0, 0.0, False)], 1: [(1.0, 0)]}})
    dm = TabularMDPDataModule.from_gymnasium_P(P_gym, n_replicas=2, steps=100)
    dm.setup()
    assert dm.truth["r_star"] > 0


def test_datamodule_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for kw, key in [({"S": 0}, "S"), ({"chunk_len": 0}, "chunk_len"), ({"epsilon": 1.5}, "epsilon"),
                    ({"behaviour": "greedy"}, "behaviour"), ({"start_state": 6}, "start_state")]:  # fmt: skip
        with pytest.raises(ValueError, match=key):
            TabularMDPDataModule(**kw)
    with pytest.raises(ValueError, match="min_gap"):
        TabularMDPDataModule(behaviour="iid_uniform", min_gap=1.0)
    monkeypatch.setattr("datamodules.decision.mdp_datamodule.GAP_TRIES", 5)  # the real search tries 1000 instances
    with pytest.raises(ValueError, match=r"no instance among mdp_seed=0\.\.4"):
        TabularMDPDataModule(min_gap=1e6, S=2, A=2, mdp_seed=0).setup()


def test_min_gap_search_and_eps_greedy() -> None:
    dm = TabularMDPDataModule(mdp_seed=3, min_gap=1.0)  # seed 3 has gap 0.55, seed 4 has 1.50
    dm.setup()
    assert dm.chosen_seed == 4 and dm.truth["gap"] >= 1.0
    eg = TabularMDPDataModule(behaviour="eps_greedy", epsilon=0.3)
    eg.setup()
    pib, pi_star = eg.truth["pi_b"], eg.truth["pi_star"]
    assert torch.allclose(pib[torch.arange(6), pi_star], torch.full((6,), 0.85, dtype=torch.float64))


def test_sampler_law_and_chunk_independence() -> None:
    """Visit frequencies match μ, s'|(s,a) matches P, trajectories are continuous, and chunking does not matter."""
    dm = TabularMDPDataModule(n_replicas=8, steps=20000, chunk_len=1000)
    dm.setup()
    chunk = torch.cat(list(dm.chunks()), 1)
    assert chunk.shape == (8, 20000, 4)
    assert torch.equal(chunk[:, 1:, 0], chunk[:, :-1, 3]) and bool((chunk[:, 0, 0] == 0).all())
    sa = (chunk[..., 0] * 2 + chunk[..., 1]).long().flatten()
    freq = torch.bincount(sa, minlength=12).double() / sa.numel()
    assert float((freq - dm.truth["mu"].flatten()).abs().max()) < 0.01
    s, a, nxt = (chunk[..., i].long().flatten() for i in (0, 1, 3))
    sel = (s == 2) & (a == 1)
    emp = torch.bincount(nxt[sel], minlength=6).double() / sel.sum()
    assert float((emp - dm.truth["P"][2, 1]).abs().max()) < 0.02
    assert torch.equal(chunk[..., 2], dm.truth["R"][s.view(8, -1), a.view(8, -1)])
    other = torch.cat(list(dm.chunks(20000, 777)), 1)
    assert torch.equal(other, chunk)
    # Replica r depends only on its seed base_seed + r, not on how many replicas run.
    small = TabularMDPDataModule(n_replicas=3, steps=20000)
    small.setup()
    assert torch.equal(next(small.chunks(500, 500)), chunk[:3, :500])


def test_reward_noise() -> None:
    """reward_noise_std adds zero-mean Gaussian noise of that std to the observed rewards (states unchanged)."""
    clean = TabularMDPDataModule(n_replicas=4, steps=5000)
    noisy = TabularMDPDataModule(n_replicas=4, steps=5000, reward_noise_std=0.5)
    a, b = next(clean.chunks(5000, 5000)), next(noisy.chunks(5000, 5000))
    assert torch.equal(a[..., [0, 1, 3]], b[..., [0, 1, 3]])
    noise = b[..., 2] - a[..., 2]
    assert abs(float(noise.std()) - 0.5) < 0.02 and abs(float(noise.mean())) < 0.02


@pytest.mark.parametrize(
    ("arrays", "message"),
    [({"P": "bool"}, r"key 'P' has dtype bool; expected an array of real numbers"),
     ({"R": "str"}, r"key 'R' has dtype <U\d+; expected an array of real numbers"),
     ({"R": "complex"}, r"key 'R' has dtype complex128; expected an array of real numbers"),
     ({"pib": "extra"}, r"unknown key\(s\) \['pib'\]; expected P .*, R .* and optional pi_b"),
     ({"P": "empty"}, r"key 'P' has shape \(0, 2, 0\); expected at least one state and one action")],
    ids=["bool_P", "string_R", "complex_R", "misspelt_pi_b", "no_states"],
)  # fmt: skip
def test_npz_arrays_that_would_be_coerced_or_ignored_are_an_error(tmp_path: Path, arrays: dict, message: str) -> None:
    """Catches np.asarray(x, float64) silently reading bools as 0/1, strings such as '0.5' as numbers and complex
    values without their imaginary part, and a misspelt pi_b key silently ignored (a uniform behaviour instead)."""
    P, R = random_mdp(2, 2, 0.5, 0)
    det = np.zeros((2, 2, 2), dtype=bool)
    det[:, :, 0] = True
    blob = {"P": P, "R": R}
    for key, kind in arrays.items():
        blob[key] = {"bool": det, "str": R.astype(str), "complex": R + 0j, "extra": np.full((2, 2), 0.5),
                     "empty": np.zeros((0, 2, 0))}[kind]  # fmt: skip
    with pytest.raises(ValueError, match=r"m\.npz: " + message):
        load_npz(_write(tmp_path / "m.npz", **blob))


def test_file_decisions_over_the_config_are_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches S/A silently taken from the file (or from_arrays' arrays) over the config, and behaviour=uniform
    silently following pi_b."""
    P, R = random_mdp(3, 2, 0.5, 0)
    path = save_npz(str(tmp_path / "mdp.npz"), P, R, np.tile([0.8, 0.2], (3, 1)))
    dm = TabularMDPDataModule(path=path, S=6, A=2, n_replicas=1, steps=10)
    assert "holds S=3 states and A=2 actions; --data.init_args.S=6, A=2 do not apply" in capsys.readouterr().err
    dm.setup()
    assert "behaviour follows the file's pi_b (--data.init_args.behaviour=uniform" in capsys.readouterr().err
    TabularMDPDataModule(path=path, S=3, A=2, behaviour="file", n_replicas=1, steps=10).setup()
    assert capsys.readouterr().err == ""
    assert TabularMDPDataModule.from_arrays(P, R, S=4, n_replicas=1).n_states == 3
    assert "from_arrays: the arrays have S=3; S=4 does not apply" in capsys.readouterr().err


def test_gymnasium_next_state_is_not_coerced() -> None:
    """Catches int(next_state) truncating 1.7 to 1, and an out-of-range state as an IndexError."""
    for nxt in (1.7, 2, True):
        with pytest.raises(ValueError, match=rf"P\[0\]\[0\] has next state {nxt!r}; expected an integer state in 0..1"):
            from_gymnasium_P({0: {0: [(1.0, nxt, 0.0, False)]}, 1: {0: [(1.0, 0, 0.0, False)]}})
    with pytest.raises(ValueError, match=r"from_mdptoolbox: key 'P' has dtype bool"):
        from_mdptoolbox(np.ones((1, 2, 2), dtype=bool), np.zeros((2, 1)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"S": 0}, "--data.init_args.S=0: expected an integer >= 1"),
     ({"A": 1.5}, "--data.init_args.A=1.5: expected an integer >= 1"),
     ({"dirichlet_alpha": 0.0}, "--data.init_args.dirichlet_alpha=0.0: expected a finite number > 0"),
     ({"mdp_seed": -1}, "--data.init_args.mdp_seed=-1: expected an integer >= 0"),
     ({"min_gap": -0.5}, "--data.init_args.min_gap=-0.5: expected a finite number >= 0"),
     ({"reward_noise_std": -1.0}, "--data.init_args.reward_noise_std=-1.0: expected a finite number >= 0"),
     ({"behaviour": "greedy"}, "--data.init_args.behaviour='greedy': expected one of 'uniform', 'eps_greedy', "),
     ({"epsilon": 1.5}, "--data.init_args.epsilon=1.5: expected a number in [0, 1]"),
     ({"n_replicas": 0}, "--data.init_args.n_replicas=0: expected an integer >= 1"),
     ({"steps": 0}, "--data.init_args.steps=0: expected an integer >= 1"),
     ({"chunk_len": -5}, "--data.init_args.chunk_len=-5: expected an integer >= 1"),
     ({"base_seed": -2}, "--data.init_args.base_seed=-2: expected an integer >= 0"),
     ({"start_state": 6}, "--data.init_args.start_state=6: expected an integer in [0, 5]"),
     ({"ref_action": 2}, "--data.init_args.ref_action=2: expected an integer in [0, 1]")],
)  # fmt: skip
def test_values_checked_at_construction(kwargs: dict, message: str) -> None:
    """Each value is checked in __init__ with the option's name and the expectation (formerly 'impossible value')."""
    with pytest.raises(ValueError, match=re.escape(message)):
        TabularMDPDataModule(**kwargs)
