"""LM unlearning through the callback: RMU, RMU+UAM and the extracted Algorithm 2 (card tests 4 and 7), and the
LM datamodule. Tiny sizes (hidden 32, 2 layers, 3 steps) and no fact injection: the maths does not need it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET, ROOT

from callbacks.unlearning import UnlearningCallback
from datamodules.text.unlearning_datamodule import LMUnlearningDataModule

torch.set_num_threads(1)

TINY = ["--model.init_args.hidden=32", "--model.init_args.layers=2", "--model.init_args.intermediate=64",
        "--trainer.max_epochs=1", "--trainer.limit_train_batches=3", "--trainer.logger=false",
        "--trainer.enable_checkpointing=false", "--trainer.callbacks.init_args.original_epochs=0",
        "--trainer.callbacks.init_args.oracle=false"]  # fmt: skip


def _fit(tmp_path: Path, *extra: str) -> tuple[Any, dict[str, torch.Tensor], UnlearningCallback]:
    from zoo.cli import main

    config = str(ROOT / "configs/uam/lm_rmu_uam.yaml")
    cli = main(["-c", config, *QUIET, *TINY, f"--trainer.default_root_dir={tmp_path}", *extra], run=False)
    before = {k: v.detach().clone() for k, v in cli.model.model.state_dict().items()}
    with pytest.warns(UserWarning) as record:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cb = next(c for c in cli.trainer.callbacks if isinstance(c, UnlearningCallback))
    cb.warnings = [str(w.message) for w in record]  # type: ignore[attr-defined]
    return cli, before, cb


def _changed(cli: Any, before: dict[str, torch.Tensor]) -> set[str]:
    return {k for k, v in cli.model.model.state_dict().items() if not torch.equal(v, before[k])}


def test_alg2_strict_is_a_warned_no_op_and_rmu_uam_moves_only_the_update_set(tmp_path: Path) -> None:
    """Card test 7: Algorithm 2 as extracted never leaves w = w_bar (L_f = 0, grad 0) and warns; rmu_uam moves the
    weights, and only mlp.down_proj of the update layers (every other tensor bitwise unchanged)."""
    cli, before, cb = _fit(tmp_path, "--trainer.callbacks.init_args.lm_mode=alg2_strict")
    assert _changed(cli, before) == set()
    assert cb.zero_forget_grad_steps == 3
    assert any("never leaves the frozen copy" in w for w in cb.warnings)  # type: ignore[attr-defined]
    cli, before, _ = _fit(tmp_path / "b", "--trainer.callbacks.init_args.lm_mode=rmu_uam")
    update = {f"model.layers.{i}.mlp.down_proj.weight" for i in cli.model.rmu_update_layers}
    assert cli.model.rmu_update_layers == [0, 1]
    assert _changed(cli, before) == update


def test_rmu_uam_with_rho_gamma_zero_equals_rmu(tmp_path: Path) -> None:
    """Card test 4 (LM): rmu_uam with rho = gamma = 0 is RMU (the same update up to float summation order)."""
    rmu, _, _ = _fit(tmp_path, "--trainer.callbacks.init_args.strategy=rmu")
    uam, _, _ = _fit(tmp_path / "b", "--trainer.callbacks.init_args.rho=0", "--trainer.callbacks.init_args.gamma=0")
    a, b = rmu.model.model.state_dict(), uam.model.model.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    moved, _, _ = _fit(tmp_path / "c", "--trainer.callbacks.init_args.gamma=0")  # rho alone changes the step
    assert any(not torch.allclose(a[k], moved.model.model.state_dict()[k], atol=1e-6) for k in a)


def test_lm_metrics_and_report(tmp_path: Path) -> None:
    """The LM run logs MCQ accuracies (chance ~25% for an untrained net), perplexity and both MIA AUCs in [0, 1]."""
    cli, _, cb = _fit(tmp_path, "--trainer.callbacks.init_args.strategy=rmu")
    final = cb.final
    assert 0.0 <= final["forget_mcq_acc_lower_is_better_vs_retrain"] <= 60.0
    assert final["retain_ppl_lower_is_better"] > 1.0
    assert 0.0 <= final["mia_mink_auc_forget_vs_holdout_closer_to_half"] <= 1.0
    assert json.loads(json.dumps(cb.state_dict()))["step_count"] == 3


def test_lm_datamodule_phases_and_files(tmp_path: Path) -> None:
    """Facts: 360 sentences per domain, phases serve both / retain / {forget, retain}; files mode reads jsonl and
    names the missing flags."""
    dm = LMUnlearningDataModule(batch_size=16, forget_batch_size=8)
    assert dm.vocab_size is not None and dm.split_info()["n_forget_texts"] == 360
    assert sum(len(b["input_ids"]) for b in dm.with_phase("original").train_dataloader()) == 720
    assert len(dm.with_phase("original").train_dataloader()) == 12  # inject_batch_size 64
    assert sum(len(b["input_ids"]) for b in dm.retrain_oracle().train_dataloader()) == 360
    first = next(iter(dm.train_dataloader()))
    first = first[0] if isinstance(first, tuple) else first
    assert len(first["forget"]["input_ids"]) == 8 and len(first["retain"]["input_ids"]) == 16
    with pytest.raises(ValueError, match="--data.init_args.forget_corpus"):
        LMUnlearningDataModule(source="files")


def test_files_mode_runs_the_unlearning_on_jsonl(tmp_path: Path) -> None:
    """WMDP-style files (MCQ jsonl + text jsonl) flow through the datamodule and one RMU+UAM step; a malformed MCQ
    line raises naming file:line and the key."""
    from zoo.cli import main

    def write(name: str, rows: list[dict]) -> str:
        (tmp_path / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        return str(tmp_path / name)

    forget = write("forget.jsonl", [{"text": f"the toxin t{i} binds receptor r{i % 3} ."} for i in range(24)])
    retain = write("retain.jsonl", [{"text": f"the river v{i} flows into lake l{i % 4} ."} for i in range(24)])
    mcq = [{"question": f"the toxin t{i} binds receptor", "choices": ["r0", "r1", "r2", "r3"], "answer": i % 3}
           for i in range(8)]  # fmt: skip
    f_mcq, r_mcq = write("wmdp.jsonl", mcq), write("mmlu.jsonl", mcq)
    files = [f"--data.init_args.{k}={v}" for k, v in (("source", "files"), ("forget_corpus", forget),
             ("retain_corpus", retain), ("forget_mcq", f_mcq), ("retain_mcq", r_mcq))]  # fmt: skip
    config = str(ROOT / "configs/uam/lm_rmu_uam.yaml")
    cli = main(["-c", config, *QUIET, *TINY, f"--trainer.default_root_dir={tmp_path}", *files], run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cb = next(c for c in cli.trainer.callbacks if isinstance(c, UnlearningCallback))
    assert "forget_mcq_acc_lower_is_better_vs_retrain" in cb.final and cb.step_count == 2  # 24 retain texts / 16
    assert "mia_mink_auc_forget_vs_holdout_closer_to_half" not in cb.final  # no holdout corpus given
    bad = write("bad.jsonl", [{"question": "q", "choices": ["a", "b", "c"], "answer": 0}])
    with pytest.raises(ValueError, match=r"bad.jsonl:1: .*choices"):
        LMUnlearningDataModule(source="files", forget_corpus=forget, retain_corpus=retain, forget_mcq=bad,
                               retain_mcq=r_mcq)  # fmt: skip
