"""Layer sensitivity: quantize one linear group at a time, measure the draft on the calibration set.

A group is what vLLM runs as one layer: ``fc``, ``qkv_proj`` (q/k/v), ``o_proj``, ``gate_up_proj`` (gate/up),
``down_proj``, ``lm_head``. For each group, only its linears become FP8 (the weights Quark would write,
bit for bit, run with vLLM's math by the runtime: PTPC = per-channel weights and per-token dynamic inputs;
fp8 = per-tensor weights and static input scales from the calibration absmax / 448, over
`CALIBRATION_STEPS` draft steps as static FP8 does). Every
calibration position is then drafted once (the first draft step: the target's aux states in) and compared
with the unquantized draft on the same position:

- ``disagreement``: fraction of positions whose top-1 draft token differs from the unquantized draft's;
- ``kl``: mean KL(P_unquantized || P_quantized) over positions, in nats;
- ``target_agreement``: fraction of positions where the draft's top-1 is the target's own next token.

``quantize --auto-exclude THRESHOLD`` keeps BF16 every group whose ``disagreement`` is above THRESHOLD.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from eagle3_quant.errors import SchemeError
from eagle3_quant.options import build_options, pick_device
from eagle3_quant.plan import make_plan
from eagle3_quant.quantize.calibration import (
    CALIBRATION_STEPS,
    calibration_batches,
    calibration_embedding,
    check_calibration,
)
from eagle3_quant.quantize.checks import check_vocab_map
from eagle3_quant.quantize.finite_scan import scan_source
from eagle3_quant.quantize.int_fp4_twins import SIMULATED_KINDS, nvfp4_global, twin
from eagle3_quant.quantize.options import SensitivityOptions
from eagle3_quant.reading.draft import DraftCheckpoint, read_draft
from eagle3_quant.reading.layout import fused_groups
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.records.public_names import public_name
from eagle3_quant.runtime.serving import serving_numerics
from eagle3_quant.schemes import Scheme, get_scheme, resolve_group


@dataclass(frozen=True)
class GroupSensitivity:
    group: str                   # vLLM layer: fc, qkv_proj, o_proj, gate_up_proj, down_proj, lm_head
    roles: tuple[str, ...]
    modules: tuple[str, ...]     # checkpoint module names
    default_quantized: bool      # whether the default plan quantizes it
    disagreement: float          # top-1 differs from the unquantized draft (fraction of positions)
    kl: float                    # mean KL(P_unquantized || P_quantized), nats
    target_agreement: float      # top-1 equals the target's next token (fraction of positions)


@dataclass(frozen=True)
class SensitivityReport:
    source: str
    scheme: str
    calib_path: Path
    samples: int
    positions: int
    baseline_target_agreement: float          # the unquantized draft's top-1 == target's next token
    groups: tuple[GroupSensitivity, ...]      # most sensitive first: disagreement, then KL
    default_plan: GroupSensitivity            # every group the default plan quantizes, all at once
    seconds: float
    prediction: dict                          # the serving numerics the draft ran in (runtime/serving.py)

    def above(self, threshold: float) -> tuple[GroupSensitivity, ...]:
        """Groups past an --auto-exclude threshold (disagreement strictly above it)."""
        return tuple(g for g in self.groups if g.disagreement > threshold)

    def to_dict(self) -> dict:
        return {**asdict(self), "source": public_name(self.source), "calib_path": public_name(self.calib_path)}


def linear_groups(draft: DraftCheckpoint) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """vLLM layer name -> (roles, checkpoint modules), in checkpoint order."""
    fused_by_role = {role: fused for fused, roles in fused_groups(draft.config).items() for role in roles}
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for lin in draft.layout.linears:
        roles, modules = groups.setdefault(fused_by_role.get(lin.role, lin.role), ([], []))
        roles.append(lin.role)
        modules.append(lin.module)
    return {name: (tuple(r), tuple(m)) for name, (r, m) in groups.items()}


def _input_absmax(runtime, batches: list[dict], steps: int) -> dict[str, float]:
    seen: dict[str, float] = {}
    hooks = []
    for name, module in runtime.linears().items():
        def record(_m, args, _out, name=name):
            seen[name] = max(seen.get(name, 0.0), float(args[0].detach().abs().max()))
        hooks.append(module.register_forward_hook(record))
    try:
        for batch in batches:
            runtime.propose_all(batch["input_ids"], batch["aux_hidden_states"], steps)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def quark_weight(weight: torch.Tensor, scheme: Scheme) -> tuple[torch.Tensor, torch.Tensor]:
    """The FP8 weight and fp32 scale Quark 0.13 writes for `weight` in this project's pipeline, bit for bit.

    The scale is max|w| / 448 (per row for PTPC, per tensor for fp8), but Quark rounds w / scale to the
    weight's dtype before the FP8 cast: the file-to-file path (PTPC) divides by the scale rounded to that
    dtype, the in-memory path (static fp8) rounds the fp32 quotient. For a bf16 weight about 3% of values
    land one FP8 step from round-to-nearest of the exact quotient.
    """
    from eagle3_quant.runtime import fp8

    per_channel = scheme.weight.granularity == "per_channel"
    _, scale = (fp8.quantize_weight_per_channel if per_channel else fp8.quantize_weight_per_tensor)(weight)
    column = scale.reshape(-1, 1)
    if scheme.needs_calibration:
        quotient = (weight.float() / column).to(weight.dtype)
    else:
        quotient = weight / column.to(weight.dtype)
    return quotient.float().clamp(-fp8.FP8_MAX, fp8.FP8_MAX).to(fp8.FP8_DTYPE), scale


def fp8_versions(runtime, scheme: Scheme, batches: list[dict], groups: dict) -> dict[str, torch.nn.Module]:
    """An FP8 (or MXFP4) twin of every linear, as vLLM would run the artifact (fused shards harmonized)."""
    from eagle3_quant.runtime.fp8_linear import Fp8Linear, harmonize_fused
    from eagle3_quant.runtime.mx_linear import MxLinear, harmonize_fused_mx

    if scheme.weight.kind in SIMULATED_KINDS:
        return _int_fp4_versions(runtime, scheme, batches, groups)
    absmax = _input_absmax(runtime, batches, CALIBRATION_STEPS) if not scheme.input.dynamic else {}
    out = {}
    for name, linear in runtime.linears().items():
        input_scale = None
        if not scheme.input.dynamic:
            input_scale = torch.tensor([max(absmax[name], 1e-12) / 448.0], dtype=torch.float32,
                                       device=linear.weight.device)
        bias = linear.bias.detach() if linear.bias is not None else None
        if scheme.mx:
            out[name] = _mx_version(linear, scheme, input_scale, bias)
            continue
        weight, scale = quark_weight(linear.weight.detach(), scheme)
        out[name] = Fp8Linear(weight, scale, input_scale, bias)
    for _roles, modules in groups.values():
        if len(modules) > 1 and scheme.mx:
            harmonize_fused_mx([out[m] for m in modules if isinstance(out[m], MxLinear)])
        elif len(modules) > 1:
            harmonize_fused([out[m] for m in modules])
    return out


def _int_fp4_versions(runtime, scheme: Scheme, batches: list[dict], groups: dict) -> dict[str, torch.nn.Module]:
    """INT8, INT4, NVFP4 or MXFP8 twins (``int_fp4_twins.py``); NVFP4 shards of a fused layer share their global
    scales as Quark writes them (its shared groups) and vLLM runs them."""
    from eagle3_quant.runtime.nvfp4_linear import harmonize_fused_nvfp4

    linears = runtime.linears()
    scheme = resolve_group(scheme, [linear.weight.shape[1] for name, linear in linears.items()
                                    if name not in ("fc", "lm_head")])         # the default plan's widths
    absmax = _input_absmax(runtime, batches, CALIBRATION_STEPS) if scheme.weight.nvfp4 else {}
    shared = {}
    for _roles, modules in groups.values():
        if scheme.weight.nvfp4:
            scale = nvfp4_global([linears[m].weight.detach() for m in modules if m in linears])
            shared.update({m: scale for m in modules})
    out = {name: twin(linear, scheme, linear.bias.detach() if linear.bias is not None else None, absmax.get(name),
                      shared.get(name))
           for name, linear in linears.items()}
    for _roles, modules in groups.values():
        if scheme.weight.nvfp4 and len(modules) > 1:
            harmonize_fused_nvfp4([out[m] for m in modules])
    return out


def in_dtype(twin: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The simulated linear with its bias in the prediction runtime's dtype (the twins are built from the
    weights in the dtype Quark reads)."""
    import copy

    from eagle3_quant.runtime.fp8_linear import Fp8Linear

    bias = twin.bias.to(dtype) if twin.bias is not None else None
    if isinstance(twin, Fp8Linear):
        return Fp8Linear(twin.weight, twin.weight_scale, twin.input_scale, bias, twin.mode)
    if bias is None or bias.dtype == twin.bias.dtype:       # an MX linear: its own buffers, as harmonized
        return twin
    cast = copy.deepcopy(twin)
    cast.bias = bias
    return cast


def _mx_version(linear, scheme: Scheme, input_scale: torch.Tensor | None, bias: torch.Tensor | None):
    """An MX (MXFP4 / MXFP6) twin of a float linear: Quark's packed weight and E8M0 scales (bit for bit), vLLM's math.
    A linear whose width is not a multiple of 32 stays as it is (the plan refuses to quantize it)."""
    from eagle3_quant.runtime import mx
    from eagle3_quant.runtime.mx_linear import MxLinear

    if linear.weight.shape[1] % mx.MX_BLOCK:
        return linear
    packed, scale = mx.quantize_mx(linear.weight.detach(), scheme.weight.dtype)
    return MxLinear(packed, scale, "mx" + scheme.input.dtype if scheme.input.mx else "fp8_static", input_scale, bias,
                    scheme.weight.dtype)


class _Tally:
    def __init__(self) -> None:
        self.positions = self.differ = self.target_hits = 0
        self.kl = 0.0

    def add(self, base_logp: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor, to_target_ids) -> None:
        """`targets` are target-vocabulary ids; `to_target_ids` maps the draft's top-1 into them (d2t)."""
        logp = torch.log_softmax(logits.float(), dim=-1)
        self.kl += float((base_logp.exp() * (base_logp - logp)).sum(-1).sum())
        top = logits.argmax(-1)
        self.differ += int((top != base_logp.argmax(-1)).sum())
        self.target_hits += int((to_target_ids(top) == targets).sum())
        self.positions += top.numel()

    def result(self, name: str, roles, modules, default_quantized: bool) -> GroupSensitivity:
        n = max(self.positions, 1)
        return GroupSensitivity(name, tuple(roles), tuple(modules), default_quantized, self.differ / n,
                                self.kl / n, self.target_hits / n)


@torch.no_grad()
def measure_sensitivity(src: str | Path, calib: str | Path, options: SensitivityOptions | None = None, *,
                        taps: tuple[int, ...] | None = None, **overrides) -> SensitivityReport:
    """Quantize each linear group alone (and the default plan's groups together) and measure the draft.

    `options`: a `SensitivityOptions` (scheme, groups, max_samples, device, revision); keywords override it."""
    from eagle3_quant.runtime.loading import load_draft

    opts = build_options(SensitivityOptions, options, overrides)
    started = time.perf_counter()
    chosen = get_scheme(opts.scheme)
    groups, max_samples = opts.groups, opts.max_samples
    draft = read_draft(src, opts.revision)
    calibration = check_calibration(draft, load_calibration(calib), taps)
    check_vocab_map(draft)
    scan_source(draft)          # NaN/Inf weights would give a table of NaN: refused as quantize refuses them
    all_groups = linear_groups(draft)
    wanted = list(groups) if groups is not None else list(all_groups)
    unknown = [g for g in wanted if g not in all_groups]
    if unknown:
        raise SchemeError(f"unknown layer group {unknown[0]!r}; valid: {', '.join(all_groups)}", field="groups")
    default = {d.role for d in make_plan(draft, chosen).quantized}
    device = pick_device(opts.device)
    embedding = calibration_embedding(draft, calibration)
    numerics = serving_numerics(draft.config.torch_dtype)
    native = load_draft(draft.path, device=device, embedding=embedding)     # the weights in the dtype Quark reads
    runtime = native if native.dtype == numerics.dtype else \
        load_draft(draft.path, device, numerics.dtype, embedding=embedding)
    batches = calibration_batches(calibration, device, with_targets=True, max_samples=max_samples)
    fp8_linears = {name: in_dtype(twin, runtime.dtype)
                   for name, twin in fp8_versions(native, chosen, batches, all_groups).items()}
    float_linears = runtime.linears()
    candidates = {g: all_groups[g][1] for g in wanted}
    candidates["<default plan>"] = tuple(m for g in all_groups.values() for r, m in zip(*g, strict=True)
                                         if r in default)
    tallies = {name: _Tally() for name in candidates}
    baseline = _Tally()

    def swap(modules, table):
        for module in modules:
            parent, _, child = module.rpartition(".")
            setattr(runtime.get_submodule(parent) if parent else runtime, child, table[module])

    for batch in batches:
        logits, _ = runtime(batch["input_ids"], batch["aux_hidden_states"])
        base_logp = torch.log_softmax(logits.float(), dim=-1)
        baseline.add(base_logp, logits, batch["targets"], runtime.to_target_ids)
        for name, modules in candidates.items():
            swap(modules, fp8_linears)
            try:
                tallies[name].add(base_logp, runtime(batch["input_ids"], batch["aux_hidden_states"])[0],
                                  batch["targets"], runtime.to_target_ids)
            finally:
                swap(modules, float_linears)

    results = [tallies[g].result(g, all_groups[g][0], all_groups[g][1], all(r in default for r in all_groups[g][0]))
               for g in wanted]
    results.sort(key=lambda r: (-r.disagreement, -r.kl))
    combined = tallies["<default plan>"].result("<default plan>", tuple(sorted(default)),
                                                candidates["<default plan>"], True)
    return SensitivityReport(str(draft.source.describe()), chosen.name, Path(calib), len(batches),
                             baseline.positions, baseline.target_hits / max(baseline.positions, 1), tuple(results),
                             combined, time.perf_counter() - started, numerics.record())
