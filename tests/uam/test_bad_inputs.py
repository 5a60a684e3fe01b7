"""uam: bad input through the real `zoo` entry point, one clear line and exit code 2 each (issue #19).

Every on-disk format uam reads (CIFAR python pickles, MNIST-style IDX folders, the LM path's `text` and MCQ jsonl) and
the values of its datamodules, modules and the unlearning callback. Each case fails while the run is built or in the
datamodule's `setup`, before the callback trains the original model. `{tmp}` stands for the folder of the fixture's
malformed files.
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, assert_user_error, bad_inputs

DEFAULT = str(ROOT / "configs/uam/default.yaml")
CLASSWISE = str(ROOT / "configs/uam/classwise.yaml")
LM = str(ROOT / "configs/uam/lm_rmu_uam.yaml")
CB = "--trainer.callbacks.init_args."  # the last listed callback: UnlearningCallback


def fit(config: str, *flags: str) -> list[str]:
    return ["fit", "-c", config, *flags, "--trainer.fast_dev_run=1"]


def lm_files(**bad: str) -> list[str]:
    """``source=files`` with the fixture's good corpora and MCQ sets, ``bad`` replacing some (file names in {tmp})."""
    names = {"forget_corpus": "forget.jsonl", "retain_corpus": "retain.jsonl", "forget_mcq": "mcq.jsonl",
             "retain_mcq": "mcq.jsonl"} | bad  # fmt: skip
    return fit(LM, "--data.init_args.source=files", *(f"--data.init_args.{k}={{tmp}}/{v}" for k, v in names.items()))


def cifar(folder: str) -> list[str]:
    return fit(DEFAULT, "--data.init_args.source=cifar10", f"--data.init_args.path={{tmp}}/{folder}")


def idx(folder: str) -> list[str]:
    return fit(DEFAULT, "--data.init_args.source=idx", f"--data.init_args.path={{tmp}}/{folder}")


IDX_NAMES = ("train-images-idx3-ubyte | train-images-idx3-ubyte.gz | train-images.idx3-ubyte | "
             "train-images.idx3-ubyte.gz; train-labels-idx1-ubyte | train-labels-idx1-ubyte.gz | "
             "train-labels.idx1-ubyte | train-labels.idx1-ubyte.gz; t10k-images-idx3-ubyte | "
             "t10k-images-idx3-ubyte.gz | t10k-images.idx3-ubyte | t10k-images.idx3-ubyte.gz; t10k-labels-idx1-ubyte | "
             "t10k-labels-idx1-ubyte.gz | t10k-labels.idx1-ubyte | t10k-labels.idx1-ubyte.gz")  # fmt: skip
MCQ = "MCQ items (question, choices, answer)"

#: (id, zoo arguments, the last stderr line without "zoo: error: ")
BAD_INPUTS = [
    # values: datamodule, module, callback
    ("batch_size_0", fit(DEFAULT, "--data.init_args.batch_size=0"),
     "--data.init_args.batch_size=0: expected an integer >= 1"),
    ("forget_fraction_1.5", fit(DEFAULT, "--data.init_args.forget_fraction=1.5"),
     "--data.init_args.forget_fraction=1.5: expected a number in (0, 1)"),
    ("forget_fraction_selects_nothing", fit(DEFAULT, "--data.init_args.forget_fraction=0.0005"),
     "--data.init_args.forget_fraction=0.0005: expected a fraction selecting at least 1 of the 1257 training samples"),
    ("max_train_0", fit(DEFAULT, "--data.init_args.max_train=0"),
     "--data.init_args.max_train=0: expected an integer >= 1"),
    ("forget_class_12", fit(CLASSWISE, "--data.init_args.forget_class=12"),
     "--data.init_args.forget_class=12: expected an integer in [0, 9]"),
    ("path_ignored_by_digits", fit(DEFAULT, "--data.init_args.path={tmp}"),
     "--data.init_args.path='{tmp}': expected null for source=digits (only cifar10, cifar100 and idx read it)"),
    ("coarse_label_ignored", cifar("cifar_ok") + ["--data.init_args.label=coarse"],
     "--data.init_args.label='coarse': expected 'fine' for source=cifar10 (only cifar100 has coarse labels)"),
    ("cifar_without_path", fit(DEFAULT, "--data.init_args.source=cifar10"),
     "--data.init_args.source=cifar10 reads files: set --data.init_args.path=<folder>"),
    ("original_lr_negative", fit(DEFAULT, "--model.init_args.original_lr=-0.1"),
     "--model.init_args.original_lr=-0.1: expected a finite number >= 0"),
    ("hidden_width_0", fit(DEFAULT, "--model.init_args.hidden=[64, 0]"),
     "--model.init_args.hidden=[64, 0]: expected a list of integers >= 1"),
    ("rho_negative", fit(DEFAULT, f"{CB}rho=-0.5"), "UnlearningCallback.rho=-0.5: expected a finite number >= 0"),
    ("original_epochs_negative", fit(DEFAULT, f"{CB}original_epochs=-1"),
     "UnlearningCallback.original_epochs=-1: expected an integer >= 0"),
    ("retrain_epochs_negative", fit(DEFAULT, f"{CB}retrain_epochs=-1"),
     "UnlearningCallback.retrain_epochs=-1: expected an integer >= 0"),
    ("salun_keep_1.5", fit(DEFAULT, f"{CB}strategy=salun", f"{CB}salun_keep=1.5"),
     "UnlearningCallback.salun_keep=1.5: expected a number in (0, 1]"),
    # issue #21: the validation problem, the relative radius, the MIA's sample cap
    ("holdout_dev", fit(DEFAULT, "--data.init_args.holdout=dev"),
     "--data.init_args.holdout='dev': expected one of 'test', 'validation' "
     "(datamodules.classification.unlearning_datamodule.UnlearningDataModule)"),
    ("val_fraction_1", fit(DEFAULT, "--data.init_args.holdout=validation", "--data.init_args.val_fraction=1.0"),
     "--data.init_args.val_fraction=1.0: expected a number in (0, 1)"),
    ("val_fraction_empty", fit(DEFAULT, "--data.init_args.holdout=validation", "--data.init_args.val_fraction=0.0001"),
     "--data.init_args.val_fraction=0.0001: expected a fraction splitting the 1257 training samples in two non-empty "
     "parts"),
    ("input_norm_standard", fit(DEFAULT, "--data.init_args.input_norm=standard"),
     "--data.init_args.input_norm='standard': expected one of 'auto', 'center', 'none' "
     "(datamodules.classification.unlearning_datamodule.UnlearningDataModule)"),
    ("rho_scale_weights", fit(DEFAULT, f"{CB}rho_scale=weights"),
     "--trainer.callbacks.init_args.rho_scale='weights': expected one of 'absolute', 'relative' "
     "(callbacks.unlearning.UnlearningCallback)"),
    ("mia_samples_0", fit(DEFAULT, "--model.init_args.mia_samples=0"),
     "--model.init_args.mia_samples=0: expected an integer >= 1"),
    # CIFAR python pickles
    ("cifar_missing_folder", cifar("nowhere"),
     "{tmp}/nowhere: CIFAR root folder not found (downloads are disabled); expected a folder holding "
     "cifar-10-batches-py/ or cifar-10-batches-py/ itself"),
    ("cifar_missing_file", cifar("cifar_short"),
     "{tmp}/cifar_short/cifar-10-batches-py: missing file(s) ['data_batch_5']; expected ['data_batch_1', "
     "'data_batch_2', 'data_batch_3', 'data_batch_4', 'data_batch_5', 'test_batch', 'batches.meta'] (the cifar10 "
     "python version)"),
    ("cifar_missing_key", cifar("cifar_nokey"),
     "{tmp}/cifar_nokey/cifar-10-batches-py/data_batch_2: missing key 'labels'; found keys ['data']"),
    ("cifar_label_out_of_range", cifar("cifar_label"),
     "{tmp}/cifar_label/cifar-10-batches-py/test_batch: key 'labels': expected labels in 0..9, found 10"),
    ("cifar_wrong_dtype", cifar("cifar_dtype"),
     "{tmp}/cifar_dtype/cifar-10-batches-py/data_batch_1: key 'data': expected dtype uint8, found float32"),
    ("cifar_not_a_pickle", cifar("cifar_text"),
     "{tmp}/cifar_text/cifar-10-batches-py/batches.meta: cannot unpickle (UnpicklingError: invalid load key, 'n'.); "
     "expected a CIFAR batch dict"),
    # MNIST-style IDX folders
    ("idx_missing_files", idx("idx_empty"),
     f"{{tmp}}/idx_empty: missing IDX file(s): {IDX_NAMES}; expected ['train-images-idx3-ubyte', "
     "'train-labels-idx1-ubyte', 't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'] (each optionally .gz)"),
    ("idx_bad_magic", idx("idx_magic"),
     "{tmp}/idx_magic/train-images-idx3-ubyte: bad IDX magic: expected 00 00 <dtype> <ndim>, found 01 00 08 03"),
    ("idx_empty_file", idx("idx_zero"),
     "{tmp}/idx_zero/train-images-idx3-ubyte: bad IDX magic: expected 00 00 <dtype> <ndim>, found empty file"),
    ("idx_count_mismatch", idx("idx_count"),
     "{tmp}/idx_count/t10k-images-idx3-ubyte has 3 images but {tmp}/idx_count/t10k-labels-idx1-ubyte has 2 labels; "
     "expected equal counts"),
    ("idx_label_range", idx("idx_label"), "{tmp}/idx_label: test labels span 0..12; expected 0..9"),
    # the LM path: text and MCQ jsonl
    ("lm_max_length_1", fit(LM, "--data.init_args.max_length=1"),
     "--data.init_args.max_length=1: expected an integer >= 2"),
    ("lm_num_values_9", fit(LM, "--data.init_args.num_values=9"),
     "--data.init_args.num_values=9: expected an integer in [4, 8]"),
    ("lm_file_ignored_by_facts", fit(LM, "--data.init_args.forget_corpus={tmp}/forget.jsonl"),
     "--data.init_args.forget_corpus='{tmp}/forget.jsonl': expected null for source=facts (set "
     "--data.init_args.source=files)"),
    ("lm_mink_k_0", fit(LM, "--model.init_args.mink_k=0"), "--model.init_args.mink_k=0.0: expected a number in (0, 1]"),
    ("lm_hidden_not_multiple_of_heads", fit(LM, "--model.init_args.hidden=66"),
     "--model.init_args.hidden=66: expected a multiple of --model.init_args.heads=4"),
    ("lm_rmu_c_negative", fit(LM, f"{CB}rmu_c=-6.5"), "UnlearningCallback.rmu_c=-6.5: expected a finite number >= 0"),
    ("text_missing_file", lm_files(forget_corpus="nope.jsonl"),
     '{tmp}/nope.jsonl: no such file; expected a jsonl of texts ({"text": str} per line)'),
    ("text_empty_file", lm_files(retain_corpus="empty.jsonl"),
     '{tmp}/empty.jsonl: no records; expected a jsonl of texts ({"text": str} per line)'),
    ("text_malformed_line", lm_files(forget_corpus="text_malformed.jsonl"),
     "{tmp}/text_malformed.jsonl:2: invalid JSON (Expecting property name enclosed in double quotes at column 2)"),
    ("text_missing_key", lm_files(forget_corpus="text_nokey.jsonl"),
     "{tmp}/text_nokey.jsonl:2: missing key 'text'; expected str, found keys ['body']"),
    ("text_wrong_type", lm_files(forget_corpus="text_type.jsonl"),
     "{tmp}/text_type.jsonl:1: key 'text': expected str, found list"),
    ("text_empty_text", lm_files(retain_corpus="text_blank.jsonl"),
     "{tmp}/text_blank.jsonl:2: key 'text': expected a non-empty str, found '  '"),
    ("text_not_utf8", lm_files(forget_corpus="latin1.jsonl"),
     '{tmp}/latin1.jsonl: not UTF-8 text (invalid continuation byte at byte 13); expected a jsonl of texts ({"text": '
     'str} per line)'),
    ("mcq_missing_file", lm_files(forget_mcq="nope.jsonl"),
     f"{{tmp}}/nope.jsonl: no such file; expected a jsonl of {MCQ}"),
    ("mcq_empty_file", lm_files(retain_mcq="empty.jsonl"),
     f"{{tmp}}/empty.jsonl: no records; expected a jsonl of {MCQ}"),
    ("mcq_missing_key", lm_files(forget_mcq="mcq_nokey.jsonl"),
     "{tmp}/mcq_nokey.jsonl:1: missing key 'answer'; expected int 0-3, found keys ['choices', 'question']"),
    ("mcq_answer_as_string", lm_files(forget_mcq="mcq_str.jsonl"),
     "{tmp}/mcq_str.jsonl:1: key 'answer': expected int 0-3, found str '1'"),
    ("mcq_three_choices", lm_files(forget_mcq="mcq_three.jsonl"),
     "{tmp}/mcq_three.jsonl:1: key 'choices': expected exactly 4 choices, found 3"),
    ("mcq_duplicate_choice", lm_files(retain_mcq="mcq_dupe.jsonl"),
     "{tmp}/mcq_dupe.jsonl:1: key 'choices': expected 4 distinct choices, found 'r1' twice"),]  # fmt: skip


def _idx_bytes(a: np.ndarray, code: int = 0x08) -> bytes:
    return bytes([0, 0, code, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(">u1").tobytes()


def _idx_folder(root: Path, test_labels: np.ndarray | None = None) -> Path:
    root.mkdir()
    rng = np.random.default_rng(0)
    parts = {"train-images-idx3-ubyte": rng.integers(0, 256, (6, 28, 28)),
             "train-labels-idx1-ubyte": rng.integers(0, 10, 6),
             "t10k-images-idx3-ubyte": rng.integers(0, 256, (3, 28, 28)),
             "t10k-labels-idx1-ubyte": rng.integers(0, 10, 3) if test_labels is None else test_labels}  # fmt: skip
    for name, array in parts.items():
        (root / name).write_bytes(_idx_bytes(array))
    return root


def _cifar_folder(root: Path, change: dict[str, object] | None = None) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), b"labels": list(range(10)) * 2}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [f"c{i}".encode() for i in range(10)]}))
    for name, payload in (change or {}).items():
        if payload is None:
            (folder / name).unlink()
        else:
            (folder / name).write_bytes(payload if isinstance(payload, bytes) else pickle.dumps(payload))
    return root


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The good and malformed files of the table, written once."""
    tmp = tmp_path_factory.mktemp("uam_bad_inputs")
    _cifar_folder(tmp / "cifar_ok")
    _cifar_folder(tmp / "cifar_short", {"data_batch_5": None})
    _cifar_folder(tmp / "cifar_nokey", {"data_batch_2": {b"data": np.zeros((2, 3072), np.uint8)}})
    _cifar_folder(tmp / "cifar_label", {"test_batch": {b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 10]}})
    _cifar_folder(tmp / "cifar_dtype", {"data_batch_1": {b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}})
    _cifar_folder(tmp / "cifar_text", {"batches.meta": b"not a pickle\n"})
    (tmp / "idx_empty").mkdir()
    magic = _idx_folder(tmp / "idx_magic") / "train-images-idx3-ubyte"
    magic.write_bytes(b"\x01" + magic.read_bytes()[1:])
    (_idx_folder(tmp / "idx_zero") / "train-images-idx3-ubyte").write_bytes(b"")
    _idx_folder(tmp / "idx_count", test_labels=np.array([1, 2]))
    _idx_folder(tmp / "idx_label", test_labels=np.array([0, 12, 3]))

    def jsonl(name: str, *lines: object) -> None:
        (tmp / name).write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))

    text = {"text": "the toxin t1 binds receptor r1 ."}
    item = {"question": "the toxin t1 binds receptor", "choices": ["r0", "r1", "r2", "r3"], "answer": 1}
    jsonl("forget.jsonl", *[text] * 4)
    jsonl("retain.jsonl", *[{"text": "the river v1 flows into lake l1 ."}] * 4)
    jsonl("mcq.jsonl", item, item)
    jsonl("empty.jsonl", "")
    jsonl("text_malformed.jsonl", text, "{text: 1}")
    jsonl("text_nokey.jsonl", text, {"body": "no text key"})
    jsonl("text_type.jsonl", {"text": ["a", "list"]})
    jsonl("text_blank.jsonl", text, {"text": "  "})
    (tmp / "latin1.jsonl").write_bytes('{"text": "caf\xe9 au lait"}\n'.encode("latin-1"))
    jsonl("mcq_nokey.jsonl", {k: v for k, v in item.items() if k != "answer"})
    jsonl("mcq_str.jsonl", {**item, "answer": "1"})
    jsonl("mcq_three.jsonl", {**item, "choices": ["r0", "r1", "r2"]})
    jsonl("mcq_dupe.jsonl", {**item, "choices": ["r0", "r1", "r1", "r3"]})
    return tmp


@bad_inputs(BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str, files: Path, capsys) -> None:
    assert_user_error(args, line, capsys, files)
