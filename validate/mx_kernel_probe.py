"""The MX GEMM check: the native MX GEMM vLLM 0.33 runs for an MX draft's linears on gfx950 (MI355X), against the
dequantized reference, with the FP8 path's kind of bound.

What vLLM 0.33 runs on ROCm for a ``QuarkOCP_MX`` linear (``kernels/linear/__init__.py``):
- MXFP4 weights, dynamic MXFP4 activations: ``AiterMxfp4LinearKernel`` when ``current_platform.supports_mx()``
  (gfx95*) and AITER is found: AITER's ``dynamic_mxfp4_quant`` on the activations, then its Triton
  ``gemm_afp4wfp4(x_q, weight, x_scale, weight_scale.T)``, the weight scales stored transposed-contiguous
  (``process_weights_after_loading``; the preshuffled ASM ``gemm_a4w4`` only for AITER-tuned shapes). This
  probe runs that Triton path, as vLLM calls it.
- MXFP6 weights (any activations): ROCm lists only ``EmulationMxfp6LinearKernel`` (dequantize + BF16 GEMM): there is
  no native MX GEMM to check; ``vllm_load`` runs that exact kernel.
- MXFP4 weights with static FP8 activations (``QuarkW4A8_MXFP4_FP8``): AITER's ``gemm_a8wfp4``, not probed here.
Without AITER vLLM falls back to ``EmulationMxfp4LinearKernel`` (again what ``vllm_load`` runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.runtime import mx
from eagle3_quant.validate.gemm_devices import NATIVE_MXFP4
from eagle3_quant.validate.platform import Platform

MX_GEMM_ROWS = (1, 16, 64)
# max |out - ref| / max |ref|, as the FP8 path's GPU_TOLERANCE: bf16 output, another accumulation order; plus
# AITER's own activation quantization (same E8M0 "even" scale, its own element rounding on ties)
MX_TOLERANCE = 2e-2


@dataclass(frozen=True)
class MxGemmPlan:
    gemm: str | None         # the native GEMM to run, None when it is skipped
    reason: str


def mx_gemm_plan(platform: Platform, quant_config: dict, aiter_found: bool) -> MxGemmPlan:
    """Whether this device runs the MX artifact's native GEMM, and why not when it does not."""
    global_config = quant_config.get("global_quant_config") or {}
    weight, inputs = global_config.get("weight") or {}, global_config.get("input_tensors") or {}
    element = weight.get("dtype")
    what = {"fp4": "MXFP4", "fp6_e2m3": "MXFP6 E2M3", "fp6_e3m2": "MXFP6 E3M2"}.get(element, str(element))
    if platform.kind != "rocm" or not (platform.arch or "").startswith("gfx950"):
        return MxGemmPlan(None, f"{what} artifact: this is {platform.name} ({platform.arch or platform.kind}): native "
                                "MX GEMMs need gfx950 (MI355X); vllm_load ran vLLM's emulation kernel instead")
    if element != "fp4":
        return MxGemmPlan(None, f"{what} artifact on gfx950: vLLM 0.33 lists only EmulationMxfp6LinearKernel for "
                                "ROCm (dequantize + BF16 GEMM), no native MXFP6 GEMM; vllm_load ran that kernel")
    if not (inputs.get("dtype") == "fp4" and inputs.get("is_dynamic")):
        return MxGemmPlan(None, "MXFP4 weights with static FP8 activations on gfx950: vLLM runs AITER's gemm_a8wfp4 "
                                "(QuarkW4A8_MXFP4_FP8), which this probe does not run")
    if not aiter_found:
        return MxGemmPlan(None, "MXFP4 artifact on gfx950 without AITER: vLLM 0.33 would fall back to "
                                "EmulationMxfp4LinearKernel (vllm_load ran it); install AITER to check the native GEMM")
    return MxGemmPlan(NATIVE_MXFP4, f"gfx950: {NATIVE_MXFP4}")


def mx_reference(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, element: str = "fp4",
                 input_element: str | None = "fp4") -> torch.Tensor:
    """What the MX GEMM must compute: the activations quantized and dequantized per block of 32 (Quark's "even"
    scale), times the dequantized weight, accumulated in fp32, bf16 out."""
    a = mx.quant_dequant_mx(x.float(), input_element) if input_element else x.float()
    return torch.nn.functional.linear(a, mx.dequantize_mx(weight, weight_scale, element, torch.float32)).to(
        torch.bfloat16)


def judge_mx_rows(rows: list[dict]) -> tuple[str, str]:
    """(status, reason) of the native MX GEMM from its numerics rows."""
    if not rows:
        return "failed", "the MX GEMM probe produced no result"
    bad = [r for r in rows if not r["ok"]]
    worst = max(r["max_rel_error"] for r in rows)
    if bad:
        return "failed", f"{NATIVE_MXFP4} differs from the dequantized reference: {bad[0]['module']} rows " \
                         f"{bad[0]['rows']} max relative error {bad[0]['max_rel_error']:.2e} > {MX_TOLERANCE}"
    return "passed", f"{NATIVE_MXFP4} ran every MX linear within {MX_TOLERANCE} of the dequantized reference " \
                     f"(max relative error {worst:.2e})"


def native_mxfp4_numerics(out: Path, device: str) -> dict:
    """On gfx950 with AITER: every MXFP4 linear of OUT through vLLM's native path, against `mx_reference`
    (``numerics``), then once more under the profiler (``kernels``: the GEMM kernel names, judged by
    validate/kernel_judgement.py judge_mx)."""
    from aiter.ops.triton.gemm_afp4wfp4 import gemm_afp4wfp4
    from aiter.ops.triton.quant import dynamic_mxfp4_quant

    from eagle3_quant.reading.artifact import read_artifact
    from eagle3_quant.validate.kernel_probe import activations, profiled, relative_error

    art = read_artifact(out)
    rows, calls = [], []
    for i, module in enumerate(art.mx_modules):
        weight = art.checkpoint.tensors[module + ".weight"].load().to(device)
        scale = art.checkpoint.tensors[module + ".weight_scale"].load().to(device)
        stored_scale = scale.T.contiguous()           # as AiterMxfp4LinearKernel.process_weights_after_loading
        for m in MX_GEMM_ROWS:
            x = activations(m, weight.shape[1] * 2, device, seed=1000 * i + m)

            def native(x=x, weight=weight, stored_scale=stored_scale, m=m) -> torch.Tensor:
                x_q, x_s = dynamic_mxfp4_quant(x)
                y = torch.empty(m, weight.shape[0], device=device, dtype=torch.bfloat16)
                gemm_afp4wfp4(x_q, weight, x_s, stored_scale.T, torch.bfloat16, y, None)
                return y

            calls.append(native)
            err = relative_error(native(), mx_reference(x, weight, scale))
            rows.append({"module": module, "rows": m, "format": "mxfp4 x mxfp4", "max_rel_error": err,
                         "bit_exact": False, "tolerance": MX_TOLERANCE, "ok": err <= MX_TOLERANCE})
    return {"numerics": rows, **profiled(lambda: [call() for call in calls])}


def aiter_found() -> bool:
    import importlib.util

    return importlib.util.find_spec("aiter") is not None
