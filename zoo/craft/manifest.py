"""The craft method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="craft",
    paper="CRAFT: Future Link Prediction Without Memory or Aggregation (NeurIPS 2025)",
    module="zoo.craft.module.CRAFTModule",
    datamodule="datamodules.temporal_graph.datamodule.TemporalLinkDataModule",
    config="configs/craft/default.yaml",
    status="done",
    status_note=(
        "`zoo reproduce craft`: 17/17 claims hold; training 2.16-2.48x TGN (medians of 5 interleaved "
        "fits, 3 runs), 8.4-8.9k events/s, eval 92-100k candidate-scores/s"
    ),
    summary="`zoo.craft.module.CRAFTModule` (+ EdgeBank, TGN, Oracle)",
    real_data=(
        "JODIE csv, DyGLib `ml_<name>.csv`, TGB `tgbl-*`, TGB-Seq csv: `--data.init_args.path=<file or "
        "folder> --data.init_args.format=jodie\\|dyglib\\|tgb\\|tgbseq`"
    ),
    modules=("zoo.craft.module.EdgeBankModule", "zoo.craft.module.TGNModule", "zoo.craft.module.OracleModule"),
    extra="craft",
    tiny={
        "*": (
            "--data.init_args.n_events=1500",
            "--data.init_args.n_users=40",
            "--data.init_args.n_items=80",
            "--data.init_args.num_eval_negatives=20",
        )
    },
    ddp=(),
    dedicated_ddp_test=True,
)
