"""llama.cpp's EAGLE-3 as its source writes it (the vendored llama.cpp of llama-cpp-python 0.3.36, commit 0c1e570):
the GGUF names of a draft's tensors, the converter's q/k row order, what its graph can run, and the arithmetic of
ggml's CPU matmuls. Every rule names the file it was read in.

- Names: ``conversion/llama.py`` `index_tensors` (``midlayer.X`` / ``layers.0.X`` -> ``model.layers.0.X``) and
  `modify_tensors` (``fc.weight`` as is, ``input_norm.weight`` -> ``enc.output_norm.weight``, ``hidden_norm`` ->
  ``attn_norm_2``, ``d2t`` stored as absolute target ids, ``t2d`` dropped), then gguf-py's llama map
  (``gguf/tensor_mapping.py``) restricted to ``MODEL_TENSORS[EAGLE3]``.
- q/k rows: `LlamaModel.permute` (conversion/llama.py:176): the rows of each head's two rotary halves interleaved,
  for ggml's NORM rope; k with the KV heads.
- The draft: one Llama decoder layer, no biases, no q/k norm, no MLA (``src/models/eagle3.cpp`` creates only
  wq/wk/wv/wo, the FFN and the norms: any other tensor fails the load with "wrong number of tensors"); exactly three
  target layers (``eagle3.target_layers``; common/speculative.cpp:502 "draft model is not eagle3 (expected 3 extract
  layers ...)").
- The target: its graph must keep each layer's input (``res->t_layer_inp[il]``, e.g. src/models/llama.cpp:126).
  ``src/models/deepseek2.cpp`` (DeepSeek-V2/V3, Kimi-K2 and K2.5 convert as ``deepseek2``) does not, so
  llama-graph.cpp:1384 aborts with "layer input tensor is null": `UNTAPPED_ARCHITECTURES`.
- Taps: id k is the input of target layer k (common/speculative.cpp:486-560 calls
  ``llama_set_embeddings_layer_inp(ctx_tgt, id)``), transformers' ``hidden_states[k]``; the converter writes the
  draft config's top-level ``eagle_aux_hidden_state_layer_ids`` unchanged, else ``[2, L//2, L-3]``
  (conversion/llama.py:77-81); the nested ``eagle_config`` ids are never read.
- Activations: ggml's CPU backend converts a matmul's activations to its weight type's ``vec_dot_type``
  (ggml-cpu/ggml-cpu.c `type_traits_cpu`): Q8_0 for Q4_0, Q5_0, Q8_0, MXFP4 and NVFP4 weights, Q8_1 for Q4_1 and
  Q5_1, Q8_K for the k-quants, BF16 for BF16, F16 for F16, none for F32.
"""

from __future__ import annotations

LAYER_NAMES = {          # the draft layer's checkpoint names (after the layer prefix) -> GGUF names
    "self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "mlp.down_proj.weight": "blk.0.ffn_down.weight",
    "input_layernorm.weight": "blk.0.attn_norm.weight",
    "hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
}
TOP_NAMES = {
    "fc.weight": "fc.weight",
    "input_norm.weight": "enc.output_norm.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "embed_tokens.weight": "token_embd.weight",
    "model.embed_tokens.weight": "token_embd.weight",
    "d2t": "d2t",
}
ROPE_PERMUTED = {"blk.0.attn_q.weight": "heads", "blk.0.attn_k.weight": "kv_heads"}
DROPPED = ("t2d",)

UNTAPPED_ARCHITECTURES = frozenset({"deepseek2"})
NUM_TAPS = 3

# ggml type name -> the type ggml's CPU matmul converts the activations to (None: used as they are, fp32)
VEC_DOT_TYPE = {"f32": None, "f16": "f16", "bf16": "bf16", "q4_0": "q8_0", "q5_0": "q8_0", "q8_0": "q8_0",
                "q4_1": "q8_1", "q5_1": "q8_1", "mxfp4": "q8_0", "nvfp4": "q8_0", "q2_K": "q8_K", "q3_K": "q8_K",
                "q4_K": "q8_K", "q5_K": "q8_K", "q6_K": "q8_K", "iq4_nl": "q8_0"}


def gguf_name(name: str, layer_prefix: str) -> str | None:
    """The GGUF name llama.cpp's converter gives checkpoint tensor `name` (None: dropped or not an eagle3 tensor)."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    if name.startswith(layer_prefix):
        return LAYER_NAMES.get(name[len(layer_prefix):])
    return None


def rope_row_order(rows: int, heads: int) -> list[int]:
    """Row i of the converted q (or k) weight is row `order[i]` of the checkpoint's: `LlamaModel.permute` applied to
    the row indices (each head's rows reshaped [2, rows/head/2] and transposed)."""
    per_head = rows // heads
    half = per_head // 2
    return [h * per_head + part * half + j for h in range(heads) for j in range(half) for part in range(2)]
