"""An NVFP4 linear running vLLM's ``EmulationNvFp4LinearKernel`` (``QuarkNVFP4``; vLLM's
``nvfp4_emulation_utils``: ``dequantize_to_dtype``, ``ref_nvfp4_quant_dequant``, ``run_nvfp4_emulations``).

The weight: two E2M1 codes a byte, one FP8 E4M3 scale per 16 inputs, times the FP32 global ``weight_scale_2`` (a
fused layer keeps the largest of its shards'). The activation, per token and group of 16: a block scale
``global_inv * amax / 6`` rounded to FP8 E4M3, the elements divided by ``block_scale / global_inv``, clamped to +-6
and rounded to the E2M1 grid (ties to even), then multiplied back; ``global_inv`` is ``1 / input_scale_2`` (the
largest of a fused layer's shards). The GEMM runs on the dequantized operands in the activation's dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from eagle3_quant.errors import Fp8LayoutError
from eagle3_quant.runtime.mx import unpack_e2m1

NVFP4_GROUP = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
# vLLM's cast_to_fp4: |x| -> the E2M1 value, each interval's bounds as it writes them (ties to the even code)
_FP4_STEPS = ((0.25, 0.0, True), (0.75, 0.5, False), (1.25, 1.0, True), (1.75, 1.5, False), (2.5, 2.0, True),
              (3.5, 3.0, False), (5.0, 4.0, True))


def _reciprocal(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (x + (x == 0) * 1e8)        # vLLM's get_reciprocal


def cast_to_fp4(x: torch.Tensor) -> torch.Tensor:
    """vLLM's cast_to_fp4 on float32 values already clamped to +-6."""
    sign, magnitude = torch.sign(x), x.abs()
    out = torch.full_like(magnitude, E2M1_MAX)
    lower = torch.zeros_like(magnitude, dtype=torch.bool)
    for bound, value, inclusive in _FP4_STEPS:
        here = (magnitude <= bound) if inclusive else (magnitude < bound)
        out = torch.where(here & ~lower, torch.full_like(out, value), out)
        lower = lower | here
    return out * sign


def quantize_nvfp4(x: torch.Tensor, global_inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ref_nvfp4_quant of a 2-D activation: (E2M1 values float32 [rows, cols], FP8 E4M3 block scales float32
    [rows, cols / 16]); the value is ``element * scale / global_inv``."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // NVFP4_GROUP, NVFP4_GROUP)
    vec_max = blocks.abs().amax(dim=-1, keepdim=True).to(torch.float32)
    scale = global_inv * (vec_max * (1 / E2M1_MAX))
    scale = scale.clamp(min=-E4M3_MAX, max=E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    output_scale = _reciprocal(scale * _reciprocal(global_inv))
    codes = cast_to_fp4(torch.clamp(blocks.to(torch.float32) * output_scale, -E2M1_MAX, E2M1_MAX))
    return codes.reshape(rows, cols), scale.squeeze(-1)


def quant_dequant_nvfp4(x: torch.Tensor, global_inv: torch.Tensor) -> torch.Tensor:
    """vLLM's ref_nvfp4_quant_dequant of a 2-D activation, returned in x's dtype."""
    values, scale = quantize_nvfp4(x, global_inv)
    rows, cols = x.shape
    blocks = values.reshape(rows, cols // NVFP4_GROUP, NVFP4_GROUP)
    return (blocks * (scale.unsqueeze(-1) / global_inv)).reshape(rows, cols).to(x.dtype)


def dequantize_nvfp4(packed: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor | float,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """vLLM's dequantize_to_dtype: packed E2M1 [N, K / 2] values * (FP8 E4M3 scale per 16 * global scale) in fp32,
    then `dtype`."""
    values = unpack_e2m1(packed).reshape(packed.shape[0], -1, NVFP4_GROUP)
    factor = scale.to(torch.float32) * global_scale
    return (values * factor.unsqueeze(-1)).reshape(packed.shape[0], -1).to(dtype)


class NvFp4Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor,
                 input_scale_2: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if weight.dtype != torch.uint8 or weight.dim() != 2:
            raise Fp8LayoutError(f"NVFP4 weight must be packed uint8 [out, in / 2], got {weight.dtype} "
                                 f"{list(weight.shape)}", field="weight")
        if weight_scale.dtype != torch.float8_e4m3fn or tuple(weight_scale.shape) != (
                weight.shape[0], weight.shape[1] * 2 // NVFP4_GROUP):
            raise Fp8LayoutError(f"weight_scale must be float8_e4m3fn [{weight.shape[0]}, "
                                 f"{weight.shape[1] * 2 // NVFP4_GROUP}], got {weight_scale.dtype} "
                                 f"{list(weight_scale.shape)}", field="weight_scale")
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("weight_global", weight_scale_2.to(torch.float32).reshape(()))
        self.register_buffer("input_global", input_scale_2.to(torch.float32).reshape(()))
        self.register_buffer("bias", bias)

    @property
    def in_features(self) -> int:
        return self.weight.shape[1] * 2

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, NVFP4 weight and input (groups of {NVFP4_GROUP})"

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return dequantize_nvfp4(self.weight, self.weight_scale, self.weight_global, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = quant_dequant_nvfp4(x.reshape(-1, x.shape[-1]), (1.0 / self.input_global).to(torch.float32))
        out = torch.matmul(x2, self.dequantized_weight(x.dtype).T)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*lead, self.out_features)


def harmonize_fused_nvfp4(group: list[NvFp4Linear]) -> None:
    """vLLM's QuarkNVFP4.process_weights_after_loading on a fused layer: one weight and one input global scale,
    each the largest of the shards'."""
    weight_global = torch.stack([layer.weight_global for layer in group]).amax()
    input_global = torch.stack([layer.input_global for layer in group]).amax()
    for layer in group:
        layer.weight_global, layer.input_global = weight_global.clone(), input_global.clone()
