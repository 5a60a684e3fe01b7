"""MoE-CAP as a callback: router tracing, S-MBU / S-MFU per phase, cost and the CAP radar (card ``moe_cap``).

``MoECAPCallback`` attaches hooks to the Hugging Face MoE causal LM inside any LightningModule for
``validate``/``test``/``predict``:

- a forward **pre**-hook on each sparse layer's ``experts`` submodule reads ``top_k_index`` and marks the experts any
  row of the forward used (a union: two tokens on one expert count once; transformers' sentinel ``E`` and negative
  indices are ignored);
- pre/post hooks on the top-level model time every forward and record its phase (prefill: empty cache; decode: one
  new token per row; chunked otherwise), rows, new tokens and context per row.

At the end of the stage every forward's S-MBU, S-MFU, dense MBU/MFU, the public code's S-MFU and the activated
fraction are computed (``zoo.moe_cap.metrics``), averaged per phase and logged as ``{stage}/moecap/...``; the cost
model and accuracy (from the module's predictions) complete the record, written to ``moecap_{stage}.json``.
``callback.results`` holds the same dict. A CAP radar compares systems, so ``cap_radar.png`` is drawn when
``radar_with`` names other runs (this run among them); otherwise ``python -m zoo.moe_cap.cap_radar`` draws any set of
records later. Equations: ``zoo/moe_cap/README.md``.

Example:
    >>> from lightning.pytorch import Trainer
    >>> from callbacks.moe_cap import MoECAPCallback
    >>> trainer = Trainer(callbacks=[MoECAPCallback(hardware="cpu_measured")])  # doctest: +SKIP
    >>> trainer.validate(module, datamodule=data)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import re
import time
import warnings
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor, nn

from zoo.core import checks
from zoo.core.config import run_dir
from zoo.core.messages import say
from zoo.moe_cap import metrics as M

Stage = Literal["validate", "test", "predict"]
#: Lightning stage -> the hook-name stem (``on_validation_start`` ...).
_HOOK = {"validate": "validation", "test": "test", "predict": "predict"}
#: Per-forward metrics averaged per phase.
PHASE_METRICS = ("s_mbu", "s_mfu", "s_mfu_code", "mbu_dense", "mfu_dense", "act_experts", "act_frac", "kv_bytes")


def find_hf_model(pl_module: nn.Module, hf_attr: str = "auto") -> nn.Module:
    """The traced model: ``pl_module.<hf_attr>`` or (``auto``) the first ``transformers.PreTrainedModel`` submodule."""
    if hf_attr != "auto":
        model = pl_module
        for part in hf_attr.split("."):
            model = getattr(model, part, None)
            if model is None:
                raise AttributeError(f"MoECAPCallback(hf_attr={hf_attr!r}): {type(pl_module).__name__} has no {part!r}")
        return model
    from transformers import PreTrainedModel

    for module in pl_module.modules():
        if isinstance(module, PreTrainedModel):
            return module
    raise ValueError(
        f"MoECAPCallback: {type(pl_module).__name__} holds no transformers PreTrainedModel; set hf_attr to the "
        f"attribute path of the causal LM"
    )


class RouterTrace:
    """Hooks on one Hugging Face causal LM that record every forward (see the module docstring).

    Args:
        model: the causal LM (``model.model.layers[i].mlp.experts`` on sparse layers).
        num_experts: ``E``.
        top_k: ``k`` (the uniform router draws that many distinct experts per row).
        padding: ``executed`` (every row the forward ran, pads included) or ``real`` (non-pad rows, from the mask).
        router: ``traced`` or ``uniform`` (replace ``top_k_index`` by ``k`` distinct uniform experts per row).
        sync: ``torch.cuda.synchronize()`` before both time stamps on CUDA.
        sliding_window: cap of the context per row.
        seed: the uniform router's generator seed.
        flop_check: run each phase's first forward under ``FlopCounterMode`` (decoder layers only).
        flop_modules: regex of the module names whose FLOPs are measured (default: the decoder layers).
    """

    def __init__(self, model: nn.Module, num_experts: int, top_k: int, *, padding: str = "executed",
                 router: str = "traced", sync: bool = True, sliding_window: int | None = None, seed: int = 0,
                 flop_check: bool = False, flop_modules: str = r"\.layers\.\d+$") -> None:  # fmt: skip
        from zoo.moe_cap.model import experts_modules, gate_modules

        if padding not in ("executed", "real"):
            raise ValueError(f"padding={padding!r}: expected 'executed' or 'real'")
        if router not in ("traced", "uniform"):
            raise ValueError(f"router={router!r}: expected 'traced' or 'uniform'")
        self.model, self.num_experts, self.top_k = model, num_experts, top_k
        self.padding, self.router, self.sync, self.window = padding, router, sync, sliding_window
        self.flop_check, self.flop_modules = flop_check, re.compile(flop_modules)
        self.experts = experts_modules(model)
        self.gates = {} if self.experts else gate_modules(model)
        self.layers = sorted(self.experts or self.gates)
        self.records: list[dict[str, Any]] = []
        self._handles: list[Any] = []
        self._gen = torch.Generator().manual_seed(seed)
        #: (sparse-layer row, ``top_k_index``) of the current forward, marked after its time stamp.
        self._pending: list[tuple[int, Tensor]] = []
        #: ``(L, E)`` bool: the experts the last forward's rows used, per sparse layer.
        self.last_hit: Tensor | None = None
        self._valid: Tensor | None = None
        self._state: dict[str, Any] = {}
        self._checked: set[str] = set()

    def attach(self) -> RouterTrace:
        """Register the hooks (idempotent)."""
        if self._handles:
            return self
        self._handles.append(self.model.register_forward_pre_hook(self._pre_forward, with_kwargs=True))
        self._handles.append(self.model.register_forward_hook(self._post_forward, with_kwargs=True))
        for row, layer in enumerate(self.layers):
            if layer in self.experts:
                hook = self._experts_hook(row)
                self._handles.append(self.experts[layer].register_forward_pre_hook(hook, with_kwargs=True))
            else:
                warnings.warn(
                    f"layer {layer}: no `experts(hidden, top_k_index, top_k_weights)` submodule (a transformers 4.x "
                    f"layout?); tracing the router output instead", stacklevel=2,
                )  # fmt: skip
                self._handles.append(self.gates[layer].register_forward_hook(self._gate_hook(row)))
        return self

    def detach(self) -> None:
        """Remove every hook (and leave a FlopCounterMode an exception interrupted)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if (counter := self._state.pop("counter", None)) is not None:
            counter.__exit__(None, None, None)

    # -- hooks ------------------------------------------------------------------------------------------------------
    def _pre_forward(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"]
        rows, n_new = int(ids.shape[0]), int(ids.shape[1])
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
        mask = kwargs.get("attention_mask")
        phase = "prefill" if past == 0 else ("decode" if n_new == 1 else "chunked")
        device = ids.device
        self._pending = []
        real = self.padding == "real" and isinstance(mask, Tensor) and mask.dim() == 2
        new_mask = mask[:, -n_new:].bool() if real else None
        self._valid = new_mask.reshape(-1) if self.padding == "real" and new_mask is not None else None
        self._state = {"phase": phase, "rows": rows, "n_new": n_new, "past": past, "mask": mask,
                       "new_mask": new_mask, "cache": cache, "device": device}  # fmt: skip
        if self.flop_check and phase not in self._checked and phase != "chunked":
            from torch.utils.flop_counter import FlopCounterMode

            self._checked.add(phase)
            self._state["counter"] = FlopCounterMode(display=False)
            self._state["counter"].__enter__()
        if self.sync and device.type != "cpu":
            _synchronize(device)
        self._state["t0"] = time.perf_counter()

    def _post_forward(self, module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> None:
        state = self._state
        if state.get("t0") is None:
            self._pending = []
            return
        if self.sync and state["device"].type != "cpu":
            _synchronize(state["device"])
        latency = time.perf_counter() - state["t0"]
        measured = None
        if (counter := state.pop("counter", None)) is not None:
            counter.__exit__(None, None, None)
            measured = sum(sum(ops.values()) for name, ops in counter.get_flop_counts().items()
                           if self.flop_modules.search(name))  # fmt: skip
        hit = self.collect(state["device"]).sum(dim=1).tolist() if self.layers else []  # one host copy
        rows, n_new, past, mask, new_mask = (state[k] for k in ("rows", "n_new", "past", "mask", "new_mask"))
        if self.padding == "real" and isinstance(mask, Tensor) and mask.dim() == 2:
            ctx = mask.sum(dim=1).tolist()
            per_row_new = new_mask.sum(dim=1).tolist()
        else:
            ctx, per_row_new = [past + n_new] * rows, [n_new] * rows
        if self.window:
            ctx = [min(c, self.window) for c in ctx]
        cache = state["cache"]
        if cache is None and hasattr(output, "keys"):  # a forward that built its own cache
            keys = output.keys()
            cache = output["cache"] if "cache" in keys else (output["past_key_values"] if "past_key_values" in keys
                                                              else None)  # fmt: skip
        logits = output.get("logits") if hasattr(output, "get") else None
        from zoo.moe_cap.model import cache_element_bytes, cache_numel

        record = {
            "phase": state["phase"], "rows": rows, "n_new": [int(n) for n in per_row_new],
            "ctx": [int(c) for c in ctx], "latency_s": latency, "counts": [int(c) for c in hit],
            "kv_cached_elements": cache_numel(cache), "kv_element_bytes": cache_element_bytes(cache),
            "lm_head_rows": int(logits.shape[0] * logits.shape[1]) if isinstance(logits, Tensor) else rows,
        }  # fmt: skip
        if measured is not None:
            record["flops_measured"] = float(measured)
        self.records.append(record)
        self._state = {}

    def collect(self, device: torch.device | str = "cpu") -> Tensor:
        """Mark the forward's routed indices (a union per layer) and return the ``(L, E)`` hit matrix.

        Runs after the forward's time stamp, so the marking stays out of the measured latency; the expert hooks only
        keep a reference to ``top_k_index``. ``E`` (transformers' sentinel) and negative indices are never experts;
        masked rows (``padding: real``) are dropped. No host sync.
        """
        width, sentinel = self.num_experts + 2, self.num_experts
        hit = torch.zeros(len(self.layers), width, dtype=torch.bool, device=device)
        pending, self._pending = self._pending, []
        same = len({tuple(index.shape) for _, index in pending}) == 1
        if pending and same and [row for row, _ in pending] == list(range(len(self.layers))):
            groups = [(slice(None), torch.stack([index for _, index in pending]))]  # one batched marking
        else:
            groups = [(slice(row, row + 1), index.unsqueeze(0)) for row, index in pending]
        for rows, index in groups:  # index: (layers, routed rows, k)
            index = index.clamp(-1, sentinel).remainder(width)  # -1 -> E + 1; E stays E
            if self._valid is not None and self._valid.numel() == index.shape[1]:
                index = index.masked_fill(~self._valid.view(1, -1, 1), sentinel)
            hit[rows] = hit[rows].scatter(-1, index.reshape(index.shape[0], -1), True)
        self.last_hit = hit[:, : self.num_experts]
        return self.last_hit

    def _uniform(self, index: Tensor) -> Tensor:
        noise = torch.rand(index.shape[0], self.num_experts, generator=self._gen)
        return noise.argsort(dim=1)[:, : self.top_k].to(index.device, index.dtype)

    def _experts_hook(self, row: int) -> Any:
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict] | None:
            in_args = len(args) > 1
            if not in_args and "top_k_index" not in kwargs:
                raise TypeError(
                    f"MoECAPCallback: {type(module).__name__}.forward got neither a positional index nor top_k_index; "
                    f"expected experts(hidden_states, top_k_index, top_k_weights) (the transformers 5 MoE layout)"
                )
            index = args[1] if in_args else kwargs["top_k_index"]
            replaced = None
            if self.router == "uniform":
                replaced = index = self._uniform(index)
            self._pending.append((row, index))
            if replaced is None:
                return None
            if in_args:
                return (args[0], replaced, *args[2:]), kwargs
            return args, {**kwargs, "top_k_index": replaced}

        return hook

    def _gate_hook(self, row: int) -> Any:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            outputs = output if isinstance(output, tuple) else (output,)
            index = next((t for t in outputs if isinstance(t, Tensor) and not t.is_floating_point()), None)
            if index is None:  # logits only: re-run top-k (wrong for group-limited routing)
                logits = next(t for t in outputs if isinstance(t, Tensor))
                index = logits.topk(self.top_k, dim=-1).indices
            self._pending.append((row, index.reshape(-1, index.shape[-1])))

        return hook


class MoECAPCallback(Callback):
    """Sparsity-aware utilisation, cost and accuracy of a MoE causal LM during validate/test/predict.

    Args:
        hardware: a preset name (``zoo.moe_cap.hardware.PRESETS``), ``auto`` (the CUDA device name, else measured
            CPU), ``cpu_measured`` (copy bandwidth and matmul FLOP/s measured at stage start), or a custom dict
            (``name, bw_Bps, dense_flops|sparse_flops, price_usd, tdp_w``).
        dtype: storage dtype for bytes/element and the FLOP peak; ``auto`` reads the weights' dtype.
        padding: ``executed`` (what the run reads, pad rows included) or ``real`` (non-pad rows only).
        smfu_variant: which S-MFU is ``s_mfu``: ``paper`` (top-k + shared + router) or ``code`` (the public code's
            arithmetic: one routed expert, no router, its attention-score term); both are logged either way
            (``s_mfu_paper``/``s_mfu_code``).
        deepseek_shared: ``config`` (``n_shared_experts·moe_intermediate_size``) or ``code_2x``: the shared size of
            S-MBU and the paper's S-MFU.
        code_shared: the DeepSeek shared size of ``s_mfu_code``: ``code_2x`` (the public code's hard-coded
            ``2·moe_intermediate_size``, default) or ``config`` (as ``deepseek_shared``).
        kv_accounting: ``formula`` or ``as_cached`` (numel of the cache actually held).
        include_lm_head: count the output projection in bytes and FLOPs.
        include_router_bytes: count router weights in ``S_activated``.
        causal_halving: halve a prefill's attention-score square.
        sync: synchronise CUDA around each forward (off: latencies become launch times and S-MBU is not logged).
        stages: the stages measured.
        during_fit: also measure validation inside ``fit`` (sanity checking is never measured).
        hf_attr: attribute path of the causal LM in the LightningModule, or ``auto``.
        out_dir: folder of ``moecap_{stage}.json`` and ``cap_radar.png`` (None: the run folder).
        radar_with: other runs to compare on this stage's radar (``moecap_*.json`` records, run folders, or a
            ``zoo reproduce moe_cap`` report; read at stage start). None or empty: no radar is drawn, since one system
            alone has degenerate axes; the record's path and the comparison command are announced instead.
        system_name: the system's name in the record and the radar.
        router: ``traced`` or ``uniform`` (test/reproduce baseline: k distinct uniform experts per row).
        flop_check: run each phase's first forward under ``FlopCounterMode`` and log measured/analytic FLOPs.
        cost_cap: the radar's cost cap ``T`` (None: the max cost over the systems drawn).
        energy_scale: weight of the energy cost.
        capital_scale: weight of the capital cost.
        extra_capital_usd: capital of extra parts (offloading systems' CPU/DRAM/SSD).
        n_dev: devices (multiplies peaks, price and TDP).
        seed: seed of the uniform router.
        kv_dtype: storage dtype of the KV cache for its bytes; ``auto`` reads the cache tensors' element size (a
            quantised model keeps its cache in the compute dtype).
        mla_latent_expansion: count the FLOPs of transformers' per-forward re-expansion of the cached MLA latent
            (DeepSeek; ours: FlopCounterMode shows them; an absorbed-MLA server would set false).
    """

    def __init__(self, hardware: str | dict[str, Any] = "cpu_measured", dtype: str = "auto",
                 padding: Literal["executed", "real"] = "executed", smfu_variant: Literal["paper", "code"] = "paper",
                 deepseek_shared: Literal["config", "code_2x"] = "config",
                 kv_accounting: Literal["formula", "as_cached"] = "formula", include_lm_head: bool = False,
                 include_router_bytes: bool = False, causal_halving: bool = False, sync: bool = True,
                 stages: list[str] | None = None, during_fit: bool = False, hf_attr: str = "auto",
                 out_dir: str | None = None, system_name: str = "hf-eager",
                 router: Literal["traced", "uniform"] = "traced", flop_check: bool = False,
                 cost_cap: float | None = None, energy_scale: float = 1.2, capital_scale: float = 1.25,
                 extra_capital_usd: float = 0.0, n_dev: int = 1, seed: int = 0,
                 mla_latent_expansion: bool = True, kv_dtype: str = "auto",
                 code_shared: Literal["code_2x", "config"] = "code_2x",
                 radar_with: list[str] | None = None) -> None:  # fmt: skip
        stages = ["validate", "test", "predict"] if stages is None else list(stages)
        for stage in stages:
            checks.choice(checks.callback(self, "stages"), stage, tuple(_HOOK))
        choices = {"padding": (padding, ("executed", "real")), "smfu_variant": (smfu_variant, ("paper", "code")),
                   "deepseek_shared": (deepseek_shared, ("config", "code_2x")),
                   "kv_accounting": (kv_accounting, ("formula", "as_cached")),
                   "router": (router, ("traced", "uniform")),
                   "code_shared": (code_shared, ("code_2x", "config"))}  # fmt: skip
        for name, (value, allowed) in choices.items():
            checks.choice(checks.callback(self, name), value, allowed)
        checks.integer(checks.callback(self, "n_dev"), n_dev)
        if cost_cap is not None:
            checks.positive(checks.callback(self, "cost_cap"), cost_cap)
        for name, value in (("energy_scale", energy_scale), ("capital_scale", capital_scale),
                            ("extra_capital_usd", extra_capital_usd)):  # fmt: skip
            checks.non_negative(checks.callback(self, name), value)
        for name, value in (("dtype", dtype), ("kv_dtype", kv_dtype)):
            if value != "auto" and str(value).removeprefix("torch.").lower() not in M.BYTES_PER_ELEMENT:
                checks.fail(checks.callback(self, name), value, f"auto or one of {sorted(M.BYTES_PER_ELEMENT)}")
        _check_hardware(hardware)
        radar_with = [] if radar_with is None else radar_with
        if not isinstance(radar_with, list | tuple) or not all(isinstance(f, str) and f for f in radar_with):
            checks.fail(checks.callback(self, "radar_with"), radar_with, "a list of record files or run folders")
        self.hardware, self.dtype, self.padding, self.smfu_variant = hardware, dtype, padding, smfu_variant
        self.deepseek_shared, self.kv_accounting = deepseek_shared, kv_accounting
        self.include_lm_head, self.include_router_bytes, self.causal_halving = (include_lm_head, include_router_bytes,
                                                                                 causal_halving)  # fmt: skip
        self.sync, self.stages, self.during_fit, self.hf_attr = sync, stages, during_fit, hf_attr
        self.out_dir, self.system_name, self.router, self.flop_check = out_dir, system_name, router, flop_check
        self.cost_cap, self.energy_scale, self.capital_scale = cost_cap, energy_scale, capital_scale
        self.extra_capital_usd, self.n_dev, self.seed = extra_capital_usd, n_dev, seed
        self.mla_latent_expansion, self.kv_dtype = mla_latent_expansion, kv_dtype
        self.code_shared, self.radar_with = code_shared, list(radar_with)
        #: The systems of ``radar_with``, read at stage start.
        self._others: list[dict[str, Any]] = []
        self._announced = False
        #: Stage -> the last stage's record (what ``moecap_{stage}.json`` holds).
        self.results: dict[str, dict[str, Any]] = {}
        self._trace: RouterTrace | None = None
        self._stage: str | None = None
        self._start = 0.0
        self._spec: Any = None
        self._shape: M.MoEShape | None = None
        self._dtype = "fp32"

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    def _begin(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        from zoo.moe_cap.hardware import resolve_hardware
        from zoo.moe_cap.model import shape_of

        if stage not in self.stages or (trainer.sanity_checking or (
                trainer.state.fn == "fit" and not self.during_fit)):  # fmt: skip
            return
        self._end()
        self._others = self._load_others()  # a bad radar_with fails before the CPU is measured
        model = find_hf_model(pl_module, self.hf_attr)
        self._shape = shape_of(model, self.deepseek_shared)
        self._dtype = self._storage_dtype(model)
        self._spec = resolve_hardware(self.hardware, dtype=self._dtype, n_dev=self.n_dev)
        self._spec.peak_flops(self._dtype)  # a spec without this dtype's peak fails now, not after the stage
        if self._spec.price_usd is None or self._spec.tdp_w is None:
            raise ValueError(
                f"MoECAPCallback(hardware={self._spec.name!r}): the spec has no price_usd/tdp_w, which the cost "
                f"model needs; pass a custom dict with price_usd and tdp_w (see zoo.moe_cap.hardware.custom_spec)"
            )
        self._trace = RouterTrace(
            model, self._shape.num_experts, self._shape.top_k, padding=self.padding, router=self.router,
            sync=self.sync, sliding_window=self._shape.sliding_window, seed=self.seed, flop_check=self.flop_check,
            flop_modules=r"\.layers\.\d+$|lm_head$" if self.include_lm_head else r"\.layers\.\d+$",
        ).attach()  # fmt: skip
        if self._shape.is_moe and len(self._trace.layers) != len(self._shape.sparse_layers):
            self._end()
            raise ValueError(
                f"MoECAPCallback: found experts on layers {self._trace.layers} but the config's sparse layers are "
                f"{self._shape.sparse_layers}"
            )
        self._stage, self._start = stage, time.perf_counter()

    def _load_others(self) -> list[dict[str, Any]]:
        """The systems of ``radar_with`` (an unreadable one fails at stage start, naming the knob)."""
        if not self.radar_with:
            return []
        from zoo.moe_cap.cap_radar import load_systems

        try:
            return load_systems(self.radar_with)
        except (ValueError, FileNotFoundError) as err:
            raise ValueError(f"{checks.callback(self, 'radar_with')}: {err}") from err

    def _end(self) -> None:
        if self._trace is not None:
            self._trace.detach()
        self._trace, self._stage = None, None

    def _storage_dtype(self, model: nn.Module) -> str:
        if self.dtype != "auto":
            M.bytes_per_element(self.dtype)  # validates
            return self.dtype
        dtype = next(model.parameters()).dtype
        known = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8",
                 torch.uint8: "int8", torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8"}  # fmt: skip
        if dtype not in known:
            raise ValueError(
                f"MoECAPCallback(dtype='auto'): the weights are {dtype}, which has no byte width here; pass dtype= "
                f"one of {sorted(M.BYTES_PER_ELEMENT)}"
            )
        return known[dtype]

    def _finish(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._trace is None or self._stage != stage:
            return
        result = self.summarise(self._trace.records, e2e_s=time.perf_counter() - self._start,
                                accuracy=_accuracy(pl_module, stage))  # fmt: skip
        self.results[stage] = result
        if stage != "predict":  # predict cannot self.log
            for key, value in result["means"].items():  # every key on every rank (NaN where a phase had none)
                if isinstance(value, int | float):
                    pl_module.log(f"{_prefix(stage)}/moecap/{key}", float(value), sync_dist=trainer.world_size > 1)
        self._write(trainer, stage, result)

    def summarise(self, records: list[dict[str, Any]], e2e_s: float, accuracy: dict[str, float] | None = None,
                  ) -> dict[str, Any]:  # fmt: skip
        """Per-forward metrics, phase means, cost and accuracy of a stage's records (the JSON record)."""
        from zoo.moe_cap.hardware import cost_usd

        spec, shape = self._spec, self._shape
        bytes_w = M.bytes_per_element(self._dtype)
        peak = spec.peak_flops(self._dtype)
        per_forward = []
        for rec in records:
            bytes_kv = (M.bytes_per_element(self.kv_dtype) if self.kv_dtype != "auto"
                        else rec.get("kv_element_bytes") or bytes_w)  # fmt: skip
            values = M.forward_metrics(
                rec, shape, bw_Bps=spec.bw_Bps, peak_flops=peak, n_dev=spec.n_dev, bytes_w=bytes_w, bytes_kv=bytes_kv,
                include_router_bytes=self.include_router_bytes, include_lm_head=self.include_lm_head,
                causal_halving=self.causal_halving, kv_accounting=self.kv_accounting,
                latent_expansion=self.mla_latent_expansion, code_shared=self.code_shared,
            )  # fmt: skip
            values["s_mfu_paper"] = values["s_mfu"]
            if self.smfu_variant == "code":
                values["s_mfu"] = values["s_mfu_code"]
            if "flops_measured" in rec:
                values["flops_ratio"] = rec["flops_measured"] / values["flops"] if values["flops"] else math.nan
            per_forward.append(values)
        means: dict[str, float] = {}
        timed = [(r, v) for r, v in zip(records, per_forward, strict=True) if "flops_measured" not in r]
        for phase in ("prefill", "decode"):
            pairs = [(r, v) for r, v in timed if r["phase"] == phase]
            keys = [*PHASE_METRICS, "s_mfu_paper"] + (["s_mbu_shared2x"] if shape.family == "deepseek_v3" else [])
            for key in keys:
                if key in ("s_mbu", "mbu_dense", "s_mbu_shared2x") and not self.sync:
                    continue
                means[f"{key}_{phase}"] = M.mean([v[key] for _, v in pairs if key in v])
            checked = [v["flops_ratio"] for r, v in zip(records, per_forward, strict=True)
                       if r["phase"] == phase and "flops_ratio" in v]  # fmt: skip
            if checked:
                means[f"flops_measured_over_analytic_{phase}"] = checked[0]
        means["ttft_s"] = M.mean([r["latency_s"] for r, _ in timed if r["phase"] == "prefill"])
        means["tpot_s"] = M.mean([r["latency_s"] for r, _ in timed if r["phase"] == "decode"])
        generated = sum(r["rows"] for r in records if r["phase"] in ("prefill", "decode"))
        means["tokens_per_s"] = generated / e2e_s if e2e_s > 0 else math.nan
        means["e2e_s"] = e2e_s
        costs = cost_usd(spec, e2e_s, energy_scale=self.energy_scale, capital_scale=self.capital_scale,
                         extra_capital_usd=self.extra_capital_usd)  # fmt: skip
        means.update(costs)
        if accuracy:
            means.update(accuracy)
        if spec.name == "cpu_measured" and (high := [k for k, v in means.items()
                                                     if k.startswith("s_mbu") and v > 1.05]):  # fmt: skip
            warnings.warn(f"{high} above 1.05: cpu_measured peaks are achievable, not theoretical", stacklevel=2)
        knobs = {k: getattr(self, k) for k in ("padding", "smfu_variant", "deepseek_shared", "kv_accounting",
                                                "include_lm_head", "include_router_bytes", "causal_halving", "sync",
                                                "router", "flop_check", "n_dev",
                                                "mla_latent_expansion", "kv_dtype", "code_shared")}  # fmt: skip
        return {
            "system_name": self.system_name, "spec": spec.to_dict(), "dtype": self._dtype, "knobs": knobs,
            "shape": shape.to_dict(), "means": means, "records": records, "per_forward": per_forward,
        }  # fmt: skip

    def _write(self, trainer: Trainer, stage: str, result: dict[str, Any]) -> None:
        folder = Path(self.out_dir or run_dir(trainer))
        folder.mkdir(parents=True, exist_ok=True)
        rank = f"_rank{trainer.global_rank}" if trainer.world_size > 1 else ""  # DDP: one record per rank
        record = folder / f"moecap_{stage}{rank}.json"
        record.write_text(json.dumps(_jsonable(result), indent=1))
        means = result["means"]
        if not all(math.isfinite(means.get(k, math.nan)) for k in ("tpot_s", "cost_usd")):
            return
        system = {"system_name": self.system_name, "tpot_s": means["tpot_s"], "cost_usd": means["cost_usd"],
                  "em": means.get("em", 0.0)}  # fmt: skip
        if any(other["system_name"] == self.system_name for other in self._others):
            system["system_name"] += " (this run)"
        if self._others:
            from zoo.moe_cap.cap_radar import draw_radar

            title = f"CAP radar: {self.system_name} ({stage}) and {len(self._others)} other system(s)"
            draw_radar([system, *self._others], folder / f"cap_radar{rank}.png", cost_cap=self.cost_cap, title=title)
        elif not self._announced:  # one system's radar would score 100 / 20 / 20 whatever it measured
            self._announced = True
            say(f"{record}: compare it with other runs on one CAP radar: python -m zoo.moe_cap.cap_radar {record} "
                f"OTHER_RUN.json ... --out cap_radar.png (or set MoECAPCallback.radar_with)")  # fmt: skip

    # -- Lightning hooks ----------------------------------------------------------------------------------------------
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._begin(trainer, pl_module, "validate")

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._begin(trainer, pl_module, "test")

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._begin(trainer, pl_module, "predict")

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._finish(trainer, pl_module, "validate")

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._finish(trainer, pl_module, "test")

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._finish(trainer, pl_module, "predict")

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._end()

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._end()

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:  # noqa: D102
        self._end()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:  # noqa: D102
        self._end()


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA, XPU, MPS ...), so a time stamp closes the forward."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif hasattr(torch, "accelerator") and torch.accelerator.is_available():
        torch.accelerator.synchronize(device)


def _check_hardware(hardware: str | dict[str, Any]) -> None:
    """Validate ``hardware`` at construction (a preset name, auto, cpu_measured or a custom dict)."""
    from zoo.moe_cap.hardware import PRESETS, custom_spec

    if isinstance(hardware, dict):
        problem = None
        try:
            custom_spec(hardware)
        except ValueError as err:
            problem = str(err)
        if problem is not None:
            raise ValueError(f"{checks.callback(MoECAPCallback, 'hardware')}: {problem}")
    elif hardware not in ("auto", "cpu_measured") and hardware.lower() not in {k.lower() for k in PRESETS}:
        checks.fail(checks.callback(MoECAPCallback, "hardware"), hardware,
                    f"auto, cpu_measured, a custom dict or one of the presets {sorted(PRESETS)}")  # fmt: skip


def _prefix(stage: str) -> str:
    return {"validate": "val", "test": "test", "predict": "predict"}[stage]


@runtime_checkable
class ReportsAccuracy(Protocol):
    """Optional for :class:`MoECAPCallback`: a module that scores its own predictions (the radar's accuracy axis)."""

    def moecap_accuracy(self, stage: str) -> dict[str, float] | None:
        """EM/F1 of the stage's predictions."""
        ...


def _accuracy(pl_module: LightningModule, stage: str) -> dict[str, float] | None:
    """EM/F1 from the module's ``moecap_accuracy(stage)`` (:class:`ReportsAccuracy`; None if the module has none)."""
    if isinstance(pl_module, ReportsAccuracy) and callable(pl_module.moecap_accuracy):
        return pl_module.moecap_accuracy(stage)
    return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
