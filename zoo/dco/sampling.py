"""Batched sampling for pass@k, and the sampled check of the exact pass@k of a unique correct response.

Card ``dco``, "Performance": one forward per decoding step for all samples of all problems.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn


@torch.no_grad()
def sample_responses(lm: nn.Module, prompts: Sequence[Sequence[int]], n: int, max_new_tokens: int, eos_id: int,
                     temperature: float = 1.0, seed: int = 0,
                     batch_rows: int = 8192) -> list[list[list[int]]]:  # fmt: skip
    """``n`` completions of every prompt, sampled at ``temperature``; each is cut after its first ``eos_id``.

    Prompts of equal length are decoded together (no padding, so no position shift), ``batch_rows`` sequences per
    forward, with the Hugging Face KV cache: one forward per new token.

    Args:
        lm: a Hugging Face causal LM (``lm(input_ids=..., past_key_values=..., use_cache=True)``).
        prompts: token ids per problem.
        n: samples per prompt.
        max_new_tokens: decoding steps.
        eos_id: the end-of-sequence id.
        temperature: softmax temperature (> 0).
        seed: the sampling generator's seed.
        batch_rows: sequences per forward.

    Returns:
        ``out[i][s]``: the ``s``-th completion of prompt ``i`` (without the prompt; with its EOS when one came).
    """
    if temperature <= 0:
        raise ValueError(f"sample_responses: temperature={temperature} must be > 0")
    device = next(lm.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    by_len: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        by_len[len(p)].append(i)
    out: list[list[list[int]]] = [[] for _ in prompts]
    was_training = lm.training
    lm.eval()
    try:
        for length in sorted(by_len):
            rows = [i for i in by_len[length] for _ in range(n)]
            for start in range(0, len(rows), batch_rows):
                chunk = rows[start : start + batch_rows]
                ids = torch.tensor([list(prompts[i]) for i in chunk], dtype=torch.long, device=device)
                tokens = _decode(lm, ids, max_new_tokens, eos_id, temperature, gen)
                for row, i in enumerate(chunk):
                    seq = tokens[row].tolist()
                    out[i].append(seq[: seq.index(eos_id) + 1] if eos_id in seq else seq)
    finally:
        lm.train(was_training)
    return out


def _decode(lm: nn.Module, ids: Tensor, steps: int, eos_id: int, temperature: float,
            gen: torch.Generator) -> Tensor:  # fmt: skip
    # transformers 5.x renamed ``past_key_values`` to ``cache`` (the old name warns until its removal)
    key = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"
    past, new = None, []
    cur = ids
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for _ in range(steps):
        res = lm(input_ids=cur, use_cache=True, **{key: past})
        past = getattr(res, key)
        probs = torch.softmax(res.logits[:, -1].double() / temperature, -1)
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
        new.append(nxt)
        done |= nxt == eos_id
        if bool(done.all()):
            break
        cur = nxt[:, None]
    return torch.stack(new, 1)


def sampled_correct(lm: nn.Module, prompts: Sequence[Sequence[int]], check: Callable[[int, list[int]], bool], n: int,
                    max_new_tokens: int, eos_id: int, temperature: float = 1.0, seed: int = 0) -> Tensor:  # fmt: skip
    """``[P, n]`` bool: whether each sampled completion of prompt ``i`` passes ``check(i, completion)``."""
    samples = sample_responses(lm, prompts, n, max_new_tokens, eos_id, temperature, seed)
    return torch.tensor([[check(i, s) for s in row] for i, row in enumerate(samples)], dtype=torch.bool)
