"""HardwareSpec presets and peaks, the cost model and the CAP radar (card ``moe_cap``, tests 7, 11, 12, 13)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from zoo.moe_cap.cap_radar import draw_radar, radar_scores
from zoo.moe_cap.hardware import (
    PRESETS,
    HardwareSpec,
    cost_usd,
    custom_spec,
    measure_cpu_spec,
    preset_for_device_name,
    resolve_hardware,
)

#: The README example (card test 11).
README_SYSTEMS = [
    {"system_name": "sglang", "tpot_s": 0.058, "cost_usd": 8920.0, "em": 0.911, "cap_class": "PA"},
    {"system_name": "ktransformers", "tpot_s": 0.073, "cost_usd": 3800.0, "em": 0.800, "cap_class": "PC"},
    {"system_name": "moe-infinity", "tpot_s": 0.15, "cost_usd": 3800.0, "em": 0.911, "cap_class": "CA"},
]


def test_peak_convention_sparse_halved_once():
    """Catches halving the 2:4-sparse peak twice (2x lower) or never (2x higher) in presets or custom specs (test 7)."""
    preset = PRESETS["H100-HBM3-80GB"]
    assert preset.peak_flops("bf16") == 989.5e12
    assert preset.peak_flops("fp16") == preset.peak_flops("bf16")
    assert preset.peak_flops("fp8") == preset.peak_flops("int8") == 2 * 989.5e12
    assert preset.peak_flops("fp32") == 989.5e12 / 2  # TF32 dense
    assert preset.peak_flops("int4") == preset.peak_flops("awq") == preset.peak_flops("int8")
    assert PRESETS["A100-SXM4-80GB"].peak_flops("bf16") == 312e12
    assert PRESETS["A100-SXM4-80GB"].peak_flops("fp32") == 156e12
    sparse = custom_spec({"name": "h100-sparse", "bw_Bps": 3350e9, "sparse_flops": 1979e12})
    for dtype in ("bf16", "fp16", "fp8", "fp32"):
        assert sparse.peak_flops(dtype) == pytest.approx(preset.peak_flops(dtype), rel=1e-12)
    # the same table number given as dense is never halved: a 2x higher peak, so S-MFU would be 2x lower
    unhalved = custom_spec({"bw_Bps": 3350e9, "dense_flops": 1979e12})
    assert unhalved.peak_flops("bf16") == pytest.approx(2 * preset.peak_flops("bf16"), rel=1e-12)
    sparse_dict = custom_spec({"bw_Bps": 1e12, "sparse_flops": {"bf16": 1979e12, "int8": 3958e12}})
    assert sparse_dict.dense_flops == {"bf16": 989.5e12, "fp16": 989.5e12, "int8": 1979e12}


def test_presets_match_card():
    """Catches a wrong bandwidth, price or TDP in the preset table, or a preset missing. Prices and TDPs are the
    public Auto-CAP table's (``moe_cap/utils/cost_utils.py``; the card left the TDPs and the A100-40GB prices
    unrecorded): A100-PCIe-40GB 9000 $, A100-SXM4-40GB 12000 $, H200 350 W (the old presets: None, None, 700 W)."""
    bw = {"A100-PCIe-80GB": 1935e9, "A100-PCIe-40GB": 1555e9, "A100-SXM4-80GB": 2039e9, "A100-SXM4-40GB": 1555e9,
          "H100-PCIe-80GB": 2039e9, "RTX-A5000": 768e9, "RTX-A6000": 768e9, "H100-HBM3-80GB": 3350e9,
          "H200-141GB": 4800e9}  # fmt: skip
    bf16 = {"H100-PCIe-80GB": 756.5e12, "H200-141GB": 989.5e12, "RTX-A5000": 111.1e12, "RTX-A6000": 154.85e12}
    price = {"A100-PCIe-80GB": 19000, "A100-SXM4-80GB": 19000, "A100-PCIe-40GB": 9000, "A100-SXM4-40GB": 12000,
             "H100-PCIe-80GB": 28000, "H100-HBM3-80GB": 38000, "H200-141GB": 35000, "RTX-A6000": 4500,
             "RTX-A5000": 2400}  # fmt: skip
    tdp = {"H100-HBM3-80GB": 700, "H200-141GB": 350, "H100-PCIe-80GB": 350, "A100-SXM4-80GB": 400,
           "A100-SXM4-40GB": 400, "A100-PCIe-80GB": 300, "A100-PCIe-40GB": 250, "RTX-A6000": 300,
           "RTX-A5000": 230}  # fmt: skip
    assert set(PRESETS) == set(bw)
    for name, spec in PRESETS.items():
        assert spec.name == name and spec.n_dev == 1
        assert spec.bw_Bps == bw[name] and spec.price_usd == price[name] and spec.tdp_w == tdp[name]
        assert spec.peak_flops("bf16") == bf16.get(name, 312e12 if name.startswith("A100") else 989.5e12)
        assert json.loads(json.dumps(spec.to_dict())) == spec.to_dict()
        assert custom_spec(spec.to_dict()) == spec


def test_device_names_and_resolve():
    """Catches a KeyError (the public code's failure) on GPU-name strings, case sensitivity, or n_dev being dropped."""
    assert preset_for_device_name("NVIDIA H100 80GB HBM3").name == "H100-HBM3-80GB"
    assert preset_for_device_name("NVIDIA A100 80GB PCIe").name == "A100-PCIe-80GB"
    assert preset_for_device_name("NVIDIA A100-PCIE-40GB").name == "A100-PCIe-40GB"
    assert preset_for_device_name("nvidia a100-sxm4-80gb").name == "A100-SXM4-80GB"
    assert preset_for_device_name("NVIDIA H200").name == "H200-141GB"
    assert preset_for_device_name("NVIDIA RTX A6000").name == "RTX-A6000"
    assert resolve_hardware("h200-141gb", n_dev=4) == PRESETS["H200-141GB"].with_n_dev(4)
    assert resolve_hardware({"bw_Bps": 1e12, "dense_flops": 1e14}, n_dev=2).n_dev == 2
    with pytest.raises(ValueError, match="disagrees"):
        resolve_hardware({"bw_Bps": 1e12, "dense_flops": 1e14, "n_dev": 2}, n_dev=1)
    with pytest.raises(ValueError, match="auto.*cpu_measured") as err:
        resolve_hardware("tpu-v9")
    assert "H200-141GB" in str(err.value)


def test_unknown_device_name_lists_presets():
    """Catches an unknown GPU raising a bare KeyError (or mapping silently) instead of listing presets (test 13)."""
    with pytest.raises(ValueError) as err:
        preset_for_device_name("NVIDIA GeForce RTX 4090")
    message = str(err.value)
    assert "NVIDIA GeForce RTX 4090" in message and "bw_Bps" in message and "dense_flops" in message
    assert all(name in message for name in PRESETS)


def test_cost_model():
    """Catches swapped energy/capital scales, a missing n_dev or CPU term, or wrong units in the cost (test 12)."""
    spec = HardwareSpec("gpu", bw_Bps=1e12, dense_flops={"bf16": 1e14}, price_usd=10000, tdp_w=500, n_dev=2)
    cost = cost_usd(spec, 7200.0)
    assert cost["capital_usd"] == pytest.approx(27214.0, abs=1e-6)
    assert cost["energy_usd"] == pytest.approx(0.405, abs=1e-6)
    assert cost["cost_usd"] == pytest.approx(34017.986, abs=1e-6)
    extra = cost_usd(spec, 7200.0, extra_capital_usd=1000.0)
    assert extra["cost_usd"] - cost["cost_usd"] == pytest.approx(1250.0)


def test_cost_without_price_names_preset():
    """Catches a None price turning into a TypeError or a silent 0 instead of an error naming the preset (test 13)."""
    with pytest.raises(ValueError, match="'my-a100'.*price_usd"):
        cost_usd(custom_spec({"name": "my-a100", "bw_Bps": 1555e9, "dense_flops": 312e12, "tdp_w": 250}), 10.0)
    with pytest.raises(ValueError, match="'x'.*tdp_w"):
        cost_usd(HardwareSpec("x", 1e12, {"bf16": 1e12}, price_usd=1.0, tdp_w=None), 10.0)


def test_measure_cpu_spec():
    """Catches a CPU measurement returning zero, inf or NaN peaks, or one not cached per thread count (test 13)."""
    t0 = time.perf_counter()
    spec = measure_cpu_spec("fp32", refresh=True)
    elapsed = time.perf_counter() - t0  # reported, never asserted (timing assertions are banned)
    print(
        f"measure_cpu_spec: {elapsed:.2f} s, {spec.bw_Bps / 1e9:.1f} GB/s, {spec.peak_flops('fp32') / 1e9:.1f} GFLOP/s"
    )
    assert spec.name == "cpu_measured" and spec.price_usd == 0.0 and spec.tdp_w == 0.0
    assert math.isfinite(spec.bw_Bps) and spec.bw_Bps > 0
    assert math.isfinite(spec.peak_flops("fp32")) and spec.peak_flops("fp32") > 0
    assert measure_cpu_spec("fp32") is spec
    assert resolve_hardware("cpu_measured").bw_Bps == spec.bw_Bps


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"bw_Bps": 1e12}, "exactly one of 'dense_flops' or 'sparse_flops'.*neither"),
        ({"bw_Bps": 1e12, "dense_flops": 1e14, "sparse_flops": 2e14}, "both"),
        ({"dense_flops": 1e14}, "missing key 'bw_Bps'"),
        ({"bw_Bps": 1e12, "dense_flops": 1e14, "bandwidth": 2}, r"unknown key\(s\) \['bandwidth'\]"),
        ({"bw_Bps": 1e12, "dense_flops": {"tf32": 1e14}}, r"dense_flops has unknown key\(s\) \['tf32'\]"),
        ({"bw_Bps": -1.0, "dense_flops": 1e14}, "bw_Bps: expected a finite number > 0, got -1.0"),
        ({"bw_Bps": 1e12, "sparse_flops": 0}, "sparse_flops: expected a finite number > 0"),
        ({"bw_Bps": 1e12, "dense_flops": 1e14, "n_dev": 0}, "n_dev: expected an integer >= 1"),
        ({"bw_Bps": 1e12, "dense_flops": 1e14, "price_usd": "cheap"}, "price_usd"),
    ],
)
def test_custom_spec_validation(spec, match):
    """Catches a malformed custom spec being accepted (a typo'd key ignored, both flops kinds mixed, a bad value)."""
    with pytest.raises(ValueError, match=match):
        custom_spec(spec)


def test_peak_flops_missing_key():
    """Catches a missing dtype entry falling back silently to another dtype's peak."""
    spec = custom_spec({"name": "mine", "bw_Bps": 1e12, "dense_flops": {"fp32": 1e13}})
    with pytest.raises(ValueError, match=r"'mine'.*dtype='bf16'.*\['fp32'\]"):
        spec.peak_flops("bf16")
    with pytest.raises(ValueError, match="unknown compute dtype"):
        spec.peak_flops("fp64")
    assert spec.peak_flops("torch.float32") == 1e13


def test_radar_readme_example(tmp_path):
    """Catches a wrong radar formula (cost cap, TPOT direction, accuracy base) or an empty PNG (test 11)."""
    scores = radar_scores(README_SYSTEMS, cost_cap=10000)
    expected = [(100, 28.64, 64.4), (86.96, 69.6, 20), (20, 69.6, 64.4)]
    for got, (perf, cost, acc) in zip(scores, expected, strict=True):
        assert got["performance"] == pytest.approx(perf, abs=1e-2)
        assert got["cost"] == pytest.approx(cost, abs=1e-2)
        assert got["accuracy"] == pytest.approx(acc, abs=1e-2)
    default_cap = radar_scores(README_SYSTEMS)  # T = max cost: the dearest system scores the base
    assert default_cap[0]["cost"] == pytest.approx(20.0)
    png = draw_radar(README_SYSTEMS, tmp_path / "sub" / "cap_radar.png", cost_cap=10000, title="README")
    assert png.is_file() and png.stat().st_size > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_radar_degenerate_axes():
    """Catches a division by zero (NaN/inf scores) when all systems tie, EM is 1 everywhere, or every cost is 0."""
    tied = [{"tpot_s": 0.1, "cost_usd": 0.0, "em": 1.0}, {"tpot_s": 0.1, "cost_usd": 0.0, "em": 1.0}]
    assert radar_scores(tied) == [{"performance": 100.0, "cost": 100.0, "accuracy": 100.0}] * 2
    single = radar_scores([{"tpot_s": 0.2, "cost_usd": 5.0, "em": 0.0}])
    # accuracy's top is EM = 1, not the best system: one system at EM 0 scores the base, not 100
    assert single == [{"performance": 100.0, "cost": 20.0, "accuracy": 20.0}]
    assert radar_scores([]) == []


def test_radar_validation():
    """Catches a missing radar value or unknown class being drawn as garbage instead of a named error."""
    with pytest.raises(ValueError, match="'a'.*no 'em'"):
        radar_scores([{"system_name": "a", "tpot_s": 0.1, "cost_usd": 1.0}])
    with pytest.raises(ValueError, match="cost_cap"):
        radar_scores(README_SYSTEMS, cost_cap=0)
    with pytest.raises(ValueError, match="em: expected a fraction"):
        radar_scores([{"tpot_s": 0.1, "cost_usd": 1.0, "em": 91.1}])
    with pytest.raises(ValueError, match="cap_class='XY'"):
        draw_radar([{**README_SYSTEMS[0], "cap_class": "XY"}, README_SYSTEMS[1]], "never.png")


def test_radar_redraws_from_records(tmp_path):
    """Catches zoo.moe_cap.radar failing on saved records (one dict or a list per file) or being shadowed."""
    import zoo.moe_cap
    import zoo.moe_cap.cap_radar  # the submodule import must not replace the package's radar function

    first, second = tmp_path / "run_a" / "moecap_test.json", tmp_path / "run_b" / "moecap_test.json"
    first.parent.mkdir()
    second.parent.mkdir()
    records = [{"system_name": s["system_name"], "cap_class": s["cap_class"], "records": [],
                "means": {"tpot_s": s["tpot_s"], "cost_usd": s["cost_usd"], "em": s["em"], "ttft_s": 0.5}}
               for s in README_SYSTEMS]  # fmt: skip
    first.write_text(json.dumps(records[0]))
    second.write_text(json.dumps(records[1:]))
    png = zoo.moe_cap.radar([first, second], cost_cap=10000)
    assert png == first.parent / "cap_radar.png" and png.stat().st_size > 0
    out = zoo.moe_cap.radar(str(second), out=tmp_path / "b.png")
    assert out.stat().st_size > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"system_name": "x", "means": {"tpot_s": 0.1, "em": 0.5}}))
    with pytest.raises(ValueError, match=r"bad\.json.*\['cost_usd'\]"):
        zoo.moe_cap.radar(bad)
    bad.write_text(json.dumps({"means": {}}))
    with pytest.raises(ValueError, match=r"bad\.json.*'system_name'"):
        zoo.moe_cap.radar(bad)


def test_package_import_is_cheap():
    """Catches ``import zoo.moe_cap`` pulling in torch or matplotlib (the radar attribute must stay lazy)."""
    code = (
        "import sys, zoo.moe_cap, zoo.moe_cap.hardware; assert 'torch' not in sys.modules; "
        "assert 'matplotlib' not in sys.modules; import zoo.moe_cap.cap_radar; assert callable(zoo.moe_cap.radar)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
