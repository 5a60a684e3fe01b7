"""On-disk tabular MDPs: ``.npz`` files, pymdptoolbox ``(P, R)`` arrays and gymnasium ``P`` dicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from datamodules.decision.mdp import check_mdp, numeric_array


def _open_npz(path: str) -> Any:
    """``np.load`` of an ``.npz`` MDP file, with errors that name the file."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"--data.init_args.path={path!r}: no such file (expected an .npz with keys P, R and "
                                "optional pi_b)")  # fmt: skip
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic[:4] != b"PK\x03\x04" and magic != b"\x93NUMPY":  # numpy would try it as a pickle (allow_pickle advice)
        raise ValueError(f"{path}: not an .npz archive (no zip header); write the MDP with numpy.savez or save_npz")
    try:
        blob, problem = np.load(path, allow_pickle=False), ""
    except Exception as exc:  # a malformed file: name it
        blob, problem = None, f"{type(exc).__name__}: {exc}"
    if problem:
        raise ValueError(f"{path}: not a readable .npz file ({problem})")
    if not hasattr(blob, "files"):  # a plain .npy array
        raise ValueError(f"{path}: a single array, not an .npz archive with keys P (S×A×S), R (S×A), optional pi_b")
    return blob


def load_npz(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Read and validate an ``.npz`` MDP (keys ``P``, ``R``, optional ``pi_b``)."""
    with _open_npz(path) as blob:
        for key in ("P", "R"):
            if key not in blob.files:
                raise ValueError(f"{path}: missing key {key!r}; found {blob.files}, expected P (S×A×S), R (S×A)")
        if unknown := sorted(set(blob.files) - {"P", "R", "pi_b"}):  # a misspelt 'pi_b' would be a uniform behaviour
            raise ValueError(f"{path}: unknown key(s) {unknown}; expected P (S×A×S), R (S×A) and optional pi_b (S×A)")
        return check_mdp(blob["P"], blob["R"], blob["pi_b"] if "pi_b" in blob.files else None, source=path)


def npz_shape(path: str) -> tuple[int, int]:
    """(S, A) of an ``.npz`` MDP from the header of ``P`` (cheap; full validation happens in ``setup``)."""
    with _open_npz(path) as blob:
        if "P" not in blob.files:
            raise ValueError(f"{path}: missing key 'P'; found {blob.files}, expected P (S×A×S), R (S×A)")
        shape = blob["P"].shape
    if len(shape) != 3 or shape[0] != shape[2]:
        raise ValueError(f"{path}: key 'P' has shape {shape}; expected (S, A, S) with P[s, a, s']")
    return int(shape[0]), int(shape[1])


def save_npz(path: str, P: np.ndarray, R: np.ndarray, pi_b: np.ndarray | None = None) -> str:
    """Validate and write an MDP as ``.npz`` (keys ``P``, ``R``, ``pi_b``) for ``--data.init_args.path``."""
    P, R, pi_b = check_mdp(P, R, pi_b, source=path)
    arrays = {"P": P, "R": R} if pi_b is None else {"P": P, "R": R, "pi_b": pi_b}
    np.savez(path, **arrays)
    return path


def from_mdptoolbox(P: Any, R: Any, r_layout: Literal["SA", "AS"] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Convert the pymdptoolbox / mdptoolbox-hiive convention to ours.

    Args:
        P: (A, S, S) transition matrices, ``P[a, s, s']`` (a list of A matrices works too).
        R: (S, A) expected rewards, or (A, S, S) per-transition rewards ``R[a, s, s']`` (converted to expectations).
        r_layout: the axis order of a 2-D ``R``: required when ``A == S`` (the shape cannot tell), else checked.

    Returns:
        ``(P (S, A, S), R (S, A))``, validated.
    """
    P = numeric_array(P, "P", "from_mdptoolbox")
    R = numeric_array(R, "R", "from_mdptoolbox")
    if P.ndim != 3 or P.shape[1] != P.shape[2]:
        raise ValueError(f"from_mdptoolbox: P has shape {P.shape}; expected (A, S, S) (mdptoolbox stores P[a][s][s'];"
                         " our own convention (S, A, S) goes to check_mdp/save_npz directly)")  # fmt: skip
    A, S, _ = P.shape
    if R.shape == (A, S, S):
        Rsa = np.einsum("ast,ast->sa", P, R)
    elif R.shape == (S, A) and A == S and r_layout is None:
        raise ValueError(f"from_mdptoolbox: R has shape {R.shape} and A = S = {S}, so it could be R[s, a] "
                         "(mdptoolbox's vector convention) or R[a, s]; pass r_layout='SA' or 'AS'")  # fmt: skip
    elif R.shape == (S, A) and r_layout != "AS":
        Rsa = R
    elif R.shape == (A, S) and r_layout == "AS":
        Rsa = R.T
    elif R.shape == (A, S) and A != S:
        raise ValueError(f"from_mdptoolbox: R has shape {R.shape} = (A, S); expected (S, A) = ({S}, {A}) "
                         "(transpose it: mdptoolbox vectors are R[s, a]) or (A, S, S)")  # fmt: skip
    else:
        raise ValueError(f"from_mdptoolbox: R has shape {R.shape}; expected (S, A) = ({S}, {A}) or (A, S, S) = "
                         f"({A}, {S}, {S}); check the axis order (P is A×S×S in mdptoolbox)")  # fmt: skip
    P2, R2, _ = check_mdp(P.transpose(1, 0, 2), Rsa, source="from_mdptoolbox")
    return P2, R2


def from_gymnasium_P(P: dict, reset_state: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Convert a gymnasium toy_text ``env.unwrapped.P`` dict into a continuing (S, A, S) kernel and (S, A) reward.

    ``P[s][a]`` is a list of ``(prob, next_state, reward, terminated)``; a terminated transition goes to
    ``reset_state`` instead (the episodic task becomes continuing and unichain). ``R(s,a)`` is the expected reward.
    """
    if not isinstance(P, dict) or not P:
        raise ValueError("from_gymnasium_P: expected a non-empty dict s -> a -> [(prob, next_state, reward, done)]")
    S = len(P)
    if sorted(P) != list(range(S)):
        raise ValueError(f"from_gymnasium_P: states must be 0..{S - 1}; got keys {sorted(P)[:10]}")
    A = len(P[0])
    if not 0 <= reset_state < S:
        raise ValueError(f"from_gymnasium_P: reset_state={reset_state} is not a state in 0..{S - 1}")
    Pm = np.zeros((S, A, S))
    Rm = np.zeros((S, A))
    for s in range(S):
        if sorted(P[s]) != list(range(A)):
            raise ValueError(f"from_gymnasium_P: state {s} has actions {sorted(P[s])}; expected 0..{A - 1}")
        for a in range(A):
            for item in P[s][a]:
                if len(item) != 4:
                    raise ValueError(f"from_gymnasium_P: P[{s}][{a}] has entry {item!r}; expected (prob, s', r, done)")
                prob, nxt, rew, done = item
                if not (isinstance(nxt, int | np.integer) and not isinstance(nxt, bool) and 0 <= nxt < S):
                    raise ValueError(f"from_gymnasium_P: P[{s}][{a}] has next state {nxt!r}; expected an integer state "
                                     f"in 0..{S - 1}")  # fmt: skip
                target = reset_state if done else int(nxt)
                Pm[s, a, target] += prob
                Rm[s, a] += prob * rew
    P2, R2, _ = check_mdp(Pm, Rm, source="from_gymnasium_P")
    return P2, R2
