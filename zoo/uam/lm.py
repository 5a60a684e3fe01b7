"""Causal-LM pieces of the UAM card: tiny/pretrained Llama models, RMU maths, MCQ scoring and MIA scores.

Pure torch + transformers (sklearn only inside ``mia_auc``); no lightning. Every function takes a Hugging Face causal
LM (``model(input_ids=..., attention_mask=...).logits``) and right-padded batches as built by ``pad_batch``.

Conventions:
    * Next-token NLL: position ``t`` predicts token ``t + 1``; a target counts when its own attention-mask entry is 1
      (with right padding this also makes its context valid).
    * Activation losses (RMU) use the WMDP reference form ``F.mse_loss``: the mean over all elements
      ``(token, hidden dim)`` of the valid tokens, i.e. ``sum_valid ||z_t - target_t||^2 / (n_valid * H)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.core.lm import SMOLLM2_PIP as SMOLLM2_PIP  # the shared LM helpers, importable from their old place
from zoo.core.lm import decoder_blocks, pad_batch
from zoo.core.lm import load_smollm2 as load_smollm2
from zoo.core.lm import resolve_hf_path as resolve_hf_path

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

    from datamodules.text.facts import MCQItem

#: Prompt for ``mcq_scores(mode="letter")``; the scored continuation is ``" A"`` .. ``" D"`` (lm-eval MMLU/WMDP style).
LETTER_PROMPT = "{question}\nA. {c0}\nB. {c1}\nC. {c2}\nD. {c3}\nAnswer:"
#: Answer letters of the ``letter`` mode.
LETTERS = ("A", "B", "C", "D")


def tiny_llama(
    vocab_size: int,
    hidden: int = 64,
    layers: int = 4,
    heads: int = 4,
    intermediate: int = 128,
    max_positions: int = 64,
    seed: int = 0,
) -> LlamaForCausalLM:
    """Randomly initialised small ``LlamaForCausalLM`` (fp32, eager attention) for the synthetic facts.

    Special ids follow ``WordTokenizer`` (pad 0, bos 1, eos 2). Initialisation is seeded inside a forked RNG, so the
    global torch RNG state is left untouched.

    Args:
        vocab_size: tokenizer size.
        hidden: hidden size (divisible by ``heads``).
        layers: number of decoder layers.
        heads: attention heads (also key/value heads: no grouped-query attention).
        intermediate: MLP width.
        max_positions: maximum sequence length.
        seed: initialisation seed.

    Returns:
        The model in train mode.

    Raises:
        ValueError: ``hidden`` not divisible by ``heads``.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden % heads:
        raise ValueError(f"tiny_llama: hidden={hidden} is not divisible by heads={heads}")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_positions,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="eager",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float().train()


def rmu_layers(num_layers: int) -> tuple[int, list[int]]:
    """RMU layer choice scaled from the Zephyr-7B reference (32 layers: activations at 7, update 5, 6, 7).

    ``layer = round_half_up(0.22 * L)``, then clamped to ``[2, L - 1]`` so that three update layers exist when
    ``L >= 3``; the update set is ``max(0, layer - 2) .. layer``. Examples: L=32 -> (7, [5, 6, 7]); L=30 (SmolLM2)
    -> (7, [5, 6, 7]); L=4 -> (2, [0, 1, 2]); L=2 -> (1, [0, 1]).

    Args:
        num_layers: decoder layers of the model.

    Returns:
        ``(layer, update_layers)``: the activation layer ℓ and the layers whose weights RMU updates.

    Raises:
        ValueError: ``num_layers`` < 1.
    """
    if num_layers < 1:
        raise ValueError(f"rmu_layers: num_layers={num_layers}; expected >= 1")
    layer = min(max(2, math.floor(0.22 * num_layers + 0.5)), num_layers - 1)
    return layer, list(range(max(0, layer - 2), layer + 1))


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class _StopForward(Exception):
    """Raised by the capture hook to skip the layers above the one read."""

    def __init__(self, value: Tensor) -> None:
        super().__init__()
        self.value = value


def layer_activations(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, layer: int) -> Tensor:
    """Residual-stream output of decoder layer ``layer`` (0-based), shape (B, T, H), with gradients.

    A forward hook on that layer captures its output and stops the forward pass there (layers above it and the LM
    head are skipped), as in the WMDP RMU code, which also hooks the layer module. For ``layer < L - 1`` this equals
    ``model(..., output_hidden_states=True).hidden_states[layer + 1]``; for the last layer Hugging Face applies the
    final norm to that entry while this returns the raw layer output.

    Args:
        model: Hugging Face causal LM with ``model.model.layers``.
        input_ids: (B, T) token ids.
        attention_mask: (B, T) 1 for tokens, 0 for padding.
        layer: decoder layer index, ``0 <= layer < L``.

    Returns:
        (B, T, H) activations (padding positions included; mask them in losses).

    Raises:
        IndexError: ``layer`` outside ``[0, L)``.
    """
    layers = decoder_blocks(model)
    if not 0 <= layer < len(layers):
        raise IndexError(f"layer_activations: layer={layer} outside [0, {len(layers)})")

    def hook(module: nn.Module, args: Any, output: Any) -> None:
        raise _StopForward(output[0] if isinstance(output, tuple) else output)

    handle = layers[layer].register_forward_hook(hook)
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    except _StopForward as stop:
        return stop.value
    finally:
        handle.remove()
    raise RuntimeError(f"layer_activations: decoder layer {layer} was not called by {type(model).__name__}.forward")


def _masked_mse(z: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """``F.mse_loss`` over all elements of the valid tokens: ``sum_valid ||z - target||^2 / (n_valid * H)``."""
    valid = mask.to(z.dtype).unsqueeze(-1)
    count = valid.sum().clamp_min(1.0) * z.shape[-1]
    return ((z - target) ** 2 * valid).sum() / count


def rmu_forget_loss(z: Tensor, mask: Tensor, control: Tensor) -> Tensor:
    """RMU forget loss ``||z_f - c·u||²`` in the WMDP reference form (``F.mse_loss``).

    Mean over all elements of the valid tokens: ``sum_{valid t} ||z_t - control||² / (n_valid * H)``; equals
    ``F.mse_loss(z[mask.bool()], control.expand(n_valid, H))``. (The WMDP code applies ``mse_loss`` to the whole
    padded batch; we drop padding so the loss does not depend on batch composition.)

    Args:
        z: (B, T, H) activations at the RMU layer.
        mask: (B, T) attention mask (1 = token).
        control: (H,) the scaled control vector ``c·u`` (``random_control``).

    Returns:
        Scalar loss (0 when there is no valid token).
    """
    return _masked_mse(z, control.to(z.dtype).expand_as(z), mask)


def activation_distance(z: Tensor, z_ref: Tensor, mask: Tensor) -> Tensor:
    """RMU retain loss / UAM frozen-copy distance ``||z - z_ref||²`` in the WMDP ``F.mse_loss`` form.

    Mean over all elements of the valid tokens: ``sum_{valid t} ||z_t - z_ref_t||² / (n_valid * H)``.

    Args:
        z: (B, T, H) activations of the model being updated.
        z_ref: (B, T, H) activations of the frozen copy (detach it yourself when it must not get gradients).
        mask: (B, T) attention mask (1 = token).

    Returns:
        Scalar loss (0 when there is no valid token).
    """
    return _masked_mse(z, z_ref, mask)


def random_control(hidden: int, c: float, seed: int) -> Tensor:
    """RMU control vector ``c·u``: ``u`` uniform in ``[0, 1)^H`` (seeded), normalised to unit L2 norm.

    This follows the WMDP code (``torch.rand`` then divide by its norm), so ``u`` lies in the positive orthant rather
    than being uniform on the sphere.

    Args:
        hidden: hidden size H.
        c: steering coefficient (WMDP Zephyr recipe 6.5, OpenUnlearning 2).
        seed: seed of the private generator.

    Returns:
        (H,) float32 tensor with norm ``|c|``.
    """
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(hidden, generator=gen, dtype=torch.float32)
    return c * u / u.norm()


def _token_logprobs(model: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Log-probability of each next token and its validity, both (B, T-1)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]
    targets = input_ids[:, 1:]
    logp = -F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    return logp, attention_mask[:, 1:].bool()


def sequence_nll(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, reduction: Literal["mean", "none"] = "mean"
) -> Tensor:
    """Next-token negative log-likelihood (with gradients).

    Args:
        model: Hugging Face causal LM.
        input_ids: (B, T) right-padded ids.
        attention_mask: (B, T) 1 = token.
        reduction: ``mean`` = mean over all valid target tokens of the batch (token-weighted); ``none`` = per-sequence
            mean over its own valid targets, shape (B,) (0 for a sequence with a single token).

    Returns:
        Scalar or (B,) tensor.
    """
    logp, valid = _token_logprobs(model, input_ids, attention_mask)
    nll = -logp * valid
    match reduction:
        case "mean":
            return nll.sum() / valid.sum().clamp_min(1)
        case "none":
            return nll.sum(1) / valid.sum(1).clamp_min(1)
        case _:
            raise ValueError(f"sequence_nll: reduction={reduction!r}; expected 'mean' or 'none'")


def _continuations(encode: Callable[[str], Sequence[int]], prefix: str, continuation: str) -> tuple[list[int], int]:
    """Ids of ``prefix + " " + continuation`` and the index where the scored continuation starts.

    The start is the longest common prefix of ``encode(prefix)`` and the full encoding, so it works for tokenizers
    that merge across the boundary (then the merged token is scored as part of the continuation).
    """
    stem = list(encode(prefix))
    full = list(encode(f"{prefix} {continuation}"))
    start = 0
    while start < min(len(stem), len(full)) and stem[start] == full[start]:
        start += 1
    if start == 0:
        raise ValueError(f"mcq_scores: no context token before the option in {prefix!r}; use a BOS-adding encoder")
    if start == len(full):
        raise ValueError(f"mcq_scores: option {continuation!r} encodes to no token after {prefix!r}")
    return full, start


@torch.no_grad()
def mcq_scores(
    model: nn.Module,
    tokenizer_encode: Callable[[str], Sequence[int]],
    items: Sequence[MCQItem],
    mode: Literal["option_loglik", "letter"] = "option_loglik",
    batch_size: int = 64,
    pad_id: int = 0,
) -> Tensor:
    r"""Score the four options of each multiple-choice item.

    ``option_loglik``: ``sum_t log p(option token t | stem, earlier option tokens)`` for the sequence
    ``question + " " + choice`` (the stem is the item's ``question``). ``letter``: ``log p(" X" | prompt)`` for
    X in A-D, with ``LETTER_PROMPT`` = ``"{question}\nA. {c0}\nB. {c1}\nC. {c2}\nD. {c3}\nAnswer:"`` (lm-eval's
    MMLU/WMDP form without the subject header; a word tokenizer needs ``A``-``D`` in its vocabulary). The 4N
    sequences are sorted by length, right-padded and run ``batch_size`` at a time; the model is used as is (call
    ``eval()`` yourself if it has dropout).

    Args:
        model: Hugging Face causal LM.
        tokenizer_encode: ``str -> ids`` (``WordTokenizer`` or ``lambda s: hf_tok(s).input_ids``); it must add the
            same leading tokens (e.g. BOS) to the stem and to the stem + option.
        items: MCQ items with exactly 4 choices.
        mode: ``option_loglik`` (default) or ``letter``.
        batch_size: sequences per forward pass.
        pad_id: padding id (any id works: padded positions are masked and never scored).

    Returns:
        (N, 4) float32 scores on the CPU; higher = preferred.
    """
    rows: list[tuple[list[int], int]] = []
    for item in items:
        if len(item.choices) != 4:
            raise ValueError(f"mcq_scores: item {item.question!r} has {len(item.choices)} choices; expected 4")
        match mode:
            case "option_loglik":
                rows += [_continuations(tokenizer_encode, item.question, c) for c in item.choices]
            case "letter":
                prompt = LETTER_PROMPT.format(
                    question=item.question, **{f"c{i}": c for i, c in enumerate(item.choices)}
                )
                rows += [_continuations(tokenizer_encode, prompt, x) for x in LETTERS]
            case _:
                raise ValueError(f"mcq_scores: mode={mode!r}; expected 'option_loglik' or 'letter'")
    device = _device(model)
    scores = torch.zeros(len(rows), dtype=torch.float32)
    order = sorted(range(len(rows)), key=lambda r: len(rows[r][0]))
    for lo in range(0, len(order), batch_size):
        chunk = order[lo : lo + batch_size]
        ids, mask = pad_batch([rows[r][0] for r in chunk], pad_id=pad_id)
        logp, valid = _token_logprobs(model, ids.to(device), mask.to(device))
        # target j is token j+1: score tokens start..len-1 of each row
        starts = torch.tensor([rows[r][1] for r in chunk], device=device)
        positions = torch.arange(logp.shape[1], device=device)
        scored = valid & (positions[None, :] >= (starts[:, None] - 1))
        scores[chunk] = (logp * scored).sum(1).float().cpu()
    return scores.view(len(items), 4)


def mcq_accuracy(
    model: nn.Module,
    tokenizer_encode: Callable[[str], Sequence[int]],
    items: Sequence[MCQItem],
    mode: Literal["option_loglik", "letter"] = "option_loglik",
    batch_size: int = 64,
    pad_id: int = 0,
) -> float:
    """Multiple-choice accuracy in percent (argmax of ``mcq_scores``; ties go to the lowest index).

    Args:
        model: Hugging Face causal LM.
        tokenizer_encode: ``str -> ids``.
        items: MCQ items.
        mode: ``option_loglik`` or ``letter`` (see ``mcq_scores``).
        batch_size: sequences per forward pass.
        pad_id: padding id.

    Returns:
        100 * fraction of items whose top-scored option is ``answer`` (chance 25).
    """
    if not items:
        raise ValueError("mcq_accuracy: no items")
    scores = mcq_scores(model, tokenizer_encode, items, mode=mode, batch_size=batch_size, pad_id=pad_id)
    answers = torch.tensor([item.answer for item in items])
    return 100.0 * (scores.argmax(1) == answers).float().mean().item()


@torch.no_grad()
def min_k_scores(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, k: float = 0.2) -> Tensor:
    """Min-K% Prob membership score (Shi et al.): mean of the lowest ``k`` fraction of token log-probs.

    Per sequence with ``n`` valid targets, the ``max(1, floor(k * n))`` smallest next-token log-probs are averaged.
    Higher = more likely a member (use ``higher_is_member=True`` in ``mia_auc``).

    Args:
        model: Hugging Face causal LM.
        input_ids: (B, T) right-padded ids (each sequence needs at least 2 tokens).
        attention_mask: (B, T) 1 = token.
        k: fraction in (0, 1] (card: 0.2).

    Returns:
        (B,) float32 scores on the CPU.
    """
    if not 0.0 < k <= 1.0:
        raise ValueError(f"min_k_scores: k={k}; expected 0 < k <= 1")
    logp, valid = _token_logprobs(model, input_ids, attention_mask)
    n = valid.sum(1)
    if bool((n == 0).any()):
        raise ValueError("min_k_scores: a sequence has fewer than 2 tokens (no next-token target)")
    keep = torch.clamp((k * n.double()).floor().long(), min=1)
    lowest = logp.masked_fill(~valid, math.inf).sort(dim=1).values
    take = torch.arange(lowest.shape[1], device=lowest.device)[None, :] < keep[:, None]
    return ((lowest.masked_fill(~take, 0.0)).sum(1) / keep).float().cpu()


@torch.no_grad()
def loss_scores(model: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """LOSS membership score: per-sequence mean next-token NLL (lower = more likely a member).

    Args:
        model: Hugging Face causal LM.
        input_ids: (B, T) right-padded ids.
        attention_mask: (B, T) 1 = token.

    Returns:
        (B,) float32 scores on the CPU (use ``higher_is_member=False`` in ``mia_auc``).
    """
    return sequence_nll(model, input_ids, attention_mask, reduction="none").float().cpu()


def mia_auc(
    member_scores: Tensor | Sequence[float], nonmember_scores: Tensor | Sequence[float], higher_is_member: bool
) -> float:
    """ROC AUC of a membership score separating members (label 1) from non-members (label 0).

    Args:
        member_scores: scores of training samples (e.g. the forget set).
        nonmember_scores: scores of never-trained samples (e.g. the holdout species).
        higher_is_member: ``True`` for Min-K% (log-probs), ``False`` for LOSS (NLL).

    Returns:
        AUC in [0, 1]; 0.5 = indistinguishable (the Retrain oracle's target on forget vs holdout).
    """
    from sklearn.metrics import roc_auc_score

    member = torch.as_tensor(member_scores, dtype=torch.float64).flatten()
    nonmember = torch.as_tensor(nonmember_scores, dtype=torch.float64).flatten()
    if member.numel() == 0 or nonmember.numel() == 0:
        raise ValueError("mia_auc: need at least one member and one non-member score")
    scores = torch.cat([member, nonmember])
    labels = torch.cat([torch.ones_like(member), torch.zeros_like(nonmember)])
    sign = 1.0 if higher_is_member else -1.0
    return float(roc_auc_score(labels.numpy(), (sign * scores).numpy()))


def _batch_tensors(batch: Any) -> tuple[Tensor, Tensor]:
    if isinstance(batch, Mapping):
        return batch["input_ids"], batch["attention_mask"]
    input_ids, attention_mask = batch[0], batch[1]
    return input_ids, attention_mask


@torch.no_grad()
def perplexity(model: nn.Module, batches: Iterable[Any]) -> float:
    """Corpus perplexity ``exp(total NLL / total valid target tokens)`` (token-weighted over all batches).

    Args:
        model: Hugging Face causal LM.
        batches: ``(input_ids, attention_mask)`` tuples or mappings with those keys (right-padded).

    Returns:
        The perplexity (``nan`` when there is no target token).
    """
    device = _device(model)
    total, count = 0.0, 0
    for batch in batches:
        input_ids, attention_mask = _batch_tensors(batch)
        logp, valid = _token_logprobs(model, input_ids.to(device), attention_mask.to(device))
        total += float(-(logp * valid).sum())
        count += int(valid.sum())
    return math.exp(total / count) if count else math.nan
