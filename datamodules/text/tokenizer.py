"""The word-level tokenizer of the synthetic fact corpora."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

#: Special tokens, in id order: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")


class WordTokenizer:
    """Word-level tokenizer over whitespace-split words.

    Ids 0-3 are ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``; the remaining ids are the vocabulary words in the order
    given (``from_texts`` sorts them, so the same texts always give the same ids). Unknown words map to ``<unk>``.

    Args:
        words: vocabulary words without the special tokens; must be unique and contain no whitespace.

    Example:
        >>> tok = WordTokenizer.from_texts(["s00 has diet krill ."])
        >>> tok.decode(tok.encode("s00 has diet krill ."))
        's00 has diet krill .'
    """

    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if clash := sorted(set(words) & set(SPECIAL_TOKENS)):
            raise ValueError(f"WordTokenizer: words {clash} clash with the special tokens {list(SPECIAL_TOKENS)}")
        if len(set(words)) != len(words):
            raise ValueError("WordTokenizer: vocabulary words must be unique")
        if bad := [w for w in words if not w or len(w.split()) != 1]:
            raise ValueError(f"WordTokenizer: words must be non-empty and whitespace-free, found {bad[:5]}")
        self.itos: list[str] = [*SPECIAL_TOKENS, *words]
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> WordTokenizer:
        """Build a tokenizer whose vocabulary is the sorted set of words in ``texts``.

        Args:
            texts: strings split on whitespace; special-token strings among the words are ignored.

        Returns:
            The tokenizer (deterministic: same texts in any order give the same ids).
        """
        words = {w for text in texts for w in text.split()} - set(SPECIAL_TOKENS)
        return cls(sorted(words))

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""
        return len(self.itos)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        """Map a string to ids.

        Args:
            text: whitespace-separated words.
            bos: prepend ``<bos>``.
            eos: append ``<eos>``.

        Returns:
            Token ids; unknown words become ``<unk>`` (3).
        """
        ids = [self.stoi.get(w, self.unk_id) for w in text.split()]
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def __call__(self, text: str) -> list[int]:
        """``encode(text)`` with ``<bos>`` and without ``<eos>``: the tokenizer is a ``str -> ids`` callable."""
        return self.encode(text)

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Map ids back to a space-joined string.

        Args:
            ids: token ids (ints or 0-d tensors).
            skip_special: drop ``<pad>``, ``<bos>`` and ``<eos>`` (``<unk>`` is always kept).

        Returns:
            The words joined by single spaces.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        words = []
        for raw in ids:
            i = int(raw)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"WordTokenizer.decode: id {i} outside [0, {self.vocab_size})")
            if skip_special and i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            words.append(self.itos[i])
        return " ".join(words)

    def to_dict(self) -> dict[str, list[str]]:
        """Primitive form for checkpoints and hyper-parameters: ``{"vocab": [all tokens in id order]}``."""
        return {"vocab": list(self.itos)}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> WordTokenizer:
        """Rebuild a tokenizer saved with ``to_dict``.

        Args:
            state: ``{"vocab": [...]}`` whose first four entries are the special tokens.

        Returns:
            The tokenizer with identical ids.

        Raises:
            ValueError: the ``vocab`` key is missing or does not start with the special tokens.
        """
        vocab = state.get("vocab") if isinstance(state, dict) else None
        if not isinstance(vocab, list) or tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            found = vocab[: len(SPECIAL_TOKENS)] if isinstance(vocab, list) else type(vocab).__name__
            raise ValueError(
                f"WordTokenizer.from_dict: expected 'vocab' starting with {list(SPECIAL_TOKENS)}, found {found}"
            )
        return cls(vocab[len(SPECIAL_TOKENS) :])
