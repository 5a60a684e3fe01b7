"""DCO data: the K-answer generator, the noisy-addition task, the MATH-style jsonl path and their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.classification.kanswer_datamodule import KAnswerDataModule
from datamodules.classification.kanswer_synthetic import kanswer_data
from datamodules.math_text.addition import BOS, EOS, EQUALS, PLUS, addition_examples, noise_table
from datamodules.math_text.coverage_datamodule import CoverageLMDataModule
from datamodules.math_text.math_records import write_math_jsonl
from datamodules.math_text.prompt_response import collate_prompt_response

torch.set_num_threads(1)


def test_kanswer_shapes_standardisation_and_seed() -> None:
    data = kanswer_data(0)
    x, y = data["train"]
    assert x.shape == (600, 300) and y.shape == (600,) and data["test"][0].shape == (2000, 300)
    assert np.abs(x.mean(0)).max() < 1e-4 and np.abs(x.std(0) - 1).max() < 1e-3  # standardised by train stats
    assert y.min() >= 0 and y.max() < 100 and len(np.unique(y)) > 30
    again = kanswer_data(0)
    assert np.array_equal(again["test"][0], data["test"][0]) and np.array_equal(again["test"][1], data["test"][1])
    assert not np.array_equal(kanswer_data(1)["train"][1], y)
    # the validation split is drawn last: train and test do not depend on it
    small = kanswer_data(0, n_val=3)
    assert np.array_equal(small["test"][1], data["test"][1]) and np.array_equal(small["train"][0], x)


def test_kanswer_labels_follow_the_teacher() -> None:
    """y* = argmax(tanh(x W1) W2) with the documented draw order."""
    rng = np.random.default_rng(5)
    w1, w2 = rng.standard_normal((10, 64)), rng.standard_normal((64, 100))
    rng.standard_normal((10, 300))
    xtr = rng.standard_normal((600, 10))
    assert np.array_equal(kanswer_data(5)["train"][1], np.argmax(np.tanh(xtr @ w1) @ w2, axis=1))


def test_kanswer_loader_is_the_full_batch_repeated() -> None:
    dm = KAnswerDataModule(steps_per_epoch=3)
    dm.setup()
    batches = list(dm.train_dataloader())
    assert len(batches) == 3 and batches[0]["x"].shape == (600, 300)
    assert batches[0]["x"] is batches[2]["x"]  # not re-collated
    assert dm.input_dim == 300 and dm.num_classes == 100
    with pytest.raises(ValueError, match="n_train"):
        KAnswerDataModule(n_train=0)
    with pytest.raises(ValueError, match="num_classes"):
        KAnswerDataModule(num_classes=1)


def test_addition_task_layout_and_noise() -> None:
    ex = addition_examples(47, seed=0)
    assert len(ex["train"]) == 1104 and len(ex["test"]) == 1105
    xi = noise_table(47, 0)
    assert set(np.unique(xi)) == {0, 1, 2}
    for prompt, response in ex["train"][:50] + ex["test"][:50]:
        assert prompt[0] == BOS and prompt[3] == PLUS and prompt[6] == EQUALS and response[-1] == EOS
        a, b = 10 * prompt[1] + prompt[2], 10 * prompt[4] + prompt[5]
        assert 10 * response[0] + response[1] == (a + b + xi[a, b]) % 47
    pairs = {tuple(p) for p, _ in ex["train"]} | {tuple(p) for p, _ in ex["test"]}
    assert len(pairs) == 47 * 47  # every ordered pair exactly once
    clean = addition_examples(47, seed=0, noise=False)
    assert all(10 * r[0] + r[1] == (10 * p[1] + p[2] + 10 * p[4] + p[5]) % 47 for p, r in clean["train"])
    assert not np.array_equal(noise_table(47, 1), xi)


def test_collate_masks_prompt_and_padding() -> None:
    batch = collate_prompt_response([([5, 6, 7], [1, 2]), ([5], [3])], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 1, 2], [5, 3, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, -100, -100, 1, 2], [-100, 3, -100, -100, -100]]


def test_coverage_lm_addition_batches() -> None:
    dm = CoverageLMDataModule(batch_size=256)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (256, 10) and dm.vocab_size == 14 and dm.max_length == 10
    assert (batch["labels"][:, :7] == -100).all() and (batch["labels"][:, 7:] >= 0).all()
    assert dm.is_correct("test", 0, dm.splits["test"].examples[0][1])
    assert not dm.is_correct("test", 0, [EOS])


def test_coverage_lm_jsonl_char_vocab(tmp_path) -> None:
    recs = [{"problem": f"What is {i}+{i}?", "solution": f"It is \\boxed{{{2 * i}}}."} for i in range(20)]
    path = write_math_jsonl(recs, tmp_path / "math.jsonl")
    dm = CoverageLMDataModule(source="jsonl", path=str(path), train_frac=0.5, answer_equivalence="string")
    dm.setup()
    assert len(dm.splits["train"]) == 10 and len(dm.splits["test"]) == 10
    ds = dm.splits["test"]
    prompt, response = ds.examples[0]
    assert dm.decode_answer(response) == ds.answers[0]  # the boxed answer, read from the solution
    assert dm.is_correct("test", 0, response) and not dm.is_correct("test", 0, [dm.eos_id])
    batch = next(iter(dm.eval_dataloader("test")))
    assert batch["input_ids"].shape[0] == 10 and dm.vocab_size == len(dm.char_vocab)


def test_coverage_lm_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="path"):
        CoverageLMDataModule(source="jsonl")
    with pytest.raises(ValueError, match="source"):
        CoverageLMDataModule(source="csv")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prompt_template"):
        CoverageLMDataModule(prompt_template="no placeholder")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1", "solution": "two"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl.*line 1.*answer"):
        CoverageLMDataModule(source="jsonl", path=str(bad))
    one = write_math_jsonl([{"problem": "p", "solution": "s", "answer": "a"}], tmp_path / "one.jsonl")
    with pytest.raises(ValueError, match="test_path"):
        CoverageLMDataModule(source="jsonl", path=str(one))
