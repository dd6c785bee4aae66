"""What vLLM made of an artifact's tensors and linears, read back from the model vLLM built (worker side).

Checkpoint names follow vLLM 0.33's Eagle3 ``load_weights``: ``t2d`` is skipped on purpose, ``d2t`` becomes
``draft_id_to_target_id``, everything but ``lm_head`` gets ``model.``, ``midlayer.`` becomes ``layers.0.``,
q/k/v stack into ``qkv_proj`` and gate/up into ``gate_up_proj`` (rows in that order, or one per-tensor scale each);
an MLA draft with ``q_lora_rank`` stacks ``q_a_proj`` / ``kv_a_proj_with_mqa`` into ``fused_qkv_a_proj``
(deepseek_eagle3.py's ``hf_to_vllm_mapper``), one without keeps ``kv_a_proj_with_mqa`` and ``q_proj`` apart.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from eagle3_quant.reading.checkpoint import read_checkpoint

SKIPPED_ON_PURPOSE = ("t2d",)
STACKED = {"q_proj": ("qkv_proj", 0, 3), "k_proj": ("qkv_proj", 1, 3), "v_proj": ("qkv_proj", 2, 3),
           "gate_proj": ("gate_up_proj", 0, 2), "up_proj": ("gate_up_proj", 1, 2)}
MLA_STACKED = {"q_a_proj": ("fused_qkv_a_proj", 0, 2), "kv_a_proj_with_mqa": ("fused_qkv_a_proj", 1, 2)}
# Parameters vLLM creates that no checkpoint of ours holds (KV-cache scales) or that it shares with the target
VOCAB_PADDING = 64             # vllm.model_executor.layers.vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE
NOT_IN_CHECKPOINT = ("k_scale", "v_scale", "q_scale", "prob_scale", "embed_tokens.weight")
SHARED_LM_HEAD = "lm_head.weight"      # a draft without one gets the target's (vLLM: has_own_lm_head False)
Stacked = dict[str, tuple[str, int, int]]


def stacked_roles(names) -> Stacked:
    """The checkpoint roles vLLM stacks into one runtime linear, for the checkpoint holding `names`."""
    with_q_lora = any(".q_a_proj." in n for n in names)
    return {**STACKED, **(MLA_STACKED if with_q_lora else {})}


def vllm_name(name: str, stacked: Stacked | None = None) -> tuple[str, str | None, int, int]:
    """(vLLM parameter name, fused checkpoint role or None, shard index, shards) for one checkpoint tensor."""
    stacked = STACKED if stacked is None else stacked
    if name == "d2t":
        return "draft_id_to_target_id", None, 0, 1
    full = name if name.startswith("lm_head") else "model." + name.replace("midlayer.", "layers.0.")
    module, _, leaf = full.rpartition(".")
    parent, _, role = module.rpartition(".")
    if role in stacked:
        fused, shard, shards = stacked[role]
        return f"{parent}.{fused}.{leaf}", role, shard, shards
    return full, None, 0, 1


def _read(artifact: Path) -> dict[str, torch.Tensor]:
    checkpoint = read_checkpoint(artifact)
    out = {}
    for file in checkpoint.weight_files:
        with safe_open(str(file), framework="pt") as fh:
            out.update({n: fh.get_tensor(n) for n in fh.keys()})
    return out


def _shard(param: torch.Tensor, shard: int, shards: int, rows: list[int], axis: int = 0) -> torch.Tensor | None:
    """One shard of a fused parameter: rows along `axis` (1 for INT4's [in, out / 8] tensors)."""
    if param.numel() == shards and sum(rows) != shards:          # one per-tensor scale per shard
        return param.reshape(-1)[shard:shard + 1]
    if param.dim() <= axis or param.shape[axis] != sum(rows):
        return None
    start = sum(rows[:shard])
    return param.narrow(axis, start, rows[shard])


def _unpadded(param: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """vLLM's ParallelLMHead pads its rows to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE; the logits processor
    drops the padding): a pruned draft vocabulary such as 100 lands in a [128, H] parameter."""
    rows = tensor.shape[0] if tensor.dim() else 0
    padded = -(-rows // VOCAB_PADDING) * VOCAB_PADDING
    if tensor.dim() == 2 and param.shape == (padded, *tensor.shape[1:]):
        return param[:rows]
    return param


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.numel() != b.numel():
        return False
    return bool(torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def compare_loaded(artifact: Path, record: dict, model) -> dict:
    """Every checkpoint tensor given to vLLM and found byte-identical in the parameter it was loaded into."""
    tensors = _read(artifact)
    stacked = stacked_roles(tensors)

    params: dict[str, torch.Tensor] = record["params"]
    rows: dict[tuple[str, str], list[int]] = {}
    int4 = {n.removesuffix(".weight") for n, t in tensors.items() if n.endswith(".weight") and t.dtype == torch.int32}
    axis = {n: 1 if n.rsplit(".", 1)[0] in int4 else 0 for n in tensors}     # INT4: fused along the output dim
    for name, tensor in tensors.items():
        target, role, shard, shards = vllm_name(name, stacked)
        if role is not None:
            size = tensor.shape[axis[name]] if tensor.dim() else 1
            rows.setdefault((target, name.rsplit(".", 1)[-1]), [0] * shards)[shard] = size
    given = set(record["given"])
    skipped, missing, differing, identical = [], [], [], []
    for name, tensor in sorted(tensors.items()):
        if name in SKIPPED_ON_PURPOSE:
            skipped.append(name)
            continue
        target, role, shard, shards = vllm_name(name, stacked)
        if name not in given or target not in params:
            missing.append(name)
            continue
        loaded = params[target]
        if role is not None:
            loaded = _shard(loaded, shard, shards, rows[(target, name.rsplit(".", 1)[-1])], axis[name])
        elif target.startswith("lm_head."):
            loaded = _unpadded(loaded, tensor)
        if loaded is None or not _same_bytes(loaded, tensor):
            got = "?" if loaded is None else f"{str(loaded.dtype).removeprefix('torch.')} {list(loaded.shape)}"
            differing.append(f"{name} -> {target} ({str(tensor.dtype).removeprefix('torch.')} "
                             f"{list(tensor.shape)} became {got})")
        else:
            identical.append(name)
    # vLLM 0.33's Eagle3 load_weights returns None (and its strict check is off for quantized models): a
    # parameter no checkpoint tensor maps to keeps its initial value (weight_scale: -3.4e38)
    covered = {vllm_name(n, stacked)[0] for n in tensors if n in given}
    shared = () if SHARED_LM_HEAD in tensors else (SHARED_LM_HEAD,)
    # QuarkW8A8Int8 creates a weight_zero_point and drops it after loading (symmetric); Quark's file-to-file path
    # writes none
    int8 = {vllm_name(n, stacked)[0].removesuffix(".weight") for n, t in tensors.items()
            if n.endswith(".weight") and t.dtype == torch.int8}
    uninitialized = sorted(n for n in params if n not in covered and not n.endswith(NOT_IN_CHECKPOINT)
                           and n not in shared and n.removesuffix(".weight_zero_point") not in int8)
    # uint8: packed MXFP4/MXFP6 or NVFP4; int8: INT8; int32: packed INT4
    quantized = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.uint8, torch.int8, torch.int32)
    expected = {vllm_name(n, stacked)[0].rpartition(".")[0]: t.dtype in quantized
                for n, t in tensors.items() if n.endswith(".weight")}
    return {"tensors": len(tensors), "identical": len(identical), "skipped_on_purpose": skipped,
            "not_consumed": missing, "not_identical": differing, "uninitialized": uninitialized,
            "checkpoint_fp8": expected}


def runtime_linears(model) -> dict[str, dict]:
    """Runtime module -> the prefix vLLM matched against `exclude`, its quant method and scheme."""
    out = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is None or not hasattr(module, "weight") or "embed_tokens" in name:
            continue
        scheme = getattr(module, "scheme", None)
        kernel = getattr(scheme, "fp8_linear", None) or getattr(scheme, "ocp_mx_linear", None) or \
            getattr(scheme, "kernel", None)        # INT8, INT4, NVFP4
        if kernel is None and type(scheme).__name__ == "QuarkW4A8_MXFP4_FP8":   # no kernel object: a flag
            kernel = "aiter gemm_a8wfp4" if scheme.use_aiter_kernel else "QuarkW4A8_MXFP4_FP8._apply_emulation"
        out[name] = {"prefix": getattr(module, "prefix", None), "quant_method": type(method).__name__,
                     "scheme": type(scheme).__name__ if scheme is not None else None,
                     "kernel": kernel if isinstance(kernel, str) or kernel is None else type(kernel).__name__}
    return out
