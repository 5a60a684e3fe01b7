"""MATH-style formats for DCO (card "Real formats"): boxed extraction, normalisation, equivalence, the reader."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from datamodules.math_text.answers import answers_equivalent, last_boxed, normalize_answer
from datamodules.math_text.math_records import read_math_records, write_math_jsonl

# -- last_boxed ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so the answer is $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),  # nested braces (a naive regex stops at `}`)
        (r"\boxed{1} first, then \boxed{2}", "2"),  # the last box, not the first
        (r"\boxed{a} then \boxed{\sqrt{2}", None),  # the last one is unbalanced
        ("no box here", None),
        (r"\fbox{3}", "3"),
        (r"so $\boxed 5$.", "5"),  # minerva's `\boxed ` + token form
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces are not counted
        (r"\boxed", None),
        (r"\boxedfoo{3}", None),  # another command, not \boxed
        (r"\boxed {x+1} is it", "x+1"),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


# -- normalize_answer ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  $5$. ", "5"),
        (r"\boxed{5}.", "5"),
        (r"$\boxed{5.}$", "5"),
        (r"\boxed 7", "7"),
        (r"\boxed{1} + \boxed{2}", r"\boxed{1} + \boxed{2}"),  # not one wrapper: kept
        (r"\left( 1,\!2 \right)", "( 1,2 )"),
        (r"x \rightarrow y", r"x \rightarrow y"),  # \right only as a whole command
        (r"\dfrac{1}{2} + \tfrac34", r"\frac{1}{2} + \frac34"),
        (r"\$12", "12"),
        ("a   b\n\tc", "a b c"),
        ("1, 2, ...", "1, 2, ..."),  # an ellipsis keeps its dots
        (r"\text{Yes}", r"\text{Yes}"),  # case and \text are untouched
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


# -- answers_equivalent --------------------------------------------------------------------------------------------


def test_string_vs_sympy_mode() -> None:
    assert answers_equivalent(r"$\frac{1}{2}$.", r"\boxed{\frac{1}{2}}")
    assert not answers_equivalent(r"\frac{1}{2}", "0.5")
    assert answers_equivalent(r"\frac{1}{2}", "0.5", "sympy")
    assert answers_equivalent(r"\dfrac12", "1/2", "sympy")
    assert answers_equivalent(r"\sqrt{8}", r"2\sqrt{2}", "sympy")
    assert answers_equivalent("2x", r"x \cdot 2", "sympy")
    assert answers_equivalent(r"2\pi r", r"2 r \pi", "sympy")
    assert answers_equivalent("1,000", "1000", "sympy")
    assert not answers_equivalent("0.333", r"\frac{1}{3}", "sympy")
    assert not answers_equivalent("3", "4", "sympy")


@pytest.mark.parametrize(
    "weird",
    [
        "2x",
        r"\frac{",
        "}{",
        "x=5",
        "1/0",
        r"\text{abc}",
        "9^{9^{9}}",  # a power tower: refused before evaluation
        "(10^{999})^{999}",
        "x^{1000000}",
        "__import__('os').system('echo pwned')",  # never reaches eval as Python
        "eval(chr(49))",
        "1" * 250,  # longer than the sympy limit
        "",
        "\\",
        r"\sqrt[3",
    ],
)
def test_weird_input_does_not_raise(weird: str) -> None:
    for mode in ("string", "sympy"):
        assert answers_equivalent(weird, "1", mode) in (True, False)
        assert answers_equivalent("1", weird, mode) in (True, False)
    assert not answers_equivalent(weird, "7", "sympy")


def test_unknown_mode_is_named() -> None:
    with pytest.raises(ValueError, match="'exact'"):
        answers_equivalent("1", "1", "exact")  # type: ignore[arg-type]


# -- read_math_records / write_math_jsonl ---------------------------------------------------------------------------


def _lines(tmp_path: Path, *lines: str, name: str = "math.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps({"problem": "1+1?", "solution": "It is 2.", "answer": "2", "level": "Level 1"})
BOXED = json.dumps({"problem": "Half?", "solution": r"So $\boxed{\frac{1}{2}}$."})


def test_reads_jsonl_with_and_without_answer(tmp_path: Path) -> None:
    path = _lines(tmp_path, GOOD, "", BOXED)
    assert read_math_records(path) == [
        {"problem": "1+1?", "solution": "It is 2.", "answer": "2"},  # extra keys dropped
        {"problem": "Half?", "solution": r"So $\boxed{\frac{1}{2}}$.", "answer": r"\frac{1}{2}"},  # raw, not normalised
    ]


def test_write_read_round_trip(tmp_path: Path) -> None:
    records = [
        {"problem": "π?", "solution": r"\boxed{\pi}", "extra": 1},
        {"problem": "a", "solution": "b", "answer": "c"},
    ]
    path = write_math_jsonl(records, tmp_path / "sub" / "out.jsonl")
    assert read_math_records(str(path)) == [
        {"problem": "π?", "solution": r"\boxed{\pi}", "answer": r"\pi"},
        {"problem": "a", "solution": "b", "answer": "c"},
    ]
    with pytest.raises(ValueError, match="record 0.*'solution'"):
        write_math_jsonl([{"problem": "x"}], tmp_path / "bad.jsonl")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (json.dumps({"problem": "p", "solution": "no box"}), "answer"),
        ('{"problem": "p", "solution": ', "JSON"),
        ("[1, 2]", "object"),
        (json.dumps({"solution": r"\boxed{1}"}), "problem"),
        (json.dumps({"problem": 3, "solution": r"\boxed{1}"}), "problem"),
        (json.dumps({"problem": "  ", "solution": r"\boxed{1}"}), "problem"),
        (json.dumps({"problem": "p"}), "solution"),
        (json.dumps({"problem": "p", "solution": None, "answer": "1"}), "solution"),
        (json.dumps({"problem": "p", "solution": "s", "answer": 1}), "answer"),
        (json.dumps({"problem": "p", "solution": "s", "answer": None}), "answer"),
        (json.dumps({"problem": "p", "solution": "s", "answer": ""}), "answer"),
        (json.dumps({"problem": "p", "solution": r"\boxed{1} and \boxed{2"}), "answer"),  # last box unbalanced
    ],
)
def test_jsonl_errors_name_file_line_and_field(tmp_path: Path, bad: str, field: str) -> None:
    """Line 4: a bad record after two good ones and a blank line (1-based line numbers count blank lines)."""
    path = _lines(tmp_path, GOOD, BOXED, "", bad, GOOD)
    with pytest.raises(ValueError) as err:
        read_math_records(path)
    message = str(err.value)
    assert "math.jsonl" in message and "line 4" in message and field in message, message


def test_missing_answer_message_mentions_boxed(tmp_path: Path) -> None:
    path = _lines(tmp_path, GOOD, GOOD, GOOD, GOOD, GOOD, GOOD, json.dumps({"problem": "p", "solution": "s"}))
    with pytest.raises(
        ValueError, match=r"math\.jsonl: line 7: no 'answer' field and no \\boxed\{\.\.\.\} in 'solution'"
    ):
        read_math_records(path)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    for text in ("", "\n  \n", "[]"):
        (tmp_path / "empty.jsonl").write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=r"empty\.jsonl: no records"):
            read_math_records(tmp_path / "empty.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_math_records(tmp_path / "nope.jsonl")


def test_pretty_printed_object_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"problem": "p", "solution": r"\boxed{1}"}, indent=2), encoding="utf-8")
    with pytest.raises(ValueError, match=r"one\.json: line 1: invalid JSON.*spanning several lines"):
        read_math_records(path)


def test_json_list_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "math.json"
    rows = [json.loads(GOOD), json.loads(BOXED)]
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    assert [r["answer"] for r in read_math_records(path)] == ["2", r"\frac{1}{2}"]
    path.write_text(json.dumps([*rows, {"problem": "p", "solution": "s"}]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"math\.json: record 2: no 'answer' field"):
        read_math_records(path)
    path.write_text(json.dumps([*rows, "text"]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"math\.json: record 2: expected a JSON object.*found str"):
        read_math_records(path)
    path.write_text('[\n{"problem": "p",\n "solution": }]', encoding="utf-8")
    with pytest.raises(ValueError, match=r"math\.json: line 3, column \d+: invalid JSON"):
        read_math_records(path)


# -- arrow folders --------------------------------------------------------------------------------------------------


def test_directory_without_datasets_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now raises ImportError
    with pytest.raises(ImportError, match="pip install datasets"):
        read_math_records(tmp_path)


class _FakeDataset(list):
    """The slice of ``datasets.Dataset`` the reader uses: ``column_names``, ``len`` and row dicts."""

    def __init__(self, rows: list[dict], column_names: list[str]) -> None:
        super().__init__(rows)
        self.column_names = column_names


def _fake_datasets(monkeypatch: pytest.MonkeyPatch, loaded: object) -> None:
    module = types.ModuleType("datasets")
    module.load_from_disk = lambda path: loaded  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)


def test_directory_rows_through_load_from_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrow columns exist for every row, so a null ``answer`` falls back to the solution's box."""
    cols = ["problem", "solution", "answer"]
    rows = [
        {"problem": "a", "solution": "s", "answer": "1"},
        {"problem": "b", "solution": r"\boxed{2}", "answer": None},
    ]
    _fake_datasets(monkeypatch, _FakeDataset(rows, cols))
    assert [r["answer"] for r in read_math_records(tmp_path)] == ["1", "2"]
    _fake_datasets(monkeypatch, _FakeDataset([*rows, {"problem": "c", "solution": "s", "answer": None}], cols))
    with pytest.raises(ValueError, match=r"row 2: no 'answer' field"):
        read_math_records(tmp_path)
    _fake_datasets(monkeypatch, _FakeDataset(rows, ["problem", "answer"]))
    with pytest.raises(ValueError, match=r"missing column\(s\) \['solution'\]"):
        read_math_records(tmp_path)
    _fake_datasets(monkeypatch, {"train": _FakeDataset(rows, cols)})
    with pytest.raises(ValueError, match=r"DatasetDict with splits \['train'\]"):
        read_math_records(tmp_path)


def test_real_arrow_folder(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [{"problem": "a", "solution": r"\boxed{1}"}, {"problem": "b", "solution": r"x \boxed{\frac{2}{3}}"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    assert [r["answer"] for r in read_math_records(tmp_path / "ds")] == ["1", r"\frac{2}{3}"]
