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
    status="in progress",
    status_note=(
        "blocked (issue #4: the card's `--quick` fixes r 0.7 on taylor, where claim 4 fails at this "
        "scale): callback, merge, TSFM, data, baselines, exact mid-epoch resume implemented; `zoo "
        "reproduce prune_finetune`: 9/10 asserted claims hold (claim 4 fails on taylor: Prune+FT 1.15 × "
        "full FT), 10/10 with the card's `--set select_stage1_on=finetuned` (0.98 / 0.97 / 0.99 × full "
        "FT); `--quick` (card-fixed r 0.7 on taylor) exits 1; merged model 1.94x faster than dense at "
        "50% entries removed (`benchmarks/pruned_speedup.py`)"
    ),
    summary=(
        "`callbacks.prune_finetune.PruneThenFinetune` with `zoo.prune_finetune.module.TSFMModule` (+ "
        "zero-shot, full FT, PatchTST from scratch)"
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
