"""RepGuard-style maths (card ``repguard``): localisation scores, the adaptive mask, the decomposition and the losses.

Pure torch, no lightning. Everything here is the card's reconstruction of an abstract-level description (no code or
method section of the paper is public): the formulas are the card's "Method (precise)" section, and each uncertain
choice is an argument whose default is the card's.

Shapes: hidden states ``h`` are ``[B, T, d]``; ``valid`` is a ``[B, T]`` bool mask of the positions a statistic runs
over (the prompt tokens for localisation, every non-pad token for the independence term).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.core.causal_lm import CausalLM, decoder_blocks

#: The card's victim LM (the zoo's tiny GPT-2 wrapper; the name this method's code and configs use).
InstructionLM = CausalLM

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


class HiddenStateHook:
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
    def disabled(self) -> Iterator[None]:
        """Run the wrapped forwards without the decomposition (the unmasked reference model)."""
        previous, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = previous

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Keep the hidden state of the forwards run inside the block in ``self.h``."""
        previous, self.record = self.record, True
        try:
            yield
        finally:
            self.record = previous

    def remove(self) -> None:
        """Detach the hook from the model."""
        self._handle.remove()


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
