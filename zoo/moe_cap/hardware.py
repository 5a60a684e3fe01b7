"""Hardware specs (peak bandwidth, dense FLOP/s), GPU presets, a CPU measurement and the cost model (card ``moe_cap``).

Every spec stores **dense** peaks. The public MoE-CAP table stores 2:4-sparse tensor-core peaks and halves them where
S-MFU is computed; here a table value is halved once, when the spec is built (presets are written out already
halved; ``custom_spec(sparse_flops=...)`` halves at construction), so nothing downstream divides again.

``torch`` is imported lazily (inside :func:`measure_cpu_spec` and ``resolve_hardware("auto")``), so importing this
module stays cheap.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

#: Keys a spec's ``dense_flops`` may hold (FLOP/s per compute dtype).
FLOPS_KEYS = ("fp32", "fp16", "bf16", "fp8", "int8")
#: Weight-only quantised dtypes: their matmuls are priced at the ``int8`` entry.
_LOW_BIT = ("int4", "fp4", "awq", "gptq")
#: Every dtype :meth:`HardwareSpec.peak_flops` accepts, plus torch spellings (``torch.bfloat16`` etc.).
KNOWN_DTYPES = FLOPS_KEYS + _LOW_BIT
_TORCH_NAMES = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
}  # fmt: skip


def _canonical_dtype(dtype: str) -> str:
    """``dtype`` as one of :data:`KNOWN_DTYPES` (accepts ``torch.float16``-style names); ``ValueError`` otherwise."""
    key = str(dtype).removeprefix("torch.").strip().lower()
    key = _TORCH_NAMES.get(key, key)
    if key not in KNOWN_DTYPES:
        raise ValueError(f"dtype={dtype!r}: unknown compute dtype; expected one of {'|'.join(KNOWN_DTYPES)}")
    return key


def _flops_key(dtype: str) -> str:
    """The ``dense_flops`` key that prices ``dtype`` (int4/fp4/awq/gptq → ``int8``)."""
    key = _canonical_dtype(dtype)
    return "int8" if key in _LOW_BIT else key


def _positive(value: Any, where: str) -> float:
    """``value`` as a finite positive float, or a ``ValueError`` naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: expected a finite number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class HardwareSpec:
    """Peak capabilities of one device type, times ``n_dev`` devices.

    Args:
        name: Preset or user name; error messages quote it.
        bw_Bps: Peak memory bandwidth of one device, bytes/s.
        dense_flops: Dense peak FLOP/s of one device per compute dtype, keys among ``fp32|fp16|bf16|fp8|int8``.
        price_usd: Price of one device (``None`` if unknown: :func:`cost_usd` then raises).
        tdp_w: Board power of one device in watts (``None`` if unknown).
        n_dev: Number of devices the system uses (peaks, price and power scale with it).
    """

    name: str
    bw_Bps: float
    dense_flops: dict[str, float] = field(hash=False)
    price_usd: float | None
    tdp_w: float | None
    n_dev: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"HardwareSpec.name: expected a non-empty string, got {self.name!r}")
        object.__setattr__(self, "bw_Bps", _positive(self.bw_Bps, f"hardware {self.name!r}: bw_Bps"))
        if not isinstance(self.dense_flops, dict) or not self.dense_flops:
            raise ValueError(
                f"hardware {self.name!r}: dense_flops: expected a non-empty dict, got {self.dense_flops!r}"
            )
        if unknown := sorted(set(self.dense_flops) - set(FLOPS_KEYS)):
            raise ValueError(f"hardware {self.name!r}: dense_flops has unknown key(s) {unknown}; expected keys among "
                             f"{list(FLOPS_KEYS)}")  # fmt: skip
        flops = {k: _positive(v, f"hardware {self.name!r}: dense_flops[{k!r}]") for k, v in self.dense_flops.items()}
        object.__setattr__(self, "dense_flops", flops)  # a private copy: mutating the caller's dict changes nothing
        for attr in ("price_usd", "tdp_w"):
            value = getattr(self, attr)
            if value is not None:
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not math.isfinite(value)
                    or value < 0
                ):
                    raise ValueError(f"hardware {self.name!r}: {attr}: expected None or a finite number >= 0, "
                                     f"got {value!r}")  # fmt: skip
                object.__setattr__(self, attr, float(value))
        if isinstance(self.n_dev, bool) or not isinstance(self.n_dev, int) or self.n_dev < 1:
            raise ValueError(f"hardware {self.name!r}: n_dev: expected an integer >= 1, got {self.n_dev!r}")

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s of **one** device in ``dtype`` (int4/fp4/awq/gptq use the ``int8`` entry).

        Args:
            dtype: ``fp32|fp16|bf16|fp8|int8|int4|fp4|awq|gptq`` (torch names such as ``bfloat16`` too).

        Returns:
            FLOP/s; multiply by ``n_dev`` for the system's peak.

        Raises:
            ValueError: ``dtype`` is unknown, or the spec has no entry for it.
        """
        key = _flops_key(dtype)
        if key not in self.dense_flops:
            raise ValueError(f"hardware {self.name!r}: no dense_flops entry for dtype={dtype!r} (key {key!r}); "
                             f"known keys: {sorted(self.dense_flops)}")  # fmt: skip
        return self.dense_flops[key]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able primitives; ``custom_spec(spec.to_dict())`` rebuilds an equal spec."""
        return {
            "name": self.name, "bw_Bps": self.bw_Bps, "dense_flops": dict(self.dense_flops),
            "price_usd": self.price_usd, "tdp_w": self.tdp_w, "n_dev": self.n_dev,
        }  # fmt: skip

    def with_n_dev(self, n: int) -> HardwareSpec:
        """A copy with ``n_dev = n`` (validated: an integer >= 1)."""
        return replace(self, n_dev=n)


def _preset(
    name: str, bw: float, bf16_dense: float, price: float | None, tdp: float | None
) -> tuple[str, HardwareSpec]:
    """A preset from its dense bf16 peak: fp16 = bf16, fp8 = int8 = 2× bf16, fp32 (TF32 dense) = bf16 / 2."""
    flops = {
        "fp32": bf16_dense / 2,
        "fp16": bf16_dense,
        "bf16": bf16_dense,
        "fp8": 2 * bf16_dense,
        "int8": 2 * bf16_dense,
    }
    return name, HardwareSpec(name=name, bw_Bps=bw, dense_flops=flops, price_usd=price, tdp_w=tdp)


#: GPU presets (card "HardwareSpec"). Bandwidths follow the public code's table; dense bf16/fp16 peaks are that table's
#: 2:4-sparse values / 2; fp8/int8 = 2× bf16 (the table's convention, approximate; A100 and the RTX Ampere cards have
#: no fp8 units); ``fp32`` is **TF32 dense** tensor-core throughput (bf16 / 2) — true non-tensor-core fp32 is lower
#: (A100 19.5 TFLOP/s), so fp32 S-MFU against these presets assumes TF32 matmuls. Prices and TDPs are the public
#: Auto-CAP table's (``moe_cap/utils/cost_utils.py``: ``GPU_COST_DICT``, ``GPU_TDP_DICT``), so the cost model gives
#: the code's numbers; the card records the prices but for the A100-40GB parts and left the TDPs "not recorded".
#: The table's H200 TDP is 350 W (its comment says "PCIe variant"; the SXM board's vendor figure is 700 W): kept, as
#: the code computes with it.
PRESETS: dict[str, HardwareSpec] = dict(
    [
        _preset("A100-PCIe-80GB", 1935e9, 312e12, 19000.0, 300.0),
        _preset("A100-PCIe-40GB", 1555e9, 312e12, 9000.0, 250.0),  # price: cost_utils.py (card: unknown)
        _preset("A100-SXM4-80GB", 2039e9, 312e12, 19000.0, 400.0),
        _preset("A100-SXM4-40GB", 1555e9, 312e12, 12000.0, 400.0),  # price: cost_utils.py (card: unknown)
        _preset("H100-PCIe-80GB", 2039e9, 756.5e12, 28000.0, 350.0),
        _preset("RTX-A5000", 768e9, 111.1e12, 2400.0, 230.0),
        _preset("RTX-A6000", 768e9, 154.85e12, 4500.0, 300.0),
        _preset("H100-HBM3-80GB", 3350e9, 989.5e12, 38000.0, 700.0),
        _preset("H200-141GB", 4800e9, 989.5e12, 35000.0, 350.0),  # TDP: cost_utils.py's 350 W (vendor SXM: 700 W)
    ]
)

#: ``torch.cuda.get_device_name()`` strings (lower-cased) → preset name. Only the same part maps: the H200 NVL and
#: H100 NVL (other clocks and power) are left out on purpose; pass them as custom specs.
ALIASES: dict[str, str] = {
    "nvidia a100-sxm4-80gb": "A100-SXM4-80GB",
    "nvidia a100-sxm-80gb": "A100-SXM4-80GB",
    "nvidia a100-sxm4-40gb": "A100-SXM4-40GB",
    "nvidia a100 80gb pcie": "A100-PCIe-80GB",
    "nvidia a100-pcie-80gb": "A100-PCIe-80GB",
    "nvidia a100-pcie-40gb": "A100-PCIe-40GB",
    "nvidia h100 pcie": "H100-PCIe-80GB",
    "nvidia h100 80gb hbm3": "H100-HBM3-80GB",
    "nvidia h200": "H200-141GB",
    "nvidia rtx a6000": "RTX-A6000",
    "nvidia rtx a5000": "RTX-A5000",
}

_CUSTOM_HELP = (
    "pass a custom spec instead, e.g. hardware={'name': 'my-gpu', 'bw_Bps': 2.0e12, 'dense_flops': 312e12, "
    "'price_usd': 19000, 'tdp_w': 400} (dense_flops or sparse_flops: one number = bf16/fp16 FLOP/s, or a dict "
    f"over {list(FLOPS_KEYS)}; sparse_flops is halved once)"
)


def _norm(name: str) -> str:
    return " ".join(str(name).lower().split())


def preset_for_device_name(name: str) -> HardwareSpec:
    """The preset for a ``torch.cuda.get_device_name()`` string or a preset name (case-insensitive).

    Args:
        name: e.g. ``"NVIDIA H100 80GB HBM3"`` or ``"h200-141gb"``.

    Returns:
        The preset's spec (``n_dev = 1``).

    Raises:
        ValueError: Unknown name; the message lists the presets and how to pass a custom spec.
    """
    key = _norm(name)
    by_preset = {_norm(p): p for p in PRESETS}
    preset = ALIASES.get(key) or by_preset.get(key)
    if preset is None:
        raise ValueError(f"device name {name!r}: no hardware preset matches; presets: {list(PRESETS)}; {_CUSTOM_HELP}")
    return PRESETS[preset]


def _expand_flops(value: Any, field_name: str, halve: bool) -> dict[str, float]:
    """``dense_flops``/``sparse_flops`` (a number or a dict) as a dense ``{key: FLOP/s}`` dict."""
    scale = 0.5 if halve else 1.0
    if isinstance(value, dict):
        if not value:
            raise ValueError(f"custom hardware: {field_name}: expected a non-empty dict or a number, got {{}}")
        if unknown := sorted(set(value) - set(FLOPS_KEYS)):
            raise ValueError(f"custom hardware: {field_name} has unknown key(s) {unknown}; expected keys among "
                             f"{list(FLOPS_KEYS)}")  # fmt: skip
        flops = {k: scale * _positive(v, f"custom hardware: {field_name}[{k!r}]") for k, v in value.items()}
        for a, b in (("bf16", "fp16"), ("fp16", "bf16")):  # the card's convention: fp16 and bf16 peaks are equal
            if a in flops and b not in flops:
                flops[b] = flops[a]
        return flops
    half = scale * _positive(value, f"custom hardware: {field_name}")
    return {"fp32": half / 2, "fp16": half, "bf16": half, "fp8": 2 * half, "int8": 2 * half}


def custom_spec(d: dict[str, Any]) -> HardwareSpec:
    """A spec from a user dict (``hardware={...}`` on the callback; also what :meth:`HardwareSpec.to_dict` writes).

    Args:
        d: Keys ``bw_Bps`` (required), exactly one of ``dense_flops`` / ``sparse_flops`` (a number = the bf16/fp16
            peak, with fp8/int8 = 2× and fp32 = half; or a dict over ``fp32|fp16|bf16|fp8|int8``, a missing one of
            bf16/fp16 copied from the other), and optional ``name`` (default ``"custom"``), ``price_usd``, ``tdp_w``
            (default ``None``), ``n_dev`` (default 1). ``sparse_flops`` (2:4-sparse table values) is halved here, once.

    Returns:
        The spec.

    Raises:
        ValueError: Unknown keys, missing ``bw_Bps``, both or neither of the flops keys, or invalid values.
    """
    if not isinstance(d, dict):
        raise ValueError(f"custom hardware: expected a dict, got {type(d).__name__}")
    allowed = {"name", "bw_Bps", "dense_flops", "sparse_flops", "price_usd", "tdp_w", "n_dev"}
    if unknown := sorted(set(d) - allowed):
        raise ValueError(f"custom hardware: unknown key(s) {unknown}; expected keys among {sorted(allowed)}")
    if "bw_Bps" not in d:
        raise ValueError(
            f"custom hardware: missing key 'bw_Bps' (peak memory bandwidth, bytes/s); got keys {sorted(d)}"
        )
    has_dense, has_sparse = "dense_flops" in d, "sparse_flops" in d
    if has_dense == has_sparse:
        found = "both" if has_dense else "neither"
        raise ValueError(f"custom hardware: expected exactly one of 'dense_flops' or 'sparse_flops' (2:4-sparse peaks, "
                         f"halved once); found {found}")  # fmt: skip
    flops = (
        _expand_flops(d["dense_flops"], "dense_flops", False)
        if has_dense
        else _expand_flops(d["sparse_flops"], "sparse_flops", True)
    )
    return HardwareSpec(
        name=d.get("name", "custom"), bw_Bps=d["bw_Bps"], dense_flops=flops, price_usd=d.get("price_usd"),
        tdp_w=d.get("tdp_w"), n_dev=d.get("n_dev", 1),
    )  # fmt: skip


#: Matmul size and per-call time budget of :func:`measure_cpu_spec` (a slower dtype gets a smaller matrix).
_MATMUL_N, _PROBE_N, _CALL_BUDGET_S = 2048, 512, 0.35
_COPY_BYTES = 256 * 2**20
_CPU_CACHE: dict[tuple[str, int], HardwareSpec] = {}


def clear_cpu_spec_cache() -> None:
    """Forget every cached :func:`measure_cpu_spec` result."""
    _CPU_CACHE.clear()


def _timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of ``fn`` (CPU kernels are synchronous)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _copy_bandwidth(repeats: int) -> float:
    """Median read + write bandwidth (bytes/s) of ``repeats`` copies of a 256 MiB fp32 tensor, after one warm-up."""
    import torch

    src = torch.empty(_COPY_BYTES // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: first touch of dst's pages
    return statistics.median(2 * _COPY_BYTES / _timed(lambda: dst.copy_(src)) for _ in range(repeats))


def measure_cpu_spec(dtype: str = "fp32", repeats: int = 5, *, refresh: bool = False) -> HardwareSpec:
    """Measure this CPU's achievable bandwidth and matmul throughput with the current torch thread count.

    Bandwidth: median over ``repeats`` timed ``dst.copy_(src)`` of a 256 MiB fp32 tensor, counting read + write,
    ``2·bytes/t``. FLOP/s: median over ``repeats`` ``n×n`` matmuls (``out=`` preallocated) in ``dtype``'s torch
    dtype (fp32 → float32, bf16 → bfloat16, fp16 → float16, every other dtype → float32), ``2n³/t``. One untimed
    warm-up each. Inputs are constants, so the global RNG is untouched.

    ``n`` is 2048 (the card) unless a 512 probe predicts a 2048 matmul slower than 0.35 s; then ``n`` shrinks (a
    multiple of 128, at least 128) to fit, with a warning. On the 2-core dev machine at 1 thread fp32 keeps
    ``n = 2048`` (≈ 0.2 s per matmul, ≈ 1.6 s for the whole call) while bf16/fp16 (no native CPU kernels there,
    ≈ 58 s per 2048 matmul) drop to ``n = 512``.

    These are achievable, not datasheet, peaks: CPU S-MBU can approach or exceed 1. Price and TDP are 0 (only the
    cost model's CPU constants count). The result is cached per ``(dtype, thread count)``.

    Args:
        dtype: The compute dtype to time (see :data:`KNOWN_DTYPES`).
        repeats: Timed repetitions of each kernel (>= 1).
        refresh: Measure again even if a cached result exists.

    Returns:
        A spec named ``"cpu_measured"`` with the measured FLOP/s under ``dtype``'s key and under ``fp32``.
    """
    import torch

    key = _flops_key(dtype)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"measure_cpu_spec: repeats: expected an integer >= 1, got {repeats!r}")
    cache_key = (key, torch.get_num_threads())
    if not refresh and cache_key in _CPU_CACHE:
        return _CPU_CACHE[cache_key]

    bw = _copy_bandwidth(repeats)
    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(key, torch.float32)

    def operands(n: int) -> tuple[Any, Any, Any]:
        a = torch.full((n, n), 0.5, dtype=tdtype)
        return a, a.clone(), torch.empty((n, n), dtype=tdtype)

    a, b, c = operands(_PROBE_N)
    probe = min(_timed(lambda: torch.matmul(a, b, out=c)) for _ in range(2))  # the first call also warms the kernels
    n = _MATMUL_N
    if probe * (_MATMUL_N / _PROBE_N) ** 3 > _CALL_BUDGET_S:
        n = max(128, int(_PROBE_N * (_CALL_BUDGET_S / probe) ** (1 / 3)) // 128 * 128)
        warnings.warn(f"measure_cpu_spec(dtype={dtype!r}): a {_MATMUL_N}² matmul would take ≈ "
                      f"{probe * (_MATMUL_N / _PROBE_N) ** 3:.1f} s on this CPU; timing {n}² matmuls instead",
                      stacklevel=2)  # fmt: skip
    if n != _PROBE_N:
        a, b, c = operands(n)
        torch.matmul(a, b, out=c)  # warm-up
    flops = statistics.median(2 * n**3 / _timed(lambda: torch.matmul(a, b, out=c)) for _ in range(repeats))
    spec = HardwareSpec("cpu_measured", bw, {key: flops, "fp32": flops}, price_usd=0.0, tdp_w=0.0)
    _CPU_CACHE[cache_key] = spec
    return spec


def resolve_hardware(
    hardware: str | dict[str, Any] | HardwareSpec, dtype: str = "fp32", n_dev: int = 1
) -> HardwareSpec:
    """The spec behind the callback's ``hardware`` knob.

    Args:
        hardware: A preset name (case-insensitive), ``"auto"`` (CUDA → the preset of
            ``torch.cuda.get_device_name()``, else ``cpu_measured``), ``"cpu_measured"``, a custom dict (see
            :func:`custom_spec`) or a spec.
        dtype: Compute dtype ``cpu_measured`` times.
        n_dev: Devices of the system; a custom dict's own ``n_dev`` must agree.

    Returns:
        The spec with ``n_dev`` set.

    Raises:
        ValueError: Unknown name, invalid custom dict, or conflicting ``n_dev``.
    """
    if isinstance(hardware, HardwareSpec):
        spec = hardware
    elif isinstance(hardware, dict):
        if "n_dev" in hardware and hardware["n_dev"] != n_dev:
            raise ValueError(f"hardware={hardware!r}: n_dev={hardware['n_dev']!r} in the dict disagrees with "
                             f"n_dev={n_dev!r}; set only one of them")  # fmt: skip
        spec = custom_spec(hardware)
    elif isinstance(hardware, str):
        key = _norm(hardware)
        by_preset = {_norm(p): p for p in PRESETS}
        if key == "auto":
            import torch

            if torch.cuda.is_available():
                spec = preset_for_device_name(torch.cuda.get_device_name())
            else:
                spec = measure_cpu_spec(dtype)
        elif key == "cpu_measured":
            spec = measure_cpu_spec(dtype)
        elif key in by_preset:
            spec = PRESETS[by_preset[key]]
        else:
            raise ValueError(f"hardware={hardware!r}: expected a preset {list(PRESETS)}, 'auto', 'cpu_measured' or "
                             f"a custom dict; {_CUSTOM_HELP}")  # fmt: skip
    else:
        raise ValueError(f"hardware: expected a preset name, 'auto', 'cpu_measured' or a dict, got "
                         f"{type(hardware).__name__}")  # fmt: skip
    return spec.with_n_dev(n_dev)


def cost_usd(
    spec: HardwareSpec,
    e2e_s: float,
    *,
    energy_scale: float = 1.2,
    capital_scale: float = 1.25,
    extra_capital_usd: float = 0.0,
    cpu_cost_usd: float = 7214.0,
    cpu_tdp_w: float = 350.0,
    usd_per_kwh: float = 0.15,
) -> dict[str, float]:
    """The card's cost model (public Auto-CAP arithmetic): capital is not amortised, so it dominates.

    ``capital = price·n_dev + cpu_cost + extra_capital``; ``energy = (tdp·n_dev + cpu_tdp)/1000 · usd_per_kwh ·
    e2e_s/3600``; ``cost = energy_scale·energy + capital_scale·capital``.

    Args:
        spec: The hardware (``price_usd`` and ``tdp_w`` must be known).
        e2e_s: Wall time of the run, seconds.
        energy_scale: Multiplier of the energy term.
        capital_scale: Multiplier of the capital term.
        extra_capital_usd: Extra capital (DRAM/SSD/PCIe of offloading systems).
        cpu_cost_usd: Host CPU price.
        cpu_tdp_w: Host CPU power, watts.
        usd_per_kwh: Electricity price.

    Returns:
        ``{"capital_usd", "energy_usd", "cost_usd"}``.

    Raises:
        ValueError: The spec's price or TDP is ``None``, or ``e2e_s`` is negative or not finite.
    """
    for attr in ("price_usd", "tdp_w"):
        if getattr(spec, attr) is None:
            raise ValueError(f"hardware {spec.name!r}: {attr} is None (unknown for this preset), so cost cannot be "
                             f"computed; {_CUSTOM_HELP}")  # fmt: skip
    if isinstance(e2e_s, bool) or not isinstance(e2e_s, int | float) or not math.isfinite(e2e_s) or e2e_s < 0:
        raise ValueError(f"cost_usd: e2e_s: expected a finite number >= 0 seconds, got {e2e_s!r}")
    capital = spec.price_usd * spec.n_dev + cpu_cost_usd + extra_capital_usd
    energy = (spec.tdp_w * spec.n_dev + cpu_tdp_w) / 1000.0 * usd_per_kwh * e2e_s / 3600.0
    return {"capital_usd": capital, "energy_usd": energy, "cost_usd": energy_scale * energy + capital_scale * capital}
