"""The dco method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="dco",
    paper=(
        "Rethinking Fine-Tuning when Scaling Test-Time Compute: Limiting Confidence Improves "
        "Mathematical Reasoning (NeurIPS 2025)"
    ),
    module="zoo.dco.module.KAnswerModule",
    datamodule="datamodules.classification.kanswer_datamodule.KAnswerDataModule",
    config="configs/dco/default.yaml",
    status="in progress",
    status_note=(
        "blocked (issue #6: the card's one-seed `--quick` failed C5 on a CE loss spike in an earlier run; on "
        "2026-12-04 the same protocol gave 17/17, exit 0, before and after the issue #18 restructuring, identical "
        "values): loss, metric, both tasks, baselines, `filter_mode`, `p_source`, tests, configs implemented; "
        "`zoo reproduce dco`: 17/17 asserted claims hold (907 s); `--quick` (seed 0): 17/17 (C5 0.389 ≥ 0.2), "
        "376-568 s beside other jobs; DCO step 1.02x CE"
    ),
    summary=(
        "`zoo.dco.module.KAnswerModule` / `CoverageLMModule` with `zoo.dco.loss.DCOLoss` and "
        "`zoo.dco.metrics.PassAtK` (+ CE and its early stopping, label smoothing, test-time temperature, "
        "confidence penalty)"
    ),
    real_data=(
        "MATH-style jsonl (`problem`, `solution`, optional `answer`): `--data.init_args.source=jsonl "
        "--data.init_args.path=<file>`; any local Hugging Face LM (`hf_path`, `smollm2`)"
    ),
    modules=("zoo.dco.module.CoverageLMModule",),
    datamodules=("datamodules.math_text.coverage_datamodule.CoverageLMDataModule",),
    extra="dco",
    ddp=(),
)
