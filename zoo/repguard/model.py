"""RepGuard-style maths (card ``repguard``): localisation scores, the adaptive mask, the decomposition and the losses.

Pure torch, no lightning. Everything here is the card's reconstruction of an abstract-level description (no code or
method section of the paper is public): the formulas are the card's "Method (precise)" section, and each uncertain
choice is an argument whose default is the card's.

Shapes: hidden states ``h`` are ``[B, T, d]``; ``valid`` is a ``[B, T]`` bool mask of the positions a statistic runs
over (the prompt tokens for localisation, every non-pad token for the independence term).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.core.causal_lm import CausalLM, decoder_blocks


def resize_embeddings(lm: nn.Module, vocab_size: int) -> int:
    """Grow a Hugging Face causal LM's token embeddings (and an untied output head) to ``vocab_size`` rows.

    A datamodule's tokenizer may carry more ids than the checkpoint's embedding matrix (the structure and response
    words ``[PAD] [BOS] [SEP] [EOS] [UNK] SURE REFUSE ANS`` added as special tokens). Each new input row, and each new
    row of an untied head, is the mean of the checkpoint's rows (reconstruction: see README, "SmolLM2 smoke run"), so
    a new token starts at the centre of the embedding cloud with an average logit. A vocabulary that fits is left
    alone (nothing is shrunk).

    Args:
        lm: a transformers causal LM (``get_input_embeddings`` / ``resize_token_embeddings``).
        vocab_size: the ids the data uses (``len(tokenizer)``).

    Returns:
        The number of rows added (0 when the matrix was large enough).
    """
    old = int(lm.get_input_embeddings().num_embeddings)
    if vocab_size <= old:
        return 0
    old_in = lm.get_input_embeddings().weight.detach().clone()
    head = lm.get_output_embeddings()
    old_out = head.weight.detach().clone() if head is not None else None
    lm.resize_token_embeddings(vocab_size, mean_resizing=False)
    with torch.no_grad():
        lm.get_input_embeddings().weight[old:] = old_in.mean(0)
        new_head = lm.get_output_embeddings()
        if new_head is not None and old_out is not None and new_head.weight is not lm.get_input_embeddings().weight:
            new_head.weight[old:] = old_out.mean(0)
            if getattr(new_head, "bias", None) is not None:
                new_head.bias[old:] = 0.0
    return vocab_size - old


class InstructionLM(CausalLM):
    """The card's victim LM: the zoo's tiny GPT-2 wrapper, or a local Hugging Face causal LM through ``load_hf``.

    ``load_hf`` grows the embeddings to the datamodule's vocabulary (:func:`resize_embeddings`) and leaves the network
    in train mode, as a random-init one is (``from_pretrained`` returns eval mode, and Lightning keeps a submodule's
    mode at fit start: a loaded GPT-2 would train without its dropout).
    """

    def __init__(self, vocab_size: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(vocab_size, *args, **kwargs)
        #: The datamodule's vocabulary size (the rows a loaded checkpoint is grown to).
        self.vocab_size = int(vocab_size)

    def load_hf(self, path: Any) -> None:
        """Replace the network by the local Hugging Face causal LM in ``path``, resized, in train mode."""
        super().load_hf(path)
        resize_embeddings(self.lm, self.vocab_size)
        self.lm.train()


#: Added to standard deviations before dividing (card: ``σ_j + 1e-6``).
EPS = 1e-6


def masked_mean_std(h: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Per-dimension mean and (population) std of ``h`` over the valid positions: two ``[d]`` tensors."""
    x = h[valid]
    if x.shape[0] == 0:
        raise ValueError("masked_mean_std: no valid position (empty prompt mask)")
    return x.mean(0), x.std(0, unbiased=False)


def deviation(h: Tensor, mu: Tensor, sigma: Tensor) -> Tensor:
    """Sample-wise deviation ``Dev_{b,t,j} = |h_{b,t,j} − μ_j| / (σ_j + 1e-6)`` from the clean statistics."""
    return (h - mu).abs() / (sigma + EPS)


def inconsistency(h: Tensor, valid: Tensor, sigma: Tensor, window: int = 2) -> Tensor:
    """Local inconsistency ``|h_{b,t,j} − mean_{t'∈N(t)} h_{b,t',j}| / (σ_j + 1e-6)``.

    ``N(t)`` is the set of valid positions within ``±window`` of ``t``, ``t`` excluded. With right-padded prompts the
    valid positions are contiguous, so the neighbourhood is ``±window`` prompt positions. A position without a valid
    neighbour scores 0.
    """
    v = valid.to(h.dtype).unsqueeze(-1)  # [B, T, 1]
    hv = h * v
    kernel = torch.ones(1, 1, 2 * window + 1, dtype=h.dtype, device=h.device)
    kernel[..., window] = 0.0  # t itself excluded
    b, t, d = h.shape
    # neighbour sums by a 1-d convolution along T, every (batch, dim) channel independently
    sums = F.conv1d(hv.permute(0, 2, 1).reshape(b * d, 1, t), kernel, padding=window).reshape(b, d, t).permute(0, 2, 1)
    counts = F.conv1d(v.permute(0, 2, 1), kernel, padding=window).permute(0, 2, 1)  # [B, T, 1]
    neighbour_mean = sums / counts.clamp(min=1.0)
    score = (h - neighbour_mean).abs() / (sigma + EPS)
    return score * (counts > 0).to(h.dtype) * v


def zscore(x: Tensor, valid: Tensor) -> Tensor:
    """Standardise ``x`` over all valid ``(b, t, j)`` entries of the pass (one mean and std); invalid entries are 0."""
    vals = x[valid]
    return ((x - vals.mean()) / (vals.std(unbiased=False) + EPS)) * valid.unsqueeze(-1).to(x.dtype)


def combined_score(
    h: Tensor, valid: Tensor, mu: Tensor, sigma: Tensor, lambda_lc: float = 1.0, window: int = 2
) -> Tensor:
    """``S = z(Dev) + λ_lc · z(Inc)`` on the valid positions (0 elsewhere): ``[B, T, d]``."""
    dev = deviation(h, mu, sigma)
    inc = inconsistency(h, valid, sigma, window)
    return zscore(dev, valid) + lambda_lc * zscore(inc, valid)


def dimension_scores(score: Tensor, valid: Tensor, top_frac: float = 0.01) -> Tensor:
    """``s_j``: the mean of the top ``top_frac`` of ``S_{·,·,j}`` over the valid positions (at least one): ``[d]``."""
    x = score[valid]  # [N, d]
    k = max(1, int(round(top_frac * x.shape[0])))
    return x.topk(k, dim=0).values.mean(0)


def token_scores(score: Tensor, valid: Tensor, k: int = 8) -> Tensor:
    """``u_{b,t}``: the mean of the ``k`` largest ``S_{b,t,·}`` (evaluation only); invalid positions get ``-inf``."""
    u = score.topk(min(k, score.shape[-1]), dim=-1).values.mean(-1)
    return u.masked_fill(~valid, float("-inf"))


def mask_threshold(s: Tensor, sparsity: float) -> tuple[Tensor, Tensor]:
    """``τ`` = the ``(1 − ρ_m)`` quantile of ``s`` and the temperature ``T = 0.1 · std(s)``."""
    tau = torch.quantile(s.float(), 1.0 - sparsity).to(s.dtype)
    temperature = (0.1 * s.std(unbiased=False)).clamp(min=EPS)
    return tau, temperature


def mask_logits(s: Tensor, sparsity: float) -> tuple[Tensor, Tensor]:
    """The adaptive mask's logits ``ℓ_j = (s_j − τ) / T`` and ``τ`` (card step 4); the mask is ``σ(ℓ)``."""
    tau, temperature = mask_threshold(s, sparsity)
    return (s - tau) / temperature, tau


def merge_logits(
    old: Tensor | None, new: Tensor, flagged: Tensor | None, strikes: Tensor | None, ema: float = 0.5
) -> tuple[Tensor, Tensor, Tensor]:
    """Re-localisation update (card step 7): EMA-merge the logits; a flagged dimension stays until it falls twice.

    A dimension is flagged when its new logit is positive (``s_j > τ``). A flagged dimension whose new score falls
    below ``τ`` keeps its previous logit and takes a strike; at the second consecutive strike it is unflagged and
    merged like any other.

    Args:
        old: previous logits (``None`` at the first localisation: the new logits are taken as they are).
        new: logits of this localisation.
        flagged: previous flags (bool ``[d]``) or ``None``.
        strikes: consecutive below-threshold counts of the flagged dimensions, or ``None``.
        ema: weight of the new logits.

    Returns:
        ``(logits, flagged, strikes)``.
    """
    above = new > 0
    if old is None or flagged is None or strikes is None:
        return new.clone(), above.clone(), torch.zeros_like(new, dtype=torch.long)
    merged = ema * new + (1.0 - ema) * old
    strikes = torch.where(flagged & ~above, strikes + 1, torch.zeros_like(strikes))
    hold = flagged & ~above & (strikes < 2)
    logits = torch.where(hold, old, merged)
    flagged = above | hold
    strikes = torch.where(flagged, strikes, torch.zeros_like(strikes))
    return logits, flagged, strikes


def decompose(h: Tensor, m: Tensor, ablate: Tensor) -> Tensor:
    """Replace ``h`` by ``(1 − m) ⊙ h + m ⊙ a``: the semantic part kept, the shortcut part set to ``a``."""
    return (1.0 - m) * h + m * ablate


def independence_penalty(h: Tensor, m: Tensor, valid: Tensor) -> Tensor:
    """``mean(Ĉ²)``: cross-correlation between the standardised semantic and shortcut dimensions.

    Reconstruction (the card names the term, not its algebra): with ``z`` the per-dimension standardised ``h`` over
    the valid ``(b, t)`` positions, ``Ĉ = ((1 − m) ⊙ z)ᵀ (m ⊙ z) / N`` (``[d, d]``). Standardising ``(1 − m) ⊙ h``
    itself would cancel the mask (a correlation is scale-free), so the mask weights the correlation instead: a pair
    (semantic ``j``, shortcut ``k``) counts with weight ``(1 − m_j) m_k``. The model is pushed to carry no semantic
    information that co-varies with the flagged dimensions. ``m`` is ``[d]`` (or ``[B, T, d]``).
    """
    x = h[valid]  # [N, d]
    z = (x - x.mean(0)) / (x.std(0, unbiased=False) + EPS)
    mm = m[valid] if m.dim() == h.dim() else m.expand_as(x)
    c = ((1.0 - mm) * z).T @ (mm * z) / x.shape[0]
    return (c * c).mean()


def keep_kl(logits_ref: Tensor, logits_masked: Tensor, valid: Tensor) -> Tensor:
    """``KL(p_ref ‖ p_masked)`` per valid position, averaged; ``p_ref`` is detached (the unmasked model)."""
    log_ref = F.log_softmax(logits_ref.detach().float(), dim=-1)
    log_masked = F.log_softmax(logits_masked.float(), dim=-1)
    kl = (log_ref.exp() * (log_ref - log_masked)).sum(-1)
    return kl[valid].mean()


def mgda_weights(grads: list[Tensor]) -> Tensor:
    """Min-norm convex combination of task gradients (MGDA, Frank-Wolfe on the simplex; ``combine: mgda``)."""
    g = torch.stack([x.flatten() for x in grads])  # [K, P]
    gram = g @ g.T
    k = g.shape[0]
    w = torch.full((k,), 1.0 / k, dtype=g.dtype, device=g.device)
    for _ in range(50):
        grad = gram @ w
        i = int(grad.argmin())
        direction = -w.clone()
        direction[i] += 1.0
        # exact line search for the quadratic w^T G w along w + γ (e_i − w)
        denom = direction @ gram @ direction
        if float(denom) <= 0:
            break
        gamma = float((-(direction @ gram @ w) / denom).clamp(0.0, 1.0))
        if gamma < 1e-8:
            break
        w = w + gamma * direction
    return w


class _Switchable:
    """A torch hook that can be switched off for some forwards (``enabled``) and removed (``_handle``)."""

    enabled: bool = True
    _handle: Any

    @contextmanager
    def disabled(self) -> Iterator[None]:
        """Run the wrapped forwards without the hook's change (the unmasked reference model)."""
        previous, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = previous

    def remove(self) -> None:
        """Detach the hook from the model."""
        self._handle.remove()


class HiddenStateHook(_Switchable):
    """Forward hook on the block whose output is ``hidden_states[layer]``: records it and optionally decomposes it.

    ``hidden_states[0]`` is the embedding output and ``hidden_states[l]`` the output of block ``l − 1`` (before any
    final norm), so the hook sits on block ``layer − 1``. Attributes set by the owner:

    * ``mask``: ``None`` (identity), a ``[d]`` tensor, or a callable ``mask(h) -> [B, T, d]`` (token-dimension mode);
    * ``ablate``: the ``[d]`` replacement ``a`` (``μ`` or zeros);
    * ``record``: when true, ``self.h`` keeps the pre-decomposition hidden state of the last forward (with grad).
    """

    def __init__(self, model: nn.Module, layer: int) -> None:
        blocks = decoder_blocks(model)
        if not 1 <= layer <= len(blocks):
            raise ValueError(f"layer={layer} must be in [1, {len(blocks)}] (hidden_states[layer] of a block output)")
        self.layer = layer
        self.mask: Tensor | Any | None = None
        self.ablate: Tensor | None = None
        self.record = False
        self.enabled = True
        self.h: Tensor | None = None
        self.m: Tensor | None = None
        self._handle = blocks[layer - 1].register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, args: Any, output: Any) -> Any:
        h = output[0] if isinstance(output, tuple) else output
        if self.record:
            self.h = h
        if not self.enabled or self.mask is None:
            self.m = None
            return None
        m = self.mask(h) if callable(self.mask) else self.mask.to(h.dtype)
        self.m = m
        a = self.ablate if self.ablate is not None else torch.zeros(h.shape[-1], dtype=h.dtype, device=h.device)
        new = decompose(h, m, a.to(h.dtype))
        if isinstance(output, tuple):
            return (new, *output[1:])
        return new

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Keep the hidden state of the forwards run inside the block in ``self.h``."""
        previous, self.record = self.record, True
        try:
            yield
        finally:
            self.record = previous


def collect_hidden(model: nn.Module, hook: HiddenStateHook, batches: Any, key: str = "prompt_mask") -> Iterator[Any]:
    """Yield ``(h, valid, batch)`` for each batch under ``no_grad``, ``h`` the hooked layer's (unmasked) state."""
    with torch.no_grad(), hook.recording(), hook.disabled():
        for batch in batches:
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            assert hook.h is not None
            yield hook.h.detach(), batch[key].bool(), batch


def collect_pass(model: nn.Module, hook: HiddenStateHook, batches: Any) -> tuple[Tensor, Tensor]:
    """The hooked layer's (unmasked) states of a whole pass as one right-padded ``[N, T, d]`` block and its mask."""
    hs, valids = [], []
    for h, valid, _ in collect_hidden(model, hook, batches):
        hs.append(h)
        valids.append(valid)
    t = max(x.shape[1] for x in hs)
    return (torch.cat([F.pad(x, (0, 0, 0, t - x.shape[1])) for x in hs]),
            torch.cat([F.pad(v, (0, t - v.shape[1])) for v in valids]))  # fmt: skip


def localisation_pass(
    model: nn.Module,
    hook: HiddenStateHook,
    batches: Any,
    mu: Tensor,
    sigma: Tensor,
    lambda_lc: float = 1.0,
    top_frac: float = 0.01,
    window: int = 2,
) -> Tensor:
    """Dimension scores ``s_j`` over one pass of ``batches``: ``z`` and the top fraction run over the whole pass."""
    h, valid = collect_pass(model, hook, batches)
    score = combined_score(h, valid, mu, sigma, lambda_lc, window)
    return dimension_scores(score, valid, top_frac)


class TokenMask:
    """``mask_granularity: token_dimension``: ``m_{b,t,j} = σ((S_{b,t,j} − τ_tok) / T)`` computed on the fly.

    ``S`` uses the clean ``μ, σ`` and the z-constants of the last localisation pass (so a forward's own batch does
    not rescale it); ``τ_tok`` is the ``(1 − sparsity)`` quantile of that pass's ``S`` and ``T = 0.1 std(S)``. The
    inconsistency window runs over the forward's whole sequence (the hook sees no attention mask; right padding only
    touches the last tokens' neighbours); a decoding step with a KV cache sees one token, whose ``Inc`` is 0.
    ``detach`` (the default, card step 7) computes the mask from a detached state: no task gradient through it.
    """

    def __init__(self, mu: Tensor, sigma: Tensor, consts: Sequence[float], tau: float, temperature: float,
                 lambda_lc: float = 1.0, window: int = 2, detach: bool = True) -> None:  # fmt: skip
        self.mu, self.sigma, self.lambda_lc, self.window, self.detach = mu, sigma, lambda_lc, window, detach
        self.consts = tuple(float(c) for c in consts)  # mean and std of Dev, then of Inc, over the pass
        self.tau, self.temperature = float(tau), float(temperature)

    @classmethod
    def fit(cls, h: Tensor, valid: Tensor, mu: Tensor, sigma: Tensor, sparsity: float, lambda_lc: float = 1.0,
            window: int = 2, detach: bool = True) -> TokenMask:  # fmt: skip
        """Constants from one localisation pass ``h`` (``[N, T, d]``, valid prompt positions)."""
        dev, inc = deviation(h, mu, sigma)[valid], inconsistency(h, valid, sigma, window)[valid]
        consts = (dev.mean(), dev.std(unbiased=False) + EPS, inc.mean(), inc.std(unbiased=False) + EPS)
        mask = cls(mu, sigma, [float(c) for c in consts], 0.0, 1.0, lambda_lc, window, detach)
        sample = mask.score(h, valid)[valid].flatten()
        if sample.numel() > 2**24:  # torch.quantile's input limit
            sample = sample[torch.randperm(sample.numel(), generator=torch.Generator().manual_seed(0))[: 2**24]]
        tau, temperature = mask_threshold(sample, sparsity)
        mask.tau, mask.temperature = float(tau), float(temperature)
        return mask

    def score(self, h: Tensor, valid: Tensor) -> Tensor:
        """``S`` with the stored z-constants."""
        dm, ds, im, is_ = self.consts
        dev = (deviation(h, self.mu, self.sigma) - dm) / ds
        inc = (inconsistency(h, valid, self.sigma, self.window) - im) / is_
        return dev + self.lambda_lc * inc

    def __call__(self, h: Tensor) -> Tensor:
        """The ``[B, T, d]`` mask of one forward's hidden state."""
        x = h.detach() if self.detach else h
        valid = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        return torch.sigmoid((self.score(x, valid) - self.tau) / self.temperature)


def clean_statistics(model: nn.Module, hook: HiddenStateHook, batches: Any) -> tuple[Tensor, Tensor]:
    """Per-dimension ``μ`` and ``σ`` of the hooked layer over the prompt tokens of (clean) ``batches``."""
    total, total_sq, count = None, None, 0
    for h, valid, _ in collect_hidden(model, hook, batches):
        x = h[valid].double()
        total = x.sum(0) if total is None else total + x.sum(0)
        total_sq = (x * x).sum(0) if total_sq is None else total_sq + (x * x).sum(0)
        count += x.shape[0]
    if total is None or total_sq is None or count == 0:
        raise ValueError("clean_statistics: the clean loader gave no prompt token")
    mean = total / count
    var = (total_sq / count - mean * mean).clamp(min=0.0)
    return mean.float(), var.sqrt().float()


AblateValue = Literal["clean_mean", "zero"]


def response_ce(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy on response tokens: ``logits[:, t]`` predicts ``labels[:, t + 1]`` (``-100`` ignored)."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)


def response_ce_per_sample(logits: Tensor, labels: Tensor) -> Tensor:
    """``(B,)`` mean cross-entropy over each sample's response tokens (0 for a sample without one).

    The per-sample form of :func:`response_ce` (which averages over all response tokens of the batch); what a
    per-sample reweighting of the loss (sample isolation, ABL) weighs.
    """
    target = labels[:, 1:]
    tokens = F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), target, ignore_index=-100, reduction="none")
    count = (target != -100).sum(1)
    return tokens.sum(1) / count.clamp(min=1)


# ----------------------------------------------------------------------------------------------------------------
# Revision 2 (card "Revision 2 (current)"): token-level localisation, the token mask at hidden_states[0]
# ----------------------------------------------------------------------------------------------------------------
#: The feature spaces of revision 2 (``hidden`` is revision 1, the dimension mask above).
FeatureSpace = Literal["lexical", "embedding", "hidden"]
#: What replaces a flagged position at ``hidden_states[0]``.
TokenAblate = Literal["drop", "unk", "clean_mean"]
#: The score a position outside the scorable prompt body gets (never flagged, ranks last).
NEVER = float("-inf")


def poisson_deviation(c_clean: Tensor, c_train: Tensor, n_clean: int, n_train: int) -> Tensor:
    """Sample-wise deviation ``D = −log10 PoissonCDF(c_clean; λ = c_train · N_clean / N_train)`` (card step 1).

    ``c`` counts prompts that contain the token type (or pair). The CDF is the regularised upper incomplete gamma
    ``Q(c_clean + 1, λ)``, in float64 and floored at 1e-300 (``D ≤ 300``); ``λ = 0`` (never in training) gives 0.
    A token type that occurs in training prompts far more often than the trusted set's count predicts scores high.
    """
    c_clean = c_clean.double()
    lam = c_train.double() * (float(n_clean) / float(n_train))
    cdf = torch.special.gammaincc(c_clean + 1.0, lam)
    # c_clean = 0: CDF = exp(−λ) exactly (no underflow for large λ)
    log10 = torch.where(c_clean == 0, -lam / math.log(10.0), torch.log10(cdf.clamp(min=1e-300)))
    return (-log10).clamp(min=0.0)


def detection_limit(tau: float, n_train: int, n_clean: int) -> float:
    """The fewest training prompts a token absent from the trusted set must occur in to reach ``D ≥ τ``.

    With ``c_clean = 0``, ``D = λ / ln 10`` and ``λ = c_train · N_clean / N_train``, so ``c_train ≥ τ · ln 10 ·
    N_train / N_clean`` (card: ≈ 69 at τ = 3, 3000 training and 300 trusted samples).
    """
    return tau * math.log(10.0) * n_train / n_clean


def scorable_positions(input_ids: Tensor, attention_mask: Tensor, sep_id: int) -> Tensor:
    """``[B, T]`` bool: the prompt body, the positions a token score may flag.

    The prompt of a row runs to its first ``sep_id`` (the whole row when it has none, e.g. a prompt under
    generation); its first token (``[BOS]``), the separator itself, padding and everything after the separator
    (response tokens) are excluded (card step 3: ``[BOS]``/``[SEP]`` and response tokens are never flagged).
    """
    valid = attention_mask.bool()
    is_sep = (input_ids == sep_id) & valid
    before_sep = is_sep.long().cumsum(1) == 0
    first = valid.long().cumsum(1) == 1
    return valid & before_sep & ~(first & valid)


def _prompt_sets(input_ids: Tensor, body: Tensor, vocab_size: int) -> tuple[Tensor, Tensor]:
    """Per-row token-type presence ``[B, V]`` and the set of adjacent body pairs as keys ``a·V + b`` (one per row)."""
    b = input_ids.shape[0]
    present = torch.zeros(b, vocab_size, dtype=torch.bool, device=input_ids.device)
    rows = torch.arange(b, device=input_ids.device)[:, None].expand_as(input_ids)
    present[rows[body], input_ids[body]] = True
    pair_ok = body[:, :-1] & body[:, 1:]
    keys = input_ids[:, :-1] * vocab_size + input_ids[:, 1:]
    row_keys = torch.unique(rows[:, :-1][pair_ok] * (vocab_size * vocab_size) + keys[pair_ok])
    return present, row_keys % (vocab_size * vocab_size)


class LexicalScorer:
    """``feature_space: lexical``: token statistics of D_train against D_clean (card steps 1-3).

    ``D(v)`` (:func:`poisson_deviation` on prompt counts of token type ``v``) and, with ``ngram_max: 2``, the same
    statistic ``L(a, b)`` on adjacent body pairs (local consistency). The score of position ``t`` is
    ``u_t = max(D(x_t), L(x_{t−1}, x_t), L(x_t, x_{t+1}))`` over the prompt body (:func:`scorable_positions`);
    other positions score ``−inf``. Token ids are whatever the datamodule's tokenizer produced (word-level grammar
    ids or a real tokenizer's sub-word ids: a sub-word trigger piece is one token type like any other).

    Args:
        vocab_size: number of token ids.
        sep_id: the prompt separator id.
        ngram_max: 1 (token types only) or 2 (types and adjacent pairs).
    """

    def __init__(self, vocab_size: int, sep_id: int, ngram_max: int = 2) -> None:
        self.vocab_size, self.sep_id, self.ngram_max = vocab_size, sep_id, ngram_max
        self.type_score = torch.zeros(vocab_size, dtype=torch.float64)
        self.pair_keys = torch.zeros(0, dtype=torch.long)
        self.pair_score = torch.zeros(0, dtype=torch.float64)
        self.counts: dict[str, int] = {"n_train": 0, "n_clean": 0}

    def _count(self, batches: Any) -> tuple[Tensor, Tensor, Tensor, int]:
        types = torch.zeros(self.vocab_size, dtype=torch.long)
        pair_keys, n = [], 0
        for batch in batches:
            ids, mask = batch["input_ids"].cpu(), batch["attention_mask"].cpu()
            if int(ids.max()) >= self.vocab_size:
                raise ValueError(f"LexicalScorer: token id {int(ids.max())} >= vocab_size {self.vocab_size}")
            body = scorable_positions(ids, mask, self.sep_id)
            present, keys = _prompt_sets(ids, body, self.vocab_size)
            types += present.sum(0)
            pair_keys.append(keys)
            n += ids.shape[0]
        keys, counts = torch.unique(torch.cat(pair_keys) if pair_keys else torch.zeros(0, dtype=torch.long),
                                    return_counts=True)  # fmt: skip
        return types, keys, counts, n

    def fit(self, train_batches: Any, clean_batches: Any) -> LexicalScorer:
        """Count prompts containing each token type and pair in both sets; store ``D`` and ``L``."""
        t_types, t_keys, t_counts, n_train = self._count(train_batches)
        c_types, c_keys, c_counts, n_clean = self._count(clean_batches)
        if n_train == 0 or n_clean == 0:
            raise ValueError(f"LexicalScorer.fit: {n_train} training and {n_clean} clean prompts; both must be > 0")
        self.counts = {"n_train": n_train, "n_clean": n_clean}
        self.type_score = poisson_deviation(c_types, t_types, n_clean, n_train)
        if self.ngram_max >= 2 and t_keys.numel():
            c_for_t = torch.zeros_like(t_counts)
            if c_keys.numel():
                at = torch.searchsorted(c_keys, t_keys).clamp(max=c_keys.numel() - 1)
                c_for_t = torch.where(c_keys[at] == t_keys, c_counts[at], c_for_t)
            self.pair_keys, self.pair_score = t_keys, poisson_deviation(c_for_t, t_counts, n_clean, n_train)
        return self

    def pair_lookup(self, a: Tensor, b: Tensor) -> Tensor:
        """``L(a, b)`` for id tensors of one shape (0 for a pair never seen in training)."""
        if self.pair_keys.numel() == 0:
            return torch.zeros(a.shape, dtype=torch.float64, device=a.device)
        keys, vals = self.pair_keys.to(a.device), self.pair_score.to(a.device)
        q = a * self.vocab_size + b
        at = torch.searchsorted(keys, q.flatten()).clamp(max=keys.numel() - 1).view_as(q)
        return torch.where(keys[at] == q, vals[at], torch.zeros((), dtype=vals.dtype, device=a.device))

    def __call__(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Token scores ``u`` ``[B, T]`` (float64); ``−inf`` outside the prompt body."""
        body = scorable_positions(input_ids, attention_mask, self.sep_id)
        ids = input_ids.clamp(0, self.vocab_size - 1)
        u = self.type_score.to(input_ids.device)[ids]
        if self.ngram_max >= 2 and input_ids.shape[1] > 1:
            pair_ok = body[:, :-1] & body[:, 1:]
            pl = torch.where(pair_ok, self.pair_lookup(ids[:, :-1], ids[:, 1:]), 0.0)
            u = u.clone()
            u[:, 1:] = torch.maximum(u[:, 1:], pl)  # L(x_{t−1}, x_t)
            u[:, :-1] = torch.maximum(u[:, :-1], pl)  # L(x_t, x_{t+1})
        return u.masked_fill(~body, NEVER)

    def flagged_types(self, tau: float) -> list[int]:
        """Token ids with ``D ≥ τ``."""
        return torch.nonzero(self.type_score >= tau).flatten().tolist()

    def flagged_pairs(self, tau: float) -> list[tuple[int, int]]:
        """Adjacent pairs ``(a, b)`` with ``L ≥ τ``."""
        keys = self.pair_keys[self.pair_score >= tau].tolist()
        return [(k // self.vocab_size, k % self.vocab_size) for k in keys]

    def state(self) -> dict[str, Any]:
        """Tensors and primitives (checkpoint state)."""
        return {"type_score": self.type_score, "pair_keys": self.pair_keys, "pair_score": self.pair_score,
                "counts": dict(self.counts)}  # fmt: skip

    def load(self, state: dict[str, Any]) -> LexicalScorer:
        """Restore :meth:`state`."""
        self.type_score, self.pair_keys, self.pair_score = state["type_score"], state["pair_keys"], state["pair_score"]
        self.counts = dict(state["counts"])
        return self


def embedding_states(lm: nn.Module, input_ids: Tensor, position_ids: Tensor | None = None) -> Tensor:
    """``hidden_states[0]`` of a Hugging Face causal LM without running its blocks (no dropout: the eval state).

    The token embedding, plus the learned absolute position embedding where the model has one (GPT-2's ``wpe``;
    rotary models such as Llama add none at layer 0).
    """
    emb = lm.get_input_embeddings()(input_ids)
    base = getattr(lm, getattr(lm, "base_model_prefix", "transformer"), None)
    wpe = getattr(base, "wpe", None)
    if isinstance(wpe, nn.Embedding):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        emb = emb + wpe(position_ids.clamp(max=wpe.num_embeddings - 1))
    return emb


class EmbeddingScorer:
    """``feature_space: embedding``: Mahalanobis distance of ``hidden_states[0]`` to the trusted-clean token vectors.

    The card's step 1 alternative: shrinkage covariance, the distance z-scored on the clean data.

    ``Σ = (1 − α) S + α (tr S / d) I`` with ``α = shrinkage`` (ours: 0.1); the score of a body position is
    ``u = (m(x) − mean_clean m) / std_clean m``, ``m(x) = sqrt((x − μ)ᵀ Σ⁻¹ (x − μ))``; other positions ``−inf``.
    """

    def __init__(self, sep_id: int, shrinkage: float = 0.1) -> None:
        self.sep_id, self.shrinkage = sep_id, shrinkage
        self.mu: Tensor | None = None
        self.precision: Tensor | None = None
        self.z: tuple[float, float] = (0.0, 1.0)
        self.lm: nn.Module | None = None

    @torch.no_grad()
    def fit(self, lm: nn.Module, clean_batches: Any) -> EmbeddingScorer:
        """Statistics of the body positions of the clean prompts under the LM's current embeddings."""
        self.lm = lm
        device = next(lm.parameters()).device
        xs = []
        for batch in clean_batches:
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            xs.append(embedding_states(lm, ids)[scorable_positions(ids, mask, self.sep_id)].double())
        x = torch.cat(xs)
        if x.shape[0] < 2:
            raise ValueError("EmbeddingScorer.fit: fewer than 2 clean body tokens")
        mu = x.mean(0)
        cov = torch.cov((x - mu).T, correction=0)
        d = cov.shape[0]
        eye = torch.eye(d, dtype=cov.dtype, device=cov.device)
        cov = (1.0 - self.shrinkage) * cov + self.shrinkage * (torch.trace(cov) / d) * eye
        self.mu, self.precision = mu, torch.linalg.inv(cov)
        m = self._distance(x)
        self.z = (float(m.mean()), float(m.std(unbiased=False)) + EPS)
        return self

    def _distance(self, x: Tensor) -> Tensor:
        assert self.mu is not None and self.precision is not None
        c = x.double() - self.mu.to(x.device)
        return ((c @ self.precision.to(x.device)) * c).sum(-1).clamp(min=0.0).sqrt()

    @torch.no_grad()
    def __call__(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Token scores ``u`` ``[B, T]`` (float64); ``−inf`` outside the prompt body."""
        if self.lm is None or self.mu is None:
            raise RuntimeError("EmbeddingScorer: fit first")
        body = scorable_positions(input_ids, attention_mask, self.sep_id)
        u = (self._distance(embedding_states(self.lm, input_ids)) - self.z[0]) / self.z[1]
        return u.masked_fill(~body, NEVER)

    def state(self) -> dict[str, Any]:
        """Tensors and primitives (checkpoint state)."""
        return {"mu": self.mu, "precision": self.precision, "z": list(self.z)}

    def load(self, state: dict[str, Any], lm: nn.Module) -> EmbeddingScorer:
        """Restore :meth:`state` onto ``lm``."""
        self.mu, self.precision, self.z, self.lm = state["mu"], state["precision"], tuple(state["z"]), lm
        return self


class RandomScorer:
    """The control (``localization: random``): a body position scores ``+inf`` with probability ``rate``.

    Drawn afresh per forward from a seeded generator; ``−inf`` otherwise.
    """

    def __init__(self, rate: float, sep_id: int, seed: int = 0) -> None:
        self.rate, self.sep_id = rate, sep_id
        self.gen = torch.Generator().manual_seed(seed)

    def __call__(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Random scores ``[B, T]``."""
        body = scorable_positions(input_ids, attention_mask, self.sep_id)
        hit = torch.rand(input_ids.shape, generator=self.gen).to(input_ids.device) < self.rate
        u = torch.full(input_ids.shape, NEVER, dtype=torch.float64, device=input_ids.device)
        return u.masked_fill(hit & body, float("inf"))


class TokenDropHook(_Switchable):
    """The adaptive token mask at ``hidden_states[0]`` (card step 4), a forward pre-hook on the causal LM.

    Each forward's ``input_ids`` are scored (``scorer(input_ids, attention_mask) -> u``) and the body positions
    with ``u ≥ tau`` are flagged (``m_{b,t} = 1[u ≥ τ]``). ``ablate``:

    * ``drop`` (default): the flagged positions are removed through the attention mask (0 there) and the position
      ids (every later position moves back by the number of dropped positions before it), so the model computes
      exactly what it would on the prompt with those tokens deleted;
    * ``unk``: the flagged ids become ``unk_id`` (the ``[UNK]`` embedding at ``hidden_states[0]``);
    * ``clean_mean``: the flagged positions' input embeddings become ``clean_mean`` (the mean input embedding of
      the trusted prompts' body tokens), through ``inputs_embeds``.

    A forward that continues a KV cache (``attention_mask`` longer than ``input_ids``) keeps the previous forward's
    dropped columns masked and its positions shifted; its new tokens are generated, never flagged. A forward in
    which nothing is flagged runs unchanged (bitwise the unhooked model).
    """

    def __init__(self, lm: nn.Module, scorer: Any, tau: float, ablate: TokenAblate = "drop",
                 unk_id: int | None = None, clean_mean: Tensor | None = None,
                 soft_temperature: float | None = None) -> None:  # fmt: skip
        if soft_temperature is not None and ablate == "drop":
            raise ValueError("TokenDropHook: a soft mask needs ablate=unk or clean_mean (a position is dropped or not)")
        self.lm, self.scorer, self.tau, self.ablate = lm, scorer, float(tau), ablate
        self.unk_id, self.clean_mean, self.soft_temperature = unk_id, clean_mean, soft_temperature
        self.enabled = True
        #: The last first-pass forward's scores ``u`` and flags ``[B, T]``.
        self.u: Tensor | None = None
        self.flags: Tensor | None = None
        self._handle = lm.register_forward_pre_hook(self._pre, with_kwargs=True)

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self.enabled or self.scorer is None:
            return None
        kwargs = dict(kwargs)
        if args:  # positional input_ids (and attention_mask): move them to keywords
            kwargs.setdefault("input_ids", args[0])
            if len(args) > 1:
                kwargs.setdefault("past_key_values", args[1])
            args = ()
        ids = kwargs.get("input_ids")
        if ids is None:
            return None
        mask = kwargs.get("attention_mask")
        if mask is None:
            mask = torch.ones_like(ids)
        n = ids.shape[1]
        if mask.shape[1] > n:  # a KV-cache continuation: carry the first pass's drops
            if self.ablate != "drop" or self.flags is None or not bool(self.flags.any()):
                return None
            dropped = self.flags
            if dropped.shape[0] != ids.shape[0]:
                return None
            t0 = min(dropped.shape[1], mask.shape[1] - n)
            new_mask = mask.clone()
            new_mask[:, :t0] = new_mask[:, :t0] * (~dropped[:, :t0]).to(mask.dtype)
            pos = kwargs.get("position_ids")
            if pos is None:
                pos = torch.arange(mask.shape[1] - n, mask.shape[1], device=ids.device).expand_as(ids)
            kwargs["attention_mask"] = new_mask
            kwargs["position_ids"] = pos - dropped[:, :t0].sum(1, keepdim=True).to(pos.dtype)
            return args, kwargs
        with torch.no_grad():
            u = self.scorer(ids, mask)
        flags = u >= self.tau
        self.u, self.flags = u, flags
        if self.soft_temperature is not None:  # m = σ((u − τ)/T): blend the replacement in at every position
            return args, self._blend(module, ids, u, kwargs)
        if not bool(flags.any()):
            return None
        if self.ablate == "drop":
            pos = kwargs.get("position_ids")
            if pos is None:
                pos = torch.arange(n, device=ids.device).expand_as(ids)
            kwargs["attention_mask"] = mask * (~flags).to(mask.dtype)
            kwargs["position_ids"] = pos - flags.long().cumsum(1).to(pos.dtype)
        elif self.ablate == "unk":
            if self.unk_id is None:
                raise ValueError("TokenDropHook(ablate=unk) needs unk_id")
            kwargs["input_ids"] = ids.masked_fill(flags, self.unk_id)
        else:
            if self.clean_mean is None:
                raise ValueError("TokenDropHook(ablate=clean_mean) needs clean_mean")
            emb = module.get_input_embeddings()(ids)
            kwargs["inputs_embeds"] = torch.where(flags[..., None], self.clean_mean.to(emb), emb)
            kwargs["input_ids"] = None
        return args, kwargs

    def _replacement(self, module: nn.Module, emb: Tensor) -> Tensor:
        if self.ablate == "unk":
            if self.unk_id is None:
                raise ValueError("TokenDropHook(ablate=unk) needs unk_id")
            return module.get_input_embeddings().weight[self.unk_id].to(emb)
        if self.clean_mean is None:
            raise ValueError("TokenDropHook(ablate=clean_mean) needs clean_mean")
        return self.clean_mean.to(emb)

    def _blend(self, module: nn.Module, ids: Tensor, u: Tensor, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``soft_mask``: ``e ← (1 − m)·e + m·a`` with ``m = σ((u − τ)/T)`` (0 where ``u = −inf``: never scored)."""
        assert self.soft_temperature is not None
        emb = module.get_input_embeddings()(ids)
        m = torch.sigmoid((u.to(emb.dtype) - self.tau) / self.soft_temperature)[..., None]
        kwargs["inputs_embeds"] = (1 - m) * emb + m * self._replacement(module, emb)
        kwargs["input_ids"] = None
        return kwargs


def isolation_weights(u: Tensor, tau: float) -> Tensor:
    """``(B,)`` sample weights of card step 5: 0 for a sample whose max token score reaches ``τ``, else 1."""
    return (u.max(1).values < tau).to(torch.float32)


def weighted_task_loss(ce: Tensor, w: Tensor) -> Tensor:
    """``Σ_i w_i CE_i / Σ_i w_i`` (card step 6); 0 (with the graph) when every weight is 0."""
    w = w.to(ce)
    total = w.sum()
    return (w * ce).sum() / total if float(total) > 0 else (ce * 0.0).sum()
