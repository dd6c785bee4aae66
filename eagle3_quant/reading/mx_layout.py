"""Which checkpoint linears are MX (Quark's export: packed uint8 weight, E8M0 uint8 weight_scale; MXFP4 two
elements a byte, MXFP6 four in three bytes), and what their elements and activations are, from config.json's
``quantization_config``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.mx_format import ELEMENT_BITS, MX_BLOCK, element_bits_of
from eagle3_quant.reading.safetensors_header import TensorInfo


def mx_modules(tensors: Mapping[str, TensorInfo], where: Path) -> dict[str, bool]:
    """Module -> has a static input_scale, for every packed MX weight; checks the scale shapes."""
    modules = {}
    for name, info in tensors.items():
        if info.dtype != "U8" or not name.endswith(".weight") or len(info.shape) != 2:
            continue
        module = name.removesuffix(".weight")
        scale = tensors.get(module + ".weight_scale")
        if scale is None:
            raise DraftFormatError("packed MX (U8) weight without weight_scale", path=where, tensor=name)
        if scale.dtype == "F8_E4M3":      # NVFP4: FP8 group scales (int_fp4_layout.py)
            continue
        if scale.dtype != "U8" or len(scale.shape) != 2 or scale.shape[0] != info.shape[0] or \
                element_bits_of(info.shape[1], scale.shape[1]) is None:
            raise DraftFormatError(f"weight_scale must be E8M0 U8 [{info.shape[0]}, in/{MX_BLOCK}] for a weight packed "
                                   f"{list(info.shape)} (MXFP4: in/2 bytes a row, MXFP6: in*3/4), got {scale.dtype} "
                                   f"{list(scale.shape)}", path=where, tensor=module + ".weight_scale")
        modules[module] = has_input_scale(tensors, module, where)
    return modules


def mx_unpacked_shape(tensors: Mapping[str, TensorInfo], module: str) -> tuple[int, int]:
    """The float shape ``[out, in]`` of a packed MX weight (``in`` = 32 per E8M0 scale, MXFP4 and MXFP6 alike)."""
    return tensors[module + ".weight"].shape[0], tensors[module + ".weight_scale"].shape[1] * MX_BLOCK


def has_input_scale(tensors: Mapping[str, TensorInfo], module: str, where: Path) -> bool:
    """Whether a quantized linear (FP8 or MX) has a static input_scale; one that is not F32 [1] is refused."""
    inp = tensors.get(module + ".input_scale")
    if inp is not None and (inp.dtype != "F32" or inp.shape not in ((1,), ())):
        raise DraftFormatError(f"input_scale must be F32 [1], got {inp.dtype} {list(inp.shape)}", path=where,
                               tensor=module + ".input_scale")
    return inp is not None


def mx_weight_element(raw_config: Mapping[str, Any], where: Path) -> str:
    """The MX element dtype config.json declares for the weights: "fp4", "fp6_e2m3" or "fp6_e3m2"."""
    qc = raw_config.get("quantization_config")
    gq = qc.get("global_quant_config") if isinstance(qc, dict) else None
    weight = gq.get("weight") if isinstance(gq, dict) else None
    if not isinstance(weight, dict) or weight.get("dtype") not in ELEMENT_BITS:
        raise DraftFormatError("the checkpoint holds packed MX weights but config.json's quantization_config "
                               f"declares no MX weight ({', '.join(ELEMENT_BITS)})", path=where / "config.json",
                               field="quantization_config.global_quant_config.weight")
    return weight["dtype"]


def mx_input_kind(raw_config: Mapping[str, Any], mx: Mapping[str, bool], where: Path) -> str:
    """"mxfp4" / "mxfp6_e2m3" / "mxfp6_e3m2" (dynamic), "fp8_static" or "none" (weight-only), as the config
    declares for the MX linears."""
    if not mx:
        return "none"
    element = mx_weight_element(raw_config, where)
    inputs = raw_config["quantization_config"]["global_quant_config"].get("input_tensors")
    if inputs is None:
        return "none"
    if inputs.get("dtype") in ELEMENT_BITS and inputs.get("is_dynamic"):
        return "mx" + inputs["dtype"]
    if inputs.get("dtype") == "fp8_e4m3" and inputs.get("qscheme") == "per_tensor" and not inputs.get("is_dynamic") \
            and element == "fp4":
        missing = sorted(m for m, static in mx.items() if not static)
        if missing:   # Quark's file-to-file path writes none; vLLM would load float32 min silently
            raise DraftFormatError("config declares static FP8 input scales but the checkpoint has no input_scale",
                                   path=where, tensor=missing[0] + ".input_scale")
        return "fp8_static"
    raise DraftFormatError(f"{element} MX weights with input_tensors {inputs.get('dtype')} "
                           f"{'dynamic' if inputs.get('is_dynamic') else 'static'} {inputs.get('qscheme')}: no "
                           "engine runs this (vLLM: dynamic MX inputs, or static per-tensor FP8 with MXFP4 weights)",
                           path=where / "config.json", field="quantization_config.global_quant_config.input_tensors")
