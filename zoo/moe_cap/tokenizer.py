"""The character-level tokenizer of the tiny MoE configs (card ``moe_cap``, "Data", ours).

A ``tokenizers`` WordLevel model over the single characters of :data:`CHARS` plus :data:`SPECIAL_TOKENS`, built in code
(no download, no file): every character, spaces included, is one token; any other character is ``<unk>``. Decoding
fuses the tokens back without separators, so ``decode(encode(s)) == s`` for text over :data:`CHARS`.

Choices: left padding (decoder-only ``generate`` continues from the right end of every row), and no special token is
added on encoding (``add_special_tokens=True`` adds nothing): ``generate`` is given explicit ``input_ids`` and needs no
``<bos>``, and prompts then tokenise to exactly their characters. ``<bos>``/``<eos>`` still exist, so a model config can
name their ids (``eos_token_id`` for generation, an ``<eos>`` appended to training answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

#: The characters of the ``arith_em`` prompts and answers (``"Q: 12+34=? A: 46"``), each its own token.
CHARS = "0123456789+-*= ?#QA:"
#: Special tokens, ids 0-3 in this order.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
#: Vocabulary size of :func:`char_tokenizer` (4 special tokens + 20 characters).
CHAR_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(CHARS)


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level ``PreTrainedTokenizerFast`` (vocab :data:`CHAR_VOCAB_SIZE` = 24), built in code.

    Ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, then :data:`CHARS` in order from 4. ``padding_side`` is
    ``"left"``; ``pad_token_id``, ``bos_token_id``, ``eos_token_id`` and ``unk_token_id`` are set. ``save_pretrained``
    and ``AutoTokenizer.from_pretrained(dir, local_files_only=True)`` round-trip (same ids, left padding).

    Returns:
        The tokenizer.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *CHARS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # one piece per character, newlines included ("." would leave a run of newlines as one piece)
    backend.pre_tokenizer = pre_tokenizers.Split(pattern=Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # the default decoder joins tokens with spaces
    pad, bos, eos, unk = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=pad,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        padding_side="left",
    )
