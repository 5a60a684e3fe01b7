"""Training-time backdoor baselines of the RepGuard card, as callbacks on ``InstructionLMModule``.

* :class:`ABLCallback`: anti-backdoor learning (Li et al., NeurIPS 2021; public code ``bboylyg/ABL``) on the
  per-sample response cross-entropy: local gradient ascent with the loss floor ``γ`` for ``isolation_epochs``, then
  the lowest-loss ``isolation_ratio`` of ``D_train`` is isolated, the remaining epochs train on the rest, and after the
  last epoch ``unlearning_epochs`` epochs of gradient ascent on the isolated samples unlearn them.
* :class:`ExcludeSamples`: train on ``D_train`` minus given sample ids (spectral signatures' retraining).
* :class:`CROWCallback`: CROW's adversarial layer-consistency term (arXiv 2411.12768) added to the loss of a
  fine-tune on the trusted clean set.
* :class:`DefenseComparison`: :class:`callbacks.backdoor_defense.BackdoorEvaluation` plus the runner's defenses
  (``zoo.repguard.defenses_runner``: ABL, spectral signatures, CROW, ONION with a clean-validation threshold) in the
  same run and the same ``backdoor_eval.json``.

The first two use the module's ``loss_override`` (``f(batch, ce_per_sample) -> loss``; ``batch["index"]`` names the
samples within ``D_train``), CROW its ``extra_loss_terms``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from callbacks.backdoor_defense import BackdoorEvaluation
from zoo.core import checks
from zoo.core.config import run_dir
from zoo.repguard import baselines as B


def _claim_override(owner: object, pl_module: LightningModule, fn: Any) -> None:
    current = getattr(pl_module, "loss_override", "missing")
    if current == "missing":
        raise TypeError(f"{type(owner).__name__} needs a module with `loss_override` (InstructionLMModule)")
    if current is not None and getattr(current, "__self__", None) is not owner:
        raise ValueError(f"{type(owner).__name__}: another callback already sets the module's loss_override "
                         "(two per-sample reweightings cannot be combined)")  # fmt: skip
    pl_module.loss_override = fn


class ABLCallback(Callback):
    """Anti-backdoor learning on the response CE of each training sample (card, Baselines: ABL).

    Epochs ``0 .. isolation_epochs − 1``: LGA, ``sign(ℓ − γ)·ℓ`` (``lga: sample``, the paper's per-example form; or
    ``batch``, the public code's sign of the batch mean). At the end of epoch ``isolation_epochs − 1`` every training
    sample's response CE is computed (eval mode) and the ``floor(isolation_ratio·n)`` lowest are isolated. The
    remaining epochs train on the other samples only (the public code's fine-tuning on the non-isolated data). After
    the last epoch, ``unlearning_epochs`` epochs of gradient ascent (``−mean CE``) on the isolated samples at
    ``unlearning_lr``, batch ``unlearning_batch``, with the public code's SGD (momentum 0.9, Nesterov, weight decay
    1e-4) or AdamW (the victim's optimiser; its sign-like steps make the same learning rate a far larger ascent).

    Logged: the isolated ids and, for the report only (never used by the defense), the fraction of them that are
    poisoned (``abl/isolation_precision``) and the fraction of poisoned samples isolated (``abl/isolation_recall``).

    Args:
        isolation_epochs: LGA epochs before the isolation (paper: 20 of 100; public code: 10; ours: 5 of 24).
        isolation_ratio: fraction of ``D_train`` isolated (public code: 0.01).
        gamma: LGA's loss floor ``γ`` on the per-sample mean response-token CE (public code: 0.5).
        lga: ``sample`` or ``batch``.
        unlearning_epochs: gradient-ascent epochs on the isolated samples (public code: 5, the first evaluates only).
        unlearning_lr: their learning rate (public code: 5e-4).
        unlearning_batch: their batch size (public code: 64).
        unlearning_optimizer: ``sgd`` (public code) or ``adamw``.
    """

    def __init__(
        self,
        isolation_epochs: int = 5,
        isolation_ratio: float = B.ABL_ISOLATION_RATIO,
        gamma: float = B.ABL_GAMMA,
        lga: Literal["sample", "batch"] = "sample",
        unlearning_epochs: int = 5,
        unlearning_lr: float = 5e-4,
        unlearning_batch: int = 64,
        unlearning_optimizer: Literal["sgd", "adamw"] = "sgd",
    ) -> None:
        checks.integer(checks.callback(self, "isolation_epochs"), isolation_epochs, 1)
        checks.probability(checks.callback(self, "isolation_ratio"), isolation_ratio)
        checks.non_negative(checks.callback(self, "gamma"), gamma)
        checks.choice(checks.callback(self, "lga"), lga, ("sample", "batch"))
        checks.integer(checks.callback(self, "unlearning_epochs"), unlearning_epochs, 0)
        checks.non_negative(checks.callback(self, "unlearning_lr"), unlearning_lr)
        checks.integer(checks.callback(self, "unlearning_batch"), unlearning_batch, 1)
        checks.choice(checks.callback(self, "unlearning_optimizer"), unlearning_optimizer, ("sgd", "adamw"))
        self.isolation_epochs, self.isolation_ratio, self.gamma = isolation_epochs, isolation_ratio, gamma
        self.lga, self.unlearning_epochs = lga, unlearning_epochs
        self.unlearning_lr, self.unlearning_batch = unlearning_lr, unlearning_batch
        self.unlearning_optimizer = unlearning_optimizer
        #: Isolated ``D_train`` indices (lowest loss first), ``None`` before the isolation.
        self.isolated: list[int] | None = None
        self._isolated_set: Tensor | None = None
        #: Report of the last run (counts, precision/recall against the poisoned ids, ascent losses).
        self.report: dict[str, Any] = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Check the epoch budget and take the module's ``loss_override``."""
        epochs = trainer.max_epochs
        if epochs is not None and 0 < epochs <= self.isolation_epochs and not trainer.fast_dev_run:
            raise ValueError(f"{checks.callback(self, 'isolation_epochs')}={self.isolation_epochs}: expected fewer "
                             f"than --trainer.max_epochs={epochs} (ABL trains on the rest after it)")  # fmt: skip
        _claim_override(self, pl_module, self.loss)

    def loss(self, batch: dict[str, Tensor], ce: Tensor) -> Tensor:
        """The ABL objective of the current phase on one batch's per-sample CE."""
        if self._isolated_set is None:
            return B.abl_lga_loss(ce, self.gamma, self.lga)
        keep = ~torch.isin(batch["index"].to(self._isolated_set.device), self._isolated_set)
        return B.excluded_mean(ce, keep)

    @torch.no_grad()
    def sample_losses(self, pl_module: LightningModule, dm: Any) -> Tensor:
        """``(n,)`` per-sample response CE of every ``D_train`` sample (eval mode), indexed by ``batch["index"]``."""
        from zoo.repguard.model import response_ce_per_sample

        data = dm.dataset("train")
        out = torch.full((len(data),), float("nan"))
        lm = pl_module.model.lm
        was = lm.training
        lm.eval()
        device = next(lm.parameters()).device
        try:
            for batch in dm.loader(data):
                logits = pl_module(batch["input_ids"].to(device), batch["attention_mask"].to(device))
                out[batch["index"]] = response_ce_per_sample(logits, batch["labels"].to(device)).float().cpu()
        finally:
            lm.train(was)
        return out

    def isolate(self, pl_module: LightningModule, dm: Any) -> list[int]:
        """Isolate the lowest-loss fraction of ``D_train`` now; returns the ids."""
        losses = self.sample_losses(pl_module, dm)
        ids = B.abl_isolate(losses, self.isolation_ratio)
        self.isolated = [int(i) for i in ids]
        self._isolated_set = ids.to(next(pl_module.parameters()).device)
        poisoned = set(getattr(dm, "poisoned_ids", []) or [])
        hit = sum(i in poisoned for i in self.isolated)
        self.report |= {"n_isolated": len(self.isolated), "isolated": self.isolated,
                        "isolation_precision": hit / len(self.isolated) if self.isolated else float("nan"),
                        "isolation_recall": hit / len(poisoned) if poisoned else float("nan")}  # fmt: skip
        rank_zero_info(f"ABL: isolated {len(self.isolated)} of {losses.numel()} training samples "
                       f"({hit} poisoned; reported only)")  # fmt: skip
        return self.isolated

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Isolate after the last LGA epoch."""
        if self._isolated_set is None and trainer.current_epoch + 1 >= self.isolation_epochs:
            self.isolate(pl_module, trainer.datamodule)
            pl_module.log_dict({"abl/n_isolated": float(len(self.isolated or []))})

    def unlearn(self, pl_module: LightningModule, dm: Any) -> list[float]:
        """Gradient ascent on the isolated samples; returns the mean isolated CE after each ascent epoch."""
        from datamodules.instructions.dataset import BackdoorDataset, collate_backdoor
        from zoo.repguard.model import response_ce_per_sample

        if not self.isolated or self.unlearning_epochs == 0:
            return []
        data = dm.dataset("train")
        subset = BackdoorDataset([data.samples[i] for i in self.isolated], dm.vocab, "abl_isolated", False,
                                 data.max_length)  # fmt: skip
        lm = pl_module.model.lm
        device = next(lm.parameters()).device
        params = [p for p in lm.parameters() if p.requires_grad]
        if self.unlearning_optimizer == "sgd":  # the public code's optimiser
            opt: torch.optim.Optimizer = torch.optim.SGD(
                params, lr=self.unlearning_lr, momentum=0.9, weight_decay=1e-4, nesterov=True
            )
        else:
            opt = torch.optim.AdamW(params, lr=self.unlearning_lr, weight_decay=getattr(pl_module, "weight_decay", 0.0))
        gen = torch.Generator().manual_seed(int(getattr(dm, "seed", 0)))
        history = []
        was = lm.training
        lm.train()
        try:
            with torch.enable_grad():
                for _ in range(self.unlearning_epochs):
                    order = torch.randperm(len(subset), generator=gen).tolist()
                    total, count = 0.0, 0
                    for start in range(0, len(order), self.unlearning_batch):
                        items = [subset[i] for i in order[start : start + self.unlearning_batch]]
                        batch = collate_backdoor(items)
                        logits = lm(input_ids=batch["input_ids"].to(device),
                                    attention_mask=batch["attention_mask"].to(device)).logits  # fmt: skip
                        ce = response_ce_per_sample(logits, batch["labels"].to(device))
                        opt.zero_grad(set_to_none=True)
                        (-ce.mean()).backward()  # gradient ascent (public code: (-loss).backward())
                        opt.step()
                        total, count = total + float(ce.detach().sum()), count + len(items)
                    history.append(total / max(count, 1))
        finally:
            lm.train(was)
        self.report["unlearning_ce"] = history
        return history

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """The unlearning phase (after the last epoch, before any evaluation callback's ``on_fit_end``)."""
        if self._isolated_set is None:  # fewer epochs than isolation_epochs (fast_dev_run): isolate now
            self.isolate(pl_module, trainer.datamodule)
        self.unlearn(pl_module, trainer.datamodule)
        pl_module.loss_override = None

    def state_dict(self) -> dict[str, Any]:
        """The isolated ids and the report (they survive ``--ckpt_path``)."""
        return {"isolated": self.isolated, "report": self.report}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the isolation of a resumed run."""
        self.isolated = state_dict.get("isolated")
        self.report = dict(state_dict.get("report") or {})
        self._isolated_set = torch.tensor(self.isolated, dtype=torch.long) if self.isolated is not None else None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Move a restored isolation set to the module's device."""
        if self._isolated_set is not None:
            self._isolated_set = self._isolated_set.to(pl_module.device)


class ExcludeSamples(Callback):
    """Train on ``D_train`` without the given sample ids (each batch's loss is the mean over its kept samples).

    Args:
        exclude: ``D_train`` indices (``batch["index"]``) that take no loss.
    """

    def __init__(self, exclude: list[int] | None = None) -> None:
        self.exclude = sorted({int(i) for i in (exclude or [])})
        self._set = torch.tensor(self.exclude, dtype=torch.long)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Take the module's ``loss_override``."""
        self._set = self._set.to(pl_module.device)
        _claim_override(self, pl_module, self.loss)

    def loss(self, batch: dict[str, Tensor], ce: Tensor) -> Tensor:
        """Mean CE over the batch's samples that are not excluded."""
        return B.excluded_mean(ce, ~torch.isin(batch["index"].to(self._set.device), self._set))

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Release the ``loss_override``."""
        pl_module.loss_override = None


class CROWCallback(Callback):
    """CROW's regulariser: ``α·L_cons`` of the input embeddings perturbed by ``ε·sign(∇_E L_cons)`` (FGSM).

    ``L_cons`` is the mean over consecutive Hugging Face hidden states (embeddings and every block's output) of
    ``1 − cos(h_l, h_{l+1})`` over the non-padding tokens (:func:`zoo.repguard.baselines.layer_consistency`). Added
    to the module's task loss through ``extra_loss_terms``; CROW runs it while fine-tuning on the trusted clean set.

    Args:
        alpha: weight ``α`` of the consistency term (ours: 5.5; the paper tunes it per task).
        epsilon: FGSM size ``ε`` on the input embeddings (ours: 0.1).
    """

    def __init__(self, alpha: float = 5.5, epsilon: float = 0.1) -> None:
        checks.non_negative(checks.callback(self, "alpha"), alpha)
        checks.non_negative(checks.callback(self, "epsilon"), epsilon)
        self.alpha, self.epsilon = alpha, epsilon

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Register the term."""
        pl_module.extra_loss_terms["crow"] = self._term

    def _term(self, module: LightningModule, batch: dict[str, Tensor], out: dict[str, Tensor]) -> Tensor:
        adv, _ = B.crow_consistency_loss(module.model.lm, batch["input_ids"], batch["attention_mask"], self.epsilon)
        return self.alpha * adv

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Remove the term."""
        pl_module.extra_loss_terms.pop("crow", None)


class DefenseComparison(BackdoorEvaluation):
    """:class:`BackdoorEvaluation` plus the runner's defenses in the same run (``zoo.repguard.defenses_runner``).

    After fit: the trained model and ``baselines`` as in :class:`BackdoorEvaluation`, then each of ``defenses`` (a
    subset of ``abl``, ``spectral``, ``crow``, ``onion_clean``), merged into ``results`` and ``backdoor_eval.json``.

    Args:
        defenses: the runner's defenses to run after fit.
        abl: :class:`ABLCallback` arguments of the ``abl`` arm (it trains a fresh model from scratch).
        spectral: ``eps`` (assumed poison fraction, 0.05), ``factor`` (1.5), ``layer`` (hidden state at ``[SEP]``,
            -1: the last) of the ``spectral`` arm.
        crow: ``alpha``, ``epsilon`` of the ``crow`` arm (fine-tuned like ``clean_finetune``).
        **kwargs: :class:`BackdoorEvaluation` arguments.
    """

    def __init__(
        self,
        defenses: list[str] | None = None,
        abl: dict[str, Any] | None = None,
        spectral: dict[str, Any] | None = None,
        crow: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        from zoo.repguard.defenses_runner import RUNNER_DEFENSES, DefenseOptions

        super().__init__(**kwargs)
        self.defenses = list(defenses) if defenses is not None else []
        if [d for d in self.defenses if d not in RUNNER_DEFENSES]:
            checks.fail(checks.callback(self, "defenses"), self.defenses, f"a subset of {list(RUNNER_DEFENSES)}")
        self.options = DefenseOptions.build(self, abl or {}, spectral or {}, crow or {})

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """``BackdoorEvaluation``'s evaluation, then the runner's defenses (rank 0)."""
        super().on_fit_end(trainer, pl_module)
        if trainer.is_global_zero and self.defenses:
            self.run_defenses(trainer, pl_module, self.defenses)

    def run_defenses(
        self, trainer: Trainer, pl_module: LightningModule, defenses: list[str], folder: str | None = None
    ) -> dict[str, Any]:
        """Run ``defenses`` on the trained module; merge them into ``results`` and ``backdoor_eval.json``."""
        import json
        from pathlib import Path

        from zoo.repguard.defenses_runner import run_defenses

        epochs, quick = int(trainer.max_epochs or 1), bool(trainer.fast_dev_run)
        extra = run_defenses(
            pl_module, trainer.datamodule, defenses, self.options, max_epochs=epochs, fast_dev_run=quick
        )
        self.results = {**self.results, **extra}
        flat = {f"eval/{arm}/{k}": float(v) for arm, r in extra.items() for k, v in r.items()
                if isinstance(v, int | float)}  # fmt: skip
        for logger in trainer.loggers:
            logger.log_metrics(flat, step=trainer.global_step)
        out = Path(folder or run_dir(trainer))
        out.mkdir(parents=True, exist_ok=True)
        (out / "backdoor_eval.json").write_text(json.dumps(self.results, indent=2, default=float), encoding="utf-8")
        for arm, r in extra.items():
            rank_zero_info(f"backdoor eval [{arm}]: ASR w/t {r['asr_wt_mean']:.1f}% (per kind {r['asr_wt']}), "
                           f"ASR w/o {r['asr_wo']:.1f}%, CA {r['ca']:.1f}%, CA_avg {r['ca_avg']:.1f}%")  # fmt: skip
        return extra
