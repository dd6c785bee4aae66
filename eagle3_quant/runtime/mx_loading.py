"""Which checkpoint linears are MXFP4 (Quark's export: packed uint8 weight, E8M0 uint8 weight_scale), and what
their activations are, from config.json's ``quantization_config``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.safetensors_header import TensorInfo
from eagle3_quant.runtime.mx import MX_BLOCK


def mx_modules(tensors: Mapping[str, TensorInfo], where: Path) -> dict[str, bool]:
    """Module -> has a static input_scale, for every packed MXFP4 weight; checks the scale shapes."""
    modules = {}
    for name, info in tensors.items():
        if info.dtype != "U8" or not name.endswith(".weight") or len(info.shape) != 2:
            continue
        module = name.removesuffix(".weight")
        scale = tensors.get(module + ".weight_scale")
        if scale is None:
            raise DraftFormatError("packed MXFP4 (U8) weight without weight_scale", path=where, tensor=name)
        expected = (info.shape[0], info.shape[1] * 2 // MX_BLOCK)
        if scale.dtype != "U8" or scale.shape != expected:
            raise DraftFormatError(f"weight_scale must be E8M0 U8 {list(expected)} (one per {MX_BLOCK} inputs), got "
                                   f"{scale.dtype} {list(scale.shape)}", path=where, tensor=module + ".weight_scale")
        modules[module] = has_input_scale(tensors, module, where)
    return modules


def has_input_scale(tensors: Mapping[str, TensorInfo], module: str, where: Path) -> bool:
    """Whether a quantized linear (FP8 or MX) has a static input_scale; one that is not F32 [1] is refused."""
    inp = tensors.get(module + ".input_scale")
    if inp is not None and (inp.dtype != "F32" or inp.shape not in ((1,), ())):
        raise DraftFormatError(f"input_scale must be F32 [1], got {inp.dtype} {list(inp.shape)}", path=where,
                               tensor=module + ".input_scale")
    return inp is not None


def mx_input_kind(raw_config: Mapping[str, Any], mx: Mapping[str, bool], where: Path) -> str:
    """"mxfp4" (dynamic), "fp8_static" or "none" (weight-only), as the config declares for the MX linears."""
    if not mx:
        return "none"
    qc = raw_config.get("quantization_config")
    gq = qc.get("global_quant_config") if isinstance(qc, dict) else None
    weight = gq.get("weight") if isinstance(gq, dict) else None
    if not isinstance(weight, dict) or weight.get("dtype") != "fp4":
        raise DraftFormatError("the checkpoint holds packed MXFP4 weights but config.json's quantization_config "
                               "declares no fp4 weight", path=where / "config.json",
                               field="quantization_config.global_quant_config.weight")
    inputs = gq.get("input_tensors")
    if inputs is None:
        return "none"
    if inputs.get("dtype") == "fp4" and inputs.get("is_dynamic"):
        return "mxfp4"
    if inputs.get("dtype") == "fp8_e4m3" and inputs.get("qscheme") == "per_tensor" and not inputs.get("is_dynamic"):
        missing = sorted(m for m, static in mx.items() if not static)
        if missing:   # Quark's file-to-file path writes none; vLLM would load float32 min silently
            raise DraftFormatError("config declares static FP8 input scales but the checkpoint has no input_scale",
                                   path=where, tensor=missing[0] + ".input_scale")
        return "fp8_static"
    raise DraftFormatError(f"MXFP4 weights with input_tensors {inputs.get('dtype')} "
                           f"{'dynamic' if inputs.get('is_dynamic') else 'static'} {inputs.get('qscheme')}: no "
                           "engine runs this (vLLM: MXFP4 or static per-tensor FP8 inputs)",
                           path=where / "config.json", field="quantization_config.global_quant_config.input_tensors")
