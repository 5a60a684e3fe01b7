"""RawMed: multi-table time-series EHR generated from a residual-VQ latent space (NeurIPS 2025; card ``rawmed``).

The Lightning faces of ``zoo/rawmed/model.py`` on ``datamodules.ehr.datamodule.EHRDataModule``:

- :class:`RawMedRQVAE` (stage 1, ``stage: events``): the event residual-VQ autoencoder, CE on token ids + commitment,
  AdamW, validated by the input-token accuracy of reconstructed held-out events (``val/token_acc``, the monitor).
- :class:`RawMedAR` (stage 2, ``stage: stays``, the main job): the causal transformer over ``SOS (τ-digits, codes)…
  EOS``. Its ``pretrained`` is the stage-1 checkpoint, or the stage-1 recipe (``configs/rawmed/rqvae.yaml``) that
  ``zoo fit`` trains once and caches; the RQ-VAE is frozen. At the end of the fit it samples stays (KV-cached top-k),
  decodes and post-processes them into one CSV per table (``synthetic/`` in the run folder), writes the real splits
  beside them (``real/``), evaluates (``zoo.rawmed.metrics``) and writes ``metrics.json`` and ``report.md``.
- :class:`SyntheticBaseline` (``kind: marginal | copy``): the training-free baselines through the same writing and
  evaluation.

Generated-data metrics are logged once at the end (``gen/invalid_frac``: per event, the revision's gate;
``gen/stay_drop_rate``; ``eval/...``: every metric of the evaluator) to the loggers and printed by ``zoo fit``.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import Tensor

from zoo.core import checks
from zoo.core.config import run_dir
from zoo.core.datamodule import require
from zoo.core.messages import say
from zoo.core.module import ZooModule

# Stage 2 keeps the frozen RQ-VAE in eval mode on purpose; the baselines have no validation step.
warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")
warnings.filterwarnings("ignore", message=r"You passed in a `val_dataloader` but have no `validation_step`")

ReconLoss = Literal["ce", "mse_embed"]
CodeOrder = Literal["position_major", "depth_major"]
NonMonotone = Literal["drop", "sort"]
Kind = Literal["marginal", "copy"]
PARTS = ("fidelity", "temporal", "utility", "privacy", "predictive", "next_event")
#: The stage-1 hyperparameters stage 2 reads from the stage-1 checkpoint.
RQVAE_KEYS = ("vocab_size", "L", "F", "L_z", "F_z", "K", "D", "decay", "commitment_weight", "stochastic_temperature",
              "recon_loss", "ce_ignore_pad", "code_order")  # fmt: skip


def vocab_fingerprint(vocab: list[str]) -> Tensor:
    """Two int64 words of the SHA-256 of the vocabulary (a stage-1 checkpoint carries the one it was trained on)."""
    digest = hashlib.sha256("\n".join(vocab).encode()).digest()
    return torch.tensor([int.from_bytes(digest[i : i + 7], "little") for i in (0, 8)], dtype=torch.long)


def _vocab(tokenizer: Any) -> list[str]:
    state = tokenizer.state_dict()
    return list(state["vocab"]) if isinstance(state, dict) and "vocab" in state else list(state)


class RawMedRQVAE(ZooModule):
    """Stage 1: the event RQ-VAE (card "Stage 1"; CPU defaults L 64, F 64, L_z 4, F_z 64, K 256, D 2).

    Args:
        vocab_size: the tokenizer's vocabulary (linked from the data).
        L: tokens per event.
        F: embedding and convolution channels.
        L_z: latent positions per event.
        F_z: latent channels (codebook dimension).
        K: codebook size.
        D: residual depth (quantizers sharing the codebook; 1 is the VQ-only arm).
        decay: EMA decay of the codebook.
        commitment_weight: commitment loss weight.
        stochastic_temperature: code sampling temperature in training (eval takes the nearest code).
        recon_loss: ``ce`` (official, CE on ids) or ``mse_embed`` (a third-party note's MSE; reconstruction).
        ce_ignore_pad: leave pads out of the CEs (default: included, reconstruction).
        code_order: ``position_major`` (default) or ``depth_major``.
        lr: AdamW learning rate (card 5e-4).
        weight_decay: AdamW weight decay.
    """

    name: ClassVar[str] = "rawmed_rqvae"
    monitor: ClassVar[str] = "val/token_acc"
    mode: ClassVar[Literal["min", "max"]] = "max"

    def __init__(self, vocab_size: int = 64, L: int = 64, F: int = 64, L_z: int = 4, F_z: int = 64, K: int = 256,  # noqa: N803
                 D: int = 2, decay: float = 0.8, commitment_weight: float = 1.0, stochastic_temperature: float = 0.1,  # noqa: N803
                 recon_loss: ReconLoss = "ce", ce_ignore_pad: bool = False, code_order: CodeOrder = "position_major",
                 lr: float = 5e-4, weight_decay: float = 0.01) -> None:  # fmt: skip
        self.stage1 = {"vocab_size": vocab_size, "L": L, "F": F, "L_z": L_z, "F_z": F_z, "K": K, "D": D,
                       "decay": decay, "commitment_weight": commitment_weight,
                       "stochastic_temperature": stochastic_temperature, "recon_loss": recon_loss,
                       "ce_ignore_pad": ce_ignore_pad, "code_order": code_order}  # fmt: skip
        super().__init__(lr=lr, weight_decay=weight_decay)

    def configure_models(self) -> None:
        """The RQ-VAE, with the vocabulary fingerprint in a persistent buffer (stage 2 checks it)."""
        from zoo.rawmed.model import EventRQVAE

        self.model = EventRQVAE(**self.stage1)
        self.model.register_buffer("vocab_fingerprint", torch.zeros(2, dtype=torch.long))

    def setup(self, stage: str) -> None:
        """Record the data's vocabulary fingerprint (a checkpoint fine-tuned on another vocabulary stops here)."""
        datamodule = getattr(self.trainer, "datamodule", None)
        tokenizer = require(datamodule, "tokenizer", type(self).__name__)
        fingerprint = vocab_fingerprint(_vocab(tokenizer))
        stored = self.model.vocab_fingerprint
        if bool(stored.any()) and not torch.equal(stored, fingerprint):
            raise ValueError("the RQ-VAE was trained on another vocabulary than the data's tokenizer (same source, "
                             "n_stays, seed and max_events are needed)")  # fmt: skip
        self.model.vocab_fingerprint.copy_(fingerprint)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """CE(input) + CE(type) + CE(dpe) + commitment (``EventRQVAE.forward``)."""
        out = self.model(batch["input_ids"], batch["type_ids"], batch["dpe_ids"])
        return {k: out[k] for k in ("loss", "ce_input", "ce_type", "ce_dpe", "commit")}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Input-token accuracy of the reconstruction (non-pad positions; nearest codes) and the loss."""
        out = self.model(batch["input_ids"], batch["type_ids"], batch["dpe_ids"])
        ids = batch["input_ids"]
        keep = ids != 0
        acc = (out["logits_input"].argmax(-1) == ids)[keep].float().mean()
        self.log("val/token_acc", acc, batch_size=int(keep.sum()))
        self.log("val/loss", out["loss"], batch_size=ids.shape[0])

    def configure_optimizers(self) -> Any:
        """AdamW (card: lr 5e-4); the codebook moves by EMA, not by the optimizer."""
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)


class _Synthesizer(ZooModule):
    """The common end of every generator: write synthetic and real folders, evaluate, log once, write the report."""

    def _init_eval(self, n_generate: int | None, eval_parts: list[str] | None, nonmonotone: str, seed: int) -> None:
        checks.optional_integer(checks.model("n_generate"), n_generate)
        parts = list(PARTS) if eval_parts is None else list(eval_parts)
        for part in parts:
            checks.choice(checks.model("eval_parts"), part, PARTS)
        checks.choice(checks.model("nonmonotone"), nonmonotone, ("drop", "sort"))
        checks.integer(checks.model("seed"), seed, low=0)
        self.n_generate, self.eval_parts, self.nonmonotone, self.seed = n_generate, parts, nonmonotone, int(seed)
        #: What the end of the fit measured (primitives), also written to ``metrics.json``.
        self.evaluation: dict[str, float] = {}

    def generate(self) -> tuple[list[int], dict[str, Any], dict[str, float]]:
        """Synthetic stays, their tables (folder format) and generation counts (``gen/...``)."""
        raise NotImplementedError

    def n_to_generate(self) -> int:
        """``n_generate``, or as many stays as the train split (the card)."""
        return self.n_generate or len(self.trainer.datamodule.splits["train"])

    def on_train_end(self) -> None:
        """Generate, write ``synthetic/`` and ``real/{train,test,holdout}/``, evaluate, log and report."""
        if self._trainer is None or self.trainer.sanity_checking or getattr(self.trainer, "fast_dev_run", False):
            return
        from datamodules.ehr.folder import read_folder, write_folder
        from zoo.rawmed import metrics
        from zoo.rawmed.evaluate import write_report

        datamodule, folder = self.trainer.datamodule, Path(run_dir(self.trainer))
        stays, tables, gen = self.generate()
        write_folder(str(folder / "synthetic"), stays, tables)
        real = {s: read_folder(datamodule.write_split(s, str(folder / "real" / s)))
                for s in ("train", "test", "holdout")}  # fmt: skip
        synthetic = read_folder(str(folder / "synthetic"))
        found = metrics.evaluate(real["test"], synthetic, real_train=real["train"], holdout=real["holdout"],
                                 obs_hours=datamodule.obs_hours, parts=tuple(self.eval_parts),
                                 seed=self.seed)  # fmt: skip
        flat = {f"gen/{k}": float(v) for k, v in gen.items()}
        flat.update({f"eval/{k}": float(v) for k, v in found.items() if isinstance(v, int | float | np.floating)})
        self.evaluation = flat
        with open(folder / "metrics.json", "w", encoding="utf-8") as handle:
            json.dump({"generation": gen, "evaluation": found}, handle, indent=1, default=str)
        write_report(found, real["test"], synthetic, str(folder))
        for logger in self.loggers:
            logger.log_metrics(flat, step=self.trainer.global_step)
        self.trainer.callback_metrics.update({k: torch.tensor(v) for k, v in flat.items()})
        say(f"{type(self).__name__}: {len(stays)} synthetic stays in {folder / 'synthetic'}; metrics.json and "
            f"report.md beside it")  # fmt: skip


class RawMedAR(_Synthesizer):
    """Stage 2 and generation (card "Stage 2", "Sampling", "Post-processing"; the main job).

    Args:
        pretrained: the stage-1 checkpoint (a ``RawMedRQVAE`` run's ``.ckpt``) or its recipe
            (``configs/rawmed/rqvae.yaml``; ``zoo fit`` trains it once and caches it). Its hyperparameters build the
            frozen RQ-VAE.
        time_slots: time digits per event (linked from the data: 2 at 12 h; 0 with ``time_mode: in_text``).
        layers: transformer layers (official 12; CPU 4).
        d: width (official 256; CPU 128).
        heads: attention heads.
        ffn: feed-forward width (official 1024; CPU 512).
        dropout: dropout.
        norm_first: pre-LN (``true``) or post-LN (default, the official encoder layer).
        lr: AdamW learning rate (card 3e-4).
        top_k: sampling top-k (card 250 of K = 1024; 64 of K = 256 rescaled).
        temperature: sampling temperature.
        max_len: longest generated sequence (default: 2 + the data's ``max_events`` × tokens per event).
        gen_batch: stays sampled per batch.
        n_generate: stays to generate (default: as many as the train split).
        nonmonotone: ``drop`` (default) or ``sort`` a generated stay whose times decrease.
        eval_parts: evaluator parts (default all: fidelity, temporal, utility, privacy, predictive, next_event).
        seed: the sampling and evaluation seed.
        stage1: the stage-1 hyperparameters (default: read from ``pretrained``; a checkpoint of this module carries
            them, so it loads without the stage-1 file).
    """

    name: ClassVar[str] = "rawmed"
    monitor: ClassVar[str] = "val/nll"
    mode: ClassVar[Literal["min", "max"]] = "min"

    def __init__(self, pretrained: str | None = None, time_slots: int = 2, layers: int = 4, d: int = 128,
                 heads: int = 4, ffn: int = 512, dropout: float = 0.1, norm_first: bool = False, lr: float = 3e-4,
                 weight_decay: float = 0.01, top_k: int = 64, temperature: float = 1.0, max_len: int | None = None,
                 gen_batch: int = 64, n_generate: int | None = None, nonmonotone: NonMonotone = "drop",
                 eval_parts: list[str] | None = None, seed: int = 0,
                 stage1: dict[str, Any] | None = None) -> None:  # fmt: skip
        if pretrained is None and stage1 is None:
            checks.fail(checks.model("pretrained"), None,
                        "the stage-1 checkpoint or recipe (configs/rawmed/rqvae.yaml)")  # fmt: skip
        checks.integer(checks.model("time_slots"), time_slots, low=0)
        checks.integer(checks.model("top_k"), top_k)
        checks.positive(checks.model("temperature"), temperature)
        checks.optional_integer(checks.model("max_len"), max_len, low=2)
        checks.integer(checks.model("gen_batch"), gen_batch)
        self.stage1 = dict(stage1) if stage1 is not None else stage1_hparams(pretrained)
        self.time_slots, self.top_k, self.temperature = int(time_slots), int(top_k), float(temperature)
        self.max_len_option, self.gen_batch = max_len, int(gen_batch)
        self.arch = {"layers": layers, "d": d, "heads": heads, "ffn": ffn, "dropout": dropout, "norm_first": norm_first}
        self._init_eval(n_generate, eval_parts, nonmonotone, seed)
        super().__init__(lr=lr, weight_decay=weight_decay, pretrained=pretrained)
        self.hparams["stage1"] = dict(self.stage1)  # a checkpoint of this module rebuilds without the stage-1 source
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.sequences: dict[str, Tensor] = {}

    def configure_models(self) -> None:
        """``self.model``: the frozen RQ-VAE (``pretrained`` fills it); ``self.ar``: the transformer."""
        from zoo.rawmed.model import EventAR, EventRQVAE

        self.model = EventRQVAE(**self.stage1)
        self.model.register_buffer("vocab_fingerprint", torch.zeros(2, dtype=torch.long))
        codes = self.stage1["L_z"] * self.stage1["D"]
        self.ar = EventAR(self.stage1["K"], self.time_slots, codes, max_len=4096, **self.arch)

    def train(self, mode: bool = True) -> RawMedAR:
        """The frozen RQ-VAE stays in eval mode (BatchNorm statistics and nearest codes)."""
        super().train(mode)
        self.model.eval()
        return self

    def setup(self, stage: str) -> None:
        """Check the vocabulary, encode every train/val event once, and build the stays' token sequences."""
        datamodule = getattr(self.trainer, "datamodule", None)
        tokenizer = require(datamodule, "tokenizer", type(self).__name__)
        if not torch.equal(self.model.vocab_fingerprint, vocab_fingerprint(_vocab(tokenizer))):
            raise ValueError(
                f"{checks.model('pretrained')}: the RQ-VAE was trained on another vocabulary than this "
                "data's tokenizer (train it on the same source, n_stays, seed and max_events)"
            )
        if self.time_slots != datamodule.time_slots:
            raise ValueError(f"{checks.model('time_slots')}={self.time_slots} but the data has "
                             f"{datamodule.time_slots} time digits per event (link it from the data)")  # fmt: skip
        max_events = int(datamodule.max_events_cap)
        self.max_len = self.max_len_option or 2 + max_events * self.ar.event_len
        if self.max_len > self.ar.max_len:
            raise ValueError(f"{checks.model('max_len')}: {self.max_len} tokens per stay exceed the model's 4096")
        self.sequences = {split: self.encode_split(datamodule, split) for split in ("train", "val")}

    @torch.no_grad()
    def encode_split(self, datamodule: Any, split: str) -> Tensor:
        """The split's stays as ``SOS (τ-digits, codes)… EOS PAD…`` rows (``max_len`` tokens)."""
        from datamodules.ehr.serialize import time_digits

        tensors = datamodule.event_tensors(split)
        self.model.eval()
        chunks = [self.model.encode(*(tensors[k][i : i + 4096] for k in ("input_ids", "type_ids", "dpe_ids")))
                  for i in range(0, len(tensors["input_ids"]), 4096)]  # fmt: skip
        codes = torch.cat(chunks) if chunks else torch.zeros(0, self.ar.codes_per_event, dtype=torch.long)
        stay, minutes = tensors["stay"].tolist(), tensors["time"].tolist()
        position = {s: i for i, s in enumerate(datamodule.splits[split])}
        stays: list[list[tuple[list[int], list[int]]]] = [[] for _ in position]
        for row, (s, t) in enumerate(zip(stay, minutes, strict=True)):
            digits = time_digits(int(t), datamodule.obs_hours) if self.time_slots else []
            stays[position[s]].append((digits, codes[row].tolist()))
        return self.ar.join_events(stays, self.max_len)

    def _batch_tokens(self, batch: dict[str, Tensor], split: str) -> Tensor:
        tokens = self.sequences[split][batch["stay"].cpu()].to(self.device)
        used = int((tokens != self.ar.PAD).sum(1).max()) + 1
        return tokens[:, : min(used, tokens.shape[1])]

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Next-token NLL on the non-PAD targets of the batch's stays."""
        return {"loss": self.ar.loss(self._batch_tokens(batch, "train"))}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """``val/nll`` of held-out stays (the monitor)."""
        self.log("val/nll", self.ar.loss(self._batch_tokens(batch, "val")), batch_size=len(batch["stay"]))

    def configure_optimizers(self) -> Any:
        """AdamW over the transformer (card: lr 3e-4)."""
        return torch.optim.AdamW(self.ar.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    @torch.no_grad()
    def generate(self) -> tuple[list[int], dict[str, Any], dict[str, float]]:
        """Sample stays (KV cache, per-slot masks), decode their codes to text, post-process into tables."""
        from datamodules.ehr.serialize import digits_time
        from zoo.rawmed.baselines import SYNTHETIC_STAY0
        from zoo.rawmed.postprocess import postprocess

        tokenizer = self.trainer.datamodule.tokenizer
        gen = torch.Generator().manual_seed(self.seed)
        n = self.n_to_generate()
        events: list[list[tuple[int | None, list[str]]]] = []
        layout_errors = 0
        for start in range(0, n, self.gen_batch):
            rows = self.ar.sample(min(self.gen_batch, n - start), self.max_len, self.top_k, self.temperature, gen)
            for row in rows:
                try:
                    (stay,) = self.ar.split_events(row.unsqueeze(0))
                except ValueError:  # a stay cut by max_len inside an event
                    layout_errors += 1
                    events.append([(None, ["[UNK]"])])
                    continue
                if not stay:
                    events.append([])
                    continue
                codes = torch.tensor([c for _, c in stay], dtype=torch.long, device=self.device)
                input_ids, _, _ = self.model.decode(codes)
                texts = [tokenizer.decode(ids) for ids in input_ids.cpu()]
                events.append([(digits_time(d) if self.time_slots else None, text)
                               for (d, _), text in zip(stay, texts, strict=True)])  # fmt: skip
        ids = [SYNTHETIC_STAY0 + i for i in range(n)]
        window = self.trainer.datamodule.obs_hours * 60
        kept, tables, stats = postprocess(events, ids, self.nonmonotone, window)
        return kept, tables, {**stats.as_dict(), "layout_errors": float(layout_errors), "requested": float(n)}


def stage1_hparams(source: str) -> dict[str, Any]:
    """The stage-1 hyperparameters in a ``RawMedRQVAE`` checkpoint (or a trained recipe's cached one)."""
    from zoo.core.pretrained import find_source, is_recipe, recipe_cache_path

    path = recipe_cache_path(source) if is_recipe(source) else find_source(source)
    if not Path(path).exists():
        raise FileNotFoundError(f"{checks.model('pretrained')}={source!r}: no such checkpoint" + (
            " (a recipe is trained by `zoo fit` before the module is built)" if is_recipe(source) else ""))  # fmt: skip
    blob = torch.load(path, map_location="cpu", weights_only=True)
    hparams = blob.get("hyper_parameters", {}) if isinstance(blob, dict) else {}
    missing = [k for k in RQVAE_KEYS if k not in hparams]
    if missing:
        raise ValueError(f"{checks.model('pretrained')}={source!r}: not a RawMedRQVAE checkpoint (no "
                         f"{', '.join(missing[:3])} in its hyperparameters)")  # fmt: skip
    return {k: hparams[k] for k in RQVAE_KEYS}


class SyntheticBaseline(_Synthesizer):
    """The training-free baselines (card, Baselines): ``marginal`` (independent per-column marginals) or ``copy``.

    Args:
        kind: ``marginal`` or ``copy`` (the train stays verbatim: the fidelity ceiling, the MIA sanity case).
        n_generate: stays to generate (default: as many as the train split; ``copy`` always copies the train split).
        eval_parts: evaluator parts (default all).
        seed: the draw's and the evaluation's seed.
    """

    name: ClassVar[str] = "rawmed_baseline"
    monitor: ClassVar[str] = "train/loss"
    trainable: ClassVar[bool] = False

    def __init__(self, kind: Kind = "marginal", n_generate: int | None = None, eval_parts: list[str] | None = None,
                 seed: int = 0) -> None:  # fmt: skip
        checks.choice(checks.model("kind"), kind, ("marginal", "copy"))
        self.kind = kind
        self._init_eval(n_generate, eval_parts, "drop", seed)
        super().__init__()
        self.automatic_optimization = False

    def configure_models(self) -> None:
        """No network."""
        self.model = torch.nn.Module()

    def compute_loss(self, batch: Any) -> None:
        """Nothing to train."""
        return None

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """One counted step; the work happens at the end of the fit."""
        self.log("train/loss", 0.0, batch_size=1)
        self.count_step()
        self.trainer.should_stop = True

    def generate(self) -> tuple[list[int], dict[str, Any], dict[str, float]]:
        """The marginal draw or the copy of the train split."""
        from datamodules.ehr.folder import read_folder
        from zoo.rawmed.baselines import copy_tables, marginal_tables

        datamodule = self.trainer.datamodule
        folder = Path(run_dir(self.trainer)) / "real" / "train"
        stays, tables = read_folder(datamodule.write_split("train", str(folder)))
        if self.kind == "copy":
            kept, out = copy_tables(stays, tables)
        else:
            kept, out = marginal_tables(stays, tables, self.n_to_generate(), self.seed)
        return kept, out, {"stays": float(len(kept)), "invalid_frac": 0.0, "stay_drop_rate": 0.0}
