"""binary_dag: the card's Performance targets, measured side by side in one process on one thread.

- **Same-run timing**: the two-stage method (``TwoStageModule.learn``: first-order logistic NOTEARS, then saturated
  pruning) vs pgmpy hill climbing with BIC on the same data (ER-1, d = 20, n = 10k, interaction conditionals).
  Targets: two-stage ≤ 60 s and ≤ 10× HC-BIC (ratio printed; CPDAG-SHD of both printed beside).
- **Objective evaluation**: one saturated value + gradient at d = 10, n = 10k via the zeta transform (≤ 20 ms), and
  explicit features at r = 2, d = 20, n = 10k (≤ 0.2 s); the sufficient statistics are built once per dataset and
  timed apart.
- **Oracle**: the exact DP at d = 8, n = 20k (≤ 10 s).

    python benchmarks/binary_dag.py [--repeats 3]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _timing import timed


def evaluation(d: int, r: int | None, n: int, repeats: int) -> tuple[float, float]:
    """(statistics seconds, median seconds of one objective value + gradient) for an MVB model."""
    from zoo.binary_dag.model import MVBModel, Objective, initial_intercepts

    x = torch.from_numpy((np.random.default_rng(0).random((n, d)) < 0.5).astype(np.float64))
    model = MVBModel(d, max_order=r, intercepts=initial_intercepts(x))
    stats_s, stats = timed(lambda: model.stats(x), 1)
    with torch.no_grad():
        model.theta.normal_(0, 0.1, generator=torch.Generator().manual_seed(0))
    obj = Objective(model, stats)

    def once() -> None:
        model.zero_grad()
        obj.terms(1.0, 0.5)["loss"].backward()

    once()
    per, _ = timed(once, max(repeats, 5))
    return stats_s, per


def main() -> None:
    """Print the three measurements and their targets."""
    from datamodules.binary.synthetic import interaction5, mvb_problem
    from zoo.binary_dag import baselines, graphs
    from zoo.binary_dag.module import TwoStageModule
    from zoo.binary_dag.score import dp_oracle

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    x, truth = mvb_problem(20, "er", 1, 10_000, "interaction", 2, 4, 0)
    names = [f"X{i}" for i in range(20)]
    problem = {"x": x, "names": names, "card": (2,) * 20, "truth": truth}
    two_s, two_adj = timed(lambda: TwoStageModule(n_vars=20).learn(problem), args.repeats)
    hc_s, hc_adj = timed(lambda: baselines.hill_climb(x, names, (2,) * 20), args.repeats)
    print(f"same-run timing, ER-1 d=20 n=10k (median of {args.repeats}):")
    print(f"  two-stage {two_s:8.2f} s   CPDAG-SHD {graphs.cpdag_shd(truth, two_adj)}   (target <= 60 s)")
    print(f"  HC-BIC    {hc_s:8.2f} s   CPDAG-SHD {graphs.cpdag_shd(truth, hc_adj)}")
    print(f"  ratio two-stage / HC-BIC {two_s / hc_s:6.2f}x   (target <= 10x)")

    st, sat = evaluation(10, None, 10_000, args.repeats)
    st2, exp = evaluation(20, 2, 10_000, args.repeats)
    print("objective value + gradient (median):")
    print(f"  saturated zeta d=10 n=10k   {sat * 1e3:8.2f} ms (target <= 20 ms; statistics once {st * 1e3:.1f} ms)")
    print(f"  explicit r=2 d=20 n=10k     {exp * 1e3:8.2f} ms (target <= 200 ms; features once {st2 * 1e3:.1f} ms)")

    x8, _ = mvb_problem(8, "er", 1, 20_000, "interaction", 2, 4, 0)
    dp_s, _ = timed(lambda: dp_oracle(x8, (2,) * 8), 1)
    x5, _ = interaction5(100_000, 0)
    dp5_s, _ = timed(lambda: dp_oracle(x5, (2,) * 5), 1)
    print(f"oracle DP: d=8 n=20k {dp_s:6.2f} s (target <= 10 s); interaction5 n=100k {dp5_s:6.2f} s")


if __name__ == "__main__":
    main()
