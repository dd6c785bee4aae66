"""Tiny Eagle3 draft checkpoints for every architecture variant the runtime supports (float and FP8), and an
independent straightforward float64 reference forward to compare the runtime with."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime import fp8
from fixtures.synthetic import SHAPES, DraftShape, synthetic_config, synthetic_tensors

TINY = SHAPES["tiny"]   # hidden 64, intermediate 160, 4 heads, 2 KV heads, head_dim 16, vocab 512, draft vocab 256


def _norms(shape: DraftShape, gen: torch.Generator, names: dict[str, int]) -> dict[str, torch.Tensor]:
    return {n: (1.0 + 0.2 * torch.randn(size, generator=gen)).to(torch.bfloat16) for n, size in names.items()}


def _bias(shape: DraftShape, gen: torch.Generator) -> dict[str, torch.Tensor]:
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    sizes = {"q_proj": q, "k_proj": kv, "v_proj": kv, "o_proj": shape.hidden}
    return {f"midlayer.self_attn.{r}.bias": (0.1 * torch.randn(n, generator=gen)).to(torch.bfloat16)
            for r, n in sizes.items()}


VARIANTS: dict[str, dict] = {
    "specforge": {},
    "eagle-default-theta": {"fmt": DraftFormat.EAGLE},
    "speculators": {"fmt": DraftFormat.SPECULATORS},
    "speculators-nbr-default": {"fmt": DraftFormat.SPECULATORS, "drop_top": ["norm_before_residual"]},
    "head-dim-32": {"shape": DraftShape(64, 160, 4, 2, 32, 512, 256, target_layers=8)},
    "mha": {"shape": DraftShape(64, 96, 4, 4, 16, 512, 512, target_layers=8)},
    "target-hidden-48": {"shape": DraftShape(64, 160, 4, 2, 16, 512, 256, target_hidden=48, target_layers=8)},
    "llama3-rope": {"layer": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}},
    "yarn-rope": {"layer": {"rope_theta": 10000.0, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}},
    "linear-rope": {"layer": {"rope_scaling": {"type": "linear", "factor": 2.0}}},
    "norm-before-residual": {"top": {"norm_before_residual": True}},
    "fc-norm-norm-output": {"top": {"fc_norm": True, "norm_output": True},
                            "tensors": lambda s, g: _norms(s, g, {f"fc_norm.{i}.weight": s.target_hidden or s.hidden
                                                                   for i in range(3)})},
    "norm-before-fc": {"top": {"norm_before_fc": True},
                       "tensors": lambda s, g: _norms(s, g, {"input_norm.weight": 3 * (s.target_hidden or s.hidden)})},
    "with-embedding": {"shape": DraftShape(64, 160, 4, 2, 16, 512, 256, with_embedding=True, target_layers=8)},
    "attention-bias": {"layer": {"attention_bias": True}, "tensors": _bias},
    "qwen3": {"shape": SHAPES["tiny-qwen3"]},
    "two-aux": {"shape": SHAPES["tiny-2aux"]},
    "final-aux-fc-norm": {"shape": SHAPES["tiny-final-aux"], "top": {"fc_norm": True},
                          "tensors": lambda s, g: _norms(s, g, {f"fc_norm.{i}.weight": s.hidden for i in range(4)})},
    "mla": {"shape": SHAPES["tiny-mla"]},
    "mla-no-q-lora": {"shape": SHAPES["tiny-mla-no-qlora"]},
    "mla-deepseek-yarn": {"shape": SHAPES["tiny-mla"], "layer": {"rope_theta": 10000.0, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
        "mscale": 1.0, "mscale_all_dim": 1.0}}},
    "mla-deepseek-yarn-cos-mscale": {"shape": SHAPES["tiny-mla"], "layer": {"rope_theta": 10000.0, "rope_scaling": {
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}}},
    "qwen3-speculators": {"shape": SHAPES["tiny-qwen3"], "fmt": DraftFormat.SPECULATORS},
}


def write_variant(folder: Path, name: str, seed: int = 0) -> Path:
    v = VARIANTS[name]
    shape, fmt = v.get("shape", TINY), v.get("fmt", DraftFormat.SPECFORGE)
    gen = torch.Generator().manual_seed(seed + 1000)
    tensors = synthetic_tensors(shape, fmt, seed, torch.float16 if fmt is DraftFormat.EAGLE else torch.bfloat16)
    # norms near 1 hide norm bugs; spread them out
    for n in [n for n in tensors if n.endswith("norm.weight")]:
        tensors[n] = (1.0 + 0.2 * torch.randn(tensors[n].shape, generator=gen)).to(tensors[n].dtype)
    tensors.update(v["tensors"](shape, gen) if "tensors" in v else {})
    config = synthetic_config(shape, fmt)
    layer = config["transformer_layer_config"] if fmt is DraftFormat.SPECULATORS else config
    layer.update(v.get("layer", {}))
    config.update(v.get("top", {}))
    for key in v.get("drop_top", []):
        config.pop(key)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, folder / "model.safetensors")
    return folder


def write_fp8_checkpoint(src, out, static: bool, per_tensor: bool, skip=("fc", "lm_head")):
    """An FP8 checkpoint in the layout this project writes (weight F8_E4M3 + weight_scale [+ input_scale])."""
    tensors = load_file(src / "model.safetensors")
    gen = torch.Generator().manual_seed(3)
    for name in [n for n in tensors if n.endswith("_proj.weight") and n.split(".")[0] not in skip]:
        module = name.removesuffix(".weight")
        quantize = fp8.quantize_weight_per_tensor if per_tensor else fp8.quantize_weight_per_channel
        tensors[name], tensors[module + ".weight_scale"] = quantize(tensors[name].float())
        if static:
            tensors[module + ".input_scale"] = (0.01 + 0.02 * torch.rand(1, generator=gen))
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "quark", "global_quant_config": {
        "input_tensors": {"dtype": "fp8_e4m3", "is_dynamic": not static}}}
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    save_file(tensors, out / "model.safetensors")
    return out


# ---- independent reference -------------------------------------------------------------------------

def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def _inv_freq(layer: dict, head_dim: int, hidden: int, heads: int) -> tuple[torch.Tensor, float]:
    theta = layer.get("rope_theta", 10000.0)
    scaling = dict(layer.get("rope_scaling") or {})
    kind = scaling.pop("rope_type", None) or scaling.pop("type", "default")
    if kind == "default":
        return 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim), 1.0
    config = LlamaConfig(hidden_size=hidden, num_attention_heads=heads, head_dim=head_dim,
                         max_position_embeddings=layer["max_position_embeddings"],
                         rope_parameters={"rope_type": kind, "rope_theta": theta, **scaling})
    inv, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    return inv.to(torch.float64), factor


def _rotate(x: torch.Tensor, angles: torch.Tensor, factor: float) -> torch.Tensor:
    """RoPE as a complex rotation of the pairs (i, i + D/2)."""
    half = x.shape[-1] // 2
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.full_like(angles, factor), angles)
    return torch.cat([z.real, z.imag], dim=-1)


def reference_forward(folder: Path, input_ids: torch.Tensor, aux: torch.Tensor,
                      embedding: torch.Tensor | None = None,
                      lm_head: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 logits [T, V_draft] and fed-back hidden [T, H] of one sequence, positions 0..T-1; `embedding`
    and `lm_head` stand for the target's when the checkpoint has none."""
    raw = json.loads((folder / "config.json").read_text())
    layer = raw.get("transformer_layer_config", raw)
    w = {k: v.to(torch.float64) if v.is_floating_point() else v for k, v in load_file(folder / "model.safetensors")
         .items()}
    if lm_head is not None:
        w["lm_head.weight"] = lm_head.to(torch.float64)
    p = "layers.0." if "transformer_layer_config" in raw else "midlayer."
    eps, heads, kv_heads, head_dim = layer["rms_norm_eps"], layer["num_attention_heads"], \
        layer["num_key_value_heads"], layer["head_dim"]
    nbr = raw.get("norm_before_residual", "transformer_layer_config" in raw)

    x = aux.to(torch.float64)
    if raw.get("norm_before_fc"):
        x = _rms(x, w["input_norm.weight"], eps)
    if raw.get("fc_norm"):
        n = sum(1 for name in w if name.startswith("fc_norm."))
        parts = x.chunk(n, dim=-1)
        x = torch.cat([_rms(parts[i], w[f"fc_norm.{i}.weight"], eps) for i in range(n)], dim=-1)
    h = x @ w["fc.weight"].T
    emb = embedding.to(torch.float64) if embedding is not None else w["embed_tokens.weight"]
    e = emb[input_ids]
    hn = _rms(h, w[p + "hidden_norm.weight"], eps)
    residual = hn if nbr else h
    inp = torch.cat([_rms(e, w[p + "input_layernorm.weight"], eps), hn], dim=-1)

    def lin(name: str, v: torch.Tensor) -> torch.Tensor:
        out = v @ w[p + name + ".weight"].T
        return out + w[p + name + ".bias"] if p + name + ".bias" in w else out

    t = input_ids.shape[0]
    if "kv_lora_rank" in layer:
        h = residual + lin("self_attn.o_proj", _mla_reference(layer, w, p, inp, eps))
        return _mlp_and_head(raw, w, p, h, eps)
    q, k, v = lin("self_attn.q_proj", inp), lin("self_attn.k_proj", inp), lin("self_attn.v_proj", inp)
    inv, factor = _inv_freq(layer, head_dim, layer["hidden_size"], heads)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    outs = []
    def head_norm(x: torch.Tensor, name: str) -> torch.Tensor:   # Qwen3: RMSNorm over each head
        return _rms(x, w[p + name], eps) if p + name in w else x

    for head in range(heads):
        kvh = head // (heads // kv_heads)
        qh = _rotate(head_norm(q[:, head * head_dim:(head + 1) * head_dim], "self_attn.q_norm.weight"), angles, factor)
        kh = _rotate(head_norm(k[:, kvh * head_dim:(kvh + 1) * head_dim], "self_attn.k_norm.weight"), angles, factor)
        vh = v[:, kvh * head_dim:(kvh + 1) * head_dim]
        scores = qh @ kh.T / math.sqrt(head_dim)
        scores = scores + torch.triu(torch.full((t, t), float("-inf"), dtype=torch.float64), diagonal=1)
        outs.append(torch.softmax(scores, dim=-1) @ vh)
    h = residual + lin("self_attn.o_proj", torch.cat(outs, dim=-1))
    return _mlp_and_head(raw, w, p, h, eps)


def _mlp_and_head(raw: dict, w: dict, p: str, h: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    m = _rms(h, w[p + "post_attention_layernorm.weight"], eps)
    gate, up = m @ w[p + "mlp.gate_proj.weight"].T, m @ w[p + "mlp.up_proj.weight"].T
    h = h + (gate * torch.sigmoid(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    normed = _rms(h, w["norm.weight"], eps)
    return normed @ w["lm_head.weight"].T, normed if raw.get("norm_output") else h


def _deepseek_rope(layer: dict, dim: int) -> tuple[torch.Tensor, float, float]:
    """float64 inverse frequencies, cos/sin magnitude and softmax-scale factor of DeepSeek's (YaRN) RoPE."""
    theta = layer.get("rope_theta", 10000.0)
    base = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    s = layer.get("rope_scaling")
    if not s:
        return base, 1.0, 1.0
    f, orig = s["factor"], s["original_max_position_embeddings"]

    def m(scale: float, k: float) -> float:
        return 0.1 * k * math.log(scale) + 1.0 if scale > 1 else 1.0

    # dims whose wavelength fits fewer than beta_slow times in the original context are interpolated
    def dim_of(rotations: float) -> float:
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = max(math.floor(dim_of(s.get("beta_fast", 32))), 0), min(math.ceil(dim_of(s.get("beta_slow", 1))), dim - 1)
    ramp = torch.tensor([min(max((i - lo) / max(hi - lo, 0.001), 0.0), 1.0) for i in range(dim // 2)],
                        dtype=torch.float64)
    inv = base / f * ramp + base * (1 - ramp)
    return inv, m(f, s.get("mscale", 1)) / m(f, s.get("mscale_all_dim", 0)), m(f, s.get("mscale_all_dim", 0)) ** 2


def _mla_reference(layer: dict, w: dict, p: str, x: torch.Tensor, eps: float) -> torch.Tensor:
    """Unabsorbed MLA, one head at a time; RoPE rotates interleaved pairs (2i, 2i+1) of the rope dims."""
    nh, nope, rope, vd, kvl = (layer[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                                                   "v_head_dim", "kv_lora_rank"))
    a = p + "self_attn."
    if layer.get("q_lora_rank"):
        q = _rms(x @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], eps) @ w[a + "q_b_proj.weight"].T
    else:
        q = x @ w[a + "q_proj.weight"].T
    kv_a = x @ w[a + "kv_a_proj_with_mqa.weight"].T
    kv = _rms(kv_a[:, :kvl], w[a + "kv_a_layernorm.weight"], eps) @ w[a + "kv_b_proj.weight"].T
    inv, magnitude, softmax_factor = _deepseek_rope(layer, rope)
    t = x.shape[0]
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]

    def rotate(v: torch.Tensor) -> torch.Tensor:
        z = torch.complex(v[:, 0::2], v[:, 1::2]) * torch.polar(torch.full_like(angles, magnitude), angles)
        return torch.stack([z.real, z.imag], dim=-1).flatten(-2)

    k_pe = rotate(kv_a[:, kvl:])
    outs = []
    for head in range(nh):
        qh = q[:, head * (nope + rope):(head + 1) * (nope + rope)]
        kvh = kv[:, head * (nope + vd):(head + 1) * (nope + vd)]
        qh = torch.cat([qh[:, :nope], rotate(qh[:, nope:])], dim=-1)
        kh = torch.cat([kvh[:, :nope], k_pe], dim=-1)
        scores = qh @ kh.T * softmax_factor / math.sqrt(nope + rope)
        scores = scores + torch.triu(torch.full((t, t), float("-inf"), dtype=torch.float64), diagonal=1)
        outs.append(torch.softmax(scores, dim=-1) @ kvh[:, nope:])
    return torch.cat(outs, dim=-1)
