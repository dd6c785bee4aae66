"""Dynamic per-token FP8 quantization as an engine runs it: one fused kernel on a GPU, the eager function elsewhere.

:func:`quantize_per_token` returns what :func:`eagle3_quant.runtime.fp8.quantize_per_token` returns on the same
device; :func:`quant_method` says which implementation a device gets:

- ``"triton"``: a CUDA/ROCm tensor and an importable triton: ``runtime/fp8_triton.py``, one launch, bit-identical.
- ``"torch.compile"``: a GPU tensor without it: ``torch.compile`` of the eager function (inductor fuses the 6-8
  kernels; its scale division is inductor's, not checked bit for bit).
- ``"eager"``: a CPU or meta tensor, code that ``torch.compile`` itself is tracing (it fuses the eager ops), or a
  GPU where both of the above failed on first use (each failure is warned once and kept in :data:`FAILURES`).
"""

from __future__ import annotations

import functools
import warnings

import torch

from eagle3_quant.runtime import fp8

METHODS = ("triton", "torch.compile", "eager")
FAILURES: dict[str, str] = {}          # "cuda:0 triton" -> the error of its first use there
_WORKED: set[str] = set()              # "cuda:0 triton": ran once, so later errors are the caller's


def quant_method(device: torch.device | str) -> str:
    """The implementation :func:`quantize_per_token` uses for a tensor on `device`."""
    device = torch.device(device)
    if device.type != "cuda":
        return "eager"
    if device.index is None and torch.cuda.is_available():     # as a tensor's device reads: "cuda:0"
        device = torch.device("cuda", torch.cuda.current_device())
    for method in METHODS[:-1]:
        if f"{device} {method}" not in FAILURES and _available(method):
            return method
    return "eager"


def quantize_per_token(x: torch.Tensor, dtype: torch.dtype = fp8.FP8_DTYPE, method: str | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token FP8: (x_fp8 [M, K], scale fp32 [M, 1]). `method` forces one of :data:`METHODS`
    (then a failure raises); None picks with :func:`quant_method` and falls back on a first-use failure."""
    if method is not None and method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if torch.compiler.is_compiling():
        return fp8.quantize_per_token(x, dtype)
    chosen = method or quant_method(x.device)
    while chosen != "eager":
        key = f"{x.device} {chosen}"
        try:
            out = _run(chosen, x, dtype)
        except Exception as exc:   # a kernel that cannot build here: record it, use the next way
            if method is not None or key in _WORKED:
                raise
            FAILURES[key] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"fused FP8 quantization ({chosen}) failed on {x.device}, using the next way: "
                          f"{FAILURES[key]}", RuntimeWarning, stacklevel=2)
            chosen = quant_method(x.device)
            continue
        _WORKED.add(key)
        return out
    return fp8.quantize_per_token(x, dtype)


def _run(method: str, x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    if method == "triton":
        from eagle3_quant.runtime import fp8_triton

        return fp8_triton.quantize_per_token(x, dtype)
    return _compiled()(x, dtype)


@functools.cache
def _available(method: str) -> bool:
    if method == "torch.compile":
        return hasattr(torch, "compile")
    try:
        import triton  # noqa: F401  (only whether it imports)
    except Exception:   # a broken install counts as none
        return False
    return True


@functools.cache
def _compiled():
    return torch.compile(fp8.quantize_per_token, fullgraph=True)
