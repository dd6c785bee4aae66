"""INT8, INT4, NVFP4 and MXFP8 twins of a float linear for the sensitivity simulation (``sensitivity.fp8_versions``):
the weights Quark 0.13 writes, computed in torch, in the runtime layers that run vLLM's math.

Quark's rules, each checked bit for bit against its own export in tests/test_int_fp4_quantize.py (but NVFP4's input
scale, which Quark observes with its quantizers active in the rollout):
- INT8 per channel, symmetric: scale ``amax / 127.5`` in the weight's dtype (stored float32), codes
  ``round_half_even(w * (1 / scale))`` in float32 (a reciprocal, not a division: their ties differ), clamped to
  [-128, 127];
- INT4 (uint4, asymmetric) per group: ``min`` and ``max`` of each group taken with 0, scale ``(max - min) / 15`` and
  zero point ``clamp(-round(min / scale), 0, 15)`` in the weight's dtype, codes ``round(w * (1 / scale)) + zero
  point`` in float32 (round to nearest, without AWQ);
- NVFP4: group scale ``amax / 6``, global scale the largest group scale of the tensor (of the fused layer: Quark's
  shared groups) / 448, group scales rounded to E4M3 as ``scale / global``, elements rounded to E2M1; the input's
  global scale is the calibration set's absmax / (6 * 448), shared by a fused layer's shards;
- MXFP8: ``runtime.mx.quantize_mx`` with E4M3 elements (Quark's "even" E8M0 scales).
"""

from __future__ import annotations

import torch
from torch import nn

from eagle3_quant.runtime import mx
from eagle3_quant.runtime.int_linear import AWQ_ORDER, Int4Linear, Int8Linear
from eagle3_quant.runtime.mx_linear import MxLinear
from eagle3_quant.runtime.nvfp4_linear import E2M1_MAX, E4M3_MAX, NVFP4_GROUP, NvFp4Linear
from eagle3_quant.schemes import Scheme

SIMULATED_KINDS = ("int8", "int4", "nvfp4", "mxfp8")


def int8_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (weight.abs().amax(dim=1) / 127.5).to(torch.float32)
    codes = torch.round(weight.float() * (1 / scale[:, None])).clamp(-128, 127).to(torch.int8)
    return codes, scale


def _pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """int32 codes [R, C] (C a multiple of 8) -> [R, C / 8], AWQ order (the inverse of int_linear.unpack_int4)."""
    grouped = codes.to(torch.int64).reshape(codes.shape[0], -1, 8)
    shifts = torch.tensor([4 * i for i in AWQ_ORDER], dtype=torch.int64)
    return (grouped << shifts).sum(dim=-1).to(torch.int64).bitwise_and(0xFFFFFFFF).to(torch.int32)


def int4_weight(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed [in, out / 8], scale [in / group, out], zero point packed [in / group, out / 8])."""
    rows, cols = weight.shape
    groups = weight.reshape(rows, cols // group, group)
    low, high = groups.amin(dim=-1).clamp(max=0), groups.amax(dim=-1).clamp(min=0)
    scale = (high - low) / 15
    zero = (-torch.round(low / scale)).clamp(0, 15)
    codes = (torch.round(groups.float() * (1 / scale.float()[..., None])) + zero.float()[..., None]).clamp(0, 15)
    pad = -rows % 8
    codes = nn.functional.pad(codes.reshape(rows, cols).T.to(torch.int32), (0, pad))
    zeros = nn.functional.pad(zero.T.to(torch.int32), (0, pad))
    return _pack_int4(codes), scale.T.contiguous(), _pack_int4(zeros)


def nvfp4_weight(weight: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed E2M1 [out, in / 2], E4M3 group scales [out, in / 16]) with the given FP32 global scale."""
    rows, cols = weight.shape
    groups = weight.float().reshape(rows, -1, NVFP4_GROUP)
    scale = (groups.abs().amax(dim=-1) / E2M1_MAX / global_scale).to(torch.float8_e4m3fn)
    values = mx.round_to_element((groups / (scale.float() * global_scale)[..., None]).clamp(-E2M1_MAX, E2M1_MAX),
                                 "fp4").reshape(rows, cols)
    codes = torch.bucketize(values.abs(), mx.e2m1_table()[:8]).to(torch.int32) | \
        (torch.signbit(values) & (values != 0)).to(torch.int32) * 8
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8), scale


def nvfp4_global(weights: list[torch.Tensor]) -> torch.Tensor:
    """The global weight scale Quark shares over a fused layer's shards: the largest group scale / 448."""
    return torch.stack([(w.float().reshape(w.shape[0], -1, NVFP4_GROUP).abs().amax(-1) / E2M1_MAX).amax()
                        for w in weights]).amax() / E4M3_MAX


def twin(linear: nn.Linear, scheme: Scheme, bias: torch.Tensor | None, input_absmax: float | None = None,
         weight_global: torch.Tensor | None = None) -> nn.Module:
    """The runtime layer of `linear` quantized with `scheme` (INT8, INT4, NVFP4 or MXFP8)."""
    weight = linear.weight.detach()
    kind = scheme.weight.kind
    if kind == "int8":
        return Int8Linear(*int8_weight(weight), bias)
    if kind == "int4":
        return Int4Linear(*int4_weight(weight, scheme.weight.group_size), bias)
    if kind == "nvfp4":
        global_scale = weight_global if weight_global is not None else nvfp4_global([weight])
        packed, scale = nvfp4_weight(weight, global_scale)
        input_global = torch.tensor(max(input_absmax or 0.0, 1e-12) / E2M1_MAX / E4M3_MAX)
        return NvFp4Linear(packed, scale, global_scale, input_global, bias)
    packed, scale = mx.quantize_mx(weight, "fp8_e4m3")
    return MxLinear(packed, scale, "none", None, bias, "fp8_e4m3")
