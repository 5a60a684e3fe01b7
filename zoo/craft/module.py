"""CRAFT: Future Link Prediction Without Memory or Aggregation (Yi et al., NeurIPS 2025; arXiv 2505.19408).

CRAFT scores each candidate destination of a query (source u, time t) by cross-attending from the candidate's
learnable ID embedding to u's last L interactions (strictly before t), with no memory, no neighbour aggregation and
no node features; CRAFT-R adds the candidate's repeat count in u's window. This file holds the thin Lightning
adapters: a shared temporal-link evaluation base (TGB one-vs-many MRR with a seen/unseen split, hits@10, DyGLib
AP/AUC), CRAFT, and the baselines EdgeBank, TGN (PyG) and the generator's Bayes oracle, so one run gives one table.

Example:
    >>> from datamodules.temporal_graph.datamodule import TemporalLinkDataModule
    >>> from lightning.pytorch import Trainer
    >>> dm = TemporalLinkDataModule(n_events=2000, n_users=50, n_items=100)
    >>> model = CRAFTModule(num_nodes=dm.num_nodes, dst_min=dm.dst_min, d=16, L=8, num_layers=1)
    >>> Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model, dm)
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import Tensor

from zoo.core import checks
from zoo.core.datamodule import require
from zoo.core.module import ZooModule
from zoo.craft.edgebank import EdgeBank
from zoo.craft.metrics import APAUCMetric, LinkPredMetric
from zoo.craft.model import CRAFTNet, bce_loss, bpr_loss, elapsed_feature, map_ids, num_embeddings_for, repeat_counts

#: DyGLib negative-sampling strategies evaluated for AP/AUC (evaluation only).
AP_STRATEGIES = ("random", "historical", "inductive")
Split = Literal["train", "val", "test"]


class TemporalLinkModule(ZooModule):
    """Shared evaluation of future-link predictors: subclasses implement :meth:`score` (and :meth:`observe`).

    Every eval batch holds positives ``(src, dst, t)``, K fixed negatives per positive and one DyGLib negative edge
    per positive and strategy. Scores of ``[dst, negatives]`` give the tie-averaged reciprocal rank (TGB); scores of
    positive vs negative edges give AP/AUC. Stateful baselines (EdgeBank, TGN) see the true edges only after the
    batch is scored (:meth:`observe`).

    Args:
        num_nodes: node-id space size (linked from the datamodule).
        dst_min: smallest destination id of bipartite data, ``None`` otherwise (linked from the datamodule).
        ap_reduction: DyGLib AP/AUC over batches (``batch_mean``, DyGLib's) or over all edges (``global``).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        pretrained: a local checkpoint or state dict to fine-tune from.
    """

    monitor: ClassVar[str] = "val/mrr"
    mode: ClassVar[Literal["min", "max"]] = "max"
    #: Memory models must see the stream in order: a shuffled training loader is refused.
    requires_chronological: ClassVar[bool] = False
    #: Models whose state depends on the eval stream (inserted after scoring): refused under DDP.
    stateful: ClassVar[bool] = False

    def __init__(
        self,
        *,
        num_nodes: int | None = None,
        dst_min: int | None = None,
        ap_reduction: Literal["batch_mean", "global"] = "batch_mean",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        pretrained: str | None = None,
    ) -> None:
        checks.choice(checks.model("ap_reduction"), ap_reduction, ("batch_mean", "global"))
        if num_nodes is None or num_nodes < 2:
            raise ValueError(
                f"--model.init_args.num_nodes={num_nodes}: expected the datamodule's node-id space (>= 2); "
                "it is linked automatically by `zoo fit`, pass `num_nodes=dm.num_nodes` in Python"
            )
        self.num_nodes, self.dst_min, self.ap_reduction = num_nodes, dst_min, ap_reduction
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)

    def configure_metrics(self) -> None:
        """One ranking metric and one AP/AUC metric per strategy, for val and test each."""
        self.rank_metrics = torch.nn.ModuleDict({s: LinkPredMetric() for s in ("val", "test")})
        self.ap_metrics = torch.nn.ModuleDict(
            {f"{s}_{k}": APAUCMetric(reduction=self.ap_reduction) for s in ("val", "test") for k in AP_STRATEGIES}
        )

    # -- hooks for subclasses -------------------------------------------------------------------------------------
    def score(self, batch: dict[str, Tensor], src: Tensor, cand: Tensor, t: Tensor, split: Split) -> Tensor:
        """Scores ``(B, C)`` of candidates ``cand (B, C)`` for sources ``src (B,)`` at times ``t (B,)``."""
        raise NotImplementedError

    def observe(self, batch: dict[str, Tensor], split: Split) -> None:
        """Insert the batch's true edges after scoring (stateful baselines only)."""

    def batch_size_of(self, batch: Any) -> int:
        """Positives in a batch."""
        return int(batch["src"].shape[0])

    # -- data access ----------------------------------------------------------------------------------------------
    @property
    def datamodule(self) -> Any:
        """The attached or the trainer's temporal-link datamodule (``stream``, ``query_index`` ...)."""
        attached = self.__dict__.get("_attached_datamodule")
        return attached if attached is not None else self.trainer.datamodule

    def attach_datamodule(self, datamodule: Any) -> None:
        """Score outside a Trainer (notebooks, tests): use ``datamodule``'s stream and causal indices."""
        datamodule.setup()
        self.__dict__["_attached_datamodule"] = datamodule

    def setup(self, stage: str) -> None:
        """Check the datamodule protocol and the loader order this model needs."""
        dm = self.datamodule
        require(dm, "stream", type(self).__name__)
        require(dm, "query_index", type(self).__name__)
        if dm.num_nodes > self.num_nodes:
            raise ValueError(
                f"{type(self).__name__} was built for num_nodes={self.num_nodes} but the data has {dm.num_nodes} "
                "node ids (a checkpoint from other data?); fine-tune with --model.init_args.pretrained instead"
            )
        if self.requires_chronological and stage == "fit" and getattr(dm, "shuffle", False):
            raise ValueError(
                f"{type(self).__name__} keeps a memory and requires a chronological training loader: "
                "set --data.init_args.shuffle=false"
            )
        if self.stateful and self.trainer.world_size > 1:
            raise ValueError(
                f"{type(self).__name__} is stateful (edges are inserted after each eval batch) and cannot be "
                f"split over {self.trainer.world_size} processes; run it with devices=1"
            )

    def events(self, splits: tuple[int, ...]) -> dict[str, Tensor]:
        """The stream's events of the given split ids, chronological, as tensors on this module's device."""
        stream = self.datamodule.stream
        keep = np.isin(stream.split, splits)
        return {
            "src": torch.as_tensor(stream.src[keep], device=self.device),
            "dst": torch.as_tensor(stream.dst[keep], device=self.device),
            "t": torch.as_tensor(stream.t[keep], device=self.device),
            "msg": torch.as_tensor(stream.msg[keep], device=self.device),
            "eid": torch.as_tensor(np.flatnonzero(keep), device=self.device),
        }

    # -- throughput (card: perf/train_events_per_s on epochs 2+, perf/eval_cand_per_s) ---------------------------
    # Training time is the sum of the training batches' own spans, each from the previous batch's end (or the
    # epoch's start, or the end of a validation run) to its own end: loading, negatives, step and the batch-end
    # hooks count; validation does not. Lightning runs the epoch's validation after the last batch and before
    # on_train_epoch_end, so an epoch wall clock would charge it to training (issue #21: 3.5-3.9k events/s logged
    # for a model that trains at 11k).
    def on_train_epoch_start(self) -> None:
        """Start the epoch's throughput clock."""
        self._train_clock = {"mark": time.perf_counter(), "seconds": 0.0, "events": 0}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Add the batch's span and its positives to the clock."""
        now = time.perf_counter()
        clock = self._train_clock
        clock["seconds"] += now - clock["mark"]
        clock["events"] += self.batch_size_of(batch)
        clock["mark"] = now

    def on_validation_end(self) -> None:
        """Restart the training clock's mark: the validation run (and its checkpointing) is not training time."""
        if getattr(self, "_train_clock", None) is not None:
            self._train_clock["mark"] = time.perf_counter()

    def on_train_epoch_end(self) -> None:
        """Log positives per second of training batches (epoch 1 pays warm-up and index building: epochs 2+)."""
        clock = self._train_clock
        if self.current_epoch >= 1 and clock["events"]:
            self.log("perf/train_events_per_s", clock["events"] / max(clock["seconds"], 1e-9))

    def _start_eval_clock(self) -> None:
        self._eval_clock = [time.perf_counter(), 0]

    # -- evaluation -----------------------------------------------------------------------------------------------
    def _eval_step(self, batch: dict[str, Tensor], split: Split) -> None:
        src, dst, t = batch["src"], batch["dst"], batch["t"]
        k = batch["neg"].shape[1]
        # Random-NSS negatives keep the source, so they ride along as one more candidate column.
        cand = torch.cat([dst[:, None], batch["neg"], batch["ap_random_dst"][:, None]], dim=1)
        scores = self.score(batch, src, cand, t, split).float()
        if not hasattr(self, "_eval_clock"):
            self._start_eval_clock()
        self._eval_clock[1] += int(batch["neg_mask"].sum()) + int(src.shape[0])
        pos = scores[:, 0]
        self.rank_metrics[split].update(pos, scores[:, 1 : 1 + k], batch["neg_mask"], batch["seen"])
        self.ap_metrics[f"{split}_random"].update(pos, scores[:, 1 + k])
        for strategy in AP_STRATEGIES[1:]:
            neg_src, neg_dst = batch[f"ap_{strategy}_src"], batch[f"ap_{strategy}_dst"]
            neg = self.score(batch, neg_src, neg_dst[:, None], t, split)[:, 0].float()
            self.ap_metrics[f"{split}_{strategy}"].update(pos, neg)
        self.observe(batch, split)

    def _eval_epoch_end(self, split: Split) -> None:
        values = {f"{split}/{key}": value for key, value in self.rank_metrics[split].compute().items()}
        for strategy in AP_STRATEGIES:
            for key, value in self.ap_metrics[f"{split}_{strategy}"].compute().items():
                values[f"{split}/{key}_{strategy}"] = value
        values[f"{split}/ap"] = values[f"{split}/ap_random"]  # the official selection metric (DyGLib random NSS)
        if hasattr(self, "_eval_clock"):
            start, cands = self._eval_clock
            values["perf/eval_cand_per_s"] = torch.tensor(cands / max(time.perf_counter() - start, 1e-9))
            del self._eval_clock
        # The torchmetrics states are already reduced over ranks; sync_dist only averages identical values (and the
        # per-rank throughput), and keeps Lightning from warning.
        self.log_dict({k: v.float() for k, v in values.items()}, sync_dist=self.trainer.world_size > 1)
        self.rank_metrics[split].reset()
        for strategy in AP_STRATEGIES:
            self.ap_metrics[f"{split}_{strategy}"].reset()

    def on_validation_epoch_start(self) -> None:
        """Start the evaluation clock."""
        self._start_eval_clock()

    def on_test_epoch_start(self) -> None:
        """Start the evaluation clock."""
        self._start_eval_clock()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Score one eval batch (positives, K negatives, AP negatives) and update the metrics."""
        self._eval_step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Score one test batch."""
        self._eval_step(batch, "test")

    def on_validation_epoch_end(self) -> None:
        """Log ``val/mrr``, ``val/mrr_seen``, ``val/mrr_unseen``, ``val/hits10``, ``val/ap_*``, ``val/auc_*``."""
        self._eval_epoch_end("val")

    def on_test_epoch_end(self) -> None:
        """Log the ``test/`` metrics."""
        self._eval_epoch_end("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Scores ``(B, 1+K)`` of ``[dst, negatives]`` for each positive (test split)."""
        cand = torch.cat([batch["dst"][:, None], batch["neg"]], dim=1)
        scores = self.score(batch, batch["src"], cand, batch["t"], "test")
        self.observe(batch, "test")
        return scores


class CRAFTModule(TemporalLinkModule):
    """CRAFT and CRAFT-R (``use_repeat=true``): cross-attention from candidate IDs to the source's recent window.

    Args:
        num_nodes: node-id space size (linked from the datamodule).
        dst_min: smallest destination id of bipartite data, ``None`` otherwise (linked).
        d: hidden size (64 on small sets, 128 on large ones).
        L: source window length (official 30; the CPU reproduction uses 20).
        num_layers: cross-attention layers N.
        heads: attention heads h.
        use_pos: learnable positions on the keys.
        use_elapsed: elapsed-time feature Δ_v = t − τ_v (official ``output_cat_time_intervals``).
        use_repeat: repeat-count feature r_v (CRAFT-R, official ``output_cat_repeat_times``).
        num_output_layer: 2 = Linear-PReLU-Linear scorer (README, MOOC log), 1 = a single Linear (code default).
        ln_placement: ``official`` x + LN(drop(f(x))), ``post`` LN(x + drop(f(x))), ``pre`` x + drop(f(LN(x))).
        key_time: reconstructed ablation ``input_cat_time_intervals``: time encoding on the keys instead of positions.
        emb_dropout: dropout on the embedded keys and queries.
        attn_dropout: dropout on attention weights.
        hidden_dropout: dropout in FFN, scorer and features.
        elapsed_sentinel: Δ fed for a candidate with no earlier interaction (official −100000).
        kv_path: ``auto`` | ``project`` | ``fold``: how Wk/Wv meet the key window (same maths; ``auto`` folds them
            around K0 for few candidates, as in training, and projects K0 once for many, as in evaluation).
        id_space: ``auto`` = ``dst_only`` iff the data is bipartite (sources get no embedding), or ``all``.
        loss: ``bpr`` (official) or ``bce`` (ablation).
        lr: Adam learning rate (official 1e-4; the CPU reproduction uses 1e-3).
        weight_decay: Adam weight decay (official 0).
        ap_reduction: DyGLib AP/AUC reduction.
        pretrained: a local checkpoint or state dict to fine-tune from.
    """

    name: ClassVar[str] = "craft"

    def __init__(
        self,
        num_nodes: int | None = None,
        dst_min: int | None = None,
        d: int = 64,
        L: int = 30,  # noqa: N803 - the paper's symbol
        num_layers: int = 2,
        heads: int = 2,
        use_pos: bool = True,
        use_elapsed: bool = True,
        use_repeat: bool = False,
        num_output_layer: Literal[1, 2] = 2,
        ln_placement: Literal["official", "post", "pre"] = "official",
        key_time: bool = False,
        emb_dropout: float = 0.1,
        attn_dropout: float = 0.1,
        hidden_dropout: float = 0.1,
        elapsed_sentinel: float = -100000.0,
        kv_path: Literal["auto", "project", "fold"] = "auto",
        id_space: Literal["auto", "dst_only", "all"] = "auto",
        loss: Literal["bpr", "bce"] = "bpr",
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        ap_reduction: Literal["batch_mean", "global"] = "batch_mean",
        pretrained: str | None = None,
    ) -> None:
        for key, value in (("d", d), ("L", L), ("num_layers", num_layers), ("heads", heads)):
            checks.integer(checks.model(key), value)
        if d % heads:
            raise ValueError(f"--model.init_args.d={d} must be divisible by --model.init_args.heads={heads}")
        checks.choice(checks.model("num_output_layer"), num_output_layer, (1, 2))
        checks.choice(checks.model("ln_placement"), ln_placement, ("official", "post", "pre"))
        for key, value in (("emb_dropout", emb_dropout), ("attn_dropout", attn_dropout),
                           ("hidden_dropout", hidden_dropout)):  # fmt: skip
            checks.probability(checks.model(key), value)
        checks.number(checks.model("elapsed_sentinel"), elapsed_sentinel)
        checks.choice(checks.model("kv_path"), kv_path, ("auto", "project", "fold"))
        checks.choice(checks.model("id_space"), id_space, ("auto", "dst_only", "all"))
        checks.choice(checks.model("loss"), loss, ("bpr", "bce"))
        if id_space == "dst_only" and dst_min is None:
            raise ValueError("--model.init_args.id_space=dst_only needs bipartite data (the datamodule found none)")
        self.id_space: Literal["dst_only", "all"] = (
            ("dst_only" if dst_min is not None else "all") if id_space == "auto" else id_space
        )
        self.L, self.elapsed_sentinel, self.use_elapsed, self.use_repeat = L, elapsed_sentinel, use_elapsed, use_repeat
        self.key_time, self.loss_name = key_time, loss
        self._arch = {
            "d": d, "L": L, "num_layers": num_layers, "heads": heads, "use_pos": use_pos, "use_elapsed": use_elapsed,
            "use_repeat": use_repeat, "num_output_layer": num_output_layer, "ln_placement": ln_placement,
            "key_time": key_time, "emb_dropout": emb_dropout, "attn_dropout": attn_dropout,
            "hidden_dropout": hidden_dropout, "kv_path": kv_path,
        }  # fmt: skip
        super().__init__(
            num_nodes=num_nodes, dst_min=dst_min, ap_reduction=ap_reduction, lr=lr, weight_decay=weight_decay,
            pretrained=pretrained,
        )  # fmt: skip

    def configure_models(self) -> None:
        """Build :class:`CRAFTNet` over the ID table the id space asks for."""
        rows = num_embeddings_for(self.num_nodes, self.dst_min or 1, self.id_space)
        self.model = CRAFTNet(rows, **self._arch)

    def inputs(self, src: Tensor, cand: Tensor, t: Tensor, split: Split) -> dict[str, Tensor]:
        """CRAFTNet inputs for queries ``(src, t)`` and candidates ``cand (B, C)`` on the split's causal graph."""
        index = self.datamodule.query_index(split)
        src_np, t_np, cand_np = src.cpu().numpy(), t.cpu().numpy(), cand.cpu().numpy()
        if self.key_time:  # reconstruction: see README (time since each key event instead of positions)
            window, times, _, valid = index.window_details(src_np, t_np, self.L)
            key_dt = np.where(valid, t_np[:, None] - np.nan_to_num(times), 0.0)
        else:
            window = index.window(src_np, t_np, self.L)
        hist = torch.as_tensor(window, device=self.device)
        out = {"hist_ids": hist}
        if self.use_elapsed:
            tau = torch.as_tensor(index.last_time(cand_np, t_np[:, None]), device=self.device)
            out["elapsed"] = elapsed_feature(t.double(), tau, self.elapsed_sentinel).float()
        if self.use_repeat:
            out["repeat"] = repeat_counts(hist, cand).float()
        if self.key_time:
            out["key_dt"] = torch.as_tensor(key_dt, dtype=torch.float32, device=self.device)
        dst_min = self.dst_min or 1
        out["hist"] = map_ids(hist, dst_min, self.id_space)
        out["cand"] = map_ids(cand, dst_min, self.id_space)
        return out

    def forward_scores(self, src: Tensor, cand: Tensor, t: Tensor, split: Split) -> tuple[Tensor, Tensor]:
        """Scores ``(B, C)`` and the raw window ids ``(B, L)``."""
        x = self.inputs(src, cand, t, split)
        scores = self.model(x["hist"], x["cand"], x.get("elapsed"), x.get("repeat"), x.get("key_dt"))
        return scores, x["hist_ids"]

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """BPR (or BCE) of the positive vs one negative; a batch whose windows are all empty is skipped."""
        cand = torch.stack([batch["dst"], batch["neg"]], dim=1)
        scores, hist = self.forward_scores(batch["src"], cand, batch["t"], "train")
        if not bool((hist != 0).any()):
            return None
        pos, neg = scores[:, 0], scores[:, 1]
        loss = bpr_loss(pos, neg) if self.loss_name == "bpr" else bce_loss(pos, neg)
        return {"loss": loss, "pair_acc": (pos > neg).float().mean()}

    def score(self, batch: dict[str, Tensor], src: Tensor, cand: Tensor, t: Tensor, split: Split) -> Tensor:
        """Candidate scores; candidates never attend to each other, so any batching gives the same numbers."""
        return self.forward_scores(src, cand, t, split)[0]


class EdgeBankModule(TemporalLinkModule):
    """EdgeBank (Poursafaei et al. 2022): 1 if the directed edge is in memory, else 0; the sanity floor.

    Memory holds every edge before the eval split (train for val; train, then val streamed in, for test); each eval
    batch's positives are inserted after scoring.

    Args:
        num_nodes: node-id space size (linked).
        dst_min: linked from the datamodule (unused).
        memory: ``unlimited`` or ``time_window`` (the last ``window_ratio`` of the time span, TGB's fixed window).
        window_ratio: fraction of the memory's time span kept by ``time_window``.
        ap_reduction: DyGLib AP/AUC reduction.
    """

    name: ClassVar[str] = "edgebank"
    trainable: ClassVar[bool] = False
    stateful: ClassVar[bool] = True

    def __init__(
        self,
        num_nodes: int | None = None,
        dst_min: int | None = None,
        memory: Literal["unlimited", "time_window"] = "unlimited",
        window_ratio: float = 0.15,
        ap_reduction: Literal["batch_mean", "global"] = "batch_mean",
    ) -> None:
        checks.choice(checks.model("memory"), memory, ("unlimited", "time_window"))
        checks.probability(checks.model("window_ratio"), window_ratio, open_low=True)
        self.memory, self.window_ratio = memory, window_ratio
        super().__init__(num_nodes=num_nodes, dst_min=dst_min, ap_reduction=ap_reduction)

    def configure_models(self) -> None:
        """EdgeBank has no parameters; ``self.model`` is an empty placeholder for checkpoints."""
        self.model = torch.nn.Identity()
        self.bank = EdgeBank(mode=self.memory, window_ratio=self.window_ratio)

    def compute_loss(self, batch: dict[str, Tensor]) -> None:
        """Nothing to learn."""
        return None

    def _fill(self, stream_val: bool) -> None:
        # TGB parity: the window length is sized once from the training span, then val streams in (and slides it).
        self.bank.reset()
        ev = self.events((0,))
        self.bank.fit(ev["src"].cpu().numpy(), ev["dst"].cpu().numpy(), ev["t"].cpu().numpy())
        if stream_val:
            ev = self.events((1,))
            self.bank.insert(ev["src"].cpu().numpy(), ev["dst"].cpu().numpy(), ev["t"].cpu().numpy())

    def on_validation_epoch_start(self) -> None:
        """Memory = training edges."""
        self._fill(stream_val=False)
        super().on_validation_epoch_start()

    def on_test_epoch_start(self) -> None:
        """Memory = training edges, then the validation edges streamed in."""
        self._fill(stream_val=True)
        super().on_test_epoch_start()

    on_predict_epoch_start = on_test_epoch_start

    def score(self, batch: dict[str, Tensor], src: Tensor, cand: Tensor, t: Tensor, split: Split) -> Tensor:
        """1.0 for edges in memory, else 0.0."""
        out = self.bank.score(src.cpu().numpy(), cand.cpu().numpy(), t.cpu().numpy())
        return torch.as_tensor(np.asarray(out), dtype=torch.float32, device=self.device)

    def observe(self, batch: dict[str, Tensor], split: Split) -> None:
        """Insert the batch's positives after scoring."""
        self.bank.insert(batch["src"].cpu().numpy(), batch["dst"].cpu().numpy(), batch["t"].cpu().numpy())


class OracleModule(TemporalLinkModule):
    """The generator's Bayes oracle: the ceiling every learned model must stay below (else leakage).

    Args:
        num_nodes: node-id space size (linked).
        dst_min: linked from the datamodule (unused).
        ap_reduction: DyGLib AP/AUC reduction.
    """

    name: ClassVar[str] = "oracle"
    trainable: ClassVar[bool] = False

    def __init__(
        self,
        num_nodes: int | None = None,
        dst_min: int | None = None,
        ap_reduction: Literal["batch_mean", "global"] = "batch_mean",
    ) -> None:
        super().__init__(num_nodes=num_nodes, dst_min=dst_min, ap_reduction=ap_reduction)

    def configure_models(self) -> None:
        """No parameters."""
        self.model = torch.nn.Identity()

    def setup(self, stage: str) -> None:
        """The oracle exists only for the embedded generator."""
        super().setup(stage)
        if not getattr(self.datamodule, "has_oracle", False):
            raise ValueError("OracleModule needs the embedded generator (--data.init_args.path=null)")

    def compute_loss(self, batch: dict[str, Tensor]) -> None:
        """Nothing to learn."""
        return None

    def score(self, batch: dict[str, Tensor], src: Tensor, cand: Tensor, t: Tensor, split: Split) -> Tensor:
        """The Bayes posterior of each candidate given the generator's hidden state (per positive event)."""
        out = self.datamodule.oracle_scores(batch["eid"].cpu().numpy(), cand.cpu().numpy())
        return torch.as_tensor(out, dtype=torch.float32, device=self.device)


class TGNModule(TemporalLinkModule):
    """TGN (Rossi et al. 2020) on PyG's ``TGNMemory`` + ``LastNeighborLoader``: the memory baseline.

    Memory is reset at each epoch start and detached after each optimiser step; validation backs the state up,
    replays the training stream, and restores it afterwards; test replays train + val first. Training needs a
    chronological loader (``--data.init_args.shuffle=false``).

    Args:
        num_nodes: node-id space size (linked).
        dst_min: linked from the datamodule (unused).
        input_dim: edge-message size (linked from the datamodule's ``input_dim``).
        memory_dim: memory size (PyG recipe 100; the CPU reproduction 64).
        time_dim: time-encoding size.
        embedding_dim: graph-attention embedding size.
        num_neighbors: neighbours kept per node by the neighbour loader.
        lr: Adam learning rate (recipe 1e-4; reproduction 1e-3).
        weight_decay: Adam weight decay.
        ap_reduction: DyGLib AP/AUC reduction.
        pretrained: a local checkpoint or state dict to fine-tune from.
    """

    name: ClassVar[str] = "tgn"
    requires_chronological: ClassVar[bool] = True
    stateful: ClassVar[bool] = True

    def __init__(
        self,
        num_nodes: int | None = None,
        dst_min: int | None = None,
        input_dim: int | None = None,
        memory_dim: int = 100,
        time_dim: int = 100,
        embedding_dim: int = 100,
        num_neighbors: int = 10,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        ap_reduction: Literal["batch_mean", "global"] = "batch_mean",
        pretrained: str | None = None,
    ) -> None:
        checks.optional_integer(checks.model("input_dim"), input_dim)
        for key, value in (("memory_dim", memory_dim), ("time_dim", time_dim), ("embedding_dim", embedding_dim),
                           ("num_neighbors", num_neighbors)):  # fmt: skip
            checks.integer(checks.model(key), value)
        if embedding_dim % 2:
            checks.fail(checks.model("embedding_dim"), embedding_dim, "an even integer (2 heads of embedding_dim // 2)")
        self._dims = {
            "msg_dim": input_dim or 1, "memory_dim": memory_dim, "time_dim": time_dim,
            "embedding_dim": embedding_dim, "num_neighbors": num_neighbors,
        }  # fmt: skip
        self._backup: dict[str, Any] | None = None
        super().__init__(
            num_nodes=num_nodes, dst_min=dst_min, ap_reduction=ap_reduction, lr=lr, weight_decay=weight_decay,
            pretrained=pretrained,
        )  # fmt: skip

    def configure_models(self) -> None:
        """Build the PyG TGN recipe."""
        from zoo.craft.tgn import TGNNet

        self.model = TGNNet(self.num_nodes, **self._dims)

    def setup(self, stage: str) -> None:
        """Check the message size against the data."""
        super().setup(stage)
        width = self.datamodule.stream.msg.shape[1]
        if width != self._dims["msg_dim"]:
            raise ValueError(
                f"--model.init_args.input_dim={self._dims['msg_dim']} but the stream's messages have width {width}"
            )

    def on_train_epoch_start(self) -> None:
        """Fresh memory and neighbour buffers each epoch (PyG recipe)."""
        super().on_train_epoch_start()
        self.model.reset_state()

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """BCE-with-logits on the positive vs one random negative; then the batch enters the memory."""
        loss = self.model.train_loss(batch["src"], batch["dst"], batch["neg"], batch["t"], batch["msg"])
        return {"loss": loss}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Detach the memory after every optimiser step (truncated BPTT); the detach is in the batch's time."""
        self.model.detach_memory()
        super().on_train_batch_end(outputs, batch, batch_idx)

    @torch.no_grad()
    def _replay(self, splits: tuple[int, ...], batch_size: int = 200) -> None:
        self.model.reset_state()
        ev = self.events(splits)
        for start in range(0, int(ev["src"].shape[0]), batch_size):
            part = {k: v[start : start + batch_size] for k, v in ev.items()}
            self.model.observe(part["src"], part["dst"], part["t"], part["msg"])

    def on_validation_epoch_start(self) -> None:
        """Back up the training state (sanity check included) and replay the training stream."""
        self._backup = self.model.backup_state()
        self._replay((0,))
        super().on_validation_epoch_start()

    def on_validation_epoch_end(self) -> None:
        """Log metrics and restore the memory bit-identically."""
        super().on_validation_epoch_end()
        if self._backup is not None:
            self.model.restore_state(self._backup)
            self._backup = None

    def on_test_epoch_start(self) -> None:
        """Stream the training and validation edges into the state before testing."""
        self._replay((0, 1))
        super().on_test_epoch_start()

    on_predict_epoch_start = on_test_epoch_start

    def score(self, batch: dict[str, Tensor], src: Tensor, cand: Tensor, t: Tensor, split: Split) -> Tensor:
        """Batched logits: every node of the batch embedded once."""
        return self.model.score(src, cand, t)

    def observe(self, batch: dict[str, Tensor], split: Split) -> None:
        """Insert the true edges after scoring."""
        self.model.observe(batch["src"], batch["dst"], batch["t"], batch["msg"])
