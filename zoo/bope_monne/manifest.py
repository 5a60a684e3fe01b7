"""The bope_monne method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

_BOPE_TINY = (
    "--model.init_args.n_pe_first=2",
    "--model.init_args.n_batches=1",
    "--model.init_args.steps=10",
    "--model.init_args.mc_samples=8",
    "--model.init_args.num_restarts=1",
    "--model.init_args.raw_samples_pe=8",
    "--model.init_args.raw_samples_batch=8",
    "--model.init_args.maxiter=5",
    "--data.init_args.n_holdout=50",
)

MANIFEST = Manifest(
    slug="bope_monne",
    paper=(
        "Bayesian Optimization with Preference Exploration using a Monotonic Neural Network Ensemble (Wang, Branke, "
        "Poloczek; NeurIPS 2025; arXiv 2501.18792; the card's reconstruction: no public code)"
    ),
    module="zoo.bope_monne.module.BOPEModule",
    datamodule="datamodules.multiobjective.datamodule.BOPEDataModule",
    config="configs/bope_monne/default.yaml",
    status="done",
    status_note=(
        "(issue #26); `zoo reproduce bope_monne`: 7/7 asserted claims hold (VehicleSafety-PWL, 10 seeds, 120 "
        "replications, 656 s): final U MoNNE 0.894 vs PairwiseGP-EUBO 0.794 vs random designs 0.454 (MoNNE > random "
        "in 10/10 seeds), held-out pairwise accuracy 0.903 vs 0.869; claim 4's median PE-stage U (MoNNE ≥ "
        "non-monotone) not reproduced (0.532 vs 0.559; paired wins 7/10 hold); noise robustness holds because EUBO-ζ "
        "asks far-apart pairs (median |Δg| 2.17: 0 wrong probit answers); random PE pairs reach 0.973; `--quick` 2/2 "
        "in 72 s; MoNNE fit 0.24× PairwiseGP's, vectorised ensemble 2.3-2.7× a member loop (card ≥ 3×: not met)"
    ),
    summary=(
        "`zoo.bope_monne.module.BOPEModule` (the BOPE loop on BoTorch, a stage per epoch: MoNNE utility ensemble, "
        "ensemble EUBO-ζ preference exploration, qNEIUU with the ensemble learned objective; arms PairwiseGP-EUBO, "
        "random-f, non-monotone, M = 1, oracle, random) and `MoNNEUtilityModule` (the ensemble fitted to recorded "
        "comparisons)"
    ),
    real_data=(
        "a decision maker's comparisons: `-c configs/bope_monne/utility.yaml --data.init_args.outcomes=<outcomes.csv> "
        "--data.init_args.comparisons=<comparisons.csv>`"
    ),
    modules=("zoo.bope_monne.module.MoNNEUtilityModule",),
    datamodules=("datamodules.multiobjective.datamodule.ComparisonsDataModule",),
    extra="bope_monne",
    install_note="BoTorch 0.18 needs Python >= 3.11",
    shapes=("n_objectives",),
    tiny={
        "utility*": ("--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=1"),
        "default*": _BOPE_TINY,
        "pairwise_gp*": _BOPE_TINY,
        "random*": _BOPE_TINY,
        "nonmonotone*": _BOPE_TINY,
        "monne_m1*": _BOPE_TINY,
        "oracle*": _BOPE_TINY,
    },
    ddp=None,
)
