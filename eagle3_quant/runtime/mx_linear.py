"""An MX-weight linear (MXFP4 or MXFP6) running vLLM's emulation math (``EmulationMxfp4LinearKernel``,
``EmulationMxfp6LinearKernel``, ``QuarkW4A8_MXFP4_FP8._apply_emulation``): weights dequantized to the input's
dtype, activations quantized and dequantized (dynamic MXFP4 / MXFP6, or static per-tensor FP8 with the
checkpoint's ``input_scale``, or none), then ``F.linear`` in the input's dtype."""

from __future__ import annotations

import torch
from torch import nn

from eagle3_quant.errors import Fp8LayoutError
from eagle3_quant.runtime import fp8, mx

MX_INPUTS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "fp8_static", "none")
MX_INPUT_ELEMENTS = {"mxfp4": "fp4", "mxfp6_e2m3": "fp6_e2m3", "mxfp6_e3m2": "fp6_e3m2"}


class MxLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, input_kind: str,
                 input_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 element: str = "fp4") -> None:
        super().__init__()
        if element not in mx.ELEMENT_BITS:
            raise ValueError(f"element must be one of {', '.join(mx.ELEMENT_BITS)}, got {element!r}")
        if weight.dtype != torch.uint8 or weight.dim() != 2 or weight.shape[1] * 8 % mx.ELEMENT_BITS[element]:
            raise Fp8LayoutError(f"{element} MX weight must be packed uint8 [out, in*{mx.ELEMENT_BITS[element]}/8], "
                                 f"got {weight.dtype} {list(weight.shape)}", field="weight")
        groups = mx.unpacked_width(weight.shape[1], element) // mx.MX_BLOCK
        if weight_scale.dtype != torch.uint8 or tuple(weight_scale.shape) != (weight.shape[0], groups):
            raise Fp8LayoutError(f"weight_scale must be E8M0 uint8 [{weight.shape[0]}, {groups}], got "
                                 f"{weight_scale.dtype} {list(weight_scale.shape)}", field="weight_scale")
        if input_kind not in MX_INPUTS:
            raise ValueError(f"input_kind must be one of {', '.join(MX_INPUTS)}, got {input_kind!r}")
        if (input_kind == "fp8_static") != (input_scale is not None):
            raise Fp8LayoutError("static FP8 inputs need an input_scale, and only they", field="input_scale")
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        # [1] as vLLM's PerTensorScaleParameter holds it: x / scale then runs in fp32 (a fused layer's shared
        # scale is 0-d, `input_scale.max()`, and the division stays in the activation dtype, as in vLLM)
        self.register_buffer("input_scale", None if input_scale is None
                             else input_scale.to(torch.float32).reshape(1))
        self.register_buffer("bias", bias)
        self.input_kind = input_kind
        self.element = element

    @property
    def in_features(self) -> int:
        return mx.unpacked_width(self.weight.shape[1], self.element)

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, weight {self.element} MX, input {self.input_kind}"

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        return mx.dequantize_mx(self.weight, self.weight_scale, self.element, dtype)

    def quant_dequant_input(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_kind in MX_INPUT_ELEMENTS:
            return mx.quant_dequant_mx(x, MX_INPUT_ELEMENTS[self.input_kind])
        if self.input_kind == "fp8_static":
            q = (x / self.input_scale).clamp(-fp8.FP8_MAX, fp8.FP8_MAX).to(fp8.FP8_DTYPE)
            return (q.to(x.dtype) * self.input_scale).to(x.dtype)
        return x

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        if out_dtype is not None and x.dtype != out_dtype:
            x = x.to(out_dtype)     # vLLM feeds this kernel the activation in the model dtype
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return nn.functional.linear(self.quant_dequant_input(x), self.dequantized_weight(x.dtype), bias)


def harmonize_fused_mx(group: list[MxLinear]) -> None:
    """vLLM's fused shards with static FP8 inputs share one input scale, the largest (a 0-d tensor)."""
    scales = [layer.input_scale for layer in group if layer.input_scale is not None]
    if scales and len(scales) != len(group):
        raise Fp8LayoutError("the shards of one fused layer mix static and dynamic input scales",
                             field="input_scale")
    if scales:
        shared = torch.stack(scales).amax()
        for layer in group:
            layer.input_scale = shared.clone()
