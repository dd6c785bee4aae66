"""An FP8 linear layer running vLLM's math, and the conversions between float and FP8 linears."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from eagle3_quant.errors import Fp8LayoutError
from eagle3_quant.runtime import fp8, fp8_fused

FP8_MODES = ("scaled_mm", "dequant")


class Fp8Linear(nn.Module):
    """FP8 E4M3 weight [N, K] with a per-channel [N] or per-tensor [1] fp32 scale.

    Inputs are quantized per token (dynamic) or with the static per-tensor `input_scale`; per-token quantization
    runs as one fused kernel on a GPU (``runtime/fp8_fused.py``: the same bits as the eager ops). ``mode``:
    ``"scaled_mm"`` runs ``torch._scaled_mm`` with the GPU layout rules; ``"dequant"`` dequantizes both
    operands and multiplies in fp32 (the reference). Both return the input's dtype when it is bf16 or fp16 (as
    vLLM does: fp16 for original-EAGLE drafts), else bf16 cast to the input dtype.
    """

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, mode: str = "scaled_mm") -> None:
        super().__init__()
        if weight.dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz) or weight.dim() != 2:
            raise Fp8LayoutError(f"weight must be 2-D float8_e4m3fn/fnuz, got {weight.dtype} {list(weight.shape)}",
                                 field="weight")
        if weight_scale.numel() not in (1, weight.shape[0]):
            raise Fp8LayoutError(f"weight_scale has {weight_scale.numel()} values for {weight.shape[0]} rows",
                                 field="weight_scale")
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale.to(torch.float32).reshape(-1))
        self.register_buffer("input_scale", None if input_scale is None
                             else input_scale.to(torch.float32).reshape(1))
        self.register_buffer("bias", bias)
        self.mode = mode

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in FP8_MODES:
            raise ValueError(f"fp8_mode must be one of {', '.join(FP8_MODES)}, got {value!r}")
        self._mode = value

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def per_tensor_weight(self) -> bool:
        return self.weight_scale.numel() == 1

    def extra_repr(self) -> str:
        weight = "per-tensor" if self.per_tensor_weight else "per-channel"
        act = "static per-tensor" if self.input_scale is not None else "dynamic per-token"
        return f"{self.in_features} -> {self.out_features}, weight {weight}, input {act}, mode={self.mode}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        out_dtype = x.dtype
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        if self.input_scale is None:
            a, scale_a = fp8_fused.quantize_per_token(x2, self.weight.dtype)
        else:
            a, scale_a = fp8.quantize_static(x2, self.input_scale, self.weight.dtype)
        matmul = fp8.fp8_linear if self.mode == "scaled_mm" else fp8.dequantized_matmul
        if self.mode == "scaled_mm" and _out_dtype(out_dtype) == torch.float16 and scale_a.numel() > 1:
            matmul = fp8.channelwise_linear     # vLLM's kernel for fp16 output with per-token scales
        out = matmul(a, scale_a, self.weight, self.weight_scale, _out_dtype(out_dtype))
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.to(out_dtype).reshape(*lead, self.out_features)


def _out_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def quantize_linear(linear: nn.Linear, per_channel: bool = True, input_scale: torch.Tensor | None = None,
                    mode: str = "scaled_mm") -> Fp8Linear:
    """FP8 copy of a float linear: per-channel (PTPC) or per-tensor weight scales; static input if given."""
    weight = linear.weight.detach()
    quantize = fp8.quantize_weight_per_channel if per_channel else fp8.quantize_weight_per_tensor
    wq, scale = quantize(weight)
    bias = linear.bias.detach().clone() if linear.bias is not None else None
    return Fp8Linear(wq, scale, input_scale, bias, mode).to(weight.device)


def harmonize_fused(group: Sequence[Fp8Linear]) -> None:
    """What vLLM does to the shards of one fused layer (q/k/v, gate/up) with per-tensor scales: one input
    scale, the largest, and weights requantized to the largest weight scale (``requantize_with_max_scale``:
    each shard dequantized in fp16 by ``per_tensor_dequantize``, then ``scaled_fp8_quant`` at the largest)."""
    static = [layer.input_scale is not None for layer in group]
    if any(static) and not all(static):
        raise Fp8LayoutError("the shards of one fused layer mix static and dynamic input scales",
                             field="input_scale")
    if all(static):
        shared = torch.stack([layer.input_scale for layer in group]).amax().reshape(1)
        for layer in group:
            layer.input_scale = shared.clone()
    if all(layer.per_tensor_weight for layer in group):
        top = torch.stack([layer.weight_scale for layer in group]).amax().reshape(1)
        for layer in group:
            restored = layer.weight.to(torch.float16) * layer.weight_scale.reshape(())
            layer.weight = fp8.quantize_with_scale(restored, top, layer.weight.dtype)
            layer.weight_scale = top.clone()


def to_fnuz(layer: Fp8Linear) -> None:
    """In place: e4m3fn weights -> e4m3fnuz (gfx942), scales doubled, as vLLM does on MI300X."""
    if layer.weight.dtype == torch.float8_e4m3fn:
        layer.weight, layer.weight_scale, layer.input_scale = fp8.e4m3fn_to_e4m3fnuz(
            layer.weight, layer.weight_scale, layer.input_scale)
