"""Which checkpoint linears hold INT8, INT4, NVFP4 or MXFP8 weights, read from their tensors as Quark 0.13 exports
them and vLLM 0.33's Quark schemes load them:

- INT8 (``QuarkW8A8Int8``): ``weight`` I8 ``[out, in]``, ``weight_scale`` float ``[out]``, optional
  ``weight_zero_point`` I8 ``[out]`` (zeros: symmetric);
- INT4 (``QuarkW4A16Int4``, AWQ layout): ``weight`` I32 ``[in, out / 8]`` (eight 4-bit codes an int32, along the
  output dimension), ``weight_scale`` ``[in / group, out]``, ``weight_zero_point`` I32 ``[in / group, out / 8]``;
- NVFP4 (``QuarkNVFP4``): ``weight`` U8 ``[out, in / 2]`` (two E2M1 codes a byte), ``weight_scale`` F8_E4M3
  ``[out, in / 16]``, ``weight_scale_2`` and ``input_scale_2`` F32 scalars (the global scales);
- MXFP8 (``QuarkOCP_MX``): ``weight`` F8_E4M3 ``[out, in]``, ``weight_scale`` U8 (E8M0) ``[out, in / 32]``.

FP8 and packed MXFP4/MXFP6 linears are read by ``runtime/loading.py`` and ``mx_layout.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.safetensors_header import TensorInfo

INT4_PACK = 8          # 4-bit codes in one int32
NVFP4_GROUP = 16
MX_GROUP = 32
SCALE_DTYPES = ("F32", "BF16", "F16")


@dataclass(frozen=True)
class QuantLinear:
    kind: str                      # "int8", "int4", "nvfp4" or "mxfp8"
    shape: tuple[int, int]         # the float weight's [out, in]
    tensors: tuple[str, ...]       # its checkpoint tensors beside .weight (scales, zero points)

    @property
    def group_size(self) -> int | None:
        return None if self.kind == "int8" else NVFP4_GROUP if self.kind == "nvfp4" else \
            MX_GROUP if self.kind == "mxfp8" else None


def _kind(weight: TensorInfo, scale: TensorInfo) -> str | None:
    if weight.dtype == "I8":
        return "int8"
    if weight.dtype == "I32":
        return "int4"
    if weight.dtype == "U8" and scale.dtype == "F8_E4M3":
        return "nvfp4"
    if weight.dtype == "F8_E4M3" and scale.dtype == "U8" and len(scale.shape) == 2:
        return "mxfp8"
    return None


def _problem(kind: str, weight: TensorInfo, get) -> tuple[tuple[int, int], tuple[str, ...], str | None]:
    """(float shape, side tensors, what is wrong or None) of one linear of `kind`."""
    module = weight.name.removesuffix(".weight")
    scale = get("weight_scale")
    rows, cols = weight.shape
    if kind == "int8":
        zero = get("weight_zero_point")
        ok = scale.dtype in SCALE_DTYPES and scale.shape == (rows,) and (
            zero is None or (zero.dtype == "I8" and zero.shape == (rows,)))
        return (rows, cols), (module + ".weight_scale",) + ((module + ".weight_zero_point",) if zero else ()), \
            None if ok else f"INT8 weight [{rows}, {cols}] needs a float weight_scale [{rows}] (and an I8 zero " \
                            "point of the same shape, if any)"
    if kind == "int4":
        zero = get("weight_zero_point")
        out = scale.shape[1] if len(scale.shape) == 2 else 0
        groups = scale.shape[0] if len(scale.shape) == 2 else 0
        ok = scale.dtype in SCALE_DTYPES and out and -(-out // INT4_PACK) == cols and groups and rows % groups == 0 \
            and (zero is None or (zero.dtype == "I32" and zero.shape == (groups, cols)))
        return (out, rows), (module + ".weight_scale",) + ((module + ".weight_zero_point",) if zero else ()), \
            None if ok else f"INT4 weight I32 {list(weight.shape)} ([in, out / 8]) needs a float weight_scale " \
                            "[in / group, out] and an I32 weight_zero_point [in / group, out / 8]"
    if kind == "nvfp4":
        globals_ = [get("weight_scale_2"), get("input_scale_2")]
        ok = scale.shape == (rows, cols * 2 // NVFP4_GROUP) and all(
            g is not None and g.dtype == "F32" and g.numel == 1 for g in globals_)
        return (rows, cols * 2), (module + ".weight_scale", module + ".weight_scale_2", module + ".input_scale_2"), \
            None if ok else f"NVFP4 weight U8 {list(weight.shape)} needs an F8_E4M3 weight_scale " \
                            f"[{rows}, {cols * 2 // NVFP4_GROUP}] and F32 weight_scale_2 and input_scale_2 scalars"
    ok = scale.shape == (rows, cols // MX_GROUP) and cols % MX_GROUP == 0
    return (rows, cols), (module + ".weight_scale",), \
        None if ok else f"MXFP8 weight {list(weight.shape)} needs an E8M0 U8 weight_scale [{rows}, {cols // MX_GROUP}]"


def quant_linears(tensors: Mapping[str, TensorInfo], where: Path) -> dict[str, QuantLinear]:
    """Module -> its INT8 / INT4 / NVFP4 / MXFP8 layout, for every such linear; a malformed one is refused."""
    found = {}
    for name, info in tensors.items():
        if not name.endswith(".weight") or len(info.shape) != 2:
            continue
        module = name.removesuffix(".weight")
        scale = tensors.get(module + ".weight_scale")
        if scale is None:
            continue
        kind = _kind(info, scale)
        if kind is None:
            continue
        shape, side, problem = _problem(kind, info, lambda suffix, m=module: tensors.get(f"{m}.{suffix}"))
        if problem:
            raise DraftFormatError(problem, path=where, tensor=name)
        found[module] = QuantLinear(kind, shape, side)
    return found
