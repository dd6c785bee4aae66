"""The folder llama.cpp's converter reads: the draft's config with the target layers llama.cpp should feed written
where its converter reads them, and its weights.

A BF16 draft's files are linked (named ``model-N.safetensors``: the converter reads ``model*.safetensors``). A Quark
artifact whose FP4 blocks are carried is written out in BF16 first, each carried weight dequantized (exact:
E2M1 x a power of two, or x an E4M3 scale, is a BF16 number), and its GGML blocks packed beside
(`quantize/gguf_blocks.py`), each under the GGUF name the converter gives it, q/k rows in the converter's order.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.engines.llamacpp.names import ROPE_PERMUTED, gguf_name, rope_row_order
from eagle3_quant.errors import QuantizationError
from eagle3_quant.quantize.gguf_blocks import mxfp4_blocks, nvfp4_blocks, reorder_rows
from eagle3_quant.reading.artifact import Fp8Artifact
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.runtime.mx import dequantize_mxfp4
from eagle3_quant.runtime.nvfp4_linear import dequantize_nvfp4
from eagle3_quant.taps.conventions import AUX_KEY

ARCHITECTURE = "LlamaForCausalLMEagle3"       # what the converter's llama class registers for EAGLE-3


@dataclass(frozen=True)
class StagedDraft:
    folder: Path
    sources: dict[str, str]                   # GGUF name -> the checkpoint tensor it comes from
    blocks: dict[str, torch.Tensor]           # GGUF name -> GGML bytes [rows, bytes a row] (carried weights)
    block_types: dict[str, str]               # GGUF name -> mxfp4 | nvfp4


def converter_config(raw: dict, config: DraftConfig, ids: tuple[int, ...], draft_vocab: int) -> dict:
    """The config the converter reads: llama.cpp's ids at the top level (the only place it looks), the Eagle3 class
    it converts, the draft vocabulary it detects EAGLE-3 by; no quantization config."""
    out = {k: v for k, v in raw.items() if k != "quantization_config"}
    out.update({"architectures": [ARCHITECTURE], AUX_KEY: list(ids), "draft_vocab_size": draft_vocab,
                "num_hidden_layers": 1})
    out.setdefault("target_hidden_size", config.target_hidden_size)
    return out


def _write_config(folder: Path, raw: dict) -> None:
    (folder / "config.json").write_text(json.dumps(raw, indent=2, allow_nan=False) + "\n")


def _sources(names, prefix: str) -> dict[str, str]:
    return {gguf_name(n, prefix): n for n in names if gguf_name(n, prefix)}


def _draft_vocab(tensors: dict, config: DraftConfig) -> int:
    lm_head = tensors.get("lm_head.weight")
    return int(lm_head.shape[0]) if lm_head is not None else config.draft_vocab_size


def stage_draft(draft: DraftCheckpoint, folder: Path, ids: tuple[int, ...]) -> StagedDraft:
    """A BF16 draft: its weights linked, its config rewritten."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, file in enumerate(draft.checkpoint.weight_files):
        os.symlink(file.resolve(), folder / f"model-{i:05d}.safetensors")
    tensors = draft.checkpoint.tensors
    _write_config(folder, converter_config(dict(draft.config.raw), draft.config, ids,
                                           _draft_vocab(tensors, draft.config)))
    return StagedDraft(folder, _sources(tensors, draft.layout.format.layer_prefix), {}, {})


def _carried(art: Fp8Artifact, module: str, kind: str, name: str, order: list[int] | None):
    """(the weight in BF16, its GGML blocks) for one carried linear."""
    tensors = art.checkpoint.tensors
    packed = tensors[f"{module}.weight"].load()
    scale = tensors[f"{module}.weight_scale"].load()
    if kind == "mxfp4":
        values = dequantize_mxfp4(packed, scale, torch.float32)
        blocks = mxfp4_blocks(reorder_rows(packed, order), reorder_rows(scale, order), name)
    else:
        global_scale = tensors[f"{module}.weight_scale_2"].load().to(torch.float32)
        values = dequantize_nvfp4(packed, scale, global_scale, torch.float32)
        blocks = nvfp4_blocks(reorder_rows(packed, order), reorder_rows(scale, order), float(global_scale.max()),
                              name)
    bf16 = values.to(torch.bfloat16)
    if not torch.equal(bf16.to(torch.float32), values):
        raise QuantizationError(f"its {kind} values are not all BF16 numbers", tensor=f"{module}.weight")
    return bf16, blocks


def stage_artifact(art: Fp8Artifact, kind: str, folder: Path, ids: tuple[int, ...]) -> StagedDraft:
    """A Quark artifact whose `kind` (mxfp4, nvfp4) weights are carried: the BF16 draft the converter reads, and the
    GGML blocks that replace its carried weights afterwards."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg, prefix = art.config, art.layout.format.layer_prefix
    carried = set(art.mx_modules) if kind == "mxfp4" else \
        {m for m, linear in art.quant_linears.items() if linear.kind == "nvfp4"}
    skip = {f"{m}.{s}" for m in carried for s in ("weight", "weight_scale", "weight_scale_2", "input_scale",
                                                   "input_scale_2")}
    state = {n: info.load() for n, info in art.checkpoint.tensors.items() if n not in skip}
    blocks, types = {}, {}
    for module in sorted(carried):
        name = gguf_name(f"{module}.weight", prefix)
        heads = {"heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads}.get(ROPE_PERMUTED.get(name))
        rows = art.checkpoint.tensors[f"{module}.weight"].shape[0]
        state[f"{module}.weight"], blocks[name] = _carried(art, module, kind, name,
                                                           rope_row_order(rows, heads) if heads else None)
        types[name] = kind
    save_file({n: t.contiguous() for n, t in state.items()}, str(folder / "model.safetensors"))
    _write_config(folder, converter_config(dict(art.raw_config), cfg, ids, _draft_vocab(state, cfg)))
    return StagedDraft(folder, _sources(state, prefix), blocks, types)
