"""RawMed's networks (card tests 5, 6, 12): the event RQ-VAE, the causal transformer, its KV cache, the sampler."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from zoo.rawmed.model import EventAR, EventRQVAE, RawMedModelError, TokenLayoutError

torch.set_num_threads(1)

TINY = {"vocab_size": 40, "L": 16, "F": 32, "L_z": 4, "F_z": 16, "K": 16}


def _events(n: int, seed: int, vocab: int = 40, L: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Event-like id rows: ``table col val col val … [SEP] [PAD]…`` with digit values and the matching type/dpe ids."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.zeros(n, L, dtype=torch.long)
    type_ids = torch.zeros(n, L, dtype=torch.long)
    dpe_ids = torch.full((n, L), 14, dtype=torch.long)
    length = torch.randint(6, L - 1, (n,), generator=gen)
    words = torch.randint(14, vocab, (n, L), generator=gen)  # word ids; 4-13 are the ten digits
    digits = torch.randint(4, 14, (n, L), generator=gen)
    pos = torch.arange(L).expand(n, L)
    is_value = (pos % 3 == 2) & (pos < length.unsqueeze(1))
    is_word = (pos % 3 != 2) & (pos < length.unsqueeze(1))
    input_ids = torch.where(is_value, digits, torch.where(is_word, words, input_ids))
    input_ids[:, 0] = torch.randint(14, 17, (n,), generator=gen)  # three tables
    type_ids = torch.where(is_value, 3, torch.where(is_word, 2, type_ids))
    type_ids[:, 0] = 1
    dpe_ids = torch.where(is_value, torch.randint(0, 13, (n, L), generator=gen), dpe_ids)
    sep = length.unsqueeze(1) == pos
    input_ids, type_ids = input_ids.masked_fill(sep, 3), type_ids.masked_fill(sep, 6)
    return input_ids, type_ids, dpe_ids


def _train(model: EventRQVAE, batch: tuple[torch.Tensor, ...], steps: int) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(*batch)["loss"].backward()
        opt.step()


# ---------------------------------------------------------------------------------------------------------------- #
# Stage 1
# ---------------------------------------------------------------------------------------------------------------- #


def test_depth_two_reconstructs_better_than_depth_one() -> None:
    """Card test 5: at equal steps and seed, D=2 gives a lower eval reconstruction CE than D=1; within the D=2 model,
    adding the second code halves the latent error and lowers the CE against decoding from the first code alone.

    Fails if the second quantizer does not quantize the residual ``r_1 = z − c_{k_1}`` (a second pass over ``z`` adds
    nothing) or if ẑ is not the sum over depths. (Seeds 0-6 measured: D=2 below D=1 by 0.01-0.11 nats.)
    """
    batch = _events(256, seed=0)
    ces, models = {}, {}
    for depth in (1, 2):
        torch.manual_seed(0)
        models[depth] = model = EventRQVAE(**TINY, D=depth)
        _train(model, batch, steps=60)
        model.eval()
        with torch.no_grad():
            out = model(*batch)
        ces[depth] = float(out["ce_input"] + out["ce_type"] + out["ce_dpe"])
    assert ces[2] <= ces[1], ces
    model = models[2]
    with torch.no_grad():
        z = model.encode_latent(model.embed(*batch))
        indices = model.unflatten_codes(model.encode(*batch))
        first = model.codebooks[0][indices[..., 0]]
        both = first + model.codebooks[0][indices[..., 1]]
        ce = {
            name: sum(float(F.cross_entropy(lg.flatten(0, 1), t.flatten())) for lg, t in zip(heads, batch, strict=True))
            for name, heads in (("first", model.heads(model.decode_latent(first))),
                                ("both", model.heads(model.decode_latent(both))))
        }  # fmt: skip
    assert ((z - both) ** 2).mean() < 0.75 * ((z - first) ** 2).mean()
    assert ce["both"] < ce["first"], ce
    torch.testing.assert_close(ce["both"], ces[2], rtol=1e-4, atol=1e-4)


def test_shared_codebook_is_one_tensor_moved_by_ema_only() -> None:
    """Card test 5: one codebook tensor at every depth, no optimizer gradient, moved by a training-mode forward only.

    Fails with per-depth codebooks (``shared_codebook=False``), a learnable codebook (a Parameter with a gradient) or an
    EMA update in eval mode.
    """
    torch.manual_seed(0)
    model = EventRQVAE(**TINY, D=3)
    books = model.codebooks
    assert len(books) == 3 and len({b.data_ptr() for b in books}) == 1
    book = books[0]
    assert not book.requires_grad
    assert all(p.data_ptr() != book.data_ptr() for p in model.parameters())
    batch = _events(64, seed=1)
    before = book.clone()
    model.eval()
    model(*batch)
    torch.testing.assert_close(book, before, rtol=0, atol=0)  # eval: no EMA move
    model.train()
    model(*batch)["loss"].backward()
    assert book.grad is None
    assert (book - before).abs().max() > 1e-4  # EMA moved it
    assert all(b.data_ptr() == book.data_ptr() for b in model.codebooks)


def _quantize_reference(z: torch.Tensor, book: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``r_0 = z``, ``k_d = argmin_k ‖r_{d−1} − c_k‖``, ``r_d = r_{d−1} − c_{k_d}``: indices ``(N, L_z, D)`` and ẑ."""
    residual, z_hat, ks = z, torch.zeros_like(z), []
    for _ in range(depth):
        k = torch.cdist(residual, book.expand(z.shape[0], *book.shape)).argmin(-1)
        ks.append(k)
        z_hat, residual = z_hat + book[k], residual - book[k]
    return torch.stack(ks, -1), z_hat


def test_eval_codes_are_the_nearest_residual_codes_in_position_major_order() -> None:
    """Eval encoding = the card's greedy residual argmin, flattened (z1,d1),(z1,d2),(z2,d1),….

    Fails if eval samples codes stochastically, if the residual is not subtracted, or if the codes are depth-major.
    """
    torch.manual_seed(0)
    model = EventRQVAE(**TINY, D=2)
    _train(model, _events(128, seed=2), steps=5)  # move the codebook away from its initialisation
    batch = _events(32, seed=3)
    model.eval()
    with torch.no_grad():
        z = model.encode_latent(model.embed(*batch))
    indices, _ = _quantize_reference(z, model.codebooks[0], 2)
    codes = model.encode(*batch)
    assert codes.shape == (32, 8)
    expected = torch.stack([indices[:, p, d] for p in range(4) for d in range(2)], dim=1)
    torch.testing.assert_close(codes, expected, rtol=0, atol=0)


def test_code_order_option_and_its_inverse() -> None:
    """``code_order``: position-major is (z1,d1),(z1,d2),…; depth-major is (z1,d1),(z2,d1),…; unflatten inverts both.

    Fails on a transposed reshape, which silently scrambles codes between the two stages.
    """
    indices = torch.arange(2 * 4 * 3).view(2, 4, 3)  # value 3p + d at position p, depth d (+12 in row 1)
    pm = EventRQVAE(**{**TINY, "K": 32}, D=3)
    dm = EventRQVAE(**{**TINY, "K": 32}, D=3, code_order="depth_major")
    assert pm.flatten_codes(indices)[0].tolist() == [3 * p + d for p in range(4) for d in range(3)]
    assert dm.flatten_codes(indices)[0].tolist() == [3 * p + d for d in range(3) for p in range(4)]
    for model in (pm, dm):
        torch.testing.assert_close(model.unflatten_codes(model.flatten_codes(indices)), indices)
    dm.load_state_dict(pm.state_dict())
    batch = _events(16, seed=4)
    a, b = pm.encode(*batch), dm.encode(*batch)
    torch.testing.assert_close(pm.unflatten_codes(a), dm.unflatten_codes(b))
    for x, y in zip(pm.decode(a), dm.decode(b), strict=True):
        torch.testing.assert_close(x, y)


def test_shapes_and_decode_equals_the_eval_forward_argmax() -> None:
    """Encoder L×F -> L_z×F_z, decoder back to L×F; ``decode(encode(x))`` = argmax of the eval forward's logits.

    Fails if decode rebuilds ẑ from one depth only (not Σ_d c_{k_d}) or if a stage does not exactly halve/double.
    """
    torch.manual_seed(0)
    model = EventRQVAE(**TINY, D=2)
    _train(model, _events(64, seed=5), steps=3)
    model.eval()
    batch = _events(8, seed=6)
    with torch.no_grad():
        e = model.embed(*batch)
        z = model.encode_latent(e)
        out = model(*batch)
    assert e.shape == (8, 16, 32) and z.shape == (8, 4, 16) and model.decode_latent(z).shape == (8, 16, 32)
    assert out["logits_input"].shape == (8, 16, 40) and out["logits_type"].shape == (8, 16, 7)
    assert out["logits_dpe"].shape == (8, 16, 15)
    ids = model.decode(model.encode(*batch))
    assert all(x.shape == (8, 16) and x.dtype == torch.long for x in ids)
    for got, logits in zip(ids, (out["logits_input"], out["logits_type"], out["logits_dpe"]), strict=True):
        torch.testing.assert_close(got, logits.argmax(-1))
    _, z_hat = _quantize_reference(z, model.codebooks[0], 2)
    with torch.no_grad():
        heads = model.heads(model.decode_latent(z_hat))
    torch.testing.assert_close(ids[0], heads[0].argmax(-1))


@pytest.mark.parametrize("ignore_pad", [False, True])
def test_loss_is_three_token_ces_plus_the_summed_commitment(ignore_pad: bool) -> None:
    """loss = CE(input) + CE(type) + CE(dpe) + Σ_d commitment_d (pads included unless ``ce_ignore_pad``).

    The commitment reference is Σ_d mean‖r_{d−1} − c_{k_d}‖² with the pre-update codebook; fails if the per-quantizer
    loss vector is averaged (the revision says sum) or if pads are dropped by default.
    """
    torch.manual_seed(0)
    model = EventRQVAE(**TINY, D=2, commitment_weight=0.7, ce_ignore_pad=ignore_pad)
    model.train()
    batch = _events(32, seed=7)
    book = model.codebooks[0].clone()
    torch.manual_seed(1)
    z = model.encode_latent(model.embed(*batch)).detach()  # train-mode BatchNorm: batch statistics, deterministic
    out = model(*batch)
    indices = model.unflatten_codes(out["codes"])
    residual, commit = z, 0.0
    for d in range(2):
        chosen = book[indices[..., d]]
        commit = commit + ((residual - chosen) ** 2).mean()
        residual = residual - chosen
    torch.testing.assert_close(out["commit"], 0.7 * commit, rtol=1e-4, atol=1e-6)
    keep = batch[0] != 0 if ignore_pad else torch.ones_like(batch[0], dtype=torch.bool)
    for name, target in zip(("input", "type", "dpe"), batch, strict=True):
        ref = F.cross_entropy(out[f"logits_{name}"][keep], target[keep])
        torch.testing.assert_close(out[f"ce_{name}"], ref)
    total = out["ce_input"] + out["ce_type"] + out["ce_dpe"] + out["commit"]
    torch.testing.assert_close(out["loss"], total)


def test_mse_embed_option_trains_the_latent_on_the_embedding() -> None:
    """``recon_loss: mse_embed`` adds MSE(decoder output, detached embedding); its heads get no gradient into the
    decoder. Fails if the option silently keeps the CE path (no ``mse`` term, decoder gradient from the heads)."""
    torch.manual_seed(0)
    model = EventRQVAE(**TINY, recon_loss="mse_embed")
    out = model(*_events(16, seed=8))
    assert "mse" in out and float(out["mse"].detach()) > 0
    grads = torch.autograd.grad(out["ce_input"], [model.decoder[0].weight, model.head_input.weight], allow_unused=True)
    assert grads[0] is None and grads[1] is not None


def test_bad_inputs_raise_one_line_naming_the_argument() -> None:
    """Wrong dtype, shape or id range stops with a ``ValueError`` naming the tensor, never a silent clamp."""
    model = EventRQVAE(**TINY)
    ids, types, dpe = _events(4, seed=9)
    with pytest.raises(RawMedModelError, match="input_ids"):
        model(ids.float().long()[:, :8], types[:, :8], dpe[:, :8])
    with pytest.raises(RawMedModelError, match=r"type_ids: expected ids in \[0, 7\)"):
        model(ids, types + 7, dpe)
    with pytest.raises(RawMedModelError, match="dpe_ids"):
        model(ids, types, dpe.float())
    with pytest.raises(RawMedModelError, match="codes"):
        model.decode(torch.full((2, 8), 16))
    with pytest.raises(ValueError, match=r"--model.init_args.L=24: expected L / L_z"):
        EventRQVAE(40, L=24, L_z=4)


# ---------------------------------------------------------------------------------------------------------------- #
# Stage 2
# ---------------------------------------------------------------------------------------------------------------- #

K, TIME_LEN, CPE = 16, 2, 4
E = TIME_LEN + CPE


def _ar(time_len: int = TIME_LEN, norm_first: bool = False, seed: int = 0) -> EventAR:
    torch.manual_seed(seed)
    return EventAR(K, time_len, CPE, layers=2, d=32, heads=4, ffn=64, max_len=64, norm_first=norm_first).eval()


def _valid_tokens(n: int, length: int, seed: int, time_len: int = TIME_LEN) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    model = _ar(time_len)
    stays = []
    for _ in range(n):
        m = int(torch.randint(0, (length - 2) // (time_len + CPE) + 1, (1,), generator=gen))
        stays.append([(torch.randint(0, 10, (time_len,), generator=gen).tolist(),
                       torch.randint(0, K, (CPE,), generator=gen).tolist()) for _ in range(m)])  # fmt: skip
    return model.join_events(stays, length)


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_torch_transformer_encoder_with_a_causal_mask(norm_first: bool) -> None:
    """The stack equals ``torch.nn.TransformerEncoder`` (ReLU, batch-first, causal mask) with the same weights.

    Fails on a wrong residual/LayerNorm order, a missing √d embedding scale, wrong positions or a non-causal mask.
    """
    model = _ar(norm_first=norm_first)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, 0.1, batch_first=True, norm_first=norm_first)
    ref = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(32) if norm_first else None,
                                      enable_nested_tensor=False).eval()  # fmt: skip
    with torch.no_grad():
        for mine, theirs in zip(model.blocks, ref.layers, strict=True):
            theirs.self_attn.in_proj_weight.copy_(mine.in_proj.weight)
            theirs.self_attn.in_proj_bias.copy_(mine.in_proj.bias)
            theirs.self_attn.out_proj.load_state_dict(mine.out_proj.state_dict())
            for name in ("linear1", "linear2", "norm1", "norm2"):
                getattr(theirs, name).load_state_dict(getattr(mine, name).state_dict())
        if norm_first:
            ref.norm.load_state_dict(model.norm.state_dict())
        tokens = _valid_tokens(3, 26, seed=1)
        x = model.embed(tokens) * 32**0.5 + model.pe[:26]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(26)
        expected = model.proj(ref(x, mask=mask, is_causal=True))
        torch.testing.assert_close(model(tokens), expected, rtol=1e-5, atol=1e-5)


def test_editing_future_tokens_leaves_earlier_logits_unchanged() -> None:
    """Card test 12: logits at positions < t do not depend on tokens ≥ t. Fails on a missing or shifted causal mask."""
    model = _ar()
    tokens = _valid_tokens(4, 30, seed=2)
    edited = tokens.clone()
    edited[:, 13:] = torch.randint(0, K + 13, edited[:, 13:].shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a, b = model(tokens), model(edited)
    torch.testing.assert_close(a[:, :13], b[:, :13], rtol=0, atol=1e-6)
    assert (a[:, 13:] - b[:, 13:]).abs().max() > 1e-3  # the edit is seen from its own position on


@pytest.mark.parametrize("norm_first", [False, True])
def test_kv_cached_logits_equal_the_full_recompute(norm_first: bool) -> None:
    """Card test 12: step-by-step cached logits (one token, then chunks of 3) equal ``forward`` to 1e-5.

    Fails if the cache drops or misplaces keys/values, if positions restart at 0 each step, or if a chunk is not
    causal within itself.
    """
    model = _ar(norm_first=norm_first)
    tokens = _valid_tokens(5, 40, seed=4)
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache(5, 40)
        single = torch.cat([model.step(tokens[:, t : t + 1], t, cache) for t in range(40)], dim=1)
        cache = model.new_cache(5, 40)
        chunks = torch.cat([model.step(tokens[:, t : t + 3], t, cache) for t in range(0, 40, 3)], dim=1)
    torch.testing.assert_close(single, full, rtol=0, atol=1e-5)
    torch.testing.assert_close(chunks, full, rtol=0, atol=1e-5)


def test_cached_and_naive_sampling_draw_the_same_stays() -> None:
    """With the same generator the KV-cached sampler and the full recompute produce identical tokens."""
    model = _ar()
    a = model.sample(6, 50, top_k=8, generator=torch.Generator().manual_seed(5))
    b = model.sample_naive(6, 50, top_k=8, generator=torch.Generator().manual_seed(5))
    assert a.shape == (6, 50)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_loss_is_the_nll_of_non_pad_targets() -> None:
    """``loss`` = mean CE of ``logits[:, :-1]`` vs ``tokens[:, 1:]`` over non-PAD targets; fails if PAD is scored or the
    targets are not shifted by one."""
    model = _ar()
    tokens = _valid_tokens(6, 32, seed=6)
    logits = model(tokens[:, :-1])
    keep = tokens[:, 1:] != model.PAD
    torch.testing.assert_close(model.loss(tokens), F.cross_entropy(logits[keep], tokens[:, 1:][keep]))


class _Scripted(EventAR):
    """An EventAR whose logits are a fixed table per position (the adversary of card test 6)."""

    table: torch.Tensor

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.table[: tokens.shape[1]].expand(tokens.shape[0], -1, -1)

    def step(self, tokens: torch.Tensor, start: int, cache: list) -> torch.Tensor:  # noqa: D102
        return self.table[start : start + tokens.shape[1]].expand(tokens.shape[0], -1, -1)


def _adversary(time_len: int, case: str, max_len: int, events_before_end: int) -> _Scripted:
    """Logits that favour a disallowed token at every slot (by +30), with events started ``events_before_end`` times."""
    model = _Scripted(K, time_len, CPE, layers=1, d=8, heads=2, ffn=8, max_len=max_len)
    ev, pad, eos, digits = time_len + CPE, K, K + 1, slice(K + 3, K + 13)
    table = torch.zeros(max_len, K + 13)
    for position in range(1, max_len):
        slot, event = (position - 1) % ev, (position - 1) // ev
        row = table[position - 1]  # logits at position p - 1 predict token p
        if case == "pad_eos":  # the stay wants to end everywhere, also mid-event
            row[[pad, eos]] = 30.0
            if slot == 0 and event < events_before_end:
                row[digits if time_len else slice(0, K)] = 40.0
        elif case == "codes_in_time":  # codes favoured in time slots, digits in code slots
            row[slice(0, K) if slot < time_len else digits] = 30.0
            row[[pad, eos]] = -30.0 if event < events_before_end else 35.0
        else:  # "sos": a token no slot allows
            row[K + 2] = 50.0
    model.table = table
    return model


def _assert_layout(tokens: torch.Tensor, time_len: int, max_len: int) -> list[int]:
    """Independent layout check: SOS; whole events of ``time_len`` digits then CPE codes; one terminator at an event
    boundary (or the row is full); only PAD after it. Returns the events per row."""
    ev, pad, eos = time_len + CPE, K, K + 1
    counts = []
    for row in tokens.tolist():
        assert row[0] == K + 2
        ends = [i for i, t in enumerate(row) if t in (pad, eos)]
        end = ends[0] if ends else len(row)
        assert (end - 1) % ev == 0, f"terminator at {end}, not at an event boundary: {row}"
        assert all(t == pad for t in row[end + 1 :])
        for p in range(1, end):
            slot = (p - 1) % ev
            assert (K + 3 <= row[p] <= K + 12) if slot < time_len else (0 <= row[p] < K), (p, row)
        counts.append((end - 1) // ev)
    return counts


@pytest.mark.parametrize("time_len", [TIME_LEN, 0])
@pytest.mark.parametrize("case", ["pad_eos", "codes_in_time", "sos"])
def test_sampler_masks_hold_against_adversarial_logits(time_len: int, case: str) -> None:
    """Card test 6: with PAD/EOS favoured everywhere, codes favoured in time slots (digits in code slots) or SOS
    favoured, every event has exactly ``time_len`` digits then L_z·D codes and EOS/PAD comes only at a boundary.

    ``top_k=3`` is smaller than the favoured disallowed set, so top-k before masking fails (NaN or invalid tokens); a
    per-slot mask with a wrong slot index fails the layout check.
    """
    max_len = 2 + 5 * (time_len + CPE) + 3  # room for 5 events; the 6th does not fit and must not start
    model = _adversary(time_len, case, max_len, events_before_end=3 if case == "pad_eos" else 9)
    for use_cache in (True, False):
        tokens = model.sample(16, max_len, top_k=3, generator=torch.Generator().manual_seed(7), use_cache=use_cache)
        counts = _assert_layout(tokens, time_len, max_len)
        if case == "pad_eos":
            assert counts == [3] * 16  # ended at the first boundary where ending is favoured, never mid-event
        elif case == "codes_in_time":
            assert counts == [5] * 16  # ended only because a 6th event does not fit
        stays = model.split_events(tokens)
        assert [len(s) for s in stays] == counts
        assert all(len(t) == time_len and len(c) == CPE for s in stays for t, c in s)


def test_split_and_join_events_round_trip_and_reject_bad_layouts() -> None:
    """``join_events`` and ``split_events`` invert each other; a cut event or a code in a time slot raises."""
    model = _ar()
    stays = [[([1, 2], [0, 1, 2, 3]), ([3, 4], [15, 14, 13, 12])], [], [([9, 9], [5, 5, 5, 5])]]
    tokens = model.join_events(stays, 20)
    assert tokens[0].tolist()[:14] == [K + 2, K + 4, K + 5, 0, 1, 2, 3, K + 6, K + 7, 15, 14, 13, 12, K + 1]
    assert model.split_events(tokens) == [[(list(t), list(c)) for t, c in s] for s in stays]
    cut = tokens.clone()
    cut[0, 9] = model.EOS
    with pytest.raises(TokenLayoutError, match="row 0"):
        model.split_events(cut)
    swapped = tokens.clone()
    swapped[2, 1] = 3
    with pytest.raises(TokenLayoutError, match="row 2"):
        model.split_events(swapped)
    with pytest.raises(TokenLayoutError, match="stay 0"):
        model.join_events([[([1], [0, 1, 2, 3])]])
