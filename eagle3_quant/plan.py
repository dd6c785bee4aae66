"""Which linears get quantized, and why: the per-layer decisions every later stage reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eagle3_quant.engines.choice import EngineChoice, choose_engines
from eagle3_quant.errors import SchemeError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.families import DraftFamily
from eagle3_quant.reading.layout import Part, fused_groups
from eagle3_quant.schemes import AUTO_ENGINE, Scheme, resolve_group

DEFAULT_EXCLUDE_REASONS = {
    "fc": "default: fuses the aux hidden states; SGLang cannot load it quantized",
    "lm_head": "default: output head, kept BF16 as AMD's published drafts keep it",
}
# measured in docs/families.md (benchmarks/studies/mla_kv_b.py): as costly as any other layer, for 0.3% of the
# parameters
MLA_DEFAULT_EXCLUDE_REASONS = {
    "kv_b_proj": "default (MLA): vLLM's decode absorbs it dequantized to BF16, no FP8 GEMM; "
                 "0.3% of a Kimi-K2.5 MLA draft",
}
PART_ALIASES = {"attention": Part.ATTENTION, "mlp": Part.MLP}


@dataclass(frozen=True)
class LayerDecision:
    role: str
    module: str
    out_features: int
    in_features: int
    quantize: bool
    reason: str


@dataclass(frozen=True)
class QuantPlan:
    scheme: Scheme
    decisions: tuple[LayerDecision, ...]
    engines: EngineChoice | None = None      # the engines the artifact is for, and why another is left out

    @property
    def quantized(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.decisions if d.quantize)

    @property
    def excluded(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.decisions if not d.quantize)

    def intended(self) -> dict[str, bool]:
        return {d.role: d.quantize for d in self.decisions}


def resolve_exclude_names(draft: DraftCheckpoint, names: Sequence[str]) -> dict[str, str]:
    """Map user names (role, fused name, part, module or weight name) to roles -> the name given."""
    by_module = {lin.module: lin.role for lin in draft.layout.linears}
    own_roles = [lin.role for lin in draft.layout.linears]
    groups = fused_groups(draft.config)
    roles: dict[str, str] = {}
    for name in names:
        key = name.removesuffix(".weight")
        if key in own_roles:
            found = [key]
        elif key in groups:
            found = list(groups[key])
        elif key in PART_ALIASES:
            found = [lin.role for lin in draft.layout.linears if lin.part is PART_ALIASES[key]]
        elif key in by_module:
            found = [by_module[key]]
        else:
            valid = [*own_roles, *groups, *PART_ALIASES]
            raise SchemeError(f"{name!r} names no linear of this draft; valid names: {', '.join(valid)} "
                              "or a module name such as " + draft.layout.linear("o_proj").module,
                              field="exclude")
        roles.update({role: name for role in found})
    return roles


def make_plan(draft: DraftCheckpoint, scheme: Scheme, exclude: Sequence[str] | None = None,
              quantize_fc: bool = False, auto_excluded: Mapping[str, str] | None = None,
              engine: str = AUTO_ENGINE) -> QuantPlan:
    """Default exclusions are fc and lm_head; `exclude` adds to them; `quantize_fc` drops fc;
    `auto_excluded` (role -> reason, from measured sensitivity) keeps more linears BF16; `engine` (--engine) gives
    the engines the artifact is for (`engines/choice.py`: recorded, never refused here)."""
    user = resolve_exclude_names(draft, exclude or ())
    if quantize_fc and "fc" in user:
        raise SchemeError("--quantize-fc contradicts --exclude fc", field="exclude")
    defaults = {r: why for r, why in DEFAULT_EXCLUDE_REASONS.items() if not (r == "fc" and quantize_fc)}
    if draft.config.family is DraftFamily.MLA:
        defaults.update(MLA_DEFAULT_EXCLUDE_REASONS)
    decisions = []
    for lin in draft.layout.linears:
        if lin.role in user:
            keep, reason = False, f"excluded by request ({user[lin.role]})"
        elif lin.role in defaults:
            keep, reason = False, defaults[lin.role]
        elif auto_excluded and lin.role in auto_excluded:
            keep, reason = False, auto_excluded[lin.role]
        else:
            keep, reason = True, scheme.name
        decisions.append(LayerDecision(lin.role, lin.module, lin.out_features, lin.in_features, keep, reason))
    scheme = resolve_group(scheme, [d.in_features for d in decisions if d.quantize])
    plan = QuantPlan(scheme, tuple(decisions), choose_engines(engine, draft.config, draft.format, scheme, quantize_fc))
    _check_fused_groups(plan, fused_groups(draft.config))
    _check_group_widths(plan)
    return plan


def _check_group_widths(plan: QuantPlan) -> None:
    """A per-group scheme (MX 32, NVFP4 16, INT4 32-128) scales groups of input elements: every quantized linear's
    input width must divide."""
    group = plan.scheme.weight.group_size
    for d in plan.quantized:
        if group and d.in_features % group:
            raise SchemeError(f"scheme {plan.scheme.name} quantizes groups of {group} input elements, but "
                              f"{d.module}.weight has {d.in_features} inputs (not a multiple of {group}); "
                              f"keep it BF16 with --exclude {d.role}", field="scheme")


def _check_fused_groups(plan: QuantPlan, groups: Mapping[str, tuple[str, ...]]) -> None:
    intended = plan.intended()
    for fused, members in groups.items():
        states = {intended[m] for m in members}
        if len(states) > 1:
            raise SchemeError(
                f"vLLM fuses {', '.join(members)} into {fused}: they must all be quantized or all excluded "
                f"(use --exclude {fused})", field="exclude")
