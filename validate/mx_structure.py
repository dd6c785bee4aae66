"""Data-free check of an MX draft's quantized linears: packed E2M1 / E2M3 / E3M2 weights, E8M0 scales, input
scales."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from eagle3_quant.reading.artifact import quant_spec
from eagle3_quant.reading.mx_format import MX_BLOCK, element_bits_of
from eagle3_quant.validate.report import Check, failed, passed

if TYPE_CHECKING:
    from eagle3_quant.reading.artifact import Fp8Artifact

SHOWN = 3



def check_mx_weights(art: Fp8Artifact) -> Check:
    """Every MX linear: U8 weight [out, in/2] (MXFP4) or [out, in*3/4] (MXFP6), U8 E8M0 weight_scale [out, in/32]
    without NaN (0xFF), one element width for all, an input
    scale (one finite positive F32) exactly when the config declares static inputs; no other quantized dtype."""
    tensors, problems = art.checkpoint.tensors, []
    inputs = quant_spec(quant_spec(art.quant_config.get("global_quant_config")).get("input_tensors"))
    static = bool(inputs) and not inputs.get("is_dynamic")
    widths = set()
    for module in art.mx_modules:
        weight, scale = tensors[module + ".weight"], tensors[module + ".weight_scale"]
        bits = element_bits_of(weight.shape[1], scale.shape[1]) if len(scale.shape) == 2 else None
        widths.add(bits)
        if bits is None or scale.shape[0] != weight.shape[0]:
            problems.append(f"{scale.name} is {list(scale.shape)} for a packed weight {list(weight.shape)}")
        elif bool((scale.load() == 255).any()):
            problems.append(f"{scale.name} holds the E8M0 NaN (0xFF)")
        inp = tensors.get(module + ".input_scale")
        if static and inp is None:
            problems.append(f"{module}.input_scale is missing (static inputs; vLLM would load float32 min)")
        elif inp is not None:
            values = inp.load()
            if inp.dtype != "F32" or inp.numel != 1 or not bool(torch.isfinite(values).all() and (values > 0).all()):
                problems.append(f"{inp.name} must be one finite positive F32 value")
    others = sorted(set(art.fp8_modules) - set(art.mx_modules))
    problems += [f"{m}.weight is FP8 beside MX linears" for m in others]
    if len(widths - {None}) > 1:
        problems.append("MXFP4 and MXFP6 packed weights in one artifact (one global_quant_config)")
    if problems:
        more = f" (+{len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        return failed("mx_weights", "; ".join(problems[:SHOWN]) + more)
    name = {4: "MXFP4 weights (packed E2M1", 6: "MXFP6 weights (packed 4 in 3 bytes"}.get(next(iter(widths), 4))
    return passed("mx_weights", f"{len(art.mx_modules)} {name}, E8M0 scales per {MX_BLOCK})"
                                f"{', static FP8 input scales' if static else ''}", modules=list(art.mx_modules))
