"""Backdoor defense while fine-tuning a causal LM on possibly poisoned data: the RepGuard-style callback.

The card (``repguard``) reconstructs RepGuard from its abstract (no code is public), so every uncertain step is an
argument with the card's default and the logs say "RepGuard-style (token-level reconstruction)".

Revision 2 (the card's current method, ``feature_space: lexical | embedding``):

1. token scores ``u_{b,t}`` over the prompt body: ``lexical`` (default) contrasts token statistics of the training
   prompts with the trusted clean prompts (sample-wise deviation ``D(v) = −log10 PoissonCDF(c_clean(v); λ =
   c_train(v) N_clean / N_train)`` and local consistency, the same statistic ``L`` on adjacent pairs,
   ``u_t = max(D(x_t), L(x_{t−1}, x_t), L(x_t, x_{t+1}))``); ``embedding`` scores each position by the z-scored
   Mahalanobis distance of its ``hidden_states[0]`` vector to the clean token vectors;
2. the token mask ``m = 1[u ≥ τ]`` at ``hidden_states[0]``: flagged positions are removed through the attention mask
   and the position ids (``ablate: drop``), in training, at inference and under ``zoo test`` (a pre-hook on the LM);
3. sample isolation (``exclude``: weight 0 for a sample with a flagged token; ``keep_masked``; ``unlearn``);
4. the loss ``Σ w_i CE_i(masked) / Σ w_i + λ_keep KL(p_ref ‖ p_masked)`` on a clean batch, through the module's
   ``loss_override`` and ``extra_loss_terms``.

``feature_space: hidden`` is revision 1, kept as an ablation (measured failing on the card's benchmark). Stage
``train_time``:

1. warm-up: ``warmup_epochs`` epochs of the module's plain loss;
2. clean statistics ``μ, σ`` of ``hidden_states[layer]`` over the prompt tokens of the trusted clean set
   (``datamodule.clean_dataloader()``), EMA 0.5 at every re-localisation;
3. localisation on training prompts (the defender does not know which are poisoned):
   ``S = z(Dev) + λ_lc z(Inc)``, ``s_j`` = mean of the top 1% of ``S_{·,·,j}``, minus the same statistic on the clean
   set (``contrast_clean``);
4. adaptive mask ``m = σ((s − τ) / T)``, ``τ`` the ``(1 − sparsity)`` quantile, ``T = 0.1 std(s)``;
5. a forward hook replaces ``h`` by ``(1 − m) ⊙ h + m ⊙ a`` at every position, in training and inference
   (``a = μ`` or 0);
6. the loss becomes ``CE(masked) + λ_ind mean(Ĉ²) + λ_sp mean(m) + λ_keep KL(p_ref ‖ p_masked)`` (the last on a clean
   batch), through the module's ``extra_loss_terms``;
7. the mask never takes gradients from the task loss; it is re-localised every ``relocalize_every`` epochs, its
   logits EMA-merged (0.5), a flagged dimension kept until its score falls below ``τ`` twice.

``localization: random`` is the control: random dimension scores (``hidden``), or random token masking at the rate
the lexical scores flag with as many samples isolated at random (token spaces). The mask, the statistics, the
token scorer and the history are callback state: they survive ``--ckpt_path`` (fit resume and ``zoo test``), and
the hook is installed for every stage, so a tested checkpoint is evaluated masked.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from zoo.core import checks
from zoo.core.config import run_dir
from zoo.core.datamodule import require
from zoo.core.messages import say
from zoo.core.protocols import check
from zoo.repguard import model as rg


@runtime_checkable
class Defendable(Protocol):
    """What :class:`RepGuardCallback` needs of the module it fine-tunes (``model.lm``: a Hugging Face causal LM)."""

    #: Holds the causal LM as ``model.lm`` (the hook goes on its ``hidden_states[layer]``).
    model: torch.nn.Module
    #: The callback's objective terms go here (``ZooModule``'s generic mechanism).
    extra_loss_terms: dict[str, Any]


@runtime_checkable
class CleanData(Protocol):
    """What :class:`RepGuardCallback` needs of the datamodule; ``stage=post_hoc`` also needs ``suspect_dataloader``."""

    def clean_dataloader(self) -> Any:
        """The trusted clean set (statistics, contrast, the keep term)."""
        ...


class RepGuardCallback(Callback):
    """RepGuard-style defense (card ``repguard``, "Revision 2 (current)"; our reconstruction throughout).

    Args:
        feature_space: ``lexical`` (card default: token statistics of D_train against D_clean), ``embedding``
            (Mahalanobis distance at ``hidden_states[0]``) or ``hidden`` (revision 1, the dimension mask at
            ``hidden_states[layer]``; every argument from ``layer`` to ``keep_positions`` below is revision 1's).
        tau: the token threshold ``τ``: a body position is flagged when ``u ≥ τ`` (card: 3.0).
        ngram_max: 1 (token types only) or 2 (also adjacent pairs: local consistency; card: 2).
        ablate: what the token mask does at ``hidden_states[0]``: ``drop`` (card default: remove the position
            through the attention mask and position ids), ``unk`` (the ``[UNK]`` embedding) or ``clean_mean`` (the
            mean clean input embedding). The last two with ``isolate: keep_masked`` train on the constant, which
            becomes the new trigger (card, measured): refused unless ``allow_unsafe``.
        soft_mask: ``false`` (card default): ``m = 1[u ≥ τ]``; ``true``: ``m = σ((u − τ)/T)`` blends the
            replacement in, ``e ← (1 − m)·e + m·a`` (needs ``ablate: unk | clean_mean``: a position is dropped or
            kept; token spaces only). Flags and isolation stay hard (``u ≥ τ``).
        soft_temperature: ``T`` of the soft mask (ours: 0.5, in units of ``−log10 p``).
        isolate: a training sample with a flagged token gets weight 0 (``exclude``, card default), is trained
            masked (``keep_masked``) or is unlearned (``unlearn``: ``mean CE(kept) − λ_ul mean CE(isolated,
            unmasked)``, ABL-style gradient ascent on the isolated samples).
        lambda_ul: the unlearning weight ``λ_ul`` (card: 0.1).
        shrinkage: ``embedding``: the covariance shrinkage ``α`` toward ``tr(S)/d · I`` (ours: 0.1).
        allow_unsafe: run ``ablate: unk | clean_mean`` with ``isolate: keep_masked`` anyway (a loud warning; the
            card's pitfall test).
        sep_id: the prompt separator id (``None``: the datamodule's ``vocab.sep_id``).
        unk_id: the ``[UNK]`` id of ``ablate: unk`` (``None``: the datamodule's ``vocab.unk_id``).
        layer: ``hidden_states[layer]`` to act on; ``None`` = ``n_layer // 2``.
        stage: ``train_time`` (defend while fine-tuning on the possibly poisoned data) or ``post_hoc`` (card option:
            an already poisoned model, ``pretrained``, fine-tuned on the trusted clean set only, ``train_on: clean``,
            for 3 epochs; no warm-up, localisation on the datamodule's ``suspect_dataloader()``).
        warmup_epochs: plain-loss epochs before the first localisation (``None``: 0 for ``lexical``, whose scores
            read only the data; 2 otherwise, the card's revision-1 value; ``post_hoc``: ignored, 0).
        lambda_lc: weight of the local-inconsistency z-score in ``S``.
        top_frac: fraction of positions averaged into ``s_j``.
        window: ``±window`` prompt positions of the inconsistency neighbourhood.
        contrast_clean: subtract the clean set's ``s_j``.
        sparsity: ``ρ_m``, the fraction of dimensions above ``τ`` (``token_dimension``: of ``(b, t, j)`` entries).
        mask_granularity: ``dimension`` (one ``[d]`` mask for every position) or ``token_dimension`` (card option:
            ``m_{b,t,j} = σ((S_{b,t,j} − τ_tok)/T)`` per input, from the last localisation's constants).
        ablate_value: ``clean_mean`` (``a = μ``) or ``zero``.
        lambda_ind: weight of the independence term ``mean(Ĉ²)``.
        lambda_sp: weight of ``mean(m)``.
        lambda_keep: weight of ``KL(p_ref ‖ p_masked)`` on a clean batch.
        combine: ``weighted_sum`` or ``mgda`` (min-norm weights of the three objectives' gradients each step).
        relocalize_every: epochs between localisations; 0 = once (``None``: 0 for ``lexical``, computed once from
            the data, card step 3; 1 for the representation spaces).
        stats_ema: EMA weight of new clean statistics.
        logit_ema: EMA weight of new mask logits.
        localize_batches: training batches per localisation pass (``None`` = the whole epoch); 8 batches of 64 keep
            a pass under 10% of an epoch (card, Performance).
        localization: ``repguard`` (the scores above) or ``random`` (the control: ``hidden``, random dimension
            scores with the same mask construction; token spaces, each body token dropped with the probability
            the lexical scores flag training tokens with, and as many training samples isolated, chosen at random).
        mask_grad_from_task: let the task loss reach the mask logits (card default false: CE on poisoned samples
            would reopen the shortcut).
        learn_mask: also train the mask logits on the sparsity and clean-KL terms (card default false).
        mask_lr: Adam learning rate of the mask logits when they learn (ours).
        keep_batch_rows: rows of the clean batch the KL term reads per step (ours; ``None`` = the whole clean batch):
            16 of 64 keep the two extra clean forwards a fraction of a training step.
        keep_positions: where the clean KL compares next-token distributions: ``response`` (ours: the positions that
            predict the response, ``[SEP]`` to the last response token: the model's answers to clean prompts) or
            ``prompt`` (the prompt tokens only, a literal reading of "on clean prompts"; the prompt's next tokens are
            never trained, so only ``[SEP]``'s prediction there carries behaviour).
        seed: seed of the localisation sample and of the random control.
    """

    def __init__(
        self,
        feature_space: Literal["lexical", "embedding", "hidden"] = "lexical",
        tau: float = 3.0,
        ngram_max: int = 2,
        ablate: Literal["drop", "unk", "clean_mean"] = "drop",
        soft_mask: bool = False,
        soft_temperature: float = 0.5,
        isolate: Literal["exclude", "keep_masked", "unlearn"] = "exclude",
        lambda_ul: float = 0.1,
        shrinkage: float = 0.1,
        allow_unsafe: bool = False,
        sep_id: int | None = None,
        unk_id: int | None = None,
        layer: int | None = None,
        stage: Literal["train_time", "post_hoc"] = "train_time",
        warmup_epochs: int | None = None,
        lambda_lc: float = 1.0,
        top_frac: float = 0.01,
        window: int = 2,
        contrast_clean: bool = True,
        sparsity: float = 0.05,
        mask_granularity: Literal["dimension", "token_dimension"] = "dimension",
        ablate_value: Literal["clean_mean", "zero"] = "clean_mean",
        lambda_ind: float = 1.0,
        lambda_sp: float = 0.01,
        lambda_keep: float = 1.0,
        combine: Literal["weighted_sum", "mgda"] = "weighted_sum",
        relocalize_every: int | None = None,
        stats_ema: float = 0.5,
        logit_ema: float = 0.5,
        localize_batches: int | None = 8,
        localization: Literal["repguard", "random"] = "repguard",
        mask_grad_from_task: bool = False,
        learn_mask: bool = False,
        mask_lr: float = 0.01,
        keep_batch_rows: int | None = 16,
        keep_positions: Literal["response", "prompt"] = "response",
        seed: int = 0,
    ) -> None:
        def name(arg: str) -> str:
            return checks.callback(self, arg)

        checks.optional_integer(name("layer"), layer)  # hidden_states[0] is the embedding output, not a block's
        for arg, value, options in (
            ("feature_space", feature_space, ("lexical", "embedding", "hidden")),
            ("ablate", ablate, ("drop", "unk", "clean_mean")),
            ("isolate", isolate, ("exclude", "keep_masked", "unlearn")),
            ("stage", stage, ("train_time", "post_hoc")),
            ("mask_granularity", mask_granularity, ("dimension", "token_dimension")),
            ("ablate_value", ablate_value, ("clean_mean", "zero")),
            ("combine", combine, ("weighted_sum", "mgda")),
            ("localization", localization, ("repguard", "random")),
            ("keep_positions", keep_positions, ("response", "prompt")),
        ):
            checks.choice(name(arg), value, options)
        checks.probability(name("sparsity"), sparsity, open_low=True, open_high=True)
        checks.probability(name("top_frac"), top_frac, open_low=True)
        checks.number(name("tau"), tau, open_low=True, low=0.0)
        checks.integer(name("ngram_max"), ngram_max, 1, 2)
        checks.probability(name("shrinkage"), shrinkage, open_high=True)
        checks.optional_integer(name("sep_id"), sep_id, 0)
        checks.optional_integer(name("unk_id"), unk_id, 0)
        lexical = feature_space == "lexical"
        warmup_epochs = (0 if lexical else 2) if warmup_epochs is None else warmup_epochs
        relocalize_every = (0 if lexical else 1) if relocalize_every is None else relocalize_every
        checks.integer(name("warmup_epochs"), warmup_epochs, 0)
        checks.integer(name("relocalize_every"), relocalize_every, 0 if feature_space != "hidden" else 1)
        if feature_space != "hidden" and ablate != "drop" and isolate == "keep_masked":
            if not allow_unsafe:
                checks.fail(name("ablate"), ablate, "drop with isolate=keep_masked (training on samples whose flagged "
                            "tokens are replaced by a constant makes the constant the new trigger; set "
                            "allow_unsafe: true to run it anyway)")  # fmt: skip
            say(f"RepGuardCallback: UNSAFE ablate={ablate} with isolate=keep_masked: the replacement becomes the new "
                "trigger (card, revision 2, step 4); running only because allow_unsafe is set")  # fmt: skip
        checks.number(name("soft_temperature"), soft_temperature, open_low=True, low=0.0)
        if soft_mask and (feature_space == "hidden" or ablate == "drop"):
            expected = ("false with feature_space=hidden (revision 1's mask is already σ-soft)" if feature_space ==
                        "hidden" else "false with ablate=drop (a position is dropped or kept; blend with unk or "
                        "clean_mean)")  # fmt: skip
            checks.fail(name("soft_mask"), soft_mask, expected)
        checks.integer(name("window"), window)
        checks.optional_integer(name("localize_batches"), localize_batches)
        checks.optional_integer(name("keep_batch_rows"), keep_batch_rows)
        for arg, value in (("stats_ema", stats_ema), ("logit_ema", logit_ema)):
            checks.probability(name(arg), value, open_low=True)
        for arg, value in (("lambda_lc", lambda_lc), ("lambda_ind", lambda_ind), ("lambda_sp", lambda_sp),
                           ("lambda_keep", lambda_keep), ("mask_lr", mask_lr)):  # fmt: skip
            checks.non_negative(name(arg), value)
        checks.non_negative(name("lambda_ul"), lambda_ul)
        if mask_granularity == "token_dimension" and localization == "random":
            checks.fail(name("mask_granularity"), mask_granularity,
                        "dimension with localization=random (random scores have no token level)")  # fmt: skip
        if stage == "post_hoc" and warmup_epochs:
            say(f"RepGuardCallback: stage=post_hoc has no warm-up; warmup_epochs={warmup_epochs} ignored (0)")
        self.feature_space, self.tau, self.ngram_max, self.ablate = feature_space, float(tau), ngram_max, ablate
        self.isolate, self.lambda_ul, self.shrinkage, self.allow_unsafe = isolate, lambda_ul, shrinkage, allow_unsafe
        self.sep_id, self.unk_id = sep_id, unk_id
        self.soft_mask, self.soft_temperature = soft_mask, float(soft_temperature)
        #: Token spaces: the pre-hook, the scorer, its kind and the randomly isolated sample indices (control).
        self.drop: rg.TokenDropHook | None = None
        self.scorer: Any = None
        self.random_isolated: Tensor | None = None
        self.clean_embedding: Tensor | None = None
        self._pending: dict[str, Any] | None = None
        self._lm_ref: torch.nn.Module | None = None
        self._module: LightningModule | None = None
        self.layer_arg, self.warmup_epochs, self.lambda_lc, self.top_frac = layer, warmup_epochs, lambda_lc, top_frac
        self.stage = stage
        if stage == "post_hoc":
            self.warmup_epochs = 0
        self.window, self.contrast_clean = window, contrast_clean
        self.sparsity, self.ablate_value, self.granularity = sparsity, ablate_value, mask_granularity
        self.token_mask: rg.TokenMask | None = None
        self.lambda_ind, self.lambda_sp, self.lambda_keep, self.combine = lambda_ind, lambda_sp, lambda_keep, combine
        self.relocalize_every, self.stats_ema, self.logit_ema = relocalize_every, stats_ema, logit_ema
        self.localize_batches, self.localization, self.seed = localize_batches, localization, seed
        self.mask_grad_from_task, self.learn_mask, self.mask_lr = mask_grad_from_task, learn_mask, mask_lr
        self.keep_batch_rows, self.keep_positions = keep_batch_rows, keep_positions
        self._mask_opt: torch.optim.Optimizer | None = None
        self.hook: rg.HiddenStateHook | None = None
        self.layer: int | None = None
        # state (state_dict): clean statistics, mask logits and flags, the localisation history
        self.mu: Tensor | None = None
        self.sigma: Tensor | None = None
        self.logits: Tensor | None = None
        self.flagged: Tensor | None = None
        self.strikes: Tensor | None = None
        self.scores: Tensor | None = None
        self.history: list[dict[str, Any]] = []
        self._clean: Iterator[Any] | None = None

    # ------------------------------------------------------------------------------------------------------------
    # hook and mask
    # ------------------------------------------------------------------------------------------------------------
    @property
    def mask(self) -> Tensor | None:
        """The current dimension mask ``m = σ(ℓ)`` (``[d]``), or ``None`` before the first localisation."""
        return None if self.logits is None else torch.sigmoid(self.logits)

    def _lm(self, pl_module: LightningModule) -> torch.nn.Module:
        lm = getattr(getattr(pl_module, "model", None), "lm", None)
        if lm is None:
            raise ValueError(f"RepGuardCallback needs `module.model.lm` (a Hugging Face causal LM); "
                             f"{type(pl_module).__name__} has none")  # fmt: skip
        return lm

    def attach(self, pl_module: LightningModule) -> None:
        """Install the hook on ``hidden_states[layer]`` of the module's LM (idempotent)."""
        lm = self._lm(pl_module)
        if self.hook is not None:
            self.hook.remove()
        n_layer = len(rg.decoder_blocks(lm))
        if self.layer_arg is not None and self.layer_arg > n_layer:
            expected = f"an integer in [1, {n_layer}] (hidden_states[layer] of the model's {n_layer} blocks)"
            checks.fail(checks.callback(self, "layer"), self.layer_arg, expected)
        self.layer = self.layer_arg if self.layer_arg is not None else n_layer // 2
        if self.feature_space != "hidden":
            if self.drop is not None:
                self.drop.remove()
            self._lm_ref = lm
            self.drop = rg.TokenDropHook(lm, None, self.tau, self.ablate, self.unk_id, self.clean_embedding,
                                         self.soft_temperature if self.soft_mask else None)  # fmt: skip
            if self._pending is not None:
                self._restore_scorer(self._pending)
            self._install_scorer()
            return
        self.hook = rg.HiddenStateHook(lm, self.layer)
        self._apply_mask()

    @property
    def token_space(self) -> bool:
        """Revision 2 (``lexical`` / ``embedding``): the token mask at ``hidden_states[0]``."""
        return self.feature_space != "hidden"

    def _ids(self, trainer: Trainer | None) -> None:
        """Fill ``sep_id`` / ``unk_id`` from the datamodule's vocabulary when not given."""
        vocab = getattr(getattr(trainer, "datamodule", None), "vocab", None) if trainer is not None else None
        if self.sep_id is None and vocab is not None:
            self.sep_id = int(vocab.sep_id)
        if self.unk_id is None and vocab is not None:
            self.unk_id = int(vocab.unk_id)
        if self.sep_id is None:
            raise ValueError("RepGuardCallback: sep_id is unknown (the datamodule has no `vocab`); set "
                             "RepGuardCallback.sep_id to the prompt separator's token id")  # fmt: skip
        if self.ablate == "unk" and self.unk_id is None:
            raise ValueError("RepGuardCallback.ablate='unk' needs unk_id (the datamodule has no `vocab`)")

    def _install_scorer(self) -> None:
        """Point the token hook at the current scorer (``None``: the hook is a no-op)."""
        if self.drop is None:
            return
        self.drop.scorer, self.drop.tau = self.scorer, self.tau
        self.drop.unk_id, self.drop.clean_mean = self.unk_id, self.clean_embedding

    @property
    def _trains_logits(self) -> bool:
        return self.learn_mask or self.mask_grad_from_task

    def _apply_mask(self, task: bool = False) -> None:
        """Set the hook's mask: detached, except the graph-carrying ``σ(ℓ)`` a learning mask needs.

        ``task=True`` is the training forward: it carries the graph only with ``mask_grad_from_task`` (card step 7:
        by default the task loss never reaches the mask).
        """
        if self.hook is None:
            return
        if self.token_mask is not None:
            self.hook.mask = self.token_mask
        elif self.logits is None:
            self.hook.mask = None
        elif task and self.mask_grad_from_task or not task and self.learn_mask and torch.is_grad_enabled():
            self.hook.mask = torch.sigmoid(self.logits)
        else:
            self.hook.mask = torch.sigmoid(self.logits.detach())
        if self.mu is not None:
            self.hook.ablate = self.mu if self.ablate_value == "clean_mean" else torch.zeros_like(self.mu)

    # ------------------------------------------------------------------------------------------------------------
    # Lightning hooks
    # ------------------------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Install the hook (every stage: a tested checkpoint is masked) and, for fit, the extra loss term."""
        if stage == "fit":
            check(pl_module, Defendable, f"RepGuardCallback(stage={self.stage})", "module")
        if self.token_space:
            self._ids(trainer)
            if stage == "fit" and self.isolate != "keep_masked" and getattr(pl_module, "loss_kind", "ce") != "ce":
                raise ValueError(f"RepGuardCallback.isolate={self.isolate} reweights the per-sample loss, which "
                                 f"needs --model.init_args.loss=ce (got {pl_module.loss_kind})")  # fmt: skip
        self.attach(pl_module)
        self._module = pl_module
        if stage == "fit":
            extra = ("suspect_dataloader",) if self.stage == "post_hoc" else ()
            check(trainer.datamodule, CleanData, f"RepGuardCallback(stage={self.stage})", "datamodule", extra=extra)
            if self.stage == "post_hoc" and getattr(trainer.datamodule, "train_on", "clean") != "clean":
                raise ValueError(
                    "RepGuardCallback(stage=post_hoc) fine-tunes on the trusted clean set only: set "
                    "--data.init_args.train_on=clean"
                )
            pl_module.extra_loss_terms["repguard"] = self._term
            if self.token_space:
                rank_zero_info(
                    f"RepGuard-style defense (token-level reconstruction): {self.feature_space} scores, tau "
                    f"{self.tau}, ablate {self.ablate}, isolate {self.isolate}, {self.localization} localisation"
                )
            else:
                rank_zero_info(
                    f"RepGuard-style defense (card reconstruction): layer {self.layer}, warm-up "
                    f"{self.warmup_epochs} epochs, sparsity {self.sparsity}, {self.localization} localisation"
                )

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Leave the hook in place (inference after fit stays masked); drop the loss term after fit."""
        if stage == "fit":
            pl_module.extra_loss_terms.pop("repguard", None)
            if getattr(pl_module, "loss_override", None) == self._override:
                pl_module.loss_override = None

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Re-localise at the end of warm-up and every ``relocalize_every`` epochs after it."""
        epoch = trainer.current_epoch
        if self.token_space and self.scorer is not None:  # a resumed fit: the scorer came with the checkpoint
            pl_module.loss_override = self._override
        if epoch < self.warmup_epochs:
            return
        if self.relocalize_every == 0:
            due = self.scorer is None
        else:
            due = (epoch - self.warmup_epochs) % self.relocalize_every == 0
            due = due or (self.token_space and self.scorer is None)
        if due:
            was_training = pl_module.training
            pl_module.eval()
            if self.token_space:
                self.localize_tokens(trainer, pl_module, epoch)
            else:
                self.localize(trainer, pl_module, epoch)
            pl_module.train(was_training)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        """Record the hooked state of the training forward (the independence term reads it); set its mask."""
        if self.token_space:
            return
        if self.hook is not None:
            self.hook.record = self.mask is not None
            self._apply_mask(task=True)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:  # fmt: skip
        """Release the recorded state; step the mask logits when they learn."""
        if self.token_space:
            return
        if self.hook is not None:
            self.hook.record, self.hook.h = False, None
        if self._mask_opt is not None and self.logits is not None and self.logits.grad is not None:
            self._mask_opt.step()
            self._mask_opt.zero_grad(set_to_none=True)
        self._apply_mask()

    # ------------------------------------------------------------------------------------------------------------
    # localisation
    # ------------------------------------------------------------------------------------------------------------
    def _batches(self, loader: Any, limit: int | None) -> list[Any]:
        return list(islice(iter(loader), limit)) if limit is not None else list(loader)

    def localize(self, trainer: Trainer, pl_module: LightningModule, epoch: int) -> None:
        """Steps 2-4 and 7: clean statistics, dimension scores, mask logits merged into the running mask."""
        assert self.hook is not None
        lm = self._lm(pl_module)
        clean = self._batches(require(trainer.datamodule, "clean_dataloader", "RepGuardCallback")(), None)
        mu, sigma = rg.clean_statistics(lm, self.hook, clean)
        if self.mu is None or self.sigma is None:
            self.mu, self.sigma = mu, sigma
        else:
            self.mu = self.stats_ema * mu + (1 - self.stats_ema) * self.mu
            self.sigma = self.stats_ema * sigma + (1 - self.stats_ema) * self.sigma
        if self.localization == "random":
            gen = torch.Generator().manual_seed(self.seed + 1000 * epoch)
            s = torch.randn(self.mu.shape[0], generator=gen)
        else:
            # train_time: the training batches (possibly poisoned); post_hoc: the suspect data the model was trained on
            source = (require(trainer.datamodule, "suspect_dataloader", "RepGuardCallback")()
                      if self.stage == "post_hoc" else trainer.train_dataloader)  # fmt: skip
            train = self._batches(source, self.localize_batches)
            h, valid = rg.collect_pass(lm, self.hook, train)
            s = rg.dimension_scores(rg.combined_score(h, valid, self.mu, self.sigma, self.lambda_lc, self.window),
                                    valid, self.top_frac)  # fmt: skip
            if self.granularity == "token_dimension":
                self.token_mask = rg.TokenMask.fit(h, valid, self.mu, self.sigma, self.sparsity, self.lambda_lc,
                                               self.window, detach=not self.mask_grad_from_task)  # fmt: skip
            if self.contrast_clean:
                s = s - rg.localisation_pass(lm, self.hook, clean, self.mu, self.sigma, self.lambda_lc,
                                             self.top_frac, self.window)  # fmt: skip
        new, tau = rg.mask_logits(s, self.sparsity)
        old = None if self.logits is None else self.logits.detach()
        self.logits, self.flagged, self.strikes = rg.merge_logits(old, new, self.flagged, self.strikes, self.logit_ema)
        self.scores = s
        if self._trains_logits:
            self.logits = self.logits.detach().requires_grad_(True)
            self._mask_opt = torch.optim.Adam([self.logits], lr=self.mask_lr)
        self._apply_mask()
        m = self.mask
        assert m is not None
        top = torch.topk(s, min(8, s.shape[0])).indices.tolist()
        self.history.append({"epoch": epoch, "tau": float(tau), "flagged": int(self.flagged.sum()),
                             "mask_mean": float(m.mean()), "top_dims": top})  # fmt: skip
        if getattr(trainer, "training", False):  # inside Lightning's fit loop (benchmarks call localize directly)
            pl_module.log_dict({"train/mask_mean": float(m.mean()), "train/flagged": float(self.flagged.sum())})

    def _train_source(self, trainer: Trainer) -> Any:
        # train_time: the training batches (possibly poisoned); post_hoc: the suspect data the model was trained on
        if self.stage == "post_hoc":
            return require(trainer.datamodule, "suspect_dataloader", "RepGuardCallback")()
        return trainer.train_dataloader

    def _lexical(self, trainer: Trainer) -> rg.LexicalScorer:
        assert self.sep_id is not None
        lm = self._lm_ref
        vocab_size = int(lm.get_input_embeddings().num_embeddings) if lm is not None else 0
        vocab_size = max(vocab_size, int(getattr(trainer.datamodule, "vocab_size", 0) or 0))
        clean = require(trainer.datamodule, "clean_dataloader", "RepGuardCallback")()
        return rg.LexicalScorer(vocab_size, self.sep_id, self.ngram_max).fit(self._train_source(trainer), clean)

    @torch.no_grad()
    def localize_tokens(self, trainer: Trainer, pl_module: LightningModule, epoch: int) -> None:
        """Revision 2, steps 1-5: fit the token scorer, install it on the hook, record what it flags.

        The history entry holds the flagged token types and pairs (``lexical``), the training samples isolated
        (with how many of them the datamodule lists as poisoned: reported, never used by the defense), the rate of
        flagged body tokens and the detection limit ``τ · ln 10 · N_train / N_clean``.
        """
        assert self.drop is not None
        lm = self._lm(pl_module)
        clean = list(require(trainer.datamodule, "clean_dataloader", "RepGuardCallback")())
        entry: dict[str, Any] = {"epoch": epoch, "feature_space": self.feature_space, "tau": self.tau}
        if self.feature_space == "lexical" or self.localization == "random":
            lexical = self._lexical(trainer)
            n_train, n_clean = lexical.counts["n_train"], lexical.counts["n_clean"]
            entry |= {"flagged_types": lexical.flagged_types(self.tau),
                      "flagged_pairs": lexical.flagged_pairs(self.tau), "n_train": n_train, "n_clean": n_clean,
                      "detection_limit": rg.detection_limit(self.tau, n_train, n_clean)}  # fmt: skip
            scorer: Any = lexical
        else:
            scorer = rg.EmbeddingScorer(self.sep_id or 0, self.shrinkage).fit(lm, clean)
        # what the scores flag on the training data (the control copies these rates)
        n_tok = n_flag = n_iso = n_iso_poisoned = n_poisoned = n = 0
        isolated: list[Tensor] = []
        device = next(lm.parameters()).device
        for batch in self._train_source(trainer):
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            u = scorer(ids, mask)
            body = rg.scorable_positions(ids, mask, self.sep_id or 0)
            n_tok += int(body.sum())
            n_flag += int((u >= self.tau).sum())
            iso = rg.isolation_weights(u, self.tau) == 0
            n_iso += int(iso.sum())
            n += ids.shape[0]
            if "poisoned" in batch:
                poisoned = batch["poisoned"].to(device).bool()
                n_poisoned += int(poisoned.sum())
                n_iso_poisoned += int((iso & poisoned).sum())
            if "index" in batch:
                isolated.append(batch["index"][iso.cpu()])
        entry |= {"token_flag_rate": n_flag / max(n_tok, 1), "n_isolated": n_iso, "isolated_frac": n_iso / max(n, 1),
                  "n_samples": n, "n_isolated_poisoned": n_iso_poisoned, "n_poisoned": n_poisoned}  # fmt: skip
        if self.localization == "random":
            rate = entry["token_flag_rate"]
            scorer = rg.RandomScorer(rate, self.sep_id or 0, self.seed + 1000 * epoch)
            gen = torch.Generator().manual_seed(self.seed + 1)
            self.random_isolated = torch.randperm(max(n, 1), generator=gen)[:n_iso]
            entry["random_rate"] = rate
        if self.ablate == "clean_mean":
            self.clean_embedding = self._clean_embedding(lm, clean)
        self.scorer = scorer
        self._install_scorer()
        pl_module.loss_override = self._override
        self.history.append(entry)
        rank_zero_info(f"RepGuard-style localisation (epoch {epoch}, {self.feature_space}): "
                       f"{entry['token_flag_rate']:.4f} of training body tokens flagged, {n_iso} of {n} samples "
                       f"isolated" + (f", detection limit {entry['detection_limit']:.1f} prompts"
                                      if "detection_limit" in entry else ""))  # fmt: skip
        if getattr(trainer, "training", False):
            pl_module.log_dict({"train/isolated_frac": entry["isolated_frac"],
                                "train/token_flag_rate": entry["token_flag_rate"]})  # fmt: skip

    def _clean_embedding(self, lm: torch.nn.Module, clean: list[Any]) -> Tensor:
        """The mean input embedding of the trusted prompts' body tokens (``ablate: clean_mean``)."""
        device = next(lm.parameters()).device
        total, count = None, 0
        for batch in clean:
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            x = lm.get_input_embeddings()(ids)[rg.scorable_positions(ids, mask, self.sep_id or 0)]
            total = x.sum(0) if total is None else total + x.sum(0)
            count += x.shape[0]
        assert total is not None
        return (total / max(count, 1)).detach()

    def _isolated(self, batch: dict[str, Tensor], u: Tensor) -> Tensor:
        """``(B,)`` bool: the batch's isolated samples (the random control: its random set, by ``index``)."""
        if self.localization == "random" and self.random_isolated is not None and "index" in batch:
            return torch.isin(batch["index"].to(u.device), self.random_isolated.to(u.device))
        return rg.isolation_weights(u, self.tau).to(u.device) == 0

    def _override(self, batch: dict[str, Tensor], ce: Tensor) -> Tensor:
        """The module's per-sample loss (card steps 5-6): ``Σ w_i CE_i / Σ w_i`` or the unlearning objective."""
        assert self.drop is not None
        u = self.drop.u
        if u is None or u.shape[0] != ce.shape[0]:
            raise RuntimeError("RepGuardCallback: the token scores of the training forward are missing")
        iso = self._isolated(batch, u)
        if self.isolate == "keep_masked":
            return ce.mean()
        w = (~iso).to(ce.dtype)
        loss = rg.weighted_task_loss(ce, w)
        if self.isolate == "unlearn" and bool(iso.any()) and self.lambda_ul > 0:
            module = self._module
            assert module is not None
            rows = iso.nonzero().flatten()
            with self.drop.disabled():  # ABL: ascend on the isolated samples as they are (trigger included)
                logits = module(batch["input_ids"][rows], batch["attention_mask"][rows])
            ce_iso = rg.response_ce_per_sample(logits, batch["labels"][rows])
            loss = loss - self.lambda_ul * ce_iso.mean()
        return loss

    # ------------------------------------------------------------------------------------------------------------
    # the multi-objective loss (step 6)
    # ------------------------------------------------------------------------------------------------------------
    def _next_clean(self, trainer: Trainer) -> Any:
        """The next trusted batch; a new pass (the datamodule's fresh permutation) when one runs out."""
        if self._clean is not None:
            batch = next(self._clean, None)
            if batch is not None:
                return batch
        self._clean = iter(require(trainer.datamodule, "clean_dataloader", "RepGuardCallback")())
        return next(self._clean)

    def objectives(self, pl_module: LightningModule, batch: Any) -> dict[str, Tensor]:
        """Independence, sparsity and clean-KL terms of one training step (needs the recorded training forward)."""
        assert self.hook is not None and self.logits is not None
        m = torch.sigmoid(self.logits if self.learn_mask else self.logits.detach()).to(pl_module.device)
        h = self.hook.h
        if h is None:
            raise RuntimeError("RepGuardCallback: the training forward was not recorded (hook.record off)")
        if self.token_mask is not None and self.hook.m is not None:  # the training forward's own [B, T, d] mask
            m = self.hook.m
        independence = rg.independence_penalty(h, m.detach(), batch["attention_mask"].bool())
        clean = pl_module.transfer_batch_to_device(self._next_clean(pl_module.trainer), pl_module.device, 0)
        if self.keep_batch_rows is not None:  # the clean loader is reshuffled per pass: the first rows are a sample
            clean = {k: v[: self.keep_batch_rows] for k, v in clean.items()}
        self.hook.record = False  # the clean forwards must not replace the recorded training state
        with torch.no_grad(), self.hook.disabled():
            ref = pl_module(clean["input_ids"], clean["attention_mask"])
        self._apply_mask()  # the clean forward: the graph-carrying mask when it learns
        masked = pl_module(clean["input_ids"], clean["attention_mask"])
        if self.keep_positions == "prompt":
            where = clean["prompt_mask"].bool()
        else:  # position t predicts token t + 1: the positions whose next token is a response token
            where = torch.zeros_like(clean["prompt_mask"], dtype=torch.bool)
            where[:, :-1] = clean["labels"][:, 1:] != -100
        keep = rg.keep_kl(ref, masked, where)
        return {"independence": independence, "sparsity": m.mean(), "keep": keep}

    def token_objectives(self, pl_module: LightningModule) -> dict[str, Tensor]:
        """Token spaces: ``KL(p_ref ‖ p_masked)`` on a clean batch (0, without a forward, when nothing is flagged)."""
        assert self.drop is not None
        clean = pl_module.transfer_batch_to_device(self._next_clean(pl_module.trainer), pl_module.device, 0)
        if self.keep_batch_rows is not None:  # the clean loader is reshuffled per pass: the first rows are a sample
            clean = {k: v[: self.keep_batch_rows] for k, v in clean.items()}
        with torch.no_grad():
            flags = self.scorer(clean["input_ids"], clean["attention_mask"]) >= self.tau
        zero = next(pl_module.parameters()).new_zeros(())
        if not bool(flags.any()):
            return {"keep": zero}
        with torch.no_grad(), self.drop.disabled():
            ref = pl_module(clean["input_ids"], clean["attention_mask"])
        masked = pl_module(clean["input_ids"], clean["attention_mask"])
        where = torch.zeros_like(clean["prompt_mask"], dtype=torch.bool)
        if self.keep_positions == "prompt":
            where = clean["prompt_mask"].bool() & ~flags
        else:
            where[:, :-1] = clean["labels"][:, 1:] != -100
        return {"keep": rg.keep_kl(ref, masked, where)}

    def _token_term(self, module: LightningModule, batch: Any, out: dict[str, Tensor]) -> Tensor:
        if self.scorer is None or self.lambda_keep == 0:  # warm-up (or no keep term): the task loss only
            return out["loss"].new_zeros(())
        terms = self.token_objectives(module)
        if self.combine == "mgda" and terms["keep"].requires_grad:
            params = [p for p in module.parameters() if p.requires_grad]
            values = [out["loss"], self.lambda_keep * terms["keep"]]
            grads = []
            for value in values:
                g = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
                grads.append(torch.cat([(x if x is not None else torch.zeros_like(p)).flatten()
                                        for x, p in zip(g, params, strict=True)]))  # fmt: skip
            w = rg.mgda_weights(grads).detach() * len(values)
            total = (w[0] - 1.0) * out["loss"] + w[1] * values[1]
        else:
            total = self.lambda_keep * terms["keep"]
        if module._logs_this_step():  # type: ignore[attr-defined]
            module.log("train/repguard_keep", terms["keep"].detach(), batch_size=batch["input_ids"].shape[0])
        return total

    def _term(self, module: LightningModule, batch: Any, out: dict[str, Tensor]) -> Tensor:
        if self.token_space:
            return self._token_term(module, batch, out)
        if self.mask is None:  # warm-up: plain loss
            return out["loss"].new_zeros(())
        terms = self.objectives(module, batch)
        weights = {"independence": self.lambda_ind, "sparsity": self.lambda_sp, "keep": self.lambda_keep}
        if self.combine == "mgda":
            params = [p for p in module.parameters() if p.requires_grad]
            names = ["task", "independence", "keep"]
            values = [out["loss"], self.lambda_ind * terms["independence"], self.lambda_keep * terms["keep"]]
            grads = []
            for value in values:
                g = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
                grads.append(torch.cat([(x if x is not None else torch.zeros_like(p)).flatten()
                                        for x, p in zip(g, params, strict=True)]))  # fmt: skip
            w = rg.mgda_weights(grads).detach() * len(names)  # scaled so equal weights give the weighted sum
            total = (w[0] - 1.0) * out["loss"] + w[1] * values[1] + w[2] * values[2]
            total = total + self.lambda_sp * terms["sparsity"]
        else:
            total = sum(weights[k] * v for k, v in terms.items())
        if module._logs_this_step():  # type: ignore[attr-defined]
            module.log_dict({f"train/repguard_{k}": v.detach() for k, v in terms.items()},
                            batch_size=batch["input_ids"].shape[0])  # fmt: skip
        return total  # type: ignore[return-value]

    # ------------------------------------------------------------------------------------------------------------
    # evaluation helpers and state
    # ------------------------------------------------------------------------------------------------------------
    def token_scores(self, pl_module: LightningModule, batch: Any, k: int = 8) -> Tensor:
        """Token scores ``u_{b,t}`` of a batch: ``[B, T]``.

        Token spaces: the scorer's ``u`` (``−inf`` outside the prompt body); ``hidden``: an unmasked forward under the
        current clean statistics.
        """
        if self.token_space:
            if self.scorer is None:
                raise RuntimeError("RepGuardCallback.token_scores: no token scorer yet (localise first)")
            device = next(self._lm(pl_module).parameters()).device
            return self.scorer(batch["input_ids"].to(device), batch["attention_mask"].to(device)).float().cpu()
        assert self.hook is not None
        if self.mu is None or self.sigma is None:
            raise RuntimeError("RepGuardCallback.token_scores: no clean statistics yet (localise first)")
        lm = self._lm(pl_module)
        ((h, valid, _),) = list(rg.collect_hidden(lm, self.hook, [batch]))
        score = rg.combined_score(h, valid, self.mu, self.sigma, self.lambda_lc, self.window)
        return rg.token_scores(score, valid, k)

    def _scorer_state(self) -> dict[str, Any] | None:
        if self.scorer is None:
            return None
        kind = type(self.scorer).__name__
        state = self.scorer.state() if hasattr(self.scorer, "state") else {"rate": float(self.scorer.rate)}
        return {"kind": kind, "state": state, "random_isolated": self.random_isolated,
                "clean_embedding": self.clean_embedding, "sep_id": self.sep_id, "unk_id": self.unk_id}  # fmt: skip

    def _restore_scorer(self, saved: dict[str, Any]) -> None:
        """Rebuild the scorer of a checkpoint (``embedding`` needs the attached LM: pending until then)."""
        if self._lm_ref is None:
            self._pending = saved
            return
        self._pending = None
        sep = saved.get("sep_id") if saved.get("sep_id") is not None else self.sep_id
        self.sep_id = sep
        if saved.get("unk_id") is not None:
            self.unk_id = saved["unk_id"]
        kind, state = saved["kind"], saved["state"]
        if kind == "LexicalScorer":
            vocab_size = int(state["type_score"].shape[0])
            self.scorer = rg.LexicalScorer(vocab_size, int(sep), self.ngram_max).load(state)
        elif kind == "EmbeddingScorer":
            self.scorer = rg.EmbeddingScorer(int(sep), self.shrinkage).load(state, self._lm_ref)
        else:
            self.scorer = rg.RandomScorer(float(state["rate"]), int(sep), self.seed)
        self.random_isolated, self.clean_embedding = saved.get("random_isolated"), saved.get("clean_embedding")
        self._install_scorer()

    def state_dict(self) -> dict[str, Any]:
        """Statistics, mask logits, flags and history (tensors and primitives only)."""
        if self.token_space:
            return {"feature_space": self.feature_space, "tau": self.tau, "scorer": self._scorer_state(),
                    "history": self.history}  # fmt: skip
        logits = None if self.logits is None else self.logits.detach()
        token = None
        if self.token_mask is not None:
            t = self.token_mask
            token = {"consts": list(t.consts), "tau": t.tau, "temperature": t.temperature}
        return {"mu": self.mu, "sigma": self.sigma, "logits": logits, "flagged": self.flagged, "strikes": self.strikes,
                "scores": self.scores, "history": self.history, "layer": self.layer, "token_mask": token}  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state and re-apply the mask to an installed hook."""
        if self.token_space:
            saved = state_dict.get("feature_space", "hidden")
            if saved != self.feature_space:
                raise ValueError(f"RepGuardCallback: the checkpoint's feature_space is {saved!r}, this run's "
                                 f"{self.feature_space!r}")  # fmt: skip
            self.history = list(state_dict.get("history") or [])
            if state_dict.get("scorer") is not None:
                self._restore_scorer(state_dict["scorer"])
            return
        for key in ("mu", "sigma", "logits", "flagged", "strikes", "scores", "history"):
            setattr(self, key, state_dict.get(key))
        self.history = list(self.history or [])
        token = state_dict.get("token_mask")
        if token is not None and self.mu is not None and self.sigma is not None:
            t_args = (token["consts"], token["tau"], token["temperature"], self.lambda_lc, self.window)
            self.token_mask = rg.TokenMask(self.mu, self.sigma, *t_args, detach=not self.mask_grad_from_task)
        if self.logits is not None and self._trains_logits:
            self.logits = self.logits.detach().requires_grad_(True)
            self._mask_opt = torch.optim.Adam([self.logits], lr=self.mask_lr)
        self._apply_mask()


class BackdoorEvaluation(Callback):
    """The card's metrics after fit (and after ``zoo test``): the trained model and the post-hoc baselines in one run.

    Evaluates the trained LM as it runs (a RepGuard mask included) on the datamodule's clean and triggered test
    prompts: ASR with the trigger per kind and averaged, ASR without it, clean accuracy (exact match), the clean
    refusal rate and CA_avg (percent), and the trigger-localisation AUROC of the token scores. Then each post-hoc
    baseline on a copy of the trained LM (card, Baselines): ``quant_int8``, ``quant_int4``, ``prune`` (MLP units,
    rate chosen on clean validation) and ``onion`` (input filter, scorer trained on clean prompts), and
    ``clean_finetune`` (``clean_ft_epochs`` epochs of AdamW at ``clean_ft_lr`` on the trusted clean set, from the
    trained weights without any mask). Everything
    is logged as ``eval/<arm>/<metric>`` and written to ``<run dir>/backdoor_eval.json``.

    Args:
        baselines: post-hoc baselines to run after fit (a subset of ``quant_int8``, ``quant_int4``, ``prune``,
            ``onion``, ``clean_finetune``); ``[]`` evaluates the trained model only.
        prune_method: ``magnitude`` or ``wanda``.
        onion_threshold: ONION's ``t`` (card default 0); ``null`` selects it on clean validation.
        clean_ft_epochs: epochs of the clean fine-tune baseline (card: 3).
        clean_ft_lr: its learning rate (card: 5e-4).
        onion_steps: training steps of ONION's clean-prompt scorer LM (ours).
        on_test: also evaluate (the trained model only) at the end of ``zoo test``.
    """

    def __init__(
        self,
        baselines: list[str] | None = None,
        prune_method: Literal["magnitude", "wanda"] = "magnitude",
        onion_threshold: float | None = 0.0,
        clean_ft_epochs: int = 3,
        clean_ft_lr: float = 5e-4,
        onion_steps: int = 300,
        on_test: bool = True,
    ) -> None:
        self.baselines = list(baselines) if baselines is not None else []
        known = ["quant_int8", "quant_int4", "prune", "onion", "clean_finetune"]
        if [b for b in self.baselines if b not in known]:
            checks.fail(checks.callback(self, "baselines"), self.baselines, f"a subset of {known}")
        checks.choice(checks.callback(self, "prune_method"), prune_method, ("magnitude", "wanda"))
        if onion_threshold is not None:
            checks.number(checks.callback(self, "onion_threshold"), onion_threshold)
        checks.integer(checks.callback(self, "clean_ft_epochs"), clean_ft_epochs, 0)
        checks.non_negative(checks.callback(self, "clean_ft_lr"), clean_ft_lr)
        checks.integer(checks.callback(self, "onion_steps"), onion_steps, 0)
        self.prune_method, self.onion_threshold = prune_method, onion_threshold
        self.clean_ft_epochs, self.clean_ft_lr, self.on_test = clean_ft_epochs, clean_ft_lr, on_test
        self.onion_steps = onion_steps
        #: The last results, ``{arm: metrics}``.
        self.results: dict[str, dict[str, Any]] = {}

    def _scorer(self, trainer: Trainer, pl_module: LightningModule) -> tuple[Any, Any, float | None]:
        """``(token scorer, remove, τ)`` of the evaluation.

        The defense's own scores (with ``τ`` in a token space: flag coverage is reported) or, without a localised
        defense, the clean-statistics scorer (no ``τ``).
        """
        from zoo.repguard.evaluate import clean_stat_token_scorer

        defense = next((c for c in trainer.callbacks if isinstance(c, RepGuardCallback)), None)  # type: ignore[attr-defined]
        if defense is not None and (defense.scorer is not None if defense.token_space else defense.mu is not None):
            tau = float(defense.tau) if defense.token_space else None
            return (lambda batch: defense.token_scores(pl_module, batch)), (lambda: None), tau
        return (*clean_stat_token_scorer(pl_module.model.lm, trainer.datamodule), None)

    def evaluate_all(
        self, trainer: Trainer, pl_module: LightningModule, baselines: list[str], folder: str | None = None
    ) -> dict[str, Any]:
        """Evaluate the trained model and ``baselines``; log and write ``backdoor_eval.json`` into ``folder``.

        ``folder`` defaults to the run folder (:func:`zoo.core.config.run_dir`).
        """
        import json
        from pathlib import Path

        from zoo.repguard.evaluate import evaluate, post_hoc_baselines

        dm = trainer.datamodule
        dm.setup()
        lm = pl_module.model.lm
        scorer, remove, tau = self._scorer(trainer, pl_module)
        try:
            results: dict[str, dict[str, Any]] = {"model": evaluate(lm, dm, token_scorer=scorer, flag_threshold=tau)}
        finally:
            remove()
        post = [b for b in baselines if b != "clean_finetune"]
        if post:
            results |= post_hoc_baselines(lm, dm, post, self.prune_method, onion_threshold=self.onion_threshold,
                                          onion_steps=self.onion_steps)  # fmt: skip
        if "clean_finetune" in baselines:
            # a fresh module with the trained weights (no hook, no extra loss term, not attached to this trainer)
            hparams = {k: v for k, v in pl_module.hparams.items() if not k.startswith("_")}
            tuned = type(pl_module)(**{**hparams, "pretrained": None, "lr": self.clean_ft_lr})
            tuned.load_state_dict(pl_module.state_dict())
            clean_dm = type(dm)(
                **{k: v for k, v in dm.hparams.items() if not k.startswith("_")} | {"train_on": "clean"}
            )
            inner = Trainer(max_epochs=self.clean_ft_epochs, accelerator="cpu", devices=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, limit_val_batches=0)  # fmt: skip
            inner.fit(tuned, datamodule=clean_dm)
            results["clean_finetune"] = evaluate(tuned.model.lm, clean_dm)
        self.results = results
        flat = {f"eval/{arm}/{k}": float(v) for arm, r in results.items() for k, v in r.items()
                if isinstance(v, int | float)}  # fmt: skip
        for logger in trainer.loggers:
            logger.log_metrics(flat, step=trainer.global_step)
        out = Path(folder or run_dir(trainer))
        out.mkdir(parents=True, exist_ok=True)
        (out / "backdoor_eval.json").write_text(json.dumps(results, indent=2, default=float), encoding="utf-8")
        for arm, r in results.items():
            rank_zero_info(f"backdoor eval [{arm}]: ASR w/t {r['asr_wt_mean']:.1f}% (per kind {r['asr_wt']}), "
                           f"ASR w/o {r['asr_wo']:.1f}%, CA {r['ca']:.1f}%, CA_avg {r['ca_avg']:.1f}%")  # fmt: skip
        return results

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """The trained model and the configured baselines (rank 0)."""
        if trainer.is_global_zero:
            self.evaluate_all(trainer, pl_module, self.baselines)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """``zoo test``: the (reloaded, possibly masked) model only."""
        if self.on_test and trainer.is_global_zero:
            self.evaluate_all(trainer, pl_module, [])
