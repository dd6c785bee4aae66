"""Rotary position embeddings as Llama-family configs describe them: default, linear, llama3 and yarn."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from eagle3_quant.errors import DraftFormatError

ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class RopeSpec:
    head_dim: int
    theta: float
    rope_type: str = "default"
    params: Mapping[str, Any] = field(default_factory=dict)
    max_position_embeddings: int = 2048

    @classmethod
    def from_config(cls, head_dim: int, theta: float, scaling: Mapping[str, Any] | None,
                    max_position_embeddings: int) -> RopeSpec:
        """`scaling` is config.json's ``rope_scaling`` (or transformers 5's ``rope_parameters``)."""
        params = dict(scaling or {})
        rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
        params.pop("type", None)
        theta = float(params.pop("rope_theta", theta))
        if rope_type not in ROPE_TYPES:
            raise DraftFormatError(f"rope type {rope_type!r} is not supported; supported: {', '.join(ROPE_TYPES)}",
                                   field="rope_scaling")
        for key in {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                                      "original_max_position_embeddings")}.get(rope_type, ()):
            if key not in params:
                raise DraftFormatError(f"{rope_type} rope scaling needs {key!r}", field="rope_scaling")
        return cls(head_dim, theta, rope_type, params, max_position_embeddings)

    def frequencies(self) -> tuple[torch.Tensor, float]:
        """fp32 inverse frequencies [head_dim / 2] and the factor applied to cos/sin."""
        dim = self.head_dim
        base = 1.0 / (self.theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))
        if self.rope_type == "linear":
            return base / float(self.params["factor"]), 1.0
        if self.rope_type == "llama3":
            return _llama3(base, self.params), 1.0
        if self.rope_type == "yarn":
            return _yarn(dim, self.theta, self.params, self.max_position_embeddings)
        return base, 1.0

    def cos_sin(self, position_ids: torch.Tensor, dtype: torch.dtype,
                frequencies: tuple[torch.Tensor, float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, T, head_dim] for integer positions [B, T]; computed in fp32, returned in `dtype`."""
        inv_freq, scale = frequencies or self.frequencies()
        freqs = position_ids.to(torch.float32).unsqueeze(-1) * inv_freq.to(position_ids.device)
        emb = torch.cat([freqs, freqs], dim=-1)
        return (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)


class RopeTable:
    """A rope's inverse frequencies, computed once on the CPU (the same bits wherever the step runs) and kept on each
    device a step runs on: a step then makes and copies no CPU tensor, so it can be captured as a CUDA graph."""

    def __init__(self, rope) -> None:
        self.rope = rope                  # RopeSpec or runtime.mla.DeepseekRope
        self._on_device: dict[torch.device, tuple[torch.Tensor, float]] = {}

    def cos_sin(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        device = position_ids.device
        if device not in self._on_device:
            inv_freq, scale = self.rope.frequencies()
            self._on_device[device] = (inv_freq.to(device), scale)
        return self.rope.cos_sin(position_ids, dtype, self._on_device[device])


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, D]; cos/sin [B, T, D]."""
    return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)


def _llama3(inv_freq: torch.Tensor, p: Mapping[str, Any]) -> torch.Tensor:
    factor, low, high = float(p["factor"]), float(p["low_freq_factor"]), float(p["high_freq_factor"])
    old_len = float(p["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def _yarn(dim: int, theta: float, p: Mapping[str, Any], max_positions: int) -> tuple[torch.Tensor, float]:
    original = p.get("original_max_position_embeddings") or max_positions
    factor = p.get("factor") or max_positions / original
    factor = float(factor)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor")
    if attention is None:
        if p.get("mscale") and p.get("mscale_all_dim"):
            attention = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
        else:
            attention = mscale(factor)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(p.get("beta_fast") or 32), correction_dim(p.get("beta_slow") or 1)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = theta ** (torch.arange(0, dim, 2).to(torch.float32) / dim)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, float(attention)
