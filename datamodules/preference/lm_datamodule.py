"""Token-level preference pairs for the card's tiny-LM path of ``xrlhf``: the rendered synthetic world or jsonl files.

Sources:

- ``world`` (default): ``zoo.xrlhf.world.make_world(seed, n_train, n_test)`` rendered into token strings by
  ``zoo.xrlhf.lm.render_world`` (same pairs, winners and planted corruption; the evaluation reward is the gold ``r*``;
  the few pairs whose two responses render to one text are left out, ``n_identical_dropped``).
- ``jsonl``: ``path`` is a training preference jsonl read by ``datamodules.preference.readers.read_preference_jsonl``
  (one object per line with string ``prompt``, ``chosen``, ``rejected``; the HH-RLHF layout; an optional boolean
  ``corrupted`` on every line is kept as ground truth), and ``test_path`` a test jsonl with one object per line:

  - ``prompt``: str;
  - ``responses``: list of M str, the candidate set of the policy (the same M on every line);
  - ``sft_logits``: list of M floats, the SFT policy's logits over the candidates;
  - ``r_eval``: list of M floats, the evaluation reward of each candidate.

  ``{"prompt": "Human: hi Assistant:", "responses": ["hello", "go away"], "sft_logits": [0.1, 0.3],
  "r_eval": [1.0, -2.0]}``. Errors name the file, the line, the key, and what was expected and found.

Sequences are ``prompt <sep> response <eos>`` with the corpus's word vocabulary (``zoo.xrlhf.lm.WordVocab``, built in
``__init__`` so ``vocab_size`` can be linked into the model). Training batches are token pairs ``{"chosen_ids",
"chosen_mask", "rejected_ids", "rejected_mask"}`` (right-padded, trimmed per batch).

The forget set needs the original RM's features, so it is built by ``attach_original(module)``, which
``callbacks.unlearning.UnlearningCallback`` calls once the original weights are in place: ``Δφ`` of every training
pair, ``φ`` of every test candidate, the RLHF response ``argmax_y [s + r̂/β]``, the unsatisfactory split
``r_eval(y_rl) < r_eval(y_sft)``; then the module's ``select_forget`` (``--model.init_args.selector``) explains each
unsatisfactory item, and the union is the forget set. ``--data.init_args.selector`` (and ``k_cand``, ``tau``,
``pca_dim``) are deprecated aliases, forwarded to the module.
Phases: ``original`` (every pair; works before ``attach_original``), ``retrain`` (the retained pairs) and ``unlearn``
(``{"forget": pairs, "retain": pairs}``, one retain epoch per epoch, each retain batch with a fresh forget batch).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch.utilities import CombinedLoader
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, RandomSampler

from datamodules.common.phases import Phase, PhasedDataModule, batched_loader
from datamodules.preference.feature_datamodule import (
    SELECTION_ARGS,
    ForgetSelector,
    check_selection_args,
    deprecated_selection,
    empty_forget_message,
    explanation_stats,
    per_item,
    planted_recall,
)
from datamodules.preference.readers import read_candidate_jsonl, read_corrupted_flags
from zoo.core import checks
from zoo.core.messages import say
from zoo.core.protocols import check

Selector = Literal["convex", "knn", "knn_union", "random", "tracin", "planted", "random_set"]
SELECTORS = ("convex", "knn", "knn_union", "random", "tracin", "planted", "random_set")
Target = Literal["phi", "phi_minus_sft"]


class _Pairs(Dataset):
    """Pair tensors indexed by a list of rows (``batched_loader`` hands whole index batches)."""

    def __init__(self, tensors: dict[str, Tensor], rows: np.ndarray | None = None) -> None:
        self.tensors = tensors
        n = len(next(iter(tensors.values())))
        self.rows = torch.as_tensor(np.arange(n) if rows is None else rows, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: list[int]) -> dict[str, Tensor]:
        from zoo.xrlhf.lm import trim

        rows = self.rows[torch.as_tensor(index, dtype=torch.long)]
        out = {}
        for side in ("chosen", "rejected"):
            ids, mask = trim(self.tensors[f"{side}_ids"][rows], self.tensors[f"{side}_mask"][rows])
            out[f"{side}_ids"], out[f"{side}_mask"] = ids, mask
        return out


class PreferenceLMDataModule(PhasedDataModule):
    """Token preference pairs, test candidates and (after ``attach_original``) the explained forget set.

    Args:
        source: ``world`` (the card's synthetic world rendered as tokens) or ``jsonl`` (``path`` and ``test_path``).
        path: training preference jsonl (``prompt``, ``chosen``, ``rejected``; ``source=jsonl``; with ``world`` it and
            ``test_path`` are an error, as the world would ignore them).
        test_path: test jsonl (``prompt``, ``responses``, ``sft_logits``, ``r_eval``; ``source=jsonl``).
        seed: seed of the world, the random selectors and the unlearning shuffles.
        n_train: training prompts (one comparison each) of the world.
        n_test: test prompts of the world.
        selector: deprecated, use ``--model.init_args.selector`` (given: forwarded to the module).
        k_cand: deprecated, use ``--model.init_args.k_cand`` (given: forwarded to the module).
        tau: deprecated, use ``--model.init_args.tau`` (given: forwarded to the module).
        target: ``phi`` (``φ̄ = φ(x̄, ȳ)``) or ``phi_minus_sft`` (``φ(x̄, ȳ) − φ(x̄, y_sft)``).
        center: centre every test prompt's candidate features over its M candidates before explaining (the world's
            convention, without loss of generality: BT and the policy ignore per-prompt shifts); a raw GPT-2 state
            carries a large common component that no convex combination of differences ``Δφ`` can reach.
        pca_dim: deprecated, use ``--model.init_args.pca_dim`` (given: forwarded to the module).
        beta: KL coefficient of the RLHF policy ``argmax_y [s + r̂/β]``.
        max_items: explain only the first N unsatisfactory items (None: all); the win rates still cover every prompt.
        max_length: sequences keep their last ``max_length`` tokens (the run says how many were cut; a pair whose two
            kept tails are equal is an error).
        batch_size: training batch size (retain batches in the ``unlearn`` phase).
        forget_batch_size: forget batch size in the ``unlearn`` phase.
        eval_batch_size: rows per forward when scoring features and rewards.
        phase: which training set ``train_dataloader`` serves.
    """

    def __init__(self, source: Literal["world", "jsonl"] = "world", path: str | None = None,
                 test_path: str | None = None, seed: int = 0, n_train: int = 600, n_test: int = 200,
                 selector: Selector | None = None, k_cand: int | None = None, tau: float | None = None,
                 target: Target = "phi",
                 center: bool = True, pca_dim: int | None = None, beta: float = 0.1, max_items: int | None = None,
                 max_length: int = 64, batch_size: int = 32, forget_batch_size: int = 32, eval_batch_size: int = 512,
                 phase: Phase = "unlearn") -> None:  # fmt: skip
        super().__init__()
        checks.choice(checks.data("source"), source, ("world", "jsonl"))
        if source == "jsonl" and (path is None or test_path is None):
            raise ValueError("--data.init_args.source=jsonl needs --data.init_args.path=<train.jsonl> and "
                             "--data.init_args.test_path=<test.jsonl>")  # fmt: skip
        if source == "world":  # the rendered world would ignore a given file
            for name, value in (("path", path), ("test_path", test_path)):
                if value is not None:
                    checks.fail(checks.data(name), value, "null for source=world (set --data.init_args.source=jsonl)")
        check_selection_args(selector, k_cand, tau, pca_dim)
        checks.choice(checks.data("target"), target, ("phi", "phi_minus_sft"))
        checks.choice(checks.data("phase"), phase, ("original", "retrain", "unlearn"))
        checks.integer(checks.data("seed"), seed, 0)
        checks.positive(checks.data("beta"), beta)
        for name, value in (("n_train", n_train), ("n_test", n_test), ("batch_size", batch_size),
                            ("forget_batch_size", forget_batch_size),
                            ("eval_batch_size", eval_batch_size)):  # fmt: skip
            checks.integer(checks.data(name), value)
        checks.optional_integer(checks.data("max_items"), max_items)
        checks.integer(checks.data("max_length"), max_length, 3)  # a token of prompt, <sep> and <eos> at least
        # The deprecated selection arguments belong to the module (forwarded into its hparams at attach_original):
        # kept out of these hparams, which Lightning merges with the module's for the loggers.
        self.save_hyperparameters(ignore=list(SELECTION_ARGS))
        self.source, self.path, self.test_path, self.seed = source, path, test_path, seed
        self.selection = deprecated_selection(
            "PreferenceLMDataModule", {"selector": selector, "k_cand": k_cand, "tau": tau, "pca_dim": pca_dim}
        )
        #: The selector that built the forget set (the module's, or the deprecated data argument), once attached.
        self.selector: str | None = selector
        self.phase, self.beta, self.max_length = phase, beta, max_length
        self.batch_size, self.forget_batch_size, self.eval_batch_size = batch_size, forget_batch_size, eval_batch_size
        from zoo.xrlhf.lm import WordVocab

        self.n_identical_dropped = 0
        self.texts = self._load()
        if self.selector == "planted" and self.texts.corrupted is None:
            raise ValueError(f"--data.init_args.selector=planted needs the planted ground truth ('corrupted' in "
                             f"{self.path})")  # fmt: skip
        self.vocab = WordVocab.from_texts(self.texts.corpus())
        self.vocab_size = self.vocab.vocab_size
        self.attached = False
        self._tensors: dict[str, Tensor] | None = None

    def _load(self) -> Any:
        """The preference texts of the ``source``."""
        from zoo.xrlhf.lm import PreferenceTexts, render_world

        if self.source == "world":
            from zoo.xrlhf.world import make_world

            texts = render_world(make_world(self.seed, n_train=self.hparams.n_train, n_test=self.hparams.n_test))
            # Bucketized rendering gives two candidates one text now and then (10 of 600 pairs at seed 0): such a pair
            # has Δφ = 0 and cannot be oriented (the jsonl reader rejects it), so the rendered world leaves it out.
            keep = [i for i, (c, r) in enumerate(zip(texts.chosen, texts.rejected, strict=True)) if c != r]
            self.n_identical_dropped = len(texts.chosen) - len(keep)
            if self.n_identical_dropped:
                say(f"PreferenceLMDataModule: {self.n_identical_dropped} of {len(texts.chosen)} rendered world pairs "
                    "left out (chosen and rejected render to one text)")  # fmt: skip
            texts.prompts = [texts.prompts[i] for i in keep]
            texts.chosen = [texts.chosen[i] for i in keep]
            texts.rejected = [texts.rejected[i] for i in keep]
            texts.corrupted = texts.corrupted[keep]
            return texts
        from datamodules.preference.readers import read_preference_jsonl

        records = read_preference_jsonl(self.path)
        test = read_candidate_jsonl(self.test_path)
        return PreferenceTexts(prompts=[r["prompt"] for r in records], chosen=[r["chosen"] for r in records],
                               rejected=[r["rejected"] for r in records], corrupted=read_corrupted_flags(self.path),
                               test_prompts=test["prompts"], test_responses=test["responses"],
                               sft_logits=test["sft_logits"], r_eval=test["r_eval"])  # fmt: skip

    # -- data ----------------------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Tokenize the pairs and the test candidates (once)."""
        if self._tensors is not None:
            return
        from zoo.core.lm import pad_batch
        from zoo.xrlhf.lm import PAD_ID

        t, n = self.texts, self.max_length
        chosen_ids = self._encode(t.prompts, t.chosen, "training chosen")
        rejected_ids = self._encode(t.prompts, t.rejected, "training rejected")
        for i, (c, r) in enumerate(zip(chosen_ids, rejected_ids, strict=True)):
            if c == r:  # different texts whose kept tails are equal: Δφ = 0, the comparison is gone
                where = f"{self.path}: pair {i}" if self.path else f"rendered world pair {i}"
                raise ValueError(f"{where}: chosen and rejected are equal once cut to --data.init_args.max_length={n} "
                                 "tokens; raise it")  # fmt: skip
        prompts = [p for p, ys in zip(t.test_prompts, t.test_responses, strict=True) for _ in ys]
        responses = [y for ys in t.test_responses for y in ys]
        chosen, rejected = pad_batch(chosen_ids, PAD_ID), pad_batch(rejected_ids, PAD_ID)
        test = pad_batch(self._encode(prompts, responses, "test candidate"), PAD_ID)
        self._tensors = {"chosen_ids": chosen[0], "chosen_mask": chosen[1], "rejected_ids": rejected[0],
                         "rejected_mask": rejected[1], "test_ids": test[0], "test_mask": test[1]}  # fmt: skip
        self.sft_logits, self.r_eval = t.sft_logits, t.r_eval
        self.corrupted = t.corrupted
        self.sft = self.sft_logits.argmax(axis=1)

    def _encode(self, prompts: list[str], responses: list[str], what: str) -> list[list[int]]:
        """``prompt <sep> response <eos>`` ids, each keeping its last ``max_length``; the run says how many were cut."""
        n = self.max_length
        full = [self.vocab.encode_pair(p, y, 10**9) for p, y in zip(prompts, responses, strict=True)]
        if cut := sum(len(ids) > n for ids in full):
            say(f"PreferenceLMDataModule: {cut} of {len(full)} {what} sequences cut to their last "
                f"--data.init_args.max_length={n} tokens (the longest has {max(map(len, full))})")  # fmt: skip
        return [ids[-n:] for ids in full]

    @property
    def has_ground_truth(self) -> bool:
        """Whether the training pairs carry the planted ``corrupted`` flags (the world does; a file may)."""
        return self.texts.corrupted is not None

    @property
    def n_pairs(self) -> int:
        """Number of training comparisons."""
        return len(self.texts.prompts)

    @property
    def test_ids(self) -> Tensor:
        """``(m·M, T)`` token ids of every test candidate, prompt-major."""
        self.setup()
        return self._tensors["test_ids"]

    @property
    def test_mask(self) -> Tensor:
        """The attention mask of :attr:`test_ids`."""
        self.setup()
        return self._tensors["test_mask"]

    def pair_dataset(self, rows: np.ndarray | None = None) -> _Pairs:
        """The training pairs (or the ``rows`` among them) as a dataset of index batches."""
        self.setup()
        keys = ("chosen_ids", "chosen_mask", "rejected_ids", "rejected_mask")
        return _Pairs({k: self._tensors[k] for k in keys}, rows)

    # -- the original RM defines the forget set ------------------------------------------------------------------------
    def attach_original(self, module: Any) -> None:
        """Compute the original RM's features, ask the module to explain its unsatisfactory responses, split the pairs.

        Args:
            module: the module holding the original RM as ``module.model`` (a ``zoo.xrlhf.lm.GPT2RewardModel``) and
                the selector (``select_forget``).
        """
        from zoo.xrlhf.lm import score

        check(module, ForgetSelector, "PreferenceLMDataModule.attach_original", "module")
        self.setup()
        model, tensors, bs = module.model, self._tensors, self.eval_batch_size
        phi_c, _ = score(model, tensors["chosen_ids"], tensors["chosen_mask"], bs)
        phi_r, _ = score(model, tensors["rejected_ids"], tensors["rejected_mask"], bs)
        phi_t, r_t = score(model, tensors["test_ids"], tensors["test_mask"], bs)
        m, width = self.sft_logits.shape
        self.delta_phi = (phi_c - phi_r).double().numpy()  # winner − loser
        self.test_phi = phi_t.double().numpy().reshape(m, width, -1)
        self.rewards_original = r_t.double().numpy().reshape(m, width)
        self.theta_original = model.theta.detach().cpu().double().numpy()
        self.rl_logits = self.sft_logits + self.rewards_original / self.beta
        self.rl = self.rl_logits.argmax(axis=1)
        rows = np.arange(m)
        self.unsatisfactory = self.r_eval[rows, self.rl] < self.r_eval[rows, self.sft]
        self.items = np.flatnonzero(self.unsatisfactory)[: self.hparams.max_items]
        phi = self.test_phi - self.test_phi.mean(axis=1, keepdims=True) if self.hparams.center else self.test_phi
        self.targets = phi[self.items, self.rl[self.items]]
        if self.hparams.target == "phi_minus_sft":
            self.targets = self.targets - phi[self.items, self.sft[self.items]]
        self.explanations, self.forget_idx = module.select_forget(self, **self.selection)
        self.selector = module.selector
        self.retain_mask = np.ones(self.n_pairs, dtype=bool)
        self.retain_mask[self.forget_idx] = False
        self.attached = True

    def _require_attached(self, what: str) -> None:
        if not self.attached:
            raise RuntimeError(f"PreferenceLMDataModule: {what} needs the forget set, which the original RM defines; "
                               f"call attach_original(module) first (UnlearningCallback does)")  # fmt: skip

    # -- loaders -------------------------------------------------------------------------------------------------------
    def train_dataloader(self) -> Any:
        """The ``phase``'s pairs (see the module docstring)."""
        if self.phase == "original":
            return batched_loader(self.pair_dataset(), self.batch_size, shuffle=True)
        self._require_attached(f"phase={self.phase}")
        if self.phase == "retrain":
            return self.retain_dataloader()
        if len(self.forget_idx) == 0:
            raise ValueError(empty_forget_message("PreferenceLMDataModule", self.explanations))
        retain = self.retain_dataloader()
        forget = self.pair_dataset(self.forget_idx)
        sampler = RandomSampler(forget, replacement=False, num_samples=len(retain) * self.forget_batch_size)
        forget_loader = batched_loader(forget, self.forget_batch_size, sampler=sampler)
        return CombinedLoader({"forget": forget_loader, "retain": retain}, mode="max_size_cycle")

    def forget_dataloader(self) -> DataLoader:
        """The forget pairs, shuffled."""
        self._require_attached("forget_dataloader")
        return batched_loader(self.pair_dataset(self.forget_idx), self.forget_batch_size, shuffle=True)

    def retain_dataloader(self) -> DataLoader:
        """The retained pairs, shuffled."""
        self._require_attached("retain_dataloader")
        return batched_loader(self.pair_dataset(np.flatnonzero(self.retain_mask)), self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """Every training pair in order (``val/bt_loss``); the unlearning metrics come from the callback."""
        return batched_loader(self.pair_dataset(), self.eval_batch_size, shuffle=False)

    # -- the unlearning protocol ---------------------------------------------------------------------------------------
    def split_info(self) -> dict[str, Any]:
        """What defines the forget set: sizes, indices, per-item provenance, recall of the planted pairs."""
        self.setup()
        info: dict[str, Any] = {"source": self.source, "seed": self.seed, "selector": self.selector,
                                "n_train": self.n_pairs, "n_test": len(self.sft_logits), "vocab_size": self.vocab_size,
                                "attached": self.attached, "n_identical_dropped": self.n_identical_dropped}  # fmt: skip
        if not self.attached:
            return info
        info.update(
            {
                "n_unsatisfactory": int(self.unsatisfactory.sum()),
                "n_explained": len(self.items),
                "n_forget": len(self.forget_idx),
                "forget_indices": self.forget_idx.tolist(),
                "per_item": per_item(self.explanations),
            }
        )
        info.update(explanation_stats(self.explanations))
        info.update(planted_recall(self.corrupted, self.forget_idx, self.explanations))
        return info
