"""FP8 E4M3 primitives doing the math vLLM runs for Quark FP8 linears (pure functions).

- Dynamic per-token activations (PTPC): ``scale = max(rowmax|x| / 448, 1 / (448 * 512))`` as fp32 [M, 1],
  ``q = clamp(x * (1 / scale), -448, 448)`` cast to ``float8_e4m3fn`` (vLLM's ``QuantFP8`` native path).
- Static per-tensor activations (``--scheme fp8``): the same with the checkpoint's ``input_scale``.
- ``torch._scaled_mm`` with ``a`` row-major [M, K], ``b = w.t()`` column-major [K, N], fp32 scales
  ``scale_a`` [M, 1] and ``scale_b`` [1, N] (rowwise) or two scalars (tensorwise), bf16 output. The CPU build
  accepts layouts that CUDA/ROCm reject; :func:`check_scaled_mm_inputs` enforces the GPU rules everywhere.
- A CPU torch without rowwise ``_scaled_mm`` (2.11 and older accept only two scalar scales there) gets the exact
  exact dequantized product instead, as :func:`dequantized_matmul` computes it (said once, as a warning).
- :func:`dequantized_matmul`: the reference, dequantize both operands to fp32 then matmul.
- :func:`e4m3fn_to_e4m3fnuz`: what vLLM does on gfx942 (MI300X) before running e4m3fn checkpoints.
"""

from __future__ import annotations

import functools
import warnings

import torch

from eagle3_quant.errors import Fp8LayoutError

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0                               # largest finite float8_e4m3fn
FP8_FNUZ_MAX = 224.0                          # vLLM's clamp for e4m3fnuz on ROCm (torch's 240 loses accuracy)
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)           # vLLM's floor for dynamic scales (all-zero rows)
ALIGNMENT = 16                                # K and N must be multiples of this for CUDA/ROCm _scaled_mm


def fp8_max(dtype: torch.dtype = FP8_DTYPE) -> float:
    return FP8_FNUZ_MAX if dtype == torch.float8_e4m3fnuz else FP8_MAX


def per_token_scale(x: torch.Tensor, dtype: torch.dtype = FP8_DTYPE) -> torch.Tensor:
    """fp32 [M, 1] scales of a 2-D activation, one per row (token)."""
    _require_2d(x, "x")
    top = fp8_max(dtype)
    rowmax = x.abs().amax(dim=-1, keepdim=True).to(torch.float32)
    return (rowmax / top).clamp(min=1.0 / (top * 512.0))


def quantize_with_scale(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = FP8_DTYPE) -> torch.Tensor:
    """``clamp(x / scale)`` to FP8 `dtype`; `scale` is fp32 and broadcasts against `x` ([M,1], [1] or [])."""
    if scale.dtype != torch.float32:
        raise Fp8LayoutError(f"scale must be float32, got {scale.dtype}", field="scale")
    top = fp8_max(dtype)
    q = x.to(torch.float32) * scale.reciprocal()
    return q.clamp(-top, top).to(dtype)


def quantize_per_token(x: torch.Tensor, dtype: torch.dtype = FP8_DTYPE) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token FP8: (x_fp8 [M, K], scale fp32 [M, 1])."""
    scale = per_token_scale(x, dtype)
    return quantize_with_scale(x, scale, dtype), scale


def quantize_static(x: torch.Tensor, input_scale: torch.Tensor, dtype: torch.dtype = FP8_DTYPE,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Static per-tensor FP8 with a calibrated scale: (x_fp8 [M, K], scale fp32 [] scalar)."""
    scale = _scalar(input_scale, "input_scale")
    return quantize_with_scale(x, scale, dtype), scale


def quantize_weight_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Static per-output-channel weight FP8 as Quark writes it: (w_fp8 [N, K], weight_scale fp32 [N])."""
    q, scale = quantize_per_token(w)
    return q, scale.reshape(-1)


def quantize_weight_per_tensor(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Static per-tensor weight FP8: (w_fp8 [N, K], weight_scale fp32 [1])."""
    scale = (w.abs().amax().to(torch.float32) / FP8_MAX).clamp(min=MIN_SCALE).reshape(1)
    return quantize_with_scale(w, scale), scale


def check_scaled_mm_inputs(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> None:
    """The layout rules of CUDA/ROCm ``torch._scaled_mm``, raised as one clear error on any device."""
    _require_2d(a, "a")
    _require_2d(b, "b")
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
            raise Fp8LayoutError(f"{name} must be float8_e4m3fn/fnuz, got {t.dtype}", field=name)
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise Fp8LayoutError(f"inner dimensions differ: a is [{m}, {k}], b is [{k_b}, {n}]", field="b")
    if a.stride(1) != 1 or (m > 1 and a.stride(0) != k):
        raise Fp8LayoutError(f"a must be row-major (contiguous [M, K]); strides are {tuple(a.stride())}",
                             field="a", hint="call .contiguous()")
    if b.stride(0) != 1 or (n > 1 and b.stride(1) != k):
        raise Fp8LayoutError(f"b must be column-major (the transpose of a contiguous [N, K] weight); strides are "
                             f"{tuple(b.stride())}", field="b", hint="pass weight.t()")
    if k % ALIGNMENT or n % ALIGNMENT:
        raise Fp8LayoutError(f"K={k} and N={n} must be multiples of {ALIGNMENT} for GPU _scaled_mm", field="b")
    for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        if scale.dtype != torch.float32:
            raise Fp8LayoutError(f"{name} must be float32, got {scale.dtype}", field=name)
    rowwise = tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n)
    tensorwise = scale_a.numel() == 1 and scale_b.numel() == 1 and scale_a.dim() <= 1 and scale_b.dim() <= 1
    if not (rowwise or tensorwise):
        raise Fp8LayoutError(f"scales must be rowwise ([{m}, 1] and [1, {n}]) or both scalars; got "
                             f"{list(scale_a.shape)} and {list(scale_b.shape)}", field="scale_a")


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``torch._scaled_mm`` after checking the GPU layout rules; returns [M, N] in `out_dtype`."""
    check_scaled_mm_inputs(a, b, scale_a, scale_b)
    if a.device.type == "cpu" and scale_a.numel() * scale_b.numel() > 1 and not cpu_rowwise_scaled_mm():
        _say_cpu_fallback_once()
        return ((a.to(torch.float32) * scale_a.reshape(-1, 1)) @ (b.to(torch.float32) * scale_b.reshape(1, -1))
                ).to(out_dtype)
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)


@functools.cache
def cpu_rowwise_scaled_mm() -> bool:
    """Whether this torch's CPU ``_scaled_mm`` takes rowwise scales (a 16 x 16 probe, once per process)."""
    a = torch.ones(16, 16).to(FP8_DTYPE)
    try:
        torch._scaled_mm(a, a.t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return True


@functools.cache
def _say_cpu_fallback_once() -> None:
    warnings.warn(f"torch {torch.__version__}'s CPU _scaled_mm takes only per-tensor scales: rowwise FP8 "
                  "products on the CPU run as the exact dequantized product (both operands scaled to fp32, "
                  "then an fp32 matmul)", RuntimeWarning, stacklevel=3)


def expand_scales(scale_a: torch.Tensor, scale_w: torch.Tensor, m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales for :func:`scaled_mm`: tensorwise when both are single values, else rowwise [M,1] and [1,N]."""
    if scale_a.numel() == 1 and scale_w.numel() == 1:
        return scale_a.reshape(()), scale_w.reshape(())
    return scale_a.reshape(-1, 1).expand(m, 1).contiguous(), scale_w.reshape(1, -1).expand(1, n).contiguous()


def fp8_linear(a: torch.Tensor, scale_a: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
               out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``a_fp8 [M, K] @ weight_fp8 [N, K].t()`` with scales, via :func:`scaled_mm`."""
    scale_a, scale_b = expand_scales(scale_a, weight_scale, a.shape[0], weight.shape[0])
    return scaled_mm(a, weight.t(), scale_a, scale_b, out_dtype)


def channelwise_linear(a: torch.Tensor, scale_a: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                       out_dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """What vLLM runs where rowwise ``_scaled_mm`` cannot (fp16 output on ROCm): the unscaled FP8 GEMM in fp32,
    then ``* scale_a * scale_w`` in fp32, then `out_dtype` (``ChannelWiseTorchFP8ScaledMMLinearKernel``)."""
    one = torch.ones((), dtype=torch.float32, device=a.device)
    out = scaled_mm(a, weight.t(), one, one, torch.float32)
    return (out * scale_a.reshape(-1, 1) * weight_scale.reshape(1, -1)).to(out_dtype)


def dequantized_matmul(a: torch.Tensor, scale_a: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                       out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Reference for :func:`fp8_linear`: dequantize both operands to fp32, matmul, cast to `out_dtype`."""
    _require_2d(a, "a")
    a32 = a.to(torch.float32) * scale_a.reshape(-1, 1)
    w32 = weight.to(torch.float32) * weight_scale.reshape(-1, 1)
    return (a32 @ w32.t()).to(out_dtype)


def dequantize(weight: torch.Tensor, weight_scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An FP8 [N, K] weight with a per-channel [N] or per-tensor [1] scale back to `dtype`."""
    return (weight.to(torch.float32) * weight_scale.to(torch.float32).reshape(-1, 1)).to(dtype)


def e4m3fn_to_e4m3fnuz(weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """OCP e4m3fn -> e4m3fnuz for gfx942, as vLLM does it: same bits read as fnuz are half the value,
    so scales double; the bit pattern -128 (-0 in fn, NaN in fnuz) becomes 0."""
    if weight.dtype != torch.float8_e4m3fn:
        raise Fp8LayoutError(f"expected float8_e4m3fn, got {weight.dtype}", field="weight")
    bits = weight.view(torch.int8).clone()
    bits[bits == -128] = 0
    doubled = input_scale * 2.0 if input_scale is not None else None
    return bits.view(torch.float8_e4m3fnuz), weight_scale * 2.0, doubled


def _require_2d(t: torch.Tensor, name: str) -> None:
    if t.dim() != 2:
        raise Fp8LayoutError(f"{name} must be 2-D, got shape {list(t.shape)}", field=name)


def _scalar(scale: torch.Tensor, name: str) -> torch.Tensor:
    if scale.numel() != 1:
        raise Fp8LayoutError(f"{name} must hold one value (per-tensor), got shape {list(scale.shape)}", field=name)
    if scale.dtype != torch.float32:
        raise Fp8LayoutError(f"{name} must be float32, got {scale.dtype}", field=name)
    return scale.reshape(())
