"""A Quark artifact's FP4 weights as GGML blocks, byte for byte, where the layouts match (ggml/src/ggml-common.h,
ggml-quants.c, ggml-impl.h of the pinned llama.cpp):

- MXFP4 (`block_mxfp4`): 32 elements in 17 bytes, the E8M0 scale byte then 16 bytes whose byte j holds element j
  (low nibble) and element j + 16 (high nibble). ggml's value is ``kvalues_mxfp4[code] * 2^(e - 128)`` with the
  doubled E2M1 table, i.e. ``E2M1[code] * 2^(e - 127)``: OCP's value, so the codes and the scale byte copy unchanged
  and only the nibbles move. (e = 255, NaN in OCP, is 2^127 in ggml: never written for a finite weight.)
- NVFP4 (`block_nvfp4`): 64 elements in 36 bytes, four UE4M3 scale bytes (one per 16 elements) then 32 bytes, byte
  j of group s holding element 16s + j and 16s + j + 8. Its value is ``E2M1[code] * E4M3(d)``: no per-tensor scale.
  Quark's NVFP4 weight is ``E2M1 * E4M3 * weight_scale_2``, and llama.cpp's eagle3 graph applies no ``.scale``
  tensor (src/models/eagle3.cpp), so it carries bit for bit only where weight_scale_2 is exactly 1; a negative
  scale byte has no UE4M3 spelling either.

The q and k rows move as llama.cpp's converter moves them (engines/llamacpp/names.py `rope_row_order`). Whatever is
packed here is proven afterwards: ggml's own dequantization of the written file against the BF16 values the
converter wrote from the same artifact.
"""

from __future__ import annotations

import torch

from eagle3_quant.errors import QuantizationError

MXFP4_BLOCK = 32
NVFP4_BLOCK = 64
NVFP4_GROUP = 16


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [rows, cols / 2] (element 2j low, 2j + 1 high) -> codes uint8 [rows, cols] in element order."""
    return torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(packed.shape[0], -1)


def mxfp4_blocks(packed: torch.Tensor, scale: torch.Tensor, tensor: str) -> torch.Tensor:
    """Quark MXFP4 (packed uint8 [rows, K / 2], E8M0 uint8 [rows, K / 32]) -> GGML MXFP4 bytes [rows, K / 32 * 17]."""
    rows, blocks = scale.shape
    if packed.dtype != torch.uint8 or scale.dtype != torch.uint8 or packed.shape != (rows, blocks * MXFP4_BLOCK // 2):
        raise QuantizationError(f"not an MXFP4 weight (uint8 [rows, K/2] with E8M0 uint8 [rows, K/32]): "
                                f"{packed.dtype} {list(packed.shape)}, scale {scale.dtype} {list(scale.shape)}",
                                tensor=tensor)
    if bool((scale == 0xFF).any()):
        raise QuantizationError("an E8M0 scale of 255 (NaN in OCP MX, 2^127 in ggml): no GGML block holds it",
                                tensor=tensor)
    codes = _nibbles(packed).reshape(rows, blocks, MXFP4_BLOCK)
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    return torch.cat((scale.reshape(rows, blocks, 1), qs), dim=-1).reshape(rows, blocks * 17).contiguous()


def nvfp4_blocks(packed: torch.Tensor, scale: torch.Tensor, global_scale: float, tensor: str) -> torch.Tensor:
    """Quark NVFP4 (packed uint8 [rows, K / 2], E4M3 [rows, K / 16], global FP32) -> GGML NVFP4 bytes
    [rows, K / 64 * 36]; refused (naming what differs) where the layouts do not meet."""
    rows, groups = scale.shape
    if global_scale != 1.0:
        raise QuantizationError(
            f"weight_scale_2 is {global_scale!r}: GGML's NVFP4 block holds no per-tensor scale and llama.cpp's eagle3 "
            "graph applies no .scale tensor (src/models/eagle3.cpp), so these blocks cannot be carried bit for bit",
            tensor=tensor, hint="make the GGUF from the BF16 draft (--type q4_0, q4_k_m or mxfp4)")
    if (groups * NVFP4_GROUP) % NVFP4_BLOCK:
        raise QuantizationError(f"rows of {groups * NVFP4_GROUP} are no multiple of GGML NVFP4's block of "
                                f"{NVFP4_BLOCK}", tensor=tensor)
    raw = scale.contiguous().view(torch.uint8) if scale.dtype == torch.float8_e4m3fn else scale
    if bool((raw & 0x80).any()):
        raise QuantizationError("a negative E4M3 group scale: GGML's NVFP4 scales are unsigned (UE4M3)",
                                tensor=tensor)
    codes = _nibbles(packed).reshape(rows, groups, NVFP4_GROUP)
    qs = (codes[..., :8] | (codes[..., 8:] << 4)).reshape(rows, groups // 4, 32)
    return torch.cat((raw.reshape(rows, groups // 4, 4), qs), dim=-1).reshape(rows, groups // 4 * 36).contiguous()


def reorder_rows(weight: torch.Tensor, order: list[int] | None) -> torch.Tensor:
    return weight if order is None else weight[torch.tensor(order)]
