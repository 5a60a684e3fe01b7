"""CRAFT network and its maths as plain functions (pure torch; no Lightning).

CRAFT scores each candidate destination ``v`` of a query ``(u, t)`` by cross-attending from the candidate's ID
embedding to the ID embeddings of ``u``'s last ``L`` neighbours (the *source window*). Keys and values are computed
once per query and layer as ``(B, L, d)`` tensors; the ``C`` candidates are the attention's query sequence, so they
share those keys and never attend to each other (``C`` candidates in one call equal ``C`` separate calls).

The layout follows the official public code (see ``zoo/craft/README.md``): a shared ``LN0`` for keys and queries,
learnable positions on the keys only, an additive ``-10000`` key mask, ``K0`` reused as keys/values in every layer,
the official ``x + LN(Dropout(sublayer(x)))`` placement, raw elapsed time and repeat counts through
``Dropout(LN(Linear(1, d)))``, and a ``Linear -> PReLU -> Dropout -> Linear`` scorer. The MOOC configuration
(98 rows, ``d=64, L=30``, 2 layers, 2 heads, positions, elapsed + repeat, 2-layer MLP) has exactly 146,050
parameters, the count in the official training log.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "CRAFTLayer",
    "CRAFTNet",
    "FastDropout",
    "MASK_VALUE",
    "ScalarFeature",
    "bce_loss",
    "bpr_loss",
    "elapsed_feature",
    "keep_mask",
    "map_ids",
    "num_embeddings_for",
    "repeat_counts",
    "with_ones",
]

#: Additive attention mask on padding keys (official value; not ``-inf``, so an all-padding window stays finite).
MASK_VALUE = -10000.0

LNPlacement = Literal["official", "post", "pre"]
KVPath = Literal["auto", "project", "fold"]
IdSpace = Literal["dst_only", "all"]


_MASK_BITS = np.random.PCG64(0)  # reseeded from torch's generator on every draw (see keep_mask)
_MASK_STATE = _MASK_BITS.state


def keep_mask(shape: tuple[int, ...], p: float, dtype: torch.dtype = torch.float32) -> Tensor:
    """Inverted-dropout multiplier: ``1/(1-p)`` with probability ``1-p``, else 0, as a CPU tensor of ``shape``.

    The bits come from numpy's PCG64 (32 raw bits per element, kept iff ``bits >= round(p * 2**32)``, so the keep
    probability is ``1-p`` to within ``2**-32``); its 128-bit state is set per call from two draws of torch's global
    generator, so ``torch.manual_seed`` / ``seed_everything`` fix every mask. On one CPU thread this is about four
    times faster than torch's mt19937 ``bernoulli_`` (``F.dropout``), which took about a tenth of a CRAFT training
    step (``benchmarks/craft_net_speed.py``).

    Args:
        shape: mask shape.
        p: drop probability in ``[0, 1)``.
        dtype: floating dtype of the returned mask.

    Returns:
        The mask tensor.
    """
    seed = torch.randint(0, 2**62, (2,)).tolist()
    _MASK_STATE["state"]["state"] = (seed[0] << 64) | seed[1]
    _MASK_STATE["has_uint32"] = 0
    _MASK_BITS.state = _MASK_STATE
    n = math.prod(shape)
    bits = _MASK_BITS.random_raw((n + 1) // 2).view(np.uint32)[:n]
    mask = torch.from_numpy((bits >= _threshold(p)) * np.float32(1.0 / (1.0 - p))).view(shape)
    return mask if dtype == torch.float32 else mask.to(dtype)


@functools.lru_cache(maxsize=64)
def _threshold(p: float) -> np.uint32:
    """32-bit cut of :func:`keep_mask`: raw bits ``>=`` it are kept (probability ``1 - p`` within ``2**-32``)."""
    return np.uint32(min(round(p * 2**32), 2**32 - 1))


class FastDropout(nn.Dropout):
    """Inverted dropout whose mask comes from :func:`keep_mask` (numpy PCG64; the same distribution as torch's).

    Used for every dropout of :class:`CRAFTNet` on CPU: torch's ``bernoulli_`` costs about 10 ns per element on
    one thread, :func:`keep_mask` about 2. Tensors under ``min_numel`` elements and non-CPU tensors use
    ``F.dropout``.
    """

    def __init__(self, p: float = 0.1, min_numel: int = 1024) -> None:
        super().__init__(p)
        self.min_numel = min_numel

    def forward(self, x: Tensor) -> Tensor:
        """Drop each element with probability ``p`` and scale the rest by ``1/(1-p)`` (training only)."""
        if not self.training or self.p == 0.0 or x.numel() < self.min_numel or x.device.type != "cpu":
            return super().forward(x)
        if self.p == 1.0:
            return x * 0.0
        return x * keep_mask(tuple(x.shape), self.p, x.dtype)


def with_ones(kv: Tensor) -> Tensor:
    """``[K0 | 1]``: the key window with a column of ones appended, ``(B, L, d+1)`` (the folded path's input).

    Through the ones column one product gives both ``A K0`` and ``rowsum(A)`` (its last column), and the query-side
    key bias ``q_h . bk_h`` rides in the scores as an ordinary coordinate (see :meth:`CRAFTLayer._folded`).
    """
    return torch.cat([kv, kv.new_ones(*kv.shape[:-1], 1)], dim=-1)


class _FoldedCore(torch.autograd.Function):
    """Folded attention core with a hand-written backward: returns ``A K1``, ``A = Drop(softmax(Qk K1^T + bias))``.

    ``K1 = [K0 | 1]`` (:func:`with_ones`), so the result's last column is ``rowsum(A)``; the scale is already in
    ``Qk`` and the key mask in ``bias`` (broadcast over rows).
    Autograd's generic backward for the two batched products runs four (B, small, small) ``bmm`` calls, two of them
    with an inner dimension of ``C*h`` (4 in training) and a transposed result accumulated into ``K1``'s gradient
    with a strided add; here the two ``K1`` gradient terms are one ``bmm`` over the concatenated ``[dS ; A]`` and
    ``[Qk ; dO]`` (inner dimension ``2*C*h``), written contiguous. ``tests/craft/test_model.py`` checks it with
    ``gradcheck`` against autograd.
    """

    @staticmethod
    def forward(  # noqa: D102 -- see the class docstring
        ctx: Any, qk: Tensor, kv: Tensor, bias: Tensor, mask: Tensor | None
    ) -> Tensor:
        attn = torch.softmax(torch.baddbmm(bias, qk, kv.transpose(1, 2)), dim=-1)  # (B, R, L)
        dropped = attn if mask is None else attn * mask
        ctx.save_for_backward(qk, kv, attn, dropped, mask)
        ctx.bias_shape = bias.shape
        return torch.bmm(dropped, kv)

    @staticmethod
    def backward(  # noqa: D102 -- see the class docstring
        ctx: Any, grad_out: Tensor
    ) -> tuple[Tensor, Tensor, Tensor | None, None]:
        qk, kv, attn, dropped, mask = ctx.saved_tensors
        grad_dropped = torch.bmm(grad_out, kv.transpose(1, 2))
        grad_attn = grad_dropped if mask is None else grad_dropped * mask
        grad_scores = attn * (grad_attn - (grad_attn * attn).sum(-1, keepdim=True))  # softmax backward
        grad_qk = torch.bmm(grad_scores, kv)
        left = torch.cat([grad_scores, dropped], dim=1).transpose(1, 2)  # (B, L, 2R)
        grad_kv = torch.bmm(left, torch.cat([qk, grad_out], dim=1))  # dS^T Qk + A^T dO in one product
        grad_bias = None
        if ctx.needs_input_grad[2]:  # the key mask is a constant in CRAFTNet; kept general for gradcheck
            grad_bias = grad_scores.sum_to_size(ctx.bias_shape)
        return grad_qk, grad_kv, grad_bias, None


class CRAFTLayer(nn.Module):
    """One CRAFT cross-attention block: candidate queries attend to the fixed key/value window ``K0``.

    With ``ln_placement="official"`` the block computes::

        Q = Q + LN_a(Dropout(Wo concat_h softmax((Q Wq)(K0 Wk)^T / sqrt(d/h) + mask) (K0 Wv)))
        Q = Q + LN_f(Dropout(W2 GELU_erf(W1 Q)))

    ``"post"`` gives ``LN(Q + Dropout(sublayer(Q)))`` and ``"pre"`` gives ``Q + Dropout(sublayer(LN(Q)))`` (only the
    queries are normalised; ``K0`` is already normalised by ``LN0``).

    Args:
        d: hidden size.
        heads: number of attention heads; must divide ``d``.
        ln_placement: where the two LayerNorms sit (see above).
        attn_dropout: dropout on the attention weights.
        hidden_dropout: dropout on each sublayer's output.
        ffn_mult: FFN inner size as a multiple of ``d`` (4 in the official code).
        kv_path: how keys/values meet the queries (same maths, different cost): ``project`` computes ``K0 Wk`` and
            ``K0 Wv`` once as ``(B, L, d)``; ``fold`` multiplies the weights together instead (``Wq_h^T Wk_h`` on the
            query side, ``Wv_h^T Wo_h^T`` after the weighted sum, see :meth:`_folded`), which never builds a
            ``(B, L, d)`` projection and is cheaper when ``C`` is small (training, C=2); ``auto`` picks the cheaper
            by multiply count.
    """

    def __init__(
        self,
        d: int,
        heads: int,
        ln_placement: LNPlacement = "official",
        attn_dropout: float = 0.1,
        hidden_dropout: float = 0.1,
        ffn_mult: int = 4,
        kv_path: KVPath = "auto",
    ) -> None:
        super().__init__()
        if d % heads != 0:
            raise ValueError(f"CRAFTLayer: d={d} is not divisible by heads={heads}")
        if ln_placement not in ("official", "post", "pre"):
            raise ValueError(f"CRAFTLayer: ln_placement={ln_placement!r}, expected 'official', 'post' or 'pre'")
        if kv_path not in ("auto", "project", "fold"):
            raise ValueError(f"CRAFTLayer: kv_path={kv_path!r}, expected 'auto', 'project' or 'fold'")
        self.d, self.heads, self.ln_placement, self.kv_path = d, heads, ln_placement, kv_path
        self.head_dim = d // heads
        self.attn_dropout = attn_dropout
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, d)
        self.wv = nn.Linear(d, d)
        self.wo = nn.Linear(d, d)
        self.w1 = nn.Linear(d, ffn_mult * d)
        self.w2 = nn.Linear(ffn_mult * d, d)
        self.ln_a = nn.LayerNorm(d, eps=1e-12)
        self.ln_f = nn.LayerNorm(d, eps=1e-12)
        self.drop = FastDropout(hidden_dropout)

    def attention(self, q: Tensor, kv: Tensor, mask: Tensor) -> Tensor:
        """Multi-head cross-attention sublayer (before dropout, LayerNorm and residual).

        Args:
            q: candidate queries ``(B, C, d)``.
            kv: key/value window ``K0`` ``(B, L, d)``, or ``[K0 | 1]`` ``(B, L, d+1)`` (:func:`with_ones`, which
                :class:`CRAFTNet` builds once for all layers when they fold); shared by all ``C`` candidates.
            mask: additive key mask ``(B, 1, 1, L)`` (0 for real keys, :data:`MASK_VALUE` for padding).

        Returns:
            ``Wo(concat_heads(A V))`` of shape ``(B, C, d)``.
        """
        b, c, _ = q.shape
        h, dh = self.heads, self.head_dim
        p = self.attn_dropout if self.training else 0.0
        if self.use_fold(c, kv.shape[1]):
            return self._folded(q, kv if kv.shape[-1] == self.d + 1 else with_ones(kv), mask, p)
        kv = kv[..., : self.d]
        qh = self.wq(q).view(b, c, h, dh).transpose(1, 2)  # (B,h,C,dh)
        kh = self.wk(kv).view(b, -1, h, dh).transpose(1, 2)  # (B,h,L,dh): never (B*C, L, d)
        vh = self.wv(kv).view(b, -1, h, dh).transpose(1, 2)
        # softmax(q k^T / sqrt(dh) + mask) v with dropout on the attention weights. On one CPU thread SDPA tied a
        # hand-written softmax in training and was ~10-20% faster at C=101 (benchmarks/craft_net_speed.py).
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, dropout_p=p)
        return self.wo(out.transpose(1, 2).reshape(b, c, self.d))

    def use_fold(self, c: int, length: int) -> bool:
        """Whether ``C`` candidates against ``L`` keys take the folded path (multiply counts per query)."""
        if self.kv_path != "auto":
            return self.kv_path == "fold"
        project = 2 * length * self.d * self.d + 2 * c * length * self.d
        fold = 2 * c * self.d * self.d + 2 * c * self.heads * length * self.d
        return fold < project

    def _folded(self, q: Tensor, kv1: Tensor, mask: Tensor, p: float) -> Tensor:
        """The attention sublayer with every projection folded around ``K0``: ``(B, C, d)``, equal to the other path.

        With ``x1 = [x | 1]`` for any row ``x`` and ``K1 = [K0 | 1]`` (``kv1``), head h's scores are
        ``(q Wq_h^T + bq_h)(K0 Wk_h^T + bk_h)^T = q1 Fin_h K1^T`` with ``Fin_h = [Wq_h^T ; bq_h] [Wk_h | bk_h]``
        (``(d+1, d+1)``; the key bias gives a per-row constant, kept so every parameter is used), so one
        ``Q @ [Fin_h]_h`` GEMM gives every head's query in ``K1``'s space. The output is
        ``sum_h (A_h K1) Fout_h + bo`` with ``Fout_h = [Wv_h^T ; bv_h] Wo_h^T`` (``(d+1, d)``): the last column of
        ``A_h K1`` is ``rowsum(A_h)``, which multiplies the value bias and is not 1 under dropout on ``A``. No
        ``(B, L, d)`` tensor is projected; the two fold matrices are one small ``bmm`` each.
        """
        b, c, d = q.shape
        h, dh = self.heads, self.head_dim
        qside = torch.cat([self.wq.weight.view(h, dh, d), self.wq.bias.view(h, dh, 1)], dim=-1)  # (h, dh, d+1)
        kside = torch.cat([self.wk.weight.view(h, dh, d), self.wk.bias.view(h, dh, 1)], dim=-1)
        fold_in = torch.bmm(qside.transpose(1, 2), kside)  # (h, d+1, d+1): [Fin_h]_h
        to_key = fold_in[:, :d].transpose(0, 1).reshape(d, h * (d + 1))
        scale = dh**-0.5
        qk = torch.addmm(fold_in[:, d].reshape(-1), q.reshape(b * c, d), to_key, alpha=scale, beta=scale)
        length = kv1.shape[1]
        drop = keep_mask((b, c * h, length), p, q.dtype) if p > 0.0 and q.device.type == "cpu" else None
        if p > 0.0 and drop is None:
            drop = F.dropout(torch.ones(b, c * h, length, dtype=q.dtype, device=q.device), p)
        ak = _FoldedCore.apply(qk.view(b, c * h, d + 1), kv1, mask.view(b, 1, length), drop)  # rows (cand, head)
        vside = torch.cat([self.wv.weight.view(h, dh, d), self.wv.bias.view(h, dh, 1)], dim=-1)
        fold_out = torch.bmm(vside.transpose(1, 2), self.wo.weight.view(d, h, dh).permute(1, 2, 0))  # (h, d+1, d)
        out = torch.addmm(self.wo.bias, ak.reshape(b * c, h * (d + 1)), fold_out.view(h * (d + 1), d))
        return out.view(b, c, d)

    def ffn(self, q: Tensor) -> Tensor:
        """Position-wise feed-forward sublayer ``W2 GELU_erf(W1 q)`` (before dropout, LayerNorm and residual)."""
        return self.w2(F.gelu(self.w1(q)))

    def forward(self, q: Tensor, kv: Tensor, mask: Tensor) -> Tensor:
        """Apply the attention and FFN sublayers with the configured LayerNorm placement.

        Args:
            q: candidate queries ``(B, C, d)``.
            kv: key/value window ``K0`` ``(B, L, d)`` or ``[K0 | 1]`` ``(B, L, d+1)`` (see :meth:`attention`).
            mask: additive key mask ``(B, 1, 1, L)``.

        Returns:
            Updated queries ``(B, C, d)``.
        """
        if self.ln_placement == "official":
            q = q + self.ln_a(self.drop(self.attention(q, kv, mask)))
            return q + self.ln_f(self.drop(self.ffn(q)))
        if self.ln_placement == "post":
            q = self.ln_a(q + self.drop(self.attention(q, kv, mask)))
            return self.ln_f(q + self.drop(self.ffn(q)))
        q = q + self.drop(self.attention(self.ln_a(q), kv, mask))
        return q + self.drop(self.ffn(self.ln_f(q)))


class ScalarFeature(nn.Module):
    """Encoder of one raw scalar per candidate: ``Dropout(LN(Linear(1, d)(x)))`` (official f_dt / f_rep).

    Args:
        d: output size.
        dropout: dropout probability (the network's hidden dropout).
    """

    def __init__(self, d: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.lin = nn.Linear(1, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.drop = FastDropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``x`` ``(B, C)`` into ``(B, C, d)``."""
        return self.drop(self.ln(self.lin(x.unsqueeze(-1).to(self.lin.weight.dtype))))


class CRAFTNet(nn.Module):
    """CRAFT: target-aware cross-attention from candidate IDs to the source's recent neighbour IDs.

    Pseudocode (``d`` hidden, ``h`` heads, ``N`` layers)::

        K0 = DropE(LN0(E[S_u] + P[0..L-1]))     # (B,L,d); P only if use_pos
        Q  = DropE(LN0(E[v_1..v_C]))            # (B,C,d); same LN0, no positions
        mask[j] = 0 if S_u[j] != 0 else -10000
        for layer in 1..N: Q = layer(Q, K0, mask)   # keys/values stay K0
        s_v = MLP([Q ; f_dt(dt_v) ; f_rep(r_v)])

    Args:
        num_embeddings: rows of the ID table including padding row 0 (see :func:`num_embeddings_for`).
        d: hidden size.
        L: source-window length (number of learnable positions).
        num_layers: number of cross-attention layers ``N``.
        heads: attention heads.
        use_pos: add learnable positions to the keys.
        use_elapsed: concatenate the elapsed-time feature (official ``output_cat_time_intervals``).
        use_repeat: concatenate the repeat-count feature (CRAFT-R; official ``output_cat_repeat_times``).
        num_output_layer: 2 = ``Linear(D,D) -> PReLU -> Dropout -> Linear(D,1)``; 1 = ``Linear(D,1)``.
        ln_placement: ``"official"`` (``x + LN(drop(f(x)))``), ``"post"`` or ``"pre"``.
        key_time: reconstructed ablation (``input_cat_time_intervals``): add ``Linear(1,d)(key_dt)`` to the keys
            *instead of* positions (no position table is built, whatever ``use_pos`` says).
        emb_dropout: dropout on ``K0`` and ``Q`` after ``LN0``.
        attn_dropout: dropout on the attention weights.
        hidden_dropout: dropout on sublayer outputs, the scalar features and inside the MLP.
        kv_path: ``auto`` | ``project`` | ``fold``: how each layer applies Wk/Wv to ``K0`` (see :class:`CRAFTLayer`;
            same maths, ``auto`` takes the cheaper).
    """

    def __init__(
        self,
        num_embeddings: int,
        d: int = 64,
        L: int = 30,  # noqa: N803 -- the card's symbol
        num_layers: int = 2,
        heads: int = 2,
        use_pos: bool = True,
        use_elapsed: bool = True,
        use_repeat: bool = False,
        num_output_layer: int = 2,
        ln_placement: LNPlacement = "official",
        key_time: bool = False,
        emb_dropout: float = 0.1,
        attn_dropout: float = 0.1,
        hidden_dropout: float = 0.1,
        kv_path: KVPath = "auto",
    ) -> None:
        super().__init__()
        if num_embeddings < 2:
            raise ValueError(f"CRAFTNet: num_embeddings={num_embeddings} must count padding row 0 and >= 1 node")
        if num_output_layer not in (1, 2):
            raise ValueError(f"CRAFTNet: num_output_layer={num_output_layer}, expected 1 or 2")
        self.num_embeddings, self.d, self.L = num_embeddings, d, L
        self.use_pos = use_pos and not key_time
        self.use_elapsed, self.use_repeat, self.key_time = use_elapsed, use_repeat, key_time
        self.emb = nn.Embedding(num_embeddings, d, padding_idx=0)
        self.pos = nn.Embedding(L, d) if self.use_pos else None
        # reconstruction: see README -- key-side time encoding replaces the positions (ablation, default off).
        self.key_time_enc = nn.Linear(1, d) if key_time else None
        self.ln0 = nn.LayerNorm(d, eps=1e-12)
        self.emb_drop = FastDropout(emb_dropout)
        self.layers = nn.ModuleList(
            CRAFTLayer(d, heads, ln_placement, attn_dropout, hidden_dropout, kv_path=kv_path) for _ in range(num_layers)
        )
        self.elapsed_enc = ScalarFeature(d, hidden_dropout) if use_elapsed else None
        self.repeat_enc = ScalarFeature(d, hidden_dropout) if use_repeat else None
        width = d * (1 + int(use_elapsed) + int(use_repeat))
        if num_output_layer == 2:
            self.mlp = nn.Sequential(
                nn.Linear(width, width),
                nn.PReLU(num_parameters=1, init=0.15),
                FastDropout(hidden_dropout),
                nn.Linear(width, 1),
            )
        else:
            self.mlp = nn.Sequential(nn.Linear(width, 1))
        self.reset_parameters()

    @classmethod
    def tiny(cls, num_embeddings: int, **overrides: Any) -> CRAFTNet:
        """Test-size network: ``d=16, L=8``, one layer, two heads (other arguments as in ``__init__``).

        Args:
            num_embeddings: rows of the ID table including padding row 0.
            **overrides: any other ``__init__`` argument.

        Returns:
            A freshly initialised :class:`CRAFTNet`.
        """
        kwargs: dict[str, Any] = {"d": 16, "L": 8, "num_layers": 1, "heads": 2}
        kwargs.update(overrides)
        return cls(num_embeddings, **kwargs)

    def reset_parameters(self) -> None:
        """Official init: Linear/Embedding ``N(0, 0.02)``, biases 0, LayerNorm ``(1, 0)``, padding row 0 zero."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.PReLU):
                nn.init.constant_(m.weight, 0.15)
        with torch.no_grad():
            self.emb.weight[0].zero_()

    def key_mask(self, hist: Tensor) -> Tensor:
        """Additive key mask ``(B, 1, 1, L)``: 0 where ``hist != 0``, :data:`MASK_VALUE` on padding."""
        dtype = self.emb.weight.dtype
        return (hist == 0).to(dtype).mul_(MASK_VALUE)[:, None, None, :]

    def encode_keys(self, hist: Tensor, key_dt: Tensor | None = None) -> Tensor:
        """``K0 = DropE(LN0(E[hist] + P))`` (or ``+ Linear(key_dt)`` with ``key_time``), shape ``(B, L, d)``.

        Args:
            hist: left-aligned source window ``(B, L')`` of row ids, ``L' <= L``; 0 = padding.
            key_dt: ``(B, L')`` time since each key event; required iff ``key_time``.

        Returns:
            The key/value window ``K0``.
        """
        if hist.dim() != 2:
            raise ValueError(f"CRAFTNet: hist must be (B, L), got shape {tuple(hist.shape)}")
        length = hist.shape[1]
        if length > self.L:
            raise ValueError(f"CRAFTNet: hist has {length} columns but the network was built with L={self.L}")
        k = self.emb(hist)
        if self.pos is not None:
            k = k.add_(self.pos.weight[:length])  # in place: the embedding's backward keeps only the indices
        if self.key_time_enc is not None:
            if key_dt is None:
                raise ValueError("CRAFTNet: key_time=True needs key_dt (B, L)")
            key_dt = torch.where(hist != 0, key_dt.to(k.dtype), torch.zeros((), dtype=k.dtype, device=k.device))
            k = k + self.key_time_enc(key_dt.unsqueeze(-1))
        return self.emb_drop(self.ln0(k))

    def encode_queries(self, cand: Tensor) -> Tensor:
        """``Q = DropE(LN0(E[cand]))``, shape ``(B, C, d)`` (same ``LN0`` as the keys, no positions)."""
        if cand.dim() != 2:
            raise ValueError(f"CRAFTNet: cand must be (B, C), got shape {tuple(cand.shape)}")
        return self.emb_drop(self.ln0(self.emb(cand)))

    def forward(
        self,
        hist: Tensor,
        cand: Tensor,
        elapsed: Tensor | None = None,
        repeat: Tensor | None = None,
        key_dt: Tensor | None = None,
    ) -> Tensor:
        """Score every candidate of every query.

        Args:
            hist: ``(B, L)`` long row ids of the source window, left-aligned (oldest first), 0 = padding.
                Fewer than ``L`` columns are allowed (positions ``0..L'-1`` are used).
            cand: ``(B, C)`` long row ids of the candidates.
            elapsed: ``(B, C)`` float raw ``t - tau_v`` with the sentinel already applied (see
                :func:`elapsed_feature`); required iff ``use_elapsed``.
            repeat: ``(B, C)`` float repeat counts (see :func:`repeat_counts`); required iff ``use_repeat``.
            key_dt: ``(B, L)`` float time since each key event; required iff ``key_time``.

        Returns:
            Scores ``(B, C)`` (logits; higher = more likely).
        """
        if hist.shape[0] != cand.shape[0]:
            raise ValueError(f"CRAFTNet: batch sizes differ: hist {tuple(hist.shape)} vs cand {tuple(cand.shape)}")
        kv = self.encode_keys(hist, key_dt)
        mask = self.key_mask(hist)
        q = self.encode_queries(cand)
        if any(layer.use_fold(cand.shape[1], hist.shape[1]) for layer in self.layers):
            kv = with_ones(kv)  # once for every layer (the projecting path reads its first d columns)
        for layer in self.layers:
            q = layer(q, kv, mask)
        feats = [q]
        if self.elapsed_enc is not None:
            if elapsed is None:
                raise ValueError("CRAFTNet: use_elapsed=True needs elapsed (B, C)")
            feats.append(self.elapsed_enc(elapsed))
        if self.repeat_enc is not None:
            if repeat is None:
                raise ValueError("CRAFTNet: use_repeat=True needs repeat (B, C)")
            feats.append(self.repeat_enc(repeat))
        x = feats[0] if len(feats) == 1 else torch.cat(feats, dim=-1)
        return self.score(x)

    def score(self, x: Tensor) -> Tensor:
        """Apply the output MLP to ``[Q ; f_dt ; f_rep]`` ``(B, C, D)``, returning ``(B, C)`` scores.

        The final ``Linear(D, 1)`` is evaluated as a row-wise multiply-and-sum rather than a GEMV: BLAS GEMV kernels
        reduce tail rows in a different order, so identical candidates could differ by one ulp and break the exact
        ties the evaluator's tie-averaged rank relies on (e.g. the constant-embedding ablation, 2/(K+2) exactly).
        """
        for m in self.mlp[:-1]:
            x = m(x)
        out = self.mlp[-1]
        return (x * out.weight[0]).sum(-1) + out.bias[0]


def bpr_loss(pos: Tensor, neg: Tensor) -> Tensor:
    """Official BPR loss ``mean(-log(1e-10 + sigmoid(pos - neg)))``.

    Args:
        pos: positive scores ``(B,)``.
        neg: negative scores ``(B,)`` or ``(B, k)`` (each positive against each of its negatives).

    Returns:
        Scalar loss.
    """
    if neg.dim() == pos.dim() + 1:
        pos = pos.unsqueeze(-1)
    return -torch.log(1e-10 + torch.sigmoid(pos - neg)).mean()


def bce_loss(pos: Tensor, neg: Tensor) -> Tensor:
    """Ablation loss: binary cross-entropy on ``sigmoid(s)``, positives labelled 1 and negatives 0.

    Computed with logits (numerically stable ``BCE(sigmoid(s), y)``), averaged over all positive and negative scores
    together (DyGLib's ``BCELoss`` on the concatenated predictions).

    Args:
        pos: positive scores ``(B,)``.
        neg: negative scores ``(B,)`` or ``(B, k)``.

    Returns:
        Scalar loss.
    """
    scores = torch.cat([pos.reshape(-1), neg.reshape(-1)])
    labels = torch.cat([torch.ones_like(pos.reshape(-1)), torch.zeros_like(neg.reshape(-1))])
    return F.binary_cross_entropy_with_logits(scores, labels)


def repeat_counts(hist: Tensor, cand: Tensor) -> Tensor:
    """Repeat count ``r_v = #{i : hist[i] == v}`` of each candidate in its source window (CRAFT-R).

    Args:
        hist: ``(B, L)`` window of ids, 0 = padding (padding never counts).
        cand: ``(B, C)`` candidate ids in the same id space.

    Returns:
        ``(B, C)`` counts in the default float dtype (the network's input).
    """
    match = (cand[:, :, None] == hist[:, None, :]) & (hist[:, None, :] != 0)
    return match.sum(-1).to(torch.get_default_dtype())


def elapsed_feature(t: Tensor, tau: Tensor, sentinel: float = -100000.0) -> Tensor:
    """Elapsed time ``dt_v = t - tau_v`` of each candidate, ``sentinel`` where ``v`` has no earlier event.

    The subtraction runs in float64 (unix-scale times keep their fractions) and the result is cast to the
    default float dtype; it is fed raw to the network (no cosine, no log), as in the official code.

    Args:
        t: ``(B,)`` query times.
        tau: ``(B, C)`` last interaction time of each candidate strictly before ``t``; NaN for none.
        sentinel: value for candidates without an earlier event (official ``-100000``).

    Returns:
        ``(B, C)`` elapsed times.
    """
    t64, tau64 = t.to(torch.float64), tau.to(torch.float64)
    dt = t64[:, None] - tau64
    dt = torch.where(torch.isnan(tau64), torch.full_like(dt, sentinel), dt)
    return dt.to(torch.get_default_dtype())


def map_ids(ids: Tensor, dst_min: int, id_space: IdSpace) -> Tensor:
    """Map 1-based node ids to embedding rows.

    Args:
        ids: node ids (any shape), 0 = padding.
        dst_min: smallest destination id.
        id_space: ``"dst_only"`` (bipartite: ``id - dst_min + 1``; ids below ``dst_min``, padding included, -> 0) or
            ``"all"`` (identity).

    Returns:
        Row ids of the same shape and dtype.
    """
    if id_space == "all":
        return ids
    if id_space == "dst_only":
        return torch.where(ids >= dst_min, ids - (dst_min - 1), torch.zeros_like(ids))
    raise ValueError(f"map_ids: id_space={id_space!r}, expected 'dst_only' or 'all' (resolve 'auto' first)")


def num_embeddings_for(num_nodes: int, dst_min: int, id_space: IdSpace) -> int:
    """Rows of the ID table (padding row 0 included).

    Args:
        num_nodes: ``max_node_id + 1`` (1-based ids plus padding row 0).
        dst_min: smallest destination id.
        id_space: ``"dst_only"`` -> ``num_nodes - dst_min + 1``; ``"all"`` -> ``num_nodes``.

    Returns:
        The ``num_embeddings`` argument of :class:`CRAFTNet`.
    """
    if id_space == "all":
        return num_nodes
    if id_space == "dst_only":
        return num_nodes - dst_min + 1
    raise ValueError(f"num_embeddings_for: id_space={id_space!r}, expected 'dst_only' or 'all'")
