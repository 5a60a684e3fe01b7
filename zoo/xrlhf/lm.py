"""The card's optional tiny-LM path of ``xrlhf``: token rendering, a word tokenizer, the GPT-2 RM and ReMax.

- **Rendering** (``render_world``): the synthetic world's comparisons become token strings. A prompt is four
  bucketized context tokens ``X{d}_B{b}`` (one per prompt dimension, buckets split at ``PROMPT_EDGES``; the top bucket
  of ``x_0`` is exactly the planted region ``x_0 > 1``); a response is ``HELP{0..4} [HARM] VERB{0..4} [STYLE]``
  (help and verbosity in five equal-width buckets, ``HARM``/``STYLE`` present iff the attribute is 1). Pairs, winners,
  the planted corruption and the test prompts' SFT logits and gold rewards are the world's own.
- **Tokenizer** (``WordVocab``): whitespace words, ids ``<pad>`` 0, ``<unk>`` 1, ``<sep>`` 2, ``<eos>`` 3, then the
  sorted corpus words. A sequence is ``prompt <sep> response <eos>``, left-truncated to ``max_length``.
- **Reward model** (``GPT2RewardModel``): a random-init ``GPT2Model`` encoder; ``φ(x, y)`` is the hidden state of the
  final non-pad token (``<eos>``), ``r = θᵀφ`` with a bias-free linear head; Bradley-Terry loss on token pairs.
- **Policy** over a finite candidate set per prompt: the closed form ``argmax_y [s + r̂/β]`` or ``remax_update``.

Pure torch + transformers (numpy for the rendering); no Lightning.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Special tokens, in id order.
SPECIAL_TOKENS = ("<pad>", "<unk>", "<sep>", "<eos>")
PAD_ID, UNK_ID, SEP_ID, EOS_ID = 0, 1, 2, 3
#: Bucket edges of every prompt dimension (``b = #{edges < x}``): bucket 4 of ``x_0`` is the planted ``x_0 > 1``.
PROMPT_EDGES = (-1.0, -0.3, 0.3, 1.0)
#: Equal-width buckets of help and verbosity (``U(0, 1)``).
N_UNIT_BUCKETS = 5


# -- rendering -------------------------------------------------------------------------------------------------------
def prompt_buckets(x: np.ndarray) -> np.ndarray:
    """Bucket ``b ∈ {0..4}`` of each prompt coordinate: ``edges[b-1] < x ≤ edges[b]`` (``x > 1`` is bucket 4)."""
    return np.digitize(np.asarray(x, dtype=np.float64), PROMPT_EDGES, right=True)


def unit_buckets(values: np.ndarray) -> np.ndarray:
    """Equal-width bucket ``⌊5v⌋`` (clipped to 0..4) of values in ``[0, 1]``."""
    return np.clip(np.floor(np.asarray(values, dtype=np.float64) * N_UNIT_BUCKETS), 0, N_UNIT_BUCKETS - 1).astype(int)


def render_prompt(x: np.ndarray) -> str:
    """``X0_B{b0} X1_B{b1} ...`` for one prompt vector ``x``."""
    return " ".join(f"X{d}_B{b}" for d, b in enumerate(prompt_buckets(x)))


def render_response(attrs: np.ndarray) -> str:
    """``HELP{b} [HARM] VERB{b} [STYLE]`` for one attribute vector ``(help, harm, verbosity, style)``."""
    help_, harm, verb, style = (float(a) for a in attrs)
    words = [f"HELP{unit_buckets(help_)}"] + ["HARM"] * (harm > 0.5) + [f"VERB{unit_buckets(verb)}"]
    return " ".join(words + ["STYLE"] * (style > 0.5))


@dataclass
class PreferenceTexts:
    """Preference data as strings (the world rendered, or the jsonl files).

    Attributes:
        prompts: ``n`` training prompts.
        chosen: ``n`` winning responses.
        rejected: ``n`` losing responses.
        corrupted: ``(n,)`` bool ground truth of the planted pairs, or None when unknown.
        test_prompts: ``m`` test prompts.
        test_responses: ``m`` lists of the same number ``M`` of candidate responses.
        sft_logits: ``(m, M)`` SFT policy logits.
        r_eval: ``(m, M)`` evaluation rewards (the world: the gold reward ``r*``).
    """

    prompts: list[str]
    chosen: list[str]
    rejected: list[str]
    corrupted: np.ndarray | None
    test_prompts: list[str]
    test_responses: list[list[str]]
    sft_logits: np.ndarray
    r_eval: np.ndarray

    def corpus(self) -> Iterable[str]:
        """Every string, for the vocabulary."""
        yield from self.prompts
        yield from self.chosen
        yield from self.rejected
        yield from self.test_prompts
        for responses in self.test_responses:
            yield from responses


def render_world(world: object) -> PreferenceTexts:
    """Token strings of a ``zoo.xrlhf.world.PreferenceWorld``: same pairs, same winners, same corruption.

    Raises:
        ValueError: the world lacks the raw prompts and attributes (built by an old ``make_world``).
    """
    if getattr(world, "attrs", None) is None or getattr(world, "test_attrs", None) is None:
        raise ValueError("render_world: the world has no raw prompts/attributes; build it with zoo.xrlhf.world")
    rows = np.arange(len(world.prompts))
    prompts = [render_prompt(x) for x in world.prompts]
    chosen = [render_response(a) for a in world.attrs[rows, world.winners]]
    rejected = [render_response(a) for a in world.attrs[rows, world.losers]]
    test_prompts = [render_prompt(x) for x in world.test_prompts]
    test_responses = [[render_response(a) for a in cands] for cands in world.test_attrs]
    return PreferenceTexts(prompts=prompts, chosen=chosen, rejected=rejected, corrupted=world.corrupted.copy(),
                           test_prompts=test_prompts, test_responses=test_responses,
                           sft_logits=world.sft_logits.copy(), r_eval=world.r_star)  # fmt: skip


# -- tokenizer -------------------------------------------------------------------------------------------------------
class WordVocab:
    """Deterministic whitespace-word tokenizer: the specials (``<pad>`` 0), then the sorted words of the corpus.

    Args:
        words: vocabulary words (unique, no whitespace, none of the special tokens).

    Example:
        >>> vocab = WordVocab.from_texts(["X0_B1 HELP2", "HARM"])
        >>> vocab.decode(vocab.encode("HARM X0_B1"))
        'HARM X0_B1'
    """

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if clash := sorted(set(words) & set(SPECIAL_TOKENS)):
            raise ValueError(f"WordVocab: words {clash} clash with the special tokens {list(SPECIAL_TOKENS)}")
        if len(set(words)) != len(words) or any(not w or len(w.split()) != 1 for w in words):
            raise ValueError("WordVocab: words must be unique, non-empty and whitespace-free")
        self.itos: list[str] = [*SPECIAL_TOKENS, *words]
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> WordVocab:
        """The vocabulary of ``texts`` (sorted, so any order of the same texts gives the same ids)."""
        return cls(sorted({w for text in texts for w in text.split()} - set(SPECIAL_TOKENS)))

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return len(self.itos)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        """Ids of the whitespace words of ``text`` (unknown words: ``<unk>``)."""
        return [self.stoi.get(w, UNK_ID) for w in text.split()]

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Words of ``ids`` joined by spaces (specials other than ``<unk>`` dropped when ``skip_special``)."""
        words = []
        for raw in ids:
            i = int(raw)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"WordVocab.decode: id {i} outside [0, {self.vocab_size})")
            if not (skip_special and i in (PAD_ID, SEP_ID, EOS_ID)):
                words.append(self.itos[i])
        return " ".join(words)

    def encode_pair(self, prompt: str, response: str, max_length: int) -> list[int]:
        """``prompt <sep> response <eos>``, keeping the last ``max_length`` ids (the response end carries φ)."""
        ids = [*self.encode(prompt), SEP_ID, *self.encode(response), EOS_ID]
        return ids[-max_length:]


def trim(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Drop the all-padding columns at the right of a right-padded batch."""
    width = max(int(mask.sum(1).max()), 1) if len(mask) else 1
    return ids[:, :width], mask[:, :width]


# -- reward model ----------------------------------------------------------------------------------------------------
class GPT2RewardModel(nn.Module):
    """``r(x, y) = θᵀφ(x, y)``: ``φ`` is a random-init GPT-2's final non-pad hidden state, ``θ`` a bias-free head.

    Args:
        vocab_size: tokenizer size.
        n_layer: transformer blocks (the card: 2).
        n_embd: hidden size = feature dimension ``d`` (the card: 64).
        n_head: attention heads (the card: 4).
        n_positions: longest sequence.
        seed: initialisation seed (a forked RNG: the global stream is untouched).
    """

    def __init__(self, vocab_size: int, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_positions: int = 64,
                 seed: int = 0) -> None:  # fmt: skip
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        if n_embd % n_head:
            raise ValueError(f"GPT2RewardModel: n_embd={n_embd} is not divisible by n_head={n_head}")
        config = GPT2Config(vocab_size=vocab_size, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                            n_positions=n_positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                            bos_token_id=None, eos_token_id=EOS_ID, pad_token_id=PAD_ID)  # fmt: skip
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = GPT2Model(config)
            self.head = nn.Linear(n_embd, 1, bias=False)
        self.n_positions = n_positions

    def features(self, ids: Tensor, mask: Tensor) -> Tensor:
        """``φ``: the hidden state of each row's final non-pad token, ``(B, T)`` right-padded -> ``(B, d)``."""
        if ids.shape[1] > self.n_positions:
            raise ValueError(f"GPT2RewardModel: sequences of {ids.shape[1]} tokens exceed n_positions="
                             f"{self.n_positions}; raise --model.init_args.n_positions or lower "
                             f"--data.init_args.max_length")  # fmt: skip
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        positions = torch.arange(mask.shape[1], device=mask.device)
        last = (mask.long() * positions).argmax(dim=1)  # index of the final 1 in each row
        return hidden[torch.arange(len(ids), device=ids.device), last]

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Rewards ``θᵀφ`` of a batch, ``(B,)``."""
        return self.head(self.features(ids, mask)).squeeze(-1)

    @property
    def theta(self) -> Tensor:
        """The head's weights ``θ``, ``(d,)``."""
        return self.head.weight.detach()[0]


def pair_rewards(model: GPT2RewardModel, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """``(r(chosen), r(rejected))`` of a pair batch from one forward over both halves."""
    width = max(batch["chosen_ids"].shape[1], batch["rejected_ids"].shape[1])
    ids = torch.cat(
        [
            F.pad(batch["chosen_ids"], (0, width - batch["chosen_ids"].shape[1]), value=PAD_ID),
            F.pad(batch["rejected_ids"], (0, width - batch["rejected_ids"].shape[1]), value=PAD_ID),
        ]
    )
    mask = torch.cat([F.pad(batch["chosen_mask"], (0, width - batch["chosen_mask"].shape[1])),
                      F.pad(batch["rejected_mask"], (0, width - batch["rejected_mask"].shape[1]))])  # fmt: skip
    rewards = model(ids, mask)
    n = batch["chosen_ids"].shape[0]
    return rewards[:n], rewards[n:]


def bt_loss(r_chosen: Tensor, r_rejected: Tensor) -> Tensor:
    """Mean Bradley-Terry loss ``−log σ(r(chosen) − r(rejected))`` (``softplus(−z)``, the stable form)."""
    return F.softplus(-(r_chosen - r_rejected)).mean()


@torch.no_grad()
def score(model: GPT2RewardModel, ids: Tensor, mask: Tensor, batch_size: int = 512) -> tuple[Tensor, Tensor]:
    """``(φ, r)`` of every row in eval mode, in chunks of ``batch_size`` (the same chunks give the same numbers)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    phis, rewards = [], []
    for start in range(0, len(ids), batch_size):
        chunk_ids, chunk_mask = trim(ids[start : start + batch_size], mask[start : start + batch_size])
        phi = model.features(chunk_ids.to(device), chunk_mask.to(device))
        phis.append(phi)
        rewards.append(model.head(phi).squeeze(-1))
    model.train(was_training)
    return torch.cat(phis).cpu(), torch.cat(rewards).cpu()


# -- policy ------------------------------------------------------------------------------------------------------------
def closed_form_logits(sft_logits: Tensor, rewards: Tensor, beta: float) -> Tensor:
    """Logits of the KL-regularised optimum ``π ∝ π_sft·exp(r̂/β)``: ``s + r̂/β``."""
    return sft_logits + rewards / beta


def remax_update(logits: Tensor, rewards: Tensor, ref_logits: Tensor | None = None, kl_coef: float = 0.1,
                 lr: float = 1.0, steps: int = 100, num_samples: int = 4,
                 generator: torch.Generator | None = None) -> Tensor:  # fmt: skip
    """ReMax (REINFORCE with the greedy baseline) on per-prompt logits over a finite candidate set.

    For every prompt ``x`` with candidates ``y_1..y_M`` and ``π_θ(·|x) = softmax(θ_x)``, each step ascends

        ``J(θ) = E_{y∼π_θ}[r(x, y)] − κ·KL(π_θ(·|x) ‖ π_ref(·|x))``

    with ``ĝ = (1/K) Σ_k (r(x, y_k) − r(x, ȳ)) ∇ log π_θ(y_k|x) − κ ∇ KL``, ``y_k ∼ π_θ`` (``K = num_samples``) and
    ``ȳ = argmax_y π_θ(y|x)`` (ReMax's baseline: the reward of the greedy response); over a finite set the KL term is
    exact. Plain gradient ascent ``θ ← θ + lr·ĝ``. The exact optimum is ``π_ref·exp(r/κ)``.

    Args:
        logits: ``(m, M)`` initial logits (the previous policy).
        rewards: ``(m, M)`` reward of every candidate.
        ref_logits: ``(m, M)`` logits of ``π_ref``; None: the initial logits (KL to the previous policy).
        kl_coef: ``κ``.
        lr: step size on the logits.
        steps: ascent steps.
        num_samples: ``K`` sampled candidates per prompt and step.
        generator: torch RNG of the samples (None: a fresh one seeded 0).

    Returns:
        The updated logits ``(m, M)`` (detached).
    """
    if logits.shape != rewards.shape or logits.ndim != 2:
        raise ValueError(f"remax_update: logits {tuple(logits.shape)} and rewards {tuple(rewards.shape)} must both "
                         f"be (m, M)")  # fmt: skip
    generator = torch.Generator().manual_seed(0) if generator is None else generator
    rewards = rewards.detach().to(torch.float64)
    theta = logits.detach().to(torch.float64).clone().requires_grad_(True)
    ref_log = F.log_softmax((logits if ref_logits is None else ref_logits).detach().to(torch.float64), dim=-1)
    rows = torch.arange(len(rewards)).unsqueeze(1)
    for _ in range(steps):
        log_pi = F.log_softmax(theta, dim=-1)
        with torch.no_grad():
            samples = torch.multinomial(log_pi.exp(), num_samples, replacement=True, generator=generator)
            greedy = log_pi.argmax(dim=-1, keepdim=True)
            advantage = rewards[rows, samples] - rewards[rows, greedy]
        surrogate = (advantage * log_pi[rows, samples]).mean(dim=1).sum()
        kl = (log_pi.exp() * (log_pi - ref_log)).sum()
        (grad,) = torch.autograd.grad(surrogate - kl_coef * kl, theta)
        with torch.no_grad():
            theta += lr * grad
    return theta.detach().to(logits.dtype)
