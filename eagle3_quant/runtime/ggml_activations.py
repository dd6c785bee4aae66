"""What ggml's CPU matmul does to a linear's activations before multiplying them with the weights: it converts
each row to its weight type's ``vec_dot_type`` (ggml-cpu/ggml-cpu.c `type_traits_cpu`), and the products run on
those values. Quantize-dequantize functions for each, from the reference quantizers in ggml/src/ggml-quants.c:

- Q8_0 (and Q8_1, the same values): blocks of 32, ``d = max|x| / 127`` stored as fp16, ``q = round(x / d)``; the
  value is ``q * fp16(d)``.
- Q8_K: blocks of 256, ``iscale = -127 / m`` with m the element of largest magnitude (its sign kept),
  ``q = min(127, round(iscale * x))``; the value is ``q / iscale``.
- BF16 and F16: the row rounded to that type; F32: unchanged.

Rounding is to the nearest, ties to even (the x86 kernels' ``_mm256_round_ps``; ggml's scalar reference rounds
ties away from zero, which only a value exactly halfway can tell apart). `ggml_linear_inputs` hooks a draft's
linears so that the toolkit's runtime computes them as llama.cpp does, their weights dequantized exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn

Q8_0_BLOCK = 32
Q8_K_BLOCK = 256


def _blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    if x.shape[-1] % size:
        raise ValueError(f"rows of {x.shape[-1]} are no multiple of {size}")
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // size, size)


def q8_0(x: torch.Tensor) -> torch.Tensor:
    blocks = _blocks(x, Q8_0_BLOCK)
    d = blocks.abs().amax(-1, keepdim=True) / 127.0
    inverse = torch.where(d > 0, 1.0 / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(d))
    q = torch.round(blocks * inverse)
    return (q * d.to(torch.float16).to(torch.float32)).reshape(x.shape).to(x.dtype)


def q8_k(x: torch.Tensor) -> torch.Tensor:
    blocks = _blocks(x, Q8_K_BLOCK)
    index = blocks.abs().argmax(-1, keepdim=True)
    m = torch.gather(blocks, -1, index)
    safe = torch.where(m != 0, m, torch.ones_like(m))
    iscale = torch.where(m != 0, -127.0 / safe, torch.zeros_like(m))
    q = torch.clamp(torch.round(iscale * blocks), max=127.0)
    values = torch.where(iscale != 0, q / torch.where(iscale != 0, iscale, torch.ones_like(iscale)),
                         torch.zeros_like(q))
    return values.reshape(x.shape).to(x.dtype)


def rounded(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: x.to(dtype).to(x.dtype)


ACTIVATIONS: dict[str | None, Callable[[torch.Tensor], torch.Tensor] | None] = {
    "q8_0": q8_0, "q8_1": q8_0, "q8_K": q8_k, "bf16": rounded(torch.bfloat16), "f16": rounded(torch.float16),
    None: None}


def ggml_linear_inputs(model: nn.Module, vec_dot: Mapping[str, str | None]) -> list[str]:
    """Hook every linear named in `vec_dot` (module name -> ggml vec_dot type) to see its input as ggml's CPU
    matmul does; returns the module names hooked."""
    modules = dict(model.named_modules())
    hooked = []
    for name, kind in vec_dot.items():
        convert = ACTIVATIONS[kind]
        if convert is None or name not in modules:
            continue
        modules[name].register_forward_pre_hook(lambda _module, args, f=convert: (f(args[0]), *args[1:]))
        hooked.append(name)
    return hooked
