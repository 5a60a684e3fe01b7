"""The noisy modular-addition task of the dco card: noise table, examples, character vocabulary."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: The addition task's token ids (card).
PLUS, EQUALS, EOS, BOS = 10, 11, 12, 13
ADDITION_VOCAB = 14


def noise_table(modulus: int, seed: int) -> np.ndarray:
    """``ξ(a, b) ∈ {0, 1, 2}`` for every ordered pair, drawn with seed ``123 + seed`` (card)."""
    return np.random.default_rng(123 + seed).integers(0, 3, size=(modulus, modulus))


def addition_train_size(modulus: int, train_frac: float) -> int:
    """Training pairs among the ``modulus²`` ordered pairs; an empty train or test split is an error naming it."""
    n_pairs = modulus * modulus
    n_train = int(train_frac * n_pairs)
    if not 0 < n_train < n_pairs:
        raise ValueError(f"--data.init_args.train_frac={train_frac}: {n_train} of the {n_pairs} pairs of modulus "
                         f"{modulus} would train; expected a fraction leaving both splits non-empty")  # fmt: skip
    return n_train


def addition_examples(modulus: int = 47, seed: int = 0, noise: bool = True, train_frac: float = 0.5,
                      ) -> dict[str, list[tuple[list[int], list[int]]]]:  # fmt: skip
    """``{"train", "test"}`` lists of ``(prompt ids, response ids)`` for every ordered pair ``(a, b)``."""
    if modulus > 100:
        raise ValueError(f"--data.init_args.modulus={modulus}: two-digit operands need modulus <= 100")
    xi = noise_table(modulus, seed) if noise else np.zeros((modulus, modulus), dtype=np.int64)
    pairs = [(a, b) for a in range(modulus) for b in range(modulus)]
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_train = addition_train_size(modulus, train_frac)
    out: dict[str, list[tuple[list[int], list[int]]]] = {"train": [], "test": []}
    for rank, i in enumerate(order):
        a, b = pairs[i]
        c = int((a + b + xi[a, b]) % modulus)
        prompt = [BOS, a // 10, a % 10, PLUS, b // 10, b % 10, EQUALS]
        out["train" if rank < n_train else "test"].append((prompt, [c // 10, c % 10, EOS]))
    return out


class CharVocab:
    """Character vocabulary of prompt/answer strings: ``[PAD]=0 [BOS]=1 [EOS]=2 [SEP]=3``, then sorted characters."""

    pad_id, bos_id, eos_id, sep_id = 0, 1, 2, 3

    def __init__(self, texts: Sequence[str]) -> None:
        self.chars = sorted({ch for t in texts for ch in t})
        self.index = {ch: i + 4 for i, ch in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars) + 4

    def encode(self, text: str, where: str) -> list[int]:
        """Character ids of ``text``; ``where`` names the record in the error for an unknown character."""
        missing = sorted({ch for ch in text if ch not in self.index})
        if missing:
            raise ValueError(f"{where}: characters {missing} are not in the vocabulary built from the data files")
        return [self.index[ch] for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        """The characters of ``ids`` (special ids dropped)."""
        return "".join(self.chars[i - 4] for i in ids if i >= 4)
