"""The moe_cap method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="moe_cap",
    paper=("MoE-CAP: Benchmarking Cost, Accuracy and Performance of Sparse Mixture-of-Experts Systems (NeurIPS 2025)"),
    module="zoo.moe_cap.module.MoEEvalModule",
    datamodule="datamodules.math_text.prompt_datamodule.MoEPromptDataModule",
    config="configs/moe_cap/default.yaml",
    status="done",
    status_note=(
        "(issue #7); `zoo reproduce moe_cap`: 28/28 asserted claims hold (67 s), `--quick` 28/28; "
        "analytic FLOPs = FlopCounterMode within 0.4% on all six families; hooks cost 0.99-1.05x "
        "validate time (the full callback's per-stage JSON + radar PNG add ~0.1 s)"
    ),
    summary=(
        "`callbacks.moe_cap.MoECAPCallback` with `zoo.moe_cap.module.MoEEvalModule` (tiny random-init "
        "Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3, OLMoE, dense Llama, or any local HF folder; "
        "baselines beside S-MBU/S-MFU: dense MBU/MFU, the public code's S-MFU and DeepSeek shared size, "
        "uniform router, FlopCounterMode reference)"
    ),
    real_data=(
        "GSM8K-style jsonl (`question`, `answer` with `#### <gold>`): `--data.init_args.path=<file>`; "
        "any local Hugging Face causal LM: `--model.init_args.pretrained=<folder>`"
    ),
    callbacks=("callbacks.moe_cap.MoECAPCallback",),
    extra="moe_cap",
)
