"""pass@k metrics for Direct Coverage Optimization (card ``dco``, "Metrics" and "Where descriptions disagree").

- ``pass_at_k``: the unbiased estimator ``1 − C(n−c, k) / C(n, k)`` from ``n`` samples of which ``c`` are correct
  (``openai/human-eval``), in the stable product form ``1 − Π_{i=n−c+1}^{n} (1 − k/i)``. It is 1 where ``n − c < k``,
  0 where ``c = 0``, and ``k > n`` raises.
- ``pass_at_k_chunks``: the evaluation notebook's estimator (``allanraventos/refine``): ``floor(n/k)`` disjoint chunks
  of ``k`` samples, the fraction of chunks with a correct sample. Unbiased as well, with a higher variance.
- ``exact_pass_at_k``: ``1 − (1 − p)^k`` from the per-problem success probability ``p``, for tasks whose correct
  response is unique (card "Method (precise)", pass@N).
- ``PassAtK``: a ``torchmetrics.Metric`` over per-sample correctness ``[P, n]`` (or counts), DDP-safe through ``cat``
  list states; ``compute()`` returns ``{k: mean pass@k}``.

Pure torch + torchmetrics. Shapes: ``P`` problems, ``n`` samples each. Card "Performance": 10⁵ problems in < 1 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

Estimator = Literal["unbiased", "chunks"]


def _check_k(k: int, where: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{where}: k={k!r} must be a positive int")
    return k


def _as_counts(x: Tensor | int, name: str, where: str = "pass_at_k") -> Tensor:
    """Integer tensor from ints or integer-valued tensors; float tensors must hold whole numbers."""
    t = torch.as_tensor(x)
    if t.dtype == torch.bool:
        t = t.long()
    if t.is_floating_point():
        if not bool(torch.all(t == t.round())):
            raise ValueError(f"{where}: {name} must hold whole numbers (sample counts), found non-integer values")
    elif t.is_complex():
        raise TypeError(f"{where}: {name} must be an int tensor, found {t.dtype}")
    t = t.to(torch.int64)
    if t.numel() and int(t.min()) < 0:
        raise ValueError(f"{where}: {name} must be >= 0, found {int(t.min())}")
    return t


def pass_at_k(n: Tensor | int, c: Tensor | int, k: int) -> Tensor:
    """Unbiased pass@k, ``1 − C(n−c, k) / C(n, k)``, per problem (card "Metrics").

    Computed as ``1 − Π_{i=n−c+1}^{n} (1 − k/i)`` through one cumulative-sum table of ``log1p(−k/i)`` for
    ``i = k+1 .. max(n)``: each problem is a difference of two table entries, so the cost is ``O(P + max n)`` time and
    memory (no ``[P, max n]`` grid). Exactly 1 where ``n − c < k`` and exactly 0 where ``c = 0``.

    Args:
        n: samples per problem, int tensor ``[P]`` or a python int (may differ per problem; broadcast against ``c``).
        c: correct samples per problem, int tensor ``[P]`` or a python int, ``0 <= c <= n``.
        k: the ``k`` of pass@k, ``1 <= k <= min(n)``.

    Returns:
        float64 tensor of the broadcast shape of ``n`` and ``c`` (``[P]``; 0-d for two ints), on ``c``'s device.

    Raises:
        ValueError: ``k > n`` for some problem (names ``k`` and the smallest ``n``), ``c > n``, negative counts, or
            ``k < 1``.
    """
    _check_k(k, "pass_at_k")
    n_t, c_t = _as_counts(n, "n"), _as_counts(c, "c")
    device = c_t.device if isinstance(c, Tensor) else n_t.device
    n_t, c_t = torch.broadcast_tensors(n_t.to(device), c_t.to(device))
    if n_t.numel() == 0:
        return torch.zeros(n_t.shape, dtype=torch.float64, device=device)
    n_min, n_max = int(n_t.min()), int(n_t.max())
    if k > n_min:
        raise ValueError(f"pass_at_k: k={k} exceeds the smallest number of samples n={n_min}; need k <= n")
    if bool(torch.any(c_t > n_t)):
        bad = int(torch.nonzero(c_t.reshape(-1) > n_t.reshape(-1))[0])
        raise ValueError(
            f"pass_at_k: c > n at problem {bad} (c={int(c_t.reshape(-1)[bad])}, n={int(n_t.reshape(-1)[bad])})"
        )
    # table[j] = Σ_{i=k+1}^{j} log1p(−k/i) for j >= k (0 at j <= k); only j >= k is ever read below.
    i = torch.arange(k + 1, n_max + 1, dtype=torch.float64, device=device)
    table = torch.zeros(n_max + 1, dtype=torch.float64, device=device)
    table[k + 1 :] = torch.cumsum(torch.log1p(-k / i), 0)
    rest = n_t - c_t
    hit = rest < k  # fewer than k wrong samples: every k-subset holds a correct one
    log_miss = table[n_t] - table[rest.clamp(min=k)]
    out = -torch.expm1(log_miss)
    return torch.where(hit, torch.ones_like(out), out)


def pass_at_k_chunks(correct: Tensor, k: int) -> Tensor:
    """Disjoint-chunks pass@k (the public evaluation notebook; card "Where descriptions disagree").

    The ``n`` samples of each problem are cut, in order, into ``floor(n/k)`` disjoint chunks of ``k`` (the last
    ``n mod k`` samples are unused); a chunk succeeds when any of its samples is correct. Unbiased when the samples
    are exchangeable, with a higher variance than ``pass_at_k``.

    Args:
        correct: bool (or 0/1) tensor ``[P, n]`` of per-sample correctness.
        k: chunk size, ``1 <= k <= n``.

    Returns:
        float64 tensor ``[P]``: the fraction of successful chunks per problem.
    """
    _check_k(k, "pass_at_k_chunks")
    if correct.dim() != 2:
        raise ValueError(f"pass_at_k_chunks: correct must be [P, n], found shape {tuple(correct.shape)}")
    p, n = correct.shape
    if k > n:
        raise ValueError(f"pass_at_k_chunks: k={k} exceeds the number of samples n={n}; need k <= n")
    m = n // k
    chunks = correct[:, : m * k].reshape(p, m, k).bool().any(dim=-1)
    return chunks.to(torch.float64).mean(dim=-1)


def exact_pass_at_k(p: Tensor | float, k: int) -> Tensor:
    """``1 − (1 − p)^k`` from the per-problem success probability (card "Method (precise)", pass@N).

    Computed as ``−expm1(k · log1p(−p))`` in float64, so ``p = 1e-12, k = 256`` keeps ``≈ 2.56e-10`` to full
    precision (``1 − (1 − p)**k`` loses about four digits there). ``p`` is clamped to ``[0, 1]``; ``p = 1`` gives 1.

    Args:
        p: per-problem probability of a correct sample, float tensor ``[P]`` (any float dtype) or a float.
        k: number of samples, ``k >= 1``.

    Returns:
        float64 tensor of ``p``'s shape.
    """
    _check_k(k, "exact_pass_at_k")
    q = torch.as_tensor(p, dtype=torch.float64).clamp(0.0, 1.0)
    return -torch.expm1(k * torch.log1p(-q))


def _as_correct(correct: Tensor) -> Tensor:
    if correct.dim() != 2:
        raise ValueError(f"PassAtK.update: correct must be [P, n] (problems x samples), found {tuple(correct.shape)}")
    if correct.dtype != torch.bool:
        if bool(torch.any((correct != 0) & (correct != 1))):
            raise ValueError("PassAtK.update: correct must be bool or 0/1 per sample")
        correct = correct != 0
    return correct


class PassAtK(Metric):
    """Mean pass@k over problems from per-sample correctness (card "Metrics").

    ``estimator`` follows the card's "Where descriptions disagree" table. ``update(correct)`` takes a bool ``[P, n]``
    tensor; ``update_counts(n, c)`` (same as ``update(n=n, c=c)``) takes counts (``unbiased`` only). ``n`` may differ
    between updates. ``compute()`` returns ``{k: mean pass@k}`` (float64 scalars). All states are lists reduced with
    ``cat``, so DDP gathers every problem before averaging.

    Args:
        ks: the ``k`` values to report (each ``<= n`` of every problem, checked in ``compute``).
        estimator: ``unbiased`` (``1 − C(n−c,k)/C(n,k)``, default) or ``chunks`` (disjoint chunks of ``k`` samples).

    Example:
        >>> metric = PassAtK(ks=(1, 2))
        >>> metric.update(torch.tensor([[True, False, False, False], [False, False, False, False]]))
        >>> {k: round(float(v), 3) for k, v in metric.compute().items()}
        {1: 0.125, 2: 0.25}
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, ks: Sequence[int] = (1, 4, 16, 64, 256), estimator: Estimator = "unbiased") -> None:
        super().__init__()
        ks = tuple(ks)
        if not ks:
            raise ValueError("PassAtK: ks must name at least one k")
        for k in ks:
            _check_k(k, "PassAtK")
        match estimator:
            case "unbiased" | "chunks":
                pass
            case _:
                raise ValueError(f"PassAtK: estimator={estimator!r}; expected 'unbiased' or 'chunks'")
        self.ks = tuple(sorted(set(ks)))
        self.estimator = estimator
        self.add_state("n", default=[], dist_reduce_fx="cat")
        if estimator == "unbiased":
            self.add_state("c", default=[], dist_reduce_fx="cat")
        else:
            for k in self.ks:
                self.add_state(f"chunks_{k}", default=[], dist_reduce_fx="cat")

    def update(self, correct: Tensor | None = None, *, n: Tensor | int | None = None, c: Tensor | None = None) -> None:
        """Add ``P`` problems from their per-sample correctness (or, keyword-only, from counts).

        Args:
            correct: bool (or 0/1) tensor ``[P, n]``.
            n: with ``c`` instead of ``correct``: samples per problem, ``[P]`` or an int (see ``update_counts``).
            c: with ``n``: correct samples per problem, int tensor ``[P]``.
        """
        if correct is None:
            if n is None or c is None:
                raise ValueError("PassAtK.update: pass correct [P, n], or both n= and c= counts")
            self._add_counts(n, c)
            return
        if n is not None or c is not None:
            raise ValueError("PassAtK.update: pass either correct or n= and c=, not both")
        correct = _as_correct(correct)
        p, n_samples = correct.shape
        self.n.append(torch.full((p,), n_samples, dtype=torch.int64, device=correct.device))
        if self.estimator == "unbiased":
            self.c.append(correct.sum(dim=1))  # bool sum is int64; dtype=int64 is ~3x slower
            return
        for k in self.ks:
            # k > n is reported by compute() with the smallest n; keep a placeholder so every state has P rows
            value = pass_at_k_chunks(correct, k) if k <= n_samples else torch.full((p,), float("nan"))
            getattr(self, f"chunks_{k}").append(value.to(device=correct.device, dtype=torch.float64))

    def update_counts(self, n: Tensor | int, c: Tensor) -> None:
        """Add problems from sample counts (``unbiased`` estimator only).

        Goes through ``update`` so torchmetrics' bookkeeping (update count, compute cache, sync guard) still applies.

        Args:
            n: samples per problem, int tensor ``[P]`` or an int shared by all problems.
            c: correct samples per problem, int tensor ``[P]``, ``0 <= c <= n``.
        """
        self.update(n=n, c=c)

    def _add_counts(self, n: Tensor | int, c: Tensor) -> None:
        if self.estimator != "unbiased":
            raise ValueError("PassAtK.update_counts: the 'chunks' estimator needs per-sample correctness; use update()")
        where = "PassAtK.update_counts"
        n_t, c_t = _as_counts(n, "n", where), _as_counts(c, "c", where)
        n_t, c_t = torch.broadcast_tensors(n_t.to(c_t.device), c_t)
        n_t, c_t = n_t.reshape(-1), c_t.reshape(-1)
        if bool(torch.any(c_t > n_t)):
            raise ValueError("PassAtK.update_counts: c > n for some problem; counts must satisfy 0 <= c <= n")
        self.n.append(n_t.clone())
        self.c.append(c_t.clone())

    def compute(self) -> dict[int, Tensor]:
        """``{k: mean pass@k over all problems}``.

        Raises:
            ValueError: no problems were added, or some ``k`` exceeds the smallest ``n``.
        """
        if isinstance(self.n, list) and not self.n:
            raise ValueError("PassAtK.compute: no problems were added (call update or update_counts first)")
        n = dim_zero_cat(self.n)
        if n.numel() == 0:
            raise ValueError("PassAtK.compute: no problems were added (call update or update_counts first)")
        n_min = int(n.min())
        if too_big := [k for k in self.ks if k > n_min]:
            raise ValueError(
                f"PassAtK: ks={too_big} exceed the smallest number of samples per problem n={n_min}; "
                "sample more or drop those k"
            )
        if self.estimator == "unbiased":
            c = dim_zero_cat(self.c)
            return {k: pass_at_k(n, c, k).mean() for k in self.ks}
        return {k: dim_zero_cat(getattr(self, f"chunks_{k}")).to(torch.float64).mean() for k in self.ks}
