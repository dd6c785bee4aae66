"""Weight SQNR of a written artifact against its BF16 reference: every quantized weight dequantized as written
(FP8 weight x scale, MX elements x E8M0 scales, INT8/INT4/NVFP4/MXFP8 as the runtime dequantizes them), in fp64.
`validate` gates its lowest; `quantize --scheme auto` gates the candidates it had Quark write the same way."""

from __future__ import annotations

import math

import torch

from eagle3_quant.reading.artifact import Fp8Artifact
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.mx_layout import mx_unpacked_shape
from eagle3_quant.runtime import fp8
from eagle3_quant.runtime.mx import dequantize_mx


def _dequantized(art: Fp8Artifact, module: str, linear) -> torch.Tensor:
    from eagle3_quant.runtime.quant_linears import build_linear

    state = {name: art.checkpoint.tensors[name].load() for name in (module + ".weight", *linear.tensors)}
    return build_linear(linear, module, state, None).dequantized_weight(torch.float32)


def sqnr_db(reference: torch.Tensor, approx: torch.Tensor) -> float:
    """10 log10(|ref|^2 / |approx - ref|^2) in fp64; inf when identical."""
    ref = reference.to(torch.float64)
    noise = float((approx.to(torch.float64) - ref).pow(2).sum())
    signal = float(ref.pow(2).sum())
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def weight_sqnr(art: Fp8Artifact, reference: DraftCheckpoint) -> list[dict]:
    """Per FP8 linear: SQNR of the dequantized weight against the reference weight."""
    layers = []
    for module in art.fp8_modules:
        info = art.checkpoint.tensors[module + ".weight"]
        ref_info = reference.checkpoint.tensors.get(module + ".weight")
        packed = module in art.mx_modules
        linear = art.quant_linears.get(module)
        shape = linear.shape if linear else mx_unpacked_shape(art.checkpoint.tensors, module) if packed else info.shape
        if ref_info is None or ref_info.shape != shape:
            continue
        if linear is not None:      # INT8, INT4, NVFP4, MXFP8: dequantized as the runtime (and vLLM) does
            dequantized = _dequantized(art, module, linear)
        elif module in art.mx_modules:
            dequantized = dequantize_mx(info.load(), art.checkpoint.tensors[module + ".weight_scale"].load(),
                                        art.mx_element, torch.float32)
        else:
            dequantized = fp8.dequantize(info.load(), art.checkpoint.tensors[module + ".weight_scale"].load())
        layers.append({"module": module, "role": art.role_of(module), "shape": list(ref_info.shape),
                       "sqnr_db": sqnr_db(ref_info.load(), dequantized)})
    return layers
