"""bope_monne: the card's Performance targets, measured side by side in one process on one thread.

- **Surrogate fit time**: the MoNNE ensemble fit (M = 8, 2 × 32, Adam 1e-2 × 300) vs BoTorch's PairwiseGP fit
  (Laplace MLL) on the same 25 comparisons of VehicleSafety-PWL outcomes. Target: MoNNE ≤ 1.5× PairwiseGP.
- **Vectorisation**: the batched ensemble (one broadcast matmul per layer, M = 8) vs a Python loop over the members
  (``MonotoneEnsemble.member``), forward + backward of the hinge loss, and a whole 300-step fit of each. Target ≥ 3×.
- **EUBO throughput**: the exact ensemble EUBO on 1024 candidate design pairs through a ``FixedSingleSampleModel`` of
  a fitted outcome GP. Target ≤ 50 ms.
- **Per replication**: one full default replication (``configs/bope_monne/default.yaml``, seed 0, MoNNE arm) and its
  PairwiseGP arm through ``zoo fit`` in-process. Target ≤ 25 s for MoNNE.

    python benchmarks/bope_monne.py [--repeats 5] [--no-replication]
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from _timing import timed


def comparisons(n_points: int, n_comps: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """VehicleSafety outcomes of uniform designs and noise-free PWL comparisons between random pairs."""
    from datamodules.multiobjective.problems import make_problem
    from datamodules.multiobjective.utilities import make_utility

    gen = torch.Generator().manual_seed(seed)
    problem, utility = make_problem("vehicle_safety"), make_utility("vehicle_safety", "pwl")
    lo, hi = problem.bounds()
    y = problem(lo + (hi - lo) * torch.rand(n_points, problem.d, dtype=torch.float64, generator=gen))
    pairs = torch.stack([torch.randperm(n_points, generator=gen)[:2] for _ in range(n_comps)])
    g = utility(y)
    better = (g[pairs[:, 0]] >= g[pairs[:, 1]]).unsqueeze(-1)
    return y, torch.where(better, pairs, pairs.flip(-1))


def loop_fit(ens, y: torch.Tensor, comps: torch.Tensor, steps: int) -> None:
    """The same fit as ``fit_ensemble``, one member at a time (the reference the vectorisation replaces)."""
    from zoo.bope_monne.model import hinge_loss

    ens.reset(0)
    opt = torch.optim.Adam(ens.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        g = torch.stack([ens.member(m, y) for m in range(ens.members)])
        hinge_loss(g, comps).sum().backward()
        opt.step()


def main() -> None:
    """Print the measurements, their ratios and targets."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.deterministic import FixedSingleSampleModel
    from botorch.models.pairwise_gp import PairwiseGP, PairwiseLaplaceMarginalLogLikelihood
    from botorch.models.transforms import Normalize, Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from zoo.bope_monne.acquisition import EnsembleEUBO
    from zoo.bope_monne.model import MonotoneEnsemble, fit_ensemble, hinge_loss

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-replication", action="store_true", help="skip the two whole replications")
    args = parser.parse_args()
    torch.set_num_threads(1)
    r = args.repeats

    y, comps = comparisons(50, 25)
    bounds = torch.stack([torch.zeros(3), torch.ones(3)]).to(torch.float64)
    ens = MonotoneEnsemble(3, members=8)
    monne_s, _ = timed(lambda: fit_ensemble(ens, y, comps, steps=300, seed=0), r)

    def gp_fit() -> None:
        model = PairwiseGP(y, comps, input_transform=Normalize(3, bounds=bounds))
        fit_gpytorch_mll(PairwiseLaplaceMarginalLogLikelihood(model.likelihood, model))

    gp_s, _ = timed(gp_fit, r)
    print(f"surrogate fit, 25 comparisons: MoNNE (M=8, 300 Adam steps) {monne_s * 1e3:.0f} ms, PairwiseGP "
          f"{gp_s * 1e3:.0f} ms, ratio {monne_s / gp_s:.2f}x (target <= 1.5x)")  # fmt: skip

    def step_vec() -> None:
        ens.zero_grad()
        hinge_loss(ens(y), comps).sum().backward()

    def step_loop() -> None:
        ens.zero_grad()
        hinge_loss(torch.stack([ens.member(m, y) for m in range(8)]), comps).sum().backward()

    vec_s, _ = timed(step_vec, 50 * r)
    loop_s, _ = timed(step_loop, 50 * r)
    loop_fit_s, _ = timed(lambda: loop_fit(ens, y, comps, 300), max(1, r // 2))
    print(f"one hinge forward+backward, M=8: vectorised {vec_s * 1e6:.0f} us, member loop {loop_s * 1e6:.0f} us, "
          f"speed-up {loop_s / vec_s:.1f}x; whole 300-step fit: vectorised {monne_s * 1e3:.0f} ms, loop "
          f"{loop_fit_s * 1e3:.0f} ms, speed-up {loop_fit_s / monne_s:.1f}x (target >= 3x)")  # fmt: skip

    torch.manual_seed(0)
    x_box = torch.stack([torch.ones(5), 3 * torch.ones(5)]).to(torch.float64)
    from datamodules.multiobjective.problems import make_problem

    problem = make_problem("vehicle_safety")
    x = 1 + 2 * torch.rand(8, 5, dtype=torch.float64)
    gp = SingleTaskGP(x, problem(x), input_transform=Normalize(5, bounds=x_box), outcome_transform=Standardize(3))
    fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
    acqf = EnsembleEUBO(ens, FixedSingleSampleModel(gp))
    pairs = 1 + 2 * torch.rand(1024, 2, 5, dtype=torch.float64)
    with torch.no_grad():
        eubo_s, _ = timed(lambda: acqf(pairs), 10 * r)
    print(f"ensemble EUBO on 1024 design pairs: {eubo_s * 1e3:.1f} ms (target <= 50 ms)")

    if not args.no_replication:
        from zoo.core.reproduce import config_path, fit

        for arm in ("default", "pairwise_gp"):
            with tempfile.TemporaryDirectory() as root:
                result = fit(config_path("bope_monne", arm), seed=0, root=root)
            name = "MoNNE" if arm == "default" else "PairwiseGP-EUBO"
            print(f"one default replication, {name}: {result.seconds:.1f} s (final U {result.metrics['train/u']:.3f})"
                  + (" (target <= 25 s)" if arm == "default" else ""))  # fmt: skip


if __name__ == "__main__":
    main()
