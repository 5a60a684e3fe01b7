"""RawMed's two networks (card ``rawmed``, "Stage 1", "Stage 2", "Sampling"): pure torch, no Lightning.

- :class:`EventRQVAE` (stage 1): one serialized event (``input_ids``, ``type_ids``, ``dpe_ids``, each ``(N, L)``) is
  embedded as ``e = E_in + E_type + E_dpe``, downsampled by log2(L/L_z) Conv1d(k5, s2, p2) + BatchNorm + ReLU stages
  (no ReLU on the last; the last outputs F_z channels) to L_z positions, quantized by a shared-codebook
  ``vector_quantize_pytorch.ResidualVQ`` of depth D (EMA codebook, stochastic codes at temperature 0.1 in training,
  nearest code in eval), upsampled by ConvTranspose1d(k6, s2, p2) stages back to L×F and read by three linear heads.
  Loss = CE(input) + CE(type) + CE(dpe) + the summed per-quantizer commitment loss. An event is L_z·D codes,
  position-major by default: (z1,d1), (z1,d2), (z2,d1), …
- :class:`EventAR` (stage 2): a causal transformer (an encoder stack with a causal mask, sinusoidal positions,
  post-LN as ``torch.nn.TransformerEncoderLayer``) over ``SOS (τ-digits_1, codes_1) (τ-digits_2, codes_2) … EOS
  PAD…`` with the vocabulary codes 0..K−1, PAD = K, EOS = K+1, SOS = K+2, digits K+3…K+12. :meth:`EventAR.sample`
  decodes with a per-layer key/value cache and the hard per-slot vocabulary masks; :meth:`EventAR.sample_naive`
  recomputes the whole prefix each step (the benchmark's reference and the cache's equality test).

Example:
    >>> import torch
    >>> vae = EventRQVAE(vocab_size=50, L=16, F=32, L_z=4, F_z=16, K=32, D=2)
    >>> ids = torch.randint(4, 50, (8, 16))
    >>> vae.encode(ids, torch.full_like(ids, 3), torch.full_like(ids, 14)).shape
    torch.Size([8, 8])
    >>> ar = EventAR(K=32, time_len=2, codes_per_event=8, layers=1, d=32, heads=2, ffn=64)
    >>> ar.sample(3, max_len=2 + 2 * 10, generator=torch.Generator().manual_seed(0)).shape
    torch.Size([3, 22])
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F_  # noqa: N812 -- ``F`` is the card's embedding width
from torch import Tensor, nn

from zoo.core import checks

#: Number of ``type_ids``: pad 0, table 1, column 2, value 3, time 4, cls 5, sep 6.
N_TYPE_IDS = 7
#: Number of ``dpe_ids``: digit places 10^-4..10^8 (0-12), "." 13, non-numeric 14.
N_DPE_IDS = 15
#: The word vocabulary's padding id (``[PAD]``); also the type id of padding.
PAD_ID = 0

ReconLoss = Literal["ce", "mse_embed"]
CodeOrder = Literal["position_major", "depth_major"]


class RawMedModelError(ValueError):
    """A tensor handed to a RawMed network has the wrong shape, dtype or id range (one line naming the argument)."""


class TokenLayoutError(ValueError):
    """A stage-2 token sequence does not follow ``SOS (digits, codes)… EOS PAD…``."""


def _check_ids(name: str, ids: Tensor, shape: tuple[int, int] | None, high: int) -> None:
    if ids.dtype != torch.long or ids.dim() != 2 or (shape is not None and tuple(ids.shape) != shape):
        want = f"(N, {shape[1]})" if shape is not None else "(N, T)"
        raise RawMedModelError(f"{name}: expected a LongTensor of shape {want}, got {ids.dtype} {tuple(ids.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= high):
        raise RawMedModelError(f"{name}: expected ids in [0, {high}), got [{int(ids.min())}, {int(ids.max())}]")


# ---------------------------------------------------------------------------------------------------------------- #
# Stage 1: the event RQ-VAE
# ---------------------------------------------------------------------------------------------------------------- #


class EventRQVAE(nn.Module):
    """Residual-VQ autoencoder of one serialized event (card "Stage 1").

    Args:
        vocab_size: size of the word vocabulary of ``input_ids`` (``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3`` included).
        L: tokens per event (official 128; CPU default 64).
        F: embedding and convolution channels (official 256; CPU 64).
        L_z: latent positions per event (4); L/L_z must be a power of 2 ≥ 2.
        F_z: latent channels, the codebook dimension (official 256; CPU 64).
        K: codebook size (official 1024; CPU 256).
        D: residual depth, the number of quantizers sharing the codebook (2; 1 is the VQ-only arm).
        decay: EMA decay of the codebook (0.8).
        commitment_weight: weight of the commitment loss (1.0).
        stochastic_temperature: Gumbel temperature of the stochastic code choice in training (0.1; 0 is argmax).
        recon_loss: ``ce`` (the official CE on ids) or ``mse_embed`` (MSE between the decoder output and the detached
            input embedding; the heads then learn on the detached decoder output. Reconstruction: see README).
        ce_ignore_pad: leave ``[PAD]`` positions out of the three CEs (default ``False``: pads included).
        code_order: ``position_major`` ((z1,d1),(z1,d2),(z2,d1),…) or ``depth_major`` ((z1,d1),(z2,d1),…,(z1,d2),…).
        rotation_trick: pass gradients through the quantizer by the rotation trick (the 1.32 package default) instead
            of the straight-through estimator of the official vendored copy (default ``False``: straight-through).
        kmeans_init: initialise the codebook by k-means on the first batch (package default ``False``).
        threshold_ema_dead_code: re-seed codes whose EMA cluster size falls below this from the batch (package
            default 0: never).
    """

    def __init__(
        self, vocab_size: int, L: int = 64, F: int = 64, L_z: int = 4, F_z: int = 64, K: int = 256, D: int = 2,
        decay: float = 0.8, commitment_weight: float = 1.0, stochastic_temperature: float = 0.1,
        recon_loss: ReconLoss = "ce", ce_ignore_pad: bool = False, code_order: CodeOrder = "position_major",
        rotation_trick: bool = False, kmeans_init: bool = False, threshold_ema_dead_code: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        from vector_quantize_pytorch import ResidualVQ

        checks.integer(checks.model("vocab_size"), vocab_size, 5)
        for name, value in (("L", L), ("F", F), ("L_z", L_z), ("F_z", F_z), ("K", K), ("D", D)):
            checks.integer(checks.model(name), value)
        ratio = L // L_z
        if L % L_z or ratio < 2 or ratio & (ratio - 1):
            checks.fail(checks.model("L"), L, f"L / L_z (L_z={L_z}) to be a power of 2 >= 2 (one stride-2 stage each)")
        checks.probability(checks.model("decay"), decay, open_low=True, open_high=True)
        checks.non_negative(checks.model("commitment_weight"), commitment_weight)
        checks.non_negative(checks.model("stochastic_temperature"), stochastic_temperature)
        checks.choice(checks.model("recon_loss"), recon_loss, ("ce", "mse_embed"))
        checks.choice(checks.model("code_order"), code_order, ("position_major", "depth_major"))
        checks.integer(checks.model("threshold_ema_dead_code"), threshold_ema_dead_code, 0)
        self.vocab_size, self.L, self.F, self.L_z, self.F_z, self.K, self.D = vocab_size, L, F, L_z, F_z, K, D
        self.recon_loss, self.ce_ignore_pad, self.code_order = recon_loss, bool(ce_ignore_pad), code_order

        self.embed_input = nn.Embedding(vocab_size, F, padding_idx=PAD_ID)
        self.embed_type = nn.Embedding(N_TYPE_IDS, F, padding_idx=PAD_ID)
        self.embed_dpe = nn.Embedding(N_DPE_IDS, F)
        stages = int(math.log2(ratio))
        enc: list[nn.Module] = []
        for i in range(stages):
            last = i == stages - 1
            out = F_z if last else F
            enc += [nn.Conv1d(F, out, 5, stride=2, padding=2, bias=False), nn.BatchNorm1d(out)]
            if not last:  # the latent is signed: no ReLU before the quantizer
                enc.append(nn.ReLU())
        self.encoder = nn.Sequential(*enc)
        self.quantizer = ResidualVQ(
            dim=F_z, num_quantizers=D, codebook_size=K, shared_codebook=True, decay=decay,
            commitment_weight=commitment_weight, stochastic_sample_codes=stochastic_temperature > 0,
            sample_codebook_temp=stochastic_temperature, rotation_trick=rotation_trick, kmeans_init=kmeans_init,
            threshold_ema_dead_code=threshold_ema_dead_code,
        )  # fmt: skip
        dec: list[nn.Module] = []
        for i in range(stages):
            dec += [nn.ConvTranspose1d(F_z if i == 0 else F, F, 6, stride=2, padding=2, bias=False),
                    nn.BatchNorm1d(F), nn.ReLU()]  # fmt: skip
        self.decoder = nn.Sequential(*dec)
        self.head_input = nn.Linear(F, vocab_size)
        self.head_type = nn.Linear(F, N_TYPE_IDS)
        self.head_dpe = nn.Linear(F, N_DPE_IDS)

    @property
    def codes_per_event(self) -> int:
        """L_z·D codes per event."""
        return self.L_z * self.D

    @property
    def codebooks(self) -> list[Tensor]:
        """The codebook each quantizer depth reads (``(K, F_z)``; one shared EMA buffer, so the same storage)."""
        return [layer._codebook.embed[0] for layer in self.quantizer.layers]

    def embed(self, input_ids: Tensor, type_ids: Tensor, dpe_ids: Tensor) -> Tensor:
        """``e = E_in[input] + E_type[type] + E_dpe[dpe]``: ``(N, L)`` ids -> ``(N, L, F)``."""
        shape = (input_ids.shape[0], self.L) if input_ids.dim() == 2 else None
        _check_ids("input_ids", input_ids, shape, self.vocab_size)
        _check_ids("type_ids", type_ids, tuple(input_ids.shape), N_TYPE_IDS)
        _check_ids("dpe_ids", dpe_ids, tuple(input_ids.shape), N_DPE_IDS)
        return self.embed_input(input_ids) + self.embed_type(type_ids) + self.embed_dpe(dpe_ids)

    def encode_latent(self, e: Tensor) -> Tensor:
        """The encoder: ``(N, L, F)`` -> ``(N, L_z, F_z)``."""
        return self.encoder(e.transpose(1, 2)).transpose(1, 2)

    def decode_latent(self, z_hat: Tensor) -> Tensor:
        """The decoder: ``(N, L_z, F_z)`` -> ``(N, L, F)`` (each stage exactly ×2)."""
        return self.decoder(z_hat.transpose(1, 2)).transpose(1, 2)

    def heads(self, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Logits of the input, type and dpe ids from the decoded ``(N, L, F)``."""
        return self.head_input(y), self.head_type(y), self.head_dpe(y)

    def flatten_codes(self, indices: Tensor) -> Tensor:
        """``(N, L_z, D)`` quantizer indices -> ``(N, L_z·D)`` in ``code_order``."""
        if self.code_order == "depth_major":
            indices = indices.transpose(1, 2)
        return indices.reshape(indices.shape[0], -1)

    def unflatten_codes(self, codes: Tensor) -> Tensor:
        """``(N, L_z·D)`` codes in ``code_order`` -> ``(N, L_z, D)`` indices (inverse of ``flatten_codes``)."""
        _check_ids("codes", codes, (codes.shape[0], self.codes_per_event) if codes.dim() == 2 else None, self.K)
        if self.code_order == "depth_major":
            return codes.reshape(-1, self.D, self.L_z).transpose(1, 2).contiguous()
        return codes.reshape(-1, self.L_z, self.D)

    def forward(self, input_ids: Tensor, type_ids: Tensor, dpe_ids: Tensor) -> dict[str, Tensor]:
        """Reconstruct a batch of events and return the loss and its parts.

        In training mode the quantizer samples codes at ``stochastic_temperature`` and moves the shared codebook by
        EMA; in eval mode it takes the nearest code and leaves the codebook alone.

        Returns:
            ``loss``, ``ce_input``, ``ce_type``, ``ce_dpe``, ``commit`` (scalars; ``mse`` too under ``mse_embed``),
            ``logits_input`` ``(N, L, vocab)``, ``logits_type`` ``(N, L, 7)``, ``logits_dpe`` ``(N, L, 15)`` and
            ``codes`` ``(N, L_z·D)``.
        """
        e = self.embed(input_ids, type_ids, dpe_ids)
        z_hat, indices, commit = self.quantizer(self.encode_latent(e))
        commit = commit.sum()  # ResidualVQ 1.32 returns one loss per quantizer (card revision: sum it)
        y = self.decode_latent(z_hat)
        out: dict[str, Tensor] = {}
        if self.recon_loss == "mse_embed":  # reconstruction: see README
            out["mse"] = F_.mse_loss(y, e.detach())
            y = y.detach()
        li, lt, ld = self.heads(y)
        weight = (input_ids != PAD_ID).float() if self.ce_ignore_pad else None
        ce = [_token_ce(logits, target, weight) for logits, target in ((li, input_ids), (lt, type_ids), (ld, dpe_ids))]
        loss = ce[0] + ce[1] + ce[2] + commit
        if "mse" in out:
            loss = loss + out["mse"]
        out.update(loss=loss, ce_input=ce[0], ce_type=ce[1], ce_dpe=ce[2], commit=commit, logits_input=li,
                   logits_type=lt, logits_dpe=ld, codes=self.flatten_codes(indices))  # fmt: skip
        return out

    @torch.no_grad()
    def encode(self, input_ids: Tensor, type_ids: Tensor, dpe_ids: Tensor) -> Tensor:
        """Nearest-code encoding in eval mode (the module's mode is restored): ``(N, L)`` ids -> ``(N, L_z·D)``."""
        was = self.training
        self.eval()
        try:
            _, indices, _ = self.quantizer(self.encode_latent(self.embed(input_ids, type_ids, dpe_ids)))
        finally:
            self.train(was)
        return self.flatten_codes(indices)

    @torch.no_grad()
    def decode(self, codes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Codes -> ẑ = Σ_d c_{k_d} -> decoder -> argmax ``(input_ids, type_ids, dpe_ids)`` ``(N, L)``; eval mode."""
        was = self.training
        self.eval()
        try:
            z_hat = self.quantizer.get_output_from_indices(self.unflatten_codes(codes))
            li, lt, ld = self.heads(self.decode_latent(z_hat))
        finally:
            self.train(was)
        return li.argmax(-1), lt.argmax(-1), ld.argmax(-1)


def _token_ce(logits: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """Mean token cross-entropy, optionally over the positions where ``weight`` is 1."""
    ce = F_.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none")
    if weight is None:
        return ce.mean()
    weight = weight.flatten()
    return (ce * weight).sum() / weight.sum().clamp_min(1.0)


# ---------------------------------------------------------------------------------------------------------------- #
# Stage 2: the causal transformer over (time digits, codes)
# ---------------------------------------------------------------------------------------------------------------- #


def sinusoidal_positions(max_len: int, d: int) -> Tensor:
    """The fixed table ``PE[p, 2i] = sin(p / 10000^(2i/d))``, ``PE[p, 2i+1] = cos(…)``: ``(max_len, d)``."""
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe


class _Block(nn.Module):
    """One encoder layer (``torch.nn.TransformerEncoderLayer``'s maths, ReLU) whose attention can use a KV cache."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.heads, self.norm_first, self.p = heads, norm_first, dropout
        self.in_proj = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)
        self.linear1, self.linear2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.drop, self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def _attend(self, x: Tensor, cache: tuple[Tensor, Tensor] | None, start: int) -> Tensor:
        n, t, d = x.shape
        q, k, v = self.in_proj(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if cache is None:
            a = F_.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True)
        else:  # append this step's keys/values, attend over the whole prefix (t == 1 while sampling)
            keys, values = cache
            keys[:, :, start : start + t] = k
            values[:, :, start : start + t] = v
            k, v = keys[:, :, : start + t], values[:, :, : start + t]
            mask = None
            if t > 1:  # several new positions: causal among themselves, all of the cached prefix visible
                mask = torch.ones(t, start + t, dtype=torch.bool, device=x.device).tril(start)
            a = F_.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(a.transpose(1, 2).reshape(n, t, d))

    def _ff(self, x: Tensor) -> Tensor:
        return self.linear2(self.drop(F_.relu(self.linear1(x))))

    def forward(self, x: Tensor, cache: tuple[Tensor, Tensor] | None = None, start: int = 0) -> Tensor:
        """``(n, t, d) -> (n, t, d)``; ``cache`` holds the keys/values of positions ``< start``."""
        if self.norm_first:
            x = x + self.drop1(self._attend(self.norm1(x), cache, start))
            return x + self.drop2(self._ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self._attend(x, cache, start)))
        return self.norm2(x + self.drop2(self._ff(x)))


class EventAR(nn.Module):
    """Causal transformer over ``SOS (τ-digits, codes)… EOS PAD…`` (card "Stage 2" and "Sampling").

    Args:
        K: codebook size; the vocabulary is codes 0..K−1, PAD = K, EOS = K+1, SOS = K+2, digits K+3…K+12.
        time_len: time digits per event (2 at 6 or 12 h, 3 at 24 h; 0 is the ``time_mode: in_text`` ablation, where
            an event is codes only and its first code slot also allows EOS or PAD).
        codes_per_event: L_z·D codes per event.
        layers: encoder layers (official 12; CPU 4).
        d: model width (official 256; CPU 128).
        heads: attention heads (4).
        ffn: feed-forward width (official 1024; CPU 512).
        dropout: dropout on the embedding, attention weights, residual branches and FFN (0.1).
        max_len: the longest sequence the position table holds (SOS … EOS included).
        norm_first: ``False`` (default) is post-LN, the official ``torch.nn.TransformerEncoderLayer``; ``True``
            is pre-LN with a final LayerNorm.
    """

    def __init__(
        self, K: int, time_len: int, codes_per_event: int, layers: int = 4, d: int = 128, heads: int = 4,
        ffn: int = 512, dropout: float = 0.1, max_len: int = 2048, norm_first: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        checks.integer(checks.model("K"), K, 2)
        checks.integer(checks.model("time_len"), time_len, 0)
        for name, value in (("codes_per_event", codes_per_event), ("layers", layers), ("d", d), ("heads", heads),
                            ("ffn", ffn)):  # fmt: skip
            checks.integer(checks.model(name), value)
        if d % heads or (d // heads) % 2 or d % 2:
            checks.fail(checks.model("d"), d, f"an even multiple of heads={heads} with an even head width")
        checks.probability(checks.model("dropout"), dropout, open_high=True)
        checks.integer(checks.model("max_len"), max_len, 2)
        self.K, self.time_len, self.codes_per_event = K, time_len, codes_per_event
        self.event_len = time_len + codes_per_event
        self.PAD, self.EOS, self.SOS, self.DIGIT0 = K, K + 1, K + 2, K + 3
        self.vocab = K + 13
        self.d, self.max_len, self.norm_first = d, max_len, bool(norm_first)
        self.embed = nn.Embedding(self.vocab, d)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        self.register_buffer("pe", sinusoidal_positions(max_len, d), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(d, heads, ffn, dropout, self.norm_first) for _ in range(layers))
        self.norm = nn.LayerNorm(d) if self.norm_first else nn.Identity()
        self.proj = nn.Linear(d, self.vocab)

    # -- the network ------------------------------------------------------------------------------------------- #

    def _inputs(self, tokens: Tensor, start: int) -> Tensor:
        return self.drop(self.embed(tokens) * math.sqrt(self.d) + self.pe[start : start + tokens.shape[1]])

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits: ``(n, T)`` tokens -> ``(n, T, vocab)``; position t predicts token t+1 from tokens ≤ t."""
        _check_ids("tokens", tokens, None, self.vocab)
        if tokens.shape[1] > self.max_len:
            raise RawMedModelError(f"tokens: length {tokens.shape[1]} exceeds max_len={self.max_len}")
        x = self._inputs(tokens, 0)
        for block in self.blocks:
            x = block(x)
        return self.proj(self.norm(x))

    def loss(self, tokens: Tensor) -> Tensor:
        """Mean next-token NLL over the non-PAD targets ``tokens[:, 1:]``."""
        logits = self.forward(tokens[:, :-1])
        return F_.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), ignore_index=self.PAD)

    def new_cache(self, n: int, length: int) -> list[tuple[Tensor, Tensor]]:
        """Empty per-layer key/value buffers ``(n, heads, length, d/heads)`` for incremental decoding."""
        ref = self.proj.weight
        return [
            tuple(ref.new_zeros(n, b.heads, length, self.d // b.heads) for _ in range(2))  # type: ignore[misc]
            for b in self.blocks
        ]

    def step(self, tokens: Tensor, start: int, cache: list[tuple[Tensor, Tensor]]) -> Tensor:
        """Logits of ``tokens`` ``(n, t)`` at positions ``start…start+t−1`` given the cached prefix; fills the cache."""
        x = self._inputs(tokens, start)
        for block, layer_cache in zip(self.blocks, cache, strict=True):
            x = block(x, layer_cache, start)
        return self.proj(self.norm(x))

    # -- sampling ---------------------------------------------------------------------------------------------- #

    def allowed(self, position: int, max_len: int, done: Tensor) -> Tensor:
        """The hard vocabulary mask of ``position`` (≥ 1) for each row: ``(n, vocab)`` booleans.

        Slot ``s = (position − 1) mod event_len``. Time slot 0: digits, EOS or PAD; other time slots: digits; code
        slots: codes (with ``time_len = 0`` the first code slot also allows EOS or PAD). An event starts only when it
        fits before the last position, which is kept for EOS (reconstruction: see README); a row whose last token is
        EOS or PAD (``done``) allows only PAD.
        """
        mask = torch.zeros(self.vocab, dtype=torch.bool, device=done.device)
        slot = (position - 1) % self.event_len
        if slot == 0:
            mask[[self.EOS, self.PAD]] = True
            if position + self.event_len <= max_len - 1:
                if self.time_len:
                    mask[self.DIGIT0 : self.DIGIT0 + 10] = True
                else:
                    mask[: self.K] = True
        elif slot < self.time_len:
            mask[self.DIGIT0 : self.DIGIT0 + 10] = True
        else:
            mask[: self.K] = True
        only_pad = torch.zeros_like(mask)
        only_pad[self.PAD] = True
        return torch.where(done.unsqueeze(1), only_pad, mask)

    @torch.no_grad()
    def sample(
        self, n: int, max_len: int, top_k: int | None = 64, temperature: float = 1.0,
        generator: torch.Generator | None = None, use_cache: bool = True,
    ) -> Tensor:  # fmt: skip
        """Sample ``n`` stays of ``max_len`` tokens (SOS first, PAD after the end) under the per-slot masks.

        Each step masks the disallowed tokens, keeps the ``top_k`` largest logits (card: 250 for K = 1024, 64 for
        K = 256), divides by ``temperature`` and draws from the softmax with ``generator``. ``use_cache`` decodes
        with the per-layer key/value cache; ``False`` recomputes the whole prefix each step (:meth:`sample_naive`).
        The module runs in eval mode (restored after).
        """
        checks.integer("sample.n", n)
        checks.integer("sample.max_len", max_len, 2, self.max_len)
        checks.optional_integer("sample.top_k", top_k)
        checks.positive("sample.temperature", temperature)
        was = self.training
        self.eval()
        try:
            return self._sample(n, max_len, top_k, temperature, generator, use_cache)
        finally:
            self.train(was)

    def sample_naive(
        self, n: int, max_len: int, top_k: int | None = 64, temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> Tensor:  # fmt: skip
        """:meth:`sample` without the cache: the full prefix is recomputed at every step (O(T²) positions)."""
        return self.sample(n, max_len, top_k, temperature, generator, use_cache=False)

    def _sample(
        self, n: int, max_len: int, top_k: int | None, temperature: float, generator: torch.Generator | None,
        use_cache: bool,
    ) -> Tensor:  # fmt: skip
        device = self.proj.weight.device
        tokens = torch.full((n, max_len), self.PAD, dtype=torch.long, device=device)
        tokens[:, 0] = self.SOS
        done = torch.zeros(n, dtype=torch.bool, device=device)
        cache = self.new_cache(n, max_len) if use_cache else None
        for t in range(max_len - 1):
            if cache is not None:
                logits = self.step(tokens[:, t : t + 1], t, cache)[:, -1]
            else:
                logits = self.forward(tokens[:, : t + 1])[:, -1]
            logits = logits.masked_fill(~self.allowed(t + 1, max_len, done), float("-inf"))
            if top_k is not None and top_k < self.vocab:
                kth = logits.topk(top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            tokens[:, t + 1] = nxt
            done |= (nxt == self.EOS) | (nxt == self.PAD)
            if bool(done.all()):  # the rest is PAD already
                break
        return tokens

    # -- the layout -------------------------------------------------------------------------------------------- #

    def split_events(self, tokens: Tensor) -> list[list[tuple[list[int], list[int]]]]:
        """Per stay, its events as ``(time digits 0-9, codes 0..K−1)``; stops at the first EOS or PAD.

        Raises:
            TokenLayoutError: a row does not start with SOS, an event is cut short, or a slot holds a token of the
                wrong kind.
        """
        rows = tokens.detach().cpu()
        _check_ids("tokens", rows, None, self.vocab)
        out: list[list[tuple[list[int], list[int]]]] = []
        terminal = (rows == self.EOS) | (rows == self.PAD)
        ends = torch.where(terminal.any(1), terminal.int().argmax(1), rows.shape[1]).tolist()
        for i, (row, end) in enumerate(zip(rows, ends, strict=True)):
            if row[0] != self.SOS:
                raise TokenLayoutError(f"tokens row {i}: expected SOS={self.SOS} first, got {int(row[0])}")
            body = row[1:end]
            if body.numel() % self.event_len:
                raise TokenLayoutError(
                    f"tokens row {i}: {body.numel()} tokens before EOS/PAD, expected a multiple of "
                    f"event_len={self.event_len} (time_len={self.time_len} + codes_per_event={self.codes_per_event})"
                )
            events = body.view(-1, self.event_len)
            digits, codes = events[:, : self.time_len] - self.DIGIT0, events[:, self.time_len :]
            if ((digits < 0) | (digits > 9)).any() or (codes >= self.K).any():
                raise TokenLayoutError(f"tokens row {i}: a time slot holds a non-digit or a code slot a non-code")
            out.append(list(zip(digits.tolist(), codes.tolist(), strict=True)))
        return out

    def join_events(self, stays: list[list[tuple[list[int], list[int]]]], length: int | None = None) -> Tensor:
        """The inverse of :meth:`split_events`: ``SOS events… EOS PAD…`` rows of ``length`` tokens (default: fit).

        Raises:
            TokenLayoutError: an event with the wrong number of digits or codes, a digit outside 0-9, a code outside
                0..K−1, or a stay that does not fit in ``length``.
        """
        need = 2 + max((len(s) for s in stays), default=0) * self.event_len
        length = need if length is None else length
        tokens = torch.full((len(stays), length), self.PAD, dtype=torch.long)
        for i, stay in enumerate(stays):
            if 2 + len(stay) * self.event_len > length:
                raise TokenLayoutError(f"stay {i}: {len(stay)} events need {2 + len(stay) * self.event_len} tokens, "
                                       f"length={length}")  # fmt: skip
            flat: list[int] = [self.SOS]
            for j, (digits, codes) in enumerate(stay):
                if len(digits) != self.time_len or len(codes) != self.codes_per_event:
                    raise TokenLayoutError(
                        f"stay {i} event {j}: expected {self.time_len} digits and {self.codes_per_event} codes, "
                        f"got {len(digits)} and {len(codes)}"
                    )
                if any(not 0 <= x <= 9 for x in digits) or any(not 0 <= c < self.K for c in codes):
                    raise TokenLayoutError(f"stay {i} event {j}: digits must be 0-9 and codes 0..{self.K - 1}")
                flat += [self.DIGIT0 + x for x in digits] + list(codes)
            flat.append(self.EOS)
            tokens[i, : len(flat)] = torch.tensor(flat)
        return tokens


__all__ = [
    "N_DPE_IDS", "N_TYPE_IDS", "PAD_ID", "EventAR", "EventRQVAE", "RawMedModelError", "TokenLayoutError",
    "sinusoidal_positions",
]  # fmt: skip
