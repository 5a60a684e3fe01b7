"""Baselines of the RepGuard card: DeCE loss, fake quantization, MLP unit pruning and the ONION input filter.

Pure torch + transformers types; no lightning. The victim is a Hugging Face causal LM (GPT-2 with ``Conv1D`` layers,
whose weight is ``[in, out]``, or Llama/SmolLM2 with ``nn.Linear``, weight ``[out, in]``) called as
``model(input_ids=..., attention_mask=...).logits`` on right-padded batches (pad id 0). The clean fine-tune baseline
needs no helper (a Trainer runs it).

Conventions:
    * Token alignment: ``labels`` are aligned with ``input_ids`` (Hugging Face style), so the loss at position ``t``
      uses ``logits[t - 1]``; ``shift_for_lm`` does that shift before ``dece_loss``.
    * Hyper-parameter selection (prune rate, ONION threshold) only calls a caller-supplied clean-data evaluator: the
      card forbids reading triggered data or test ASR, and the evaluator is the caller's responsibility.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from zoo.core.lm import pad_batch

#: Lower clamp of the predicted probabilities in DeCE (public DeCE code).
DECE_CLAMP = 1e-7
#: Default prune-rate grid of the card ({0.1, ..., 0.5}).
PRUNE_RATES = (0.1, 0.2, 0.3, 0.4, 0.5)


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode (no dropout) for the block and restore its previous mode after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


# ----------------------------------------------------------------------------------------------------------- DeCE


def shift_for_lm(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Align HF-style labels with the logits that predict them: ``(logits[:, :-1], labels[:, 1:])``.

    The results are views (no copy of the ``[B, T, V]`` logits); ``dece_loss`` accepts any leading shape, and
    ``F.cross_entropy`` takes them after ``.flatten(0, -2)`` / ``.flatten()``.

    Args:
        logits: ``[B, T, V]`` next-token logits.
        labels: ``[B, T]`` targets aligned with ``input_ids`` (``-100`` where no loss is taken).

    Returns:
        ``([B, T - 1, V], [B, T - 1])``.
    """
    return logits[:, :-1], labels[:, 1:]


def _dece_rows(z: Tensor, y: Tensor, alpha: float, epsilon: float) -> Tensor:
    """Per-row DeCE loss of ``[N, V]`` logits and ``[N]`` targets without building the ``[N, V]`` smoothed target.

    With ``off = ε/(V−1)`` the smoothed target is ``ỹ = off + (1 − ε − off)·onehot(y)``, so
    ``−Σ_v ỹ_v log q_v = −off·Σ_{v≠y} log q̃_v − (1 − ε)·log q_y`` where ``q̃_v = α·p_v + (1 − α)·off`` is the
    off-target form and ``q_y = α·p_y + (1 − α)(1 − ε)``. Only ``softmax``, its clamp and ``log q̃`` are ``[N, V]``.
    """
    v = z.shape[-1]
    off = epsilon / (v - 1) if v > 1 else 0.0
    p = torch.softmax(z.float(), dim=-1).clamp(DECE_CLAMP, 1.0)
    log_q_off = torch.log((p * alpha).add_((1.0 - alpha) * off))  # one [N, V] buffer for α·p + (1 − α)·off
    p_y = p.gather(-1, y[:, None]).squeeze(-1)
    log_q_y = torch.log(alpha * p_y + (1.0 - alpha) * (1.0 - epsilon))
    rest = log_q_off.sum(-1) - log_q_off.gather(-1, y[:, None]).squeeze(-1)  # Σ_{v≠y} log q̃_v
    loss = -(1.0 - epsilon) * log_q_y
    if off > 0.0:
        loss = loss - off * rest
    return loss


def dece_loss(
    logits: Tensor,
    labels: Tensor,
    epoch: int,
    alpha_base: float = 0.99,
    epsilon: float = 0.05,
    ignore_index: int = -100,
    reduction: Literal["mean", "none"] = "mean",
    max_chunk_elements: int = 2**24,
) -> Tensor:
    """DeCE (deceptive cross-entropy) loss on aligned logits and labels (card, Baselines).

    ``ỹ`` = one-hot target smoothed with ``ε`` (``1 − ε`` on the target, ``ε/(V−1)`` on each other token),
    ``α = α_base^epoch`` (``epoch`` 1-indexed), ``q = α·clamp(softmax(z), 1e-7, 1) + (1 − α)·ỹ`` and
    ``loss = −Σ_v ỹ_v log q_v``, averaged over the non-ignored tokens.

    Properties (tested):
        * ``α = 1, ε = 0`` is plain CE as long as no probability is below the clamp.
        * Since ``q ≥ (1 − α)·ỹ`` elementwise, each token's loss is finite and at most ``−log(1 − α) + H(ỹ)``
          (``H`` the entropy of ``ỹ``). For ``ε = 0`` this is the card's ``−log((1 − α)(1 − ε))``; for ``ε > 0`` the
          card's bound can be exceeded (by ``ε·log((1 − ε)(V − 1)/ε)`` at most) when ``p`` sits on one wrong token.
        * Gradients: w.r.t. the probability ``p_y`` of the target, CE's is ``−1/p_y`` (unbounded as ``p_y → 0``) and
          DeCE's is ``−α(1−ε)/q_y``, bounded by ``α/(1 − α)``. W.r.t. the logits, CE's gradient norm is bounded anyway
          (``→ ≈ 1`` for a hopeless target); DeCE's instead vanishes like ``α·p_y/(1 − α)`` (with ``ε = 0``), so a
          poisoned label the model finds implausible stops pulling the weights: that is DeCE's robustness mechanism.

    Memory: the ignored rows are dropped first (response-only labels keep few rows) and the rest is processed in row
    chunks of at most ``max_chunk_elements`` logits under activation checkpointing, so besides the input and its
    gradient only one chunk's ``[n, V]`` intermediates exist at a time (SmolLM2: V = 49k).

    Args:
        logits: ``[..., V]`` logits already aligned with ``labels`` (see ``shift_for_lm``).
        labels: ``[...]`` target ids, ``ignore_index`` where no loss is taken.
        epoch: current epoch, 1-indexed (``α = alpha_base ** epoch``).
        alpha_base: ``α_base`` (card 0.99; the DeCE class default is 0.985).
        epsilon: label smoothing ``ε``.
        ignore_index: label value that takes no loss.
        reduction: ``"mean"`` over non-ignored tokens (0 with a zero gradient when there is none) or ``"none"``:
            the per-token loss of the non-ignored tokens, in row-major order of ``labels``.
        max_chunk_elements: logits per chunk of the chunked path.

    Returns:
        A scalar (``mean``) or a 1-d tensor (``none``), float32.

    Raises:
        ValueError: a shape mismatch, ``epoch < 1`` or ``ε``/``α_base`` outside their ranges.
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"dece_loss: logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not align")
    if epoch < 1:
        raise ValueError(f"dece_loss: epoch={epoch}; epochs are 1-indexed")
    if not 0.0 <= epsilon < 1.0 or not 0.0 < alpha_base <= 1.0:
        raise ValueError(f"dece_loss: epsilon={epsilon} must be in [0, 1) and alpha_base={alpha_base} in (0, 1]")
    alpha = alpha_base**epoch
    valid = labels != ignore_index
    z = logits[valid]  # [N, V] non-ignored rows only
    y = labels[valid].long()
    if z.shape[0] == 0:
        zero = logits.float().sum() * 0.0
        return zero if reduction == "mean" else zero.reshape(1)[:0]
    rows = max(1, max_chunk_elements // z.shape[-1])
    if z.shape[0] <= rows:
        per_token = _dece_rows(z, y, alpha, epsilon)
    else:  # one SplitBackward node gathers the chunk gradients: no per-chunk [N, V] zero tensors
        parts = [
            checkpoint(_dece_rows, zc, yc, alpha, epsilon, use_reentrant=False)
            for zc, yc in zip(torch.split(z, rows), torch.split(y, rows), strict=True)
        ]
        per_token = torch.cat(parts)
    return per_token.mean() if reduction == "mean" else per_token


# --------------------------------------------------------------------------------------------- fake quantization


def fake_quantize_tensor(w: Tensor, bits: int, channel_dim: int) -> tuple[Tensor, Tensor]:
    """Symmetric per-channel integer round trip of ``w``.

    ``scale = max|w| over every dim but channel_dim / (2^(bits−1) − 1)``,
    ``q = clamp(round(w / scale), −(2^(bits−1) − 1), 2^(bits−1) − 1)`` and ``ŵ = q·scale``. The arithmetic runs in
    float64, which makes the round trip bit-idempotent: the channel's largest element is reproduced exactly, so a
    second pass finds the same scale. An all-zero channel gets scale 1 and stays 0.

    Args:
        w: weight tensor.
        bits: integer width (``>= 2``); 8 gives levels ``−127..127``.
        channel_dim: the output-channel dimension (0 for ``nn.Linear``'s ``[out, in]``, 1 for ``Conv1D``'s
            ``[in, out]``).

    Returns:
        ``(ŵ, scale)``: ``ŵ`` in ``w``'s dtype and shape, ``scale`` in ``w``'s dtype with ``keepdim`` shape
        (broadcastable against ``w``).

    Raises:
        ValueError: ``bits < 2``.
    """
    if bits < 2:
        raise ValueError(f"fake_quantize_tensor: bits={bits}; expected >= 2 (symmetric levels need a sign)")
    qmax = 2 ** (bits - 1) - 1
    channel_dim = channel_dim % w.ndim
    reduce = [d for d in range(w.ndim) if d != channel_dim]
    w64 = w.detach().to(torch.float64)
    amax = w64.abs().amax(dim=reduce, keepdim=True) if reduce else w64.abs()
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    q = torch.clamp(torch.round(w64 / scale), -qmax, qmax)
    return (q * scale).to(w.dtype), scale.to(w.dtype)


def _embedding_weights(model: nn.Module) -> set[int]:
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}


def _quantizable(model: nn.Module) -> Iterator[tuple[str, nn.Module, int, str]]:
    """``(name, module, channel_dim, kind)`` of every Linear/Conv1D whose weight is not an embedding's."""
    from transformers.pytorch_utils import Conv1D

    embeddings = _embedding_weights(model)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            channel_dim, kind = 0, "linear"
        elif isinstance(module, Conv1D):
            channel_dim, kind = 1, "conv1d"
        else:
            continue
        if id(module.weight) in embeddings:  # tied LM head (GPT-2's lm_head is wte)
            continue
        yield name, module, channel_dim, kind


def fake_quantize_(model: nn.Module, bits: int = 8, skip: Sequence[str] = ()) -> dict[str, str]:
    """Fake-quantize every ``nn.Linear`` and ``Conv1D`` weight of ``model`` in place (card, Baselines).

    Symmetric per-output-channel round trip (``fake_quantize_tensor``): rows of ``nn.Linear`` weights, columns of
    GPT-2 ``Conv1D`` weights. Embeddings are untouched, and so is any layer whose weight is an embedding's tensor
    (the tied LM head). Biases stay in float. An untied LM head is an ``nn.Linear`` and is quantized unless named in
    ``skip``. No further training (the stand-in for the unnamed "Quantization (2019)" baseline).

    Args:
        model: the network (modified in place).
        bits: integer width, 8 (int8) or 4 (int4) in the card.
        skip: module names to leave in float.

    Returns:
        ``{module name: "linear" | "conv1d"}`` of the quantized modules.
    """
    done: dict[str, str] = {}
    with torch.no_grad():
        for name, module, channel_dim, kind in list(_quantizable(model)):
            if name in skip:
                continue
            w_hat, _ = fake_quantize_tensor(module.weight, bits, channel_dim)
            module.weight.copy_(w_hat)
            done[name] = kind
    return done


# ------------------------------------------------------------------------------------------------- MLP pruning


@dataclass
class _MLPUnits:
    """The weights that make up the hidden units of one MLP block.

    ``inputs`` are ``(weight, unit_dim)`` pairs whose slice ``unit_dim = j`` feeds unit ``j`` (GPT-2 ``c_fc``
    columns; Llama ``gate``/``up`` rows), ``input_biases`` their biases, ``output``/``output_dim`` the weight whose
    slice ``j`` carries unit ``j`` out (GPT-2 ``c_proj`` rows; Llama ``down`` columns); ``output_module`` is hooked
    for the unit activations (its input).
    """

    inputs: list[tuple[Tensor, int]]
    input_biases: list[Tensor]
    output: Tensor
    output_dim: int
    output_module: nn.Module
    num_units: int = field(init=False)

    def __post_init__(self) -> None:
        self.num_units = self.output.shape[self.output_dim]


def _mlp_blocks(model: nn.Module) -> list[_MLPUnits]:
    """The MLP units of every block of a GPT-2 (``transformer.h[i].mlp``) or Llama (``model.layers[i].mlp``) LM."""
    transformer = getattr(model, "transformer", None)
    if transformer is not None and hasattr(transformer, "h"):
        blocks = []
        for block in transformer.h:
            fc, proj = block.mlp.c_fc, block.mlp.c_proj  # Conv1D: [d, 4d] and [4d, d]
            biases = [fc.bias] if fc.bias is not None else []
            blocks.append(_MLPUnits([(fc.weight, 1)], biases, proj.weight, 0, proj))
        return blocks
    base = getattr(model, "model", None)
    if base is not None and hasattr(base, "layers"):
        blocks = []
        for layer in base.layers:
            mlp = layer.mlp
            ins = [mlp.gate_proj, mlp.up_proj]  # nn.Linear [I, d]
            biases = [m.bias for m in ins if m.bias is not None]
            blocks.append(_MLPUnits([(m.weight, 0) for m in ins], biases, mlp.down_proj.weight, 1, mlp.down_proj))
        return blocks
    raise TypeError(
        f"{type(model).__name__}: expected a GPT-2 (transformer.h[i].mlp.c_fc/c_proj) or Llama "
        "(model.layers[i].mlp.gate_proj/up_proj/down_proj) causal LM"
    )


def _unit_norm(w: Tensor, unit_dim: int, p: float) -> Tensor:
    """Per-unit ``p``-norm of ``w`` over the dims other than ``unit_dim``."""
    other = [d for d in range(w.ndim) if d != unit_dim]
    return w.detach().float().norm(p=p, dim=other)


def _clean_activation_norms(
    model: nn.Module, blocks: list[_MLPUnits], clean_batches: Iterable[Mapping[str, Tensor]]
) -> list[Tensor]:
    """``‖X_j‖₂`` of every unit: the L2 norm of the input of ``c_proj``/``down_proj`` over all non-pad tokens."""
    sq = [torch.zeros(b.num_units, device=b.output.device) for b in blocks]
    current: dict[str, Tensor] = {}

    def make_hook(i: int) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0].detach().float()  # [B, T, units]
            keep = current["mask"].to(x.device, torch.bool)
            sq[i] += (x[keep] ** 2).sum(0)

        return hook

    handles = [b.output_module.register_forward_pre_hook(make_hook(i)) for i, b in enumerate(blocks)]
    device = _device(model)
    seen = 0
    try:
        with _eval_mode(model), torch.no_grad():
            for batch in clean_batches:
                ids = batch["input_ids"].to(device)
                mask = batch["attention_mask"].to(device)
                current["mask"] = mask.bool()
                model(input_ids=ids, attention_mask=mask, use_cache=False)
                seen += 1
    finally:
        for h in handles:
            h.remove()
    if seen == 0:
        raise ValueError("mlp_unit_scores(method='wanda'): clean_batches is empty")
    return [s.sqrt() for s in sq]


def mlp_unit_scores(
    model: nn.Module,
    method: Literal["magnitude", "wanda"],
    clean_batches: Iterable[Mapping[str, Tensor]] | None = None,
) -> dict[int, Tensor]:
    """Importance score of every MLP hidden unit, per layer (card, Baselines: Pruning).

    * ``magnitude``: ``‖W_in(j)‖₂·‖W_out(j)‖₂``. GPT-2: ``‖c_fc.weight[:, j]‖·‖c_proj.weight[j, :]‖``. Llama:
      ``W_in(j)`` is the concatenation of ``gate_proj.weight[j]`` and ``up_proj.weight[j]`` (both feed unit ``j``;
      our choice), ``W_out(j) = down_proj.weight[:, j]``. Biases are not part of the score.
    * ``wanda``: ``Σ_i |W_out(j)_i|·‖X_j‖₂ = ‖W_out(j)‖₁·‖X_j‖₂`` where ``X_j`` is unit ``j``'s activation (the
      input of ``c_proj``/``down_proj``) over every non-pad token of ``clean_batches`` (Wanda's ``|W|·‖X‖``
      aggregated over the unit's output weights).

    Args:
        model: GPT-2 or Llama-family Hugging Face causal LM.
        method: ``"magnitude"`` or ``"wanda"``.
        clean_batches: for ``wanda``: an iterable of dicts with ``input_ids`` and ``attention_mask`` (trusted clean
            data only).

    Returns:
        ``{layer index: [units] float32 scores}``.

    Raises:
        ValueError: ``wanda`` without clean batches, or an unknown method.
    """
    blocks = _mlp_blocks(model)
    match method:
        case "magnitude":
            scores = {}
            for i, b in enumerate(blocks):
                w_in = torch.stack([_unit_norm(w, d, 2.0) for w, d in b.inputs]).norm(dim=0)
                scores[i] = w_in * _unit_norm(b.output, b.output_dim, 2.0)
            return scores
        case "wanda":
            if clean_batches is None:
                raise ValueError("mlp_unit_scores(method='wanda') needs clean_batches (trusted clean data)")
            norms = _clean_activation_norms(model, blocks, clean_batches)
            return {i: _unit_norm(b.output, b.output_dim, 1.0) * norms[i] for i, b in enumerate(blocks)}
        case _:
            raise ValueError(f"mlp_unit_scores: method={method!r}; expected 'magnitude' or 'wanda'")


def _slice_of(w: Tensor, dim: int, units: Tensor) -> tuple[slice | Tensor, ...]:
    return tuple(units if d == dim else slice(None) for d in range(w.ndim))


def prune_mlp_units_(model: nn.Module, scores: Mapping[int, Tensor], rate: float) -> int:
    """Zero the lowest-scoring fraction ``rate`` of the MLP units of every layer, in place.

    Per layer ``round(rate·units)`` units are pruned (ties broken by index). A pruned unit has its input weights
    (GPT-2 ``c_fc`` column, Llama ``gate``/``up`` rows), their bias entries and its output weights (``c_proj`` row,
    ``down_proj`` column) set to 0, so it contributes nothing to the output. The zeros are not re-applied during any
    later training (this baseline does not train).

    Args:
        model: GPT-2 or Llama-family causal LM (modified in place).
        scores: ``mlp_unit_scores`` output.
        rate: fraction in ``[0, 1]``.

    Returns:
        The number of pruned units over all layers.

    Raises:
        ValueError: ``rate`` outside ``[0, 1]`` or a score vector of the wrong size.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"prune_mlp_units_: rate={rate}; expected a fraction in [0, 1]")
    total = 0
    with torch.no_grad():
        for i, b in enumerate(_mlp_blocks(model)):
            if i not in scores:
                continue
            s = scores[i]
            if s.numel() != b.num_units:
                raise ValueError(f"prune_mlp_units_: layer {i} has {b.num_units} units but {s.numel()} scores")
            k = int(round(rate * b.num_units))
            if k == 0:
                continue
            units = torch.argsort(s.detach().float().cpu(), stable=True)[:k]
            for w, d in b.inputs:
                w[_slice_of(w, d, units.to(w.device))] = 0.0
            for bias in b.input_biases:
                bias[units.to(bias.device)] = 0.0
            b.output[_slice_of(b.output, b.output_dim, units.to(b.output.device))] = 0.0
            total += k
    return total


@dataclass
class PruneSelection:
    """Outcome of ``select_prune_rate``.

    Attributes:
        rate: the selected rate (0.0 when no candidate keeps the accuracy drop within bounds).
        base_acc: clean accuracy of the unpruned model.
        accs: clean accuracy per candidate rate.
        model: a pruned deep copy at ``rate`` (the unpruned copy when ``rate == 0``).
    """

    rate: float
    base_acc: float
    accs: dict[float, float]
    model: nn.Module


def select_prune_rate(
    model: nn.Module,
    scores: Mapping[int, Tensor],
    evaluate_clean_acc: Callable[[nn.Module], float],
    rates: Sequence[float] = PRUNE_RATES,
    max_drop: float = 2.0,
) -> PruneSelection:
    """The largest prune rate whose clean-validation accuracy drop is at most ``max_drop`` points (card, Pruning).

    Every candidate prunes its own deep copy of ``model``; ``model`` itself is left unchanged. All candidates are
    evaluated (no early stop: the accuracy need not fall monotonically) and the largest qualifying one wins.

    Args:
        model: the (possibly backdoored) model to prune.
        scores: ``mlp_unit_scores`` of ``model``.
        evaluate_clean_acc: ``model -> accuracy in percent`` on clean validation data only (the caller must not
            pass triggered data: the card forbids selecting on ASR).
        rates: candidate fractions.
        max_drop: allowed drop in accuracy points.

    Returns:
        A ``PruneSelection``.
    """
    base_acc = float(evaluate_clean_acc(model))
    accs: dict[float, float] = {}
    best_rate, best_model = 0.0, None
    for rate in sorted(rates):
        candidate = copy.deepcopy(model)
        prune_mlp_units_(candidate, scores, rate)
        accs[rate] = float(evaluate_clean_acc(candidate))
        if base_acc - accs[rate] <= max_drop:
            best_rate, best_model = rate, candidate
    if best_model is None:
        best_model = copy.deepcopy(model)
    return PruneSelection(best_rate, base_acc, accs, best_model)


# ------------------------------------------------------------------------------------------------------- ONION


@torch.no_grad()
def sequence_ppl(model: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Perplexity of every right-padded sequence, padding excluded (no gradient; eval mode for the call).

    Target ``t`` (``t >= 1``) is predicted from ``logits[t − 1]`` and counts iff ``attention_mask[t] == 1``; with
    right padding its whole context is then real tokens, so neither pad targets nor pad contexts enter. The result
    of a sequence does not depend on its batch-mates (OpenBackdoor's batched scorer keeps pad targets in the loss
    and fails this). Positions are the Hugging Face default ``0..T−1``, which are the real positions under right
    padding. A sequence with no target (one token) gets perplexity 1.

    Args:
        model: causal LM.
        input_ids: ``[B, T]`` right-padded ids.
        attention_mask: ``[B, T]`` 1 for tokens, 0 for padding.

    Returns:
        ``[B]`` float32 perplexities ``exp(mean NLL)``.
    """
    device = _device(model)
    ids, mask = input_ids.to(device), attention_mask.to(device)
    with _eval_mode(model):
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()
    targets = ids[:, 1:]
    valid = mask[:, 1:].bool() & mask[:, :-1].bool()
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # [B, T-1]
    nll = (nll * valid).sum(1) / valid.sum(1).clamp_min(1)
    return nll.exp()


def _default_words(prompt: Sequence[int]) -> list[slice]:
    """One word per body token: every position but ``[BOS]`` (first) and ``[SEP]`` (last)."""
    return [slice(i, i + 1) for i in range(1, len(prompt) - 1)]


def _check_words(prompt: Sequence[int], words: Sequence[slice], index: int) -> None:
    for w in words:
        start, stop, step = w.indices(len(prompt))
        if step != 1 or start < 1 or stop > len(prompt) - 1 or start >= stop:
            body = f"[1, {len(prompt) - 1})"
            raise ValueError(f"prompt {index}: word slice {w} is not a non-empty body span inside {body}")


def onion_scores(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    body_slices: Sequence[Sequence[slice]] | None = None,
    batch_size: int = 256,
    pad_id: int = 0,
) -> list[Tensor]:
    """ONION suspicion ``f_i = PPL(prompt) − PPL(prompt without word i)`` of every body word (card, Baselines).

    A word whose removal lowers the perplexity a lot (a rare trigger word) scores high. The prompt and all its
    leave-one-out variants are scored with the padding-invariant ``sequence_ppl``, in batches of ``batch_size`` rows
    that may mix prompts (scores do not depend on batch-mates).

    Args:
        model: the scorer LM (a tiny LM trained on clean prompts, or the victim).
        prompts: token ids per prompt, ``[BOS] body [SEP]``, without padding.
        body_slices: per prompt, the token span of each body word (e.g. several sub-word tokens per word with a real
            tokenizer); ``None``: every token between ``[BOS]`` and ``[SEP]`` is a word.
        batch_size: rows per forward pass.
        pad_id: padding id of the internal batches.

    Returns:
        Per prompt, a float32 tensor ``[n_words]`` of ``f_i`` in body order.

    Raises:
        ValueError: a word span outside the body, or ``body_slices`` of the wrong length.
    """
    words_per = _resolve_words(prompts, body_slices)
    rows: list[list[int]] = []
    for prompt, words in zip(prompts, words_per, strict=True):
        rows.append(list(prompt))
        for w in words:
            rows.append(list(prompt[: w.start]) + list(prompt[w.stop :]))
    chunks = [pad_batch(rows[i : i + batch_size], pad_id) for i in range(0, len(rows), batch_size)]
    ppl = torch.cat([sequence_ppl(model, ids, mask).cpu() for ids, mask in chunks])
    out, at = [], 0
    for words in words_per:
        out.append(ppl[at] - ppl[at + 1 : at + 1 + len(words)])
        at += 1 + len(words)
    return out


def _resolve_words(
    prompts: Sequence[Sequence[int]], body_slices: Sequence[Sequence[slice]] | None
) -> list[list[slice]]:
    if body_slices is not None and len(body_slices) != len(prompts):
        raise ValueError(f"body_slices has {len(body_slices)} entries for {len(prompts)} prompts")
    words_per = []
    for i, prompt in enumerate(prompts):
        words = _default_words(prompt) if body_slices is None else list(body_slices[i])
        _check_words(prompt, words, i)
        words_per.append([slice(*w.indices(len(prompt))[:2]) for w in words])
    return words_per


def onion_filter(
    prompts: Sequence[Sequence[int]],
    scores: Sequence[Tensor],
    threshold: float = 0.0,
    body_slices: Sequence[Sequence[slice]] | None = None,
) -> list[list[int]]:
    """Remove every body word with suspicion ``f_i ≥ threshold`` (card; OpenBackdoor's ONION rule).

    With the default ``t = 0`` (the OpenBackdoor default) every word whose removal does not raise the perplexity is
    removed, which on a clean prompt can remove several ordinary words; ``select_onion_threshold`` picks ``t`` on
    clean validation instead. ``[BOS]`` and ``[SEP]`` are always kept.

    Args:
        prompts: token ids per prompt (as given to ``onion_scores``).
        scores: ``onion_scores`` output.
        threshold: ``t``; ``math.inf`` keeps every word.
        body_slices: the word spans given to ``onion_scores``.

    Returns:
        The filtered prompts.

    Raises:
        ValueError: a score vector whose length is not the prompt's word count.
    """
    words_per = _resolve_words(prompts, body_slices)
    out = []
    for i, (prompt, words, f) in enumerate(zip(prompts, words_per, scores, strict=True)):
        if f.numel() != len(words):
            raise ValueError(f"onion_filter: prompt {i} has {len(words)} words but {f.numel()} scores")
        drop = set()
        for w, score in zip(words, f.tolist(), strict=True):
            if score >= threshold:
                drop.update(range(w.start, w.stop))
        out.append([tok for j, tok in enumerate(prompt) if j not in drop])
    return out


def onion_threshold_candidates(
    clean_scores: Sequence[Tensor], quantiles: Sequence[float] = (0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
) -> list[float]:
    """Candidate thresholds: quantiles of the ``f_i`` of clean validation prompts (sorted, distinct).

    Args:
        clean_scores: ``onion_scores`` of clean validation prompts.
        quantiles: levels in ``[0, 1]``.

    Returns:
        Sorted distinct thresholds.
    """
    flat = torch.cat([s.flatten().float() for s in clean_scores])
    if flat.numel() == 0:
        return []
    values = torch.quantile(flat, torch.tensor(list(quantiles), dtype=flat.dtype))
    return sorted({float(v) for v in values})


def select_onion_threshold(
    evaluate: Callable[[float], float],
    candidates: Sequence[float],
    max_drop: float = 2.0,
) -> tuple[float, dict[float, float]]:
    """The smallest (most aggressive) threshold whose clean accuracy stays within ``max_drop`` points.

    The reference accuracy is ``evaluate(math.inf)`` (no word removed). Lower thresholds remove more words.

    Args:
        evaluate: ``threshold -> clean accuracy in percent`` of the victim on ONION-filtered clean validation prompts
            (clean data only: the caller's responsibility).
        candidates: thresholds to try (e.g. ``onion_threshold_candidates``).
        max_drop: allowed accuracy drop in points.

    Returns:
        ``(threshold, accuracies)``: ``math.inf`` (no filtering) when no candidate qualifies; ``accuracies`` maps each
        evaluated threshold, ``math.inf`` included, to its accuracy.
    """
    accs = {math.inf: float(evaluate(math.inf))}
    for t in sorted(candidates):
        accs[t] = float(evaluate(t))
        if accs[math.inf] - accs[t] <= max_drop:
            return t, accs
    return math.inf, accs


# --------------------------------------------------------------------------------------------------------- ABL
# Anti-backdoor learning (Li et al., NeurIPS 2021; public code bboylyg/ABL), on per-sample response CE.

#: ABL's loss floor γ (public code default 0.5), in nats of per-sample mean response-token CE.
ABL_GAMMA = 0.5
#: ABL's isolation ratio (public code default 0.01).
ABL_ISOLATION_RATIO = 0.01


def abl_lga_loss(ce: Tensor, gamma: float = ABL_GAMMA, granularity: Literal["sample", "batch"] = "sample") -> Tensor:
    """ABL's local gradient ascent (LGA): ``sign(ℓ − γ)·ℓ``, so a loss below the floor ``γ`` is ascended.

    ``sample`` (the paper's Eq. 3, an expectation of the per-example term): ``mean_i sign(ℓ_i − γ)·ℓ_i``.
    ``batch`` (the public code: the sign of the batch-mean loss): ``sign(mean ℓ − γ)·mean ℓ``. The sign is a constant
    in the backward pass (its derivative is 0 almost everywhere), so a sample with ``ℓ_i < γ`` gets the gradient of
    ``−ℓ_i``: its loss is pushed back up to ``γ`` while the others descend.

    Args:
        ce: ``(B,)`` per-sample losses (``response_ce_per_sample``).
        gamma: the floor ``γ``.
        granularity: ``sample`` or ``batch``.

    Returns:
        A scalar.
    """
    if granularity == "sample":
        return (torch.sign(ce.detach() - gamma) * ce).mean()
    if granularity == "batch":
        mean = ce.mean()
        return torch.sign(mean.detach() - gamma) * mean
    raise ValueError(f"abl_lga_loss: granularity={granularity!r}; expected 'sample' or 'batch'")


def abl_isolate(losses: Tensor, ratio: float = ABL_ISOLATION_RATIO) -> Tensor:
    """ABL's backdoor isolation: the indices of the ``floor(ratio·n)`` lowest-loss samples (public code: ``argsort``).

    Ties are broken by index (stable sort). The result is sorted by loss, lowest first.

    Args:
        losses: ``(n,)`` per-sample losses of the whole training set after the isolation epochs.
        ratio: isolation ratio in ``[0, 1]``.

    Returns:
        ``(k,)`` long indices.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"abl_isolate: ratio={ratio}; expected a fraction in [0, 1]")
    k = int(math.floor(ratio * losses.numel() + 1e-9))
    return torch.argsort(losses.detach().float().cpu(), stable=True)[:k]


def excluded_mean(ce: Tensor, keep: Tensor) -> Tensor:
    """Mean per-sample loss over the kept samples of a batch (0 with a zero gradient when none is kept).

    Training on ``D_train`` minus a removed set, batch by batch: a removed sample contributes neither loss nor
    gradient (ABL's training on the non-isolated data, spectral signatures' retraining on the rest).

    Args:
        ce: ``(B,)`` per-sample losses.
        keep: ``(B,)`` bool, ``True`` for a sample that stays.

    Returns:
        A scalar.
    """
    keep = keep.to(ce.device, torch.bool)
    return (ce * keep).sum() / keep.sum().clamp(min=1)


# -------------------------------------------------------------------------------------------- spectral signatures
# Tran, Li, Madry, "Spectral Signatures in Backdoor Attacks" (NeurIPS 2018).


def spectral_scores(reps: Tensor) -> Tensor:
    """Outlier scores of one class: ``τ_i = ((R_i − R̄)·v)²`` with ``v`` the top right singular vector of ``R − R̄``.

    Args:
        reps: ``(n, d)`` representations of the samples of one label class.

    Returns:
        ``(n,)`` float64 scores (the squared projection on the top singular direction).
    """
    r = reps.detach().to(torch.float64)
    centred = r - r.mean(0, keepdim=True)
    if r.shape[0] < 2:
        return torch.zeros(r.shape[0], dtype=torch.float64)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    return (centred @ vh[0]) ** 2


def spectral_remove(reps: Tensor, labels: Tensor, eps: float = 0.05, factor: float = 1.5) -> Tensor:
    """Spectral signatures' filter: per label class, the ``round(factor·eps·n_class)`` highest-score samples.

    ``eps`` is the defender's upper bound on the poisoned fraction; Tran et al. remove ``1.5·ε`` of each class and
    retrain from scratch on the rest.

    Args:
        reps: ``(n, d)`` representations.
        labels: ``(n,)`` class of each sample (here the first response token).
        eps: assumed poisoned fraction.
        factor: removal multiplier (the paper's 1.5).

    Returns:
        Sorted ``(k,)`` long indices of the removed samples.
    """
    if reps.shape[0] != labels.shape[0]:
        raise ValueError(f"spectral_remove: {reps.shape[0]} representations but {labels.shape[0]} labels")
    removed = []
    for y in torch.unique(labels):
        idx = torch.nonzero(labels == y).flatten()
        k = int(round(factor * eps * idx.numel()))
        if k == 0:
            continue
        scores = spectral_scores(reps[idx])
        removed.append(idx[torch.argsort(scores, descending=True, stable=True)[:k]])
    if not removed:
        return torch.zeros(0, dtype=torch.long)
    return torch.sort(torch.cat(removed)).values


# ------------------------------------------------------------------------------------------------------ CROW
# Min et al., "CROW: Eliminating Backdoors from LLMs via Internal Consistency Regularization" (arXiv 2411.12768).


def layer_consistency(hidden_states: Sequence[Tensor], valid: Tensor) -> Tensor:
    """CROW's consistency loss: the mean over consecutive layer pairs of ``1 − cos(h_l, h_{l+1})``, token-averaged.

    ``L_cons = 1/(L) Σ_{l=0}^{L−1} mean_{(b,t) valid} [1 − cos(h_l[b,t], h_{l+1}[b,t])]`` over the ``L + 1`` states
    given (Hugging Face ``hidden_states``: the embeddings and every block's output).

    Args:
        hidden_states: ``L + 1`` tensors ``[B, T, d]``.
        valid: ``[B, T]`` bool, the token positions that count (non-padding).

    Returns:
        A scalar.
    """
    if len(hidden_states) < 2:
        raise ValueError("layer_consistency: needs at least two hidden states")
    v = valid.to(hidden_states[0].device, torch.bool)
    terms = []
    for a, b in zip(hidden_states[:-1], hidden_states[1:], strict=True):
        cos = F.cosine_similarity(a.float(), b.float(), dim=-1, eps=1e-8)  # [B, T]
        terms.append((1.0 - cos)[v].mean())
    return torch.stack(terms).mean()


def crow_consistency_loss(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, epsilon: float = 0.1
) -> tuple[Tensor, Tensor]:
    """CROW's adversarial consistency term: ``L_cons`` on input embeddings perturbed by ``ε·sign(∇_E L_cons)``.

    First ``L_cons`` of the clean forward and its gradient w.r.t. the input embeddings ``E`` (FGSM); then a forward
    with ``E + δ``, ``δ = ε·sign(∇_E L_cons)`` detached, whose ``L_cons`` is returned for training (the adversarial
    direction is the one that most increases the layer-to-layer change).

    Args:
        model: a Hugging Face causal LM (``get_input_embeddings`` and ``inputs_embeds`` supported).
        input_ids: ``[B, T]``.
        attention_mask: ``[B, T]``.
        epsilon: the perturbation size ``ε`` (L∞ per embedding coordinate).

    Returns:
        ``(adversarial L_cons with graph, clean L_cons detached)``.
    """
    valid = attention_mask.bool()
    embeds = model.get_input_embeddings()(input_ids)
    probe = embeds.detach().requires_grad_(True)
    with torch.enable_grad():
        out = model(inputs_embeds=probe, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
        clean = layer_consistency(out.hidden_states, valid)
        (grad,) = torch.autograd.grad(clean, probe)
    delta = epsilon * grad.sign()
    out = model(inputs_embeds=embeds + delta, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    return layer_consistency(out.hidden_states, valid), clean.detach()
