"""Tabular MDPs and continuing behaviour trajectories for average-reward Q-learning (card ``avg_reward_q``).

The default generator draws ``P(·|s,a) ~ Dirichlet(dirichlet_alpha·1_S)`` and ``R(s,a) ~ U(0,1)`` once from
``mdp_seed``. ``min_gap`` (float) searches ``mdp_seed, mdp_seed+1, …`` (at most 1000 tries) for the first instance
whose predicted universal-stepsize error ``gap = sp(Q̄ − Q*)`` is at least ``min_gap``.

Real data (``path``): an ``.npz`` with ``P`` (S×A×S), ``R`` (S×A) and optional ``pi_b`` (S×A), validated with errors
naming the file, the key and the offending (s,a). :func:`from_mdptoolbox` reads the pymdptoolbox / mdptoolbox-hiive
convention (P is A×S×S) and :func:`from_gymnasium_P` the toy_text dict ``P[s][a] = [(prob, s', reward, terminated)]``
(terminated transitions are redirected to ``reset_state``); :func:`save_npz` writes either for ``--data.path``.

Behaviour (``behaviour``): ``uniform`` π_b (default), ``eps_greedy`` (``(1−ε)·greedy(Q*) + ε·uniform``, ε =
``epsilon``), ``iid_uniform`` (generative model: each step draws (s,a) uniformly, then s' ~ P; μ uniform) or ``file``
(the file's ``pi_b``; a file with ``pi_b`` and ``behaviour: uniform`` also uses it).

Streams: replica ``r`` follows one continuing trajectory from ``start_state`` seeded ``base_seed + r`` (numpy
``default_rng``; one uniform per step samples (a, s') jointly by inverse CDF, three in ``iid_uniform`` mode, so a
replica's stream does not depend on ``n_replicas`` or ``chunk_len``).
The training loader yields chunks ``(R, L, 4)`` float64 of ``(s, a, r, s')``, ``steps`` transitions per epoch; a later
epoch continues the same trajectories. Ground truths (float64) are computed in :meth:`setup` into :attr:`truth`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
from torch import Tensor
from torch.utils.data import DataLoader

from datamodules.decision.mdp import check_mdp, ground_truth, random_mdp
from datamodules.decision.mdp_files import from_gymnasium_P, from_mdptoolbox, load_npz, npz_shape
from datamodules.decision.trajectories import ChunkStream, TrajectorySampler
from zoo.core import checks
from zoo.core.datamodule import ZooDataModule
from zoo.core.messages import say

log = logging.getLogger(__name__)

Behaviour = Literal["uniform", "eps_greedy", "iid_uniform", "file"]
#: Instances tried by the ``min_gap`` search.
GAP_TRIES = 1000


# --------------------------------------------------------------------------------------------------- datamodule
class TabularMDPDataModule(ZooDataModule):
    """A finite MDP, its exact ground truths and R continuing behaviour trajectories (card ``avg_reward_q``).

    Args:
        S: number of states (ignored with ``path``). A: number of actions (ignored with ``path``).
        dirichlet_alpha: concentration of ``P(·|s,a)``.
        mdp_seed: seed of P and R (the first one tried with ``min_gap``).
        min_gap: search for the first instance with ``gap = sp(Q̄ − Q*) ≥ min_gap`` (``null``: no search).
        reward_noise_std: Gaussian noise added to each observed reward.
        behaviour: ``uniform``, ``eps_greedy``, ``iid_uniform`` or ``file``.
        epsilon: ε of ``eps_greedy``.
        n_replicas: independent trajectories (seeds ``base_seed + r``).
        steps: transitions per replica and epoch.
        chunk_len: transitions per training batch.
        base_seed: seed of replica 0.
        start_state: first state of every trajectory.
        ref_state: s0 of the reference pair (RVI normalisation, ``ref`` centering).
        ref_action: a0 of the reference pair.
        path: an ``.npz`` MDP (keys P, R, optional pi_b) instead of the generator.
        cross_check: also compute Q̄ by bisection and warn if it disagrees with the ODE iteration.
    """

    def __init__(self, S: int = 6, A: int = 2, dirichlet_alpha: float = 0.5, mdp_seed: int = 0,
                 min_gap: float | None = None, reward_noise_std: float = 0.0, behaviour: Behaviour = "uniform",
                 epsilon: float = 0.3, n_replicas: int = 16, steps: int = 30000, chunk_len: int = 1000,
                 base_seed: int = 0, start_state: int = 0, ref_state: int = 0, ref_action: int = 0,
                 path: str | None = None, cross_check: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        for key, value in (("S", S), ("A", A), ("n_replicas", n_replicas), ("steps", steps), ("chunk_len", chunk_len)):
            checks.integer(checks.data(key), value)
        checks.positive(checks.data("dirichlet_alpha"), dirichlet_alpha)
        checks.integer(checks.data("mdp_seed"), mdp_seed, low=0)
        checks.integer(checks.data("base_seed"), base_seed, low=0)
        if min_gap is not None:
            checks.non_negative(checks.data("min_gap"), min_gap)
        checks.non_negative(checks.data("reward_noise_std"), reward_noise_std)
        checks.choice(checks.data("behaviour"), behaviour, Behaviour.__args__)
        checks.probability(checks.data("epsilon"), epsilon)
        if min_gap is not None and behaviour == "iid_uniform":
            raise ValueError("--data.init_args.min_gap with behaviour=iid_uniform: μ is uniform there, so the gap "
                             "sp(Q̄ − Q*) is 0 for every instance; set min_gap: null")  # fmt: skip
        if min_gap is not None and path is not None:
            raise ValueError("--data.init_args.min_gap searches generated instances; it cannot apply to path=")
        if path is not None:
            shape = npz_shape(path)
            if shape != (S, A):  # the file decides S and A: say so rather than silently override the config
                say(f"--data.init_args.path={path!r} holds S={shape[0]} states and A={shape[1]} actions; "
                    f"--data.init_args.S={S}, A={A} do not apply to a file")  # fmt: skip
            S, A = shape
        for key, value, bound in (("start_state", start_state, S), ("ref_state", ref_state, S),
                                  ("ref_action", ref_action, A)):  # fmt: skip
            checks.integer(checks.data(key), value, low=0, high=bound - 1)
        self.S, self.A = S, A
        self.n_states, self.n_actions, self.n_replicas = S, A, int(n_replicas)
        self.dirichlet_alpha, self.mdp_seed, self.min_gap = float(dirichlet_alpha), int(mdp_seed), min_gap
        self.reward_noise_std, self.behaviour, self.epsilon = float(reward_noise_std), behaviour, float(epsilon)
        self.steps, self.chunk_len, self.base_seed = int(steps), int(chunk_len), int(base_seed)
        self.start_state, self.ref = int(start_state), (int(ref_state), int(ref_action))
        self.path, self.cross_check = path, cross_check
        #: User-supplied arrays (``from_arrays``); take precedence over ``path`` and the generator.
        self._given: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        #: Ground truths, filled by :meth:`setup`.
        self.truth: dict[str, Any] | None = None
        self.chosen_seed: int | None = None
        self._sampler: TrajectorySampler | None = None

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> TabularMDPDataModule:
        """A datamodule on an ``.npz`` MDP (keys P, R, optional pi_b)."""
        return cls(path=path, **kwargs)

    @classmethod
    def from_arrays(cls, P: Any, R: Any, pi_b: Any = None, **kwargs: Any) -> TabularMDPDataModule:
        """A datamodule on in-memory arrays in our convention (P: S×A×S), e.g. from :func:`from_mdptoolbox`."""
        P, R, pi_b = check_mdp(P, R, pi_b, source="from_arrays")
        for key, value in (("S", P.shape[0]), ("A", P.shape[1])):  # the arrays decide: say so, never silently
            if key in kwargs and kwargs[key] != value:
                say(f"from_arrays: the arrays have {key}={value}; {key}={kwargs[key]} does not apply")
        kwargs.update(S=P.shape[0], A=P.shape[1])
        dm = cls(**kwargs)
        dm._given = (P, R, pi_b)
        return dm

    @classmethod
    def from_mdptoolbox(
        cls, P: Any, R: Any, r_layout: Literal["SA", "AS"] | None = None, **kwargs: Any
    ) -> TabularMDPDataModule:
        """A datamodule on mdptoolbox arrays (P: A×S×S; R: S×A or A×S×S; ``r_layout`` when A = S)."""
        P2, R2 = from_mdptoolbox(P, R, r_layout)
        return cls.from_arrays(P2, R2, **kwargs)

    @classmethod
    def from_gymnasium_P(cls, P: dict, reset_state: int = 0, **kwargs: Any) -> TabularMDPDataModule:
        """A datamodule on a gymnasium toy_text ``P`` dict (terminal transitions redirected to ``reset_state``)."""
        P2, R2 = from_gymnasium_P(P, reset_state)
        kwargs.setdefault("start_state", reset_state)
        return cls.from_arrays(P2, R2, **kwargs)

    def mdp(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(P, R, pi_b)`` of the chosen instance (``pi_b`` None unless given)."""
        if self._given is not None or self.path is not None:
            P, R, pi_b = self._given if self._given is not None else load_npz(self.path)
            source = self.path or "from_arrays"
            if pi_b is None and self.behaviour == "file":
                raise ValueError(f"{source}: behaviour=file needs the key 'pi_b' (S×A); found only P and R")
            if pi_b is not None and self.behaviour in ("eps_greedy", "iid_uniform"):
                raise ValueError(f"{source}: has 'pi_b' but behaviour={self.behaviour!r}; use behaviour=file or "
                                 "remove pi_b")  # fmt: skip
            return P, R, pi_b
        if self.behaviour == "file":
            raise ValueError("--data.init_args.behaviour=file needs --data.init_args.path (an .npz with pi_b)")
        seed = self.mdp_seed if self.chosen_seed is None else self.chosen_seed
        return (*random_mdp(self.S, self.A, self.dirichlet_alpha, seed), None)

    def setup(self, stage: str | None = None) -> None:
        """Compute the ground truths (once), searching ``mdp_seed, mdp_seed+1, …`` when ``min_gap`` is set."""
        if self.truth is not None:
            return
        start = time.perf_counter()
        generated = self._given is None and self.path is None
        if generated and self.min_gap is not None:
            for seed in range(self.mdp_seed, self.mdp_seed + GAP_TRIES):
                P, R = random_mdp(self.S, self.A, self.dirichlet_alpha, seed)
                try:
                    truth = ground_truth(P, R, None, self.behaviour, self.epsilon, self.ref, cross_check=False)
                except ValueError:  # a reducible behaviour chain: try the next instance
                    continue
                if truth["gap"] >= self.min_gap:
                    self.chosen_seed = seed
                    break
            else:
                raise ValueError(f"--data.init_args.min_gap={self.min_gap}: no instance among mdp_seed="
                                 f"{self.mdp_seed}..{self.mdp_seed + GAP_TRIES - 1} reaches it")  # fmt: skip
            log.info("min_gap=%s: chose mdp_seed=%d", self.min_gap, seed)
        elif generated:
            self.chosen_seed = self.mdp_seed
        P, R, pi_b = self.mdp()
        if pi_b is not None and self.behaviour == "uniform":  # documented, but the config says uniform: say so
            say(f"{self.path or 'from_arrays'}: behaviour follows the file's pi_b (--data.init_args.behaviour=uniform "
                "uses a given pi_b; behaviour: file says so explicitly)")  # fmt: skip
        try:
            self.truth, problem = ground_truth(P, R, pi_b, self.behaviour, self.epsilon, self.ref, self.cross_check), ""
        except ValueError as exc:  # name the MDP: a user's file, or the generated instance
            problem = str(exc)
        if problem:
            where = self.path or f"generated MDP (mdp_seed {self.chosen_seed})"
            raise ValueError(f"{where} with behaviour={self.behaviour!r}: {problem}")
        self.truth["mdp_seed"] = self.chosen_seed
        self.truth["setup_seconds"] = time.perf_counter() - start

    def sampler(self) -> TrajectorySampler:
        """A fresh sampler from the start of every replica's trajectory (needs :meth:`setup`)."""
        if self.truth is None:
            self.setup()
        truth = self.truth
        return TrajectorySampler(truth["P"].numpy(), truth["R"].numpy(), truth["pi_b"].numpy(), self.n_replicas,
                                 self.base_seed, self.behaviour == "iid_uniform", self.reward_noise_std,
                                 self.start_state)  # fmt: skip

    def chunks(self, steps: int | None = None, chunk_len: int | None = None) -> Iterator[Tensor]:
        """Fresh chunks of the first ``steps`` transitions (defaults: the datamodule's), for runs without a Trainer."""
        return iter(ChunkStream(self.sampler(), steps or self.steps, chunk_len or self.chunk_len))

    def train_dataloader(self) -> DataLoader:
        """Chunks (R, L, 4); a later epoch continues the trajectories where the previous one stopped.

        On a resume (``--ckpt_path``) the module's restored transition counter ``k`` is ahead of this (fresh)
        sampler: the trajectories are fast-forwarded to ``k`` and the epoch serves only the transitions it had left,
        so a resumed run sees exactly the transitions the interrupted one had not.
        """
        k = self._module_k()
        if self._sampler is None or (k is not None and self._sampler.k > k):
            self._sampler = self.sampler()
        if k is not None and k > self._sampler.k:
            while self._sampler.k < k:  # fast-forward (sampling only)
                self._sampler.next_chunk(min(10 * self.chunk_len, k - self._sampler.k))
        left = self.steps - (self._sampler.k % self.steps)
        return DataLoader(ChunkStream(self._sampler, left, self.chunk_len), batch_size=None)

    def _module_k(self) -> int | None:
        """The attached module's transition counter (``None`` without a trainer or a counting module)."""
        module = getattr(getattr(self, "trainer", None), "lightning_module", None)
        counter = getattr(getattr(module, "model", None), "k", None)
        return None if counter is None else int(counter)
