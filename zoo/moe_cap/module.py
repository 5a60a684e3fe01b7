"""MoE-CAP: Benchmarking Cost, Accuracy and Performance of Sparse Mixture-of-Experts Systems (NeurIPS 2025 D&B).

``MoEEvalModule`` serves a Hugging Face MoE causal LM for ``validate``/``test``/``predict``: each evaluation step calls
only ``generate(max_new_tokens=N, min_new_tokens=N)`` (one prefill and N − 1 decode forwards per batch, no
teacher-forced loss forward), extracts the answer and scores exact match and F1 against the gold. The model is one
of the card's tiny random-init families (Mixtral, Qwen2-MoE with shared experts, Qwen3-MoE with a dense layer,
DeepSeek-V3 with MLA, OLMoE, a dense Llama) or any local Hugging Face folder (``pretrained=<dir>``). The measurement
itself is ``callbacks.moe_cap.MoECAPCallback``; ``zoo fit`` trains the LM loss on the answer tokens, so a tiny model
can earn a non-zero accuracy axis.

Example:
    >>> from zoo.moe_cap.module import MoEEvalModule
    >>> module = MoEEvalModule(family="olmoe", max_new_tokens=4)
    >>> module.model.hf.config.num_experts
    16
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from zoo.core import checks
from zoo.core.messages import say
from zoo.core.module import ZooModule
from zoo.moe_cap.answers import em_f1, extract_prediction
from zoo.moe_cap.model import FAMILIES, build_model, load_folder, tiny_config

Family = Literal["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "olmoe", "llama"]
_PREFIX = {"validate": "val", "test": "test", "predict": "predict"}


class MoELM(nn.Module):
    """The served causal LM (``hf``) and its tokenizer; ``load_hf`` swaps in a local folder's model and tokenizer."""

    def __init__(self, hf: nn.Module, tokenizer: Any) -> None:
        super().__init__()
        # Train mode, so Lightning's own eval/train switching holds (``build_model`` hands over eval mode).
        self.hf, self.tokenizer = hf.train(), tokenizer

    def load_hf(self, path: Path) -> None:
        """Replace the model and tokenizer by a local Hugging Face folder's (the ``pretrained=<dir>`` route)."""
        hf, self.tokenizer = load_folder(str(path))
        self.hf = hf.train()


class MoEEvalModule(ZooModule):
    """Generation-only evaluation of a (MoE) causal LM with exact-match accuracy.

    Args:
        family: the tiny random-init family (ignored when ``pretrained`` is a Hugging Face folder).
        hidden_size: d of the tiny model.
        num_layers: decoder layers of the tiny model (None: the card's 2, 3 for Qwen3-MoE).
        q_lora_rank: DeepSeek-V3's query rank (None: the full q projection).
        init_seed: seed of the random init.
        max_new_tokens: generated tokens per prompt.
        min_new_tokens: tokens generated before eos is allowed; None = ``max_new_tokens`` (the card: exactly 1
            prefill + N − 1 decode forwards per batch). A trained model needs a lower value to stop after its answer
            (the output is cut at the first eos before the answer is extracted).
        do_sample: sample (seeded) instead of greedy decoding.
        temperature: sampling temperature.
        gen_seed: seed of the sampling; batch ``i`` samples from ``gen_seed + i``.
        fallback_last_number: take the last number of the output when it has no ``####``/"answer is".
        lr: learning rate for ``zoo fit`` (LM loss on the answer tokens).
        weight_decay: weight decay for ``zoo fit``.
        pretrained: a local Hugging Face folder (own tokenizer, left padding) or a zoo checkpoint.
    """

    monitor: ClassVar[str] = "val/em"
    mode: ClassVar[Literal["min", "max"]] = "max"
    name: ClassVar[str] = "moe_cap"

    def __init__(self, family: Family = "mixtral", hidden_size: int = 64, num_layers: int | None = None,
                 q_lora_rank: int | None = 24, init_seed: int = 0, max_new_tokens: int = 8,
                 min_new_tokens: int | None = None, do_sample: bool = False,
                 temperature: float = 1.0, gen_seed: int = 0, fallback_last_number: bool = True, lr: float = 1e-3,
                 weight_decay: float = 0.0, pretrained: str | None = None) -> None:  # fmt: skip
        checks.choice(checks.model("family"), family, FAMILIES)
        checks.integer(checks.model("hidden_size"), hidden_size)
        if hidden_size % 8 and family != "deepseek_v3":  # 4 heads of an even rotary size (MLA sets its own sizes)
            checks.fail(checks.model("hidden_size"), hidden_size, f"a multiple of 8 for family={family} (4 heads "
                        f"of an even rotary size)")  # fmt: skip
        checks.optional_integer(checks.model("num_layers"), num_layers)
        checks.optional_integer(checks.model("q_lora_rank"), q_lora_rank)
        checks.integer(checks.model("max_new_tokens"), max_new_tokens)
        checks.optional_integer(checks.model("min_new_tokens"), min_new_tokens, 0, max_new_tokens)
        if do_sample:
            checks.positive(checks.model("temperature"), temperature)
        self.family, self.hidden_size, self.num_layers, self.q_lora_rank = family, hidden_size, num_layers, q_lora_rank
        self.init_seed, self.max_new_tokens, self.do_sample = init_seed, max_new_tokens, do_sample
        self.min_new_tokens = max_new_tokens if min_new_tokens is None else min_new_tokens
        self.temperature, self.gen_seed, self.fallback_last_number = temperature, gen_seed, fallback_last_number
        self._outputs: dict[str, list[tuple[str, str]]] = {}
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

    def configure_models(self) -> None:
        """The tiny random-init model of ``family`` with the character tokenizer."""
        from zoo.moe_cap.tokenizer import char_tokenizer

        tok = char_tokenizer()
        config = tiny_config(self.family, vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                             bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                             hidden_size=self.hidden_size, num_layers=self.num_layers,
                             q_lora_rank=self.q_lora_rank)  # fmt: skip
        self.model = MoELM(build_model(config, seed=self.init_seed), tok)

    def setup(self, stage: str) -> None:
        """Announce the items whose characters the tokenizer can only read as ``<unk>`` (see :func:`unknown_chars`)."""
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        evaluated, trained = getattr(dm, "eval_items", None) or [], getattr(dm, "train_items", None) or []
        texts = [] if stage == "fit" and evaluated is trained else [item["prompt"] for item in evaluated]
        if stage == "fit":  # training also reads the golds
            texts += [item["prompt"] + " " + item["gold"] for item in trained]
        found = unknown_chars(self.model.tokenizer, texts)
        if found:
            count, first, chars = found
            origin = getattr(dm, "path", None) or "the data"
            say(f"{origin}: {count} of {len(texts)} texts have characters the tokenizer reads as <unk> (first: "
                f"{first!r}: {chars}); each is one <unk> token, so lengths and the measurement stand but accuracy "
                f"does not; --model.init_args.pretrained=<local Hugging Face folder> brings its own "
                f"tokenizer")  # fmt: skip

    # -- generation -----------------------------------------------------------------------------------------------
    def generate(self, prompts: list[str], seed: int = 0) -> list[str]:
        """Generated continuations, cut at the first eos and decoded without special tokens."""
        tok, hf = self.model.tokenizer, self.model.hf
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        ids, mask = enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)
        sampling = {"do_sample": True, "temperature": self.temperature, "top_k": 0, "top_p": 1.0} if self.do_sample \
            else {"do_sample": False}  # fmt: skip
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(seed)
            out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=self.max_new_tokens,
                              min_new_tokens=self.min_new_tokens, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, **sampling)  # fmt: skip
        rows = []
        for row in out[:, ids.shape[1] :].tolist():
            rows.append(row[: row.index(tok.eos_token_id)] if tok.eos_token_id in row else row)
        return tok.batch_decode(rows, skip_special_tokens=True)

    def _eval_step(self, batch: dict[str, Any], batch_idx: int, stage: str) -> list[dict[str, Any]]:
        texts = self.generate(batch["prompt"], seed=self.gen_seed + batch_idx)
        preds = [extract_prediction(t, fallback_last_number=self.fallback_last_number) for t in texts]
        self._outputs.setdefault(stage, []).extend(zip(preds, batch["gold"], strict=True))
        return [{"prompt": p, "output": t, "prediction": q, "gold": g}
                for p, t, q, g in zip(batch["prompt"], texts, preds, batch["gold"], strict=True)]  # fmt: skip

    def moecap_accuracy(self, stage: str) -> dict[str, float] | None:
        """``{"em", "f1", "n_items"}`` of the stage so far (read by ``MoECAPCallback``)."""
        pairs = self._outputs.get(stage)
        if not pairs:
            return None
        em, f1 = em_f1([p for p, _ in pairs], [g for _, g in pairs])
        return {"em": em, "f1": f1, "n_items": float(len(pairs))}

    def _log_accuracy(self, stage: str) -> None:
        if (acc := self.moecap_accuracy(stage)) is not None:
            self.log(f"{_PREFIX[stage]}/em", acc["em"])
            self.log(f"{_PREFIX[stage]}/f1", acc["f1"])

    def on_validation_epoch_start(self) -> None:  # noqa: D102
        self._outputs["validate"] = []

    def on_test_epoch_start(self) -> None:  # noqa: D102
        self._outputs["test"] = []

    def on_predict_epoch_start(self) -> None:  # noqa: D102
        self._outputs["predict"] = []

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:  # noqa: D102
        self._eval_step(batch, batch_idx, "validate")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:  # noqa: D102
        self._eval_step(batch, batch_idx, "test")

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> list[dict[str, Any]]:  # noqa: D102
        return self._eval_step(batch, batch_idx, "predict")

    def on_validation_epoch_end(self) -> None:  # noqa: D102
        self._log_accuracy("validate")

    def on_test_epoch_end(self) -> None:  # noqa: D102
        self._log_accuracy("test")

    # -- training (``zoo fit``): LM loss on the answer tokens ----------------------------------------------------------
    def compute_loss(self, batch: dict[str, Any]) -> dict[str, Tensor]:
        """Cross-entropy of ``" " + gold + eos`` given the prompt (prompt and pad positions masked)."""
        tok = self.model.tokenizer
        prompts = tok(batch["prompt"], add_special_tokens=False)["input_ids"]
        answers = tok([" " + g for g in batch["gold"]], add_special_tokens=False)["input_ids"]
        seqs = [p + a + [tok.eos_token_id] for p, a in zip(prompts, answers, strict=True)]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for row, (seq, prompt) in enumerate(zip(seqs, prompts, strict=True)):
            start = width - len(seq)  # left padding, as in generation
            ids[row, start:] = torch.tensor(seq)
            mask[row, start:] = 1
            labels[row, start + len(prompt) :] = torch.tensor(seq[len(prompt) :])
        out = self.model.hf(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                            labels=labels.to(self.device))  # fmt: skip
        return {"loss": out.loss}

    def batch_size_of(self, batch: Any) -> int:  # noqa: D102
        return len(batch["prompt"])


def unknown_chars(tokenizer: Any, texts: list[str]) -> tuple[int, str, list[str]] | None:
    """``(texts with an <unk> token, the first such text (cut to 60 characters), its unknown characters)`` or None.

    A tokenizer without an unknown token (byte-level BPE) reads everything; the tiny models' character tokenizer
    (:mod:`zoo.moe_cap.tokenizer`) reads only its 20 characters.
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or not texts:
        return None
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    bad = [i for i, row in enumerate(ids) if unk in row]
    if not bad:
        return None
    text = texts[bad[0]]
    chars = sorted({ch for ch in text if unk in tokenizer(ch, add_special_tokens=False)["input_ids"]})
    return len(bad), text[:60], chars[:12] + (["..."] if len(chars) > 12 else [])
