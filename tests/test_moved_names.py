"""Shared code moved down into ``zoo.core``: one implementation each, and every old name still importable.

The old places (a user's import, a saved config's class path) keep working as thin re-exports of the new objects.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

MOVED = [
    ("zoo.core.pretrained", "cache_dir", "zoo.core.cache", "cache_dir"),
    ("datamodules.ltsf", "cache_root", "zoo.core.cache", "cache_root"),
    ("zoo.uam.lm", "pad_batch", "zoo.core.lm", "pad_batch"),
    ("zoo.uam.lm", "resolve_hf_path", "zoo.core.lm", "resolve_hf_path"),
    ("zoo.uam.lm", "load_smollm2", "zoo.core.lm", "load_smollm2"),
    ("zoo.uam.lm", "SMOLLM2_PIP", "zoo.core.lm", "SMOLLM2_PIP"),
    ("zoo.core.causal_lm", "decoder_blocks", "zoo.core.lm", "decoder_blocks"),
    ("datamodules.lm_facts", "locate_smollm2", "zoo.core.lm", "locate_smollm2"),
    ("datamodules.lm_facts", "SMOLLM2_PIP", "zoo.core.lm", "SMOLLM2_PIP"),
    ("datamodules.lm_facts", "SMOLLM2_GGUF", "zoo.core.lm", "SMOLLM2_GGUF"),
    ("zoo.uam.model", "cosine_rho", "zoo.core.gradients", "cosine_rho"),
    ("zoo.uam.model", "dot", "zoo.core.gradients", "dot"),
    ("zoo.uam.model", "flat", "zoo.core.gradients", "flat"),
    ("zoo.uam.model", "global_norm", "zoo.core.gradients", "global_norm"),
    ("zoo.uam.model", "projection_coefficients", "zoo.core.gradients", "projection_coefficients"),
    ("zoo.uam.model", "project_retain_grad", "zoo.core.gradients", "project_retain_grad"),
    ("zoo.uam.module", "UnlearnableModule", "callbacks.unlearning", "UnlearnableModule"),
]


@pytest.mark.parametrize(("old", "name", "new", "new_name"), MOVED)
def test_old_names_are_the_moved_objects(old: str, name: str, new: str, new_name: str) -> None:
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), new_name)


def test_old_class_path_of_unlearnable_module_still_subclasses() -> None:
    """A user's subclass of the old path is driven by the callback as before."""
    from callbacks.unlearning import Unlearnable
    from zoo.uam.module import UnlearnableModule, UnlearnClassifierModule
    from zoo.xrlhf.module import XRLHFModule

    assert issubclass(UnlearnClassifierModule, UnlearnableModule) and issubclass(XRLHFModule, UnlearnableModule)
    assert isinstance(XRLHFModule(input_dim=3), Unlearnable)


def test_cache_dir_reads_zoo_cache_and_creates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from zoo.core.cache import cache_dir, cache_root

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c" and not (tmp_path / "c").exists()
    assert cache_dir("a", "b") == tmp_path / "c" / "a" / "b" and (tmp_path / "c" / "a" / "b").is_dir()
    monkeypatch.delenv("ZOO_CACHE")
    assert cache_root() == Path.home() / ".cache" / "zoo"


def test_pad_batch_serves_both_former_copies() -> None:
    """uam's ``pad_batch`` (errors on no/empty sequences) and xrlhf's ``pad_right`` (a fixed ``width``) in one."""
    from zoo.core.lm import pad_batch

    ids, mask = pad_batch([[5, 6, 7], [8]], pad_id=9)
    assert ids.tolist() == [[5, 6, 7], [8, 9, 9]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long
    ids, mask = pad_batch([[5, 6], [8]], width=4)
    assert ids.tolist() == [[5, 6, 0, 0], [8, 0, 0, 0]] and mask.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0]]
    for bad in ([], [[1], []]):
        with pytest.raises(ValueError, match="at least one sequence and no empty sequence"):
            pad_batch(bad)
    with pytest.raises(ValueError, match="width=1 is below the longest sequence"):
        pad_batch([[1, 2]], width=1)


def test_decoder_blocks_finds_the_same_module_list_for_gpt2_and_llama() -> None:
    """The former ``zoo.uam.lm._decoder_layers`` (``get_decoder().layers``) and ``core.causal_lm`` paths agree."""
    pytest.importorskip("transformers")
    from zoo.core.causal_lm import CausalLM
    from zoo.core.lm import decoder_blocks
    from zoo.uam.lm import tiny_llama

    llama = tiny_llama(vocab_size=12, hidden=8, layers=2, heads=2, intermediate=16)
    assert decoder_blocks(llama) is llama.get_decoder().layers
    gpt2 = CausalLM(vocab_size=12, n_layer=2, n_embd=8, n_head=2, n_positions=8)
    assert decoder_blocks(gpt2.lm) is gpt2.lm.transformer.h and gpt2.num_layers == 2
    with pytest.raises(ValueError, match="no decoder blocks found"):
        decoder_blocks(torch.nn.Linear(2, 2))


def test_core_lm_imports_no_transformers() -> None:
    import subprocess
    import sys

    code = "import sys, zoo.core.lm, datamodules.lm_facts; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
