"""The INT8 GEMM the kernel check runs for a w8a8_int8 artifact: ``torch._int_mm``, PyTorch's call of the vendor BLAS's
INT8 GEMM, between vLLM's per-token activation quantization and the two scales on its int32 output
(runtime/int_linear.py), against the runtime's ``Int8Linear`` (vLLM's math, exact integer accumulation).

Why ``torch._int_mm`` and not vLLM's own kernel (CUTLASS ``cutlass_scaled_mm`` on NVIDIA, AITER or Triton on ROCm):
it runs with torch alone on any GPU machine and is the vendor BLAS's GEMM, so its log lines carry the operand types
the check reads (cuBLASLt ``R_8I``, hipBLASLt ``i8_r``), as the FP8 path's ``torch._scaled_mm`` does; vLLM's kernels
write no BLAS log line. pytorch aten/src/ATen/native/cuda/Blas.cpp ``_int_mm_out_cuda``: more than 16 rows, K and N
multiples of 8 (decode rows are padded with zero rows); aten/src/ATen/cuda/CUDABlas.cpp ``int8_gemm``: int8
operands, int32 out and compute, no scales. On a CPU the same call runs PyTorch's own INT8 GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.reading.artifact import read_artifact
from eagle3_quant.runtime.int_linear import Int8Linear, quantize_per_token_int8
from eagle3_quant.validate.kernel_probe import NUMERICS_ROWS, activations, profiled, relative_error
from eagle3_quant.validate.platform import Platform

INT_MM_MIN_ROWS = 17
INT8_TOLERANCE = 0.0        # the same integers and the same fp32 scaling as the reference: bit-exact


@dataclass(frozen=True)
class Int8Weight:
    module: str
    weight: torch.Tensor        # int8 [N, K]
    scale: torch.Tensor         # fp32 [N]


def read_int8_weights(out: Path, device: str) -> list[Int8Weight]:
    art = read_artifact(out)
    return [Int8Weight(module, art.checkpoint.tensors[module + ".weight"].load().to(device),
                       art.checkpoint.tensors[module + ".weight_scale"].load().to(device, torch.float32)
                       .reshape(-1))
            for module, linear in sorted(art.quant_linears.items()) if linear.kind == "int8"]


def int8_linear(w: Int8Weight, x: torch.Tensor) -> torch.Tensor:
    """vLLM's W8A8 INT8 linear with the GEMM on ``torch._int_mm``."""
    codes, scale = quantize_per_token_int8(x)
    rows = codes.shape[0]
    padded = torch.nn.functional.pad(codes, (0, 0, 0, max(0, INT_MM_MIN_ROWS - rows)))
    acc = torch._int_mm(padded, w.weight.t())[:rows]
    return (acc.to(torch.float32) * scale * w.scale[None, :]).to(x.dtype)


def int8_numerics(weights: list[Int8Weight], platform: Platform) -> list[dict]:
    rows = []
    for i, w in enumerate(weights):
        reference = Int8Linear(w.weight, w.scale)
        for m in NUMERICS_ROWS:
            x = activations(m, w.weight.shape[1], platform.device, seed=1000 * i + m)
            out, ref = int8_linear(w, x), reference(x)
            err = relative_error(out, ref)
            rows.append({"module": w.module, "rows": m, "format": "int8 x int8", "max_rel_error": err,
                         "bit_exact": bool(torch.equal(out, ref)), "tolerance": INT8_TOLERANCE,
                         "ok": err <= INT8_TOLERANCE})
    return rows


def int8_kernels(weights: list[Int8Weight], platform: Platform) -> dict:
    """The kernels the INT8 linears launch (the GEMM and the quantization around it), by count."""
    xs = [activations(16, w.weight.shape[1], platform.device, seed=7) for w in weights]
    return profiled(lambda: [int8_linear(w, x) for w, x in zip(weights, xs, strict=True)])
