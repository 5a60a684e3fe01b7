"""``benchmarks/repguard_overhead.py`` (the callback's cost, card Performance): a smoke run at a tiny size.

No timing is asserted (timings are the benchmark's output, not a property of the code); the test checks that every
row is produced and that each timed arm ran what its row names, so a benchmark that silently times an undefended
model, a defense that flags nothing or the wrong feature space fails here.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from zoo.repguard import model as rg

ROOT = Path(__file__).resolve().parents[2]
#: The smallest sizes at which the lexical defense still flags the trigger: 16 poisoned prompts (5% of 320) against
#: the detection limit τ ln10 N_train / N_clean = 3 · 2.303 · 2 = 13.8.
TINY = ["--n-train", "320", "--n-clean", "160", "--n-test", "16", "--n-embd", "16", "--onion-steps", "2",
        "--repeats", "1"]  # fmt: skip


def _benchmark() -> object:
    spec = importlib.util.spec_from_file_location("repguard_overhead", ROOT / "benchmarks" / "repguard_overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # ten one-epoch fits: ~5 s at one thread, over the default tests' budget
@pytest.mark.ci
def test_overhead_benchmark_runs_every_arm_as_named() -> None:
    """Each row is a finite positive ratio; the lexical arm flags exactly the trigger `cf` and isolates samples, the
    embedding arm fits the Mahalanobis scorer, the hidden arm trains under a dimension mask with its warm-up restored,
    the DeCE arm trains with DeCE, and the masked-inference arm's hook drops tokens of the triggered test prompts.
    Catches a benchmark whose defended arm runs without its defense (ratio ~1 for the wrong reason)."""
    bench = _benchmark()
    result = bench.run(TINY)  # type: ignore[attr-defined]
    names = [row[0] for row in result["rows"]]
    assert len(names) == len(set(names)) == 11
    for name, value, low, high, target, kind in result["rows"]:
        assert math.isfinite(value) and 0 < low <= value <= high, name
        assert kind in ("x", "%", "rate") and (target is None) == (kind == "rate"), name
    guards, modules = result["guards"], result["modules"]
    lexical = guards["lexical"]
    assert isinstance(lexical.scorer, rg.LexicalScorer) and lexical.feature_space == "lexical"
    dm = result["datamodule"]
    assert dm.vocab.id(dm.trigger_word) in lexical.scorer.flagged_types(lexical.tau)
    entry = lexical.history[-1]  # the last timed localisation pass
    assert entry["n_poisoned"] == entry["n_isolated_poisoned"] == 16
    assert isinstance(guards["embedding"].scorer, rg.EmbeddingScorer)
    hidden = guards["hidden"]
    assert hidden.feature_space == "hidden" and hidden.mask is not None and hidden.warmup_epochs == 2
    assert modules["dece"].loss_kind == "dece" and modules["none"].loss_kind == "ce"
    assert lexical.drop is not None and lexical.drop.flags is not None and bool(lexical.drop.flags.any())
    lines = bench.report(result)  # type: ignore[attr-defined]
    assert sum(line.endswith(("met", "NOT met")) for line in lines) == 9
    assert sum("reported (prompts/s" in line for line in lines) == 2
