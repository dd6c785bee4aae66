"""MLA attention (DeepSeek V2/V3, Kimi K2) as vLLM 0.33's ``DeepseekV2MLAAttention`` computes it for an Eagle3
draft, in either of vLLM's two forms (``MLAAttention.forward_impl``):

- ``prefill`` (default; vLLM's MHA path): per head q = [q_nope, q_pe], k = [k_nope, rope(k_pe)] with one k_pe
  shared by all heads, k_nope and v from ``kv_b_proj``.
- ``decode`` (vLLM's MQA path, what it runs for every draft step of a decode batch): ``kv_b_proj``'s weight,
  dequantized to the activation dtype, is split into W_UK / W_UV and absorbed: q_nope @ W_UK attends over the
  latent [kv_c, rope(k_pe)] (scores and the latent output in fp32, as its kernels), the output goes up through
  W_UV. Equal to ``prefill`` in exact arithmetic; the roundings differ (measured by vLLM's own two forms).

RoPE follows deepseek_v2.py: it rotates only the last ``qk_rope_head_dim`` dims, GPT-J style (interleaved
pairs, ``is_neox_style=False``); any non-default rope type becomes DeepSeek's YaRN
(``DeepseekScalingRotaryEmbedding``: cos/sin times mscale(factor, mscale) / mscale(factor, mscale_all_dim)),
and unless ``attention_factor`` is 1 the softmax scale is multiplied by mscale(factor, mscale_all_dim)².
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from eagle3_quant.reading.families import MlaDims


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class DeepseekRope:
    """cos/sin for the rope dims of MLA heads, laid out for interleaved (GPT-J) rotation."""

    rope_dim: int
    theta: float
    params: Mapping[str, Any] = field(default_factory=dict)   # empty: plain RoPE

    @classmethod
    def from_config(cls, rope_dim: int, theta: float, scaling: Mapping[str, Any] | None) -> DeepseekRope:
        params = dict(scaling or {})
        kind = params.pop("rope_type", None) or params.pop("type", None) or "default"
        theta = float(params.pop("rope_theta", theta))
        return cls(rope_dim, theta, {} if kind == "default" else params)

    @property
    def factor(self) -> float:
        return float(self.params.get("factor", 1.0)) if self.params else 1.0

    def frequencies(self) -> tuple[torch.Tensor, float]:
        dim = self.rope_dim
        pos_freqs = self.theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        if not self.params:
            return 1.0 / pos_freqs, 1.0
        p, factor = self.params, self.factor
        original = p["original_max_position_embeddings"]

        def correction_dim(rotations: float) -> float:
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(self.theta))

        low = max(math.floor(correction_dim(p.get("beta_fast", 32))), 0)
        high = min(math.ceil(correction_dim(p.get("beta_slow", 1))), dim - 1)
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / ((high + 0.001 if low == high else high) - low))
        ramp = ramp.clamp(0, 1)
        inv = (1.0 / (factor * pos_freqs)) * ramp + (1.0 / pos_freqs) * (1 - ramp)
        scale = yarn_mscale(factor, float(p.get("mscale", 1))) / yarn_mscale(factor, float(p.get("mscale_all_dim", 0)))
        return inv, scale

    def softmax_scale_factor(self) -> float:
        """What vLLM multiplies qk_head_dim**-0.5 by (deepseek_yarn only)."""
        if not self.params or self.params.get("attention_factor") == 1.0:
            return 1.0
        m = yarn_mscale(self.factor, float(self.params.get("mscale_all_dim", 0) or 0))
        return m * m

    def cos_sin(self, position_ids: torch.Tensor, dtype: torch.dtype,
                frequencies: tuple[torch.Tensor, float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, T, rope_dim], each frequency repeated for its (2i, 2i+1) pair; fp32, then `dtype`."""
        inv_freq, scale = frequencies or self.frequencies()
        freqs = position_ids.to(torch.float32).unsqueeze(-1) * inv_freq.to(position_ids.device)
        freqs = freqs.repeat_interleave(2, dim=-1)
        return (freqs.cos() * scale).to(dtype), (freqs.sin() * scale).to(dtype)


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, D]; rotates each pair (x[2i], x[2i+1])."""
    rotated = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).flatten(-2)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


MLA_FORMS = ("prefill", "decode")


def set_mla_form(model: nn.Module, form: str) -> None:
    """Compute every MLA attention of `model` in vLLM's `form` (see the module docstring)."""
    if form not in MLA_FORMS:
        raise ValueError(f"MLA form must be one of {', '.join(MLA_FORMS)}, got {form!r}")
    for module in model.modules():
        if isinstance(module, MlaAttention):
            module.form = form


def _dequantized(linear: nn.Module, dtype: torch.dtype) -> torch.Tensor:
    """[out, in] weight in `dtype`, FP8 rows times their scale (vLLM's get_and_maybe_dequant_weights)."""
    scale = getattr(linear, "weight_scale", None)
    if scale is None:
        return linear.weight.to(dtype)
    return (linear.weight.to(torch.float32) * scale.reshape(-1, 1)).to(dtype)


class MlaAttention(nn.Module):
    """Submodules carry the checkpoint's names: q_a_proj, q_a_layernorm, q_b_proj (or q_proj),
    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj."""

    form = "prefill"

    def __init__(self, dims: MlaDims, heads: int, hidden: int, linear, norm, softmax_scale_factor: float) -> None:
        super().__init__()
        self.dims, self.heads, self.scale_factor = dims, heads, softmax_scale_factor
        qk = heads * dims.qk_head_dim
        if dims.q_lora_rank is None:
            self.q_proj = linear(2 * hidden, qk)
        else:
            self.q_a_proj = linear(2 * hidden, dims.q_lora_rank)
            self.q_a_layernorm = norm(dims.q_lora_rank)
            self.q_b_proj = linear(dims.q_lora_rank, qk)
        self.kv_a_proj_with_mqa = linear(2 * hidden, dims.kv_lora_rank + dims.qk_rope_head_dim)
        self.kv_a_layernorm = norm(dims.kv_lora_rank)
        self.kv_b_proj = linear(dims.kv_lora_rank, heads * (dims.qk_nope_head_dim + dims.v_head_dim))
        self.o_proj = linear(heads * dims.v_head_dim, hidden)

    @property
    def scale(self) -> float:
        """vLLM's softmax scale, applied to the fp32 scores: qk_head_dim**-0.5 (times DeepSeek YaRN's mscale²)."""
        return self.scale_factor / math.sqrt(self.dims.qk_head_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, context) -> torch.Tensor:
        b, t, _ = x.shape
        d, nh = self.dims, self.heads
        q = self.q_proj(x) if d.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, t, nh, d.qk_head_dim).transpose(1, 2)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([d.kv_lora_rank, d.qk_rope_head_dim], dim=-1)
        kv_c = self.kv_a_layernorm(latent)
        q_nope, q_pe = q.split([d.qk_nope_head_dim, d.qk_rope_head_dim], dim=-1)
        q_pe = apply_rope_interleaved(q_pe, cos, sin)
        k_pe = apply_rope_interleaved(k_pe.unsqueeze(1), cos, sin)
        if self.form == "decode":
            return self._absorbed(q_nope, q_pe, kv_c, k_pe, context)
        kv = self.kv_b_proj(kv_c).view(b, t, nh, d.qk_nope_head_dim + d.v_head_dim)
        k_nope, v = kv.transpose(1, 2).split([d.qk_nope_head_dim, d.v_head_dim], dim=-1)
        k_pe = k_pe.expand(b, nh, t, d.qk_rope_head_dim)
        out = context.attend(torch.cat([q_nope, q_pe], dim=-1), torch.cat([k_nope, k_pe], dim=-1), v, self.scale)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, nh * d.v_head_dim))

    def _absorbed(self, q_nope, q_pe, kv_c, k_pe, context) -> torch.Tensor:
        """q_nope [B, N, T, P], q_pe [B, N, T, R], kv_c [B, T, L], k_pe [B, 1, T, R] -> o_proj output."""
        d, nh = self.dims, self.heads
        b, _, t, _ = q_nope.shape
        w = _dequantized(self.kv_b_proj, q_nope.dtype).view(nh, d.qk_nope_head_dim + d.v_head_dim, d.kv_lora_rank)
        w_uk, w_uv = w.split([d.qk_nope_head_dim, d.v_head_dim], dim=1)             # [N, P, L], [N, V, L]
        ql_nope = q_nope @ w_uk                                                      # [B, N, T, L]
        # fp32 from here to the latent output, as vLLM's MLA decode kernels
        q = torch.cat([ql_nope, q_pe], dim=-1).to(torch.float32)
        k = torch.cat([kv_c.unsqueeze(1), k_pe], dim=-1).to(torch.float32)
        latent = context.attend(q, k, kv_c.unsqueeze(1).to(torch.float32), self.scale).to(q_nope.dtype)  # [B,N,T,L]
        out = latent @ w_uv.transpose(-1, -2)                                        # [B, N, T, V]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, nh * d.v_head_dim))
