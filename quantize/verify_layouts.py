"""The export check of INT8, INT4, NVFP4 and MXFP8 linears: what Quark must have written for one quantized linear
of the plan's scheme, in the layout vLLM's Quark scheme loads (``reading/int_fp4_layout.py``)."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import QuantizationError
from eagle3_quant.reading.safetensors_header import TensorInfo
from eagle3_quant.schemes import Scheme

FLOAT_SCALES = ("F32", "BF16", "F16")


def _expect(written: dict[str, TensorInfo], name: str, dtypes: tuple[str, ...], shape: tuple[int, ...],
            where: Path) -> str:
    info = written.get(name)
    if info is None:
        raise QuantizationError("missing from the output", path=where, tensor=name)
    if info.dtype not in dtypes or info.shape != shape:
        raise QuantizationError(f"expected {' or '.join(dtypes)} {list(shape)}, got {info.dtype} {list(info.shape)}",
                                path=where, tensor=name)
    return name


def check_quant_weight(written: dict[str, TensorInfo], module: str, src_info: TensorInfo, scheme: Scheme,
                       where: Path) -> set[str]:
    """Raise on a tensor of the wrong dtype or shape; return the names added beside the source's."""
    rows, cols = src_info.shape
    spec = scheme.weight
    if spec.dtype == "int8":
        _expect(written, module + ".weight", ("I8",), (rows, cols), where)
        added = {_expect(written, module + ".weight_scale", FLOAT_SCALES, (rows,), where)}
        if module + ".weight_zero_point" in written:       # Quark's in-memory export writes the zeros
            added.add(_expect(written, module + ".weight_zero_point", ("I8",), (rows,), where))
        return added
    if spec.dtype == "uint4":
        packed, groups = -(-rows // 8), cols // spec.group_size
        _expect(written, module + ".weight", ("I32",), (cols, packed), where)
        return {_expect(written, module + ".weight_scale", FLOAT_SCALES, (groups, rows), where),
                _expect(written, module + ".weight_zero_point", ("I32",), (groups, packed), where)}
    if spec.nvfp4:
        _expect(written, module + ".weight", ("U8",), (rows, cols // 2), where)
        return {_expect(written, module + ".weight_scale", ("F8_E4M3",), (rows, cols // spec.group_size), where),
                _expect(written, module + ".weight_scale_2", ("F32",), (), where),
                _expect(written, module + ".input_scale_2", ("F32",), (), where)}
    _expect(written, module + ".weight", ("F8_E4M3",), (rows, cols), where)          # MXFP8
    return {_expect(written, module + ".weight_scale", ("U8",), (rows, cols // spec.group_size), where)}
