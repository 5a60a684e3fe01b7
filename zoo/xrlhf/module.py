"""Improving RLHF by Explaining Unsatisfactory Responses and Unlearning their Causes (NeurIPS 2025).

``XRLHFModule`` is the linear Bradley-Terry reward model of the card's synthetic world with the protocol of the
shared ``callbacks.unlearning.UnlearningCallback``: the callback trains the original RM (full-batch SGD, the card's
recipe) and the retrain oracle, then unlearns the forget set that ``datamodules.preferences.PreferenceDataModule``
built from the explanations of the unsatisfactory responses (``ConvexExplainer`` by default), retaining the rest.
After each unlearning epoch the policy is re-tuned in closed form (``π ∝ π_sft·exp(r̂/β)``) and the win rates on the
unsatisfactory and the satisfactory prompts are reported separately.

Two unlearning modes (the datamodule's ``unlearn_mode``, card "Where descriptions disagree"):

- ``rm`` (default): forget = the explained comparisons ``S_all``, retain = ``D∖S_all``, loss ``−log σ(θᵀΔφ)``, plus
  the optional preservation term ``keep_weight·mean_sat (r_θ − r_θ0)²`` over the satisfactory ``(x, y_rl)`` pairs;
- ``policy_pairs`` (the authors' public code): the weights are the policy's, ``π_w ∝ π_sft·exp(wᵀφ/β)``, started at
  the RLHF policy ``w = θ_0``; DPO against it on the "unlearn" pairs (SFT response ≻ unsatisfactory RLHF response) and
  the "retain" pairs (satisfactory RLHF response ≻ SFT response). ``forget_loss`` is minus the DPO loss of the unlearn
  pairs, so NegGrad+ (``β L_r − (1 − β) L_f``) trains ``β·DPO_retain + (1 − β)·DPO_unlearn``: the code's step 4.

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

from zoo.uam.module import UnlearnableModule
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
                 dpo_beta: float = 0.1, pretrained: str | None = None) -> None:  # fmt: skip
        if input_dim < 1:
            raise ValueError(f"--model.init_args.input_dim={input_dim} must be >= 1")
        if beta <= 0 or dpo_beta <= 0:
            raise ValueError(f"--model.init_args.beta={beta} and dpo_beta={dpo_beta} must be > 0")
        if keep_weight < 0:
            raise ValueError(f"--model.init_args.keep_weight={keep_weight} must be >= 0")
        self.input_dim, self.original_lr, self.original_weight_decay = input_dim, original_lr, original_weight_decay
        self.beta, self.keep_weight, self.dpo_beta = beta, keep_weight, dpo_beta
        #: Set by :meth:`prepare_unlearning` from the original weights: ``θ_0`` (policy_pairs), the preservation pairs.
        self._theta_ref: Tensor | None = None
        self._keep: tuple[Tensor, Tensor] | None = None
        self._mode = "rm"
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

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
