"""Dynamic per-token FP8 quantization as one Triton kernel: one program per row (token), two passes over it.

Bit-identical to :func:`eagle3_quant.runtime.fp8.quantize_per_token` on the same device:

- ``rowmax = max |x|`` in fp32 (exact in any input dtype); a row holding a NaN gets a NaN scale, as ``amax`` does.
- ``scale = max(rowmax / top, 1 / (top * 512))`` fp32. torch divides a tensor by a Python scalar on CUDA/ROCm as
  ``rowmax * fl32(1 / top)`` and on the CPU as a true division: ``RECIPROCAL`` picks which (the kernel runs on a
  GPU; on CPU tensors only under ``TRITON_INTERPRET=1``, in the tests).
- ``q = clamp(x * (1 / scale), -top, top)`` with ``1 / scale`` correctly rounded (``div_rn``), as torch's
  ``reciprocal``.
- The FP8 code is computed in integers (round to nearest even on the E4M3 grid, subnormals, NaN; fnuz: bias 8, no
  negative zero, NaN = 0x80) and stored as bytes into the FP8 tensor viewed as uint8, so the result does not
  depend on a backend's FP8 conversion, and fnuz works wherever Triton runs.

Importing this module imports triton: ``runtime/fp8_fused.py`` does it only when a GPU tensor asks.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from eagle3_quant.runtime import fp8

MAX_BLOCK = 4096          # elements a program loads at once; a longer row loops


@triton.jit
def _fp8_codes(q, BIAS: tl.constexpr, FNUZ: tl.constexpr):
    """E4M3 byte codes (exponent bias 7 for fn, 8 for fnuz) of fp32 values already clamped to the format's range:
    the significand rounded to 3 bits, half to even, all in integers."""
    bits = q.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    exp = (mag >> 23) - 127                                   # fp32 subnormals and zero: below every FP8 step
    sig = (mag & 0x7FFFFF) | 0x800000                         # 24-bit significand, implicit 1
    shift = 20 + tl.minimum(tl.maximum((1 - BIAS) - exp, 0), 5)    # 3 bits kept; more below the normal range
    steps = sig >> shift
    rem = sig & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    steps += ((rem > half) | ((rem == half) & ((steps & 1) == 1))).to(tl.int32)
    exp = tl.maximum(exp, 1 - BIAS)
    carry = steps >= 16                                       # rounded up into the next binade
    exp = tl.where(carry, exp + 1, exp)
    steps = tl.where(carry, 8, steps)
    code = tl.where(steps < 8, steps, ((exp + BIAS) << 3) | (steps - 8))   # subnormal, else exponent | mantissa
    is_nan = mag > 0x7F800000
    if FNUZ:
        code = tl.where(is_nan, 0x80, tl.where(code == 0, 0, code | sign))   # no negative zero; NaN is 0x80
    else:
        code = tl.where(is_nan, 0x7F, code) | sign
    return code.to(tl.uint8)


@triton.jit
def _per_token_kernel(x_ptr, q_ptr, scale_ptr, K, x_row_stride, q_row_stride, TOP: tl.constexpr,
                      INV_TOP: tl.constexpr, MIN_SCALE: tl.constexpr, RECIPROCAL: tl.constexpr,
                      BIAS: tl.constexpr, FNUZ: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + row * x_row_stride
    q_row = q_ptr + row * q_row_stride
    peak = tl.zeros([BLOCK], dtype=tl.float32)
    nans = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, K, BLOCK):
        cols = start + offs
        a = tl.abs(tl.load(x_row + cols, mask=cols < K, other=0.0).to(tl.float32))
        peak = tl.maximum(peak, a)
        nans += (a != a).to(tl.int32)
    rowmax = tl.max(peak, axis=0)
    rowmax = tl.where(tl.sum(nans, axis=0) > 0, float("nan"), rowmax)
    if RECIPROCAL:
        scale = rowmax * INV_TOP
    else:
        scale = tl.math.div_rn(rowmax, TOP)
    scale = tl.where(scale < MIN_SCALE, MIN_SCALE, scale)               # a NaN scale stays NaN
    tl.store(scale_ptr + row, scale)
    inv = tl.math.div_rn(1.0, scale)
    for start in range(0, K, BLOCK):
        cols = start + offs
        mask = cols < K
        q = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) * inv
        q = tl.where(q > TOP, TOP, tl.where(q < -TOP, -TOP, q))         # NaN passes through, as torch.clamp
        tl.store(q_row + cols, _fp8_codes(q, BIAS, FNUZ), mask=mask)


def quantize_per_token(x: torch.Tensor, dtype: torch.dtype = fp8.FP8_DTYPE, *, reciprocal: bool | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8 [M, K] in `dtype`, scale fp32 [M, 1]) of a 2-D activation, one kernel launch. `reciprocal`: divide
    rowmax by top as torch does on x's device (None), through fl32(1 / top) (True, CUDA/ROCm) or truly (False)."""
    if x.dim() != 2:
        return fp8.quantize_per_token(x, dtype)      # raises the layout error
    if dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        raise ValueError(f"dtype must be float8_e4m3fn or float8_e4m3fnuz, got {dtype}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    m, k = x.shape
    q = torch.empty((m, k), dtype=dtype, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m == 0:
        return q, scale
    top, fnuz = fp8.fp8_max(dtype), dtype == torch.float8_e4m3fnuz
    block = min(triton.next_power_of_2(max(k, 1)), MAX_BLOCK)
    if reciprocal is None:
        reciprocal = x.device.type != "cpu"
    _per_token_kernel[(m,)](x, q.view(torch.uint8), scale, k, x.stride(0), q.stride(0),
                            TOP=top, INV_TOP=inverse_fp32(top), MIN_SCALE=1.0 / (top * 512.0), RECIPROCAL=reciprocal,
                            BIAS=8 if fnuz else 7, FNUZ=fnuz, BLOCK=block, num_warps=8 if block >= 2048 else 4,
                            enable_fp_fusion=False)      # no contraction: the bits must not depend on it
    return q, scale


@functools.cache
def inverse_fp32(value: float) -> float:
    """fl32(1 / value), as torch's CUDA/ROCm division of a tensor by a Python scalar computes the reciprocal it
    multiplies by (in double then rounded, or in fp32: the same for 448 and 224)."""
    return float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(value, dtype=torch.float32))
