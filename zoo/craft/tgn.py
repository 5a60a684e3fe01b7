"""TGN baseline: the PyG recipe (``examples/tgn.py``) on ``torch_geometric.nn.models.tgn``, pure torch.

Memory ``TGNMemory`` (IdentityMessage + LastAggregator, GRU update), a one-layer ``TransformerConv`` graph embedding
over each node's ``num_neighbors`` most recent neighbours (``LastNeighborLoader``), edge features
``[time_enc(last_update[j] - t_e), msg_e]``, and the predictor ``lin_final(relu(lin_src(z_s) + lin_dst(z_d)))``.
Trained with BCE-with-logits on one negative per positive. The lead wraps :class:`TGNNet` in a LightningModule.

State protocol (all in chronological order; the PyG temporal stack wants integer times, so every ``t`` given here is
rounded to int64 first):

- ``reset_state()`` at each training epoch start;
- ``train_loss(...)`` then ``backward``/``step`` then ``detach_memory()`` per training batch;
- ``score(...)`` then ``observe(...)`` per eval batch (score-then-insert);
- ``backup_state()``/``restore_state()`` around validation, so training state continues bit-identically.

``LastNeighborLoader`` is defined in ``torch_geometric.nn.models.tgn`` in torch-geometric 2.8.1 (not exported by
``torch_geometric.loader``), next to the memory classes; it is imported from there.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import TransformerConv
from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator, LastNeighborLoader, TGNMemory, TimeEncoder


def _as_time(t: Tensor) -> Tensor:
    """Integer event times for the PyG temporal stack: ``round(t)`` as int64."""
    return t.round().long() if t.is_floating_point() else t.long()


class GraphAttentionEmbedding(nn.Module):
    """One TransformerConv layer over the recent-neighbour graph (PyG recipe).

    Args:
        in_channels: Memory dimension.
        out_channels: Embedding dimension (even: two concatenated heads of ``out_channels // 2``).
        msg_dim: Raw message dimension.
        time_enc: The memory's time encoder, shared so relative times are encoded alike.
    """

    def __init__(self, in_channels: int, out_channels: int, msg_dim: int, time_enc: TimeEncoder) -> None:
        super().__init__()
        self.time_enc = time_enc
        self.conv = TransformerConv(
            in_channels, out_channels // 2, heads=2, dropout=0.1, edge_dim=msg_dim + time_enc.out_channels
        )

    def forward(self, x: Tensor, last_update: Tensor, edge_index: Tensor, t: Tensor, msg: Tensor) -> Tensor:
        """Embed nodes from their memory and their recent neighbours.

        Args:
            x: Memory of the local nodes (N, memory_dim).
            last_update: Last memory update time of the local nodes (N,).
            edge_index: (2, E) local indices, row 0 the neighbour, row 1 the central node.
            t: Event time of each neighbour edge (E,).
            msg: Raw message of each neighbour edge (E, msg_dim).

        Returns:
            (N, out_channels) embeddings.
        """
        rel_t = last_update[edge_index[0]] - t
        edge_attr = torch.cat([self.time_enc(rel_t.to(x.dtype)), msg], dim=-1)
        return self.conv(x, edge_index, edge_attr)


class LinkPredictor(nn.Module):
    """``lin_final(relu(lin_src(z_s) + lin_dst(z_d)))`` (PyG recipe).

    Args:
        in_channels: Embedding dimension.
    """

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.lin_src = nn.Linear(in_channels, in_channels)
        self.lin_dst = nn.Linear(in_channels, in_channels)
        self.lin_final = nn.Linear(in_channels, 1)

    def forward(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        """Logits for (z_src, z_dst) pairs; shapes broadcast, output drops the last axis."""
        return self.lin_final((self.lin_src(z_src) + self.lin_dst(z_dst)).relu()).squeeze(-1)


class TGNNet(nn.Module):
    """TGN (Rossi et al., 2020) as in PyG's ``examples/tgn.py``, with batched one-vs-many evaluation.

    Args:
        num_nodes: Memory size: max node id + 1 (id 0 is padding and gets a memory slot too).
        msg_dim: Raw message (edge feature) dimension.
        memory_dim: Memory dimension (recipe 100; the reproduction config uses 64).
        time_dim: Time-encoding dimension.
        embedding_dim: Graph-embedding dimension (even: two heads).
        num_neighbors: Most recent neighbours kept per node.
        strict_order: Refuse ``train_loss``/``observe`` events older than the newest event already in state, or
            unsorted within a batch (a shuffled loader would silently corrupt memory).

    Example:
        >>> net = TGNNet(num_nodes=10, msg_dim=1, memory_dim=8, time_dim=8, embedding_dim=8)
        >>> src, dst, neg = torch.tensor([1, 2]), torch.tensor([5, 6]), torch.tensor([7, 8])
        >>> t, msg = torch.tensor([0.0, 1.0]), torch.zeros(2, 1)
        >>> loss = net.train_loss(src, dst, neg, t, msg)
        >>> _ = net.eval()
        >>> net.score(src, torch.tensor([[5, 7], [6, 8]]), t).shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        num_nodes: int,
        msg_dim: int,
        memory_dim: int = 100,
        time_dim: int = 100,
        embedding_dim: int = 100,
        num_neighbors: int = 10,
        strict_order: bool = True,
    ) -> None:
        super().__init__()
        if embedding_dim % 2:
            raise ValueError(f"TGNNet: embedding_dim={embedding_dim} must be even (2 heads of embedding_dim // 2)")
        if num_nodes < 2 or msg_dim < 1 or num_neighbors < 1:
            raise ValueError(
                f"TGNNet: need num_nodes >= 2, msg_dim >= 1, num_neighbors >= 1; got "
                f"{num_nodes}, {msg_dim}, {num_neighbors}"
            )
        self.num_nodes = num_nodes
        self.msg_dim = msg_dim
        self.strict_order = strict_order
        self.memory = TGNMemory(
            num_nodes,
            msg_dim,
            memory_dim,
            time_dim,
            message_module=IdentityMessage(msg_dim, memory_dim, time_dim),
            aggregator_module=LastAggregator(),
        )
        self.gnn = GraphAttentionEmbedding(memory_dim, embedding_dim, msg_dim, self.memory.time_enc)
        self.link_pred = LinkPredictor(embedding_dim)
        self.neighbor_loader = LastNeighborLoader(num_nodes, size=num_neighbors)
        # Per-event store indexed by the neighbour loader's e_id (the recipe's data.t[e_id], data.msg[e_id]);
        # capacity doubles, rows >= _n_events are unused. Non-persistent: rebuilt by streaming events.
        self.register_buffer("_ev_t", torch.zeros(0, dtype=torch.long), persistent=False)
        self.register_buffer("_ev_msg", torch.zeros(0, msg_dim), persistent=False)
        self._n_events = 0
        self._last_t = -(2**63)

    # ----------------------------------------------------------------- state
    def train(self, mode: bool = True) -> TGNNet:
        """Set train/eval mode; entering eval flushes pending memory messages without building a graph.

        TGNMemory flushes its lazily stored messages when it leaves train mode. The recipe calls ``eval()`` inside
        a ``no_grad`` test function; here Lightning calls it with gradients on, which would chain the memory to
        the flush's GRU graph and leak gradients into the next training step (or keep the graph alive).
        """
        with torch.no_grad():
            super().train(mode)
        self.memory.detach()
        return self

    def reset_state(self) -> None:
        """Fresh memory, empty neighbour graph and event store (call at each training epoch start)."""
        self.memory.reset_state()
        self.neighbor_loader.reset_state()
        self._n_events = 0
        self._last_t = -(2**63)

    def detach_memory(self) -> None:
        """Cut the memory's autograd history (call after every optimiser step)."""
        self.memory.detach()

    def backup_state(self) -> dict[str, Any]:
        """Copy all streaming state: memory, last update, message stores, neighbour buffers, event store.

        Message stores are dicts of tuples of tensors that PyG replaces but never edits in place, so copying the
        dicts suffices; every tensor buffer is cloned. LastAggregator and IdentityMessage hold no state.
        """
        mem, nl = self.memory, self.neighbor_loader
        return {
            "memory": mem.memory.detach().clone(),
            "last_update": mem.last_update.clone(),
            "memory_assoc": mem._assoc.clone(),
            "msg_s_store": dict(mem.msg_s_store),
            "msg_d_store": dict(mem.msg_d_store),
            "nl_neighbors": nl.neighbors.clone(),
            "nl_e_id": nl.e_id.clone(),
            "nl_assoc": nl._assoc.clone(),
            "nl_cur_e_id": int(nl.cur_e_id),
            "ev_t": self._ev_t[: self._n_events].clone(),
            "ev_msg": self._ev_msg[: self._n_events].clone(),
            "n_events": self._n_events,
            "last_t": self._last_t,
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`backup_state` returned (the backup stays reusable)."""
        mem, nl = self.memory, self.neighbor_loader
        device = mem.memory.device
        mem.memory = state["memory"].clone().to(device)
        mem.last_update = state["last_update"].clone().to(device)
        mem._assoc = state["memory_assoc"].clone().to(device)
        mem.msg_s_store = dict(state["msg_s_store"])
        mem.msg_d_store = dict(state["msg_d_store"])
        nl.neighbors = state["nl_neighbors"].clone().to(device)
        nl.e_id = state["nl_e_id"].clone().to(device)
        nl._assoc = state["nl_assoc"].clone().to(device)
        nl.cur_e_id = state["nl_cur_e_id"]
        self._ev_t = state["ev_t"].clone().to(device)
        self._ev_msg = state["ev_msg"].clone().to(device)
        self._n_events = state["n_events"]
        self._last_t = state["last_t"]

    # --------------------------------------------------------------- helpers
    def _sync_device(self, device: torch.device) -> None:
        """Move the neighbour loader (not an nn.Module, so ``.to()`` skips it) to ``device``."""
        nl = self.neighbor_loader
        if nl.e_id.device != device:
            nl.neighbors, nl.e_id, nl._assoc = nl.neighbors.to(device), nl.e_id.to(device), nl._assoc.to(device)

    def _check_events(self, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        """Validate shapes, id range and (``strict_order``) chronological order of incoming events."""
        b = src.shape[0]
        if src.shape != (b,) or dst.shape != (b,) or t.shape != (b,) or msg.shape != (b, self.msg_dim):
            raise ValueError(
                f"TGNNet: expected src, dst, t (B,) and msg (B, {self.msg_dim}); got "
                f"{tuple(src.shape)}, {tuple(dst.shape)}, {tuple(t.shape)}, {tuple(msg.shape)}"
            )
        if b == 0:
            return
        hi = int(torch.maximum(src.max(), dst.max()))
        if hi >= self.num_nodes or int(torch.minimum(src.min(), dst.min())) < 0:
            raise ValueError(
                f"TGNNet: node id {hi} outside [0, num_nodes={self.num_nodes}); size num_nodes as max id + 1"
            )
        if self.strict_order:
            if bool((t[1:] < t[:-1]).any()) or int(t[0]) < self._last_t:
                raise ValueError(
                    f"TGNNet: events out of time order (batch t in [{int(t.min())}, {int(t.max())}], "
                    f"state already at t={self._last_t}); TGN needs a chronological, unshuffled loader "
                    "and reset_state() at each epoch start"
                )
            self._last_t = int(t[-1])

    def _insert(self, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        """Push true events into memory, neighbour loader and event store (the recipe's post-batch update)."""
        self.memory.update_state(src, dst, t, msg)
        self.neighbor_loader.insert(src, dst)
        need = self._n_events + src.shape[0]
        if need > self._ev_t.shape[0]:
            cap = max(need, 2 * self._ev_t.shape[0], 1024)
            ev_t, ev_msg = self._ev_t.new_zeros(cap), self._ev_msg.new_zeros(cap, self.msg_dim)
            ev_t[: self._n_events] = self._ev_t[: self._n_events]
            ev_msg[: self._n_events] = self._ev_msg[: self._n_events]
            self._ev_t, self._ev_msg = ev_t, ev_msg
        self._ev_t[self._n_events : need] = t
        self._ev_msg[self._n_events : need] = msg.detach()
        self._n_events = need

    def embed(self, n_id: Tensor) -> tuple[Tensor, Tensor]:
        """Embed the given (unique) nodes from memory and their recent neighbours.

        Args:
            n_id: Unique global node ids (N,).

        Returns:
            ``(z, local_id)``: embeddings of the loader's node set (sorted, a superset of ``n_id``) and that node
            set, so ``torch.searchsorted(local_id, ids)`` maps global ids to rows of ``z``.
        """
        self._sync_device(n_id.device)
        local_id, edge_index, e_id = self.neighbor_loader(n_id)
        mem, last_update = self.memory(local_id)
        z = self.gnn(mem, last_update, edge_index, self._ev_t[e_id], self._ev_msg[e_id])
        return z, local_id

    # ------------------------------------------------------------------- API
    def train_loss(self, src: Tensor, dst: Tensor, neg: Tensor, t: Tensor, msg: Tensor) -> Tensor:
        """BCE-with-logits of positives vs one negative each, then push the positives into state.

        Args:
            src: Sources (B,).
            dst: Positive destinations (B,).
            neg: One negative destination per positive (B,).
            t: Event times (B,), rounded to int64.
            msg: Raw messages (B, msg_dim).

        Returns:
            Scalar loss ``BCE(pos, 1) + BCE(neg, 0)`` (the recipe's sum of two means).
        """
        t = _as_time(t)
        msg = msg.to(self._ev_msg.dtype)
        self._check_events(src, dst, t, msg)
        if neg.shape != src.shape or (neg.numel() and not 0 <= int(neg.min()) <= int(neg.max()) < self.num_nodes):
            raise ValueError(
                f"TGNNet.train_loss: expected neg of shape {tuple(src.shape)} with ids in [0, {self.num_nodes}); "
                f"got shape {tuple(neg.shape)}"
            )
        z, local_id = self.embed(torch.cat([src, dst, neg]).unique())
        z_src = z[torch.searchsorted(local_id, src)]
        pos_out = self.link_pred(z_src, z[torch.searchsorted(local_id, dst)])
        neg_out = self.link_pred(z_src, z[torch.searchsorted(local_id, neg)])
        loss = F.binary_cross_entropy_with_logits(pos_out, torch.ones_like(pos_out))
        loss = loss + F.binary_cross_entropy_with_logits(neg_out, torch.zeros_like(neg_out))
        self._insert(src, dst, t, msg)
        return loss

    @torch.no_grad()
    def score(self, src: Tensor, cand: Tensor, t: Tensor | None = None) -> Tensor:
        """Batched one-vs-many logits: every node embedded once, all (B, C) pairs scored together.

        Equals TGB's per-positive loop (:meth:`score_loop`) up to float rounding, because a node's embedding
        depends only on its own memory and neighbour slots, not on which other nodes share the batch. Call in eval
        mode (dropout off, memory flushed).

        Args:
            src: Sources (B,).
            cand: Candidates (B, C), positive first by the zoo's convention; padding id 0 scores finitely.
            t: Query times (B,); unused, as in the recipe (time enters through memory and neighbour edges).

        Returns:
            (B, C) logits.
        """
        z, local_id = self.embed(torch.cat([src, cand.reshape(-1)]).unique())
        z_src = z[torch.searchsorted(local_id, src)]
        z_cand = z[torch.searchsorted(local_id, cand)]
        return self.link_pred(z_src[:, None, :], z_cand)

    @torch.no_grad()
    def score_loop(self, src: Tensor, cand: Tensor, t: Tensor | None = None) -> Tensor:
        """Reference: TGB's per-positive evaluation (one n_id, neighbour sample and embedding per positive).

        Args:
            src: Sources (B,).
            cand: Candidates (B, C).
            t: Query times (B,); unused.

        Returns:
            (B, C) logits.
        """
        rows = []
        for i in range(src.shape[0]):
            q_src = src[i].repeat(cand.shape[1])
            z, local_id = self.embed(torch.cat([q_src, cand[i]]).unique())
            rows.append(
                self.link_pred(z[torch.searchsorted(local_id, q_src)], z[torch.searchsorted(local_id, cand[i])])
            )
        return torch.stack(rows)

    @torch.no_grad()
    def observe(self, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        """Insert true edges into memory and neighbour loader after scoring an eval batch (or to stream a split).

        Args:
            src: Sources (B,).
            dst: Destinations (B,).
            t: Event times (B,), rounded to int64.
            msg: Raw messages (B, msg_dim).
        """
        t = _as_time(t)
        msg = msg.to(self._ev_msg.dtype)
        self._check_events(src, dst, t, msg)
        self._sync_device(src.device)
        self._insert(src, dst, t, msg)
