"""xrlhf selection cost: ConvexExplainer vs k-NN items/s, and the RM unlearning + policy re-tune (card "Performance").

The card's size: 100 unsatisfactory-style targets (RLHF responses of the world's test prompts, the unsatisfactory ones
first) explained against the 2000 training comparisons of seed 0 (d = 20), on two threads at most. Both selectors run
interleaved in one process on the same targets; the k-NN arm returns the convex set's size per item (as in the
protocol). Targets: convex ≤ 60 s for the 100 items; the convex/k-NN ratio is informational (the card expects ≥ 100×).
Also timed: 200 full-batch NegGrad+ steps of the linear RM (torch, float64) and the closed-form policy re-tune of 1000
prompts (target ≤ 2 s together).

    python benchmarks/xrlhf_selection.py [--items 100] [--repeats 3] [--k-cand 100]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k-cand", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(2)
    from zoo.xrlhf.explain import ConvexExplainer, knn_select
    from zoo.xrlhf.model import LinearRewardModel, bt_loss, closed_form_choice
    from zoo.xrlhf.world import fit_bt, make_world, rlhf_choice

    world = make_world(0)
    theta = fit_bt(world.delta_phi)
    rows = np.arange(len(world.test_phi))
    rl = rlhf_choice(world.test_phi, world.sft_logits, theta)
    sft = world.sft_logits.argmax(axis=1)
    unsat = world.r_star[rows, rl] < world.r_star[rows, sft]
    order = np.concatenate([np.flatnonzero(unsat), np.flatnonzero(~unsat)])[: args.items]
    targets = world.test_phi[order, rl[order]]
    explainer = ConvexExplainer(k_cand=args.k_cand).fit(world.delta_phi)
    convex_s, knn_s, sizes = [], [], []
    for _ in range(args.repeats):  # interleaved, so machine load hits both alike
        start = time.perf_counter()
        sizes = [len(explainer.explain(t).indices) for t in targets]
        convex_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        for t, size in zip(targets, sizes, strict=True):
            knn_select(world.delta_phi, t, size)
        knn_s.append(time.perf_counter() - start)
    c, k = statistics.median(convex_s), statistics.median(knn_s)
    n = len(targets)
    print(f"selection, {n} items against {len(world.delta_phi)} comparisons (d = {world.delta_phi.shape[1]}, "
          f"k_cand {args.k_cand}, median |S| {statistics.median(sizes):.0f}): convex {c:.2f} s ({n / c:.1f} items/s; "
          f"target <= 60 s), k-NN {1000 * k:.1f} ms ({n / k:.0f} items/s); ratio convex/k-NN {c / k:.0f}x "
          f"(medians of {args.repeats})")  # fmt: skip

    model = LinearRewardModel(world.delta_phi.shape[1])
    model.head.weight.data[0] = torch.as_tensor(theta)
    forget = torch.as_tensor(world.delta_phi[:400])
    retain = torch.as_tensor(world.delta_phi[400:])
    opt = torch.optim.SGD(model.parameters(), lr=0.5, weight_decay=1e-3)
    phi, logits = torch.as_tensor(world.test_phi), torch.as_tensor(world.sft_logits)
    start = time.perf_counter()
    for _ in range(200):
        loss = 0.9 * bt_loss(model, retain) - 0.1 * bt_loss(model, forget)
        opt.zero_grad()
        loss.backward()
        opt.step()
    unlearn = time.perf_counter() - start
    start = time.perf_counter()
    closed_form_choice(phi, logits, model, 0.1)
    policy = time.perf_counter() - start
    print(f"RM unlearning, 200 full-batch NegGrad+ steps: {unlearn:.3f} s; closed-form policy re-tune of "
          f"{len(phi)} prompts: {1000 * policy:.2f} ms (target <= 2 s together)")  # fmt: skip


if __name__ == "__main__":
    main()
