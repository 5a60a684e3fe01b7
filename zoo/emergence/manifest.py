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
    status="in progress",
    status_note="(issue #24); first build, figures pending",
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
