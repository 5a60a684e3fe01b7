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
        "issue #22: DCO's filter runs the public code's loop (`filter_mode: collect`, default of the filtered "
        "configs: every step trains on a full batch of examples with F > 0.1; `p_source: sampled` re-estimated per "
        "candidate batch, hard = p̂_est < threshold); `zoo reproduce dco`: 17/17 asserted claims hold (1346 s on a "
        "shared machine); `--quick` gates C1-C4 and C6 and prints C5 as info (card): 15/15, exit 0, 177 s idle "
        "(296 s before issue #22); every asserted claim has a test that fails it on perturbed "
        "numbers; DCO step 1.02x CE"
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
