"""Preference comparisons for ``xrlhf``: the card's synthetic world (default) or a precomputed-feature ``.npz``.

At ``setup`` the datamodule fits the card's linear Bradley-Terry RM exactly (numpy, full-batch GD: the recipe the
module's original phase runs), derives the SFT and RLHF responses of the test prompts (``argmax_y [s + r̂/β]``) and
splits them into unsatisfactory (``r_eval(y_rl) < r_eval(y_sft)``) and satisfactory pairs. The forget set is the
method's choice: ``attach_original(module)`` (called by the callback once the original weights are in place) asks the
module's ``select_forget`` (``--model.init_args.selector``, ``ConvexExplainer`` by default) for the union ``S_all`` of
the comparisons that explain the unsatisfactory items; the rest is retained. ``--data.init_args.selector`` (and
``k_cand``, ``tau``, ``pca_dim``) are deprecated aliases, forwarded to the module. Phases for
``callbacks.unlearning.UnlearningCallback``:

- ``original``: every comparison, one full batch per step (``steps_per_epoch`` steps per epoch);
- ``retrain``: the retained comparisons only (the exact oracle);
- ``unlearn``: ``{"forget": Δφ[S_all], "retain": Δφ[D∖S_all]}`` full batches (``unlearn_mode: rm``), or with
  ``unlearn_mode: policy_pairs`` (the authors' public code) ``{"forget": φ(x̄, y_sft) − φ(x̄, y_rl)`` over the
  unsatisfactory items, ``"retain": φ(x, y_rl) − φ(x, y_sft)`` over the satisfactory prompts whose RLHF response
  differs from the SFT one``}``.

Batches are 1-tuples ``(Δφ,)`` of float64 tensors (winner − loser): the RM is tiny, and float64 makes the
Lightning fits match the numpy fit the explanations used (to 1e-10).
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from datamodules.common.phases import Phase, PhasedDataModule
from zoo.core import checks
from zoo.core.protocols import check

#: The deprecated data-side selector (``--model.init_args.selector`` of the xrlhf modules replaces it).
Selector = Literal["convex", "knn", "knn_union", "random", "tracin", "planted", "random_set"]
SELECTORS = ("convex", "knn", "knn_union", "random", "tracin", "planted", "random_set")
Target = Literal["phi", "phi_minus_sft"]
UnlearnMode = Literal["rm", "policy_pairs"]
#: The deprecated data-side selection arguments, forwarded to the module's ``select_forget``.
SELECTION_ARGS = ("selector", "k_cand", "tau", "pca_dim")


class ForgetSelector(Protocol):
    """What ``attach_original`` needs of the module: its selector and the forget set it selects."""

    #: The selector in use (``--model.init_args.selector``).
    selector: str

    def select_forget(self, datamodule: Any, **overrides: Any) -> tuple[list[dict[str, Any]], np.ndarray]:
        """``(explanations, forget indices)`` for the datamodule's unsatisfactory items."""
        ...


def deprecated_selection(who: str, values: dict[str, Any]) -> dict[str, Any]:
    """The selection arguments given to a datamodule (not ``None``), with a warning that they moved to the model."""
    given = {k: v for k, v in values.items() if v is not None}
    if given:
        flags = ", ".join(f"--data.init_args.{k}" for k in given)
        warnings.warn(
            f"{who}: {flags} deprecated: the forget-set selection is the method's choice; use "
            f"--model.init_args.{{selector,k_cand,tau,pca_dim}} (the given values are forwarded to the module and "
            f"override its own)",
            FutureWarning,
            stacklevel=3,
        )
    return given


def check_selection_args(selector: str | None, k_cand: int | None, tau: float | None, pca_dim: int | None) -> None:
    """The deprecated data-side selection arguments: None, or valid (named as ``--data.init_args.<name>``)."""
    if selector is not None:
        checks.choice(checks.data("selector"), selector, SELECTORS)
    checks.optional_integer(checks.data("k_cand"), k_cand)
    if tau is not None:
        checks.non_negative(checks.data("tau"), tau)
    checks.optional_integer(checks.data("pca_dim"), pca_dim)


class _Repeated(Dataset):
    """One full batch ``times`` times (``DataLoader(batch_size=None)`` hands it over unchanged)."""

    def __init__(self, batch: Any, times: int) -> None:
        self.batch, self.times = batch, times

    def __len__(self) -> int:
        return self.times

    def __getitem__(self, i: int) -> Any:
        return self.batch


class PreferenceDataModule(PhasedDataModule):
    """Training comparisons, test candidates and the explained forget set (card ``xrlhf``, "Data").

    Args:
        path: a precomputed-feature ``.npz`` (``datamodules.preference.readers``); None = the synthetic world.
        seed: seed of the world (and of the random selector).
        n_train: training prompts (one comparison each) of the world.
        n_test: test prompts of the world.
        corrupt_threshold: the planted region ``x_0 > threshold``.
        selector: deprecated, use ``--model.init_args.selector`` (given: forwarded to the module).
        k_cand: deprecated, use ``--model.init_args.k_cand`` (given: forwarded to the module).
        tau: deprecated, use ``--model.init_args.tau`` (given: forwarded to the module).
        pca_dim: deprecated, use ``--model.init_args.pca_dim`` (given: forwarded to the module).
        target: ``phi`` (``φ(x̄, ȳ)``, the paper) or ``phi_minus_sft`` (``φ(x̄, ȳ) − φ(x̄, y_sft)``, ours).
        beta: KL coefficient of the closed-form policy.
        rm_l2: L2 of the BT fit.
        rm_lr: learning rate of the BT fit.
        rm_steps: full-batch steps of the BT fit (= ``steps_per_epoch`` of the original recipe).
        steps_per_epoch: full-batch steps per training epoch.
        max_items: explain only the first N unsatisfactory items (None: all); the win rates still cover every prompt.
        unlearn_mode: ``rm`` (unlearn ``S_all`` in the reward model) or ``policy_pairs`` (DPO on the unlearn/retain
            pairs of the public code; see the module docstring).
        phase: which training set ``train_dataloader`` serves.
    """

    def __init__(self, path: str | None = None, seed: int = 0, n_train: int = 2000, n_test: int = 1000,
                 corrupt_threshold: float = 1.0, selector: Selector | None = None, k_cand: int | None = None,
                 tau: float | None = None, pca_dim: int | None = None, target: Target = "phi", beta: float = 0.1,
                 rm_l2: float = 1e-3, rm_lr: float = 0.5, rm_steps: int = 4000, steps_per_epoch: int = 200,
                 max_items: int | None = None, unlearn_mode: UnlearnMode = "rm",
                 phase: Phase = "unlearn") -> None:  # fmt: skip
        super().__init__()
        check_selection_args(selector, k_cand, tau, pca_dim)
        checks.choice(checks.data("target"), target, ("phi", "phi_minus_sft"))
        checks.choice(checks.data("unlearn_mode"), unlearn_mode, ("rm", "policy_pairs"))
        checks.choice(checks.data("phase"), phase, ("original", "retrain", "unlearn"))
        checks.integer(checks.data("seed"), seed, 0)
        checks.integer(checks.data("n_train"), n_train)
        checks.integer(checks.data("n_test"), n_test)
        checks.number(checks.data("corrupt_threshold"), corrupt_threshold)
        checks.positive(checks.data("beta"), beta)
        checks.non_negative(checks.data("rm_l2"), rm_l2)
        checks.non_negative(checks.data("rm_lr"), rm_lr)
        checks.integer(checks.data("rm_steps"), rm_steps)
        checks.integer(checks.data("steps_per_epoch"), steps_per_epoch)
        checks.optional_integer(checks.data("max_items"), max_items)
        # The deprecated selection arguments belong to the module (forwarded into its hparams at attach_original):
        # kept out of these hparams, which Lightning merges with the module's for the loggers.
        self.save_hyperparameters(ignore=list(SELECTION_ARGS))
        self.path, self.seed, self.phase = path, seed, phase
        self.selection = deprecated_selection(
            "PreferenceDataModule", {"selector": selector, "k_cand": k_cand, "tau": tau, "pca_dim": pca_dim}
        )
        #: The selector that built the forget set (the module's, or the deprecated data argument), once attached.
        self.selector: str | None = selector
        self.unlearn_mode, self.rm_l2 = unlearn_mode, rm_l2
        self.steps_per_epoch = steps_per_epoch
        self._ready = False
        self.attached = False
        #: The arrays of the ``.npz`` (read and checked here: ``input_dim`` is a link source), None for the world.
        self._npz: dict[str, Any] | None = None
        if path is None:
            from zoo.xrlhf.world import FEATURE_DIM

            self.input_dim = FEATURE_DIM
        else:
            from datamodules.preference.readers import read_feature_npz

            self._npz = read_feature_npz(path)
            if self._npz["phi_candidates"] is None:
                raise ValueError(f"{path}: xrlhf needs the test side (phi_candidates, sft_logits, r_eval)")
            self.input_dim = int(self._npz["delta_phi"].shape[1])
        if pca_dim is not None and pca_dim > self.input_dim:
            raise ValueError(f"--data.init_args.pca_dim={pca_dim} exceeds the feature dimension {self.input_dim}")

    @property
    def has_ground_truth(self) -> bool:
        """Whether the comparisons carry the planted ``corrupted`` flags (the world does; a file may)."""
        return self._npz is None or self._npz["corrupted"] is not None

    # -- data ----------------------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Load or generate, fit the RM and split the test pairs (once); the forget set comes with attach_original."""
        if self._ready:
            return
        from zoo.xrlhf.world import fit_bt, make_world, rlhf_choice

        hp = self.hparams
        if self.path is None:
            world = make_world(self.seed, n_train=hp.n_train, n_test=hp.n_test, corrupt_threshold=hp.corrupt_threshold)
            delta, corrupted = world.delta_phi, world.corrupted
            test_phi, sft_logits, r_eval = world.test_phi, world.sft_logits, world.r_star
        else:
            data = self._npz
            delta, corrupted = data["delta_phi"], data["corrupted"]
            test_phi, sft_logits, r_eval = data["phi_candidates"], data["sft_logits"], data["r_eval"]
        theta = fit_bt(delta, l2=hp.rm_l2, lr=hp.rm_lr, steps=hp.rm_steps)
        rows = np.arange(len(test_phi))
        sft = sft_logits.argmax(axis=1)
        rl = rlhf_choice(test_phi, sft_logits, theta, hp.beta)
        self.delta_phi, self.corrupted, self.theta_original = delta, corrupted, theta
        self.test_phi, self.sft_logits, self.r_eval = test_phi, sft_logits, r_eval
        self.sft, self.rl = sft, rl
        self.unsatisfactory = r_eval[rows, rl] < r_eval[rows, sft]
        self.items = np.flatnonzero(self.unsatisfactory)[: hp.max_items]
        self.targets = test_phi[self.items, rl[self.items]]
        if hp.target == "phi_minus_sft":
            self.targets = self.targets - test_phi[self.items, sft[self.items]]
        self._ready = True

    def attach_original(self, module: Any) -> None:
        """Ask the module for the forget set (its ``select_forget``) and split the comparisons into forget and retain.

        Args:
            module: the module whose selector explains the unsatisfactory items (``zoo.xrlhf.module.XRLHFModule``);
                the explanations use this datamodule's exact numpy fit ``theta_original``.
        """
        self.setup()
        check(module, ForgetSelector, "PreferenceDataModule.attach_original", "module")
        start = time.perf_counter()
        self.explanations, self.forget_idx = module.select_forget(self, **self.selection)
        self.explain_seconds = time.perf_counter() - start
        self.selector = module.selector
        self.retain_mask = np.ones(len(self.delta_phi), dtype=bool)
        self.retain_mask[self.forget_idx] = False
        self.attached = True

    def _tensor(self, mask_or_idx: np.ndarray | None = None) -> tuple[Tensor]:
        """A ``(Δφ,)`` batch (a 1-tuple, as ``TensorDataset`` batches are)."""
        data = self.delta_phi if mask_or_idx is None else self.delta_phi[mask_or_idx]
        return (torch.as_tensor(data, dtype=torch.float64),)

    def _repeat(self, batch: Any) -> DataLoader:
        return DataLoader(_Repeated(batch, self.steps_per_epoch), batch_size=None, shuffle=False)

    def train_dataloader(self) -> DataLoader:
        """The ``phase``'s full batch, ``steps_per_epoch`` times (see the module docstring)."""
        self.setup()
        if self.phase == "original":
            return self._repeat(self._tensor())
        if not self.attached:
            raise RuntimeError(
                f"PreferenceDataModule: phase={self.phase} needs the forget set, which the module's "
                "selector defines; call attach_original(module) first (UnlearningCallback does)"
            )
        if self.phase == "retrain":
            return self._repeat(self._tensor(self.retain_mask))
        if len(self.forget_idx) == 0:
            raise ValueError(empty_forget_message("PreferenceDataModule", self.explanations))
        if self.unlearn_mode == "policy_pairs":
            unlearn, retain = self.policy_pairs()
            as_batch = lambda a: (torch.as_tensor(a, dtype=torch.float64),)  # noqa: E731
            return self._repeat({"forget": as_batch(unlearn), "retain": as_batch(retain)})
        return self._repeat({"forget": self._tensor(self.forget_idx), "retain": self._tensor(self.retain_mask)})

    def policy_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The public code's oriented pairs, ``(unlearn, retain)``.

        Unlearn: ``φ(y_sft) − φ(y_rl)`` on the explained unsatisfactory items; retain: ``φ(y_rl) − φ(y_sft)`` on the
        satisfactory prompts whose RLHF response is not the SFT one.
        """
        self.setup()
        phi, sft, rl = self.test_phi, self.sft, self.rl
        unlearn = phi[self.items, sft[self.items]] - phi[self.items, rl[self.items]]
        keep = np.flatnonzero(~self.unsatisfactory & (rl != sft))
        return unlearn, phi[keep, rl[keep]] - phi[keep, sft[keep]]

    def satisfactory_phi(self) -> np.ndarray:
        """``φ(x, y_rl)`` of the satisfactory test prompts (the preservation term's pairs), ``(n_sat, d)``."""
        self.setup()
        rows = np.flatnonzero(~self.unsatisfactory)
        return self.test_phi[rows, self.rl[rows]]

    def val_dataloader(self) -> DataLoader:
        """One batch of every comparison (``val/bt_loss``); the unlearning metrics come from the callback."""
        self.setup()
        return DataLoader(_Repeated(self._tensor(), 1), batch_size=None)

    # -- the unlearning protocol ---------------------------------------------------------------------------------------
    def split_info(self) -> dict[str, Any]:
        """What defines the forget set: sizes, indices, per-item provenance, recall of the planted pairs."""
        self.setup()
        info: dict[str, Any] = {
            "source": "npz" if self.path else "world", "seed": self.seed, "selector": self.selector,
            "unlearn_mode": self.unlearn_mode,
            "n_train": len(self.delta_phi), "n_test": len(self.test_phi), "n_unsatisfactory": len(self.items),
        }  # fmt: skip
        if not self.attached:
            return info
        info |= {
            "n_forget": len(self.forget_idx), "forget_indices": self.forget_idx.tolist(),
            "explain_seconds": self.explain_seconds,
            "per_item": per_item(self.explanations),
        }  # fmt: skip
        info.update(explanation_stats(self.explanations))
        info.update(planted_recall(self.corrupted, self.forget_idx, self.explanations))
        if self.unlearn_mode == "policy_pairs":
            info["note"] = ("policy_pairs: DPO on the evaluation prompts' unlearn/retain pairs (in-sample win rates); "
                            "S_all (n_forget, union_recall, precision) only feeds the retrain oracle")  # fmt: skip
        return info


def empty_forget_message(who: str, explanations: list[dict]) -> str:
    """Why the forget set is empty: no unsatisfactory item, or ``infeasible: drop`` left every explanation out."""
    if explanations and not any(e.get("used", True) for e in explanations):
        return (f"{who}: the forget set is empty: none of the {len(explanations)} explanations is within tau and "
                "--model.init_args.infeasible=drop leaves the infeasible ones out (use keep, solver=exact or a larger "
                "tau)")  # fmt: skip
    return f"{who}: no unsatisfactory test pair, so the forget set is empty"


def per_item(explanations: list[dict]) -> list[dict[str, Any]]:
    """JSON provenance of every explanation: item, indices and, where the convex selector ran, residual and use."""
    keys = ("residual", "feasible", "used")
    return [{"item": e["item"], "indices": e["indices"].tolist()} | {k: e[k] for k in keys if k in e}
            for e in explanations]  # fmt: skip


def explanation_stats(explanations: list[dict]) -> dict[str, float]:
    """The card's explanation metrics of the convex selection (per item): feasibility, |S| and residual.

    ``feasible_rate``: fraction of the explained items whose convex explanation has relative residual ``≤ τ``;
    ``median_size``: median ``|S(x̄)|`` of the convex explanations (of the selector's own sets for the per-item
    baselines, which copy the convex sizes); ``median_residual``: median relative residual
    ``‖φ̄ − Σα_iΔφ_i‖/‖φ̄‖`` of the convex explanations; ``n_used``: items whose set entered ``S_all``
    (``infeasible: drop`` leaves the infeasible ones out). Empty for ``planted`` and ``random_set`` (no per-item sets).
    """
    rows = [e for e in explanations if "residual" in e]
    if not rows:
        return {}
    return {
        "n_feasible": int(sum(e["feasible"] for e in rows)),
        "feasible_rate": float(np.mean([e["feasible"] for e in rows])),
        "median_size": float(np.median([len(e["indices"]) for e in rows])),
        "median_residual": float(np.median([e["residual"] for e in rows])),
        "n_used": int(sum(e.get("used", True) for e in rows)),
    }


def planted_recall(corrupted: np.ndarray | None, forget_idx: np.ndarray, explanations: list[dict]) -> dict[str, float]:
    """Recall of the planted corrupted pairs in the forget set, mean per-item precision and the base rate.

    The per-item precision averages over the explanations that entered ``S_all`` (``"used"``).

    Empty when the data carries no corruption flags (a user's file without ``corrupted``).
    """
    if corrupted is None or not corrupted.any():
        return {}
    precision = [corrupted[e["indices"]].mean() for e in explanations if len(e["indices"]) and e.get("used", True)]
    return {
        "union_recall": float(np.isin(np.flatnonzero(corrupted), forget_idx).mean()),
        "precision": float(np.mean(precision)) if precision else float("nan"),
        "base_rate": float(corrupted.mean()),
    }
