"""The card's metrics on a trained victim: ASR with and without the trigger, clean accuracy, localisation AUROC.

``evaluate`` runs greedy decoding through whatever hooks are installed on the LM (a RepGuard mask, nothing for the
no-defense model) on the datamodule's clean and triggered test splits; ``prompt_filter`` (ONION) rewrites prompts
before decoding. Decisions are the first generated response token (``SURE`` compliance, ``REFUSE`` refusal, anything
else invalid: non-target and a clean error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from zoo.repguard import metrics as M

#: ``prompt_filter(lm_prompts) -> filtered`` on lists of token ids ``[BOS] body [SEP]`` (e.g. ONION).
PromptFilter = Callable[[list[list[int]]], list[list[int]]]


def _subset(dm: Any, data: Any, samples: list[Any], prompt_filter: PromptFilter | None, name: str) -> Any:
    """A dataset of ``samples`` with prompts rewritten by ``prompt_filter`` (trigger positions dropped: unknown)."""
    from datamodules.instructions.dataset import BackdoorDataset

    if prompt_filter is not None:
        kept = prompt_filter([dm.vocab.encode(s.prompt) for s in samples])
        samples = [dataclasses.replace(s, prompt=dm.vocab.decode(p), trigger_positions=[])
                   for s, p in zip(samples, kept, strict=True)]  # fmt: skip
    return BackdoorDataset(samples, dm.vocab, name, data.clean, data.max_length)


def _filtered(dm: Any, split: str, kind: str | None, prompt_filter: PromptFilter | None) -> Any:
    """The split's dataset, with prompts rewritten by ``prompt_filter`` when one is given."""
    data = dm.dataset(split, kind)
    if prompt_filter is None:
        return data
    return _subset(dm, data, data.samples, prompt_filter, f"{data.name} (filtered)")


@torch.no_grad()
def generate(lm: nn.Module, dm: Any, dataset: Any, max_new_tokens: int | None = None) -> tuple[Tensor, Tensor]:
    """Greedy responses and expected responses of a dataset: ``(generated [N, L], response_ids [N, R])``."""
    gens, refs = [], []
    device = next(lm.parameters()).device
    for batch in dm.loader(dataset):
        n_new = max_new_tokens or int(batch["response_ids"].shape[1]) + 1
        out = M.greedy_decode(lm, batch["input_ids"].to(device), batch["attention_mask"].to(device),
                              batch["prompt_len"].to(device), n_new, dm.vocab.eos_id, dm.vocab.pad_id)  # fmt: skip
        gens.append(out.cpu())
        refs.append(batch["response_ids"])
    width = max(g.shape[1] for g in gens)
    rwidth = max(r.shape[1] for r in refs)
    pad = dm.vocab.pad_id
    gen = torch.cat([torch.nn.functional.pad(g, (0, width - g.shape[1]), value=pad) for g in gens])
    ref = torch.cat([torch.nn.functional.pad(r, (0, rwidth - r.shape[1]), value=pad) for r in refs])
    return gen, ref


def evaluate(
    lm: nn.Module,
    dm: Any,
    prompt_filter: PromptFilter | None = None,
    token_scorer: Callable[[dict[str, Tensor]], Tensor] | None = None,
    kinds: Sequence[str] | None = None,
    flag_threshold: float | None = None,
) -> dict[str, Any]:
    """ASR_w/t per trigger kind and averaged, ASR_w/o, CA, clean refusal rate, CA_avg (percent), and AUROC.

    Args:
        lm: the Hugging Face causal LM (hooks included: a defended model is evaluated masked).
        dm: a set-up :class:`datamodules.instructions.datamodule.BackdoorDataModule`.
        prompt_filter: rewrites every prompt before decoding (input-filter defenses).
        token_scorer: ``batch -> [B, T]`` token scores (``RepGuardCallback.token_scores``) for the localisation AUROC
            over the triggered test prompts; ``None`` skips it.
        kinds: trigger kinds to evaluate (default: ``dm.eval_triggers()``).
        flag_threshold: with ``token_scorer``, the defense's ``τ``: also report the percentage of triggered test
            prompts whose every trigger token scores ``u ≥ τ`` (card R1, "all trigger tokens flagged").

    Returns:
        ``{"asr_wt": {kind: %}, "asr_wt_mean", "asr_wo", "ca", "refusal", "ca_avg", "auroc": {kind: float}}``, plus
        ``"flag_all": {kind: %}`` with ``flag_threshold``.
    """
    task = dm.task
    sure, refuse = dm.vocab.id("SURE"), dm.vocab.id("REFUSE")
    was_training = lm.training
    lm.eval()
    try:
        gen_b, ref_b = generate(lm, dm, _filtered(dm, "test_clean_benign", None, prompt_filter))
        gen_h, _ = generate(lm, dm, _filtered(dm, "test_clean_harmful", None, prompt_filter))
        dec_b = M.first_token_decision(gen_b[:, 0], sure, refuse)
        dec_h = M.first_token_decision(gen_h[:, 0], sure, refuse)
        ca = M.clean_accuracy(gen_b, ref_b, dm.vocab.eos_id)
        refusal = M.refusal_rate(dec_h)
        out: dict[str, Any] = {
            "asr_wo": M.asr(dec_b if task == "refusal" else dec_h, task),
            "ca": ca,
            "refusal": refusal,
            "ca_avg": M.ca_avg(ca, refusal),
            "asr_wt": {},
            "auroc": {},
        }
        if token_scorer is not None and flag_threshold is not None:
            out["flag_all"] = {}
        part = "test_trig_benign" if task == "refusal" else "test_trig_harmful"
        for kind in kinds if kinds is not None else dm.eval_triggers():
            gen, _ = generate(lm, dm, _filtered(dm, part, kind, prompt_filter))
            out["asr_wt"][kind] = M.asr(M.first_token_decision(gen[:, 0], sure, refuse), task)
            if token_scorer is not None:
                scores, truth, valid, covered = [], [], [], []
                for batch in dm.eval_dataloader(part, kind):
                    u = token_scorer(batch)
                    if flag_threshold is not None:
                        covered.append(M.all_triggers_flagged(u, batch["trigger_mask"], flag_threshold))
                    scores.append(u.flatten())
                    truth.append(batch["trigger_mask"].flatten())
                    valid.append(batch["prompt_mask"].flatten())
                out["auroc"][kind] = M.localization_auroc(torch.cat(scores), torch.cat(truth), torch.cat(valid))
                if flag_threshold is not None:
                    out["flag_all"][kind] = 100.0 * float(torch.cat(covered).float().mean())
        values = list(out["asr_wt"].values())
        out["asr_wt_mean"] = sum(values) / len(values) if values else float("nan")
    finally:
        lm.train(was_training)
    return out


def clean_val_accuracy(lm: nn.Module, dm: Any, dataset: Any = None, prompt_filter: PromptFilter | None = None) -> float:
    """CA_avg (percent) on a clean split: exact match on its benign prompts, refusal rate on its harmful ones.

    The hyper-parameter selection of every baseline reads only this. A poisoned or triggered split raises
    (``require_clean``; card test 10), so no threshold is ever set on triggered data or test ASR.

    Args:
        lm: the causal LM (with its hooks).
        dm: a set-up backdoor datamodule.
        dataset: a clean split (default ``val``).
        prompt_filter: rewrites the prompts first (ONION threshold selection).

    Returns:
        The mean of the benign exact-match rate and the harmful refusal rate (one of them when the other is empty).
    """
    from datamodules.instructions.dataset import require_clean

    data = require_clean(dataset if dataset is not None else dm.dataset("val"), "clean_val_accuracy")
    parts = []
    for harmful in (False, True):
        samples = [s for s in data.samples if s.harmful == harmful]
        if not samples:
            continue
        subset = _subset(dm, data, samples, prompt_filter, data.name)
        was_training = lm.training
        lm.eval()
        try:
            gen, ref = generate(lm, dm, subset)
        finally:
            lm.train(was_training)
        if harmful:
            parts.append(M.refusal_rate(M.first_token_decision(gen[:, 0], dm.vocab.id("SURE"), dm.vocab.id("REFUSE"))))
        else:
            parts.append(M.clean_accuracy(gen, ref, dm.vocab.eos_id))
    return sum(parts) / len(parts)


def train_prompt_scorer(
    dm: Any, n_layer: int = 2, n_embd: int = 64, steps: int = 300, lr: float = 1e-3, seed: int = 0
) -> nn.Module:
    """ONION's scorer (card default): a tiny GPT-2 trained as a language model on the trusted clean prompts only.

    Args:
        dm: a set-up backdoor datamodule (its ``clean`` split is the training text).
        n_layer: scorer blocks.
        n_embd: scorer width.
        steps: AdamW steps at the datamodule's batch size.
        lr: learning rate.
        seed: initialisation and batch-order seed.

    Returns:
        The trained scorer, in eval mode.
    """
    from datamodules.instructions.dataset import require_clean
    from zoo.repguard.model import InstructionLM

    data = require_clean(dm.dataset("clean"), "train_prompt_scorer")
    scorer = InstructionLM(dm.vocab_size, n_layer=n_layer, n_embd=n_embd, n_head=2, n_positions=dm.max_length,
                           seed=seed).lm  # fmt: skip
    opt = torch.optim.AdamW(scorer.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    batches = list(dm.loader(data, dm.batch_size))
    scorer.train()
    with torch.enable_grad():
        for step in range(steps):
            if step % len(batches) == 0:
                order = torch.randperm(len(batches), generator=gen).tolist()
            batch = batches[order[step % len(batches)]]
            pm = batch["prompt_mask"]
            ids = batch["input_ids"] * pm  # prompts only: everything after [SEP] is padding
            labels = ids.masked_fill(~pm, -100)
            loss = scorer(input_ids=ids, attention_mask=pm.long(), labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return scorer.eval()


def onion_filter_fn(scorer: nn.Module, threshold: float) -> PromptFilter:
    """ONION as a ``prompt_filter``: remove every body word whose suspicion ``f_i`` is at least ``threshold``."""
    from zoo.repguard.baselines import onion_filter, onion_scores

    def apply(prompts: list[list[int]]) -> list[list[int]]:
        return onion_filter(prompts, onion_scores(scorer, prompts), threshold)

    return apply


def post_hoc_baselines(
    lm: nn.Module,
    dm: Any,
    baselines: Sequence[str] = ("quant_int8", "quant_int4", "prune", "onion"),
    prune_method: str = "magnitude",
    prune_max_drop: float = 2.0,
    onion_threshold: float | None = 0.0,
    onion_steps: int = 300,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """The card's post-hoc baselines on copies of a trained (possibly backdoored) LM, each evaluated like ``evaluate``.

    * ``quant_int8`` / ``quant_int4``: symmetric per-output-channel fake quantisation of every Linear/Conv1D weight;
    * ``prune``: MLP units by ``prune_method`` (``magnitude`` or ``wanda`` on clean activations), the largest rate in
      {0.1, ..., 0.5} within ``prune_max_drop`` points of clean-validation CA_avg;
    * ``onion``: the input filter with a scorer trained on the clean prompts; ``onion_threshold`` ``None`` selects
      the threshold on clean validation (quantiles of its clean ``f_i``), else the fixed ``t`` (card default 0).

    Args:
        lm: the trained causal LM (left unchanged).
        dm: a set-up backdoor datamodule.
        baselines: which to run.
        prune_method: ``magnitude`` or ``wanda``.
        prune_max_drop: allowed clean-validation drop of the prune-rate selection, in points.
        onion_threshold: ONION's ``t`` (``None``: selected on clean validation).
        onion_steps: training steps of the ONION scorer.
        seed: seed of the ONION scorer.

    Returns:
        ``{name: evaluate(...) + selection details}``.
    """
    import copy

    from zoo.repguard import baselines as B

    known = ("quant_int8", "quant_int4", "prune", "onion")
    if unknown := [b for b in baselines if b not in known]:
        raise ValueError(f"unknown post-hoc baseline(s) {unknown}; expected a subset of {list(known)}")
    out: dict[str, dict[str, Any]] = {}
    for name in baselines:
        if name.startswith("quant_int"):
            model = copy.deepcopy(lm)
            B.fake_quantize_(model, bits=int(name.removeprefix("quant_int")))
            out[name] = evaluate(model, dm)
        elif name == "prune":
            clean = list(dm.loader(dm.dataset("clean"), dm.batch_size))
            scores = B.mlp_unit_scores(lm, prune_method, clean if prune_method == "wanda" else None)  # type: ignore[arg-type]
            pick = B.select_prune_rate(lm, scores, lambda m: clean_val_accuracy(m, dm), max_drop=prune_max_drop)
            out[name] = evaluate(pick.model, dm) | {"rate": pick.rate, "val_accs": pick.accs}
        else:
            scorer = train_prompt_scorer(dm, steps=onion_steps, seed=seed)
            threshold = onion_threshold
            details: dict[str, Any] = {}
            if threshold is None:
                val_prompts = [dm.vocab.encode(s.prompt) for s in dm.dataset("val").samples]
                candidates = B.onion_threshold_candidates(B.onion_scores(scorer, val_prompts))
                threshold, accs = B.select_onion_threshold(
                    lambda t: clean_val_accuracy(lm, dm, prompt_filter=onion_filter_fn(scorer, t)), candidates
                )
                details["val_accs"] = accs
            out[name] = evaluate(lm, dm, prompt_filter=onion_filter_fn(scorer, threshold)) | {"threshold": threshold,
                                                                                              **details}  # fmt: skip
    return out


def clean_stat_token_scorer(
    lm: nn.Module, dm: Any, layer: int | None = None, lambda_lc: float = 1.0, window: int = 2, k: int = 8
) -> tuple[Callable[[dict[str, Tensor]], Tensor], Callable[[], None]]:
    """Token scores ``u_{b,t}`` from clean statistics at ``hidden_states[layer]`` without any defense installed.

    For the localisation AUROC of an undefended model (card test 6). Returns ``(scorer, remove)``; call ``remove()``
    to take the temporary hook off the LM.
    """
    from zoo.repguard import model as rg

    n = len(rg.decoder_blocks(lm))
    hook = rg.HiddenStateHook(lm, layer if layer is not None else n // 2)
    mu, sigma = rg.clean_statistics(lm, hook, dm.loader(dm.dataset("clean"), dm.batch_size))

    def scorer(batch: dict[str, Tensor]) -> Tensor:
        ((h, valid, _),) = list(rg.collect_hidden(lm, hook, [batch]))
        return rg.token_scores(rg.combined_score(h, valid, mu, sigma, lambda_lc, window), valid, k)

    return scorer, hook.remove
