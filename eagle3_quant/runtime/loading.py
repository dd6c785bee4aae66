"""`load_draft`: any of the three float formats, or an FP8 checkpoint this project wrote, into an Eagle3Draft."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors import safe_open

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.artifact import quant_spec
from eagle3_quant.reading.checkpoint import Checkpoint, read_checkpoint
from eagle3_quant.reading.config import DraftConfig, load_config_file, parse_config
from eagle3_quant.reading.formats import detect_format
from eagle3_quant.reading.int_fp4_layout import QuantLinear, quant_linears
from eagle3_quant.reading.layout import EMBEDDING_NAMES, build_layout, fused_groups
from eagle3_quant.reading.mx_layout import (
    has_input_scale,
    mx_input_kind,
    mx_modules,
    mx_unpacked_shape,
    mx_weight_element,
)
from eagle3_quant.reading.safetensors_header import TensorInfo
from eagle3_quant.reading.scale_names import WRITTEN_SCALE_SUFFIXES
from eagle3_quant.reading.source import resolve_source
from eagle3_quant.runtime.embedding import read_target_embedding, read_target_lm_head
from eagle3_quant.runtime.fp8_linear import FP8_MODES, Fp8Linear, harmonize_fused, to_fnuz
from eagle3_quant.runtime.model import Eagle3Draft
from eagle3_quant.runtime.mx_linear import MxLinear, harmonize_fused_mx
from eagle3_quant.runtime.quant_linears import check_fused, place_quant_linears
from eagle3_quant.runtime.spec import resolve_spec

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Tensors some exporters leave behind that no serving engine reads.
IGNORED = ("verifier_lm_head.weight", "verifier_norm.weight")


def _fp8_modules(tensors: dict[str, TensorInfo], where: Path, others: dict[str, QuantLinear]) -> dict[str, bool]:
    """Module -> has a static input_scale, for every FP8 weight (MXFP8 ones are in `others`); checks dtypes and
    scale shapes, and that every scale belongs to a quantized weight."""
    mxfp8_weights = {m + ".weight" for m, q in others.items() if q.kind == "mxfp8"} | {
        name for q in others.values() for name in q.tensors}        # NVFP4's FP8 group scales
    modules = {}
    for name, info in tensors.items():
        if info.dtype != "F8_E4M3" or name in mxfp8_weights:
            continue
        if not name.endswith(".weight") or len(info.shape) != 2:
            raise DraftFormatError(f"FP8 tensor {list(info.shape)} is not a linear weight", path=where, tensor=name)
        module = name.removesuffix(".weight")
        scale = tensors.get(module + ".weight_scale")
        if scale is None:
            raise DraftFormatError("FP8 weight without weight_scale", path=where, tensor=name)
        if scale.dtype != "F32" or scale.shape not in ((info.shape[0],), (1,), ()):
            raise DraftFormatError(f"weight_scale must be F32 [{info.shape[0]}] or [1], got {scale.dtype} "
                                   f"{list(scale.shape)}", path=where, tensor=module + ".weight_scale")
        modules[module] = has_input_scale(tensors, module, where)
    mx = mx_modules(tensors, where)
    orphans = [n for n in tensors if n.endswith(tuple(f".{s}" for s in WRITTEN_SCALE_SUFFIXES))
               and n.rsplit(".", 1)[0] not in modules and n.rsplit(".", 1)[0] not in mx
               and n.rsplit(".", 1)[0] not in others]
    if orphans:
        raise DraftFormatError("scale without an FP8 weight", path=where, tensor=orphans[0])
    return modules


def _float_view(tensors: dict[str, TensorInfo], fp8: dict[str, bool], mx: dict[str, bool] | None = None,
                others: dict[str, QuantLinear] | None = None) -> dict[str, TensorInfo]:
    """The checkpoint as if it were the BF16 source, so the shared layout checks apply unchanged."""
    view = {}
    mx, others = mx or {}, others or {}
    for name, info in tensors.items():
        module, _, suffix = name.rpartition(".")
        if (module in fp8 or module in mx or module in others) and suffix in WRITTEN_SCALE_SUFFIXES:
            continue
        if module in mx and suffix == "weight":     # packed MX: the float width is 32 per E8M0 scale
            info = dataclasses.replace(info, dtype="BF16", shape=mx_unpacked_shape(tensors, module))
        if module in others and suffix == "weight":
            info = dataclasses.replace(info, dtype="BF16", shape=others[module].shape)
        view[name] = dataclasses.replace(info, dtype="BF16") if info.dtype == "F8_E4M3" else info
    return view


def _check_static_config(cfg: DraftConfig, fp8: dict[str, bool], where: Path) -> None:
    qc = quant_spec(cfg.raw.get("quantization_config"))
    inputs = quant_spec(quant_spec(qc.get("global_quant_config")).get("input_tensors"))
    if inputs.get("is_dynamic") is False:
        missing = sorted(m for m, static in fp8.items() if not static)
        if missing:
            raise DraftFormatError("config declares static input scales but the checkpoint has no input_scale",
                                   path=where, tensor=missing[0] + ".input_scale")


def _read_tensors(checkpoint: Checkpoint, names: set[str]) -> dict[str, torch.Tensor]:
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(checkpoint.tensors[name].file, []).append(name)
    out = {}
    for file, file_names in by_file.items():
        with safe_open(str(file), framework="pt") as fh:
            out.update({n: fh.get_tensor(n) for n in file_names})
    return out


def _place_fp8(draft: Eagle3Draft, state: dict[str, torch.Tensor], fp8: dict[str, bool], mode: str,
               dtype: torch.dtype, mx: dict[str, bool] | None = None, mx_input: str = "none",
               mx_element: str = "fp4", others: dict[str, QuantLinear] | None = None) -> None:
    mx, others = mx or {}, others or {}
    place_quant_linears(draft, state, others, dtype)
    for module in mx:
        parent_name, _, child = module.rpartition(".")
        parent = draft.get_submodule(parent_name) if parent_name else draft
        bias = state.pop(module + ".bias", None)
        layer = MxLinear(state.pop(module + ".weight"), state.pop(module + ".weight_scale"),
                         "fp8_static" if mx[module] else mx_input, state.pop(module + ".input_scale", None),
                         bias.to(dtype) if bias is not None else None, mx_element)
        setattr(parent, child, layer)
    for module in fp8:
        parent_name, _, child = module.rpartition(".")
        parent = draft.get_submodule(parent_name) if parent_name else draft
        bias = state.pop(module + ".bias", None)
        layer = Fp8Linear(state.pop(module + ".weight"), state.pop(module + ".weight_scale"),
                          state.pop(module + ".input_scale", None),
                          bias.to(dtype) if bias is not None else None, mode)
        setattr(parent, child, layer)
    prefix = draft.spec.layer_prefix
    for fused, roles in fused_groups(draft.config).items():
        part = "mlp" if fused == "gate_up_proj" else "self_attn"
        names = [f"{prefix}{part}.{role}" for role in roles]
        check_fused(names, roles, others, draft)
        quantized = [n in fp8 for n in names]
        in_mx = [n in mx for n in names]
        if any(in_mx) and not all(in_mx):
            raise DraftFormatError(f"vLLM fuses {', '.join(roles)}: they must all be MXFP4 or all not",
                                   tensor=names[in_mx.index(False)] + ".weight")
        if any(quantized) and not all(quantized):
            raise DraftFormatError(f"vLLM fuses {', '.join(roles)}: they must all be FP8 or all float",
                                   tensor=names[quantized.index(False)] + ".weight")
        if all(quantized):
            harmonize_fused([draft.get_submodule(n) for n in names])
        if all(in_mx):
            harmonize_fused_mx([draft.get_submodule(n) for n in names])


def _shared_lm_head(lm_head: torch.Tensor | str | Path, shared: bool, cfg: DraftConfig, where: Path) -> torch.Tensor:
    if not shared:
        raise DraftFormatError("the draft has its own lm_head; lm_head= is only for a draft sharing the target's",
                               path=where, tensor="lm_head.weight")
    weight = lm_head if isinstance(lm_head, torch.Tensor) else read_target_lm_head(lm_head)
    if tuple(weight.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise DraftFormatError(f"the target's lm_head is {list(weight.shape)}, the draft needs [vocab "
                               f"{cfg.vocab_size}, hidden {cfg.hidden_size}]", path=where, tensor="lm_head.weight")
    return weight.detach()


def _on_gfx942(device: torch.device) -> bool:
    if device.type != "cuda" or not torch.version.hip:
        return False
    return torch.cuda.get_device_properties(device).gcnArchName.startswith("gfx942")


def load_draft(path: str | Path, device: str | torch.device | None = None, dtype: torch.dtype | None = None,
               embedding: torch.Tensor | str | Path | None = None, *, fp8_mode: str = "scaled_mm",
               revision: str | None = None, lm_head: torch.Tensor | str | Path | None = None,
               read: tuple[dict, Checkpoint] | None = None) -> Eagle3Draft:
    """Load a draft folder (or Hub id) in any of the three formats, float or FP8 (weight + weight_scale,
    optional input_scale). `dtype` defaults to the config's torch_dtype; `embedding` (a [V, H] tensor or
    the target's folder / Hub id) supplies the token embedding when the checkpoint has none; `lm_head` (a
    [V, H] tensor or the target's folder / Hub id, read by range requests) the output projection of a draft
    that shares the target's, as vLLM does for an Eagle3 draft without ``lm_head.weight``. `read`: the folder's
    config.json object and checkpoint headers as the caller already read them (not read again)."""
    if fp8_mode not in FP8_MODES:
        raise ValueError(f"fp8_mode must be one of {', '.join(FP8_MODES)}, got {fp8_mode!r}")
    source = resolve_source(path, revision)
    where = source.path
    raw, checkpoint = read or (load_config_file(where / "config.json"), read_checkpoint(where))
    fmt = detect_format(checkpoint.tensors, raw, str(where))
    cfg = parse_config(raw, fmt, where / "config.json")
    others = quant_linears(checkpoint.tensors, where)
    fp8 = _fp8_modules(checkpoint.tensors, where, others)
    mx = mx_modules(checkpoint.tensors, where)
    mx_input = mx_input_kind(raw, mx, where)
    mx_element = mx_weight_element(raw, where) if mx else "fp4"
    _check_static_config(cfg, fp8, where)
    float_cfg = dataclasses.replace(cfg, raw={k: v for k, v in raw.items() if k != "quantization_config"})
    layout = build_layout(fmt, float_cfg, _float_view(checkpoint.tensors, fp8, mx, others), str(where))
    spec = resolve_spec(cfg, fmt)
    dtype = dtype or DTYPES.get(cfg.torch_dtype, torch.bfloat16)

    embedding_name = next((n for n in EMBEDDING_NAMES if n in checkpoint.tensors), None)
    has_maps = "d2t" in checkpoint.tensors
    if not has_maps and cfg.draft_vocab_size != cfg.vocab_size:
        raise DraftFormatError(f"draft vocab {cfg.draft_vocab_size} differs from target vocab {cfg.vocab_size} "
                               "but there is no d2t map", path=where, tensor="d2t")
    with torch.device("meta"):
        draft = Eagle3Draft(spec, dtype, embedding_name=embedding_name, vocab_maps=has_maps)
    wanted = set(draft.state_dict()) | {f"{m}.{s}" for m in (*fp8, *mx, *others) for s in WRITTEN_SCALE_SUFFIXES}
    skipped = {"input_norm.weight"} if not spec.norm_before_fc else set()  # vLLM skips it too
    unexpected = sorted(set(checkpoint.tensors) - wanted - set(IGNORED) - skipped)
    if unexpected:
        raise DraftFormatError(f"tensors this draft's config does not use: {', '.join(unexpected[:5])}",
                               path=where, hint="check norm_before_fc / fc_norm / attention_bias in config.json")
    state = _read_tensors(checkpoint, set(checkpoint.tensors) & wanted)
    if lm_head is not None:
        state["lm_head.weight"] = _shared_lm_head(lm_head, layout.shared_lm_head, cfg, where)
    if has_maps and "t2d" not in state:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[torch.arange(cfg.draft_vocab_size) + state["d2t"]] = True
        state["t2d"] = t2d
    _place_fp8(draft, state, fp8, fp8_mode, dtype, mx, mx_input, mx_element, others)
    state = {n: t.to(dtype) if t.is_floating_point() else t for n, t in state.items()}
    missing = sorted(set(draft.state_dict()) - set(state) - {n for n in draft.state_dict() if n.startswith(
        tuple((*fp8, *mx, *others)))})
    if missing:
        hint = ("the draft shares the target's lm_head: pass lm_head= (the target's folder or its [V, H] weight)"
                if layout.shared_lm_head and "lm_head.weight" in missing else None)
        raise DraftFormatError(f"missing from the checkpoint: {', '.join(missing[:5])}", path=where, hint=hint)
    draft.load_state_dict(state, strict=False, assign=True)
    device = torch.device(device) if device is not None else torch.device("cpu")
    draft.to(device)
    if embedding is not None:
        weight = embedding if isinstance(embedding, torch.Tensor) else read_target_embedding(embedding)
        draft.set_embedding(weight)
    if fp8 and fp8_mode == "scaled_mm" and _on_gfx942(device):
        for module in draft.modules():
            if isinstance(module, Fp8Linear):
                to_fnuz(module)
    draft.source = source
    draft.layout = layout
    return draft.eval()
