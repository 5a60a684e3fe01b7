"""The MoNNE ensemble's BoTorch faces (card ``bope_monne``, "BoTorch integration" and "Acquisitions").

- :class:`MoNNEModel`: a BoTorch ``EnsembleModel`` over outcomes; ``forward(Y)`` is ``batch × M × n × 1`` and
  ``posterior(Y)`` an ``EnsemblePosterior`` (BoTorch ≥ 0.17 layout ``(b) × M × n × 1``; ``rsample`` draws member
  indices, which ``IndexSampler`` fixes).
- :class:`EnsembleLearnedObjective`: qNEIUU's objective, outcome samples ``[S, b, q, k]`` to utilities
  ``[M·S, b, q]`` (each sample through every member, the two sample axes flattened). BoTorch's ``LearnedObjective``
  draws Gaussian base samples for a non-deterministic preference model, which an ensemble posterior cannot take.
- :class:`EnsembleEUBO`: the exact ensemble EUBO ``(1/M) Σ_m max(g_m(f̃(x₁)), g_m(f̃(x₂)))`` of a design pair through
  a deterministic outcome model (``FixedSingleSampleModel``: one posterior sample path, EUBO-ζ). ``EnsemblePosterior``
  has no covariance, so BoTorch's analytic EUBO cannot take the ensemble.
- :class:`UtilityOfMean`: ``score(μ_f(x))``, the PE-stage recommendation's acquisition (``x̂ = argmax``).

BoTorch is imported at the top: this module is reached only through a ``bope_monne`` config, which the launcher
checks for the ``bope_monne`` extra first (``pip install -e ".[bope_monne]"``; BoTorch 0.18 needs Python ≥ 3.11).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botorch.acquisition import AcquisitionFunction
from botorch.acquisition.objective import MCAcquisitionObjective
from botorch.models.ensemble import EnsembleModel
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from zoo.bope_monne.model import MonotoneEnsemble, ensemble_eubo


class MoNNEModel(EnsembleModel):
    """A fitted :class:`MonotoneEnsemble` as a BoTorch ensemble model over outcomes ``Y`` (``batch × n × k``).

    Args:
        ensemble: the fitted ensemble.
    """

    def __init__(self, ensemble: MonotoneEnsemble) -> None:
        super().__init__()
        self.ensemble = ensemble
        self._num_outputs = 1

    def forward(self, X: Tensor) -> Tensor:  # noqa: N803 - BoTorch's argument name
        """Every member's utility as ``batch × M × n × 1``."""
        return self.ensemble(X).unsqueeze(-1)


class EnsembleLearnedObjective(MCAcquisitionObjective):
    """Outcome samples ``[S, b, q, k]`` to utilities ``[M·S, b, q]`` (member-major): for qNEIUU.

    Args:
        ensemble: the fitted ensemble.
    """

    def __init__(self, ensemble: MonotoneEnsemble) -> None:
        super().__init__()
        self.ensemble = ensemble

    def forward(self, samples: Tensor, X: Tensor | None = None) -> Tensor:  # noqa: N803
        """Every outcome sample through every member, the member and sample axes flattened."""
        g = self.ensemble(samples).movedim(-2, 0)  # (M, S, *b, q)
        return g.reshape(-1, *g.shape[2:])


class EnsembleEUBO(AcquisitionFunction):
    """Exact ensemble EUBO of design pairs ``X`` (``b × 2 × d``) through a deterministic ``outcome_model``.

    Args:
        ensemble: the fitted ensemble.
        outcome_model: ``X -> Y`` (``FixedSingleSampleModel`` for EUBO-ζ, ``PosteriorMeanModel`` for the mean-outcome
            variant).
    """

    def __init__(self, ensemble: MonotoneEnsemble, outcome_model: Any) -> None:
        super().__init__(model=MoNNEModel(ensemble))
        self.ensemble = ensemble
        self.outcome_model = outcome_model

    @t_batch_mode_transform(expected_q=2)
    def forward(self, X: Tensor) -> Tensor:  # noqa: N803
        """``(1/M) Σ_m max(g_m(y₁), g_m(y₂))`` with ``y = outcome_model(X)``: ``b × 2 × d -> b``."""
        y = self.outcome_model(X)
        return ensemble_eubo(self.ensemble, y[..., 0, :], y[..., 1, :])


class UtilityOfMean(AcquisitionFunction):
    """``score(μ_f(x))``: a utility surrogate's mean utility at the outcome model's posterior mean (q = 1).

    Args:
        outcome_model: the deterministic ``X -> Y`` map (``PosteriorMeanModel``).
        score: ``(..., n, k) -> (..., n)`` mean utility of outcomes.
    """

    def __init__(self, outcome_model: Any, score: Callable[[Tensor], Tensor]) -> None:
        super().__init__(model=outcome_model)
        self.outcome_model = outcome_model
        self.score = score

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:  # noqa: N803
        """``b × 1 × d -> b``."""
        return self.score(self.outcome_model(X)).squeeze(-1)
