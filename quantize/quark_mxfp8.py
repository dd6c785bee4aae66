"""MXFP8 weights through Quark 0.13's own export, with the one step it lacks.

Quark 0.13 computes MXFP8 (``OCP_MXFP8E4M3Spec``: its ``PerBlockMXObserver``'s E8M0 scales, its
``fake_quantize_fp8_per_group_with_scale``) but its real quantization of FP8 has per-tensor and per-channel branches
only (``real_quantize_fp8_e4m3`` raises "Unsupported QuantSchema: per_group"), so neither its file-to-file nor its
in-memory export can write an MXFP8 weight. `mxfp8_export` adds the per-group branch for the duration of one run:
the steps of Quark's own fake quantization (groups along the axis, divide by the scale, clamp to +-448) up to its
FP8 cast, which it keeps instead of casting back and multiplying by the scale. Quark's file-to-file path then writes
the FP8 E4M3 weight ``[out, in]`` and its E8M0 ``weight_scale`` ``[out, in / 32]`` (uint8) as it does for MXFP4,
which is the layout vLLM's ``QuarkOCP_MX`` loads for MXFP8.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def quark_per_group_fp8(inputs: torch.Tensor, scale: torch.Tensor, axis: int, group_size: int) -> torch.Tensor:
    """FP8 E4M3 codes of `inputs` with per-group `scale`, the steps of Quark's fake_quantize_fp8_per_group_with_scale
    before its cast back (so codes * scale is Quark's fake-quantized tensor, bit for bit)."""
    from quark.torch.quantization.utils import reshape_to_blocks

    shape = list(inputs.shape)
    shape[-1], shape[axis] = shape[axis], shape[-1]
    scale = scale.masked_fill(scale == 0.0, torch.finfo(torch.float32).eps).to(torch.float32)
    blocks = reshape_to_blocks(inputs.to(torch.float32), group_size, axis)
    if scale.dim() < blocks.dim():
        scale = scale.unsqueeze(-1)
    top = torch.finfo(torch.float8_e4m3fn).max
    codes = torch.clamp(blocks / scale, -top, top).to(torch.float8_e4m3fn)
    codes = codes.reshape(codes.size(0), -1)[:, : shape[-1]].reshape(shape)
    return codes.transpose(axis, -1).contiguous()


@contextlib.contextmanager
def mxfp8_export() -> Iterator[None]:
    """While active, Quark's real quantization of fp8_e4m3 also handles per_group (MX) weights."""
    from quark.torch.kernel.hw_emulation import hw_emulation_interface as kernels

    table = kernels.DTYPE_TO_REAL_QUANTIZE_FUNCS
    original = table["fp8_e4m3"]

    def real_quantize_fp8_e4m3(inputs, scale=None, axis=None, qscheme=None, quant_dtype=None, group_size=None,
                               **kwargs):
        if qscheme == "per_group":
            return quark_per_group_fp8(inputs, scale, axis, group_size)
        return original(inputs, scale=scale, axis=axis, qscheme=qscheme, quant_dtype=quant_dtype,
                        group_size=group_size, **kwargs)

    table["fp8_e4m3"] = real_quantize_fp8_e4m3
    try:
        yield
    finally:
        table["fp8_e4m3"] = original
