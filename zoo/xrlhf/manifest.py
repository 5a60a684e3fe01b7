"""The xrlhf method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="xrlhf",
    paper=(
        "Improving RLHF by Explaining Unsatisfactory Responses and Unlearning their Causes (NeurIPS "
        "2025; the card's reconstruction: no official code)"
    ),
    module="zoo.xrlhf.module.XRLHFModule",
    datamodule="datamodules.preference.feature_datamodule.PreferenceDataModule",
    config="configs/xrlhf/default.yaml",
    status="done",
    status_note=(
        "(issues #8, #22); `zoo reproduce xrlhf`: 8/8 asserted claims hold (3 seeds), `--quick` 8/8; "
        "card's greedy selector: 2% of explanations within tau (exact solver option: 75%); union recall of "
        "planted pairs convex 0.79 vs k-NN matched on |S_all| 0.69 (paired +0.10); fix rate after removal "
        "convex vs union-matched k-NN not reproduced (paired -0.015; 5/10 seeds); retrain without the "
        "convex set fixes 0.91 of unsatisfactory prompts (keeps 0.998), NegGrad+ 0.86 (keeps 0.976), random set 0.03"
    ),
    summary=(
        "`zoo.xrlhf.module.XRLHFModule` + `datamodules.preference.feature_datamodule.PreferenceDataModule` "
        "(`ConvexExplainer` selection, greedy or exact; k-NN per item and union-matched, random, TracIn, "
        "random-set and planted baselines; policy-pairs DPO of the public code) with the shared "
        "`callbacks.unlearning.UnlearningCallback` (NegGrad+, finetune, retrain, UAM); tiny-LM path "
        "`XRLHFLMModule` + `datamodules.preference.lm_datamodule.PreferenceLMDataModule` (GPT-2 RM, closed-form or "
        "ReMax re-tune)"
    ),
    real_data=(
        "precomputed-feature `.npz` (`delta_phi`, `phi_candidates`, `sft_logits`, `r_eval`): "
        "`--data.init_args.path=<file>`; HH-RLHF-style preference jsonl (`prompt`, `chosen`, `rejected`) "
        "+ test-candidate jsonl (`prompt`, `responses`, `sft_logits`, `r_eval`) on the tiny-LM path: `-c "
        "configs/xrlhf/tiny_lm.yaml --data.init_args.source=jsonl --data.init_args.path=<train> "
        "--data.init_args.test_path=<test>`"
    ),
    modules=("zoo.xrlhf.module.XRLHFLMModule",),
    datamodules=("datamodules.preference.lm_datamodule.PreferenceLMDataModule",),
    callbacks=("callbacks.unlearning.UnlearningCallback",),
    extra="xrlhf",
    ddp=(),
)
