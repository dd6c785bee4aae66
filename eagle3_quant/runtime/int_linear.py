"""INT8 (W8A8) and INT4 (W4A16) linears running vLLM's math.

- ``Int8Linear`` (``QuarkW8A8Int8`` with per-token dynamic symmetric activations; vLLM's INT8 kernels:
  ``CPUInt8ScaledMMLinearKernel`` (oneDNN), CUTLASS on NVIDIA): each token is quantized with scale
  ``amax / 127``, its codes ``round_half_even(x * (127 / amax))``; the INT8 GEMM accumulates exactly in int32 and
  the output is ``acc * scale_token * scale_channel`` in fp32, cast to the activation's dtype.
- ``Int4Linear`` (``QuarkW4A16Int4``, asymmetric: uint4 codes and zero points; vLLM's mixed-precision kernels, e.g.
  ``CPUWNA16LinearKernel``): the weight ``(code - zero_point) * scale`` per group of inputs, in the activation's
  dtype, then an ordinary GEMM of the BF16 activations.
"""

from __future__ import annotations

import torch
from torch import nn

from eagle3_quant.errors import Fp8LayoutError

INT8_MAX = 127
INT4_PACK = 8
# the AWQ order of eight 4-bit codes in one int32 (vLLM's _REVERSE_AWQ_PACK_ORDER; Quark's "reorder" packing):
# output column j of a packed word sits in nibble AWQ_ORDER[j]
AWQ_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def quantize_per_token_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes [M, K], fp32 scales [M, 1]) of a 2-D activation, as vLLM's dynamic_scaled_int8_quant."""
    x32 = x.to(torch.float32)
    amax = x32.abs().amax(dim=-1, keepdim=True)
    inverse = torch.where(amax > 0, INT8_MAX / amax, torch.zeros_like(amax))
    codes = torch.round(x32 * inverse).clamp(-INT8_MAX - 1, INT8_MAX).to(torch.int8)
    return codes, amax / INT8_MAX


def int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [M, K] int8 @ b [N, K]^T int8, exact (as an int32 accumulation), returned in float64."""
    return a.to(torch.float64) @ b.to(torch.float64).T


class Int8Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if weight.dtype != torch.int8 or weight.dim() != 2:
            raise Fp8LayoutError(f"INT8 weight must be 2-D int8, got {weight.dtype} {list(weight.shape)}",
                                 field="weight")
        if weight_scale.numel() != weight.shape[0]:
            raise Fp8LayoutError(f"weight_scale has {weight_scale.numel()} values for {weight.shape[0]} rows",
                                 field="weight_scale")
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale.to(torch.float32).reshape(-1))
        self.register_buffer("bias", bias)

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, INT8 per-channel weight, per-token INT8 input"

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return (self.weight.to(torch.float32) * self.weight_scale[:, None]).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        codes, scale = quantize_per_token_int8(x.reshape(-1, x.shape[-1]))
        out = int_matmul(codes, self.weight).to(torch.float32) * scale * self.weight_scale[None, :]
        if self.bias is not None:
            out = out + self.bias.to(torch.float32)
        return out.to(x.dtype).reshape(*lead, self.out_features)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R, C / 8] (eight codes a word along C, AWQ order) -> the codes as int32 [R, C]."""
    shifts = torch.tensor([4 * i for i in AWQ_ORDER], dtype=torch.int32, device=packed.device)
    codes = (packed.to(torch.int32)[..., None] >> shifts) & 0xF
    return codes.reshape(*packed.shape[:-1], -1)


class Int4Linear(nn.Module):
    """``weight`` int32 [in, out / 8], ``weight_scale`` [in / group, out], ``weight_zero_point`` int32
    [in / group, out / 8] (Quark's export, the layout vLLM's QuarkW4A16Int4 loads)."""

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, weight_zero_point: torch.Tensor,
                 bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if weight.dtype != torch.int32 or weight.dim() != 2 or weight_scale.dim() != 2:
            raise Fp8LayoutError(f"INT4 weight must be int32 [in, out / 8] with a 2-D scale, got {weight.dtype} "
                                 f"{list(weight.shape)}", field="weight")
        groups, out = weight_scale.shape
        if weight.shape[0] % groups or -(-out // INT4_PACK) != weight.shape[1] or \
                tuple(weight_zero_point.shape) != (groups, weight.shape[1]):
            raise Fp8LayoutError(f"INT4 weight {list(weight.shape)}, scale {list(weight_scale.shape)} and zero "
                                 f"point {list(weight_zero_point.shape)} disagree", field="weight_scale")
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("weight_zero_point", weight_zero_point)
        self.register_buffer("bias", bias)

    @property
    def in_features(self) -> int:
        return self.weight.shape[0]

    @property
    def out_features(self) -> int:
        return self.weight_scale.shape[1]

    @property
    def group_size(self) -> int:
        return self.in_features // self.weight_scale.shape[0]

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, INT4 weight per group of {self.group_size}, BF16 input"

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """[out, in] in `dtype`: (code - zero point) * scale."""
        out = self.out_features
        codes = unpack_int4(self.weight)[:, :out]                                       # [in, out]
        zero = unpack_int4(self.weight_zero_point)[:, :out].repeat_interleave(self.group_size, 0)
        scale = self.weight_scale.to(torch.float32).repeat_interleave(self.group_size, 0)
        return ((codes - zero).to(torch.float32) * scale).to(dtype).T.contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return nn.functional.linear(x, self.dequantized_weight(x.dtype), bias)
