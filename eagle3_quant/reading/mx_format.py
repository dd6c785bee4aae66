"""The OCP MX format's shape facts: one E8M0 scale per 32 elements, MXFP4 elements 4 bits (two a byte), MXFP6 6 bits
(four in three bytes). What a reader of packed checkpoints needs; the math on them is `runtime/mx.py`.

Standard library only: the engine children load this file by its path (`engines/vllm/serve_cpu.py`).
"""

from __future__ import annotations

MX_BLOCK = 32
ELEMENT_BITS = {"fp4": 4, "fp6_e2m3": 6, "fp6_e3m2": 6, "fp8_e4m3": 8}   # MXFP8: float8_e4m3fn, one a byte


def unpacked_width(packed_cols: int, element: str) -> int:
    """Elements per row of a packed weight with `packed_cols` bytes per row."""
    return packed_cols * 8 // ELEMENT_BITS[element]


def packed_width(cols: int, element: str) -> int:
    """Bytes per row of `cols` packed elements (MXFP4: cols / 2, MXFP6: cols * 3 / 4)."""
    return cols * ELEMENT_BITS[element] // 8


def element_bits_of(packed_cols: int, scale_cols: int) -> int | None:
    """4 or 6 when a packed U8 row of `packed_cols` bytes with `scale_cols` E8M0 scales is MXFP4 or MXFP6."""
    elements = scale_cols * MX_BLOCK
    bits = packed_cols * 8 // elements if elements else 0
    return bits if bits in (4, 6) and packed_cols * 8 == bits * elements else None
