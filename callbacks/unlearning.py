"""Machine unlearning as one callback: UAM (Unlearning-Aware Minimization) and the standard baselines.

``UnlearningCallback(strategy=...)`` switches the module to manual optimisation and runs one unlearning step per
``{"forget": ..., "retain": ...}`` batch; the module's ``training_step`` only delegates to
:meth:`UnlearningCallback.unlearning_step`. Before unlearning it provides the original model (trained with the
module's original recipe on the whole training set, unless ``--model.init_args.pretrained`` is given) and the Retrain
oracle (the same recipe on the retain set only), both fitted by inner Lightning ``Trainer`` runs and cached; the
metrics and the gap to the oracle are logged every ``eval_every_n_epochs`` and written to ``unlearning.json``.

Module protocol :class:`Unlearnable` (checked in ``setup``): ``forget_loss(batch)``, ``retain_loss(batch)``,
``unlearning_metrics(dm)``, ``gap_metrics`` (names averaged into the gap), plus per strategy
``num_classes`` (SalUn), ``distill_loss(batch, teacher, temperature)`` and ``model`` (SCRUB),
``rmu_losses``, ``rmu_retain_loss`` and ``prepare_unlearning`` (RMU); optional ``concat_losses(forget, retain)``
(one forward on the concatenated batch), ``unlearn_parameters()`` and ``check_data(datamodule)`` (raises on a bad
model/data combination, called in ``setup`` before the original is trained). :class:`UnlearnableModule` is the base that
hands the step to the callback. Datamodule protocol :class:`UnlearningData`: ``with_phase(phase)``,
``split_info()``; per strategy ``forget_dataloader()`` (SCRUB's max-steps, SalUn's mask), ``set_unlearn_batches``
(SalUn's mixed batches) and ``validation_split(fraction)`` (l1-sparse's ``l1_gamma0: select``); optional
``attach_original(module)``, called once the original weights are in place and before the oracle is trained, for a
forget set that the original model defines (``xrlhf``'s module explains unsatisfactory responses with the original
RM's features).

A loss or weight that becomes non-finite stops the run with one line naming the step, the strategy and the options to
lower (:mod:`zoo.core.divergence`), before any metric reads the ``nan`` weights.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from torch import Tensor

import zoo
from zoo.core import checks
from zoo.core.cache import cache_root, fingerprint
from zoo.core.config import run_dir
from zoo.core.divergence import Diverged, LossGuard, first_nonfinite, stop
from zoo.core.gradients import cosine_rho, dot, global_norm, projection_coefficients
from zoo.core.messages import say
from zoo.core.module import ZooModule
from zoo.core.protocols import check
from zoo.core.rng import preserved_rng

Strategy = Literal[
    "uam", "finetune", "neggrad", "neggrad_plus", "graddiff", "l1_sparse", "salun", "scrub", "rmu", "rmu_uam", "retrain"
]
STRATEGIES = ("uam", "finetune", "neggrad", "neggrad_plus", "graddiff", "l1_sparse", "salun", "scrub", "rmu", "rmu_uam",
              "retrain")  # fmt: skip

_NEEDS = {
    "salun": ("num_classes",),
    "scrub": ("distill_loss", "model"),
    "rmu": ("rmu_losses", "rmu_retain_loss", "prepare_unlearning"),
    "rmu_uam": ("rmu_losses", "rmu_retain_loss", "prepare_unlearning"),
}
#: What a strategy needs of the datamodule beyond :class:`UnlearningData`.
_DATA_NEEDS = {
    "salun": ("forget_dataloader", "set_unlearn_batches", "split_info"),
    "scrub": ("forget_dataloader",),
}
#: Default grid of l1-sparse's ``gamma_0`` (``l1_gamma0: select``): the library example 1e-5 up to 1, since the
#: penalty moves each weight by up to ``lr * steps * gamma_0`` (digits, 5 epochs of 18 steps at lr 0.02: 1.8 gamma_0
#: against weights of about 0.1-0.2); on digits the validation gap is smallest at 0.2-0.3, inside the grid.
L1_GAMMA0_GRID = (1e-5, 1e-4, 1e-3, 1e-2, 3e-2, 0.1, 0.2, 0.3, 0.5, 1.0)
#: What to lower (or raise) when a strategy diverges, after the learning rate.
_KNOBS = {
    "uam": "UnlearningCallback.rho={rho!r}",
    "neggrad": "--trainer.max_epochs (gradient ascent is unbounded)",
    "neggrad_plus": "the ascent weight 1 - UnlearningCallback.beta (beta={beta!r})",
    "graddiff": "--trainer.max_epochs (the ascent term is unbounded)",
    "l1_sparse": "UnlearningCallback.l1_gamma0={l1_gamma0_used!r}",
    "scrub": "UnlearningCallback.scrub_msteps={scrub_msteps!r} (the max-steps ascend an unbounded KL)",
    "rmu": "UnlearningCallback.rmu_c={rmu_c!r} or UnlearningCallback.rmu_alpha={rmu_alpha!r}",
    "rmu_uam": "UnlearningCallback.rho={rho!r}, UnlearningCallback.rmu_c={rmu_c!r} or UnlearningCallback.rmu_alpha="
    "{rmu_alpha!r}",
}


@runtime_checkable
class Unlearnable(Protocol):
    """What :class:`UnlearningCallback` needs of every module it drives (strategies add the names in ``_NEEDS``)."""

    #: Metric names averaged into the gap to the Retrain oracle.
    gap_metrics: tuple[str, ...]

    def forget_loss(self, batch: Any) -> Tensor:
        """Loss on a forget batch (ascended, or its gradient defines the UAM perturbation)."""
        ...

    def retain_loss(self, batch: Any) -> Tensor:
        """Loss on a retain batch."""
        ...

    def unlearning_metrics(self, datamodule: Any) -> dict[str, float]:
        """Forget/retain/test metrics on the datamodule's full splits."""
        ...


@runtime_checkable
class UnlearningData(Protocol):
    """What :class:`UnlearningCallback` needs of the datamodule."""

    def with_phase(self, phase: str) -> Any:
        """The same data serving one phase (``original``, ``retrain``, ``unlearn``)."""
        ...

    def split_info(self) -> dict[str, Any]:
        """The forget/retain split, for ``unlearning.json``."""
        ...


class UnlearnableModule(ZooModule):
    """Base of the modules :class:`UnlearningCallback` drives (a method opts in by subclassing it).

    Without the callback, ``training_step`` is the supervised step of the original recipe; with it, the callback's
    ``unlearning_step`` (manual optimisation). Subclasses provide the :class:`Unlearnable` members: ``forget_loss``,
    ``retain_loss``, ``unlearning_metrics`` and ``gap_metrics``.
    """

    #: Metrics averaged into the gap to the Retrain oracle.
    gap_metrics: ClassVar[tuple[str, ...]] = ()
    #: Hyperparameters only the unlearning phase reads: left out of the cache key of the original and the oracle,
    #: so changing the unlearning recipe never retrains them.
    unlearning_only_hparams: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        #: The attached :class:`UnlearningCallback` (set by its ``setup``), else ``None``.
        self.unlearning: Any = None
        super().__init__(**kwargs)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor | None:
        """Delegate to the unlearning callback when one is attached, else the supervised step."""
        if self.unlearning is not None:
            return self.unlearning.unlearning_step(self, batch)
        return super().training_step(batch, batch_idx)


class UnlearningCallback(Callback):
    """Unlearn the forget set with the chosen strategy (see zoo/uam/README.md for every equation).

    Args:
        strategy: ``uam`` (perturb along the forget gradient, retain gradient there, optional projection),
            ``finetune`` (retain CE), ``neggrad`` (ascent on the forget loss), ``neggrad_plus``
            (``beta L_r - (1 - beta) L_f``), ``graddiff`` (``L_r - L_f``), ``l1_sparse`` (retain CE +
            ``gamma_e ||theta||_1``, Unlearn-Sparse), ``salun`` (saliency-masked random-label forgetting on mixed
            forget+retain batches, Unlearn-Saliency), ``scrub`` (Kurmanji et al.'s max/min teacher KL), and for
            language models ``rmu`` (``mse(z_f, c u) + alpha mse(z_r, z_r(w_bar))``) or ``rmu_uam`` (see
            ``lm_mode``); ``retrain`` is the exact oracle as the result (the module takes the Retrain weights and
            the unlearning steps only log the retain loss).
        rho: UAM perturbation radius.
        rho_scale: ``absolute`` (the radius is ``rho``, the library) or ``relative`` (the radius is ``rho ||w||``,
            the global norm of the unlearned weights at that step, as SAM-family code scales it: the same ``rho``
            then means the same relative move on networks and inputs of any size; classifier ``uam`` only).
        gamma: strength of the ``[I - gamma P_f]`` projection of the retain gradient.
        projection: ``always`` (default), ``conflict_only`` (only when ``<g_r, g_f> > 0``) or ``none`` (the public
            library's behaviour, where ``gamma`` is stored but never applied).
        projection_scope: ``global`` (one forget direction over all parameters) or ``per_tensor``.
        perturb_norm: ``l2`` (``rho g_f / (||g_f|| + 1e-16)``, the library) or ``l2_squared`` (``/ ||g_f||^2``, the
            extracted paper text).
        ascent_forward: ``concat`` (one forward on ``[x_f; x_r]``, forget loss on the forget part: the library, BN
            statistics mixed) or ``forget_only``.
        rho_schedule: ``constant`` or ``cosine`` (``rho0 (1 + cos(pi (t - t0) / (T - t0))) / 2`` for ``t >= t0``).
        cosine_total_step: ``T`` of the cosine schedule (``None`` = all steps of the run).
        cosine_start_step: ``t0`` of the cosine schedule.
        ascent_sample: truncate forget batches to this many samples in the ascent pass (``None`` = whole batch).
        beta: NegGrad+ retain weight.
        l1_gamma0: l1-sparse's ``gamma_0``: the penalty of epoch ``e`` of ``E`` is ``gamma_0 (1 - e / E)`` (constant
            within the epoch; Unlearn-Sparse ``unlearn/FT.py``, ``FT_iter``). ``select`` (default): chosen from
            ``l1_gamma0_grid`` on a forget/retain validation split before unlearning (see ``select_l1_gamma0``).
        l1_gamma0_grid: the grid of ``l1_gamma0: select`` (``None``: ``L1_GAMMA0_GRID``, 1e-5 ... 1).
        select_val_fraction: fraction of D_f and of D_r held out as the validation split of ``l1_gamma0: select``.
        salun_keep: fraction of weights SalUn updates (largest ``|grad L_f(theta_o)|``; 0.5 = above the median).
        salun_relabel: when SalUn draws each forget sample's random label (uniform over all classes, the true one
            included): ``epoch`` (default; Unlearn-Saliency ``unlearn/RL.py`` draws them per call, once an epoch) or
            ``once`` for the whole run.
        scrub_alpha: SCRUB weight of the retain KL term (SCRUB's CIFAR-10 setting: 0.001).
        scrub_gamma: SCRUB weight of the retain CE term (0.99).
        scrub_msteps: SCRUB epochs that start with a max-step pass over D_f (forget KL ascent, one step per forget
            batch) before the min-steps; later epochs run min-steps only (2).
        scrub_temperature: SCRUB distillation temperature (4).
        original_epochs: epochs of the original recipe when the module has no ``pretrained`` weights.
        retrain_epochs: epochs of the Retrain oracle (``None`` = ``original_epochs``).
        oracle: train the Retrain oracle and report the gap to it (the gap is never reported without it).
        eval_every_n_epochs: evaluate the unlearning metrics every so many epochs (and after the last).
        cache: cache the original and oracle weights under ``$ZOO_CACHE/unlearning`` (default ``~/.cache/zoo``), keyed
            by the module and data settings, the data files' contents, the phase, epochs, seed and zoo version.
        seed: seed of the original and oracle runs (``None`` = the datamodule's ``seed``).
        lm_mode: ``rmu_uam`` (default, reconstruction): ``w - eta [grad L_f^RMU(w) + alpha [I - gamma P_f]
            grad L_r(w_hat)]`` with ``w_hat = w + rho d/||d||``, ``d`` the ascent direction of
            ``||z_f - z_f(w_bar)||^2`` (``-grad L_f^RMU`` while that is ~0); ``alg2_after_rmu``: ``rmu_warmup_steps``
            RMU steps, then the extracted Algorithm 2; ``alg2_strict``: Algorithm 2 alone (a warned no-op from
            ``w = w_bar``).
        rmu_c: RMU steering coefficient ``c`` (the tiny LM's activations need ~20; Zephyr-7B used 6.5).
        rmu_alpha: RMU retain weight ``alpha`` (Zephyr-7B: 1200).
        rmu_warmup_steps: RMU steps before Algorithm 2 in ``alg2_after_rmu``.
    """

    def __init__(
        self,
        strategy: Strategy = "uam",
        rho: float = 1.0,
        rho_scale: Literal["absolute", "relative"] = "absolute",
        gamma: float = 2.0,
        projection: Literal["always", "conflict_only", "none"] = "always",
        projection_scope: Literal["global", "per_tensor"] = "global",
        perturb_norm: Literal["l2", "l2_squared"] = "l2",
        ascent_forward: Literal["concat", "forget_only"] = "concat",
        rho_schedule: Literal["constant", "cosine"] = "constant",
        cosine_total_step: int | None = None,
        cosine_start_step: int = 0,
        ascent_sample: int | None = None,
        beta: float = 0.9,
        l1_gamma0: float | Literal["select"] = "select",
        l1_gamma0_grid: list[float] | None = None,
        select_val_fraction: float = 0.2,
        salun_keep: float = 0.5,
        salun_relabel: Literal["epoch", "once"] = "epoch",
        scrub_alpha: float = 0.001,
        scrub_gamma: float = 0.99,
        scrub_msteps: int = 2,
        scrub_temperature: float = 4.0,
        original_epochs: int = 120,
        retrain_epochs: int | None = None,
        oracle: bool = True,
        eval_every_n_epochs: int = 1,
        cache: bool = True,
        seed: int | None = None,
        lm_mode: Literal["rmu_uam", "alg2_after_rmu", "alg2_strict"] = "rmu_uam",
        rmu_c: float = 20.0,
        rmu_alpha: float = 100.0,
        rmu_warmup_steps: int = 20,
    ) -> None:
        def name(arg: str) -> str:
            return checks.callback(self, arg)

        checks.choice(name("strategy"), strategy, STRATEGIES)
        checks.choice(name("lm_mode"), lm_mode, ("rmu_uam", "alg2_after_rmu", "alg2_strict"))
        for arg, value, options in (
            ("projection", projection, ("always", "conflict_only", "none")),
            ("projection_scope", projection_scope, ("global", "per_tensor")),
            ("perturb_norm", perturb_norm, ("l2", "l2_squared")),
            ("ascent_forward", ascent_forward, ("concat", "forget_only")),
            ("rho_schedule", rho_schedule, ("constant", "cosine")),
            ("rho_scale", rho_scale, ("absolute", "relative")),
        ):
            checks.choice(name(arg), value, options)
        for arg, value in (("rho", rho), ("gamma", gamma), ("scrub_alpha", scrub_alpha), ("scrub_gamma", scrub_gamma),
                           ("rmu_c", rmu_c), ("rmu_alpha", rmu_alpha)):  # fmt: skip
            checks.non_negative(name(arg), value)
        if isinstance(l1_gamma0, str):
            checks.choice(name("l1_gamma0"), l1_gamma0, ("select",))
            if strategy == "l1_sparse" and not oracle:  # the selection scores the validation gap to the oracle
                checks.fail(name("l1_gamma0"), l1_gamma0, "a number when oracle=false (select scores the oracle gap)")
        else:
            checks.non_negative(name("l1_gamma0"), l1_gamma0)
        grid = list(L1_GAMMA0_GRID if l1_gamma0_grid is None else l1_gamma0_grid)
        if not grid or not all(isinstance(g, int | float) and not isinstance(g, bool) and 0 <= g < float("inf")
                                for g in grid):  # fmt: skip
            checks.fail(name("l1_gamma0_grid"), l1_gamma0_grid, "a non-empty list of finite numbers >= 0")
        checks.probability(name("select_val_fraction"), select_val_fraction, open_low=True, open_high=True)
        checks.choice(name("salun_relabel"), salun_relabel, ("epoch", "once"))
        checks.positive(name("scrub_temperature"), scrub_temperature)  # the logits are divided by it
        checks.probability(name("beta"), beta)
        checks.probability(name("salun_keep"), salun_keep, open_low=True)
        checks.integer(name("eval_every_n_epochs"), eval_every_n_epochs)
        checks.optional_integer(name("ascent_sample"), ascent_sample)  # an empty ascent batch makes every weight NaN
        if rho_scale == "relative" and strategy == "rmu_uam":  # the LM step sizes its radius without the weights
            checks.fail(name("rho_scale"), rho_scale, "'absolute' for strategy=rmu_uam (relative: classifier uam only)")
        checks.integer(name("cosine_start_step"), cosine_start_step, 0)
        checks.optional_integer(name("cosine_total_step"), cosine_total_step)
        if cosine_total_step is not None and cosine_total_step <= cosine_start_step:
            checks.fail(
                name("cosine_total_step"), cosine_total_step, f"an integer > cosine_start_step={cosine_start_step}"
            )
        for arg, value in (("scrub_msteps", scrub_msteps), ("rmu_warmup_steps", rmu_warmup_steps),
                           ("original_epochs", original_epochs)):  # fmt: skip
            checks.integer(name(arg), value, 0)
        checks.optional_integer(name("retrain_epochs"), retrain_epochs, 0)  # -1 would be Lightning's "no limit"
        checks.optional_integer(name("seed"), seed, 0, 2**32 - 1)  # Lightning replaces other seeds by 0
        self.strategy, self.rho, self.gamma, self.projection = strategy, rho, gamma, projection
        self.rho_scale = rho_scale
        self.projection_scope, self.perturb_norm, self.ascent_forward = projection_scope, perturb_norm, ascent_forward
        self.rho_schedule, self.cosine_total_step, self.cosine_start_step = (
            rho_schedule,
            cosine_total_step,
            cosine_start_step,
        )
        self.ascent_sample, self.beta, self.l1_gamma0, self.salun_keep = ascent_sample, beta, l1_gamma0, salun_keep
        self.l1_gamma0_grid, self.select_val_fraction, self.salun_relabel = grid, select_val_fraction, salun_relabel
        #: The ``gamma_0`` l1-sparse runs with (``l1_gamma0``, or the grid's choice once ``setup`` has selected it).
        self.l1_gamma0_used: float | None = None if isinstance(l1_gamma0, str) else float(l1_gamma0)
        #: ``{gamma_0: validation gap to Retrain}`` of the selection (empty without it).
        self.l1_selection: dict[str, float] = {}
        #: SCRUB max-steps taken per epoch (``{epoch: steps}``).
        self.scrub_max_steps: dict[int, int] = {}
        self._salun_labels: Tensor | None = None
        self._salun_epoch = -1
        self._salun_seed, self._salun_classes, self._salun_n = 0, 2, 0
        self._guard = LossGuard()
        self.scrub_alpha, self.scrub_gamma, self.scrub_msteps = scrub_alpha, scrub_gamma, scrub_msteps
        self.scrub_temperature = scrub_temperature
        self.original_epochs, self.retrain_epochs, self.oracle = original_epochs, retrain_epochs, oracle
        self.eval_every_n_epochs, self.cache, self.seed = eval_every_n_epochs, cache, seed
        self.lm_mode, self.rmu_c, self.rmu_alpha, self.rmu_warmup_steps = lm_mode, rmu_c, rmu_alpha, rmu_warmup_steps
        self.zero_forget_grad_steps = 0
        self.step_count = 0
        self.before: dict[str, float] = {}
        self.oracle_metrics: dict[str, float] | None = None
        self.history: list[dict[str, float]] = []
        self._history_step: int | None = None  # step_count of the last history entry (reused by on_fit_end)
        self.final: dict[str, float] = {}
        self._mask: list[Tensor] | None = None
        self._anchor: list[Tensor] | None = None
        self._teacher: torch.nn.Module | None = None
        self._total_steps: int | None = None

    # ------------------------------------------------------------------------------------------------------------
    # Setup: protocol, original weights, oracle, strategy state.
    # ------------------------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Check the protocols, switch to manual optimisation, load the original and train the oracle."""
        if stage != "fit":
            return
        who = f"UnlearningCallback(strategy={self.strategy})"
        check(pl_module, Unlearnable, who, "module", extra=_NEEDS.get(self.strategy, ()))
        data_needs = _DATA_NEEDS.get(self.strategy, ())
        if self.strategy == "l1_sparse" and self.l1_gamma0 == "select":
            data_needs = ("validation_split",)
        dm = check(trainer.datamodule, UnlearningData, who, "datamodule", extra=data_needs)
        if hasattr(pl_module, "check_data"):  # a bad model/data combination fails here, before anything trains
            pl_module.check_data(dm)
        pl_module.automatic_optimization = False
        pl_module.unlearning = self
        # fast_dev_run is a smoke test: one epoch each for the original and the oracle.
        original_epochs = min(self.original_epochs, 1) if trainer.fast_dev_run else self.original_epochs
        if getattr(pl_module.hparams, "pretrained", None) is None and original_epochs > 0:
            pl_module.load_state_dict(self._train_phase(trainer, pl_module, "original", original_epochs))
        elif getattr(pl_module.hparams, "pretrained", None) is None:
            warnings.warn(f"{who}: no pretrained weights and original_epochs=0: unlearning a random network")
        if hasattr(dm, "attach_original"):  # a forget set the original model defines (xrlhf's explanations)
            dm.attach_original(pl_module)
        if getattr(pl_module.hparams, "pretrained", None) is not None:
            bad = first_nonfinite(pl_module.parameters())
            if bad is not None:
                checks.fail(checks.model("pretrained"), pl_module.hparams.pretrained, "finite weights (found nan/inf)")
        else:  # the original recipe's last step (its loss is checked by ZooModule's guard)
            knobs = pl_module.divergence_knobs() if hasattr(pl_module, "divergence_knobs") else None
            self._check_weights(pl_module, "original model's weights", None, None, knobs)
        self.before = {f"original/{k}": v for k, v in pl_module.unlearning_metrics(dm).items()}
        oracle = None
        if self.oracle or self.strategy == "retrain":
            epochs = self.original_epochs if self.retrain_epochs is None else self.retrain_epochs
            epochs = min(epochs, 1) if trainer.fast_dev_run else epochs
            oracle = self._fresh(pl_module)
            oracle_state = self._train_phase(trainer, pl_module, "retrain", epochs)
            oracle.load_state_dict(oracle_state)
            if self.oracle:
                self.oracle_metrics = oracle.unlearning_metrics(dm)
            if self.strategy == "retrain":  # the exact oracle is the unlearned model
                pl_module.load_state_dict(oracle_state)
        self._prepare_strategy(trainer, pl_module, oracle)

    def _fresh(self, module: LightningModule) -> LightningModule:
        """A new module of the same class and hyperparameters, without pretrained weights."""
        kwargs = {k: v for k, v in module.hparams.items() if not k.startswith("_")}
        kwargs["pretrained"] = None
        return type(module)(**kwargs)

    def _train_phase(self, trainer: Trainer, module: LightningModule, phase: str, epochs: int) -> dict[str, Tensor]:
        """State dict of ``module``'s class trained for ``phase`` (original recipe) by an inner Trainer, cached."""
        dm = trainer.datamodule
        seed = dm.seed if self.seed is None else self.seed
        skip = {"pretrained", *getattr(module, "unlearning_only_hparams", ())}  # the unlearning recipe: not in key
        hp_m = {k: v for k, v in module.hparams.items() if not k.startswith("_") and k not in skip}
        hp_d = {k: v for k, v in dm.hparams.items() if k not in ("phase", "eval_batch_size", "forget_batch_size")}
        files = {k: fingerprint(v) for k, v in hp_d.items() if isinstance(v, str) and os.path.exists(v)}
        key = json.dumps([type(module).__module__, type(module).__qualname__, hp_m, hp_d, files, phase, epochs, seed,
                          zoo.__version__], sort_keys=True, default=str)  # fmt: skip
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        path = cache_root() / "unlearning" / f"{phase}-{digest}.pt"
        if self.cache and path.exists():
            say(f"unlearning: the {phase} model from the cache, {path}")
            return torch.load(path, map_location="cpu", weights_only=True)
        where = f"; caching {path}" if self.cache else " (cache: false)"
        data = {"original": "all training data", "retrain": "the retain set"}.get(phase, f"the {phase} data")
        say(f"unlearning: training the {phase} model once, {epochs} epochs of {type(module).__name__} on {data} "
            f"(the original recipe){where}")  # fmt: skip
        start = time.perf_counter()
        with preserved_rng(threads=False):
            try:
                state = self._fit_fresh(trainer, module, phase, epochs, seed)
            except Diverged as exc:  # say which inner run diverged: its recipe is the original one
                raise Diverged(f"UnlearningCallback: training the {phase} model (the original recipe, {epochs} "
                               f"epochs): {exc}") from exc  # fmt: skip
        say(f"unlearning: trained the {phase} model in {time.perf_counter() - start:.1f} s")
        if self.cache:  # write-then-rename: DDP ranks (or parallel jobs) training the same original never clash
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(state, tmp)
            os.replace(tmp, path)
        return state

    def _fit_fresh(
        self, trainer: Trainer, module: LightningModule, phase: str, epochs: int, seed: int
    ) -> dict[str, Tensor]:
        """Seed, build a fresh module and fit it for ``phase`` with an inner Trainer; its CPU state dict."""
        dm = trainer.datamodule
        seed_everything(seed, verbose=False)
        fresh = self._fresh(module)
        device = trainer.strategy.root_device  # this rank's own device (not cuda:0 on every DDP rank)
        inner = Trainer(
            accelerator="cuda" if device.type == "cuda" else "cpu",
            devices=[device.index or 0] if device.type == "cuda" else 1,
            max_epochs=epochs,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*(does not have many workers|limit_val_batches).*")
            inner.fit(fresh, datamodule=dm.with_phase(phase))
        return {k: v.detach().cpu() for k, v in fresh.state_dict().items()}

    def _params(self, module: LightningModule) -> list[Tensor]:
        if hasattr(module, "unlearn_parameters"):
            return list(module.unlearn_parameters())
        return [p for p in module.parameters() if p.requires_grad]

    # ------------------------------------------------------------------------------------------------------------
    # Divergence guard (issue #21): one line naming the step, the strategy and the options to lower.
    # ------------------------------------------------------------------------------------------------------------
    def _who(self) -> str:
        return f"UnlearningCallback(strategy={self.strategy})"

    def _knobs(self, module: Any) -> str:
        """The options to lower when this strategy diverges: the unlearning learning rate, then the strategy's own."""
        lr = getattr(module, "lr", None)
        first = f"--model.init_args.lr={lr!r}" if lr is not None else "the learning rate"
        extra = _KNOBS.get(self.strategy, "").format(**vars(self))
        return f"{first} or {extra}" if extra else first

    def _check_weights(
        self, module: Any, what: str, step: int | None, epoch: int | None, knobs: str | None = None
    ) -> None:
        """Stop with :class:`zoo.core.divergence.Diverged` when a trainable weight is ``nan`` or ``inf``."""
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        bad = first_nonfinite(p for _, p in named)
        if bad is not None:
            stop(self._who(), f"{what} ({named[bad][0]} first)", step, epoch, knobs or self._knobs(module))

    def _prepare_strategy(self, trainer: Trainer, module: LightningModule, oracle: LightningModule | None) -> None:
        """Strategy state computed once from the original weights.

        The frozen copy, SalUn's mask and mixed batches, SCRUB's teacher, l1-sparse's selected ``gamma_0``.
        """
        if hasattr(module, "prepare_unlearning"):
            module.prepare_unlearning(self.strategy)
        if self.strategy == "l1_sparse" and self.l1_gamma0 == "select":
            assert oracle is not None  # __init__ rejects select without the oracle
            self.l1_gamma0_used, self.l1_selection = self.select_l1_gamma0(trainer, module, oracle)
            gaps = ", ".join(f"{k}: {v:.2f}" for k, v in self.l1_selection.items())
            say(f"unlearning: l1_gamma0 = {self.l1_gamma0_used:g}, chosen on the forget/retain validation split "
                f"(validation gap to Retrain per gamma_0: {gaps})")  # fmt: skip
        if self.strategy == "salun":
            self._mask, self._anchor = self._saliency_mask(trainer, module)
            dm = trainer.datamodule
            dm.set_unlearn_batches("mixed")  # one epoch = one shuffled pass over D_f and D_r
            self._salun_seed = dm.seed if self.seed is None else self.seed
            self._salun_classes, self._salun_n = int(module.num_classes), int(dm.split_info()["n_forget"])
            self._salun_labels, self._salun_epoch = None, -1
        if self.strategy == "scrub":
            self._teacher = copy.deepcopy(module.model).eval()
            for p in self._teacher.parameters():
                p.requires_grad_(False)

    def select_l1_gamma0(
        self, trainer: Trainer, module: LightningModule, oracle: LightningModule
    ) -> tuple[float, dict[str, float]]:
        """Choose l1-sparse's ``gamma_0`` from ``l1_gamma0_grid`` on a forget/retain validation split (never test).

        The datamodule holds out ``select_val_fraction`` of D_f and of D_r (``validation_split``). For each grid value
        a copy of the original runs l1-sparse as the run will (the module's unlearning optimizer, ``max_epochs``
        epochs of shuffled retain batches of the datamodule's ``batch_size``, ``gamma_0 (1 - e / E)`` in epoch ``e``)
        on the retain part that is not held out; its score is the validation gap to the Retrain oracle,
        ``(|FA_val - FA_val(oracle)| + |RA_val - RA_val(oracle)|) / 2`` (top-1 accuracy in %, training labels; the
        card's "tune on the val gap"). The smallest gap wins, ties to the smaller ``gamma_0``. Classifier batches
        ``(x, y)`` only (``module(x)`` gives the logits). Unlearn-Sparse tunes its ``--alpha`` by hand per setting
        (README.MD, ``FT_prune``); the grid search is ours.

        Returns:
            The chosen ``gamma_0`` and ``{str(gamma_0): gap}`` for every grid value.
        """
        dm = trainer.datamodule
        parts = dm.validation_split(self.select_val_fraction)
        epochs = max(int(trainer.max_epochs or 1), 1)
        batch = int(getattr(dm, "batch_size", 64))
        seed = dm.seed if self.seed is None else self.seed
        target = [_accuracy(oracle, *parts["forget_val"]), _accuracy(oracle, *parts["retain_val"])]
        original = {k: v.detach().clone() for k, v in module.state_dict().items()}
        scores: dict[str, float] = {}
        with preserved_rng(threads=False):
            for gamma0 in self.l1_gamma0_grid:
                copy_ = self._fresh(module)
                copy_.load_state_dict(original)
                copy_.unlearning = self  # its configure_optimizers returns the unlearning recipe
                opt = _optimizer(copy_.configure_optimizers())
                params = self._params(copy_)
                x, y = parts["retain_train"]
                g = torch.Generator().manual_seed(seed)
                copy_.train()
                for epoch in range(epochs):
                    weight = l1_weight(float(gamma0), epoch, epochs)
                    for idx in torch.randperm(len(y), generator=g).split(batch):
                        loss = copy_.retain_loss((x[idx], y[idx]))
                        if weight:
                            loss = loss + weight * sum(p.abs().sum() for p in params)
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                if first_nonfinite(params) is not None:  # this grid value diverges: never chosen
                    scores[f"{gamma0:g}"] = float("inf")
                    continue
                got = [_accuracy(copy_, *parts["forget_val"]), _accuracy(copy_, *parts["retain_val"])]
                scores[f"{gamma0:g}"] = sum(abs(a - b) for a, b in zip(got, target, strict=True)) / 2
        best = min(self.l1_gamma0_grid, key=lambda g0: (scores[f"{g0:g}"], g0))
        if scores[f"{best:g}"] == float("inf"):
            stop("UnlearningCallback(strategy=l1_sparse, l1_gamma0=select)", "weights of every grid value", None, None,
                 f"--model.init_args.lr={getattr(module, 'lr', None)!r} or UnlearningCallback.l1_gamma0_grid="
                 f"{self.l1_gamma0_grid}")  # fmt: skip
        return float(best), scores

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Move the state built in ``setup`` (before Lightning moved the model) to the module's device."""
        device = pl_module.device
        if self._mask is not None and self._anchor is not None:
            self._mask = [m.to(device) for m in self._mask]
            self._anchor = [a.to(device) for a in self._anchor]
        if self._teacher is not None:
            self._teacher.to(device)

    def _saliency_mask(self, trainer: Trainer, module: LightningModule) -> tuple[list[Tensor], list[Tensor]]:
        """SalUn: ``m = 1[|grad L_f(theta_o)| >= quantile]`` over the whole forget set (global threshold)."""
        params = self._params(module)
        grads = [torch.zeros_like(p) for p in params]
        loader = trainer.datamodule.forget_dataloader()
        was_training = module.training
        module.eval()  # gradients at theta_o without moving BatchNorm statistics toward the forget set
        for batch in loader:
            loss = module.forget_loss(batch) * (len(batch[0]) if isinstance(batch, list | tuple) else 1)
            for g, d in zip(grads, torch.autograd.grad(loss, params, allow_unused=True), strict=True):
                if d is not None:
                    g += d
        module.train(was_training)
        flat = torch.cat([g.abs().flatten() for g in grads])
        k = max(int(round(flat.numel() * (1.0 - self.salun_keep))), 1)
        threshold = flat.kthvalue(k).values if self.salun_keep < 1.0 else flat.min()
        return [g.abs() >= threshold for g in grads], [p.detach().clone() for p in params]

    # ------------------------------------------------------------------------------------------------------------
    # The step.
    # ------------------------------------------------------------------------------------------------------------
    def current_rho(self, params: list[Tensor] | None = None) -> float:
        """The perturbation radius at this step.

        ``rho`` (constant, or the cosine schedule), times ``||w||`` (the global norm of ``params``) when ``rho_scale``
        is ``relative``.
        """
        if self.rho_schedule == "constant":
            rho = self.rho
        else:
            total = self.cosine_total_step if self.cosine_total_step is not None else (self._total_steps or 1)
            rho = cosine_rho(self.rho, self.step_count, total, self.cosine_start_step)
        if self.rho_scale == "relative":
            if params is None:
                raise ValueError("UnlearningCallback.current_rho: rho_scale=relative needs the weights")
            rho *= float(global_norm([p.detach() for p in params]))
        return rho

    def unlearning_step(self, module: LightningModule, batch: dict[str, Any]) -> Tensor:
        """One optimiser step of the strategy on ``{"forget": ..., "retain": ...}``; returns the logged loss."""
        if not isinstance(batch, dict) or not {"forget", "retain"} <= set(batch):
            raise ValueError("UnlearningCallback: expected {'forget': ..., 'retain': ...} batches (phase=unlearn)")
        opt = module.optimizers()
        if self._total_steps is None:  # known once the fit loop has sized the epoch
            trainer = module.trainer
            self._total_steps = max(int(trainer.num_training_batches) * max(trainer.max_epochs or 1, 1), 1)
        forget, retain = batch["forget"], batch["retain"]
        logs: dict[str, float | Tensor] = {}
        match self.strategy:
            case "uam":
                loss = self._uam_step(module, opt, forget, retain, logs)
            case "scrub":
                loss = self._scrub_step(module, opt, forget, retain, logs)
            case "rmu":
                loss = self._rmu_step(module, opt, forget, retain, logs)
            case "rmu_uam":
                loss = self._rmu_uam_step(module, opt, forget, retain, logs)
            case "retrain":  # the weights are the oracle's already: no step
                with torch.no_grad():
                    loss = module.retain_loss(retain)
                logs["retain_loss"] = loss
            case "salun":
                loss = self._salun_step(module, opt, forget, retain, logs)
            case _:
                loss = self._loss_step(module, opt, forget, retain, logs)
        # one line naming the step and the knobs on a nan/inf loss (on an accelerator, read back at logged steps)
        self._guard.observe(loss, self.step_count, module.current_epoch, self._who(), lambda: self._knobs(module),
                            sync=module._logs_this_step())  # fmt: skip
        self.step_count += 1
        if module._logs_this_step():
            logs["forget_batch_size"] = float(_size(forget))
            logs["retain_batch_size"] = float(_size(retain))
            module.log_dict({f"unlearn/{k}": v for k, v in logs.items()}, batch_size=_size(retain))
            module.log("train/loss", loss.detach(), batch_size=_size(retain), prog_bar=True)
        return loss.detach()

    def _loss_step(self, module: Any, opt: Any, forget: Any, retain: Any, logs: dict[str, Any]) -> Tensor:
        """Single-objective baselines: one backward, one step."""
        params = self._params(module)
        match self.strategy:
            case "finetune":
                l_r = module.retain_loss(retain)
                loss, logs["retain_loss"] = l_r, l_r.detach()
            case "neggrad":
                l_f = module.forget_loss(forget)
                loss, logs["forget_loss"] = -l_f, l_f.detach()
            case "neggrad_plus" | "graddiff":
                l_r, l_f = module.retain_loss(retain), module.forget_loss(forget)
                beta = self.beta if self.strategy == "neggrad_plus" else 0.5
                loss = (beta * l_r - (1.0 - beta) * l_f) * (1.0 if self.strategy == "neggrad_plus" else 2.0)
                logs["retain_loss"], logs["forget_loss"] = l_r.detach(), l_f.detach()
            case "l1_sparse":
                l_r = module.retain_loss(retain)
                weight = self.current_l1_weight(module.current_epoch, module.trainer.max_epochs)
                loss = l_r + weight * sum(p.abs().sum() for p in params) if weight else l_r
                logs["retain_loss"], logs["l1_weight"] = l_r.detach(), weight
            case _:
                raise AssertionError(self.strategy)
        self._masked_step(module, opt, params, loss)
        return loss

    def _masked_step(self, module: Any, opt: Any, params: list[Tensor], loss: Tensor) -> None:
        """Backward and step; with SalUn's mask, only salient weights move (``theta = theta_o + m * delta``)."""
        opt.zero_grad()
        module.manual_backward(loss)
        if self._mask is not None:
            for p, m in zip(params, self._mask, strict=True):
                if p.grad is not None:
                    p.grad.mul_(m)
        opt.step()
        if self._mask is not None and self._anchor is not None:  # theta = theta_o + m * delta (wd/momentum too)
            with torch.no_grad():
                for p, m, a in zip(params, self._mask, self._anchor, strict=True):
                    p.copy_(torch.where(m, p, a))
        opt.zero_grad()

    def current_l1_weight(self, epoch: int, max_epochs: int | None) -> float:
        """l1-sparse's ``gamma_e = gamma_0 (1 - e / E)`` of epoch ``e`` (see :func:`l1_weight`)."""
        assert self.l1_gamma0_used is not None, "l1_gamma0: select is resolved in setup"
        return l1_weight(self.l1_gamma0_used, epoch, max(int(max_epochs or 1), 1))

    def salun_labels(self, epoch: int) -> Tensor:
        """SalUn's random label of every forget sample (by forget-set index) for ``epoch``.

        Uniform over all ``num_classes``, the sample's own label included, drawn once per epoch (``salun_relabel:
        epoch``) or once per run (``once``) from a generator seeded by the data seed (and the epoch), so every step
        of an epoch sees the same label for a sample.
        """
        draw = epoch if self.salun_relabel == "epoch" else 0
        if self._salun_labels is None or self._salun_epoch != draw:
            seed = int(self._salun_seed) + 7919 * (draw + 1)
            g = torch.Generator().manual_seed(seed)
            self._salun_labels = torch.randint(0, int(self._salun_classes), (int(self._salun_n),), generator=g)
            self._salun_epoch = draw
        return self._salun_labels

    def _salun_step(self, module: Any, opt: Any, forget: Any, retain: Any, logs: dict[str, Any]) -> Tensor:
        """SalUn: one CE over a shuffled batch of D_f (with its random labels) and D_r together, masked update.

        Unlearn-Saliency ``Classification/unlearn/RL.py`` (its CIFAR-100/TinyImageNet branch): per epoch, the forget
        set's targets are replaced by ``np.random.randint(0, num_classes)`` once, the forget and retain sets are
        concatenated and shuffled, and each batch takes one CE step; the saliency mask limits the update. (Its
        CIFAR-10/SVHN branch instead runs a forget pass with labels redrawn per batch, then a retain pass.)
        """
        (x_f, _, i_f), (x_r, y_r) = forget, retain
        labels = self.salun_labels(module.current_epoch).to(i_f.device)[i_f]
        loss = module.retain_loss((torch.cat([x_f, x_r]), torch.cat([labels.to(y_r.dtype), y_r])))
        self._masked_step(module, opt, self._params(module), loss)
        logs["mixed_loss"] = loss.detach()
        return loss

    def _uam_step(self, module: Any, opt: Any, forget: Any, retain: Any, logs: dict[str, Any]) -> Tensor:
        """UAM: ``g_f`` at w; ``w + rho g_f/||g_f||``; ``g_r`` there; project; restore w bitwise; step."""
        params = self._params(module)
        if self.ascent_sample is not None:
            forget = _truncate(forget, self.ascent_sample)
        opt.zero_grad()
        if self.ascent_forward == "concat" and hasattr(module, "concat_losses"):
            l_f, _ = module.concat_losses(forget, retain)
        else:
            l_f = module.forget_loss(forget)
        module.manual_backward(l_f)
        g_f = self._grads(params)  # no copy; the retain pass allocates fresh grads
        norm = float(global_norm(g_f))
        rho = self.current_rho(params)
        saved = [p.detach().clone() for p in params]
        if rho > 0.0:
            scale = rho / ((norm**2 if self.perturb_norm == "l2_squared" else norm) + 1e-16)
            with torch.no_grad():
                torch._foreach_add_([p.detach() for p in params], g_f, alpha=scale)
        l_r = module.retain_loss(retain)
        module.manual_backward(l_r)
        g_r = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        cos = dot(g_r, g_f) / (float(global_norm(g_r)) * norm + 1e-16) if module._logs_this_step() else None
        coefs = projection_coefficients(g_r, g_f, self.gamma, self.projection, self.projection_scope)
        with torch.no_grad():
            for p, s, g, f, c in zip(params, saved, g_r, g_f, coefs or [0.0] * len(params), strict=True):
                p.copy_(s)  # restore w bitwise before the step (w + eps - eps is not w in floating point)
                if c:
                    g.sub_(f, alpha=c)  # [I - gamma P_f] g_r, in place
                p.grad = g
        opt.step()
        opt.zero_grad()
        if cos is not None:
            logs.update(rho=rho, grad_forget_norm=norm, cos_retain_forget=float(cos))
            logs.update(forget_loss=l_f.detach(), retain_loss=l_r.detach())
        return l_r

    def _rmu_step(self, module: Any, opt: Any, forget: Any, retain: Any, logs: dict[str, Any]) -> Tensor:
        """RMU: ``w - eta grad[mse(z_f, c u) + alpha mse(z_r, z_r(w_bar))]`` (Algorithm 1)."""
        l_f, _ = module.rmu_losses(forget, self.rmu_c, distance=False)
        l_r = module.rmu_retain_loss(retain)
        loss = l_f + self.rmu_alpha * l_r
        opt.zero_grad()
        module.manual_backward(loss)
        opt.step()
        opt.zero_grad()
        logs.update(forget_loss=l_f.detach(), retain_loss=l_r.detach())
        return loss

    def _grads(self, params: list[Tensor]) -> list[Tensor]:
        """Take the parameters' gradients (zeros where unused) and clear them, without copying."""
        out = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        for p in params:
            p.grad = None
        return out

    def _rmu_uam_step(self, module: Any, opt: Any, forget: Any, retain: Any, logs: dict[str, Any]) -> Tensor:
        """RMU + UAM (``lm_mode``; see the class docstring and zoo/uam/README.md)."""
        params = self._params(module)
        alg2 = self.lm_mode == "alg2_strict" or (
            self.lm_mode == "alg2_after_rmu" and self.step_count >= self.rmu_warmup_steps
        )
        if self.lm_mode == "alg2_after_rmu" and not alg2:
            return self._rmu_step(module, opt, forget, retain, logs)
        opt.zero_grad()
        l_rmu, dist = module.rmu_losses(forget, self.rmu_c)
        g_rmu: list[Tensor] = []
        if not alg2:
            module.manual_backward(l_rmu, retain_graph=True)
            g_rmu = self._grads(params)
        module.manual_backward(dist)
        direction = self._grads(params)  # ascent direction of ||z_f - z_f(w_bar)||^2
        norm = float(global_norm(direction))
        if norm <= 1e-12:
            if alg2:
                self.zero_forget_grad_steps += 1
                if self.zero_forget_grad_steps == 1:
                    warnings.warn(
                        f"UnlearningCallback(lm_mode={self.lm_mode}): the forget gradient is 0 at w = w_bar (L_f = 0), "
                        "so Algorithm 2 as extracted never leaves the frozen copy; use lm_mode=rmu_uam",
                        stacklevel=2,
                    )
            else:
                direction = [-g for g in g_rmu]
                norm = float(global_norm(direction))
        saved = [p.detach().clone() for p in params]
        rho = self.current_rho()
        if rho > 0.0 and norm > 1e-12:
            with torch.no_grad():
                torch._foreach_add_([p.detach() for p in params], direction, alpha=rho / (norm + 1e-16))
        l_r = module.rmu_retain_loss(retain)
        module.manual_backward(l_r)
        g_r = self._grads(params)
        coefs = projection_coefficients(g_r, direction, self.gamma, self.projection, self.projection_scope)
        alpha = 1.0 if alg2 else self.rmu_alpha
        with torch.no_grad():
            for i, (p, s, g) in enumerate(zip(params, saved, g_r, strict=True)):
                p.copy_(s)  # restore w bitwise
                if coefs and coefs[i]:
                    g.sub_(direction[i], alpha=coefs[i])
                p.grad = g.mul_(alpha) if alg2 else g_rmu[i].add_(g, alpha=alpha)
        opt.step()
        opt.zero_grad()
        logs.update(forget_loss=l_rmu.detach(), frozen_distance=dist.detach(), retain_loss=l_r.detach(), rho=rho,
                    grad_forget_norm=norm, zero_forget_grad=float(self.zero_forget_grad_steps))  # fmt: skip
        return l_r

    def _scrub_step(self, module: Any, opt: Any, forget: Any, retain: Any, logs: dict[str, Any]) -> Tensor:
        """SCRUB as Kurmanji et al. run it: a max pass over D_f in the first ``scrub_msteps`` epochs, min-steps on D_r.

        ``meghdadk/SCRUB`` (``large_scale_unlearning.ipynb``, ``small_scale_unlearning.ipynb``) calls
        ``thirdparty/repdistiller/helper/loops.py::train_distill`` per epoch once with ``"maximize"`` on the forget
        loader (only while ``epoch <= msteps``), then once with ``"minimize"`` on the retain loader. Here: in each of
        the first ``scrub_msteps`` epochs, one pass over D_f (``forget_dataloader``, one step per forget batch on
        ``-KL(teacher || student)``) before the epoch's first min-step; then a min-step ``alpha KL_r + gamma CE_r`` on
        every retain batch. Max- and min-steps share one optimizer and learning rate, as in the notebooks; the paired
        forget batches are not used.
        """
        teacher, t = self._teacher, self.scrub_temperature
        epoch = module.current_epoch
        if epoch < self.scrub_msteps and epoch not in self.scrub_max_steps:
            self.scrub_max_steps[epoch] = 0
            for batch in module.trainer.datamodule.forget_dataloader():
                batch = module.transfer_batch_to_device(batch, module.device, 0)
                kl_f = module.distill_loss(batch, teacher, t)
                if not math.isfinite(value := float(kl_f.detach())):
                    stop(self._who(), "forget KL of a max-step", self.step_count, epoch, self._knobs(module), value)
                opt.zero_grad()
                module.manual_backward(-kl_f)
                opt.step()
                self.scrub_max_steps[epoch] += 1
                logs["forget_kl"] = kl_f.detach()
            logs["max_steps"] = float(self.scrub_max_steps[epoch])
        kl_r = module.distill_loss(retain, teacher, t)
        l_r = module.retain_loss(retain)
        loss = self.scrub_alpha * kl_r + self.scrub_gamma * l_r
        opt.zero_grad()
        module.manual_backward(loss)
        opt.step()
        opt.zero_grad()
        logs["retain_kl"], logs["retain_loss"] = kl_r.detach(), l_r.detach()
        return loss

    # ------------------------------------------------------------------------------------------------------------
    # Metrics.
    # ------------------------------------------------------------------------------------------------------------
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Evaluate the unlearning metrics (and the gap to the oracle) every ``eval_every_n_epochs``."""
        self._guard.flush(self._who(), lambda: self._knobs(pl_module))
        self._check_weights(pl_module, "weights", self.step_count, trainer.current_epoch)
        epoch = trainer.current_epoch + 1
        if epoch % self.eval_every_n_epochs and epoch != trainer.max_epochs:
            return
        metrics = self.evaluate(pl_module, trainer.datamodule)
        self.history.append({"epoch": float(epoch), **metrics})
        self._history_step = self.step_count
        # Every rank computes the same numbers on the full splits; syncing only silences Lightning's DDP notice.
        pl_module.log_dict({f"val/{k}": v for k, v in metrics.items()}, on_epoch=True, sync_dist=trainer.world_size > 1)

    def evaluate(self, module: LightningModule, datamodule: Any) -> dict[str, float]:
        """The module's unlearning metrics plus the gaps to the Retrain oracle (when it was trained)."""
        was_training = module.training
        metrics = dict(module.unlearning_metrics(datamodule))
        module.train(was_training)
        if self.oracle_metrics is not None:
            metrics.update(retrain_gaps(metrics, self.oracle_metrics, module.gap_metrics))
        return metrics

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Write ``unlearning.json`` (original, oracle, final metrics, per-epoch history, split) to the run's folder."""
        self._check_weights(pl_module, "weights", self.step_count, trainer.current_epoch)
        if self.history and self._history_step == self.step_count:  # the last epoch's evaluation, no step since
            self.final = {k: v for k, v in self.history[-1].items() if k != "epoch"}
        else:
            self.final = self.evaluate(pl_module, trainer.datamodule)
        folder = Path(run_dir(trainer))
        if trainer.is_global_zero:
            folder.mkdir(parents=True, exist_ok=True)
            report = {
                "strategy": self.strategy,
                "settings": {k: v for k, v in vars(self).items() if isinstance(v, int | float | str | bool | None)},
                "original": self.before,
                "oracle": self.oracle_metrics,
                "final": self.final,
                "history": self.history,
                "split": trainer.datamodule.split_info(),
            }
            if self.l1_selection:
                report["l1_gamma0_selection"] = self.l1_selection
            if self.scrub_max_steps:
                report["scrub_max_steps_per_epoch"] = {str(k): v for k, v in self.scrub_max_steps.items()}
            (folder / "unlearning.json").write_text(json.dumps(report, indent=1))

    def state_dict(self) -> dict[str, Any]:
        """Step counter, the oracle metrics and SCRUB's max-step count survive ``--ckpt_path`` resume."""
        return {"step_count": self.step_count, "oracle_metrics": self.oracle_metrics, "before": self.before,
                "zero_forget_grad_steps": self.zero_forget_grad_steps, "history": self.history,
                "scrub_max_steps": dict(self.scrub_max_steps)}  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.step_count = int(state_dict.get("step_count", 0))
        self.oracle_metrics = state_dict.get("oracle_metrics", self.oracle_metrics)
        self.before = state_dict.get("before", self.before)
        self.zero_forget_grad_steps = int(state_dict.get("zero_forget_grad_steps", 0))
        self.history = list(state_dict.get("history", self.history))
        self.scrub_max_steps = {int(k): int(v) for k, v in state_dict.get("scrub_max_steps", {}).items()}


def l1_weight(gamma0: float, epoch: int, epochs: int) -> float:
    """l1-sparse's penalty weight in epoch ``epoch`` (0-based) of ``epochs``: ``gamma0 (1 - epoch / epochs)``.

    A linear decay per epoch, constant within it, reaching 0 at ``epoch = epochs`` (Unlearn-Sparse ``unlearn/FT.py``,
    ``FT_iter``: ``current_alpha = alpha * (1 - epoch / (unlearn_epochs - no_l1_epochs))``, here with no l1-free
    epochs; the last epoch runs at ``gamma0 / epochs``).
    """
    return gamma0 * max(1.0 - epoch / epochs, 0.0)


def _accuracy(module: Any, x: Tensor, y: Tensor) -> float:
    """Top-1 accuracy (%) of ``module(x)`` against ``y``, in eval mode, on the module's device."""
    was_training = module.training
    module.eval()
    device = next(module.parameters()).device
    with torch.no_grad():
        hits = (module(x.to(device)).argmax(-1) == y.to(device)).float().mean()
    module.train(was_training)
    return 100.0 * float(hits)


def _optimizer(configured: Any) -> torch.optim.Optimizer:
    """The optimizer of a ``configure_optimizers`` result (an optimizer, a list of them, or a dict)."""
    if isinstance(configured, dict):
        configured = configured["optimizer"]
    if isinstance(configured, list | tuple):
        configured = configured[0]
        configured = configured["optimizer"] if isinstance(configured, dict) else configured
    return configured


def retrain_gaps(metrics: dict[str, float], oracle: dict[str, float] | None, keys: tuple[str, ...]) -> dict[str, float]:
    """``avg_gap`` (mean absolute difference to the Retrain oracle over ``keys``) and ``delta_acc_sum``.

    Raises:
        ValueError: without an oracle result (a gap is never reported without its oracle).
    """
    if oracle is None:
        raise ValueError("retrain_gaps: no Retrain oracle result; train it (oracle: true) before reporting a gap")
    missing = [k for k in keys if k not in metrics or k not in oracle]
    if missing:
        raise ValueError(f"retrain_gaps: metric(s) {missing} missing from the model or the oracle results")
    diffs = {k: abs(metrics[k] - oracle[k]) for k in keys}
    out = {"avg_gap_to_retrain_lower_is_better": sum(diffs.values()) / len(diffs)}
    acc = [v for k, v in diffs.items() if "acc" in k]
    if acc:
        out["delta_acc_sum_to_retrain_lower_is_better"] = sum(acc)
    return out


def _size(batch: Any) -> int:
    """Number of samples in a ``(x, y)`` batch or a dict of tensors."""
    first = batch[0] if isinstance(batch, list | tuple) else next(iter(batch.values()))
    return int(first.shape[0])


def _truncate(batch: Any, n: int) -> Any:
    """The first ``n`` samples of a ``(x, y)`` batch or a dict of tensors."""
    if isinstance(batch, list | tuple):
        return type(batch)(t[:n] for t in batch)
    return {k: v[:n] for k, v in batch.items()}
