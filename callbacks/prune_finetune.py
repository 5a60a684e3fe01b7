"""Prune-then-finetune as one callback: structured pruning of a TSFM's blocks, merge, then fine-tuning.

``PruneThenFinetune`` turns the fit it is attached to into the *prune* phase (the card's "Lightning flow"): every
weight is frozen (``requires_grad=False``, the network in eval mode so dropout is off and BatchNorm statistics stay
put), only the channel masks get gradients, and no optimizer ever steps. Each target ``nn.Linear`` gets masks on its
input and output channels, ``h = (W (x * m_in) + b) * m_out``; during scoring each mask is broadcast to one copy per
sample, whose gradient ``g_n`` a hook replaces by ``g_n - g_n^2 / 2``, so that after backprop
``mask.grad = sum_n (g_n - g_n^2/2)`` and the score ``s = -mask.grad * mask = sum_n (-g_n + g_n^2/2)`` is the
second-order Taylor estimate of the loss change from removing the channel with the per-sample empirical Fisher as
the Hessian. Scores are summed over the micro-batches of one macro-batch of ``macro_batch_size`` samples; then
``imp <- alpha s + (1 - alpha) imp`` (``imp = s`` at the first step), one global threshold over the non-zero
``|imp|`` of all live entries of all masks removes ``k = ceil(r_step R)`` of the ``R`` live entries (dead ones,
``imp = 0``, go first), ``r_step = prune_ratio_per_epoch / steps_per_epoch``. Pruning is monotone.

At the end of the prune fit the masks with the best validation loss are merged into a physically smaller dense model
(``zoo.prune_finetune.merge``; the module's ``structure`` records the new shapes for checkpoints) and, unless
``finetune=false``, a fresh inner ``Trainer`` fine-tunes the merged parameters (``ft_lr``, ``ft_epochs``, early
stopping with ``ft_patience``, the official ``type1`` schedule). ``prune_finetune.json`` (history, counts) and
``pruned.ckpt`` (the merged weights before fine-tuning, loadable through ``pretrained``) go to the run directory,
the fine-tuned checkpoint to ``<run dir>/finetune/``.

Module protocol :class:`Prunable` (checked in ``setup``): ``model`` (holding PatchTST or TimesFm layers),
``compute_loss(batch)["loss"]`` (mean over samples), ``batch_size_of(batch)``, and the ``ZooModule`` attributes
``step_override`` and ``structure``; optional ``lr_schedule`` (set for the fine-tuning fit) and
``set_adapters(enabled)`` (a module with LoRA adapters, ``TSFMModule(lora_rank=...)``: they are removed for the prune
phase, which scores and merges the plain network, and fresh ones are injected on the merged network for the fine-tune,
the card's "LoRA is optional").
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import Tensor, nn

from zoo.core import checks
from zoo.core.config import run_dir
from zoo.core.protocols import check
from zoo.prune_finetune.spec import PruneScope, mask_sizes, target_linears

FisherScale = Literal["code", "paper"]

#: Lightning's notice when the frozen prune phase builds no optimizer (on purpose); filtered in ``setup``.
_NO_OPTIMIZER = r".*returned `None`, this fit will run with no optimizer"


@runtime_checkable
class Prunable(Protocol):
    """What :class:`PruneThenFinetune` needs of the module it prunes."""

    #: The network holding the PatchTST encoder or TimesFm decoder layers (masked, merged and sliced in place).
    model: nn.Module
    #: Set to the prune step while pruning (the callback drives the step), reset to ``None`` after.
    step_override: Any
    #: Record of the merged shapes, written into checkpoints.
    structure: dict[str, Any] | None

    def compute_loss(self, batch: Any) -> dict[str, Tensor] | None:
        """``{"loss": mean over samples, ...}`` of a training batch."""
        ...

    def batch_size_of(self, batch: Any) -> int:
        """Number of samples in ``batch``."""
        ...


class _BestWeights(Callback):
    """Keeps a CPU copy of the module's weights at the best value of ``monitor`` seen at validation ends."""

    def __init__(self, monitor: str, mode: str) -> None:
        self.monitor, self.mode = monitor, mode
        self.best: float | None = None
        self.state: dict[str, Tensor] | None = None

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or self.monitor not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.monitor])
        if self.best is None or (value < self.best if self.mode == "min" else value > self.best):
            self.best = value
            self.state = {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()}


class PruneThenFinetune(Callback):
    """Structured pruning (per-sample Fisher scores, EMA, global threshold) -> merge -> fine-tune.

    Args:
        prune_ratio_per_epoch: ``r``; with ``n`` macro-batches per epoch each prune step removes
            ``ceil(r/n * remaining)`` entries, so one epoch leaves about ``exp(-r)`` of them.
        prune_ema: ``alpha`` of the importance EMA.
        macro_batch_size: samples whose scores are summed before one prune step (gradient accumulation).
        steps_per_epoch: prune steps per epoch ``n``; ``None`` derives it from the training batches per epoch.
        prune_scope: ``blocks`` (the Linears inside transformer blocks) or ``all_linear`` (every Linear; ``all_linear``
            pruning is scored and masked, but only block Linears are merged).
        global_threshold: one threshold over all layers (the method); ``false`` is the per-layer uniform-ratio
            ablation.
        score: ``taylor`` (the method) or ``random`` (ablation: uniform random importances, same k per step).
        fisher_scale: ``code`` hooks the gradient of the mean-reduced loss (``g - g^2/2``); ``paper`` scores
            ``-(1/N) sum a_n + (1/2N) sum a_n^2`` with ``a_n`` the per-sample gradient of the unreduced loss.
        max_prune_ratio: stop pruning once the fraction of zeroed target-Linear parameters would exceed this.
        target_channel_fraction: stop at exactly this fraction of scored entries removed (reconstruction).
        residual_slicing: ``fold`` keeps residual-side zeros folded (official default); ``index`` gathers and
            scatters the live residual channels.
        finetune: run the fine-tuning phase after the merge.
        ft_lr: fine-tuning learning rate.
        ft_epochs: fine-tuning epochs (official: 1).
        ft_patience: early-stopping patience on the validation loss (official: 1).
        ft_lr_schedule: fine-tuning schedule (``type1``: constant for 3 epochs, then x0.9 per epoch).
        seed: seed of the ``random`` score.
    """

    def __init__(
        self,
        prune_ratio_per_epoch: float = 0.7,
        prune_ema: float = 0.5,
        macro_batch_size: int = 512,
        steps_per_epoch: int | None = None,
        prune_scope: PruneScope = "blocks",
        global_threshold: bool = True,
        score: Literal["taylor", "random"] = "taylor",
        fisher_scale: FisherScale = "code",
        max_prune_ratio: float | None = None,
        target_channel_fraction: float | None = None,
        residual_slicing: Literal["fold", "index"] = "fold",
        finetune: bool = True,
        ft_lr: float = 1e-4,
        ft_epochs: int = 1,
        ft_patience: int = 1,
        ft_lr_schedule: Literal["constant", "cosine", "type1"] = "type1",
        seed: int = 0,
    ) -> None:
        name = functools.partial(checks.callback, self)  # name("ft_lr") -> "PruneThenFinetune.ft_lr"
        checks.positive(name("prune_ratio_per_epoch"), prune_ratio_per_epoch)  # r/n is the fraction per step
        checks.probability(name("prune_ema"), prune_ema, open_low=True)
        checks.integer(name("macro_batch_size"), macro_batch_size)
        checks.optional_integer(name("steps_per_epoch"), steps_per_epoch)
        checks.choice(name("prune_scope"), prune_scope, ("blocks", "all_linear"))
        checks.choice(name("score"), score, ("taylor", "random"))
        checks.choice(name("fisher_scale"), fisher_scale, ("code", "paper"))
        for field, value in (("max_prune_ratio", max_prune_ratio),
                             ("target_channel_fraction", target_channel_fraction)):  # fmt: skip
            if value is not None:
                checks.probability(name(field), value, open_low=True, open_high=True)
        checks.choice(name("residual_slicing"), residual_slicing, ("fold", "index"))
        checks.non_negative(name("ft_lr"), ft_lr)
        checks.integer(name("ft_epochs"), ft_epochs)  # finetune=false skips fine-tuning
        checks.integer(name("ft_patience"), ft_patience, low=0)
        checks.choice(name("ft_lr_schedule"), ft_lr_schedule, ("constant", "cosine", "type1"))
        self.ratio, self.alpha, self.macro = prune_ratio_per_epoch, prune_ema, macro_batch_size
        self.steps_per_epoch_arg, self.scope, self.global_threshold = steps_per_epoch, prune_scope, global_threshold
        self.score_kind, self.fisher_scale = score, fisher_scale
        self.max_prune_ratio, self.target_fraction = max_prune_ratio, target_channel_fraction
        self.residual_slicing, self.finetune = residual_slicing, finetune
        self.ft_lr, self.ft_epochs, self.ft_patience = ft_lr, ft_epochs, ft_patience
        self.ft_lr_schedule = ft_lr_schedule
        self.seed = seed
        # -- state (state_dict) --
        self.phase: Literal["prune", "merged", "finetuned"] = "prune"
        self.step = 0
        self.mask: dict[str, Tensor] = {}  # site -> bool (live)
        self.imp: dict[str, Tensor] = {}  # site -> float importance (EMA)
        self.grad: dict[str, Tensor] = {}  # site -> float, scores accumulated over the current macro-batch
        self.pending = 0  # samples accumulated in self.grad
        self.consumed = 0  # micro-batches of the current prune epoch seen (a mid-epoch resume skips them)
        self._resume_consumed = 0
        self.stopped = False
        self.best_val: float | None = None
        self.best_mask: dict[str, Tensor] | None = None
        self.history: list[list[float]] = []  # [step, live after, tau, live before, planned k]
        self.summary: dict[str, Any] = {}
        # -- runtime --
        self._leaf: dict[str, Tensor] = {}
        self._handles: list[Any] = []
        self._scoring = False
        self._n_steps = steps_per_epoch or 1  # derived in on_fit_start when not given

    # ------------------------------------------------------------------------------------------------------------
    # Setup: protocol, frozen weights, masks and hooks.
    # ------------------------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Check the protocol, freeze every weight and switch the module to the prune step."""
        if stage != "fit" or self.phase != "prune":
            return
        who = "PruneThenFinetune"
        check(pl_module, Prunable, who, "module")
        if self.finetune and trainer.world_size > 1:
            raise ValueError(
                f"{who}: finetune=true runs fit #2 in a fresh single-process Trainer, which DDP ranks would race on; "
                "under DDP set finetune: false (the prune phase all-reduces its scores) and fine-tune the merged "
                "<run dir>/pruned.ckpt with `zoo fit -c configs/prune_finetune/full_ft.yaml "
                "--model.init_args.pretrained=<run dir>/pruned.ckpt --trainer.strategy=ddp`"
            )
        if callable(adapters := getattr(pl_module, "set_adapters", None)):
            adapters(False)  # LoRA is a fine-tuning option: prune and merge the plain network
        self.init_masks(pl_module.model)
        warnings.filterwarnings("ignore", message=_NO_OPTIMIZER)
        if trainer.world_size == 1:  # no optimizer gets built; under DDP (which refuses a module without trainable
            pl_module.requires_grad_(False)  # parameters) the weights are frozen after wrapping, in on_fit_start
        pl_module.automatic_optimization = False
        pl_module.step_override = self.prune_step

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Install the mask hooks on the module's device and derive the prune steps per epoch."""
        if self.phase != "prune":
            return
        pl_module.requires_grad_(False)
        self.attach(pl_module.model)
        if self.steps_per_epoch_arg is not None:
            self._n_steps = self.steps_per_epoch_arg
        else:
            loader = trainer.datamodule.train_dataloader() if trainer.datamodule is not None else None
            batch = getattr(loader, "batch_size", None) or getattr(trainer.datamodule, "batch_size", None) or 1
            batches = trainer.num_training_batches
            batches = len(loader) if not math.isfinite(batches) and loader is not None else batches
            samples = int(batches) * int(batch) * trainer.world_size
            self._n_steps = max(1, samples // self.macro)
        if self._resume_consumed:  # resumed from a mid-epoch checkpoint: continue the epoch where it stopped
            loader = trainer.datamodule.train_dataloader() if trainer.datamodule is not None else None
            if loader is not None and self._resume_consumed >= len(loader):  # written at an epoch end
                self._resume_consumed = 0
                return
            resume = getattr(trainer.datamodule, "resume_train_at", None)
            if resume is None or trainer.world_size > 1:
                warnings.warn(f"PruneThenFinetune: resumed {self._resume_consumed} micro-batches into a prune epoch, "
                               f"but {type(trainer.datamodule).__name__} cannot start its training loader there (or "
                               "the run is distributed): the epoch restarts, so the masks differ from an "
                               "uninterrupted run")  # fmt: skip
                self._resume_consumed = 0
            else:
                resume(self._resume_consumed)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Count the epoch's micro-batches from 0, or from the consumed count of a mid-epoch checkpoint."""
        self.consumed, self._resume_consumed = self._resume_consumed, 0

    def init_masks(self, model: nn.Module) -> None:
        """All-ones masks and zero importances for every site of ``model`` (kept when already set or restored)."""
        sizes = mask_sizes(model, self.scope)
        if not self.mask:
            self.mask = {k: torch.ones(n, dtype=torch.bool) for k, n in sizes.items()}
            self.imp = {k: torch.zeros(n) for k, n in sizes.items()}
        elif {k: m.numel() for k, m in self.mask.items()} != sizes:
            raise ValueError(f"PruneThenFinetune: the masks' sites and sizes do not match {type(model).__name__}")

    def attach(self, model: nn.Module) -> None:
        """Put the masks on ``model``'s device as leaf tensors and hook every target Linear."""
        self.init_masks(model)
        param = next(model.parameters())
        self._leaf = {k: m.to(param).requires_grad_(True) for k, m in self.mask.items()}
        self.detach()
        for path, linear in target_linears(model, self.scope).items():
            if f"{path}:in" in self._leaf:
                self._handles.append(linear.register_forward_pre_hook(self._in_hook(f"{path}:in")))
            if f"{path}:out" in self._leaf:
                self._handles.append(linear.register_forward_hook(self._out_hook(f"{path}:out")))

    def detach(self) -> None:
        """Remove the mask hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _apply(self, site: str, x: Tensor) -> Tensor:
        leaf = self._leaf[site]
        if not self._scoring:
            return x * leaf.detach()
        # One copy per sample ([B, 1, .., d] for [B, N, d] hidden states): its gradient is the per-sample g_n.
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (leaf.shape[0],) if x.dim() >= 2 else leaf.shape
        per_sample = leaf.expand(shape)
        per_sample.register_hook(self._fisher)
        return x * per_sample

    def _in_hook(self, site: str) -> Any:
        return lambda _module, args: (self._apply(site, args[0]), *args[1:])

    def _out_hook(self, site: str) -> Any:
        return lambda _module, _args, out: self._apply(site, out)

    def _fisher(self, g: Tensor) -> Tensor:
        """The per-sample gradient hook: ``g - g^2/2`` (``code``) or its ``paper`` scaling.

        ``paper``: with ``a = b g`` the per-sample gradient of the unreduced loss (micro-batch of b) and a macro-batch
        of M samples, ``(b/M) g - (b^2/2M) g^2``, so that ``-mask.grad = -(1/M) sum a + (1/2M) sum a^2``.
        """
        if self.fisher_scale == "code":
            return g - 0.5 * g * g
        b, m = float(g.shape[0]), float(self.macro)  # the per-sample copies' leading dim is the micro-batch
        return (b / m) * g - (b * b / (2.0 * m)) * g * g

    # ------------------------------------------------------------------------------------------------------------
    # The prune step (the module's training_step delegates here).
    # ------------------------------------------------------------------------------------------------------------
    def prune_step(self, module: LightningModule, batch: Any, batch_idx: int) -> Tensor | None:
        """Accumulate the per-sample Fisher scores of one micro-batch; prune at every full macro-batch."""
        module.model.eval()  # dropout off, BatchNorm statistics frozen (Lightning re-enables train mode per epoch)
        size = module.batch_size_of(batch)
        self.consumed += 1
        if self.stopped:
            return None
        with self.scoring():
            loss = module.compute_loss(batch)["loss"]
        self.accumulate(loss, size * module.trainer.world_size)
        if self.pending >= self.macro:
            self.prune(self.scores(module.trainer.strategy if module.trainer.world_size > 1 else None))
            # The module has no optimizer (every weight is frozen): stepping Lightning's placeholder is a no-op that
            # advances global_step, which checkpoints (every_n_train_steps, epoch ends) and loggers key on.
            optimizer = module.optimizers()
            (optimizer[0] if isinstance(optimizer, list) else optimizer).step()
        module.log("prune/remaining_fraction", self.remaining_fraction(), batch_size=size)
        return loss.detach()

    @contextlib.contextmanager
    def scoring(self) -> Iterator[None]:
        """Inside, the hooks broadcast each mask to one copy per sample with the Fisher gradient hook."""
        self._scoring = True
        try:
            yield
        finally:
            self._scoring = False

    def accumulate(self, loss: Tensor, size: int) -> None:
        """Add ``d loss / d mask`` (with the per-sample hooks: ``sum_n g_n - g_n^2/2``) of a scored forward."""
        grads = torch.autograd.grad(loss, list(self._leaf.values()), allow_unused=True)
        for (site, leaf), g in zip(self._leaf.items(), grads, strict=True):
            term = (torch.zeros_like(leaf) if g is None else g.detach()).cpu()
            self.grad[site] = term if site not in self.grad else self.grad[site] + term
        self.pending += size

    def scores(self, strategy: Any = None) -> dict[str, Tensor]:
        """``s = -grad * mask`` summed over the macro-batch (reduced over ranks by ``strategy``), or random."""
        if self.score_kind == "random":
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step)
            return {k: torch.rand(m.shape, generator=gen) * m for k, m in self.mask.items()}
        out = {}
        for site, m in self.mask.items():
            g = self.grad.get(site, torch.zeros(m.shape))
            if strategy is not None:
                g = strategy.reduce(g.to(strategy.root_device), reduce_op="sum").cpu()
            out[site] = -g * m.float()
        return out

    def prune(self, scores: dict[str, Tensor]) -> None:
        """One prune step: EMA of ``scores`` into ``imp``, threshold, zero the chosen entries, reset the sums."""
        for site, s in scores.items():
            self.imp[site] = s.clone() if self.step == 0 else self.alpha * s + (1.0 - self.alpha) * self.imp[site]
        self.grad, self.pending = {}, 0
        sites = list(self.mask)
        live = torch.cat([self.mask[k] for k in sites])
        imp = torch.cat([self.imp[k] for k in sites]).abs()
        prune = torch.zeros_like(live)
        taus, planned = [], 0
        for index in self._groups(sites):
            chosen, tau, k = self._threshold(live[index], imp[index])
            prune[index] = chosen
            taus.append(tau)
            planned += k
        prune = self._limit(live, imp, prune)
        self._set(sites, live & ~prune)
        self.step += 1
        # [step, live after, tau, live before, planned k]: live before - live after - k = dead/tied extras.
        self.history.append([self.step, int((live & ~prune).sum()), float(max(taus)), int(live.sum()), planned])

    def _groups(self, sites: list[str]) -> list[Tensor]:
        """Entry indices of each threshold pool: one global pool, or one per encoder layer (ablation)."""
        sizes = [self.mask[k].numel() for k in sites]
        starts = torch.tensor([0, *sizes]).cumsum(0).tolist()
        if self.global_threshold:
            return [torch.arange(starts[-1])]
        by_layer: dict[str, list[Tensor]] = {}
        for i, site in enumerate(sites):
            path = site.rsplit(":", 1)[0]
            layer = path.split(".self_attn.")[0] if ".self_attn." in path else path.rsplit(".", 2)[0]
            by_layer.setdefault(layer, []).append(torch.arange(starts[i], starts[i + 1]))
        return [torch.cat(v) for v in by_layer.values()]

    def _threshold(self, live: Tensor, imp: Tensor) -> tuple[Tensor, float, int]:
        """(live entries with ``|imp| <= tau``, tau, k): tau is the k-th smallest non-zero ``|imp|`` of the live."""
        remaining = int(live.sum())
        if remaining == 0:
            return torch.zeros_like(live), 0.0, 0
        k = min(math.ceil(self.ratio / self._n_steps * remaining), remaining)
        pool = imp[live & (imp != 0)]
        if pool.numel() == 0:
            return live.clone(), 0.0, k
        tau = float(pool.kthvalue(min(k, pool.numel())).values)
        return live & (imp <= tau), tau, k

    def _limit(self, live: Tensor, imp: Tensor, prune: Tensor) -> Tensor:
        """Apply ``target_channel_fraction`` (exact count, smallest ``|imp|`` first) and ``max_prune_ratio``."""
        total = live.numel()
        if self.target_fraction is not None:
            target = round(self.target_fraction * total)
            removed = total - int(live.sum())
            if removed + int(prune.sum()) >= target:
                order = torch.argsort(torch.where(prune, imp, torch.full_like(imp, float("inf"))), stable=True)
                prune = torch.zeros_like(prune)
                prune[order[: max(target - removed, 0)]] = True
                self.stopped = True
        if self.max_prune_ratio is not None:
            after = self._zero_param_fraction(live & ~prune)
            if after > self.max_prune_ratio:
                self.stopped = True
                return torch.zeros_like(prune)
        return prune

    def _zero_param_fraction(self, live: Tensor) -> float:
        """Fraction of target-Linear parameters zeroed by folding masks with these live entries."""
        sites, offset, parts = list(self.mask), 0, {}
        for site in sites:
            n = self.mask[site].numel()
            parts[site] = int(live[offset : offset + n].sum())
            offset += n
        kept = total = 0
        for path in {s.rsplit(":", 1)[0] for s in sites}:
            n_in, n_out = self.mask[f"{path}:in"].numel(), self.mask[f"{path}:out"].numel()
            total += n_in * n_out + n_out
            kept += parts[f"{path}:in"] * parts[f"{path}:out"] + parts[f"{path}:out"]
        return 1.0 - kept / max(total, 1)

    def _set(self, sites: list[str], live: Tensor) -> None:
        offset = 0
        for site in sites:
            n = self.mask[site].numel()
            self.mask[site] = live[offset : offset + n].clone()
            self.imp[site] = torch.where(self.mask[site], self.imp[site], torch.zeros_like(self.imp[site]))
            if site in self._leaf:
                with torch.no_grad():
                    self._leaf[site].copy_(self.mask[site].to(self._leaf[site]))
            offset += n

    @property
    def steps_per_epoch(self) -> int:
        """Prune steps per epoch ``n`` in use (given, or derived from the training batches at fit start)."""
        return self._n_steps

    def remaining_fraction(self) -> float:
        """Fraction of scored entries still live."""
        live = sum(int(m.sum()) for m in self.mask.values())
        return live / max(sum(m.numel() for m in self.mask.values()), 1)

    # ------------------------------------------------------------------------------------------------------------
    # Epoch ends: keep the best masks; fit end: merge and fine-tune.
    # ------------------------------------------------------------------------------------------------------------
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Drop a partial macro-batch and keep the masks with the best validation loss (run just before)."""
        if self.phase != "prune":
            return
        self.grad, self.pending = {}, 0
        monitor = getattr(pl_module, "monitor", "val/loss")
        if monitor in trainer.callback_metrics:
            value = float(trainer.callback_metrics[monitor])
            if self.best_val is None or value < self.best_val:
                self.best_val = value
                self.best_mask = {k: m.clone() for k, m in self.mask.items()}

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Merge the best masks into a smaller dense model, save it, then fine-tune it with a fresh Trainer."""
        if self.phase != "prune":
            return
        self.detach()
        pl_module.step_override = None
        masks = self.best_mask if self.best_mask is not None else self.mask
        self.merge(pl_module, masks)
        directory = Path(run_dir(trainer))
        if trainer.is_global_zero:
            directory.mkdir(parents=True, exist_ok=True)
            self._save_merged(pl_module, directory / "pruned.ckpt")
        if self.finetune:
            self._finetune(trainer, pl_module, directory / "finetune")
        digest = hashlib.sha256(b"".join(m.numpy().tobytes() for m in masks.values())).hexdigest()
        self.summary["mask_sha256"] = digest  # equal on every DDP rank: the scores are all-reduced
        name = "prune_finetune.json" if trainer.is_global_zero else f"prune_finetune.rank{trainer.global_rank}.json"
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / name, "w") as f:
            json.dump({"summary": self.summary, "history": self.history}, f, indent=2)

    def merge(self, pl_module: LightningModule, masks: dict[str, Tensor]) -> dict[str, Any]:
        """Fold ``masks`` into ``pl_module.model`` and slice it (records ``pl_module.structure``); returns counts."""
        from zoo.prune_finetune.merge import merge_, param_count

        model = pl_module.model
        before_total, before_blocks = param_count(model), param_count(model, blocks_only=True)
        param = next(model.parameters())
        data = merge_(model, {k: m.to(param) for k, m in masks.items()}, self.residual_slicing)
        pl_module.structure = {"kind": "prune_finetune.merge", "data": data}
        pl_module.requires_grad_(True)
        self.phase = "merged"
        scored = sum(m.numel() for m in masks.values())
        self.summary = {
            "params_before": before_total, "params_after": param_count(model),
            "block_params_before": before_blocks, "block_params_after": param_count(model, blocks_only=True),
            "scored_entries": scored, "surviving_fraction": sum(int(m.sum()) for m in masks.values()) / max(scored, 1),
            "prune_steps": self.step, "best_val": self.best_val,
        }  # fmt: skip
        return self.summary

    def _save_merged(self, pl_module: LightningModule, path: Path) -> None:
        state = {f"model.{k}": v.detach().cpu() for k, v in pl_module.model.state_dict().items()}
        blob = {"state_dict": state, "zoo_structure": pl_module.structure}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(blob, tmp)
        os.replace(tmp, path)

    def _finetune(self, trainer: Trainer, pl_module: LightningModule, directory: Path) -> None:
        """Fit #2: the merged weights (or the module's LoRA adapters) train, Adam at ``ft_lr``, best weights kept."""
        if callable(adapters := getattr(pl_module, "set_adapters", None)):
            adapters(True)  # fresh adapters on the merged network when the module has lora_rank
        pl_module.automatic_optimization = True
        pl_module.train()  # the prune phase left the network in eval mode
        pl_module.lr = self.ft_lr
        if hasattr(pl_module, "lr_schedule"):
            pl_module.lr_schedule = self.ft_lr_schedule
        monitor, mode = getattr(pl_module, "monitor", "val/loss"), getattr(pl_module, "mode", "min")
        best = _BestWeights(monitor, mode)
        device = trainer.strategy.root_device
        callbacks: list[Callback] = [
            EarlyStopping(monitor=monitor, mode=mode, patience=self.ft_patience),
            best,
            ModelCheckpoint(dirpath=str(directory), filename="best", monitor=monitor, mode=mode, save_top_k=1),
        ]
        inner = Trainer(
            accelerator="cuda" if device.type == "cuda" else "cpu",
            devices=[device.index or 0] if device.type == "cuda" else 1,
            max_epochs=self.ft_epochs,
            logger=list(trainer.loggers) or False,  # the same run: fine-tuning curves next to the pruning ones
            callbacks=callbacks,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            log_every_n_steps=trainer.log_every_n_steps,
            **{
                k: getattr(trainer, k)
                for k in ("limit_train_batches", "limit_val_batches")
                if getattr(trainer, k) != 1.0
            },
            default_root_dir=str(directory),
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*(does not have many workers|Checkpoint directory).*")
            inner.fit(pl_module, datamodule=trainer.datamodule)
        if best.state is not None:
            pl_module.load_state_dict(best.state)
        self.phase = "finetuned"
        self.summary["finetune_best_val"] = best.best
        self.summary["finetune_checkpoint"] = str(directory / "best.ckpt")
        trainer.callback_metrics.update({f"finetune/{k}": v for k, v in inner.callback_metrics.items()})

    # ------------------------------------------------------------------------------------------------------------
    # State that survives resume.
    # ------------------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Phase, step, masks (bool), importances, partial macro-batch, best masks and history."""
        return {
            "phase": self.phase, "step": self.step, "mask": self.mask, "imp": self.imp, "grad": self.grad,
            "pending": self.pending, "stopped": self.stopped, "best_val": self.best_val, "best_mask": self.best_mask,
            "history": self.history, "consumed": self.consumed,
        }  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` wrote."""
        for key in ("phase", "step", "mask", "imp", "grad", "pending", "stopped", "best_val", "best_mask", "history"):
            setattr(self, key, state_dict[key])
        self._resume_consumed = int(state_dict.get("consumed", 0))  # checked against the epoch length in on_fit_start
