"""The reproduction's plots drawn from a small synthetic result (no training): titled, labelled, no curve hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.prune_finetune import reproduce as R


@pytest.mark.filterwarnings("error::zoo.core.reproduce.PlotWarning")
def test_plots_are_titled_and_every_schedule_shows(tmp_path: Path) -> None:
    """Catches an untitled or unlabelled plot, or schedules told apart by colour only (the full grid: every target
    x (r, alpha), seeds overlaid; the schedule was left without a legend past 8 curves)."""
    medians = {t: {arm: {"mse": 0.1} for arm in R.ROWS} for t in R.TARGETS}
    medians[R.TIMESFM_ROW] = {arm: {"mse": 0.1} for arm in ("zero_shot", "full_ft", "prune_ft[finetuned]")}
    history = [[1, 80, 0.0, 100, 20], [2, 64, 0.0, 80, 16]]
    stage1 = [{"r": r, "alpha": a, "summary": {"scored_entries": 100}, "history": history} for r, a in R.GRID]
    results = [{"target": t, "seed": s, "stage1": stage1} for t in (*R.TARGETS, R.TIMESFM_ROW) for s in (0, 1)]
    paths = [R._plot(medians, [*R.TARGETS, R.TIMESFM_ROW], tmp_path), R._plot_schedule(results, tmp_path)]
    assert all(Path(p).stat().st_size > 0 for p in paths)


def test_table_shows_both_stage1_selectors_side_by_side() -> None:
    """Issue #20: the report prints what each stage-1 selector picked and its outcome; the gated one is marked."""
    medians = {"taylor": {arm: {k: 0.1 for k in R.KEYS} for arm in R.ROWS}}
    for on, pick in (("finetuned", "r 0.3 α 0.5"), ("pruned", "r 0.7 α 0.5")):
        medians["taylor"][f"prune_ft[{on}]"] |= {"picks": [pick], "block_param_drop": 0.4}
    rows = [line for line in R._table(medians, ["taylor"], "finetuned").splitlines() if "| prune_ft |" in line]
    assert len(rows) == 2
    assert "| finetuned (gated) | r 0.3 α 0.5 |" in rows[0] and "| pruned | r 0.7 α 0.5 |" in rows[1]
    assert R.OPTIONS["select_stage1_on"][0] == "finetuned"  # the protocol's default selector


def test_lora_rows_follow_full_ft_and_are_not_gated() -> None:
    """Issue #20 deliverable 3: the table has the dense and the merged LoRA rows right after full FT, and the LoRA
    claim is printed, not gated (the notes say LoRA does not beat full FT)."""
    assert R.ROWS[1:4] == ("full_ft", "lora", "prune_lora") and {"lora", "prune_lora"} <= set(R.ARMS)
    medians = {"taylor": {arm: {k: 0.1 for k in R.KEYS} for arm in (*R.ROWS, "prune_ft")}}
    for arm in (*(f"prune_ft[{on}]" for on in R.SELECTORS), "prune_ft"):
        medians["taylor"][arm] |= {"picks": ["r 0.3 α 0.5"], "block_param_drop": 0.4}
    medians["taylor"]["lora"]["mse"] = 0.12
    merge = {"max_abs_diff": 0.0, "physical_total": 1.0, "predicted_total": 1.0, "physical_blocks": 1.0,
             "predicted_blocks": 1.0, "blocks_before": 2.0}  # fmt: skip
    stage1 = [{"merge": merge, "history": [], "summary": {"scored_entries": 10}, "r": 0.7, "steps_per_epoch": 4}]
    claims = R._claims([{"target": "taylor", "seed": 0, "stage1": stage1}], medians, ["taylor"], True, "finetuned")
    (lora,) = [c for c in claims if c.name.startswith("LoRA taylor")]
    assert lora.value == pytest.approx(1.2) and not lora.asserted
    lines = R._table(medians, ["taylor"], "finetuned").splitlines()
    assert [line.split(" | ")[1] for line in lines[2:6]] == ["zero_shot", "full_ft", "lora", "prune_lora"]


def test_timesfm_row_gates_its_exact_merge_and_prints_its_c4() -> None:
    """Issue #20 deliverable 2: the TimesFm row (taylor, timesfm.yaml's backbone) has zero-shot, full FT and both
    Prune+FT selections; its merge exactness is gated, its Prune+FT / FT ratio printed; the table names it."""
    assert R._backbone_flags("patchtst") == []
    assert R._backbone_flags("timesfm") == ["--model.init_args.backbone=timesfm", "--model.init_args.activation=relu"]
    merge = {"max_abs_diff": 2e-5, "physical_total": 1.0, "predicted_total": 1.0, "physical_blocks": 1.0,
             "predicted_blocks": 1.0, "blocks_before": 2.0}  # fmt: skip
    stage1 = [{"merge": merge, "history": [], "summary": {"scored_entries": 10}, "r": 0.7, "steps_per_epoch": 4}]
    arms = ("zero_shot", "full_ft", *(f"prune_ft[{on}]" for on in R.SELECTORS), "prune_ft")
    medians = {R.TIMESFM_ROW: {arm: {k: 0.1 for k in R.KEYS} | {"picks": ["r 0.3 α 0.2"]} for arm in arms}}
    medians[R.TIMESFM_ROW]["prune_ft"]["mse"] = 0.2
    results = [{"target": R.TIMESFM_ROW, "seed": 0, "stage1": stage1}]
    claims = {c.name: c for c in R._claims(results, medians, [], False, "finetuned")}
    exact = claims["C1 TimesFm: merged vs masked output, max |diff| (taylor)"]
    assert exact.asserted and not exact.holds  # 2e-5 > 1e-5: a TimesFm merge error fails the run
    ratio = claims["C4 TimesFm taylor: Prune+FT / FT test MSE (H-mean)"]
    assert ratio.value == pytest.approx(2.0) and not ratio.asserted
    table = R._table(medians, [R.TIMESFM_ROW], "finetuned")
    assert "| taylor (TimesFm) | prune_ft | finetuned (gated) |" in table and "| lora |" not in table
