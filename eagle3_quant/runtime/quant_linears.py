"""INT8, INT4, NVFP4 and MXFP8 linears of a checkpoint (``reading/int_fp4_layout.py``) placed in a runtime draft, each
running vLLM's math for its scheme; fused shards made to share what vLLM shares."""

from __future__ import annotations

import torch
from torch import nn

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.int_fp4_layout import QuantLinear
from eagle3_quant.runtime.int_linear import Int4Linear, Int8Linear
from eagle3_quant.runtime.mx_linear import MxLinear
from eagle3_quant.runtime.nvfp4_linear import NvFp4Linear, harmonize_fused_nvfp4

KIND_NAMES = {"int8": "INT8", "int4": "INT4", "nvfp4": "NVFP4", "mxfp8": "MXFP8"}


def build_linear(linear: QuantLinear, module: str, state: dict[str, torch.Tensor],
                 bias: torch.Tensor | None) -> nn.Module:
    """The runtime layer of one checkpoint linear; its tensors are taken out of `state`."""
    weight, scale = state.pop(module + ".weight"), state.pop(module + ".weight_scale")
    if linear.kind == "int8":
        state.pop(module + ".weight_zero_point", None)      # zeros (symmetric): vLLM drops it after loading
        return Int8Linear(weight, scale, bias)
    if linear.kind == "int4":
        return Int4Linear(weight, scale, state.pop(module + ".weight_zero_point"), bias)
    if linear.kind == "nvfp4":
        return NvFp4Linear(weight, scale, state.pop(module + ".weight_scale_2"), state.pop(module + ".input_scale_2"),
                           bias)
    # MXFP8: vLLM's EmulationMxfp8LinearKernel dequantizes the weight and quantizes no activation
    return MxLinear(weight.view(torch.uint8), scale, "none", None, bias, "fp8_e4m3")


def place_quant_linears(draft: nn.Module, state: dict[str, torch.Tensor], linears: dict[str, QuantLinear],
                        dtype: torch.dtype) -> None:
    for module, linear in linears.items():
        parent_name, _, child = module.rpartition(".")
        parent = draft.get_submodule(parent_name) if parent_name else draft
        bias = state.pop(module + ".bias", None)
        setattr(parent, child, build_linear(linear, module, state, bias.to(dtype) if bias is not None else None))


def check_fused(names: list[str], roles: tuple[str, ...], linears: dict[str, QuantLinear], draft: nn.Module) -> None:
    """A fused layer's shards are all of one kind or none of these kinds; NVFP4 shards share their global scales."""
    kinds = {linears[n].kind if n in linears else None for n in names}
    if len(kinds) > 1:
        odd = next(n for n in names if (linears[n].kind if n in linears else None) != (
            linears[names[0]].kind if names[0] in linears else None))
        raise DraftFormatError(f"vLLM fuses {', '.join(roles)}: they must all be quantized the same way "
                               f"({', '.join(sorted(KIND_NAMES.get(k, 'float or FP8') for k in kinds))} found)",
                               tensor=odd + ".weight")
    if kinds == {"nvfp4"}:
        harmonize_fused_nvfp4([draft.get_submodule(n) for n in names])
