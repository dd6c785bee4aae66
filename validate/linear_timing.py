"""The FP8 draft's runtime linears timed as an engine runs them, beside BF16 and the cost model's floor.

Each runtime layer (q/k/v and gate/up fused, as vLLM serves them) at each batch size, every variant captured as a
CUDA graph and replayed (``validate/gpu_timing.py``: L2 flushed before each replay, median):

- ``bf16_ms``: ``F.linear`` on the dequantized weight.
- ``fp8_ms``: the layer as ``Fp8Linear`` runs it: per-token quantization fused (``runtime/fp8_fused.py``), or the
  static scale, then ``torch._scaled_mm``. Its totals are the report's ``total_fp8_ms`` / ``fp8_over_bf16``.
- ``gemm_only_ms``: rowwise ``_scaled_mm`` alone on operands quantized beforehand (what PTPC's GEMM costs).
- ``tensorwise_ms``: ``_scaled_mm`` alone with two scalar scales (what a static per-tensor scheme's GEMM costs).
- ``vllm_ms`` (where vLLM imports): vLLM's own FP8 linear, ``scaled_fp8_quant`` per token + ``cutlass_scaled_mm``
  (``engines/vllm/fp8_ops.py``).
- ``eager_fp8_ms``: eager per-token quantization + GEMM as plain launches, not a graph: a diagnostic of launch
  overhead, not what an engine pays.

:func:`timing_report` builds the report from those numbers (no GPU needed); :func:`timing_lines` prints it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from eagle3_quant.cost import DeviceProfile, WeightTensor, quantize_modules, step_cost
from eagle3_quant.engines.vllm.fp8_ops import vllm_fp8_linear
from eagle3_quant.runtime import fp8, fp8_fused
from eagle3_quant.runtime.fp8_linear import Fp8Linear
from eagle3_quant.validate.gpu_timing import ITERS, device_profile, eager_ms, graph_ms

GRAPHED = ("bf16_ms", "fp8_ms", "gemm_only_ms", "tensorwise_ms", "vllm_ms")
COLUMNS = (*GRAPHED, "eager_fp8_ms")
TOTALS = {"bf16_ms": "total_bf16_ms", "fp8_ms": "total_fp8_ms", "gemm_only_ms": "total_gemm_only_ms",
          "tensorwise_ms": "total_tensorwise_ms", "eager_fp8_ms": "total_eager_fp8_ms", "vllm_ms": "total_vllm_ms"}


def time_runtime_layers(layers: Sequence, platform, batches: Sequence[int], iters: int = ITERS) -> dict:
    """The timing report of `layers` (``kernel_probe.Fp8Weight``: module, weight, scale, input_scale)."""
    dtype = torch.float8_e4m3fnuz if platform.needs_fnuz else torch.float8_e4m3fn
    vllm_run, vllm_label = vllm_fp8_linear()
    entries = []
    for w in layers:
        entry, vllm_error = _time_layer(w, dtype, platform.device, batches, iters, vllm_run)
        if vllm_error:
            vllm_run, vllm_label = None, f"vLLM's FP8 linear failed on {w.module}: {vllm_error}"
            for done in entries:
                done.pop("vllm_ms", None)
        entries.append(entry)
    static = {w.input_scale is not None for w in layers}
    scheme = "mixed" if len(static) > 1 else "static per-tensor" if static == {True} else "dynamic per-token"
    report = timing_report(batches, entries, profile=device_profile(platform.name),
                           quant_method=fp8_fused.quant_method(platform.device), scheme=scheme,
                           vllm=vllm_label if vllm_run else None, vllm_skipped=None if vllm_run else vllm_label,
                           iters=iters)
    fallbacks = {k: v for k, v in fp8_fused.FAILURES.items() if k.startswith(f"{platform.device} ")}
    if fallbacks:                                   # a fused way that could not run here, and why
        report["quant_fallbacks"] = fallbacks
    return report


def _time_layer(w, dtype: torch.dtype, device: str, batches: Sequence[int], iters: int,
                vllm_run: Callable | None) -> tuple[dict, str | None]:
    """One layer's medians by batch size, and why vLLM's linear failed on it (None: it ran or was not asked)."""
    weight, scale, input_scale = w.weight, w.scale, w.input_scale
    if dtype == torch.float8_e4m3fnuz:
        weight, scale, input_scale = fp8.e4m3fn_to_e4m3fnuz(weight, scale, input_scale)
    layer = Fp8Linear(weight, scale, input_scale)
    bf16 = fp8.dequantize(w.weight, w.scale, torch.bfloat16)
    entry: dict = {"layer": w.module, "shape": list(weight.shape), **{key: [] for key in COLUMNS}}
    vllm_error = None
    for m in batches:
        x = _activations(m, weight.shape[1], device, seed=m)
        for key, fn in _variants(layer, bf16, x, vllm_run if vllm_error is None else None).items():
            timer = eager_ms if key == "eager_fp8_ms" else graph_ms
            if key != "vllm_ms":
                entry[key].append(timer(fn, iters))
                continue
            try:
                entry[key].append(timer(fn, iters))
            except Exception as exc:   # vLLM's kernels are an extra column: say why, keep the rest
                vllm_error = f"{type(exc).__name__}: {str(exc)[:200]}"
    if vllm_run is None or vllm_error:
        entry.pop("vllm_ms")
    return entry, vllm_error


def _variants(layer: Fp8Linear, bf16: torch.Tensor, x: torch.Tensor, vllm_run: Callable | None,
              ) -> dict[str, Callable[[], torch.Tensor]]:
    weight, n = layer.weight, layer.out_features
    a, scale_a = fp8.quantize_per_token(x, weight.dtype)              # operands quantized beforehand
    rowwise_b = layer.weight_scale.expand(n).reshape(1, n).contiguous()
    scalar_a, scalar_b = scale_a.amax().reshape(()), layer.weight_scale.amax().reshape(())
    variants = {
        "bf16_ms": lambda: F.linear(x, bf16),
        "fp8_ms": lambda: layer(x),
        "gemm_only_ms": lambda: fp8.scaled_mm(a, weight.t(), scale_a, rowwise_b),
        "tensorwise_ms": lambda: fp8.scaled_mm(a, weight.t(), scalar_a, scalar_b),
    }
    if vllm_run is not None:
        column = layer.weight_scale.expand(n).reshape(n, 1).contiguous()
        variants["vllm_ms"] = lambda: vllm_run(x, weight, column)
    variants["eager_fp8_ms"] = lambda: _eager_fp8(layer, x)
    return variants


def _eager_fp8(layer: Fp8Linear, x: torch.Tensor) -> torch.Tensor:
    if layer.input_scale is None:
        a, scale_a = fp8.quantize_per_token(x, layer.weight.dtype)
    else:
        a, scale_a = fp8.quantize_static(x, layer.input_scale, layer.weight.dtype)
    return fp8.fp8_linear(a, scale_a, layer.weight, layer.weight_scale)


def _activations(rows: int, k: int, device: str, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, k, generator=gen).to(device, torch.bfloat16)


def layer_floors(module: str, shape: Sequence[int], profile: DeviceProfile) -> dict[str, float]:
    """The cost model's floor (weight bytes at peak HBM bandwidth) of one linear: BF16, PTPC, per-tensor FP8."""
    bf16 = [WeightTensor(f"{module}.weight", tuple(shape), "BF16")]
    forms = {"bf16": bf16, "fp8": quantize_modules(bf16, [module]),
             "tensorwise": quantize_modules(bf16, [module], per_channel=False, static_input=True)}
    return {name: step_cost(tensors, name).floor_ms(profile) for name, tensors in forms.items()}


def timing_report(batches: Sequence[int], layers: list[dict], *, profile: DeviceProfile | None, quant_method: str,
                  scheme: str, vllm: str | None = None, vllm_skipped: str | None = None, iters: int = ITERS) -> dict:
    """The ``timing`` object of the kernel check from per-layer medians (lists by batch size, keys of
    :data:`COLUMNS`; a column missing from any layer has no total)."""
    n = len(batches)
    layers = [dict(entry) for entry in layers]
    floors: dict[str, float] | None = None
    if profile is not None:
        floors = {"bf16": 0.0, "fp8": 0.0, "tensorwise": 0.0}
        for entry in layers:
            for name, ms in layer_floors(entry["layer"], entry["shape"], profile).items():
                entry[f"floor_{name}_ms"] = ms
                floors[name] += ms
    totals = {TOTALS[key]: _total(layers, key, n) for key in COLUMNS}
    report = {
        "batch_sizes": list(batches), "layers": layers, **{k: v for k, v in totals.items() if v is not None},
        "fp8_over_bf16": _ratio(totals["total_fp8_ms"], totals["total_bf16_ms"]),
        "gemm_only_over_bf16": _ratio(totals["total_gemm_only_ms"], totals["total_bf16_ms"]),
        "fp8_over_gemm_only": _ratio(totals["total_fp8_ms"], totals["total_gemm_only_ms"]),
        "tensorwise_over_bf16": _ratio(totals["total_tensorwise_ms"], totals["total_bf16_ms"]),
        "eager_fp8_over_bf16": _ratio(totals["total_eager_fp8_ms"], totals["total_bf16_ms"]),
        "floor_ms": None if floors is None else {"device_profile": profile.name, **floors},
        "quant_method": quant_method, "scheme": scheme, "method": "cuda_graph_replay", "iters": iters,
        "includes": f"per runtime layer, each captured as a CUDA graph and replayed (median of {iters}, L2 flushed "
                    f"before each): fp8 = the layer as Fp8Linear runs it ({scheme} quantization"
                    f"{f', fused: {quant_method}' if scheme != 'static per-tensor' else ''}) + torch._scaled_mm; "
                    "bf16 = F.linear; gemm_only / tensorwise = _scaled_mm alone on operands quantized beforehand "
                    "(rowwise / two scalar scales); eager_fp8 = eager quantization + GEMM as plain launches (a "
                    "diagnostic, not graphed)",
    }
    if floors is not None:
        report["bf16_over_floor"] = _ratio(totals["total_bf16_ms"], [floors["bf16"]] * n)
        report["fp8_over_floor"] = _ratio(totals["total_fp8_ms"], [floors["fp8"]] * n)
    if vllm is not None and totals["total_vllm_ms"] is not None:
        report["vllm"] = {"label": vllm, "total_ms": totals["total_vllm_ms"],
                          "over_bf16": _ratio(totals["total_vllm_ms"], totals["total_bf16_ms"])}
    else:
        report["vllm"] = {"skipped": vllm_skipped or "not measured"}
    return report


def _total(layers: list[dict], key: str, n: int) -> list[float] | None:
    if not layers or any(len(entry.get(key) or ()) != n for entry in layers):
        return None
    return [sum(entry[key][i] for entry in layers) for i in range(n)]


def _ratio(top: list[float] | None, bottom: list[float] | None) -> list[float | None] | None:
    if top is None or bottom is None:
        return None
    return [t / b if b else None for t, b in zip(top, bottom, strict=True)]


def fastest_fp8(timing: dict) -> tuple[str, float] | None:
    """Which FP8 way is fastest against BF16 on this GPU at its worst batch size: (label, worst ratio); None
    unless two ways were timed."""
    ways = {"PTPC (per-token quantization + rowwise GEMM)": timing.get("fp8_over_bf16"),
            "static per-tensor FP8 (tensorwise GEMM)": timing.get("tensorwise_over_bf16"),
            "vLLM's own PTPC linear": (timing.get("vllm") or {}).get("over_bf16")}
    worst = {label: max(r for r in ratios if r is not None) for label, ratios in ways.items()
             if ratios and any(r is not None for r in ratios)}
    if len(worst) < 2:
        return None
    label = min(worst, key=worst.get)
    return label, worst[label]


def timing_lines(timing: dict) -> list[str]:
    """What the kernel check prints of its ``timing`` object: the ratios by batch size, then how it was timed."""
    batches = timing["batch_sizes"]

    def row(label: str, ratios: list | None) -> str | None:
        if not ratios:
            return None
        return f"{label}: " + ", ".join(f"{b}:{r:.2f}" if r is not None else f"{b}:-"
                                        for b, r in zip(batches, ratios, strict=True))

    floor = timing.get("floor_ms") or {}
    vllm = timing.get("vllm") or {}
    lines = [row("FP8/BF16 time by batch size", timing.get("fp8_over_bf16")),
             row("  GEMM alone (rowwise)/BF16", timing.get("gemm_only_over_bf16")),
             row("  quantization + GEMM/GEMM alone", timing.get("fp8_over_gemm_only")),
             row("  tensorwise GEMM (static per-tensor)/BF16", timing.get("tensorwise_over_bf16")),
             row(f"  BF16/bandwidth floor ({floor.get('device_profile')})", timing.get("bf16_over_floor")),
             row("  vLLM's FP8 linear/BF16", vllm.get("over_bf16")),
             row("  eager quantization + GEMM/BF16 (diagnostic: plain launches)", timing.get("eager_fp8_over_bf16"))]
    fastest = fastest_fp8(timing)
    if fastest:
        lines.append(f"  fastest FP8 way on this GPU: {fastest[0]}, at most {fastest[1]:.2f}x BF16's time")
    if timing.get("method"):
        lines.append(f"  ({timing['scheme']} quantization: {timing['quant_method']}; CUDA-graph replays, median "
                     f"of {timing['iters']}; vLLM: {vllm.get('label') or vllm.get('skipped')})")
    return [line for line in lines if line]
