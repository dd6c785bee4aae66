"""What vLLM 0.33's own model code needs to build, load and run an Eagle3 draft on a CPU-only machine.

Imported only inside the ``vllm_load`` worker subprocess (it imports vLLM and patches its global state).
Everything vLLM does is vLLM's code except :data:`ATTENTION_STAND_IN`: the paged attention layer
(``Attention.forward``) needs vLLM's compiled ``_C``, a KV cache and a model runner, so it is replaced by a
plain causal attention with fp32 scores. The FP8 activation-quantization ops of ``_C`` (``scaled_fp8_quant``,
the fused SiLU-mul + static quant) get PyTorch equivalents of their kernels' math, and the packed CPU GEMM of
``_C`` is turned off so vLLM takes its own ``torch.nn.functional.linear`` fallback. FP8 linear kernels are
chosen from the list vLLM uses on ROCm without AITER (torch ``_scaled_mm`` per-tensor / rowwise / channel-wise).

MLA drafts (``deepseek_eagle3.py``): vLLM's ``MLAAttention`` layer is built with the reference ``CPU_MLA``
backend (the AMX one the CPU platform prefers packs ``kv_b_proj`` with ``_C`` ops) and its own
``process_weights_after_loading`` runs unchanged: ``kv_b_proj`` dequantized (FP8 through the layer's own
linear on an identity) and split into the absorbed ``W_UK_T`` / ``W_UV``. Only ``MLAAttention.forward`` (KV
cache write, metadata, ``_C.mla_decode_kvcache``) is replaced, see :data:`MLA_ATTENTION_STAND_IN`.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import torch

ATTENTION_STAND_IN = ("vLLM's paged attention layer (Attention.forward) replaced by causal attention with fp32 "
                      "QK^T scores and softmax (CPU: no _C kernels, KV cache or model runner); every other op is "
                      "vLLM's own PyTorch path (custom_ops=['none'])")


MLA_ATTENTION_STAND_IN = ("vLLM's MLA attention layer (MLAAttention.forward: KV-cache write, metadata, "
                          "_C.mla_decode_kvcache) replaced by causal attention with fp32 scores and softmax, in "
                          "vLLM's two MLA forms: decode (absorbed: q_nope @ vLLM's W_UK_T over the latent cache, "
                          "vLLM's _v_up_proj with W_UV, both built by vLLM's process_weights_after_loading from "
                          "kv_b_proj) and prefill (k_nope and v through vLLM's kv_b_proj linear); the rope, "
                          "norms and every linear are vLLM's own")
MLA_FORMS = ("decode", "prefill")
MLA_FORM = {"form": "decode"}    # which of vLLM's two MLA forms the stand-in computes (set by the worker)


def _causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    t = scores.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=scores.device).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)


def _mla_forward(self, q, kv_c_normed, k_pe, output_shape=None, q_dcp_replicated=None):
    """q [T, N, P+R] (rope applied), kv_c_normed [T, L], k_pe [T, 1, R] -> [T, N*V]; scores in fp32."""
    t, n = q.shape[0], self.num_heads
    q_nope, q_pe = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
    if MLA_FORM["form"] == "decode":      # MLAAttention.forward_impl's MQA path, one query row per token
        ql_nope = torch.bmm(q_nope.transpose(0, 1), self.W_UK_T)                     # [N, T, L]
        q_lat = torch.cat([ql_nope, q_pe.transpose(0, 1)], dim=-1).to(torch.float32)  # [N, T, L+R]
        k_lat = torch.cat([kv_c_normed, k_pe.squeeze(1)], dim=-1).to(torch.float32)   # [T, L+R]
        probs = _causal_softmax(q_lat @ k_lat.T * self.scale)
        latent = (probs @ kv_c_normed.to(torch.float32)).to(q.dtype)                  # [N, T, L]
        out = torch.empty(t, n * self.v_head_dim, dtype=q.dtype, device=q.device)
        self._v_up_proj(latent.transpose(0, 1).reshape(t, n * self.kv_lora_rank), out)
        return out
    kv = self.kv_b_proj(kv_c_normed)[0].view(t, n, self.qk_nope_head_dim + self.v_head_dim)
    k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)             # MHA (prefill) path
    k = torch.cat([k_nope, k_pe.expand(t, n, self.qk_rope_head_dim)], dim=-1)
    scores = q.transpose(0, 1).to(torch.float32) @ k.transpose(0, 1).to(torch.float32).transpose(-1, -2)
    probs = _causal_softmax(scores * self.scale).to(v.dtype)
    return (probs @ v.transpose(0, 1)).transpose(0, 1).reshape(t, n * self.v_head_dim).to(q.dtype)


def _attention_forward(self, query, key, value, output_shape=None, output_dtype=None):
    """Causal attention over one sequence: [T, heads*D] in, [T, heads*D_v] out, scores in fp32."""
    t = query.shape[0]
    q = query.view(t, self.num_heads, self.head_size).transpose(0, 1).to(torch.float32)
    k = key.view(t, self.num_kv_heads, self.head_size).transpose(0, 1).to(torch.float32)
    v = value.view(t, self.num_kv_heads, self.head_size_v).transpose(0, 1)
    groups = self.num_heads // self.num_kv_heads
    if groups > 1:
        k, v = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
    scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_size)
    causal = torch.ones(t, t, dtype=torch.bool, device=query.device).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1).to(v.dtype)
    out = (probs @ v).transpose(0, 1).reshape(t, self.num_heads * self.head_size_v)
    return out.to(output_dtype or query.dtype)


def _scaled_fp8_quant(input, scale=None, num_token_padding=None, scale_ub=None, use_per_token_if_dynamic=False,
                      output=None, group_shape=None):
    """``vllm._custom_ops.scaled_fp8_quant`` in torch (the CPU wheel has no ``_C`` FP8 quant ops)."""
    from vllm.platforms import current_platform

    dtype = current_platform.fp8_dtype()
    top = torch.finfo(dtype).max
    x32 = input.to(torch.float32)
    if scale is None:
        amax = x32.abs().amax(dim=-1, keepdim=True) if use_per_token_if_dynamic else x32.abs().amax().reshape(1)
        if scale_ub is not None:
            amax = amax.clamp(max=scale_ub)
        scale = (amax / top).clamp(min=1.0 / (top * 512.0))
    q = (x32 * scale.to(torch.float32).reshape(-1, 1).reciprocal()).clamp(-top, top).to(dtype) \
        if scale.numel() > 1 else (x32 * scale.to(torch.float32).reciprocal()).clamp(-top, top).to(dtype)
    if output is not None:
        output.copy_(q)
        q = output
    return q, scale


def _silu_and_mul_quant(result, x, scale):
    """``_C.silu_and_mul_quant`` (vLLM fuses SiLU-mul with a static FP8 input quant) with its CUDA/HIP kernel's
    math (``act_and_mul_quant_kernel``): ``silu_kernel<scalar_t>`` computes in fp32 and returns x's dtype, the
    product of two ``c10::BFloat16`` (or Half) values is rounded to that dtype too, then ``x * (1 / scale)``
    in fp32, clamped, cast to FP8 (``serving.silu_and_mul_quant``)."""
    from eagle3_quant.runtime.serving import silu_and_mul_quant

    result.copy_(silu_and_mul_quant(x, scale.to(torch.float32), result.dtype))


def _rocm_fp8_kernels() -> None:
    """Choose FP8 linear kernels as vLLM does on ROCm without AITER - per-tensor ``_scaled_mm``, rowwise
    ``_scaled_mm`` (bf16 output only), else the channel-wise fallback - instead of the CPU platform's list."""
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.kernels.linear.scaled_mm import pytorch
    from vllm.platforms import PlatformEnum

    pytorch.RowWiseTorchFP8ScaledMMLinearKernel.is_supported = classmethod(lambda cls, cc=None: (True, None))
    linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CPU] = [pytorch.PerTensorTorchFP8ScaledMMLinearKernel,
                                                      pytorch.RowWiseTorchFP8ScaledMMLinearKernel,
                                                      pytorch.ChannelWiseTorchFP8ScaledMMLinearKernel]


MX_STAND_IN = ("MXFP4 linears: vLLM's own EmulationMxfp4LinearKernel (QuarkOCP_MX) or QuarkW4A8_MXFP4_FP8's "
               "emulation path, as vLLM runs them without native MX GEMMs; their Quark dequantize / quantize-"
               "dequantize kernels (CUDA/HIP-only) replaced by the project's bit-exact torch E2M1/E8M0 math "
               "(eagle3_quant.runtime.mx), not the gfx950 MX GEMM")
MXFP6_STAND_IN = ("MXFP6 linears: vLLM's own EmulationMxfp6LinearKernel (QuarkOCP_MX, the only MXFP6 kernel vLLM "
                  "0.33 lists for ROCm), with Quark's own torch unpacking and dequantization (Pack_fp6, "
                  "dequantize_fp4_fp6_per_group, fake_quantize_fp4_fp6_per_group_with_scale); only the CPU platform's "
                  "empty MXFP6 kernel list is pointed at it; not the gfx950 MX GEMM")


def _mx_emulation() -> None:
    """Point the CPU platform at vLLM's MXFP4 / MXFP6 emulation kernels (what ROCm lists without native MX GEMMs),
    and Quark's GPU-only MXFP4 kernels at plain torch (MXFP6 runs Quark's own torch code unchanged)."""
    from quark.torch.kernel import mx as quark_mx
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.kernels.linear.mxfp4.emulation import EmulationMxfp4LinearKernel
    from vllm.platforms import PlatformEnum

    from eagle3_quant.runtime import mx

    linear._POSSIBLE_MXFP4_KERNELS[PlatformEnum.CPU] = [EmulationMxfp4LinearKernel]
    linear._POSSIBLE_MXFP6_KERNELS[PlatformEnum.CPU] = [linear.EmulationMxfp6LinearKernel]
    quark_mx.dq_mxfp4 = mx.dequantize_mxfp4
    quark_mx.qdq_mxfp4 = lambda x, scale_calculation_mode="even": mx.quant_dequant_mx(x, "fp4")


def apply_cpu_patches(mx_emulation: bool = False) -> None:
    """Idempotent; call before building the model."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    torch.accelerator.empty_cache = lambda: None
    from vllm.model_executor.layers.attention import attention

    attention.Attention.forward = _attention_forward
    from vllm.model_executor.layers.attention import mla_attention

    mla_attention.MLAAttention.forward = _mla_forward
    from vllm import _custom_ops as ops

    ops.scaled_fp8_quant = _scaled_fp8_quant
    from vllm.model_executor.layers import utils as layer_utils

    torch.ops._C.silu_and_mul_quant = _silu_and_mul_quant
    _rocm_fp8_kernels()
    layer_utils.check_cpu_sgl_kernel = lambda *args: False   # its packed GEMM is in _C: vLLM's torch fallback
    from eagle3_quant.engines.vllm.int_standins import register_cpu_kernels

    register_cpu_kernels()
    if mx_emulation:
        _mx_emulation()


def write_target_config(draft_config: dict, folder: Path, num_layers: int) -> Path:
    """A config-only Llama target matching the draft (hidden, vocab): vLLM needs no target weights to build it."""
    layer = draft_config.get("transformer_layer_config") or draft_config
    hidden = int(draft_config.get("target_hidden_size") or layer["hidden_size"])
    heads = int(layer.get("num_attention_heads", 4))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": 2 * hidden, "num_hidden_layers": num_layers, "num_attention_heads": heads,
              "num_key_value_heads": heads, "vocab_size": int(layer["vocab_size"]),
              "max_position_embeddings": int(layer.get("max_position_embeddings", 2048)),
              "rms_norm_eps": float(layer.get("rms_norm_eps", 1e-6)), "torch_dtype": "bfloat16"}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, allow_nan=False))
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
