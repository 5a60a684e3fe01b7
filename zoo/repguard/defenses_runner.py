"""The runner's defenses beside DeCE, quantisation, pruning and clean fine-tune: ABL, spectral signatures, CROW, ONION.

``run_defenses(pl_module, dm, names, options)`` runs each named defense against the (possibly backdoored) module a
fit produced and evaluates the result like :func:`zoo.repguard.evaluate.evaluate`:

* ``abl``: a fresh module (same hyperparameters, random init) trained on ``D_train`` from scratch with
  :class:`callbacks.backdoor_baselines.ABLCallback` (a training-time defense: the trained module is not used);
* ``spectral``: the trained module's ``[SEP]`` hidden state of every ``D_train`` sample, per target response class
  (the first response token) the top ``1.5·eps`` spectral scores removed, a fresh module retrained from scratch on
  the rest (:class:`callbacks.backdoor_baselines.ExcludeSamples`);
* ``crow``: the trained weights fine-tuned on the trusted clean set exactly as the ``clean_finetune`` baseline, plus
  CROW's adversarial layer-consistency term (:class:`callbacks.backdoor_baselines.CROWCallback`);
* ``onion_clean``: ONION with its threshold selected on clean validation (``select_onion_clean``), the scorer a tiny
  LM trained on the trusted clean prompts.

Hyper-parameters are never selected on triggered data: ONION's threshold reads only the clean validation split
(``clean_val_accuracy`` refuses anything else); ABL and spectral signatures use the poisoned ids only to report how
many of the isolated/removed samples were poisoned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

#: The defenses this runner adds to ``BackdoorEvaluation``'s ``baselines``.
RUNNER_DEFENSES = ("abl", "spectral", "crow", "onion_clean")


@dataclasses.dataclass
class DefenseOptions:
    """Settings of the runner's defenses (see :class:`callbacks.backdoor_baselines.DefenseComparison`)."""

    abl: dict[str, Any] = dataclasses.field(default_factory=dict)
    spectral_eps: float = 0.05
    spectral_factor: float = 1.5
    spectral_layer: int = -1
    crow_alpha: float = 5.5
    crow_epsilon: float = 0.1
    clean_ft_epochs: int = 3
    clean_ft_lr: float = 5e-4
    onion_steps: int = 300
    onion_max_drop: float = 2.0

    @classmethod
    def build(
        cls, evaluation: Any, abl: dict[str, Any], spectral: dict[str, Any], crow: dict[str, Any]
    ) -> DefenseOptions:
        """Options from a ``DefenseComparison``'s arguments (one clear line per bad value)."""
        from callbacks.backdoor_baselines import ABLCallback
        from zoo.core import checks

        ABLCallback(**abl)  # validates the ABL arguments now, not after fit
        known = {"spectral": ("eps", "factor", "layer"), "crow": ("alpha", "epsilon")}
        for group, values in (("spectral", spectral), ("crow", crow)):
            if [k for k in values if k not in known[group]]:
                checks.fail(checks.callback(evaluation, group), values, f"keys among {list(known[group])}")
        eps = spectral.get("eps", 0.05)
        checks.probability(checks.callback(evaluation, "spectral") + ".eps", eps, open_low=True, open_high=True)
        checks.positive(checks.callback(evaluation, "spectral") + ".factor", spectral.get("factor", 1.5))
        checks.non_negative(checks.callback(evaluation, "crow") + ".alpha", crow.get("alpha", 5.5))
        checks.non_negative(checks.callback(evaluation, "crow") + ".epsilon", crow.get("epsilon", 0.1))
        return cls(
            abl=dict(abl),
            spectral_eps=float(eps),
            spectral_factor=float(spectral.get("factor", 1.5)),
            spectral_layer=int(spectral.get("layer", -1)),
            crow_alpha=float(crow.get("alpha", 5.5)),
            crow_epsilon=float(crow.get("epsilon", 0.1)),
            clean_ft_epochs=int(getattr(evaluation, "clean_ft_epochs", 3)),
            clean_ft_lr=float(getattr(evaluation, "clean_ft_lr", 5e-4)),
            onion_steps=int(getattr(evaluation, "onion_steps", 300)),
        )


# ------------------------------------------------------------------------------------------------ shared pieces


def _inner_trainer(max_epochs: int, callbacks: Sequence[Any], fast_dev_run: bool) -> Any:
    from lightning.pytorch import Trainer

    return Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                   limit_val_batches=0, callbacks=list(callbacks), fast_dev_run=fast_dev_run)  # fmt: skip


def _fresh_module(pl_module: Any, keep_weights: bool, **overrides: Any) -> Any:
    """A new module with ``pl_module``'s hyperparameters: random init (from scratch) or its trained weights."""
    hparams = {k: v for k, v in pl_module.hparams.items() if not k.startswith("_")}
    module = type(pl_module)(**{**hparams, "pretrained": None, **overrides})
    if keep_weights:
        module.load_state_dict(pl_module.state_dict())
    return module


def _fresh_dm(dm: Any, **overrides: Any) -> Any:
    fresh = type(dm)(**{k: v for k, v in dm.hparams.items() if not k.startswith("_")} | overrides)
    fresh.setup()
    return fresh


@torch.no_grad()
def sep_representations(lm: nn.Module, dm: Any, layer: int = -1) -> tuple[Tensor, Tensor, Tensor]:
    """``hidden_states[layer]`` at the ``[SEP]`` position of every ``D_train`` sample, with its class and index.

    The ``[SEP]`` state is the one that predicts the first response token, so it plays the role of Tran et al.'s
    penultimate-layer representation. The class of a sample is its first response token (``SURE``/``REFUSE``: the
    target response class).

    Returns:
        ``(reps [n, d] float32, labels [n] long, index [n] long)`` in ``D_train`` order.
    """
    data = dm.dataset("train")
    device = next(lm.parameters()).device
    reps, labels, index = [], [], []
    was = lm.training
    lm.eval()
    try:
        for batch in dm.loader(data):
            out = lm(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                     output_hidden_states=True, use_cache=False)  # fmt: skip
            h = out.hidden_states[layer]
            sep = (batch["prompt_len"] - 1).to(device)
            reps.append(h[torch.arange(h.shape[0], device=device), sep].float().cpu())
            labels.append(batch["response_ids"][:, 0])
            index.append(batch["index"])
    finally:
        lm.train(was)
    return torch.cat(reps), torch.cat(labels), torch.cat(index)


def _removal_report(removed: Sequence[int], poisoned: Sequence[int]) -> dict[str, Any]:
    hit = len(set(removed) & set(poisoned))
    return {"n_removed": len(removed), "removed_poisoned": hit,
            "removal_precision": hit / len(removed) if removed else float("nan"),
            "removal_recall": hit / len(poisoned) if poisoned else float("nan")}  # fmt: skip


# ------------------------------------------------------------------------------------------------------ defenses


def run_abl(pl_module: Any, dm: Any, options: DefenseOptions, max_epochs: int, fast_dev_run: bool = False) -> dict:
    """ABL from scratch on ``D_train``; the evaluation plus the isolation report."""
    from callbacks.backdoor_baselines import ABLCallback
    from zoo.repguard.evaluate import evaluate

    module, data = _fresh_module(pl_module, keep_weights=False), _fresh_dm(dm)
    abl = ABLCallback(**options.abl)
    _inner_trainer(max_epochs, [abl], fast_dev_run).fit(module, datamodule=data)
    report = {k: v for k, v in abl.report.items() if k != "isolated"}
    return evaluate(module.model.lm, data) | report


def run_spectral(pl_module: Any, dm: Any, options: DefenseOptions, max_epochs: int, fast_dev_run: bool = False) -> dict:
    """Spectral signatures at ``[SEP]`` with the trained module, then retraining from scratch on the rest."""
    from callbacks.backdoor_baselines import ExcludeSamples
    from zoo.repguard import baselines as B
    from zoo.repguard.evaluate import evaluate

    data = _fresh_dm(dm)
    reps, labels, index = sep_representations(pl_module.model.lm, data, options.spectral_layer)
    removed = index[B.spectral_remove(reps, labels, options.spectral_eps, options.spectral_factor)].tolist()
    module = _fresh_module(pl_module, keep_weights=False)
    _inner_trainer(max_epochs, [ExcludeSamples(removed)], fast_dev_run).fit(module, datamodule=data)
    return evaluate(module.model.lm, data) | _removal_report(removed, data.poisoned_ids)


def run_crow(pl_module: Any, dm: Any, options: DefenseOptions, fast_dev_run: bool = False) -> dict:
    """The trained weights fine-tuned on the clean set with CROW's term (the ``clean_finetune`` recipe otherwise)."""
    from callbacks.backdoor_baselines import CROWCallback
    from zoo.repguard.evaluate import evaluate

    module = _fresh_module(pl_module, keep_weights=True, lr=options.clean_ft_lr)
    clean = _fresh_dm(dm, train_on="clean")
    crow = CROWCallback(options.crow_alpha, options.crow_epsilon)
    _inner_trainer(options.clean_ft_epochs, [crow], fast_dev_run).fit(module, datamodule=clean)
    return evaluate(module.model.lm, clean)


def select_onion_clean(lm: nn.Module, dm: Any, scorer: nn.Module, max_drop: float = 2.0) -> tuple[float, dict]:
    """ONION's threshold from clean validation only.

    Candidates are quantiles of the clean validation prompts' ``f_i``; the smallest whose clean-validation CA_avg is
    within ``max_drop`` points of no filtering wins (``select_onion_threshold``).

    Reads ``dm.dataset("val")`` (through ``clean_val_accuracy``, which refuses a non-clean split) and nothing else.
    """
    from zoo.repguard import baselines as B
    from zoo.repguard.evaluate import clean_val_accuracy, onion_filter_fn

    val = dm.dataset("val")
    candidates = B.onion_threshold_candidates(B.onion_scores(scorer, [dm.vocab.encode(s.prompt) for s in val.samples]))
    return B.select_onion_threshold(
        lambda t: clean_val_accuracy(lm, dm, val, prompt_filter=onion_filter_fn(scorer, t)), candidates, max_drop
    )


def run_onion_clean(pl_module: Any, dm: Any, options: DefenseOptions, fast_dev_run: bool = False) -> dict:
    """ONION with the clean-validation threshold, scorer trained on the trusted clean prompts.

    Under ``fast_dev_run`` (plumbing only) the scorer trains 5 steps.
    """
    from zoo.repguard.evaluate import evaluate, onion_filter_fn, train_prompt_scorer

    lm = pl_module.model.lm
    scorer = train_prompt_scorer(
        dm, steps=min(options.onion_steps, 5) if fast_dev_run else options.onion_steps, seed=int(getattr(dm, "seed", 0))
    )
    threshold, accs = select_onion_clean(lm, dm, scorer, options.onion_max_drop)
    return evaluate(lm, dm, prompt_filter=onion_filter_fn(scorer, threshold)) | {
        "threshold": threshold, "val_accs": {str(k): v for k, v in accs.items()}}  # fmt: skip


def run_defenses(
    pl_module: Any,
    dm: Any,
    names: Sequence[str],
    options: DefenseOptions | None = None,
    max_epochs: int = 24,
    fast_dev_run: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run each of ``names`` (a subset of ``RUNNER_DEFENSES``) against the trained module; ``{name: metrics}``.

    Args:
        pl_module: the trained ``InstructionLMModule`` (left unchanged).
        dm: its set-up datamodule.
        names: the defenses, in order.
        options: their settings (defaults: :class:`DefenseOptions`).
        max_epochs: epochs of the from-scratch trainings (ABL, spectral): the run's own.
        fast_dev_run: one batch per inner epoch (plumbing runs).

    Returns:
        ``{name: evaluate(...) + the defense's own report}``.
    """
    if unknown := [n for n in names if n not in RUNNER_DEFENSES]:
        raise ValueError(f"unknown runner defense(s) {unknown}; expected a subset of {list(RUNNER_DEFENSES)}")
    options = options or DefenseOptions()
    dm.setup()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == "abl":
            out[name] = run_abl(pl_module, dm, options, max_epochs, fast_dev_run)
        elif name == "spectral":
            out[name] = run_spectral(pl_module, dm, options, max_epochs, fast_dev_run)
        elif name == "crow":
            out[name] = run_crow(pl_module, dm, options, fast_dev_run)
        else:
            out[name] = run_onion_clean(pl_module, dm, options, fast_dev_run)
    return out
