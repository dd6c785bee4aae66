"""vLLM's own per-token FP8 linear, as its kernels run it, for the kernel check's timing (validate/linear_timing.py):
``vllm._custom_ops.scaled_fp8_quant(x, use_per_token_if_dynamic=True)`` then ``vllm._custom_ops.cutlass_scaled_mm``
(vLLM routes the latter to its ``triton_scaled_mm`` on ROCm). Only where vLLM imports (a GPU build)."""

from __future__ import annotations

from collections.abc import Callable

import torch

OPS = ("scaled_fp8_quant", "cutlass_scaled_mm")


def vllm_fp8_linear() -> tuple[Callable | None, str]:
    """(run(x bf16 [M, K], weight FP8 [N, K], weight_scale fp32 [N, 1]) -> bf16 [M, N], label), or (None, why it is
    not measured here)."""
    try:
        import vllm
        from vllm import _custom_ops as ops
    except Exception as exc:   # absent, or a build for another device
        return None, f"vllm does not import here ({type(exc).__name__}: {str(exc)[:200]})"
    missing = [name for name in OPS if not hasattr(ops, name)]
    if missing:
        return None, f"vllm {vllm.__version__} has no _custom_ops.{', _custom_ops.'.join(missing)}"

    def run(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
        q, scale = ops.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
        return ops.cutlass_scaled_mm(q, weight.t(), scale, weight_scale, torch.bfloat16)

    return run, (f"vLLM {vllm.__version__}'s FP8 linear: _custom_ops.scaled_fp8_quant(x, use_per_token_if_dynamic"
                 "=True) + _custom_ops.cutlass_scaled_mm (on ROCm vLLM routes it to its triton_scaled_mm)")
