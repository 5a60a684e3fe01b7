"""Card ``moe_cap`` test 14 (Data): the ``arith_em`` generator, the GSM8K reader, extraction, EM/F1, the tokenizer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from datamodules.math_text.arith_em import arith_em_items, arith_em_splits
from datamodules.math_text.gsm8k import read_gsm8k_jsonl
from datamodules.math_text.prompt_datamodule import MoEPromptDataModule
from zoo.moe_cap.answers import em_f1, exact_match, extract_prediction, f1, gsm8k_gold, normalise
from zoo.moe_cap.tokenizer import CHAR_VOCAB_SIZE, CHARS, char_tokenizer

PROMPT_RE = re.compile(r"Q: (\d+)([+\-*])(\d+)=\? A:")


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _good(q: str = "How many?", a: str = "2 + 2 = 4\n#### 4") -> str:
    return json.dumps({"question": q, "answer": a})


# -- arith_em generator ----------------------------------------------------------------------------------------------
def test_arith_em_deterministic_and_seed_sensitive():
    """Catches a generator seeded from global state (different items per process) or one that ignores ``seed``."""
    a = arith_em_items(64, 2, ["+", "-"], 0)
    assert a == arith_em_items(64, 2, ["+", "-"], 0)
    assert a != arith_em_items(64, 2, ["+", "-"], 1)
    assert len(a) == 64 and all(set(item) == {"prompt", "gold"} for item in a)


def test_arith_em_golds_match_prompts():
    """Catches wrong golds (swapped operands, abs() of a difference, wrong op) or operands outside [0, 10^digits)."""
    for digits, ops in ((2, ["+", "-"]), (3, ["+", "-", "*"]), (1, ["*"])):
        items = arith_em_items(200, digits, ops, 3)
        seen_ops = set()
        for item in items:
            m = PROMPT_RE.fullmatch(item["prompt"])
            assert m, item["prompt"]
            a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
            assert 0 <= a < 10**digits and 0 <= b < 10**digits
            assert item["gold"] == str({"+": a + b, "-": a - b, "*": a * b}[op])
            seen_ops.add(op)
        assert seen_ops == set(ops)
    assert any(item["gold"].startswith("-") for item in arith_em_items(64, 2, ["-"], 0))  # negatives allowed


def test_eval_items_independent_of_n_train():
    """Catches training items drawn before the eval items (changing ``n_train`` would change the eval set)."""
    eval_a, train_a = arith_em_splits(16, 8, 2, ["+", "-"], 0)
    eval_b, train_b = arith_em_splits(16, 100, 2, ["+", "-"], 0)
    assert eval_a == eval_b == arith_em_items(16, 2, ["+", "-"], 0)
    assert train_b[:8] == train_a and len(train_b) == 100
    assert arith_em_items(10, 2, ["+"], 5) == arith_em_items(30, 2, ["+"], 5)[:10]


# -- GSM8K reader ----------------------------------------------------------------------------------------------------
def test_gsm8k_reader_reads_records(tmp_path: Path):
    """Catches a wrong prompt template fill, a gold taken from the first ``####``, or blank lines read as records."""
    path = _write_jsonl(
        tmp_path / "g.jsonl",
        [_good("Two and two?", "2+2=4\n#### 4"), "", _good("Big?", "a #### b\n#### 1,234"), "   "],
    )
    items = read_gsm8k_jsonl(path)
    assert items == [
        {"prompt": "Question: Two and two?\nAnswer:", "gold": "4"},
        {"prompt": "Question: Big?\nAnswer:", "gold": "1234"},
    ]
    renamed = _write_jsonl(tmp_path / "r.jsonl", [json.dumps({"q": "x {y}", "a": "#### 7"})])
    assert read_gsm8k_jsonl(renamed, "q", "a", "<{q}>") == [{"prompt": "<x {y}>", "gold": "7"}]


def test_gsm8k_bad_json_names_line_3(tmp_path: Path):
    """Catches errors that do not name the file and the 1-based line (or count blank lines wrongly)."""
    path = _write_jsonl(tmp_path / "bad.jsonl", [_good(), _good(), '{"question": "x", "answer": '])
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 3: invalid JSON"):
        read_gsm8k_jsonl(path)
    path = _write_jsonl(tmp_path / "list.jsonl", [_good(), "", "[1, 2]"])
    with pytest.raises(ValueError, match=r"list\.jsonl: line 3: expected a JSON object.*found list"):
        read_gsm8k_jsonl(path)


def test_gsm8k_missing_marker(tmp_path: Path):
    """Catches a gold silently taken from the whole answer (or an empty gold) when ``####`` is missing."""
    path = _write_jsonl(tmp_path / "m.jsonl", [_good(), _good(a="the answer is 4")])
    with pytest.raises(ValueError, match=r"m\.jsonl: line 2: key 'answer' has no '####'"):
        read_gsm8k_jsonl(path)
    path = _write_jsonl(tmp_path / "e.jsonl", [_good(a="4 ####   ")])
    with pytest.raises(ValueError, match=r"e\.jsonl: line 1: .*nothing after the last '####'"):
        read_gsm8k_jsonl(path)


def test_gsm8k_missing_key_nonstring_empty(tmp_path: Path):
    """Catches a KeyError/TypeError without location, a number silently str()-ed, and an empty file read as no items."""
    path = _write_jsonl(tmp_path / "k.jsonl", [_good(), json.dumps({"question": "q", "solution": "#### 1"})])
    with pytest.raises(
        ValueError, match=r"k\.jsonl: line 2: missing key 'answer'.*found keys \['question', 'solution'\]"
    ):
        read_gsm8k_jsonl(path)
    path = _write_jsonl(tmp_path / "n.jsonl", [json.dumps({"question": "q", "answer": 4})])
    with pytest.raises(ValueError, match=r"n\.jsonl: line 1: key 'answer': expected str, found int"):
        read_gsm8k_jsonl(path)
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.jsonl: no records"):
        read_gsm8k_jsonl(path)


# -- extraction, normalisation, EM/F1 --------------------------------------------------------------------------------
def test_gsm8k_gold():
    """Catches a gold taken after the first ``####`` or keeping thousands commas."""
    assert gsm8k_gold("x #### 3\n#### 1,234 ") == "1234"
    assert gsm8k_gold("#### 1,234,567") == "1234567"
    assert gsm8k_gold("no marker") is None


def test_extract_prediction():
    """Catches extraction that keeps commas, trailing text or periods, or picks the first number instead of the last."""
    assert extract_prediction("#### 1,234") == "1234"
    assert extract_prediction("#### 1,234\nfoo") == "1234"
    assert extract_prediction("#### 5 then #### 6 apples") == "6"
    assert extract_prediction("The answer is 42.") == "42"
    assert extract_prediction("the Answer is $1,000 dollars") == "1000"
    assert extract_prediction("answer is 1; no, the answer is -3.5.") == "-3.5"
    assert extract_prediction("The answer is Paris\nmore") == "Paris"
    assert extract_prediction("I think 3, then 7, so 12,345 total") == "12345"
    assert extract_prediction("so -7") == "-7"
    assert extract_prediction("12-3") == "3"  # a minus after a digit is an operator
    assert extract_prediction("  no numbers here ") == "no numbers here"
    assert extract_prediction(" 3 and 4 ", fallback_last_number=False) == "3 and 4"


def test_normalise_and_exact_match():
    """Catches string-only comparison ("42.0" != "42"), kept ``$``/commas/periods, and float rounding of big ints."""
    assert normalise("  $1,234.  ") == "1234"
    assert normalise("a \n  b") == "a b"
    assert exact_match("42.0", "42")
    assert exact_match("-3", "-3.00")
    assert exact_match("$1,000.", "1000")
    assert exact_match(" Paris ", "Paris")
    assert not exact_match("paris", "Paris")
    assert not exact_match("41", "42")
    assert not exact_match("100000000000000000001", "100000000000000000000")  # float() would call these equal


def test_f1_hand_cases():
    """Catches set (not multiset) overlap, precision/recall swapped into a non-F1 mean, and wrong empty conventions."""
    assert f1("the cat sat", "the cat") == pytest.approx(0.8)
    assert f1("the the", "the") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1("42.0", "42") == 1.0
    assert f1("dog", "cat") == 0.0
    assert f1("", "") == 1.0 and f1("", "x") == 0.0 and f1("x", "") == 0.0
    em, f = em_f1(["42", "the cat sat", "no"], ["42.0", "the cat", "yes"])
    assert em == pytest.approx(1 / 3) and f == pytest.approx((1 + 0.8 + 0) / 3)
    with pytest.raises(ValueError, match="2 predictions but 1 golds"):
        em_f1(["a", "b"], ["a"])


# -- tokenizer -------------------------------------------------------------------------------------------------------
def test_char_tokenizer_round_trip():
    """Catches decode inserting spaces between characters, spaces dropped by the pre-tokenizer, or right padding."""
    tok = char_tokenizer()
    assert len(tok) == CHAR_VOCAB_SIZE == 24
    s = "Q: 12+34=? A: 46"
    ids = tok(s)["input_ids"]
    assert len(ids) == len(s)  # one token per character, no special tokens added
    assert tok.decode(ids) == s
    assert tok(CHARS)["input_ids"] == list(range(4, 24))
    assert tok("Qx")["input_ids"] == [tok.convert_tokens_to_ids("Q"), tok.unk_token_id]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    batch = tok(["Q: 1", "Q: 123"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, :2].tolist() == [0, 0] and batch["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1]


def test_char_tokenizer_save_load(tmp_path: Path):
    """Catches a tokenizer that cannot be reloaded offline, or loses left padding / special ids / the fuse decoder."""
    from transformers import AutoTokenizer

    tok = char_tokenizer()
    tok.save_pretrained(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok", local_files_only=True)
    s = "Q: 98-7=? A: 91"
    assert loaded(s)["input_ids"] == tok(s)["input_ids"]
    assert loaded.decode(loaded(s)["input_ids"]) == s
    assert loaded.padding_side == "left" and len(loaded) == 24
    assert (loaded.pad_token_id, loaded.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)


# -- datamodule ------------------------------------------------------------------------------------------------------
def test_datamodule_loaders():
    """Catches shuffled eval loaders, wrong batch keys/lengths, an unseeded train shuffle, eval items != generator."""
    dm = MoEPromptDataModule(n_items=10, n_train=20, batch_size=4)
    dm.setup("validate")
    assert dm.eval_items == arith_em_items(10, 2, ["+", "-"], 0)
    for loader in (dm.val_dataloader(), dm.test_dataloader(), dm.predict_dataloader()):
        batches = list(loader)
        assert [len(b["prompt"]) for b in batches] == [4, 4, 2]
        assert all(set(b) == {"prompt", "gold", "index"} for b in batches)
        index = torch.cat([b["index"] for b in batches])
        assert index.dtype == torch.long and index.tolist() == list(range(10))
        assert [g for b in batches for g in b["gold"]] == [item["gold"] for item in dm.eval_items]
    train = [b["index"].tolist() for b in dm.train_dataloader()]
    again = [b["index"].tolist() for b in MoEPromptDataModule(n_items=10, n_train=20, batch_size=4).train_dataloader()]
    flat = [i for b in train for i in b]
    assert train == again and sorted(flat) == list(range(20)) and flat != list(range(20))
    batch = next(iter(dm.train_dataloader()))
    assert batch["prompt"][0] == dm.train_items[batch["index"][0]]["prompt"]


def test_datamodule_file_and_validation(tmp_path: Path):
    """Catches a missing file found only at setup, unknown ops accepted, and ``max_items`` ignored."""
    path = _write_jsonl(tmp_path / "g.jsonl", [_good(a=f"#### {i}") for i in range(5)])
    dm = MoEPromptDataModule(path=str(path), max_items=3, batch_size=2)
    batches = list(dm.val_dataloader())
    assert [g for b in batches for g in b["gold"]] == ["0", "1", "2"]
    assert dm.train_items == dm.eval_items
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        MoEPromptDataModule(path=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match=r"--data\.init_args\.ops.*'/'"):
        MoEPromptDataModule(ops=["+", "/"])
    with pytest.raises(ValueError, match=r"--data\.init_args\.digits=0"):
        MoEPromptDataModule(digits=0)
    with pytest.raises(ValueError, match=r"--data\.init_args\.n_items=0"):
        MoEPromptDataModule(n_items=0)


# -- issue #19: nothing bent silently --------------------------------------------------------------------------------
def test_max_items_cut_is_announced(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """``max_items`` dropped the file's later records without a word."""
    path = _write_jsonl(tmp_path / "g.jsonl", [_good(a=f"#### {i}") for i in range(5)])
    MoEPromptDataModule(path=str(path), max_items=3).setup()
    assert f"zoo: {path}: serving the first 3 of 5 records (--data.init_args.max_items=3)" in capsys.readouterr().err
    MoEPromptDataModule(path=str(path), max_items=5).setup()
    assert "serving" not in capsys.readouterr().err  # nothing cut, nothing said


def test_characters_read_as_unk_are_announced(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The tiny models' character tokenizer reads only ``0-9+-*= ?#QA:``: a GSM8K question (and the default
    ``Question: {q}`` template) became a row of <unk> tokens without a word; the arith_em prompts stay silent."""
    from types import SimpleNamespace

    from zoo.moe_cap.module import MoEEvalModule, unknown_chars

    tok = char_tokenizer()
    assert unknown_chars(tok, ["Q: 1+2=? A:"]) is None
    assert unknown_chars(tok, ["Q: 1+2=? A:", "Q: why?"]) == (1, "Q: why?", ["h", "w", "y"])
    module = MoEEvalModule(family="llama", hidden_size=16, max_new_tokens=2)
    path = _write_jsonl(tmp_path / "g.jsonl", [_good(), _good(q="1+1?")])
    for dm, said in ((MoEPromptDataModule(n_items=4, n_train=4), False), (MoEPromptDataModule(path=str(path)), True)):
        dm.setup()
        module._trainer = SimpleNamespace(datamodule=dm)  # what setup reads of the trainer
        module.setup("validate")
        err = capsys.readouterr().err
        assert ("texts have characters the tokenizer reads as <unk>" in err) is said, err
        if said:
            assert f"zoo: {path}: 2 of 2 texts" in err and "--model.init_args.pretrained=" in err
            module.setup("fit")  # the file's records train and evaluate: each is read once, with its gold
            assert f"zoo: {path}: 2 of 2 texts" in capsys.readouterr().err
