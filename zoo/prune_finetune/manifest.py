"""The prune_finetune method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="prune_finetune",
    paper=(
        "Less is More: Unlocking Specialization of Time Series Foundation Models via Structured Pruning (NeurIPS 2025)"
    ),
    module="zoo.prune_finetune.module.TSFMModule",
    datamodule="datamodules.timeseries.ltsf_datamodule.LTSFDataModule",
    config="configs/prune_finetune/default.yaml",
    status="done",
    status_note=(
        "callback, merge for PatchTST and TimesFm, TSFM, data, baselines (zero-shot, full FT, LoRA via peft with its "
        "own lr grid, PatchTST scratch), exact mid-epoch resume; `zoo reproduce prune_finetune` (23.5 min from an "
        "empty cache): 12/12 asserted claims hold with stage 1 on the fine-tuned validation MSE (Prune+FT 1.046 / "
        "0.968 / 0.983 × full FT; the public code's selector, printed beside it, gives 1.137 on taylor), TimesFm row "
        "1.060 × (printed), LoRA 1.10-2.31 × full FT; `--quick` (3 taylor seeds, 80 s) 6/6; merged/dense speed-up at "
        "50% entries removed 2.10x PatchTST, 1.46x TimesFm (`benchmarks/pruned_speedup.py`)"
    ),
    summary=(
        "`callbacks.prune_finetune.PruneThenFinetune` with `zoo.prune_finetune.module.TSFMModule` (+ "
        "zero-shot, full FT, LoRA, PatchTST from scratch; `backbone: timesfm`)"
    ),
    real_data=(
        "ETT CSVs (`date,HUFL,...,OT`, hourly or 15-min) and any `date,...` CSV: "
        "`--data.init_args.path=<file> [--data.init_args.format=ett_hour\\|ett_minute\\|custom]`"
    ),
    datamodules=("datamodules.timeseries.pretrain_datamodule.TSFMPretrainDataModule",),
    callbacks=("callbacks.prune_finetune.PruneThenFinetune",),
    extra="prune_finetune",
    tiny={
        "*": ("--model.init_args.pretrained=null",),  # plumbing only: no recipe pretraining
        "pretrain*": (
            "--data.init_args.num_series=96",
            "--data.init_args.val_series=16",
            "--data.init_args.val_windows=32",
        ),
    },
    structures={"prune_finetune.merge": "zoo.prune_finetune.merge:rebuild_"},
    # the prune phase only: fit #2 (the fine-tune) runs single-process, so DDP fine-tunes pruned.ckpt with full_ft
    ddp=("--trainer.callbacks.init_args.finetune=false",),
    dedicated_ddp_test=True,
)
