"""The linear Bradley-Terry reward model ``r(x, y) = θᵀφ(x, y)`` and its loss, in torch (card ``xrlhf``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LinearRewardModel(nn.Module):
    """``r = θᵀφ``: one float64 linear head without intercept, zero-initialised (BT is shift-invariant)."""

    def __init__(self, input_dim: int) -> None:
        super().__init__()
        self.head = nn.Linear(input_dim, 1, bias=False, dtype=torch.float64)  # tiny: float64 matches numpy
        nn.init.zeros_(self.head.weight)

    def forward(self, phi: Tensor) -> Tensor:
        """Rewards of ``phi`` (``(..., d)`` -> ``(...)``)."""
        return self.head(phi).squeeze(-1)

    @property
    def theta(self) -> Tensor:
        """The head's weights ``θ`` (``(d,)``)."""
        return self.head.weight.detach()[0]


def bt_loss(model: nn.Module, delta_phi: Tensor) -> Tensor:
    """Mean ``−log σ(θᵀΔφ)`` over oriented comparisons (winner − loser); ``softplus(−z)`` is the stable form."""
    return F.softplus(-model(delta_phi)).mean()


def dpo_pair_loss(model: nn.Module, delta_phi: Tensor, theta_ref: Tensor, scale: float) -> Tensor:
    """DPO on oriented pairs for the policy ``π_w(y|x) ∝ π_sft(y|x)·exp(wᵀφ/β)`` against ``π_ref = π_{θ_ref}``.

    ``log π_w(y) − log π_ref(y) = (w − θ_ref)ᵀφ/β − log(Z_w/Z_ref)``; the normalisers cancel within a prompt, so
    ``−log σ(β_dpo·[Δ log-ratio]) = softplus(−(β_dpo/β)·Δφᵀ(w − θ_ref))`` with ``scale = β_dpo/β``.
    """
    return F.softplus(-scale * (model(delta_phi) - delta_phi @ theta_ref)).mean()


def keep_penalty(model: nn.Module, phi_keep: Tensor, reward_ref: Tensor) -> Tensor:
    """The card's preservation term ``mean (r_θ(φ) − r_θ0(φ))²`` over the satisfactory ``(x, y_rl)`` pairs."""
    return (model(phi_keep) - reward_ref).pow(2).mean()


def closed_form_choice(test_phi: Tensor, sft_logits: Tensor, model: nn.Module, beta: float) -> Tensor:
    """Mode of the KL-regularised optimum ``π ∝ π_sft·exp(r̂/β)``: ``argmax_y [s + r̂/β]`` per test prompt."""
    with torch.no_grad():
        return torch.argmax(sft_logits + model(test_phi) / beta, dim=-1)
