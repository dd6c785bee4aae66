"""The names of the side tensors a quantized linear carries next to its weight, as Quark writes and vLLM loads them."""

from __future__ import annotations

QUANT_SUFFIXES = ("weight_scale", "input_scale", "weight_zero_point", "input_zero_point", "output_scale",
                  "weight_scale_2", "input_scale_2")
# What this project's exports write per quantized linear (INT zero points; NVFP4's global scales). Reading an artifact
# back strips exactly these, so an input zero point or output scale that no scheme here writes stays visible as an
# unexpected tensor.
WRITTEN_SCALE_SUFFIXES = ("weight_scale", "input_scale", "weight_zero_point", "weight_scale_2", "input_scale_2")
