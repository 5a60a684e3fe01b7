"""The repguard method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="repguard",
    paper=(
        "RepGuard: Adaptive Feature Decoupling for Backdoor Defense in Large Language Models (NeurIPS "
        "2025; RepGuard-style: the card's reconstruction)"
    ),
    module="zoo.repguard.module.InstructionLMModule",
    datamodule="datamodules.instructions.datamodule.BackdoorDataModule",
    config="configs/repguard/default.yaml",
    status="in progress",
    status_note=(
        "blocked (issue #5: the card's reconstructed defense cannot meet claim 2 here; even oracle masks "
        "leave ASR at 100%): data, attacks, defense, baselines, metrics and tests implemented; `zoo "
        "reproduce repguard --quick`: 4/7 asserted claims hold, exits 1"
    ),
    summary=(
        "`callbacks.backdoor_defense.RepGuardCallback` with `zoo.repguard.module.InstructionLMModule` (+ "
        "no defense, DeCE, random mask; post-hoc int8/int4 quantisation, MLP pruning, ONION, clean "
        "fine-tune via `BackdoorEvaluation`)"
    ),
    real_data=(
        "Alpaca-style JSON/JSONL (`instruction`, `input`, `output`): `--data.init_args.path=<file> "
        "[--data.init_args.clean_path=<trusted file>]`"
    ),
    callbacks=("callbacks.backdoor_defense.RepGuardCallback", "callbacks.backdoor_defense.BackdoorEvaluation"),
    extra="repguard",
    tiny={
        "*": (
            "--data.init_args.n_train=128",
            "--data.init_args.n_clean=32",
            "--data.init_args.n_val=16",
            "--data.init_args.n_test=16",
            "--data.init_args.batch_size=32",
            "--model.init_args.n_layer=2",
            "--model.init_args.n_embd=32",
            "--model.init_args.n_head=2",
            "--model.init_args.pretrained=null",
        ),  # plumbing only: post_hoc.yaml starts from no_defense.yaml
    },
    ddp=(),
)
