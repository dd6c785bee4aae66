"""What one draft step costs: weight bytes read by part, FLOPs, KV-cache bytes, and the bandwidth floor.

A draft step at low concurrency is bound by the bytes of weights it reads. The model counts, for one token of
one draft step: every linear weight (fc, attention, MLP, lm_head) and its scales in full, the norms, ``d2t``
(vLLM's ``compute_logits`` scatters through all of it), one row of the embedding (a gather, not the matrix),
and no ``t2d`` (vLLM skips it at load). ``fc`` runs once per speculation cycle (later steps feed back the
draft's own hidden state), so a cycle of k steps reads ``fc + k * (step - fc)``.

Everything comes from safetensors headers or from shapes alone (no torch): ``checkpoint_cost`` reads a draft
folder, BF16 source or quantized output; ``shape_tensors`` builds the tensor list of a draft from its
dimensions (the bench's Llama-3.1-8B- and Kimi-K2.5-shaped drafts need no files).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3_quant.devices import DeviceProfile, get_device_profile
from eagle3_quant.errors import SchemeError
from eagle3_quant.reading.safetensors_header import DTYPE_SIZES, FP8_DTYPES
from eagle3_quant.reading.scale_names import QUANT_SUFFIXES

if TYPE_CHECKING:
    from eagle3_quant.schemes import Scheme

READ_PARTS = ("fc", "attention", "mlp", "lm_head", "embedding", "norm", "vocab_map", "extra")
MATMUL_PARTS = frozenset({"fc", "attention", "mlp", "lm_head"})
LAYER_PREFIXES = ("midlayer.", "layers.0.", "model.layers.0.")
MX_GROUP = 32                 # OCP MX: one E8M0 scale byte per 32 elements along the input dimension
KV_CACHE_DTYPE_BYTES = 2      # BF16 KV cache: the draft's artifacts quantize no KV cache


@dataclass(frozen=True)
class WeightTensor:
    """One checkpoint tensor as the cost model sees it: name, shape and stored dtype (safetensors name)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    unpacked: tuple[int, ...] | None = None   # a packed MX weight (U8, 4 or 6 bits an element): its [out, in]

    @property
    def part(self) -> str:
        return part_of(self.name)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_SIZES[self.dtype]

    @property
    def read_bytes(self) -> int:
        """Bytes one token of one draft step reads from this tensor."""
        if self.part == "embedding":
            return self.nbytes // self.shape[0] if self.shape and self.shape[0] else 0
        if self.name == "t2d":
            return 0
        return self.nbytes

    @property
    def is_scale(self) -> bool:
        return self.name.rsplit(".", 1)[-1] in QUANT_SUFFIXES

    @property
    def matmul_flops(self) -> int:
        """2 * out * in for a linear weight that the step multiplies by (one token)."""
        shape = self.unpacked or self.shape
        if self.part in MATMUL_PARTS and self.name.endswith(".weight") and len(shape) == 2:
            return 2 * shape[0] * shape[1]
        return 0


def part_of(name: str) -> str:
    """fc, attention, mlp, lm_head, embedding, norm, vocab_map or extra, from the tensor name alone."""
    if name in ("d2t", "t2d"):
        return "vocab_map"
    if "embed_tokens" in name:
        return "embedding"
    if name.startswith("lm_head."):
        return "lm_head"
    if name.startswith("fc."):
        return "fc"
    inner = next((name[len(p):] for p in LAYER_PREFIXES if name.startswith(p)), None)
    if inner is not None and inner.startswith("self_attn.") and "norm" not in inner:
        return "attention"
    if inner is not None and inner.startswith("mlp."):
        return "mlp"
    if "norm" in name:
        return "norm"
    return "extra"


@dataclass(frozen=True)
class StepCost:
    """Bytes one draft step reads (one token, batch 1), by part, and its matmul FLOPs."""

    label: str
    bytes_by_part: dict[str, int]
    flops_per_token: int

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_part.values())

    def cycle_bytes(self, k: int) -> int:
        """k draft steps of one speculation cycle: fc once, the rest k times."""
        fc = self.bytes_by_part.get("fc", 0)
        return fc + k * (self.total_bytes - fc)

    def floor_ms(self, profile: DeviceProfile, k: int = 1) -> float:
        """Lower bound on the time of k steps: their weight bytes at the device's peak HBM bandwidth."""
        return self.cycle_bytes(k) / profile.hbm_bytes_per_s * 1e3

    def to_dict(self) -> dict:
        return {"label": self.label, "bytes_by_part": dict(self.bytes_by_part), "total_bytes": self.total_bytes,
                "flops_per_token": self.flops_per_token}


def step_cost(tensors: Iterable[WeightTensor], label: str) -> StepCost:
    by_part = dict.fromkeys(READ_PARTS, 0)
    flops = 0
    for t in tensors:
        by_part[t.part] += t.read_bytes
        flops += t.matmul_flops
    return StepCost(label, {k: v for k, v in by_part.items() if v}, flops)


def as_bf16(tensors: Iterable[WeightTensor]) -> list[WeightTensor]:
    """The unquantized draft: FP8 and packed MX weights read back as BF16, quantization scales dropped."""
    return [replace(t, dtype="BF16", shape=t.unpacked or t.shape, unpacked=None)
            if t.dtype in FP8_DTYPES or t.unpacked else t for t in tensors if not t.is_scale]


def quantize_modules(tensors: Iterable[WeightTensor], modules: Iterable[str], *,
                     per_channel: bool = True, static_input: bool = False,
                     mx_bits: int | None = None, scheme: Scheme | None = None) -> list[WeightTensor]:
    """Project what a scheme writes for these linears: FP8 weight + float32 scales (per row, or one), or with
    `mx_bits` an MX weight: `mx_bits`-bit elements packed in bytes + one E8M0 byte per 32 inputs; with `scheme`
    (a registered Scheme, its INT4 group resolved) exactly its tensors (`scheme_tensors`)."""
    wanted = set(modules)
    out: list[WeightTensor] = []
    for t in tensors:
        module = t.name.removesuffix(".weight")
        if module not in wanted or not t.name.endswith(".weight"):
            out.append(t)
            continue
        if scheme is not None:
            out += scheme_tensors(scheme, module, t.shape, t.dtype)
            continue
        if mx_bits is not None:
            rows, cols = t.shape
            out.append(replace(t, dtype="U8", shape=(rows, cols * mx_bits // 8), unpacked=(rows, cols)))
            out.append(WeightTensor(f"{module}.weight_scale", (rows, cols // MX_GROUP), "U8"))
        else:
            out.append(replace(t, dtype="F8_E4M3"))
            out.append(WeightTensor(f"{module}.weight_scale", (t.shape[0],) if per_channel else (), "F32"))
        if static_input:
            out.append(WeightTensor(f"{module}.input_scale", (), "F32"))
    return out


def scheme_tensors(scheme: Scheme, module: str, shape: tuple[int, ...], dtype: str = "BF16") -> list[WeightTensor]:
    """The tensors `scheme` writes for one linear weight [out, in] (`dtype`: the source's, which INT4 scales keep):
    the weight as stored, with its float shape as `unpacked`, and every scale, zero point and global scale."""
    rows, cols = shape
    spec, kind = scheme.weight, scheme.weight.kind
    weight = WeightTensor(f"{module}.weight", (rows, cols), "F8_E4M3", unpacked=(rows, cols))
    if kind == "fp8":
        side = [(f"{module}.weight_scale", (rows,) if spec.granularity == "per_channel" else (), "F32")]
    elif kind == "mx":
        weight = replace(weight, dtype="U8", shape=(rows, cols * spec.element_bits // 8))
        side = [(f"{module}.weight_scale", (rows, cols // MX_GROUP), "U8")]
    elif kind == "mxfp8":
        side = [(f"{module}.weight_scale", (rows, cols // MX_GROUP), "U8")]
    elif kind == "int8":
        weight = replace(weight, dtype="I8")
        side = [(f"{module}.weight_scale", (rows,), "F32")]
    elif kind == "int4":       # AWQ layout: [in, out / 8] int32, scales and zero points per group of inputs
        packed, groups = -(-rows // 8), cols // spec.group_size
        weight = replace(weight, dtype="I32", shape=(cols, packed))
        side = [(f"{module}.weight_scale", (groups, rows), dtype), (f"{module}.weight_zero_point", (groups, packed),
                                                                     "I32")]
    else:                      # nvfp4
        weight = replace(weight, dtype="U8", shape=(rows, cols // 2))
        side = [(f"{module}.weight_scale", (rows, cols // spec.group_size), "F8_E4M3"),
                (f"{module}.weight_scale_2", (), "F32"), (f"{module}.input_scale_2", (), "F32")]
    if scheme.static_input and not spec.nvfp4:
        side.append((f"{module}.input_scale", (), "F32"))
    return [weight, *(WeightTensor(name, s, d) for name, s, d in side)]


def project_scheme(tensors: Sequence[WeightTensor], scheme: str,
                   modules: Iterable[str] | None = None) -> list[WeightTensor]:
    """What a registered scheme writes for `modules` (default: the default plan's attention + MLP linears)."""
    from eagle3_quant.schemes import get_scheme, resolve_group

    modules = list(layer_linear_modules(tensors) if modules is None else modules)
    widths = [t.shape[1] for t in tensors if t.name.removesuffix(".weight") in modules and t.name.endswith(".weight")]
    return quantize_modules(tensors, modules, scheme=resolve_group(get_scheme(scheme), widths))


def mark_packed(tensors: Sequence[WeightTensor]) -> list[WeightTensor]:
    """Quantized weights read from a checkpoint with their float [out, in]: packed MX (U8 beside a U8 E8M0
    weight_scale [out, in / 32]), NVFP4 (U8 beside an FP8 weight_scale), INT8 (I8) and INT4 (I32 [in, out / 8]
    beside a weight_scale [in / group, out])."""
    scales = {t.name.removesuffix(".weight_scale"): t for t in tensors if t.name.endswith(".weight_scale")}
    out = []
    for t in tensors:
        scale = scales.get(t.name.removesuffix(".weight")) if t.name.endswith(".weight") else None
        if scale is not None and len(t.shape) == 2 and len(scale.shape) <= 2:
            rows, cols = t.shape
            if t.dtype == "U8" and scale.dtype == "U8" and len(scale.shape) == 2:
                t = replace(t, unpacked=(rows, scale.shape[1] * MX_GROUP))
            elif t.dtype == "U8" and scale.dtype == "F8_E4M3":
                t = replace(t, unpacked=(rows, cols * 2))
            elif t.dtype == "I8":
                t = replace(t, unpacked=(rows, cols))
            elif t.dtype == "I32" and len(scale.shape) == 2:
                t = replace(t, unpacked=(scale.shape[1], rows))
        out.append(t)
    return out


def unprune_vocab(tensors: Sequence[WeightTensor], before: int, vocab_size: int) -> list[WeightTensor]:
    """The tensors as they were before `--draft-vocab` pruned them to fewer rows: lm_head (and its row scales) back
    to `before` rows; d2t too, or dropped where `before` was the full vocabulary (the source had no d2t)."""
    head = next((t for t in tensors if t.name == "lm_head.weight"), None)
    if head is None or before <= head.shape[0]:
        return list(tensors)
    out = []
    for t in tensors:
        if t.name.startswith("lm_head.") and t.shape and t.shape[0] == head.shape[0]:
            t = replace(t, shape=(before, *t.shape[1:]))
        elif t.name in ("d2t", "t2d") and before == vocab_size:
            continue
        elif t.name == "d2t":
            t = replace(t, shape=(before,))
        out.append(t)
    return out


def layer_linear_modules(tensors: Iterable[WeightTensor]) -> list[str]:
    """The default plan's FP8 linears: every attention and MLP weight (fc and lm_head stay BF16)."""
    return [t.name.removesuffix(".weight") for t in tensors
            if t.part in ("attention", "mlp") and t.name.endswith(".weight") and len(t.shape) == 2]


def prune_vocab(tensors: Sequence[WeightTensor], draft_vocab: int) -> list[WeightTensor]:
    """Project a draft vocabulary of N tokens: lm_head (and its row scales) to N rows, d2t to N offsets."""
    head = next((t for t in tensors if t.name == "lm_head.weight"), None)
    if head is None:
        raise SchemeError("the draft has no lm_head.weight to prune", field="draft_vocab")
    if not 0 < draft_vocab <= head.shape[0]:
        raise SchemeError(f"{draft_vocab} is not in 1..{head.shape[0]} (the current draft vocabulary)",
                          field="draft_vocab")
    out = []
    for t in tensors:
        if t.name.startswith("lm_head.") and t.shape and t.shape[0] == head.shape[0]:
            t = replace(t, shape=(draft_vocab, *t.shape[1:]))
        elif t.name == "d2t":
            t = replace(t, shape=(draft_vocab,))
        out.append(t)
    if not any(t.name == "d2t" for t in out):
        out.append(WeightTensor("d2t", (draft_vocab,), "I64"))
    return out


@dataclass(frozen=True)
class DraftDims:
    """The dimensions that fix a Llama-style Eagle3 draft's tensors (SpecForge names)."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int | None = None      # None: a full-vocabulary lm_head, no d2t
    target_hidden_size: int | None = None
    embedding: bool = False
    dtype: str = "BF16"

    def tensors(self) -> list[WeightTensor]:
        h, dt = self.hidden_size, self.dtype
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        i, ht = self.intermediate_size, self.target_hidden_size or h
        dv = self.draft_vocab_size or self.vocab_size
        rows = [("fc.weight", (h, 3 * ht)),
                ("midlayer.self_attn.q_proj.weight", (q, 2 * h)), ("midlayer.self_attn.k_proj.weight", (kv, 2 * h)),
                ("midlayer.self_attn.v_proj.weight", (kv, 2 * h)), ("midlayer.self_attn.o_proj.weight", (h, q)),
                ("midlayer.mlp.gate_proj.weight", (i, h)), ("midlayer.mlp.up_proj.weight", (i, h)),
                ("midlayer.mlp.down_proj.weight", (h, i)),
                *((f"midlayer.{n}.weight", (h,)) for n in ("input_layernorm", "hidden_norm",
                                                          "post_attention_layernorm")),
                ("norm.weight", (h,)), ("lm_head.weight", (dv, h))]
        if self.embedding:
            rows.append(("embed_tokens.weight", (self.vocab_size, h)))
        out = [WeightTensor(name, shape, dt) for name, shape in rows]
        if self.draft_vocab_size is not None and self.draft_vocab_size != self.vocab_size:
            out += [WeightTensor("d2t", (dv,), "I64"), WeightTensor("t2d", (self.vocab_size,), "BOOL")]
        return out


@dataclass(frozen=True)
class DraftCost:
    """A draft step in BF16 and as written (or as the default plan would write it), with context costs."""

    source: str
    bf16: StepCost
    written: StepCost
    kv_bytes_per_context_token: int
    attention_flops_per_context_token: int
    notes: tuple[str, ...] = ()
    profile: DeviceProfile | None = None
    k: int = 3
    tensors: tuple[WeightTensor, ...] = field(default=(), repr=False, compare=False)

    @property
    def ratio(self) -> float:
        return self.written.total_bytes / self.bf16.total_bytes

    def to_dict(self) -> dict:
        out = {"source": self.source, "bf16": self.bf16.to_dict(), "written": self.written.to_dict(),
               "written_over_bf16": self.ratio, "kv_bytes_per_context_token": self.kv_bytes_per_context_token,
               "attention_flops_per_context_token": self.attention_flops_per_context_token,
               "notes": list(self.notes)}
        if self.profile is not None:
            out["device_profile"] = {
                "name": self.profile.name, "device": self.profile.device,
                "hbm_bytes_per_s": self.profile.hbm_bytes_per_s, "k": self.k,
                "bf16_step_floor_ms": self.bf16.floor_ms(self.profile),
                "written_step_floor_ms": self.written.floor_ms(self.profile),
                "bf16_cycle_floor_ms": self.bf16.floor_ms(self.profile, self.k),
                "written_cycle_floor_ms": self.written.floor_ms(self.profile, self.k)}
        return out


def tensors_cost(tensors: Sequence[WeightTensor], *, source: str, kv_heads: int, heads: int, head_dim: int,
                 draft_vocab: int | None = None, profile: DeviceProfile | None = None, k: int = 3,
                 project_ptpc: bool | None = None, baseline: Sequence[WeightTensor] | None = None) -> DraftCost:
    """'written' is the tensors as stored; for an unquantized list (project_ptpc None) or project_ptpc=True,
    the default PTPC plan's projection of them; draft_vocab projects a pruned vocabulary on top. The BF16 baseline
    is `baseline` in BF16 (the source before pruning), else the tensors themselves in BF16."""
    notes = []
    quantized = any(t.dtype in FP8_DTYPES or t.unpacked for t in tensors)
    project = not quantized if project_ptpc is None else project_ptpc and not quantized
    written = list(tensors)
    label = "as written" if quantized else "bf16"
    if project:
        written = quantize_modules(written, layer_linear_modules(written))
        label = "ptpc_fp8 (projected)"
        notes.append("unquantized source: 'written' is the default ptpc_fp8 plan (attention + MLP FP8, fc and "
                     "lm_head BF16) as `quantize` would write it")
    if draft_vocab is not None:
        written = prune_vocab(written, draft_vocab)
        label += f" + vocab {draft_vocab:,}"
        notes.append(f"'written' projects a draft vocabulary of {draft_vocab:,} tokens (lm_head rows, d2t)")
    return DraftCost(
        source=source, bf16=step_cost(as_bf16(baseline or tensors), "bf16"), written=step_cost(written, label),
        kv_bytes_per_context_token=2 * kv_heads * head_dim * KV_CACHE_DTYPE_BYTES,
        attention_flops_per_context_token=4 * heads * head_dim, notes=tuple(notes), profile=profile, k=k,
        tensors=tuple(written))


def dims_cost(dims: DraftDims, *, quantize: bool = False, draft_vocab: int | None = None,
              profile: DeviceProfile | None = None, k: int = 3, source: str = "dimensions") -> DraftCost:
    """Cost from dimensions alone; quantize=True projects the default PTPC plan (as for a BF16 source)."""
    return tensors_cost(dims.tensors(), source=source, kv_heads=dims.num_key_value_heads,
                        heads=dims.num_attention_heads, head_dim=dims.head_dim, draft_vocab=draft_vocab,
                        profile=profile, k=k, project_ptpc=quantize)


def checkpoint_cost(src: str | Path, *, revision: str | None = None, draft_vocab: int | None = None,
                    device_profile: str | None = None, k: int = 3) -> DraftCost:
    """Cost of a draft folder (BF16 source or quantized output) or Hub repo, from its headers only."""
    from eagle3_quant.reading.checkpoint import read_checkpoint
    from eagle3_quant.reading.config import load_config_file, parse_config
    from eagle3_quant.reading.formats import detect_format
    from eagle3_quant.reading.source import resolve_source

    profile = get_device_profile(device_profile) if device_profile else None
    source = resolve_source(src, revision)
    checkpoint = read_checkpoint(source.path)
    raw = load_config_file(source.path / "config.json")
    config = parse_config(raw, detect_format(checkpoint.tensors, raw, str(source.path)),
                          source.path / "config.json")
    tensors = mark_packed([WeightTensor(name, info.shape, info.dtype)
                           for name, info in sorted(checkpoint.tensors.items())])
    before = _vocab_before_pruning(source.path)
    baseline = unprune_vocab(tensors, before, config.vocab_size) if before else None
    return tensors_cost(tensors, source=source.describe(), kv_heads=config.num_key_value_heads,
                        heads=config.num_attention_heads, head_dim=config.head_dim, draft_vocab=draft_vocab,
                        profile=profile, k=k, baseline=baseline)


def _vocab_before_pruning(folder: Path) -> int | None:
    """The draft vocabulary before `--draft-vocab` pruned this artifact (its manifest), so that its BF16 baseline
    is the source's, as `quantize --scheme auto` and the card count it; None for anything else."""
    import json

    from eagle3_quant.records.manifest import MANIFEST_NAME

    try:
        pruning = json.loads((folder / MANIFEST_NAME).read_text()).get("vocab_pruning") or {}
        before = pruning.get("draft_vocab_before")
    except (OSError, ValueError, AttributeError):
        return None
    return before if isinstance(before, int) and before > 0 else None
