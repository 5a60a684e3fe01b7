"""The RawMed datamodule: a cohort of ICU stays served as serialized events (stage 1) or as stays (stage 2).

Everything is built in ``__init__`` (the CLI links ``vocab_size`` into the models before ``setup``): the cohort (the
seeded ``mimic_like_icu`` files, written once under ``$ZOO_CACHE/rawmed/`` and re-read, or a MIMIC-IV ``root``), the
seeded split by stay, the ``p95`` event cap and the word-level tokenizer, both fitted on the train split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.ehr.cohort import EHRCohort
from datamodules.ehr.folder import write_folder
from datamodules.ehr.mimic import load_mimiciv
from datamodules.ehr.serialize import EventTokenizer, encode_frame, frame_tokens, time_len
from datamodules.ehr.synthetic import mimic_like_icu
from datamodules.ehr.tables import TABLES
from zoo.core import checks
from zoo.core.cache import cache_dir
from zoo.core.datamodule import SplitLoaders, ZooDataModule
from zoo.core.messages import say

SPLIT_NAMES = ("train", "val", "test", "holdout")


class _Batches(Dataset):
    """Rows of a dict of equally long tensors, fetched a batch at a time (``__getitems__``)."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors
        self.n = len(next(iter(tensors.values())))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i] for k, v in self.tensors.items()}

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return {k: v[idx] for k, v in self.tensors.items()}


def _as_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return batch


class EHRDataModule(SplitLoaders, ZooDataModule):
    """Multi-table ICU events (labevents, prescriptions, inputevents) of the first ``obs_hours`` of each stay.

    Args:
        source: ``mimic_like_icu`` (the card's seeded generator, written in MIMIC-IV format and read back through the
            real loader) or ``mimiciv`` (a MIMIC-IV folder at ``root``; nothing is downloaded).
        root: the MIMIC-IV folder (``source: mimiciv``); with ``mimic_like_icu``, where to write the generated
            files (default ``$ZOO_CACHE/rawmed/mimic_like_icu-<n_stays>-<obs_hours>-<seed>``).
        n_stays: stays of ``mimic_like_icu``.
        obs_hours: observation window after ``intime`` (6, 12 or 24 in the paper).
        max_events: events kept per stay (the earliest): an int, or ``p95`` (95th percentile of the train counts).
        L: tokens per event (``[CLS]`` and ``[SEP]`` included); longer events are truncated before ``[SEP]``, said
            once with their count.
        time_mode: ``separate`` (time digits live in the AR sequence) or ``in_text`` (each event's text carries
            ``time <digits>``; the AR model then has ``time_len = 0``).
        stage: ``events`` serves event batches (the RQ-VAE); ``stays`` serves batches of stay positions (the AR
            model, which holds the code sequences).
        batch_size: events per batch (``events``) or stays per batch (``stays``).
        seed: generator, split and shuffle seed.
        non_numeric: ``source: mimiciv`` only: text in a numeric column (MIMIC-IV's ``dose_val_rx`` holds ranges
            such as ``1-2``) raises (``error``) or is read as null with a count said once (``null``).
    """

    def __init__(
        self, source: Literal["mimic_like_icu", "mimiciv"] = "mimic_like_icu", root: str | None = None,
        n_stays: int = 1500, obs_hours: int = 12, max_events: int | str = 64, L: int = 64,  # noqa: N803
        time_mode: Literal["separate", "in_text"] = "separate", stage: Literal["events", "stays"] = "events",
        batch_size: int = 4096, seed: int = 0, non_numeric: Literal["error", "null"] = "error",
    ) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters()
        checks.choice(checks.data("source"), source, ("mimic_like_icu", "mimiciv"))
        checks.integer(checks.data("n_stays"), n_stays, low=20)
        checks.integer(checks.data("obs_hours"), obs_hours, low=1, high=168)
        if max_events != "p95":
            if isinstance(max_events, str):
                checks.fail(checks.data("max_events"), max_events, "an integer >= 1 or 'p95'")
            checks.integer(checks.data("max_events"), max_events)
        checks.integer(checks.data("L"), L, low=4)
        checks.choice(checks.data("time_mode"), time_mode, ("separate", "in_text"))
        checks.choice(checks.data("stage"), stage, ("events", "stays"))
        checks.integer(checks.data("batch_size"), batch_size)
        checks.integer(checks.data("seed"), seed, low=0)
        checks.choice(checks.data("non_numeric"), non_numeric, ("error", "null"))
        if source == "mimiciv" and root is None:
            checks.fail(checks.data("root"), root, "the MIMIC-IV folder (icu/ and hosp/) with source='mimiciv'")
        self.source, self.L, self.time_mode, self.stage = source, L, time_mode, stage
        self.batch_size, self.seed = batch_size, seed
        #: observation window in hours.
        self.obs_hours: int = obs_hours
        #: the MIMIC-IV folder read (for ``mimic_like_icu``, where the generated files are).
        self.root: str = root or str(cache_dir("rawmed", f"mimic_like_icu-{n_stays}-{obs_hours}-{seed}"))
        if source == "mimic_like_icu":
            cohort = mimic_like_icu(self.root, n_stays, obs_hours, max_events, seed)
        else:
            cohort = load_mimiciv(self.root, obs_hours, max_events, split_seed=seed, non_numeric=non_numeric)
        #: the cohort (``max_events`` applied).
        self.cohort: EHRCohort = cohort
        #: stay ids per split (train 60 / val 10 / test 15 / holdout 15, seeded by ``seed``).
        self.splits: dict[str, list[int]] = cohort.split(seed)
        #: digits of an event's time in the AR sequence (0 with ``time_mode: in_text``).
        self.time_len: int = time_len(obs_hours) if time_mode == "separate" else 0
        self._events: dict[str, Any] = {}
        #: the word-level vocabulary fitted on the train events.
        self.tokenizer: EventTokenizer = EventTokenizer().fit(frame_tokens(self._split_events("train"), self._obs()))
        #: vocabulary size, linked into the models.
        self.vocab_size: int | None = len(self.tokenizer)
        #: time digits per event in the AR sequence, linked into ``RawMedAR.time_slots`` (= ``time_len``).
        self.time_slots: int = self.time_len
        #: the per-stay event cap in effect (the longest stay when the cohort is uncapped): sizes the AR sequences.
        self.max_events_cap: int = int(cohort.max_events or max(int(cohort.counts().max()), 1))

    def _obs(self) -> int | None:
        return self.obs_hours if self.time_mode == "in_text" else None

    def _split_events(self, split: str) -> Any:
        if split not in self._events:
            self._events[split] = self.cohort.subset(self.splits[split]).events()
        return self._events[split]

    def event_tensors(self, split: str) -> dict[str, torch.Tensor]:
        """The split's events in the AR sequence order of ``cohort.events()``.

        Returns:
            ``input_ids``, ``type_ids``, ``dpe_ids`` (LongTensor (N, L)); ``stay`` (N,) stay_id; ``time`` (N,)
            minutes since ``intime`` (not floored); ``table`` (N,) index into ``TABLES``.
        """
        checks.choice("split", split, SPLIT_NAMES)
        key = f"tensors-{split}"
        if key not in self._events:
            events = self._split_events(split)
            ids, types, dpe, truncated = encode_frame(self.tokenizer, events, self.L, self._obs())
            if truncated:
                say(f"rawmed data: {truncated} of {len(events)} {split} event(s) longer than L={self.L} tokens were "
                    "truncated before [SEP]")  # fmt: skip
            order = {t: k for k, t in enumerate(TABLES)}
            table = np.asarray([order[t] for t in events["table"].to_numpy()], dtype=np.int64)
            self._events[key] = {
                "input_ids": ids, "type_ids": types, "dpe_ids": dpe,
                "stay": torch.tensor(events["stay_id"].to_numpy(np.int64)),
                "time": torch.tensor(events["time"].to_numpy(np.int64)),
                "table": torch.as_tensor(table),
            }  # fmt: skip
        return dict(self._events[key])

    def write_split(self, split: str, path: str) -> str:
        """Write the split as an event-table folder (times floored to 10 min); returns ``path``."""
        checks.choice("split", split, SPLIT_NAMES)
        part = self.cohort.subset(self.splits[split])
        tables = {t: f.assign(time=10 * (f["time"] // 10)) for t, f in part.tables.items()}
        write_folder(path, self.splits[split], tables)
        return str(Path(path))

    def _loader(self, split: str) -> DataLoader:
        if self.stage == "events":
            tensors = self.event_tensors(split)
            data = _Batches({k: tensors[k] for k in ("input_ids", "type_ids", "dpe_ids")})
        else:
            data = _Batches({"stay": torch.arange(len(self.splits[split]), dtype=torch.long)})
        sampler = self._train_sampler(len(data), self.seed, self.batch_size) if split == "train" else None
        return DataLoader(data, batch_size=self.batch_size, sampler=sampler, shuffle=False, collate_fn=_as_batch,
                          num_workers=0)  # fmt: skip
