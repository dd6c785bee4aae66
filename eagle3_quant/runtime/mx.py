"""OCP microscaling (MX) math in plain torch: E2M1 (MXFP4) or E2M3/E3M2 (MXFP6) elements with E8M0 scales, one
per 32 inputs.

Quark's and vLLM's MX kernels (``quark.torch.kernel.mx.dq_mxfp4`` / ``qdq_mxfp4``) are CUDA/HIP-only; these
functions stand in on any device and are bit-exact to the format:
- a packed weight is uint8 ``[out, in / 2]``, element ``2j`` in the low nibble of byte ``j`` (Quark's
  ``Pack_mxfp4``), each nibble sign | 2 exponent bits | 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6;
- a packed MXFP6 weight is uint8 ``[out, in * 3 / 4]``: four 6-bit codes ``v0..v3`` in three bytes, the
  24-bit little-endian word ``v0 | v1 << 6 | v2 << 12 | v3 << 18`` (Quark's ``Pack_fp6``, the layout of the
  gfx950 ``mfma_scale_f32_16x16x128_f8f6f4`` instruction, what vLLM's ``dequant_mxfp6`` unpacks); each code sign |
  exponent | mantissa, exponent bias 1 (E2M3, largest 7.5) or 3 (E3M2, largest 28), subnormals at exponent 0;
- an E8M0 scale byte ``s`` is ``2 ** (s - 127)`` (255 is NaN);
- a dynamic activation is quantized per block of 32 with Quark's "even" scale (``even_round``: the block's
  max |x| rounded on its two leading mantissa bits, floor(log2), minus the element's emax), elements rounded
  to the nearest representable value, ties to even, saturated at the largest one.
"""

from __future__ import annotations

import torch

from eagle3_quant.reading.mx_format import (  # noqa: F401 - the format's shape facts, used here and by callers
    ELEMENT_BITS,
    MX_BLOCK,
    element_bits_of,
    packed_width,
    unpacked_width,
)

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# element dtype -> (exponent bits, mantissa bits, emax, largest value)
MX_ELEMENTS = {"fp4": (2, 1, 2, 6.0), "fp6_e2m3": (2, 3, 2, 7.5), "fp6_e3m2": (3, 2, 4, 28.0),
               "fp8_e4m3": (4, 3, 8, 448.0)}


def element_table(element: str, device: torch.device | str | None = None) -> torch.Tensor:
    """Every code of an MX element format as float32, in code order (the upper half: the negatives)."""
    ebits, mbits, _, _ = MX_ELEMENTS[element]
    bias = 2 ** (ebits - 1) - 1
    codes = torch.arange(2 ** (ebits + mbits), dtype=torch.float32)
    exponent, mantissa = torch.div(codes, 2 ** mbits, rounding_mode="floor"), codes % 2 ** mbits
    half = torch.where(exponent == 0, mantissa / 2 ** mbits * 2.0 ** (1 - bias),
                       (1 + mantissa / 2 ** mbits) * torch.exp2(exponent - bias))
    return torch.cat([half, -half]).to(device)


def e2m1_table(device: torch.device | str | None = None) -> torch.Tensor:
    """The 16 E2M1 codes as float32 (code 8..15: the negatives; -0 for 8)."""
    half = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    return torch.cat([half, -half])


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., n]`` -> float32 ``[..., 2n]``: low nibble first."""
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(*packed.shape[:-1], -1)
    return e2m1_table(packed.device)[codes.long()]


def element_codes(values: torch.Tensor, element: str) -> torch.Tensor:
    """Values already on the element's grid -> their codes as int32 (sign in the top bit; +0 for zero)."""
    table = element_table(element, values.device)
    half = len(table) // 2
    codes = torch.bucketize(values.abs(), table[:half]).to(torch.int32)
    return codes | (torch.signbit(values) & (values != 0)).to(torch.int32) * half


def pack_e2m1(values: torch.Tensor) -> torch.Tensor:
    """E2M1 values float ``[..., 2n]`` -> uint8 ``[..., n]``, element ``2j`` in the low nibble (inverse of
    `unpack_e2m1`; torch's ``float4_e2m1fn_x2`` packs the same way)."""
    codes = element_codes(values, "fp4")
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def e8m0_to_float(scale: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 -> float32 powers of two (255 -> NaN)."""
    bits = (scale.to(torch.int32) << 23)
    out = bits.view(torch.float32).clone()
    out[scale == 0] = 2.0 ** -127        # exponent field 0 is a float32 subnormal: set the exact power
    out[scale == 255] = float("nan")
    return out


def unpack_fp6_codes(packed: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., 3n]`` -> the 6-bit codes ``[..., 4n]`` (Quark's ``Pack_fp6`` layout)."""
    if packed.shape[-1] % 3:
        raise ValueError(f"packed MXFP6 rows hold 3 bytes per 4 elements, got {packed.shape[-1]} bytes")
    triples = packed.reshape(*packed.shape[:-1], -1, 3).to(torch.int32)
    word = triples[..., 0] | triples[..., 1] << 8 | triples[..., 2] << 16
    codes = torch.stack([(word >> shift) & 0x3F for shift in (0, 6, 12, 18)], dim=-1)
    return codes.reshape(*packed.shape[:-1], -1)


def pack_fp6_codes(codes: torch.Tensor) -> torch.Tensor:
    """The 6-bit codes ``[..., 4n]`` -> uint8 ``[..., 3n]`` (inverse of `unpack_fp6_codes`)."""
    quads = codes.to(torch.int32).reshape(*codes.shape[:-1], -1, 4)
    word = quads[..., 0] | quads[..., 1] << 6 | quads[..., 2] << 12 | quads[..., 3] << 18
    triples = torch.stack([(word >> shift) & 0xFF for shift in (0, 8, 16)], dim=-1)
    return triples.reshape(*codes.shape[:-1], -1).to(torch.uint8)


def unpack_elements(packed: torch.Tensor, element: str) -> torch.Tensor:
    """A packed MX weight -> its elements as float32 (before the scales)."""
    if element == "fp4":
        return unpack_e2m1(packed)
    if element == "fp8_e4m3":       # MXFP8: float8_e4m3fn bytes, unpacked
        return packed.view(torch.float8_e4m3fn).to(torch.float32)
    return element_table(element, packed.device)[unpack_fp6_codes(packed).long()]


def dequantize_mx(packed: torch.Tensor, scale: torch.Tensor, element: str,
                  dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Packed MXFP4 or MXFP6 ``[out, packed]`` with E8M0 ``[out, in / 32]`` -> ``[out, in]`` in `dtype` (vLLM's
    ``dequant_mxfp4`` / ``dequant_mxfp6``: exact in bf16, every product being a small power-of-two multiple)."""
    values = unpack_elements(packed, element)
    rows, cols = values.shape[-2:]
    if scale.shape[-1] * MX_BLOCK != cols:
        raise ValueError(f"{scale.shape[-1]} scales per row for {cols} elements (one per {MX_BLOCK})")
    scaled = values.reshape(*values.shape[:-1], -1, MX_BLOCK) * e8m0_to_float(scale).unsqueeze(-1)
    return scaled.reshape(*values.shape[:-2], rows, cols).to(dtype)


def dequantize_mxfp4(packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Packed E2M1 ``[out, in / 2]`` with E8M0 ``[out, in / 32]`` -> ``[out, in]`` in `dtype` (vLLM's
    ``dequant_mxfp4(weight, weight_scale, dtype)``: exact in bf16, every product being a small power-of-two
    multiple)."""
    return dequantize_mx(packed, scale, "fp4", dtype)


def even_scale(amax: torch.Tensor, element: str = "fp4") -> torch.Tensor:
    """Quark's "even" MX scale of blocks with max |x| `amax` (float32 powers of two), as ``even_round``."""
    _, mbits, emax, _ = MX_ELEMENTS[element]
    bits = amax.to(torch.float32).contiguous().view(torch.int32) + (1 << (23 - mbits - 1))
    rounded = (bits & (0x1FF << 23)).view(torch.float32)
    rounded = torch.where(amax == 0, torch.full_like(rounded, 2.0 ** -126), rounded)
    return torch.exp2(torch.clamp(torch.floor(torch.log2(rounded)) - emax, -127, 127))


def round_to_element(x: torch.Tensor, element: str = "fp4") -> torch.Tensor:
    """Round float32 `x` to the nearest value of the element format, ties to even, saturated."""
    ebits, mbits, _, largest = MX_ELEMENTS[element]
    min_exponent = 2 - 2 ** (ebits - 1)       # 1 - bias: below it the format is subnormal (fixed step)
    magnitude = x.abs().clamp(max=largest)
    exponent = torch.floor(torch.log2(magnitude)).clamp(min=min_exponent)
    step = torch.exp2(exponent - mbits)
    return torch.copysign(torch.round(magnitude / step) * step, x)


def quant_dequant_mx(x: torch.Tensor, element: str = "fp4") -> torch.Tensor:
    """Dynamic MX activation QDQ along the last dim (vLLM's ``quant_dequant_mxfp4``), in x's dtype."""
    shape = x.shape
    if shape[-1] % MX_BLOCK:
        raise ValueError(f"MX activations need a multiple of {MX_BLOCK} features, got {shape[-1]}")
    blocks = x.to(torch.float32).reshape(-1, shape[-1] // MX_BLOCK, MX_BLOCK)
    scale = even_scale(blocks.abs().amax(dim=-1, keepdim=True), element)
    return (round_to_element(blocks / scale, element) * scale).reshape(shape).to(x.dtype)


def quantize_mx(weight: torch.Tensor, element: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A float weight ``[out, in]`` -> (packed uint8 ``[out, packed_width(in)]``, E8M0 uint8 ``[out, in / 32]``),
    with Quark's "even" scales and round-half-even elements (what ``OCP_MXFP4Spec`` / ``OCP_MXFP6E2M3Spec`` /
    ``OCP_MXFP6E3M2Spec`` write)."""
    rows, cols = weight.shape
    if cols % MX_BLOCK:
        raise ValueError(f"MX weights need a multiple of {MX_BLOCK} inputs, got {cols}")
    blocks = weight.to(torch.float32).reshape(rows, cols // MX_BLOCK, MX_BLOCK)
    scale = even_scale(blocks.abs().amax(dim=-1, keepdim=True), element)
    values = round_to_element(blocks / scale, element).reshape(rows, cols)
    if element == "fp4":
        packed = pack_e2m1(values)
    elif element == "fp8_e4m3":
        packed = values.to(torch.float8_e4m3fn).view(torch.uint8)
    else:
        packed = pack_fp6_codes(element_codes(values, element))
    exponent = torch.log2(scale.squeeze(-1)).to(torch.int32) + 127
    return packed, exponent.to(torch.uint8)


def quantize_mxfp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize_mx` with E2M1 elements (MXFP4)."""
    return quantize_mx(weight, "fp4")
