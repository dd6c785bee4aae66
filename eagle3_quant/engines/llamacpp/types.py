"""The GGUF types `gguf` writes, as data: how each is made and what its linears become.

- ``bf16``: llama.cpp's converter alone; the reference every other type is measured against.
- llama.cpp's own rounding (`llama-quantize` file types): ``q8_0``, ``q6_k``, ``q5_k_m``, ``q4_k_m``, ``q4_0``, and
  ``mxfp4`` (GGML's MXFP4 blocks for the layer's linears, ``--tensor-type``).
- Carried bit for bit from a Quark artifact (`carries`): ``mxfp4`` from an MXFP4-weight artifact
  (``w_mxfp4_a_mxfp4``, ``w_mxfp4_a_fp8``), ``nvfp4`` from an ``nvfp4`` artifact (GGML's NVFP4 block holds no
  per-tensor scale, so only scales of exactly 1 carry: see quantize/gguf_blocks.py).

`fc` and `lm_head` stay BF16 unless asked (as the FP8 default keeps them).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.errors import SchemeError


@dataclass(frozen=True)
class GgufType:
    name: str                       # what --type takes
    label: str                      # llama.cpp's spelling, in file names and tables
    summary: str
    file_type: str | None = None    # llama-quantize's file type (None: the converter's BF16, or carried only)
    layer_type: str | None = None   # a --tensor-type for the layer's linears over the file type (mxfp4)
    carries: str | None = None      # the Quark weight layout carried bit for bit ("mx" fp4, "nvfp4")
    bits: float = 16.0              # bits a weight of the layer's linears, scales included

    @property
    def made_by_quantize(self) -> bool:
        return self.file_type is not None


GGUF_TYPES: dict[str, GgufType] = {t.name: t for t in (
    GgufType("bf16", "BF16", "the converter's BF16: the reference"),
    GgufType("q8_0", "Q8_0", "llama.cpp Q8_0: int8 in blocks of 32, an fp16 scale each", "Q8_0", bits=8.5),
    GgufType("q6_k", "Q6_K", "llama.cpp Q6_K: 6-bit k-quant, super-blocks of 256", "Q6_K", bits=6.5625),
    GgufType("q5_k_m", "Q5_K_M", "llama.cpp Q5_K_M: 5-bit k-quant mixture, super-blocks of 256", "Q5_K_M",
             bits=5.5),
    GgufType("q4_k_m", "Q4_K_M", "llama.cpp Q4_K_M: 4-bit k-quant mixture (attn_v, ffn_down Q6_K), super-blocks "
                                 "of 256", "Q4_K_M", bits=4.5),
    GgufType("q4_0", "Q4_0", "llama.cpp Q4_0: 4-bit in blocks of 32, an fp16 scale each", "Q4_0", bits=4.5),
    GgufType("mxfp4", "MXFP4", "MXFP4: E2M1 in blocks of 32, an E8M0 scale each (from a BF16 draft, llama.cpp's "
                               "rounding; from a Quark MXFP4 artifact, its blocks bit for bit)", "Q8_0", "mxfp4",
             "mx", bits=4.25),
    GgufType("nvfp4", "NVFP4", "NVFP4: E2M1 in blocks of 16, an E4M3 scale each; carried from a Quark nvfp4 "
                               "artifact only", carries="nvfp4", bits=4.5),
)}
DEFAULT_GGUF_TYPE = "q8_0"
KEPT = {"fc.weight": "fc", "output.weight": "lm_head"}      # GGUF name -> the option that quantizes it


def gguf_type(name: str) -> GgufType:
    try:
        return GGUF_TYPES[name.lower()]
    except KeyError:
        raise SchemeError(f"unknown GGUF type {name!r}; valid types: {', '.join(GGUF_TYPES)}",
                          field="type") from None
