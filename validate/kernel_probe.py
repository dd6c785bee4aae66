"""What runs inside the kernel check: the draft's FP8 linears through ``torch._scaled_mm`` rowwise on one device.

- :func:`numerics`: every quantized linear, activations quantized per token, bf16 out, against the dequantized
  reference on the same device (and, on gfx942, after vLLM's e4m3fn -> e4m3fnuz conversion).
- :func:`profile_kernels`: the GPU kernels the FP8 GEMMs launched, from ``torch.profiler`` (:func:`profiled`).
- :func:`time_linears`: vLLM's runtime layers (q/k/v and gate/up fused) at decode batch sizes, timed as an engine
  runs them (CUDA-graph replays, per-token quantization fused) against BF16 ``F.linear`` and the cost model's floor
  (``validate/linear_timing.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.reading.artifact import read_artifact
from eagle3_quant.reading.layout import FUSED_GROUPS, MLA_FUSED_GROUPS
from eagle3_quant.runtime import fp8
from eagle3_quant.validate.platform import Platform

NUMERICS_ROWS = (1, 16, 64)
TIMING_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GPU_TOLERANCE = 1e-2          # max |out - ref| / max |ref|: a bf16 ulp is 2^-8, accumulation order differs
# CPU: torch's reference _scaled_mm and dequantize-then-matmul both sum in fp32, in different orders (~1 fp32 ulp
# apart); an output on a bf16 rounding boundary then lands one bf16 ulp (<= 2^-8 of the largest output) away.
CPU_TOLERANCE = 2.0 ** -8
FNUZ_TOLERANCE = 3e-2         # activations are re-quantized to fnuz (max 224): one more rounding


@dataclass(frozen=True)
class Fp8Weight:
    module: str
    role: str
    weight: torch.Tensor          # float8_e4m3fn [N, K]
    scale: torch.Tensor           # fp32 [N] or [1]
    input_scale: torch.Tensor | None = None   # static per-tensor activation scale (--scheme fp8)

    def quantize_input(self, x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.input_scale is None:
            return fp8.quantize_per_token(x, dtype)
        doubled = 2.0 if dtype == torch.float8_e4m3fnuz else 1.0   # fnuz values are half: vLLM doubles scales
        return fp8.quantize_static(x, self.input_scale * doubled, dtype)



def read_fp8_weights(out: Path, device: str) -> list[Fp8Weight]:
    art = read_artifact(out)
    weights = []
    for module in art.fp8_modules:
        w_info = art.checkpoint.tensors[module + ".weight"]
        weight = w_info.load().to(device)
        scale = art.checkpoint.tensors[module + ".weight_scale"].load().to(device, torch.float32).reshape(-1)
        i_info = art.checkpoint.tensors.get(module + ".input_scale")
        input_scale = i_info.load().to(device, torch.float32).reshape(1) if i_info is not None else None
        weights.append(Fp8Weight(module, art.role_of(module), weight, scale, input_scale))
    return weights


def activations(rows: int, k: int, device: str, seed: int) -> torch.Tensor:
    """Seeded standard-normal bf16 activations [rows, k] on `device` (drawn on the CPU: the same on every device)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, k, generator=gen).to(device, torch.bfloat16)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref|."""
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-30))


def numerics(weights: list[Fp8Weight], platform: Platform) -> list[dict]:
    rows = []
    tolerance = CPU_TOLERANCE if platform.kind == "cpu" else GPU_TOLERANCE
    for i, w in enumerate(weights):
        for m in NUMERICS_ROWS:
            x = activations(m, w.weight.shape[1], platform.device, seed=1000 * i + m)
            a, scale_a = w.quantize_input(x)
            out = fp8.fp8_linear(a, scale_a, w.weight, w.scale)
            ref = fp8.dequantized_matmul(a, scale_a, w.weight, w.scale)
            entry = {"module": w.module, "rows": m, "format": "e4m3fn", "max_rel_error": relative_error(out, ref),
                     "bit_exact": bool(torch.equal(out, ref)), "tolerance": tolerance}
            entry["ok"] = entry["max_rel_error"] <= tolerance
            rows.append(entry)
            if platform.needs_fnuz:
                wz, sz, _ = fp8.e4m3fn_to_e4m3fnuz(w.weight, w.scale)
                az, scale_az = w.quantize_input(x, torch.float8_e4m3fnuz)
                err = relative_error(fp8.fp8_linear(az, scale_az, wz, sz), ref)
                rows.append({"module": w.module, "rows": m, "format": "e4m3fnuz", "max_rel_error": err,
                             "bit_exact": False, "tolerance": FNUZ_TOLERANCE, "ok": err <= FNUZ_TOLERANCE})
    return rows


def _run_fp8(w: Fp8Weight, x: torch.Tensor, fnuz: bool) -> torch.Tensor:
    if fnuz:
        wz, sz, _ = fp8.e4m3fn_to_e4m3fnuz(w.weight, w.scale)
        a, scale_a = w.quantize_input(x, torch.float8_e4m3fnuz)
        return fp8.fp8_linear(a, scale_a, wz, sz)
    a, scale_a = w.quantize_input(x)
    return fp8.fp8_linear(a, scale_a, w.weight, w.scale)


def profiled(run) -> dict:
    """``run()`` once to warm up (heuristics and workspace outside the trace), then under ``torch.profiler``: the GPU
    kernel names it launched and the aten ops it called, by count."""
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels: dict[str, int] = {}
    ops: dict[str, int] = {}
    for event in prof.events():
        table = kernels if event.device_type == torch.autograd.DeviceType.CUDA else ops
        table[event.name] = table.get(event.name, 0) + 1
    return {"kernels": kernels, "ops": {k: v for k, v in ops.items() if k.startswith("aten::")}}


def profile_kernels(weights: list[Fp8Weight], platform: Platform) -> dict:
    """GPU kernel names launched while the FP8 linears ran (quantization kernels included), by count."""
    xs = [activations(16, w.weight.shape[1], platform.device, seed=7) for w in weights]

    def run():
        for w, x in zip(weights, xs, strict=True):
            _run_fp8(w, x, platform.needs_fnuz)

    return profiled(run)


def runtime_layers(weights: list[Fp8Weight]) -> list[Fp8Weight]:
    """vLLM's fused runtime layers: q/k/v -> qkv_proj and gate/up -> gate_up_proj (weights concatenated). Shards
    with one weight scale each keep one, the largest, as vLLM's requantization to the max scale does (for timing:
    the weights are not requantized)."""
    by_role = {w.role: w for w in weights}
    fused, used = [], set()
    for name, roles in {**FUSED_GROUPS, **MLA_FUSED_GROUPS}.items():
        if all(r in by_role for r in roles):
            parts = [by_role[r] for r in roles]
            if all(p.scale.numel() == 1 for p in parts):
                scale = torch.stack([p.scale.reshape(()) for p in parts]).amax().reshape(1)
            else:
                scale = torch.cat([p.scale.expand(p.weight.shape[0]) for p in parts])
            static = [p.input_scale for p in parts if p.input_scale is not None]
            shared = torch.stack(static).amax().reshape(1) if len(static) == len(parts) else None
            fused.append(Fp8Weight(name, name, torch.cat([p.weight for p in parts]), scale, shared))
            used.update(roles)
    return fused + [w for w in weights if w.role not in used]


def time_linears(weights: list[Fp8Weight], platform: Platform, batches=TIMING_BATCHES) -> dict:
    """The ``timing`` object: each runtime layer as CUDA-graph replays of BF16, FP8 (quantization + GEMM), the GEMM
    alone rowwise and tensorwise (and vLLM's own FP8 linear where vLLM imports), totals, ratios, floors."""
    from eagle3_quant.validate.linear_timing import time_runtime_layers

    return time_runtime_layers(runtime_layers(weights), platform, batches)
