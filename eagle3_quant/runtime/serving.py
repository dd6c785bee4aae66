"""How the serving engine computes the draft, as the offline prediction follows it: the one owner of the dtype
and the numerics that `validate`, `sensitivity`, `quantize --scheme auto` and static FP8 / GPTQ's rollout
run the draft in, and of the record each of them writes about it.

- dtype: vLLM runs the draft in the target's dtype (``SpeculativeConfig`` gives the draft model config
  ``dtype=target_model_config.dtype``) and refuses float32 for Quark checkpoints ("torch.float32 is not
  supported for quantization method quark"), so the prediction runs in bfloat16, or in float16 for a draft
  whose config says float16 (original EAGLE drafts of fp16 targets). Never float32, on any device.
- SiLU-mul before down_proj: vLLM's ``silu_and_mul`` and, for a static FP8 down_proj, the fused
  ``silu_and_mul_quant`` (``fused_act_quant._silu_and_mul_fp8_static``; CUDA/HIP ``act_and_mul_quant_kernel``)
  compute the same rounded product: ``silu_kernel<scalar_t>`` evaluates SiLU in fp32 and returns the model
  dtype, and the product of two ``c10::BFloat16`` values is rounded again; the fused kernel then quantizes
  that product (``x * (1 / scale)`` in fp32, clamp to +-448, e4m3fn). Torch's own bf16 ``silu(gate) * up``
  rounds at the same two points, which is what the runtime's MLP computes. (SGLang's CUDA ``silu_and_mul``,
  flashinfer's ``act_and_mul_kernel``, rounds once, after an fp32 product: not what is predicted here.)
- Fused shards with per-tensor scales (q/k/v, gate/up): one input scale, the largest; weights requantized to
  the largest weight scale after an fp16 dequantization (``requantize_with_max_scale`` /
  ``per_tensor_dequantize``), as ``runtime.fp8_linear.harmonize_fused`` does.
- Residual adds in fp32 inside the fused add+RMSNorm, attention scores and softmax in fp32
  (``runtime/model.py``, ``runtime/attention.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eagle3_quant.runtime import fp8

ENGINE = "vllm"
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
SILU_MUL_PATH = ("vLLM silu_and_mul / fused silu_and_mul_quant (static FP8 down_proj): SiLU in fp32 rounded "
                 "to the dtype, the product rounded to the dtype, then x * (1 / input_scale), clamp +-448, e4m3fn")
FUSED_SHARDS = ("q/k/v and gate/up with per-tensor scales: the largest input scale; weights dequantized in fp16 "
                "and requantized to the largest weight scale (vLLM requantize_with_max_scale)")


@dataclass(frozen=True)
class ServingNumerics:
    """What the prediction computes in, and why (recorded in validation.json, the manifest and reports)."""

    dtype: torch.dtype
    dtype_reason: str
    engine: str = ENGINE
    silu_mul: str = SILU_MUL_PATH
    fused_shards: str = FUSED_SHARDS

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES[self.dtype]

    def record(self, computed: torch.dtype | None = None) -> dict:
        """`computed`: the dtype a rollout really ran in, when it could not be this one (recorded as such)."""
        record = {"engine": self.engine, "compute_dtype": self.dtype_name, "dtype_reason": self.dtype_reason,
                  "silu_mul": self.silu_mul, "fused_shards": self.fused_shards}
        if computed is not None and computed != self.dtype:
            record["compute_dtype"] = str(computed).removeprefix("torch.")
            record["dtype_reason"] = (f"the source's dtype: Quark exports the in-memory model's tensors in it "
                                      f"(vLLM serves {self.dtype_name}: {self.dtype_reason})")
        return record

    def line(self) -> str:
        return f"{self.engine}'s numerics in {self.dtype_name} ({self.dtype_reason})"


def serving_numerics(draft_torch_dtype: str | None) -> ServingNumerics:
    """The numerics vLLM serves a draft whose config declares `draft_torch_dtype` with."""
    if draft_torch_dtype == "float16":
        return ServingNumerics(torch.float16, "the draft is float16: served with a float16 target")
    declared = f"the draft's config says {draft_torch_dtype}" if draft_torch_dtype else "no torch_dtype declared"
    if draft_torch_dtype == "bfloat16":
        return ServingNumerics(torch.bfloat16, "the draft's dtype, as vLLM serves Quark drafts")
    return ServingNumerics(torch.bfloat16, f"{declared}; vLLM serves Quark checkpoints in bf16 or fp16 only")


def silu_and_mul_quant(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype = torch.float8_e4m3fn,
                       ) -> torch.Tensor:
    """vLLM's ``_C.silu_and_mul_quant`` written out step by step from its kernel (the reference the runtime
    and the ``vllm_load`` stand-in are checked against): x [..., 2d] (gate, up) in bf16/fp16 -> FP8 [..., d]."""
    d = x.shape[-1] // 2
    gate, up = x[..., :d].to(torch.float32), x[..., d:].to(torch.float32)
    silu = (gate / (1.0 + torch.exp(-gate))).to(x.dtype)             # silu_kernel<scalar_t>: fp32, returns T
    product = (silu.to(torch.float32) * up).to(x.dtype)              # c10::BFloat16 * c10::BFloat16 -> T
    top = fp8.fp8_max(fp8_dtype)
    inverse = scale.to(torch.float32).reshape(()).reciprocal()      # float inverted_scale = 1 / *scale
    return (product.to(torch.float32) * inverse).clamp(-top, top).to(fp8_dtype)
