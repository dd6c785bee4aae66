"""What the serving child (``serve_child.py``) changes in vLLM's CPU build so that every artifact runs, each change
named in the result: ops the build lacks supplied in torch, kernels vLLM ships but does not list for the CPU platform
registered through vLLM's own ``register_linear_kernel``, and one slow op computed faster with the same math.

Imported by the child from its own folder, in the engine's environment (standard library, torch, vLLM and, for MX,
amd-quark); never imported by eagle3-quant itself.

- Static FP8: ``_C::static_scaled_fp8_quant`` is registered with no arguments and ``_C::silu_and_mul_quant`` is
  missing in the CPU build: torch code with the CUDA kernels' math, only where broken or missing.
- MX and NVFP4: vLLM lists no MXFP4/MXFP6/MXFP8 or NVFP4 linear kernel for the CPU platform; its
  ``EmulationMxfp4LinearKernel``, ``EmulationMxfp6LinearKernel``, ``EmulationMxfp8LinearKernel`` and
  ``EmulationNvFp4LinearKernel`` (dequantized weights, activation quantize-dequantize where the kernel does one, a
  high-precision GEMM: what vLLM runs on GPUs without native MX or FP4 GEMMs) are registered for it. Their MXFP4
  steps call Quark's ``dq_mxfp4``/``qdq_mxfp4``, CUDA/HIP kernels that raise on a CPU tensor: where they do, the
  project's torch E2M1/E8M0 math (``eagle3_quant/runtime/mx.py`` and the format facts it imports, loaded by path;
  the same code the vllm_load check uses) stands in.
- ``torch._scaled_mm`` on CPU float8 operands (vLLM's ``ChannelWiseTorchFP8ScaledMMLinearKernel`` for PTPC, the
  per-tensor kernel for static FP8): torch's CPU implementation is a reference loop about ten times slower than an
  fp32 GEMM. The stand-in computes the same sum of exact FP8 products in fp32 (the weight cast once), then the
  scales; its first calls per weight are compared with torch's own op and the largest difference is reported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

FP8_MAX = 448.0
SCALED_MM_ENV = "EAGLE3_QUANT_ENGINE_SCALED_MM"      # "reference": keep torch's own CPU _scaled_mm
COMPARED_CALLS = 2                                  # per weight: the stand-in checked against torch's op

CALLS: dict[str, int] = {}
SUPPLIED: dict[str, dict] = {}      # op -> {"why", "with"} (+ "compared_calls", "max_abs_diff" when checked)
REGISTERED: dict[str, dict] = {}    # kernel class -> {"kernel_type", "platform", "why"}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


def _static_scaled_fp8_quant(out, input, scale, group_shape=None):
    """``_C::static_scaled_fp8_quant`` (csrc/quantization/fp8): out = clamp(x * (1 / scale), +-448) as e4m3fn,
    computed in fp32; a per-tensor scale (the only static FP8 activation scheme Quark writes)."""
    import torch

    _count("static_scaled_fp8_quant")
    if scale.numel() != 1:
        raise NotImplementedError(f"the torch stand-in for _C::static_scaled_fp8_quant takes a per-tensor scale only "
                                  f"(got {tuple(scale.shape)}, group_shape {group_shape})")
    inv = scale.to(torch.float32).reciprocal()
    out.copy_((input.to(torch.float32) * inv).clamp(-FP8_MAX, FP8_MAX).to(out.dtype))


def _silu_and_mul_quant(result, x, scale):
    """``_C::silu_and_mul_quant`` (csrc/quantization/activation_kernels.cu, ``act_and_mul_quant_kernel``): SiLU in
    fp32 returned in the model dtype, the product of two model-dtype values rounded again, then the static FP8
    quantization above (the same steps as ``eagle3_quant/runtime/serving.silu_and_mul_quant``)."""
    import torch

    _count("silu_and_mul_quant")
    if scale.numel() != 1:
        raise NotImplementedError(f"the torch stand-in for _C::silu_and_mul_quant takes a per-tensor scale only "
                                  f"(got {tuple(scale.shape)})")
    d = x.shape[-1] // 2
    gate, up = x[..., :d].to(torch.float32), x[..., d:].to(torch.float32)
    silu = (gate / (1.0 + torch.exp(-gate))).to(x.dtype)
    product = (silu.to(torch.float32) * up).to(x.dtype)
    y = product.to(torch.float32) * scale.to(torch.float32).reshape(()).reciprocal()
    result.copy_(y.clamp(-FP8_MAX, FP8_MAX).to(result.dtype))


CUDA_MATH = "torch code doing the CUDA kernel's math (engines/vllm/serve_cpu.py)"


def supply_static_fp8_ops() -> None:
    """Replace the static-FP8 ``_C`` ops only where this build has none that can run."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()          # the build's own _C (e.g. _C_AVX2) first: never override a real op
    namespace = torch.ops._C
    for name, torch_code in (("static_scaled_fp8_quant", _static_scaled_fp8_quant),
                             ("silu_and_mul_quant", _silu_and_mul_quant)):
        try:
            schema = getattr(namespace, name).default._schema
            why = None if schema.arguments else "registered with no arguments in this build"
        except (AttributeError, RuntimeError):
            why = "missing in this build"
        if why:
            setattr(namespace, name, torch_code)
            SUPPLIED[name] = {"why": why, "with": CUDA_MATH}


MX_KERNELS = (("mxfp4", "vllm.model_executor.kernels.linear.mxfp4.emulation", "EmulationMxfp4LinearKernel"),
              ("mxfp6", "vllm.model_executor.kernels.linear.mxfp6.emulation", "EmulationMxfp6LinearKernel"),
              ("mxfp8", "vllm.model_executor.kernels.linear.mxfp8.emulation", "EmulationMxfp8LinearKernel"),
              ("nvfp4", "vllm.model_executor.kernels.linear.nvfp4.emulation", "EmulationNvFp4LinearKernel"))
MX_WHY = ("vLLM lists no {kind} linear kernel for its CPU platform; registered with vLLM's register_linear_kernel "
          "(what vLLM runs on GPUs without native {kind} GEMMs)")
PACKAGE = Path(__file__).resolve().parents[2]
PROJECT_MX = (("eagle3_quant.reading.mx_format", PACKAGE / "reading" / "mx_format.py"),
              ("eagle3_quant.runtime.mx", PACKAGE / "runtime" / "mx.py"))


def _project_mx():
    """eagle3_quant/runtime/mx.py by its path (the package is not installed here): torch-only E2M1/E8M0 math, with
    the format facts it imports (reading/mx_format.py, standard library only) loaded first under their own name."""
    module = None
    for name, path in PROJECT_MX:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def register_mx_emulation() -> None:
    """vLLM's MX and NVFP4 emulation kernels on the CPU platform, and torch code for Quark's GPU-only MXFP4
    kernels."""
    import importlib

    from vllm.model_executor.kernels.linear import register_linear_kernel
    from vllm.platforms import PlatformEnum

    os.environ.setdefault("VLLM_MXFP4_EMULATION_DEQUANT_AT_LOAD", "1")
    for kind, module, name in MX_KERNELS:
        register_linear_kernel(getattr(importlib.import_module(module), name), PlatformEnum.CPU, kind)
        REGISTERED[name] = {"kernel_type": kind, "platform": "cpu", "why": MX_WHY.format(kind=kind.upper())}
    _supply_quark_mxfp4()


def _supply_quark_mxfp4() -> None:
    import torch

    try:
        from quark.torch.kernel import mx as quark_mx
    except ImportError:         # no amd-quark: only MXFP4 needs it, and bench refuses MXFP4 here (engine_refusal)
        return

    packed, scale = torch.zeros(1, 16, dtype=torch.uint8), torch.full((1, 1), 127, dtype=torch.uint8)
    probes = {"dq_mxfp4": lambda: quark_mx.dq_mxfp4(packed, scale, torch.bfloat16),
              "qdq_mxfp4": lambda: quark_mx.qdq_mxfp4(torch.ones(1, 32, dtype=torch.bfloat16))}
    broken = {}
    for name, probe in probes.items():
        try:
            probe()
        except (RuntimeError, NotImplementedError, ImportError) as exc:
            broken[name] = f"Quark's kernel raises on a CPU tensor ({' '.join(str(exc).split())[:120]})"
    if not broken:
        return
    mx = _project_mx()

    def dq_mxfp4(x, scale, float_dtype):
        _count("quark.torch.kernel.mx.dq_mxfp4")
        return mx.dequantize_mxfp4(x, scale, float_dtype)

    def qdq_mxfp4(x, scale_calculation_mode="even"):
        _count("quark.torch.kernel.mx.qdq_mxfp4")
        if scale_calculation_mode != "even":
            raise NotImplementedError(f"scale_calculation_mode {scale_calculation_mode!r}: Quark's kernel has "
                                      "'even' only")
        return mx.quant_dequant_mx(x, "fp4").to(x.dtype)

    with_ = "the project's bit-exact torch E2M1/E8M0 math (eagle3_quant/runtime/mx.py)"
    for name, torch_code in (("dq_mxfp4", dq_mxfp4), ("qdq_mxfp4", qdq_mxfp4)):
        if name in broken:
            setattr(quark_mx, name, torch_code)
            SUPPLIED[f"quark.torch.kernel.mx.{name}"] = {"why": broken[name], "with": with_}


def fast_cpu_scaled_mm() -> None:
    """``torch._scaled_mm`` on CPU float8 operands through an fp32 GEMM (unless SCALED_MM_ENV is "reference")."""
    import torch

    if os.environ.get(SCALED_MM_ENV) == "reference":
        return
    original = torch._scaled_mm
    fp8 = {torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz}
    cast: dict[tuple, torch.Tensor] = {}
    compared: dict[tuple, int] = {}
    row = {"why": "torch's CPU _scaled_mm is a reference loop, about 10x an fp32 GEMM of the same operands",
           "with": "an fp32 GEMM of the FP8 values (exact products, fp32 sums), then the scales, as _scaled_mm "
                   "computes; its first calls per weight compared with torch's own op", "compared_calls": 0,
           "max_abs_diff": 0.0}

    def scaled_mm(a, b, scale_a=None, scale_b=None, bias=None, scale_result=None, out_dtype=None,
                  use_fast_accum=False, **kwargs):
        if a.device.type != "cpu" or a.dtype not in fp8 or b.dtype not in fp8 or scale_result is not None or \
                kwargs or scale_a is None or scale_b is None or scale_a.numel() not in (1, a.shape[0]) or \
                scale_b.numel() not in (1, b.shape[1]):
            return original(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, scale_result=scale_result,
                            out_dtype=out_dtype, use_fast_accum=use_fast_accum, **kwargs)
        _count("torch._scaled_mm")
        key = (b.data_ptr(), tuple(b.shape), tuple(b.stride()), b.dtype)
        if key not in cast:
            cast[key] = b.to(torch.float32)
        out = a.to(torch.float32) @ cast[key]
        out = out * scale_a.to(torch.float32).reshape(-1, 1) * scale_b.to(torch.float32).reshape(1, -1)
        if bias is not None:
            out = out + bias.to(torch.float32)
        out = out.to(out_dtype or a.dtype)
        if compared.get(key, 0) < COMPARED_CALLS:
            compared[key] = compared.get(key, 0) + 1
            try:
                reference = original(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype,
                                     use_fast_accum=use_fast_accum)
            except RuntimeError:      # torch <= 2.11 on a CPU: scalar scales only, no rowwise op to compare with
                row["uncompared_calls"] = row.get("uncompared_calls", 0) + 1
                return out
            row["compared_calls"] += 1
            diff = (out.to(torch.float32) - reference.to(torch.float32)).abs().max().item() if out.numel() else 0.0
            row["max_abs_diff"] = max(row["max_abs_diff"], diff)
        return out

    torch._scaled_mm = scaled_mm
    SUPPLIED["torch._scaled_mm"] = row


def substituted_ops() -> dict[str, dict]:
    """The result's ``substituted_ops``: every op supplied, with its calls."""
    return {name: {**row, "calls": CALLS.get(name, 0)} for name, row in SUPPLIED.items()}
