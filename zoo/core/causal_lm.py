"""A Hugging Face causal LM behind one plain forward, shared by the zoo's LM methods (repguard, dco).

The tiny random-init GPT-2 the cards specify, or any local Hugging Face causal LM through :meth:`CausalLM.load_hf`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.core.lm import decoder_blocks as decoder_blocks  # re-exported: its old place


class CausalLM(nn.Module):
    """A Hugging Face causal LM behind one forward: ``logits = net(input_ids, attention_mask)``.

    The default is the card's random-init ``GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=48)`` on the
    grammar's word vocabulary; :meth:`load_hf` swaps in any local Hugging Face causal LM (e.g. SmolLM2-135M).

    Args:
        vocab_size: vocabulary size (the datamodule's).
        n_layer: transformer blocks.
        n_embd: hidden size.
        n_head: attention heads.
        n_positions: maximum sequence length.
        dropout: residual, embedding and attention dropout.
        seed: initialisation seed (a forked RNG: the global stream is untouched).
        bos_id: the ``[BOS]`` id in the config (repguard's grammar: 1).
        eos_id: the ``[EOS]`` id (repguard: 3).
        pad_id: the padding id (repguard: 0).
    """

    def __init__(
        self,
        vocab_size: int,
        n_layer: int = 4,
        n_embd: int = 128,
        n_head: int = 4,
        n_positions: int = 48,
        dropout: float = 0.0,
        seed: int = 0,
        bos_id: int = 1,
        eos_id: int = 3,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=vocab_size, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                            n_positions=n_positions, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                            bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id)  # fmt: skip
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.lm: nn.Module = GPT2LMHeadModel(config)

    @property
    def num_layers(self) -> int:
        """Number of decoder blocks (``hidden_states`` has one more entry)."""
        return len(decoder_blocks(self.lm))

    @property
    def hidden_size(self) -> int:
        """Width of the hidden states."""
        config = self.lm.config
        return int(getattr(config, "n_embd", None) or config.hidden_size)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Next-token logits ``[B, T, V]``."""
        return self.lm(input_ids=input_ids, attention_mask=attention_mask).logits

    def load_hf(self, path: Any) -> None:
        """Replace the network by the local Hugging Face causal LM in ``path`` (never downloads)."""
        from transformers import AutoModelForCausalLM

        self.lm = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
