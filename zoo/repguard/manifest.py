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
    status="done",
    status_note=(
        "issue #23: `zoo reproduce repguard` (full protocol, 3 seeds, R5 at seed 0): 11/11 asserted claims hold: "
        "ASR w/t 98.4-100 -> 0.0 in all 9 refusal cells, token AUROC 1.00, every trigger flagged, clean samples "
        "isolated 0% (median), random control -0.7 pts; every other defense keeps the backdoor or loses the clean "
        "accuracy (ONION); RepGuard-style breaks below its detection limit (1-2%) and on MTBA; seed 2 loses 14 "
        "CA_avg pts (81.3) in all three attacks (median hides it); `--quick` 7/7 in 193 s; overhead 1.04x per epoch"
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
