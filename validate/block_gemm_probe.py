"""The block-scaled GEMM the kernel check runs for MXFP8, NVFP4 and (on sm_100) MXFP4 artifacts: ``torch._scaled_mm``
with block scales, PyTorch's call of the vendor BLAS's microscaling GEMM (cuBLASLt ``VEC32_UE8M0`` /
``VEC16_UE4M3``, hipBLASLt's block scale code 3; validate/gemm_devices.py), against the dequantized reference.

- Operands: the weight's codes as stored (MXFP8 float8_e4m3fn ``[N, K]``; MXFP4 and NVFP4 two E2M1 a byte, element
  ``2j`` in the low nibble, the packing of torch's ``float4_e2m1fn_x2``: test/test_scaled_matmul_cuda.py
  ``pack_uint4``); the activation quantized the runtime's way (MX: Quark's "even" E8M0 scale, runtime/mx.py;
  NVFP4: vLLM's FP8 E4M3 scale per 16 under the global input scale, runtime/nvfp4_linear.py).
- Scales ``[rows, K / block]``, padded to 128 rows and 4 blocks (the size aten/src/ATen/native/cuda/ScaledBlas.cpp
  ``is_blockwise_1x32_scaling`` / ``is_blockwise_1x16_scaling`` require); on CUDA in cuBLASLt's blocked layout
  (`to_blocked`, as torch/testing/_internal/common_quantized.py ``to_blocked``: cuBLAS's "1D block scaling factors
  layout"), on ROCm row-major (test_scaled_matmul_cuda.py swizzles only where ``not torch.version.hip``).
- Activation rows padded to 128 (hipBLASLt's MX GEMM needs M and N multiples of 16, K of 128: CUDABlas.cpp).
- NVFP4's global scales (``weight_scale_2``, ``input_scale_2``) multiply the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.reading.artifact import read_artifact
from eagle3_quant.runtime import mx
from eagle3_quant.runtime.nvfp4_linear import dequantize_nvfp4, quantize_nvfp4
from eagle3_quant.validate.kernel_probe import NUMERICS_ROWS, activations, profiled, relative_error
from eagle3_quant.validate.mx_kernel_probe import MX_TOLERANCE
from eagle3_quant.validate.platform import Platform

BLOCK_TOLERANCE = MX_TOLERANCE  # the MX path's: bf16 output, another accumulation order
ROW_TILE, BLOCK_TILE = 128, 4


@dataclass(frozen=True)
class BlockWeight:
    module: str
    codes: torch.Tensor         # uint8: float8_e4m3fn bytes [N, K] (MXFP8) or packed E2M1 [N, K / 2]
    scale: torch.Tensor         # uint8: E8M0 [N, K / 32], or FP8 E4M3 bytes [N, K / 16] (NVFP4)
    element: str                # "fp8_e4m3" | "fp4"
    nvfp4: bool = False
    weight_global: float = 1.0  # NVFP4's weight_scale_2
    input_global: float = 1.0   # NVFP4's input_scale_2

    @property
    def in_features(self) -> int:
        return self.codes.shape[1] * (2 if self.element == "fp4" else 1)

    @property
    def format(self) -> str:
        name = "nvfp4" if self.nvfp4 else "mxfp4" if self.element == "fp4" else "mxfp8"
        return f"{name} x {name}"


def read_block_weights(out: Path, device: str) -> list[BlockWeight]:
    art = read_artifact(out)
    tensors = art.checkpoint.tensors

    def get(module: str, name: str) -> torch.Tensor:
        return tensors[f"{module}.{name}"].load().to(device)

    weights = []
    for module, linear in sorted(art.quant_linears.items()):
        if linear.kind == "mxfp8":
            weights.append(BlockWeight(module, get(module, "weight").view(torch.uint8), get(module, "weight_scale"),
                                       "fp8_e4m3"))
        elif linear.kind == "nvfp4":
            weights.append(BlockWeight(module, get(module, "weight"), get(module, "weight_scale").view(torch.uint8),
                                       "fp4", True, float(get(module, "weight_scale_2")),
                                       float(get(module, "input_scale_2"))))
    if art.mx_modules and art.mx_element == "fp4":
        weights += [BlockWeight(m, get(m, "weight"), get(m, "weight_scale"), "fp4") for m in art.mx_modules]
    return weights


def quantize_input(w: BlockWeight, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes uint8, scales uint8) of an activation, in the weight's format."""
    if w.nvfp4:
        values, scale = quantize_nvfp4(x, torch.tensor(1.0 / w.input_global, device=x.device))
        return mx.pack_e2m1(values), scale.to(torch.float8_e4m3fn).view(torch.uint8)
    return mx.quantize_mx(x.to(torch.float32), w.element)


def dequantize(w: BlockWeight, codes: torch.Tensor, scale: torch.Tensor, global_scale: float) -> torch.Tensor:
    """float32 values of codes with their block scales (times NVFP4's global scale)."""
    if not w.nvfp4:
        return mx.dequantize_mx(codes, scale, w.element, torch.float32)
    return dequantize_nvfp4(codes, scale.view(torch.float8_e4m3fn), global_scale)


def to_blocked(scale: torch.Tensor) -> torch.Tensor:
    """[rows % 128 == 0, blocks % 4 == 0] -> cuBLASLt's blocked (swizzled) order, flat."""
    rows, cols = scale.shape
    tiles = scale.view(rows // ROW_TILE, ROW_TILE, cols // BLOCK_TILE, BLOCK_TILE).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()


def scale_layout(scale: torch.Tensor, swizzle: bool) -> torch.Tensor:
    """Block scales padded to whole (128 rows, 4 blocks) tiles, swizzled for cuBLASLt or row-major, flat."""
    rows, cols = scale.shape
    padded = torch.zeros(-(-rows // ROW_TILE) * ROW_TILE, -(-cols // BLOCK_TILE) * BLOCK_TILE, dtype=torch.uint8,
                         device=scale.device)
    padded[:rows, :cols] = scale
    return to_blocked(padded) if swizzle else padded.flatten()


def block_linear(w: BlockWeight, x: torch.Tensor, swizzle: bool) -> torch.Tensor:
    """The linear with its GEMM on ``torch._scaled_mm`` with block scales, bf16 out."""
    rows = x.shape[0]
    codes, scale = quantize_input(w, x)
    codes = torch.nn.functional.pad(codes, (0, 0, 0, -(-rows // ROW_TILE) * ROW_TILE - rows))
    dtype = torch.float8_e4m3fn if w.element == "fp8_e4m3" else torch.float4_e2m1fn_x2
    scale_dtype = torch.float8_e4m3fn if w.nvfp4 else torch.float8_e8m0fnu
    out = torch._scaled_mm(codes.view(dtype), w.codes.view(dtype).t(), scale_layout(scale, swizzle).view(scale_dtype),
                           scale_layout(w.scale, swizzle).view(scale_dtype), out_dtype=torch.bfloat16)[:rows]
    if w.nvfp4:
        out = (out.to(torch.float32) * (w.input_global * w.weight_global)).to(torch.bfloat16)
    return out


def reference(w: BlockWeight, x: torch.Tensor) -> torch.Tensor:
    """What the GEMM must compute: both operands dequantized, fp32 accumulation, bf16 out."""
    codes, scale = quantize_input(w, x)
    weight = dequantize(w, w.codes, w.scale, w.weight_global)
    return (dequantize(w, codes, scale, w.input_global) @ weight.T).to(torch.bfloat16)


def block_numerics(weights: list[BlockWeight], platform: Platform) -> list[dict]:
    rows = []
    for i, w in enumerate(weights):
        for m in NUMERICS_ROWS:
            x = activations(m, w.in_features, platform.device, seed=1000 * i + m)
            err = relative_error(block_linear(w, x, platform.kind == "cuda"), reference(w, x))
            rows.append({"module": w.module, "rows": m, "format": w.format, "max_rel_error": err, "bit_exact": False,
                         "tolerance": BLOCK_TOLERANCE, "ok": err <= BLOCK_TOLERANCE})
    return rows


def block_kernels(weights: list[BlockWeight], platform: Platform) -> dict:
    """The kernels the block-scaled linears launch (the GEMM and the activation quantization), by count."""
    xs = [activations(16, w.in_features, platform.device, seed=7) for w in weights]
    swizzle = platform.kind == "cuda"
    return profiled(lambda: [block_linear(w, x, swizzle) for w, x in zip(weights, xs, strict=True)])
