"""The emergence method declares itself (strings only; see ``zoo.core.manifest``)."""

from zoo.core.manifest import Manifest

MANIFEST = Manifest(
    slug="emergence",
    paper=(
        "Emergence and scaling laws in SGD learning of shallow neural networks (Ren, Nichani, Wu, Lee; "
        "arXiv 2504.19983; no official code: the card's reconstruction)"
    ),
    module="zoo.emergence.module.TwoLayerHermiteStudent",
    datamodule="datamodules.gaussian_teacher.datamodule.GaussianAdditiveTeacherDataModule",
    config="configs/emergence/default.yaml",
    status="done",
    status_note=(
        "(issue #24); `zoo reproduce emergence` (`--quick` = full, 4 seeds vectorised): 15/15 asserted claims hold "
        "in 20 s; τ_1 191-439 updates, τ_1/τ̂_1 1.05-1.10, Spearman ρ ≥ 0.93, median s_p ≤ 0.12, slope of log "
        "median τ_p vs log p 2.06 (β 1.5), final L_refit 0.012 vs L_fixed 0.36; `trained` learns ≤ 2 directions; "
        "C5's revised neuron form not reproduced (a neuron mid-escape keeps |a_j| 0.005, info); vectorised 4 "
        "seeds 1.51× sequential (card ≥ 2.5×: not met, compute-bound float64), Lightning 0.85× bare"
    ),
    summary=(
        "`zoo.emergence.module.TwoLayerHermiteStudent` (population GD in float64 or online SGD on the sphere, "
        "second layer fixed/trained/two_timescale/refit, seeds as replicas) + "
        "`datamodules.gaussian_teacher.datamodule.GaussianAdditiveTeacherDataModule` (additive power-law Hermite "
        "teacher) with `callbacks.overlap_logger.OverlapLogger` (M_p(t), first passages, r_p)"
    ),
    real_data=(
        "teacher `.npz` (V P×d, a P): `--data.init_args.teacher_path=<file>`; sample `.npz` (X n×d, y n, optional "
        "V, a): `--data.init_args.dataset_path=<file>`"
    ),
    callbacks=("callbacks.overlap_logger.OverlapLogger",),
    extra=None,
    tiny={"*": ("--trainer.max_steps=2", "--model.init_args.inner_steps=2")},
    ddp=None,
)
