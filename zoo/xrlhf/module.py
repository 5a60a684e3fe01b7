"""Improving RLHF by Explaining Unsatisfactory Responses and Unlearning their Causes (NeurIPS 2025).

``XRLHFModule`` is the linear Bradley-Terry reward model of the card's synthetic world with the protocol of the
shared ``callbacks.unlearning.UnlearningCallback``: the callback trains the original RM (full-batch SGD, the card's
recipe) and the retrain oracle, then unlearns the forget set that the module's ``selector`` (``ConvexExplainer`` by
default; :meth:`XRLHFModule.select_forget`) builds from the explanations of the unsatisfactory responses that
``datamodules.preference.feature_datamodule.PreferenceDataModule`` serves, retaining the rest.
After each unlearning epoch the policy is re-tuned in closed form (``π ∝ π_sft·exp(r̂/β)``) and the win rates on the
unsatisfactory and the satisfactory prompts are reported separately.

Two unlearning modes (the datamodule's ``unlearn_mode``, card "Where descriptions disagree"):

- ``rm`` (default): forget = the explained comparisons ``S_all``, retain = ``D∖S_all``, loss ``−log σ(θᵀΔφ)``, plus
  the optional preservation term ``keep_weight·mean_sat (r_θ − r_θ0)²`` over the satisfactory ``(x, y_rl)`` pairs;
- ``policy_pairs`` (the authors' public code): the weights are the policy's, ``π_w ∝ π_sft·exp(wᵀφ/β)``, started at
  the RLHF policy ``w = θ_0``; DPO against it on the "unlearn" pairs (SFT response ≻ unsatisfactory RLHF response) and
  the "retain" pairs (satisfactory RLHF response ≻ SFT response). ``forget_loss`` is minus the DPO loss of the unlearn
  pairs, so NegGrad+ (``β L_r − (1 − β) L_f``) trains ``β·DPO_retain + (1 − β)·DPO_unlearn``: the code's step 4.

``XRLHFLMModule`` is the card's optional tiny-LM path (smoke-tested only): a random-init 2-layer GPT-2 encoder whose
final-token hidden state is ``φ(x, y)``, with a bias-free linear head, trained with Bradley-Terry on token pairs from
``datamodules.preference.lm_datamodule.PreferenceLMDataModule``; in ``attach_original`` (called by the callback) the
datamodule computes the original RM's features and asks the module's selector to explain the unsatisfactory
responses, and the policy over each test prompt's finite candidate set is re-tuned in closed form or by ReMax
(``policy_update``).

Example:
    >>> from zoo.xrlhf.module import XRLHFModule
    >>> module = XRLHFModule(input_dim=20)
    >>> float(module.model.theta.abs().sum())
    0.0
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import Tensor

from callbacks.unlearning import UnlearnableModule
from zoo.core import checks
from zoo.xrlhf.explain import INFEASIBLE, SELECTORS, SOLVERS, Infeasible, Selector, Solver
from zoo.xrlhf.model import LinearRewardModel, bt_loss, closed_form_choice, dpo_pair_loss, keep_penalty


class XRLHFModule(UnlearnableModule):
    """Linear BT reward model with the unlearning protocol (card ``xrlhf``, Part 2).

    Args:
        input_dim: feature dimension ``d`` (linked from the datamodule).
        original_lr: SGD learning rate of the original and retrain recipes (the card: 0.5, full batch).
        original_weight_decay: L2 of the BT fit (the card: 1e-3).
        lr: SGD learning rate of the unlearning steps (the card: 0.5, 200 full-batch steps).
        weight_decay: L2 during unlearning.
        beta: KL coefficient of the closed-form policy re-tune.
        keep_weight: λ_keep of the preservation term ``λ_keep·mean_sat (r_θ − r_θ0)²`` added to the retain loss
            (the card: default 0; ``rm`` mode).
        dpo_beta: β of the DPO loss in ``policy_pairs`` mode.
        selector: how the forget set ``S_all`` is chosen: ``convex`` (the method), ``knn``/``random``/``tracin``
            (baselines with the convex set's size per item), ``knn_union`` (k-NN grown until its union is as large
            as the convex union), ``random_set`` (one random set of the convex union's size: the card's removal
            baseline) or ``planted`` (the ground-truth oracle). No representer selector: for a linear head it ranks
            exactly as TracIn.
        k_cand: candidates per growth step of the convex selector.
        tau: relative-residual target of the convex selector.
        pca_dim: project ``φ`` onto the top-k principal components of ``{Δφ_i}`` before the convex selection
            (None: the full space).
        solver: ``greedy`` (the card's growth among the ``k_cand`` nearest) or ``exact`` (one simplex least-squares
            solve over the nearest ``W``, ``W`` doubled from ``k_cand`` until ``τ`` is met; the card's allowed
            alternative; reconstructed).
        infeasible: what an explanation that misses ``τ`` contributes to ``S_all``: ``keep`` (the card: its
            best-effort set) or ``drop`` (nothing; per-item baselines follow their item's convex feasibility).
        pretrained: weights to start from; None lets the callback train the original.
    """

    monitor: ClassVar[str] = "val/bt_loss"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "xrlhf"
    gap_metrics: ClassVar[tuple[str, ...]] = ("win_unsatisfactory_higher_is_better",
                                              "win_satisfactory_higher_is_better")  # fmt: skip
    unlearning_only_hparams: ClassVar[tuple[str, ...]] = ("lr", "weight_decay", "beta", "keep_weight", "dpo_beta")

    def __init__(self, input_dim: int = 20, original_lr: float = 0.5, original_weight_decay: float = 1e-3,
                 lr: float = 0.5, weight_decay: float = 1e-3, beta: float = 0.1, keep_weight: float = 0.0,
                 dpo_beta: float = 0.1, selector: Selector = "convex", k_cand: int = 100, tau: float = 0.05,
                 pca_dim: int | None = None, solver: Solver = "greedy", infeasible: Infeasible = "keep",
                 pretrained: str | None = None) -> None:  # fmt: skip
        checks.integer(checks.model("input_dim"), input_dim)
        check_selection(selector, k_cand, pca_dim, tau, solver, infeasible)
        if pca_dim is not None and pca_dim > input_dim:
            raise ValueError(f"--model.init_args.pca_dim={pca_dim} exceeds the feature dimension {input_dim}")
        checks.non_negative(checks.model("original_lr"), original_lr)
        checks.non_negative(checks.model("original_weight_decay"), original_weight_decay)
        checks.positive(checks.model("beta"), beta)
        checks.positive(checks.model("dpo_beta"), dpo_beta)
        checks.non_negative(checks.model("keep_weight"), keep_weight)
        self.input_dim, self.original_lr, self.original_weight_decay = input_dim, original_lr, original_weight_decay
        self.beta, self.keep_weight, self.dpo_beta = beta, keep_weight, dpo_beta
        self.selector, self.k_cand, self.tau, self.pca_dim = selector, k_cand, tau, pca_dim
        self.solver, self.infeasible = solver, infeasible
        #: Set by :meth:`prepare_unlearning` from the original weights: ``θ_0`` (policy_pairs), the preservation pairs.
        self._theta_ref: Tensor | None = None
        self._keep: tuple[Tensor, Tensor] | None = None
        self._mode = "rm"
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

    def check_data(self, datamodule: Any) -> None:
        """Called by ``UnlearningCallback.setup`` before anything trains: the planted selector needs ground truth."""
        check_ground_truth(self, datamodule)

    def configure_models(self) -> None:
        """The zero-initialised linear head."""
        self.model = LinearRewardModel(self.input_dim)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Plain SGD: the unlearning recipe under the callback, else the original recipe (full-batch GD)."""
        if self.unlearning is not None:
            return torch.optim.SGD(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(self.parameters(), lr=self.original_lr, weight_decay=self.original_weight_decay)

    def compute_loss(self, batch: tuple[Tensor]) -> dict[str, Tensor]:
        """BT loss of a ``(Δφ,)`` batch of oriented comparisons."""
        return {"loss": bt_loss(self.model, batch[0])}

    def validation_step(self, batch: tuple[Tensor], batch_idx: int) -> None:  # noqa: D102
        self.log("val/bt_loss", bt_loss(self.model, batch[0]), batch_size=len(batch[0]))

    def select_forget(self, datamodule: Any, **overrides: Any) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The forget set ``S_all``: per unsatisfactory item the selected comparisons (with provenance), and the union.

        Reads the datamodule's comparisons ``delta_phi``, explanation ``targets`` of the unsatisfactory ``items``,
        its exact numpy fit ``theta_original``, ``corrupted``, ``rm_l2`` and ``seed`` (of the random selectors).

        Args:
            datamodule: the set-up ``datamodules.preference.feature_datamodule.PreferenceDataModule``.
            **overrides: ``selector``, ``k_cand``, ``tau``, ``pca_dim`` given to the datamodule (deprecated): they
                replace this module's (attributes and hparams, so the logged and saved hparams say what ran).

        Returns:
            ``(explanations, forget indices)``.
        """
        from zoo.xrlhf.explain import ConvexExplainer, select_forget_set

        dm = datamodule
        forward_selection(self, overrides)
        if self.selector == "planted" and dm.corrupted is None:
            raise ValueError(f"{dm.path}: selector=planted needs the 'corrupted' ground truth in the npz")
        explainer = None
        if self.selector != "planted":
            explainer = ConvexExplainer(k_cand=self.k_cand, tau=self.tau, pca_dim=self.pca_dim,
                                        solver=self.solver).fit(dm.delta_phi)  # fmt: skip
        return select_forget_set(dm.delta_phi, dm.targets, dm.items, dm.theta_original, dm.corrupted, self.selector,
                                 explainer, dm.seed, self.infeasible)  # fmt: skip

    def prepare_unlearning(self, strategy: str) -> None:
        """Read the datamodule's ``unlearn_mode``; keep ``θ_0`` and the preservation pairs' original rewards."""
        dm = self.trainer.datamodule
        self._mode = getattr(dm, "unlearn_mode", "rm")
        self._theta_ref = self.model.theta.clone()
        self._keep = None
        if self.keep_weight > 0:
            phi = torch.as_tensor(dm.satisfactory_phi(), dtype=torch.float64, device=self.device)
            with torch.no_grad():
                self._keep = (phi, self.model(phi))

    def _ref(self) -> Tensor:
        if self._theta_ref is None:
            raise RuntimeError("XRLHFModule: prepare_unlearning() must run before the policy_pairs losses")
        return self._theta_ref.to(self.device)

    def forget_loss(self, batch: tuple[Tensor]) -> Tensor:
        """``rm``: BT loss on the forget comparisons (NegGrad+ ascends it); ``policy_pairs``: −DPO(unlearn pairs)."""
        if self._mode == "policy_pairs":
            return -dpo_pair_loss(self.model, batch[0], self._ref(), self.dpo_beta / self.beta)
        return bt_loss(self.model, batch[0])

    def retain_loss(self, batch: tuple[Tensor]) -> Tensor:
        """``rm``: BT loss on the retained comparisons (+ the preservation term); ``policy_pairs``: DPO(retain)."""
        if self._mode == "policy_pairs":
            return dpo_pair_loss(self.model, batch[0], self._ref(), self.dpo_beta / self.beta)
        loss = bt_loss(self.model, batch[0])
        if self._keep is not None:
            phi, reward = self._keep
            loss = loss + self.keep_weight * keep_penalty(self.model, phi.to(self.device), reward.to(self.device))
        return loss

    def unlearning_metrics(self, datamodule: Any) -> dict[str, float]:
        """Closed-form policy re-tune, then win rates (``r_eval(y_new) ≥ r_eval(y_sft)``, ties win) per subset."""
        datamodule.setup()
        device = self.device
        phi = torch.as_tensor(datamodule.test_phi, dtype=torch.float64, device=device)
        sft_logits = torch.as_tensor(datamodule.sft_logits, dtype=torch.float64, device=device)
        new = closed_form_choice(phi, sft_logits, self.model, self.beta).cpu().numpy()
        rows = np.arange(len(new))
        r = datamodule.r_eval
        wins_sft = r[rows, new] >= r[rows, datamodule.sft]
        wins_rl = r[rows, new] >= r[rows, datamodule.rl]
        unsat = datamodule.unsatisfactory
        targets = torch.as_tensor(datamodule.targets, dtype=torch.float64, device=device)
        with torch.no_grad():
            reward_on_targets = float(self.model(targets).mean()) if len(targets) else float("nan")

        def rate(values: np.ndarray, mask: np.ndarray) -> float:
            return float(values[mask].mean()) if mask.any() else float("nan")

        return {
            "win_unsatisfactory_higher_is_better": rate(wins_sft, unsat),
            "win_satisfactory_higher_is_better": rate(wins_sft, ~unsat),
            "win_vs_rlhf_higher_is_better": rate(wins_rl, np.ones_like(unsat)),
            "reward_on_unsatisfactory_lower_is_better": reward_on_targets,
        }


PolicyUpdate = Literal["closed_form", "remax"]


class XRLHFLMModule(UnlearnableModule):
    """GPT-2 BT reward model with the unlearning protocol (card ``xrlhf``, "Optional tiny-LM path").

    Args:
        vocab_size: tokenizer size (linked from the datamodule).
        n_layer: GPT-2 blocks (the card: 2).
        n_embd: hidden size, the feature dimension (the card: 64).
        n_head: attention heads (the card: 4).
        n_positions: longest sequence (at least the datamodule's ``max_length``).
        model_seed: initialisation seed of the encoder and the head.
        original_lr: AdamW learning rate of the original and retrain recipes.
        original_weight_decay: AdamW weight decay of the original and retrain recipes.
        lr: AdamW learning rate of the unlearning steps.
        weight_decay: AdamW weight decay of the unlearning steps.
        beta: KL coefficient of the closed-form policy re-tune.
        policy_update: ``closed_form`` (``argmax_y [s + r̂/β]``) or ``remax`` (``zoo.xrlhf.lm.remax_update``).
        remax_init: the previous policy ReMax starts from and is KL-regularised to: ``sft`` (re-running RLHF with the
            corrected RM; the optimum is the closed form when ``remax_kl = beta``) or ``rlhf`` (fine-tuning the
            deployed policy ``s + r̂_original/β``, nearly deterministic at β = 0.1, so samples rarely explore).
        remax_steps: ReMax ascent steps per evaluation.
        remax_lr: ReMax step size on the logits.
        remax_samples: sampled candidates per prompt and step.
        remax_kl: ReMax KL coefficient ``κ``.
        remax_seed: seed of the ReMax samples (every evaluation uses the same stream).
        eval_batch_size: rows per forward when scoring the test candidates.
        selector: how ``S_all`` is chosen (as in :class:`XRLHFModule`): ``convex`` (the method), ``knn``,
            ``random``, ``tracin`` (baselines with the convex set's size per item, TracIn on the RM's head ``θ``),
            ``knn_union`` (k-NN matched on the union size), ``random_set`` (one random set of the convex union's
            size) or ``planted`` (the ground truth; the data must carry it).
        k_cand: candidates per growth step of the convex selector.
        tau: relative-residual target of the convex selector.
        pca_dim: explain in the span of the top ``pca_dim`` principal components of ``{Δφ_i}`` (the card's knob,
            ``ConvexExplainer(pca_dim=...)``; a linear map, so convex combinations are kept); None: all ``n_embd``.
        solver: ``greedy`` (the card's growth among the ``k_cand`` nearest) or ``exact`` (one simplex least-squares
            solve over the nearest ``W``, ``W`` doubled from ``k_cand`` until ``τ`` is met; the card's allowed
            alternative; reconstructed).
        infeasible: what an explanation that misses ``τ`` contributes to ``S_all``: ``keep`` (the card: its
            best-effort set) or ``drop`` (nothing; per-item baselines follow their item's convex feasibility).
        pretrained: weights to start from; None lets the callback train the original.
    """

    monitor: ClassVar[str] = "val/bt_loss"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "xrlhf_lm"
    gap_metrics: ClassVar[tuple[str, ...]] = ("win_unsatisfactory_higher_is_better",
                                              "win_satisfactory_higher_is_better")  # fmt: skip
    unlearning_only_hparams: ClassVar[tuple[str, ...]] = (
        "lr", "weight_decay", "beta", "policy_update", "remax_init", "remax_steps", "remax_lr", "remax_samples",
        "remax_kl", "remax_seed", "eval_batch_size",
    )  # fmt: skip

    def __init__(self, vocab_size: int = 64, n_layer: int = 2, n_embd: int = 64, n_head: int = 4,
                 n_positions: int = 64, model_seed: int = 0, original_lr: float = 3e-3,
                 original_weight_decay: float = 0.0, lr: float = 3e-4, weight_decay: float = 0.0, beta: float = 0.1,
                 policy_update: PolicyUpdate = "closed_form", remax_init: Literal["sft", "rlhf"] = "sft",
                 remax_steps: int = 200, remax_lr: float = 0.5, remax_samples: int = 8, remax_kl: float = 0.1,
                 remax_seed: int = 0, eval_batch_size: int = 512, selector: Selector = "convex", k_cand: int = 100,
                 tau: float = 0.05, pca_dim: int | None = None, solver: Solver = "greedy",
                 infeasible: Infeasible = "keep", pretrained: str | None = None) -> None:  # fmt: skip
        checks.integer(checks.model("vocab_size"), vocab_size, 5)  # 4 special tokens + words
        for name, value in (("n_layer", n_layer), ("n_embd", n_embd), ("n_head", n_head),
                            ("n_positions", n_positions), ("remax_steps", remax_steps),
                            ("remax_samples", remax_samples), ("eval_batch_size", eval_batch_size)):  # fmt: skip
            checks.integer(checks.model(name), value)
        if n_embd % n_head:
            checks.fail(checks.model("n_embd"), n_embd, f"a multiple of --model.init_args.n_head={n_head}")
        checks.non_negative(checks.model("original_lr"), original_lr)
        checks.non_negative(checks.model("original_weight_decay"), original_weight_decay)
        checks.positive(checks.model("beta"), beta)
        checks.non_negative(checks.model("remax_kl"), remax_kl)
        checks.non_negative(checks.model("remax_lr"), remax_lr)
        checks.choice(checks.model("policy_update"), policy_update, ("closed_form", "remax"))
        checks.choice(checks.model("remax_init"), remax_init, ("sft", "rlhf"))
        check_selection(selector, k_cand, pca_dim, tau, solver, infeasible)
        self.vocab_size, self.n_layer, self.n_embd, self.n_head = vocab_size, n_layer, n_embd, n_head
        self.n_positions, self.model_seed = n_positions, model_seed
        self.original_lr, self.original_weight_decay, self.beta = original_lr, original_weight_decay, beta
        self.policy_update, self.remax_init, self.remax_steps, self.remax_lr = (policy_update, remax_init,
                                                                                remax_steps, remax_lr)  # fmt: skip
        self.remax_samples, self.remax_kl, self.remax_seed = remax_samples, remax_kl, remax_seed
        self.eval_batch_size = eval_batch_size
        self.selector, self.k_cand, self.tau, self.pca_dim = selector, k_cand, tau, pca_dim
        self.solver, self.infeasible = solver, infeasible
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

    def check_data(self, datamodule: Any) -> None:
        """The data's sequences fit ``n_positions``; the planted selector has ground truth.

        Called by ``UnlearningCallback.setup`` before anything trains.
        """
        longest = getattr(datamodule, "max_length", None)
        if longest is not None and longest > self.n_positions:
            raise ValueError(f"--data.init_args.max_length={longest} exceeds --model.init_args.n_positions="
                             f"{self.n_positions} (the GPT-2 position count); raise the model's")  # fmt: skip
        check_ground_truth(self, datamodule)

    def configure_models(self) -> None:
        """The random-init GPT-2 reward model."""
        from zoo.xrlhf.lm import GPT2RewardModel

        self.model = GPT2RewardModel(self.vocab_size, n_layer=self.n_layer, n_embd=self.n_embd, n_head=self.n_head,
                                     n_positions=self.n_positions, seed=self.model_seed)  # fmt: skip

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW: the unlearning recipe under the callback, else the original recipe."""
        params = [p for p in self.parameters() if p.requires_grad]
        if self.unlearning is not None:
            return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.AdamW(params, lr=self.original_lr, weight_decay=self.original_weight_decay)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Rewards of right-padded sequences ``prompt <sep> response <eos>``, ``(B,)``."""
        return self.model(ids, mask)

    def bt_loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(mean −log σ(r(chosen) − r(rejected)), pair accuracy)`` of a pair batch."""
        from zoo.xrlhf.lm import bt_loss, pair_rewards

        r_chosen, r_rejected = pair_rewards(self.model, batch)
        return bt_loss(r_chosen, r_rejected), (r_chosen > r_rejected).float().mean().detach()

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """BT loss of a pair batch (the original and retrain recipes); pair accuracy logged alongside."""
        loss, acc = self.bt_loss(batch)
        return {"loss": loss, "pair_acc": acc}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:  # noqa: D102
        loss, acc = self.bt_loss(batch)
        size = len(batch["chosen_ids"])
        self.log("val/bt_loss", loss, batch_size=size)
        self.log("val/pair_acc", acc, batch_size=size)

    def forget_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """BT loss on the forget pairs (NegGrad+ ascends it)."""
        return self.bt_loss(batch)[0]

    def retain_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """BT loss on the retained pairs."""
        return self.bt_loss(batch)[0]

    # -- the forget set ----------------------------------------------------------------------------------------------
    def select_forget(self, datamodule: Any, **overrides: Any) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The forget set ``S_all``: per unsatisfactory item the selected training pairs (with provenance), the union.

        Reads what the datamodule's ``attach_original`` computed with the original RM: ``delta_phi``, the explanation
        ``targets`` of the unsatisfactory ``items``, ``theta_original``, ``corrupted``, ``n_pairs`` and ``seed``.

        Args:
            datamodule: the attached ``datamodules.preference.lm_datamodule.PreferenceLMDataModule``.
            **overrides: ``selector``, ``k_cand``, ``tau``, ``pca_dim`` given to the datamodule (deprecated): they
                replace this module's (attributes and hparams, so the logged and saved hparams say what ran).

        Returns:
            ``(explanations, forget indices)``.
        """
        from zoo.xrlhf.explain import ConvexExplainer, select_forget_set

        dm = datamodule
        forward_selection(self, overrides)
        if self.selector == "planted":
            if dm.corrupted is None:
                raise ValueError("--model.init_args.selector=planted needs the planted ground truth ('corrupted' in "
                                 f"{dm.path})")  # fmt: skip
            return select_forget_set(dm.delta_phi, dm.targets, dm.items, dm.theta_original, dm.corrupted, "planted",
                                     None, dm.seed)  # fmt: skip
        points = dm.delta_phi
        pca_dim = self.pca_dim if self.pca_dim is not None and self.pca_dim < points.shape[1] else None
        explainer = ConvexExplainer(k_cand=self.k_cand, tau=self.tau, pca_dim=pca_dim, solver=self.solver).fit(points)
        return select_forget_set(points, dm.targets, dm.items, dm.theta_original, dm.corrupted, self.selector,
                                 explainer, dm.seed, self.infeasible)  # fmt: skip

    # -- metrics ---------------------------------------------------------------------------------------------------
    def candidate_rewards(self, datamodule: Any) -> np.ndarray:
        """``r̂`` of every test candidate with the current RM, ``(m, M)`` float64."""
        from zoo.xrlhf.lm import score

        _, rewards = score(self.model, datamodule.test_ids, datamodule.test_mask, self.eval_batch_size)
        return rewards.double().numpy().reshape(datamodule.sft_logits.shape)

    def retune_policy(self, rewards: np.ndarray, datamodule: Any) -> np.ndarray:
        """The re-tuned policy's response per test prompt (closed form, or ReMax from the previous policy)."""
        from zoo.xrlhf.lm import remax_update

        if self.policy_update == "closed_form":
            return np.argmax(datamodule.sft_logits + rewards / self.beta, axis=1)
        start = datamodule.sft_logits if self.remax_init == "sft" else datamodule.rl_logits
        logits = remax_update(torch.as_tensor(start), torch.as_tensor(rewards), kl_coef=self.remax_kl,
                              lr=self.remax_lr, steps=self.remax_steps, num_samples=self.remax_samples,
                              generator=torch.Generator().manual_seed(self.remax_seed))  # fmt: skip
        return logits.argmax(dim=1).numpy()

    def unlearning_metrics(self, datamodule: Any) -> dict[str, float]:
        """Policy re-tune, then win rates (``r_eval(y_new) ≥ r_eval(y_sft)``, ties win) per subset, and vs RLHF."""
        if not getattr(datamodule, "attached", False):
            raise RuntimeError("XRLHFLMModule.unlearning_metrics: the datamodule has no unsatisfactory split yet; "
                               "call datamodule.attach_original(module) first")  # fmt: skip
        rewards = self.candidate_rewards(datamodule)
        new = self.retune_policy(rewards, datamodule)
        rows = np.arange(len(new))
        r = datamodule.r_eval
        wins_sft = r[rows, new] >= r[rows, datamodule.sft]
        wins_rl = r[rows, new] >= r[rows, datamodule.rl]
        unsat = datamodule.unsatisfactory
        items = datamodule.items
        centred = rewards - rewards.mean(axis=1, keepdims=True)  # BT and the policy ignore per-prompt shifts

        def rate(values: np.ndarray, mask: np.ndarray) -> float:
            return float(values[mask].mean()) if mask.any() else float("nan")

        return {
            "win_unsatisfactory_higher_is_better": rate(wins_sft, unsat),
            "win_satisfactory_higher_is_better": rate(wins_sft, ~unsat),
            "win_vs_rlhf_higher_is_better": rate(wins_rl, np.ones_like(unsat)),
            "reward_on_unsatisfactory_lower_is_better": float(centred[items, datamodule.rl[items]].mean())
            if len(items) else float("nan"),
        }  # fmt: skip


def check_selection(selector: str, k_cand: int, pca_dim: int | None, tau: float = 0.05, solver: str = "greedy",
                    infeasible: str = "keep") -> None:  # fmt: skip
    """Validate the selection arguments, naming the flag."""
    checks.choice(checks.model("selector"), selector, SELECTORS)
    checks.choice(checks.model("solver"), solver, SOLVERS)
    checks.choice(checks.model("infeasible"), infeasible, INFEASIBLE)
    checks.integer(checks.model("k_cand"), k_cand)
    checks.optional_integer(checks.model("pca_dim"), pca_dim)
    checks.non_negative(checks.model("tau"), tau)


def check_ground_truth(module: Any, datamodule: Any) -> None:
    """``selector=planted`` (the module's, or the deprecated data-side one) needs the data's ``corrupted`` flags."""
    selector = getattr(datamodule, "selection", {}).get("selector", module.selector)
    if selector == "planted" and not getattr(datamodule, "has_ground_truth", True):
        raise ValueError(f"--model.init_args.selector=planted needs the planted ground truth ('corrupted' in "
                         f"{datamodule.path}); it has none")  # fmt: skip


def forward_selection(module: Any, overrides: dict[str, Any]) -> None:
    """Apply deprecated data-side selection arguments to ``module``: its attributes and hparams (logged, saved)."""
    if not overrides:
        return
    merged = {k: getattr(module, k) for k in ("selector", "k_cand", "tau", "pca_dim")} | overrides
    check_selection(merged["selector"], merged["k_cand"], merged["pca_dim"], merged["tau"])
    for key, value in overrides.items():
        setattr(module, key, value)
        module.hparams[key] = value
