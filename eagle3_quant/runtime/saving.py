"""Build a DraftConfig for a new draft, and save a float draft in SpecForge format (config.json +
model.safetensors, ``midlayer.*``), the format vLLM and SGLang load."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig, parse_config
from eagle3_quant.reading.families import MlaDims
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime.fp8_linear import Fp8Linear
from eagle3_quant.runtime.model import Eagle3Draft
from eagle3_quant.util.outdir import staged_output

DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def new_draft_config(*, hidden_size: int, num_attention_heads: int, intermediate_size: int, vocab_size: int,
                     draft_vocab_size: int | None = None, num_key_value_heads: int | None = None,
                     head_dim: int | None = None, target_hidden_size: int | None = None,
                     aux_layer_ids: list[int] | tuple[int, ...] = (1, 2, 3), rms_norm_eps: float = 1e-6,
                     rope_theta: float = 10000.0, rope_scaling: dict | None = None,
                     max_position_embeddings: int = 2048, norm_before_residual: bool = False,
                     norm_before_fc: bool = False, fc_norm: bool = False, norm_output: bool = False,
                     attention_bias: bool = False, torch_dtype: str = "bfloat16",
                     mla: MlaDims | None = None, mla_model_type: str = "kimi_k2") -> DraftConfig:
    """A SpecForge-style (``LlamaForCausalLMEagle3``) config for a new draft, checked like a loaded one.

    With `mla`: an MLA draft (``Eagle3DeepseekV2ForCausalLM``; `mla_model_type` kimi_k2, the type vLLM 0.33
    serves as Eagle3, or deepseek_v3) with those MLA dims, the config vLLM's deepseek_eagle3.py reads (no
    ``head_dim``: MLA heads have their own)."""
    raw = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads or num_attention_heads,
        "head_dim": head_dim or hidden_size // num_attention_heads,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "vocab_size": vocab_size,
        "draft_vocab_size": draft_vocab_size or vocab_size,
        "rms_norm_eps": rms_norm_eps,
        "rope_theta": rope_theta,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids), "use_aux_hidden_state": True},
    }
    optional = {"target_hidden_size": target_hidden_size, "rope_scaling": rope_scaling,
                "norm_before_residual": norm_before_residual, "norm_before_fc": norm_before_fc,
                "fc_norm": fc_norm, "norm_output": norm_output, "attention_bias": attention_bias}
    raw.update({k: v for k, v in optional.items() if v})
    if mla is not None:
        del raw["head_dim"]
        raw.update(architectures=["Eagle3DeepseekV2ForCausalLM"], model_type=mla_model_type,
                   q_lora_rank=mla.q_lora_rank, kv_lora_rank=mla.kv_lora_rank,
                   qk_nope_head_dim=mla.qk_nope_head_dim, qk_rope_head_dim=mla.qk_rope_head_dim,
                   v_head_dim=mla.v_head_dim)
    return parse_config(raw, DraftFormat.SPECFORGE, Path("<new draft config>"))


def specforge_config(draft: Eagle3Draft) -> dict:
    """config.json for the draft in SpecForge format, whatever format it was loaded from."""
    spec, c = draft.spec, draft.config
    if spec.format is DraftFormat.SPECFORGE:
        raw = dict(c.raw)
        raw.pop("quantization_config", None)
    else:
        raw = {k: v for k, v in json.loads(json.dumps(new_draft_config(
            hidden_size=c.hidden_size, num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, intermediate_size=c.intermediate_size,
            vocab_size=c.vocab_size, draft_vocab_size=c.draft_vocab_size,
            target_hidden_size=c.target_hidden_size if c.target_hidden_size != c.hidden_size else None,
            aux_layer_ids=c.aux_layer_ids or (), rms_norm_eps=c.rms_norm_eps, rope_theta=c.rope_theta,
            rope_scaling=c.rope_scaling, max_position_embeddings=c.max_position_embeddings,
            norm_before_residual=spec.norm_before_residual, norm_before_fc=spec.norm_before_fc,
            fc_norm=spec.fc_norm, norm_output=spec.norm_output, attention_bias=spec.attention_bias,
        ).raw, allow_nan=False)).items()}
        if not c.aux_layer_ids:
            raw.pop("eagle_config")
    raw["torch_dtype"] = DTYPE_NAMES.get(draft.dtype, "bfloat16")
    return raw


def save_draft(draft: Eagle3Draft, folder: str | Path, *, force: bool = False) -> Path:
    """Write config.json + model.safetensors (SpecForge names) atomically; returns the folder."""
    if any(isinstance(m, Fp8Linear) for m in draft.modules()):
        raise DraftFormatError("save_draft writes float drafts; this one has FP8 linears",
                               hint="use `eagle3-quant quantize` to make FP8 drafts")
    prefix = draft.spec.layer_prefix
    tensors = {}
    for name, tensor in draft.state_dict().items():
        key = "midlayer." + name.removeprefix(prefix) if name.startswith(prefix) else name
        tensors[key] = tensor.detach().to("cpu").contiguous()
    folder = Path(folder)
    source = getattr(draft, "source", None)
    with staged_output(folder, source.path if source is not None else None, force) as staging:
        (staging / "config.json").write_text(json.dumps(specforge_config(draft), indent=2, allow_nan=False) + "\n")
        save_file(tensors, staging / "model.safetensors", metadata={"format": "pt"})
    return folder
