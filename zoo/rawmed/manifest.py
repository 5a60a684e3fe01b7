"""The rawmed method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

#: A tiny cohort and model so a config smoke-runs in seconds (the stage-1 recipe is smoke-run by fast_dev_run).
_DATA = ("--data.init_args.n_stays=40", "--data.init_args.max_events=8")
#: A tiny transformer on the smoke recipes (configs/rawmed/rqvae_tiny*.yaml: the same 40 stays, so the same vocabulary).
_AR = (
    "--trainer.max_epochs=1",
    "--model.init_args.layers=1",
    "--model.init_args.d=16",
    "--model.init_args.ffn=32",
    "--model.init_args.eval_parts=[fidelity]",
)

MANIFEST = Manifest(
    slug="rawmed",
    paper=(
        "RawMed: Generating Multi-Table Time-Series EHR from Latent Space with Minimal Preprocessing (Cho, Kim, Lee, "
        "Park, Choi; NeurIPS 2025; arXiv 2507.06996)"
    ),
    module="zoo.rawmed.module.RawMedAR",
    datamodule="datamodules.ehr.datamodule.EHRDataModule",
    config="configs/rawmed/default.yaml",
    status="in progress",
    status_note=(
        "(issue #27); `zoo reproduce rawmed --quick`: 2/2 asserted claims hold in 210 s (invalid events 0.172 per "
        "event, MIA 0.511; copy 1.000); C4's KCl task not reproduced at quick scale (TSTR 0.500 vs TRTR 0.732, info); "
        "C3 from the full stage 1 holds (D=2 vs D=1 token accuracy 0.828 vs 0.817, patientweight KS 0.345 vs 0.457); "
        "the full protocol's stage 2 is not yet measured; KV-cached sampling 7-17× the naive recompute"
    ),
    summary=(
        "`zoo.rawmed.module.RawMedRQVAE` (stage 1: event residual-VQ autoencoder, vector-quantize-pytorch) and "
        "`RawMedAR` (stage 2: causal transformer over time digits and codes, KV-cached masked sampling, decoding, "
        "post-processing to one CSV per table, evaluation); baselines `SyntheticBaseline` (marginal, copy), no time "
        "separation, VQ depth 1; `zoo evaluate rawmed` (CDE, I-CDE, PCC, I-PCC, predictive similarity, time-gap and "
        "event-count KS, next-event F1, TSTR utility, membership inference) on any two folders of per-table CSVs"
    ),
    real_data=(
        "MIMIC-IV 2.0/2.2+ CSVs (icustays, labevents + d_labitems, prescriptions, inputevents + d_items): "
        "`--data.init_args.source=mimiciv --data.init_args.root=<folder with hosp/ and icu/>`; synthetic vs real "
        "folders: `zoo evaluate rawmed --real-test <dir> --synthetic <dir>`"
    ),
    modules=("zoo.rawmed.module.RawMedRQVAE", "zoo.rawmed.module.SyntheticBaseline"),
    extra="rawmed",
    evaluate="zoo.rawmed.evaluate:main",
    shapes=("time_slots",),
    tiny={
        "*": _DATA,
        "rqvae*": ("--trainer.max_epochs=1", "--data.init_args.batch_size=64"),
        "default*": (*_AR, "--model.init_args.pretrained=configs/rawmed/rqvae_tiny.yaml"),
        "vq_depth1*": (*_AR, "--model.init_args.pretrained=configs/rawmed/rqvae_tiny.yaml"),
        "no_timesep*": (*_AR, "--model.init_args.pretrained=configs/rawmed/rqvae_tiny_in_text.yaml"),
        "marginal*": ("--model.init_args.eval_parts=[fidelity]",),
        "copy*": ("--model.init_args.eval_parts=[fidelity]",),
    },
    ddp=(),
)
