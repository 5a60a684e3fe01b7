"""The card's synthetic preference world (``xrlhf``, "Data"), the linear Bradley-Terry RM and the closed-form policy.

Prompts ``x ~ N(0, I_4)``, M = 6 candidates each with attributes ``a = (help ~ U(0,1), harm ~ Bernoulli(0.25),
verbosity ~ U(0,1), style ~ Bernoulli(0.5))``; features ``ψ = [a; vec(x ⊗ a)] ∈ R^20`` centred over the prompt's
candidates; gold reward ``r* = θ*ᵀφ`` with ``θ* = (2, −3, 0.3, 0)`` on the attribute block. Training: 2000 prompts,
two distinct candidates each; if ``x_0 > 1`` and exactly one is harmful the harmful one wins (the planted corruption),
else a Bradley-Terry draw on ``r*``. SFT logits ``s ~ N(0, 1)``; the RLHF response is ``argmax_y [s + r̂/β]``
(the KL-regularised optimum's mode, β = 0.1); a test pair is unsatisfactory iff ``r*(y_rl) < r*(y_sft)``.

Draw order from one ``numpy.random.default_rng(seed)``: training prompts, attributes, pair choices, BT uniforms; then
test prompts, attributes, SFT logits. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Gold reward weights on the attribute block (help, harm, verbosity, style).
THETA_STAR_ATTR = np.array([2.0, -3.0, 0.3, 0.0])
PROMPT_DIM, N_ATTR, N_CAND = 4, 4, 6
FEATURE_DIM = N_ATTR + PROMPT_DIM * N_ATTR


@dataclass
class PreferenceWorld:
    """Arrays of one seeded world.

    Attributes:
        delta_phi: ``(n_train, d)`` oriented training comparisons, winner − loser.
        corrupted: ``(n_train,)`` bool, the planted pairs.
        test_phi: ``(n_test, M, d)`` candidate features of the test prompts.
        sft_logits: ``(n_test, M)``.
        theta_star: ``(d,)`` gold reward weights.
        prompts: ``(n_train, 4)`` raw training prompts ``x`` (the tiny-LM path renders them as tokens).
        attrs: ``(n_train, M, 4)`` raw candidate attributes ``(help, harm, verbosity, style)``, before centring.
        pairs: ``(n_train, 2)`` candidate indices of each training comparison.
        first_wins: ``(n_train,)`` bool, whether ``pairs[:, 0]`` is the winner (``delta_phi`` = winner − loser).
        test_prompts: ``(n_test, 4)`` raw test prompts.
        test_attrs: ``(n_test, M, 4)`` raw attributes of the test candidates.
    """

    delta_phi: np.ndarray
    corrupted: np.ndarray
    test_phi: np.ndarray
    sft_logits: np.ndarray
    theta_star: np.ndarray
    prompts: np.ndarray | None = None
    attrs: np.ndarray | None = None
    pairs: np.ndarray | None = None
    first_wins: np.ndarray | None = None
    test_prompts: np.ndarray | None = None
    test_attrs: np.ndarray | None = None

    @property
    def winners(self) -> np.ndarray:
        """Candidate index of each comparison's winner, ``(n_train,)``."""
        return np.where(self.first_wins, self.pairs[:, 0], self.pairs[:, 1])

    @property
    def losers(self) -> np.ndarray:
        """Candidate index of each comparison's loser, ``(n_train,)``."""
        return np.where(self.first_wins, self.pairs[:, 1], self.pairs[:, 0])

    @property
    def r_star(self) -> np.ndarray:
        """Gold reward of every test candidate, ``(n_test, M)``."""
        return self.test_phi @ self.theta_star


def _features(rng: np.random.Generator, prompts: np.ndarray) -> np.ndarray:
    """Centred features ``(n, M, d)`` of M fresh candidates per prompt."""
    return _features_and_attrs(rng, prompts)[0]


def _features_and_attrs(rng: np.random.Generator, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centred features ``(n, M, d)`` of M fresh candidates per prompt, and their raw attributes ``(n, M, 4)``."""
    n = len(prompts)
    attrs = np.stack([rng.uniform(size=(n, N_CAND)), rng.binomial(1, 0.25, size=(n, N_CAND)),
                      rng.uniform(size=(n, N_CAND)), rng.binomial(1, 0.5, size=(n, N_CAND))], axis=-1)  # fmt: skip
    cross = (prompts[:, None, :, None] * attrs[:, :, None, :]).reshape(n, N_CAND, PROMPT_DIM * N_ATTR)
    psi = np.concatenate([attrs, cross], axis=-1).astype(np.float64)
    return psi - psi.mean(axis=1, keepdims=True), attrs.astype(np.float64)


def make_world(seed: int = 0, n_train: int = 2000, n_test: int = 1000, corrupt_threshold: float = 1.0,
               ) -> PreferenceWorld:  # fmt: skip
    """The card's world for ``seed`` (see the module docstring for the draws)."""
    rng = np.random.default_rng(seed)
    theta = np.zeros(FEATURE_DIM)
    theta[:N_ATTR] = THETA_STAR_ATTR
    prompts = rng.standard_normal((n_train, PROMPT_DIM))
    phi, attrs = _features_and_attrs(rng, prompts)
    harm = phi[:, :, 1]  # centred; within a prompt the harmful candidates have the larger value
    pairs = np.stack([rng.choice(N_CAND, size=2, replace=False) for _ in range(n_train)])
    u = rng.uniform(size=n_train)
    rows = np.arange(n_train)
    phi_i, phi_j = phi[rows, pairs[:, 0]], phi[rows, pairs[:, 1]]
    harm_i, harm_j = (
        harm[rows, pairs[:, 0]] > harm[rows, pairs[:, 1]],
        harm[rows, pairs[:, 1]] > harm[rows, pairs[:, 0]],
    )
    corrupted = (prompts[:, 0] > corrupt_threshold) & (harm_i | harm_j)  # exactly one harmful: their harm differs
    p_i = 1.0 / (1.0 + np.exp(-(phi_i - phi_j) @ theta))
    i_wins = np.where(corrupted, harm_i, u < p_i)
    delta = np.where(i_wins[:, None], phi_i - phi_j, phi_j - phi_i)
    test_prompts = rng.standard_normal((n_test, PROMPT_DIM))
    test_phi, test_attrs = _features_and_attrs(rng, test_prompts)
    sft = rng.standard_normal((n_test, N_CAND))
    return PreferenceWorld(delta_phi=delta, corrupted=corrupted, test_phi=test_phi, sft_logits=sft, theta_star=theta,
                           prompts=prompts, attrs=attrs, pairs=pairs, first_wins=i_wins, test_prompts=test_prompts,
                           test_attrs=test_attrs)  # fmt: skip


def bt_loss(theta: np.ndarray, delta_phi: np.ndarray, l2: float = 1e-3) -> float:
    """Mean Bradley-Terry loss ``mean −log σ(θᵀΔφ)`` plus ``(l2/2)‖θ‖²``."""
    return float(np.mean(np.logaddexp(0.0, -(delta_phi @ theta))) + 0.5 * l2 * theta @ theta)


def fit_bt(delta_phi: np.ndarray, l2: float = 1e-3, lr: float = 0.5, steps: int = 4000,
           theta0: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Linear BT reward model (no intercept) by full-batch gradient descent (the card: lr 0.5, 4000 steps)."""
    theta = np.zeros(delta_phi.shape[1]) if theta0 is None else theta0.astype(np.float64).copy()
    n = len(delta_phi)
    for _ in range(steps):
        z = delta_phi @ theta
        grad = -(delta_phi.T @ (0.5 * (1.0 - np.tanh(0.5 * z)))) / n + l2 * theta  # σ(−z) = 1 − σ(z)
        theta -= lr * grad
    return theta


def rlhf_choice(test_phi: np.ndarray, sft_logits: np.ndarray, theta: np.ndarray, beta: float = 0.1) -> np.ndarray:
    """The mode of the KL-regularised optimum ``π ∝ π_sft·exp(r̂/β)``: ``argmax_y [s + r̂/β]``, ``(n_test,)``."""
    return np.argmax(sft_logits + (test_phi @ theta) / beta, axis=1)


def win_rates(r_star: np.ndarray, new: np.ndarray, sft: np.ndarray, unsatisfactory: np.ndarray) -> dict[str, float]:
    """Win rate ``r*(y_new) ≥ r*(y_sft)`` (ties win) on the unsatisfactory and the satisfactory prompts, separately."""
    rows = np.arange(len(r_star))
    wins = r_star[rows, new] >= r_star[rows, sft]

    def rate(mask: np.ndarray) -> float:
        return float(wins[mask].mean()) if mask.any() else float("nan")

    return {"unsatisfactory": rate(unsatisfactory), "satisfactory": rate(~unsatisfactory)}
