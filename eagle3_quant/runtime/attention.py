"""Causal GQA attention with RoPE, a growing KV cache, and the per-position draft chains of acceptance runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from eagle3_quant.runtime.rope import apply_rope


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[B, kv_heads, S, D] -> [B, kv_heads * groups, S, D] (each KV head serves `groups` query heads)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Scaled QK^T in fp32, as vLLM's attention kernels keep them before the softmax (default scale
    1/sqrt(head dim); MLA passes its own)."""
    scores = q.to(torch.float32) @ k.to(torch.float32).transpose(-1, -2)
    return scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale


@dataclass
class KVCache:
    """Keys (after RoPE) and values of the positions seen so far, [B, kv_heads, S, D]."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=2)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=2)
        return self.keys, self.values


class CausalContext:
    """Plain causal attention; with a cache, new queries also see every cached position."""

    def __init__(self, cache: KVCache | None = None) -> None:
        self.cache = cache

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        past = 0
        if self.cache is not None:
            past = self.cache.length
            k, v = self.cache.extend(k, v)
        t, s = q.shape[2], k.shape[2]
        groups = q.shape[1] // k.shape[1]
        scores = _scores(q, repeat_kv(k, groups), scale)
        allowed = torch.arange(s, device=q.device)[None, :] <= (past + torch.arange(t, device=q.device))[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        return probs @ repeat_kv(v, groups)


@dataclass
class ChainContext:
    """Step j >= 1 of drafting from every position at once (what training calls test-time training).

    The query of the chain started at position t sees the prefix keys 0..t (step 0, from the target's
    aux states) and its own chain's keys of steps 1..j (one per step), as vLLM's KV cache would hold them.
    """

    prefix_k: torch.Tensor
    prefix_v: torch.Tensor
    chain_k: list[torch.Tensor] = field(default_factory=list)
    chain_v: list[torch.Tensor] = field(default_factory=list)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        self.chain_k.append(k)
        self.chain_v.append(v)
        groups = q.shape[1] // k.shape[1]
        t = q.shape[2]
        prefix = _scores(q, repeat_kv(self.prefix_k, groups), scale)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        prefix = prefix.masked_fill(~causal, float("-inf"))
        own_k = [repeat_kv(ck, groups) for ck in self.chain_k]
        q32 = q.to(torch.float32)
        own = torch.stack([(q32 * ck.to(torch.float32)).sum(-1) * scale for ck in own_k], dim=-1)  # [B, H, T, j]
        probs = torch.softmax(torch.cat([prefix, own], dim=-1), dim=-1).to(q.dtype)
        out = probs[..., :t] @ repeat_kv(self.prefix_v, groups)
        own_v = torch.stack([repeat_kv(cv, groups) for cv in self.chain_v], dim=-2)  # [B, H, T, j, D]
        return out + (probs[..., t:].unsqueeze(-1) * own_v).sum(-2)


class Attention(nn.Module):
    """Llama attention; with `qk_norms` (Qwen3) an RMSNorm over each head's q and k before RoPE."""

    def __init__(self, q_proj: nn.Module, k_proj: nn.Module, v_proj: nn.Module, o_proj: nn.Module,
                 heads: int, kv_heads: int, head_dim: int,
                 qk_norms: tuple[nn.Module, nn.Module] | None = None) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        if qk_norms is not None:
            self.q_norm, self.k_norm = qk_norms

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, context) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = context.attend(q, k, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))
