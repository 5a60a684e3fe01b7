"""Differentiable Structure Learning and Causal Discovery for General Binary Data (Deng, Aragam; NeurIPS 2025).

Three LightningModules over one full-batch binary datamodule (``datamodules.binary``), all ending in an estimated
DAG (a persistent ``estimate`` buffer, ``graph.csv`` in the run folder) scored the same way:

- :class:`MVBNotearsModule`: the single-optimisation learner, per-node logistic conditionals on all interaction
  monomials (saturated up to d = 12 via the zeta transform), group-norm adjacency ``W(θ)``, the NOTEARS augmented
  Lagrangian, one L-BFGS inner solve per epoch (``on_train_epoch_end`` updates ρ and α and stops the run);
  ``max_order: 1`` is the first-order logistic NOTEARS baseline.
- :class:`TwoStageModule`: the scalable "BiNOTEARS-style" variant (the card's reconstruction): a first-order
  logistic NOTEARS (or DAGMA-logistic) fixes a topological order, then each node keeps the parent set among its
  predecessors that minimises the saturated-CPT score (BIC).
- :class:`BaselineDAGModule`: the classical tools run as their libraries run them (pgmpy hill climbing with BIC or
  BDeu, pgmpy PC, DAGMA-logistic) and the exact DP-BIC oracle (d ≤ 8).

Every module logs ``train/bic`` (the per-sample BIC of its current estimate with saturated CPTs; the monitor, known
without a ground truth) and, when the datamodule has a true graph, ``final/cpdag_shd`` (primary), ``final/dag_shd``,
``final/skel_f1``, ``final/tpr``, ``final/fdr`` and friends (``zoo.binary_dag.graphs.structure_metrics``).

Example:
    >>> from datamodules.binary.datamodule import BinaryMVBDataModule
    >>> from zoo.binary_dag.module import TwoStageModule
    >>> dm = BinaryMVBDataModule(graph="interaction5", d=5, n=20000, seed=0)
    >>> module = TwoStageModule(n_vars=dm.n_vars)
    >>> adj = module.learn(dm.problem())
    >>> int(adj.sum())
    5
"""

from __future__ import annotations

import csv
import os
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import Tensor, nn

from zoo.binary_dag import graphs, score
from zoo.binary_dag.model import (
    ALState,
    MVBModel,
    Objective,
    Solver,
    al_update,
    as_tensor,
    fit_augmented_lagrangian,
    initial_intercepts,
    solve_inner,
)
from zoo.core import checks
from zoo.core.config import run_dir
from zoo.core.datamodule import require
from zoo.core.messages import say
from zoo.core.module import ZooModule

Penalty = Literal["l1", "mcp", "quasi_mcp", "mcp_standard"]
Acyclicity = Literal["notears", "dagma"]
Stage1 = Literal["first_order", "dagma_logistic"]
Pen = Literal["bic", "l0"]
Algorithm = Literal["hc_bic", "hc_bdeu", "pc", "oracle", "dagma_logistic"]


class _StructureModule(ZooModule):
    """Shared end of every structure learner: the estimate buffer, ``train/bic``, the truth metrics, ``graph.csv``."""

    monitor: ClassVar[str] = "train/bic"
    mode: ClassVar[Literal["min", "max"]] = "min"
    #: The MVB learners need 0/1 data; the classical baselines take native multi-state data too.
    binary_only: ClassVar[bool] = True

    def _init_common(self, n_vars: int, threshold: float) -> None:
        checks.integer(checks.model("n_vars"), n_vars, low=2)
        checks.non_negative(checks.model("threshold"), threshold)
        self.n_vars, self.threshold = int(n_vars), float(threshold)

    def configure_models(self) -> None:
        """The estimated DAG lives in a persistent buffer (checkpoints carry it)."""
        self.register_buffer("estimate", torch.zeros(self.n_vars, self.n_vars, dtype=torch.bool))

    def setup(self, stage: str) -> None:
        """Read the datamodule's problem once (x, names, card, truth) and check it against the module."""
        problem = require(getattr(self.trainer, "datamodule", None), "problem", type(self).__name__)()
        self.problem = self.check_problem(problem)

    def check_problem(self, problem: dict[str, Any]) -> dict[str, Any]:
        """``problem`` matches ``n_vars`` and, for the MVB learners, is binary; returned unchanged."""
        d = problem["x"].shape[1]
        if d != self.n_vars:
            raise ValueError(f"the data has {d} variables but --model.init_args.n_vars={self.n_vars} (link it "
                             "from the data)")  # fmt: skip
        if self.binary_only and any(int(c) != 2 for c in problem["card"]):
            multi = [n for n, c in zip(problem["names"], problem["card"], strict=True) if int(c) != 2]
            raise ValueError(f"{type(self).__name__} needs binary data but {', '.join(multi[:5])} have more than two "
                             "states: set --data.init_args.binarize=first_vs_rest (or median)")  # fmt: skip
        return problem

    def bic(self, adj: np.ndarray) -> float:
        """Per-sample BIC score of ``adj`` with saturated CPTs on the training data (lower is better)."""
        x, card = self.problem["x"], self.problem["card"]
        return score.dag_score(x, adj, card, pen="bic") / x.shape[0]

    def finish(self, adj: np.ndarray, log: bool = True) -> dict[str, float]:
        """Store, log (``log``: Lightning allows it within the loop only) and write the final estimate.

        Returns the metrics.
        """
        with torch.no_grad():
            self.estimate.copy_(torch.from_numpy(np.asarray(adj, dtype=bool)))
        metrics = {"train/bic": self.bic(adj), "final/n_edges": float(adj.sum())}
        truth = self.problem.get("truth")
        if truth is not None:
            metrics.update({f"final/{k}": float(v) for k, v in graphs.structure_metrics(truth, adj).items()})
        if self._trainer is not None:
            if log:
                self.log_dict(metrics, batch_size=1)
            self.write_graph(adj, run_dir(self.trainer))
        self.finished = True
        return metrics

    def write_graph(self, adj: np.ndarray, folder: str) -> str:
        """``graph.csv`` (``source,target`` by variable name) in ``folder``; returns its path."""
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "graph.csv")
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["source", "target"])
            writer.writerows(graphs.edges(adj, self.problem["names"]))
        return path

    def compute_loss(self, batch: Any) -> None:
        """No gradient loss: each learner's ``training_step`` does its own work."""
        return None


class MVBNotearsModule(_StructureModule):
    """The MVB structure learner: saturated (or order-r) logistic conditionals under the NOTEARS augmented Lagrangian.

    Args:
        n_vars: number of variables (linked from the datamodule).
        max_order: largest interaction order r (``null``: r = d − 1, saturated, when d ≤ 12, else 2; 1: the
            first-order logistic NOTEARS baseline).
        penalty: ``l1`` (card default for the joint model), ``mcp`` (the card's term λ·Σp with λ inside MCP's p, read
            literally), ``mcp_standard`` (MCP with λ once) or ``quasi_mcp`` (an alias of ``mcp`` until the published
            form is known; reconstruction).
        lam: penalty weight λ (card: 0.01 with ``l1``).
        gamma: MCP γ.
        acyclicity: ``notears`` (trace-exp; default) or ``dagma`` (log-det, s = ``s``).
        s: the log-det scale.
        threshold: ω of the post-processing (``W > ω``, then weakest edges removed until acyclic; card 0.3).
        inner_max_iter: L-BFGS iterations per inner solve.
        rho_max: stop when ρ reaches it (NOTEARS 1e16).
        h_tol: stop when h ≤ h_tol (NOTEARS 1e-8).
        solver: the inner L-BFGS, ``torch`` (strong Wolfe) or ``scipy`` (L-BFGS-B, as NOTEARS).
    """

    name: ClassVar[str] = "mvb_notears"
    trainable: ClassVar[bool] = False  # its own L-BFGS per epoch (solve_inner); Lightning's optimizer is a no-op

    def __init__(self, n_vars: int = 10, max_order: int | None = None, penalty: Penalty = "l1", lam: float = 0.01,
                 gamma: float = 2.0, acyclicity: Acyclicity = "notears", s: float = 1.0, threshold: float = 0.3,
                 inner_max_iter: int = 1000, rho_max: float = 1e16, h_tol: float = 1e-8,
                 solver: Solver = "torch") -> None:  # fmt: skip
        self._init_common(n_vars, threshold)
        checks.optional_integer(checks.model("max_order"), max_order, low=1)
        checks.choice(checks.model("penalty"), penalty, ("l1", "mcp", "quasi_mcp", "mcp_standard"))
        checks.non_negative(checks.model("lam"), lam)
        checks.number(checks.model("gamma"), gamma, 1.0, open_low=True)
        checks.choice(checks.model("acyclicity"), acyclicity, ("notears", "dagma"))
        checks.positive(checks.model("s"), s)
        checks.integer(checks.model("inner_max_iter"), inner_max_iter)
        checks.number(checks.model("rho_max"), rho_max, 1.0, open_low=True)
        checks.positive(checks.model("h_tol"), h_tol)
        checks.choice(checks.model("solver"), solver, ("torch", "scipy"))
        self.solver = solver
        self.max_order, self.penalty, self.lam, self.gamma = max_order, penalty, float(lam), float(gamma)
        self.acyclicity, self.s = acyclicity, float(s)
        self.inner_max_iter, self.rho_max, self.h_tol = int(inner_max_iter), float(rho_max), float(h_tol)
        super().__init__()
        self.automatic_optimization = False

    def configure_models(self) -> None:
        """``MVBModel`` plus the augmented-Lagrangian state in buffers (a checkpoint resumes the outer loop)."""
        super().configure_models()
        self.model = MVBModel(self.n_vars, self.max_order)
        self.register_buffer("accepted", self.model.theta.detach().clone())  # θ of the last accepted solve
        # rho, alpha, h, solves, done, initialised
        self.register_buffer("al", torch.tensor([1.0, 0.0, float("inf"), 0.0, 0.0, 0.0], dtype=torch.float64))

    def _state(self) -> ALState:
        rho, alpha, h, solves, done, _ = self.al.tolist()
        return ALState(rho=rho, alpha=alpha, h=h, solves=int(solves), done=bool(done))

    def _store(self, state: ALState) -> None:
        self.al[:5] = torch.tensor([state.rho, state.alpha, state.h, state.solves, float(state.done)])

    def objective(self, x: Tensor) -> Objective:
        """The augmented-Lagrangian objective on a binary (n, d) matrix."""
        return Objective(self.model, self.model.stats(as_tensor(x)), self.penalty, self.lam, self.gamma,
                         self.acyclicity, self.s)  # fmt: skip

    def on_fit_start(self) -> None:
        """A fresh run starts the intercepts at ``logit(mean x_j)`` (card); a resumed one keeps its θ."""
        if self.al[5] == 0:
            with torch.no_grad():
                self.model.theta[:, 0] = initial_intercepts(as_tensor(self.problem["x"]))
                self.accepted.copy_(self.model.theta)
                self.al[5] = 1.0
        self._objective: Objective | None = None
        self.finished = False

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """One inner solve of the augmented Lagrangian at the current (ρ, α), from the last accepted θ."""
        if self._objective is None:
            self._objective = self.objective(batch["x"])
        state = self._state()
        with torch.no_grad():
            self.model.theta.copy_(self.accepted)
        self._h_new = solve_inner(self._objective, state.rho, state.alpha, max_iter=self.inner_max_iter,
                                  solver=self.solver)  # fmt: skip
        self.count_step()
        with torch.no_grad():
            terms = self._objective.terms(state.rho, state.alpha)
        self.log_dict({"train/nll": terms["nll"], "train/h": terms["h"], "train/rho": state.rho,
                       "train/objective": terms["loss"]}, batch_size=1)  # fmt: skip
        return None

    def outer_step(self, h_new: float) -> ALState:
        """The NOTEARS decision after a solve.

        Accept it (θ kept, α ← α + ρh, maybe done) or reject it (ρ ← 10ρ and θ back to the last accepted one, from
        which the next epoch solves again).
        """
        state = self._state()
        accepted = al_update(state, h_new, rho_max=self.rho_max, h_tol=self.h_tol)
        with torch.no_grad():
            if accepted:
                self.accepted.copy_(self.model.theta)
            else:
                self.model.theta.copy_(self.accepted)
        self._store(state)
        return state

    def on_train_epoch_end(self) -> None:
        """Apply :meth:`outer_step` to the epoch's solve, log ``train/bic`` of the current estimate, maybe stop."""
        if not hasattr(self, "_h_new"):
            return
        state = self.outer_step(self._h_new)
        del self._h_new
        last = self.current_epoch + 1 >= (self.trainer.max_epochs or 0) > 0
        if state.done or last:
            self.trainer.should_stop = True
            self.report(state)
        else:
            self.log("train/bic", self.bic(self.estimate_graph()), batch_size=1)

    def report(self, state: ALState, log: bool = True) -> None:
        """Post-process the last accepted θ into the final DAG and report it (saying so when not converged)."""
        if not state.done:
            say(f"MVBNotearsModule stopped before convergence (h={state.h:.3g}, rho={state.rho:.3g} after "
                f"{state.solves} solves): raise --trainer.max_epochs")  # fmt: skip
        with torch.no_grad():
            self.model.theta.copy_(self.accepted)
        self.finish(self.estimate_graph(), log=log)

    def on_train_end(self) -> None:
        """A run stopped otherwise (max_steps, max_time, interrupted) still stores and writes its estimate."""
        if not getattr(self, "finished", False) and self._state().solves > 0:
            self.report(self._state(), log=False)

    def weights(self) -> np.ndarray:
        """``W(θ)`` of the current θ as numpy (d, d)."""
        with torch.no_grad():
            return self.model.adjacency().numpy().copy()

    def estimate_graph(self) -> np.ndarray:
        """The card's post-processing: ``W > ω``, weakest edges removed until acyclic."""
        return graphs.threshold_acyclic(self.weights(), self.threshold)

    def learn(self, problem: dict[str, Any], max_solves: int = 100) -> np.ndarray:
        """Fit outside a Trainer (the whole outer loop at once); returns the estimated DAG."""
        self.problem = self.check_problem(problem)
        x = as_tensor(problem["x"])
        self.model.reset(x)
        state = fit_augmented_lagrangian(self.objective(x), max_solves=max_solves, max_iter=self.inner_max_iter,
                                         rho_max=self.rho_max, h_tol=self.h_tol, solver=self.solver)  # fmt: skip
        self._store(state)
        with torch.no_grad():
            self.accepted.copy_(self.model.theta)
        return self.estimate_graph()


class _OneShotModule(_StructureModule):
    """A learner that runs once in its first training step (``learn``) and stops the run."""

    trainable: ClassVar[bool] = False

    def configure_models(self) -> None:
        super().configure_models()
        self.model = nn.Module()

    def learn(self, problem: dict[str, Any]) -> np.ndarray:
        """Estimate the DAG of ``problem`` (x, names, card, truth)."""
        raise NotImplementedError

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """Run the learner on the datamodule's problem and stop."""
        adj = self.learn(self.problem)
        self.count_step()
        self.finish(adj)
        self.trainer.should_stop = True
        return None


class TwoStageModule(_OneShotModule):
    """The two-stage scalable variant (card "BiNOTEARS-style"; the paper's recipe is unknown: a reconstruction).

    Stage 1 fits a first-order logistic NOTEARS (``r = 1``, ``stage1_penalty`` with ``stage1_lam``/``stage1_gamma``)
    or DAGMA-logistic and takes the topological order of its thresholded DAG (ties by index). Stage 2 chooses, for
    each node, the parents among its predecessors (at most ``max_parents``) minimising ``−LL_j(S) + pen(S)`` with the
    saturated-CPT log-likelihood: exhaustively when there are ≤ ``max_subsets`` subsets, otherwise among the
    ``mi_candidates`` predecessors of highest mutual information.

    Args:
        n_vars: number of variables (linked from the datamodule).
        stage1: ``first_order`` (default) or ``dagma_logistic`` (the ``dagma`` package).
        stage1_penalty: penalty of the first-order fit (card: ``mcp``).
        stage1_lam: its λ (card: 0.05).
        stage1_gamma: its MCP γ (card: 2).
        stage1_lambda1: DAGMA's ℓ1 weight when ``stage1: dagma_logistic``.
        threshold: ω for stage 1's DAG (card 0.3).
        max_parents: stage 2's largest parent set (card 4).
        pen: ``bic`` (default: (log n / 2)·2^{|S|}) or ``l0`` (``lam0``·|S|).
        lam0: the ``l0`` weight per edge (``null``: log(n)/2, reconstructed).
        max_subsets: exhaustive search up to this many candidate subsets (card 5000).
        mi_candidates: predecessors kept by mutual information beyond it (card 8).
    """

    name: ClassVar[str] = "two_stage"

    def __init__(self, n_vars: int = 10, stage1: Stage1 = "first_order", stage1_penalty: Penalty = "mcp",
                 stage1_lam: float = 0.05, stage1_gamma: float = 2.0, stage1_lambda1: float = 0.03,
                 threshold: float = 0.3, max_parents: int = 4, pen: Pen = "bic", lam0: float | None = None,
                 max_subsets: int = 5000, mi_candidates: int = 8) -> None:  # fmt: skip
        self._init_common(n_vars, threshold)
        checks.choice(checks.model("stage1"), stage1, ("first_order", "dagma_logistic"))
        checks.choice(checks.model("stage1_penalty"), stage1_penalty, ("l1", "mcp", "quasi_mcp", "mcp_standard"))
        checks.non_negative(checks.model("stage1_lam"), stage1_lam)
        checks.number(checks.model("stage1_gamma"), stage1_gamma, 1.0, open_low=True)
        checks.non_negative(checks.model("stage1_lambda1"), stage1_lambda1)
        checks.integer(checks.model("max_parents"), max_parents, low=0)
        checks.choice(checks.model("pen"), pen, ("bic", "l0"))
        if lam0 is not None:
            checks.non_negative(checks.model("lam0"), lam0)
        checks.integer(checks.model("max_subsets"), max_subsets)
        checks.integer(checks.model("mi_candidates"), mi_candidates)
        self.stage1, self.stage1_penalty, self.stage1_lam = stage1, stage1_penalty, float(stage1_lam)
        self.stage1_gamma, self.stage1_lambda1 = float(stage1_gamma), float(stage1_lambda1)
        self.max_parents, self.pen, self.lam0 = int(max_parents), pen, lam0
        self.max_subsets, self.mi_candidates = int(max_subsets), int(mi_candidates)
        super().__init__()

    def configure_models(self) -> None:
        """Stage 1's first-order model (its θ is kept in checkpoints) and the order it found."""
        super().configure_models()
        self.model = MVBModel(self.n_vars, max_order=1)
        self.register_buffer("order", torch.arange(self.n_vars))

    def stage1_order(self, x: np.ndarray) -> list[int]:
        """Stage 1: a topological order of the first-order (or DAGMA) DAG, ties broken by index."""
        if self.stage1 == "dagma_logistic":
            from zoo.binary_dag.baselines import dagma_logistic

            adj, _ = dagma_logistic(x, lambda1=self.stage1_lambda1, w_threshold=self.threshold)
        else:
            xt = as_tensor(x)
            self.model.reset(xt)
            obj = Objective(self.model, self.model.stats(xt), self.stage1_penalty, self.stage1_lam, self.stage1_gamma)
            fit_augmented_lagrangian(obj)
            with torch.no_grad():
                adj = graphs.threshold_acyclic(self.model.adjacency().numpy(), self.threshold)
        return graphs.topological_order(adj)

    def learn(self, problem: dict[str, Any]) -> np.ndarray:
        """Stage 1 then stage 2 on ``problem``; returns the DAG."""
        self.problem = self.check_problem(problem)
        x, card = problem["x"], tuple(problem["card"])
        order = self.stage1_order(x)
        with torch.no_grad():
            self.order.copy_(torch.tensor(order))
        return score.prune_to_order(x, order, card, max_parents=self.max_parents, pen=self.pen, lam0=self.lam0,
                                    max_subsets=self.max_subsets, mi_candidates=self.mi_candidates)  # fmt: skip


class BaselineDAGModule(_OneShotModule):
    """The baselines of card ``binary_dag`` in one harness, each run as its library or paper runs it.

    Args:
        n_vars: number of variables (linked from the datamodule).
        algorithm: ``hc_bic`` (pgmpy ``HillClimbSearch``, ``bic-d``), ``hc_bdeu`` (the same with BDeu), ``pc``
            (pgmpy PC, χ² tests at ``alpha``, returned as a DAG), ``oracle`` (the exact DP over all DAGs of the
            two-stage score, d ≤ 8) or ``dagma_logistic`` (``dagma.linear.DagmaLinear(loss_type="logistic")``).
        alpha: PC's significance level (card 0.01).
        max_indegree: hill climbing's in-degree bound (``null``: none, pgmpy's default).
        max_parents: the oracle's largest parent set (``null``: d − 1).
        pen: the oracle's score, ``bic`` or ``l0``.
        lam0: the ``l0`` weight per edge (``null``: log(n)/2, reconstructed).
        lambda1: DAGMA's ℓ1 weight.
        threshold: DAGMA's ``w_threshold`` (card 0.3).
    """

    name: ClassVar[str] = "baseline"

    def __init__(self, n_vars: int = 10, algorithm: Algorithm = "hc_bic", alpha: float = 0.01,
                 max_indegree: int | None = None, max_parents: int | None = None, pen: Pen = "bic",
                 lam0: float | None = None, lambda1: float = 0.03, threshold: float = 0.3) -> None:  # fmt: skip
        self._init_common(n_vars, threshold)
        checks.choice(checks.model("algorithm"), algorithm, ("hc_bic", "hc_bdeu", "pc", "oracle", "dagma_logistic"))
        checks.probability(checks.model("alpha"), alpha, open_low=True, open_high=True)
        checks.optional_integer(checks.model("max_indegree"), max_indegree, low=0)
        checks.optional_integer(checks.model("max_parents"), max_parents, low=0)
        checks.choice(checks.model("pen"), pen, ("bic", "l0"))
        if lam0 is not None:
            checks.non_negative(checks.model("lam0"), lam0)
        checks.non_negative(checks.model("lambda1"), lambda1)
        if algorithm == "oracle" and n_vars > score.DP_MAX_NODES:
            checks.fail(checks.model("algorithm"), algorithm, f"the exact oracle for d ≤ {score.DP_MAX_NODES} "
                        f"variables (the data has {n_vars}): use two_stage or hc_bic")  # fmt: skip
        self.algorithm, self.alpha, self.max_indegree = algorithm, float(alpha), max_indegree
        self.max_parents, self.pen, self.lam0, self.lambda1 = max_parents, pen, lam0, float(lambda1)
        super().__init__()
        self.binary_only = algorithm == "dagma_logistic"

    def learn(self, problem: dict[str, Any]) -> np.ndarray:
        """Run the chosen baseline on ``problem``; returns the DAG."""
        from zoo.binary_dag import baselines

        self.problem = self.check_problem(problem)
        x, names, card = problem["x"], list(problem["names"]), tuple(problem["card"])
        if self.algorithm in ("hc_bic", "hc_bdeu"):
            scoring = "bic-d" if self.algorithm == "hc_bic" else "bdeu"
            return baselines.hill_climb(x, names, card, scoring=scoring, max_indegree=self.max_indegree)
        if self.algorithm == "pc":
            return baselines.pc(x, names, card, alpha=self.alpha)
        if self.algorithm == "oracle":
            adj, _ = score.dp_oracle(x, card, max_parents=self.max_parents, pen=self.pen, lam0=self.lam0)
            return adj
        adj, _ = baselines.dagma_logistic(x, lambda1=self.lambda1, w_threshold=self.threshold)
        return adj
