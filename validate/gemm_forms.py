"""What one GEMM was (from a BLAS log line or a kernel name) and what an artifact's scheme needs it to be.

Element types are named alike for every vendor: ``E4M3`` (OCP), ``E4M3 fnuz``, and ``E4M3 (OCP or fnuz)`` where the
source cannot tell them apart (hipBLASLt's bench line prints both as ``f8_r``; its trace before ROCm 6.4 prints
fnuz as ``R_8F_E4M3``; Tensile named fnuz ``F8`` before it had ``F8N``): the device's architecture decides those.
Scale modes: ``rowwise`` (one fp32 scale per row of each operand: cuBLASLt's ``OUTER_VEC_32F``, hipBLASLt's vector
code 2), ``tensorwise`` (one fp32 scalar each), ``none``, and ``block<N>_<scale type>`` for block scales (MX:
``block32_ue8m0``). None: the source does not show it.

Adding a scheme to eagle3_quant/schemes.py that the kernel check should judge is one row of `SCHEME_GEMMS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

AMBIGUOUS = " (OCP or fnuz)"
FNUZ_ARCHS = ("gfx942",)                        # MI300X: FP8 is fnuz (vLLM converts e4m3fn checkpoints)
FP8_ELEMENTS = ("E4M3", "E5M2")
NAMED_FP8 = "FP8 (E4M3 or E5M2)"                # a kernel name that says FP8 but not which
NOT_FP8 = "non-FP8"                             # a kernel name that says its operands are something else
SCALE_WORDS = {"rowwise": "rowwise fp32 scales", "tensorwise": "one fp32 scale per tensor", "none": "no scales",
               None: "scale mode not shown"}
BLOCK_MODE = re.compile(r"^block(\d+(?:x\d+)?)_(\w+)$")


def scale_words(mode: str | None) -> str:
    """"rowwise fp32 scales", "UE8M0 scales per block of 32" ..."""
    if mode in SCALE_WORDS:
        return SCALE_WORDS[mode]
    block = BLOCK_MODE.match(mode)
    return f"{block.group(2).upper()} scales per block of {block.group(1)}" if block else f"{mode} scales"


def one_mode(a: str | None, b: str | None) -> str | None:
    """The scale mode of a GEMM from its two operands' (equal in every path here; else both are named)."""
    return a if a == b else f"A {a or 'none'} / B {b or 'none'}"


def is_fp8(element: str | None) -> bool:
    return bool(element) and (element == NAMED_FP8 or element.split()[0] in FP8_ELEMENTS)


def element_matches(seen: str | None, wanted: str) -> bool:
    """Does an operand type the source shows agree with the one wanted? An ambiguous kind agrees with either kind
    of its element; a name's bare "FP8" agrees with any FP8 element."""
    if seen is None or seen == NOT_FP8:
        return False
    base = wanted.split()[0]
    return seen == wanted or seen == base + AMBIGUOUS or (seen == NAMED_FP8 and base in FP8_ELEMENTS)


@dataclass(frozen=True)
class GemmForm:
    """One GEMM as a log line or a kernel name shows it; None where that source does not say."""

    library: str                  # cuBLASLt | hipBLASLt | rocBLAS | the kernel name's library or family
    a_type: str | None
    b_type: str | None
    out_type: str | None
    scale_mode: str | None
    source: str = "trace"         # trace | bench | kernel name

    @property
    def fp8(self) -> bool:
        return is_fp8(self.a_type) and is_fp8(self.b_type)

    @property
    def operands(self) -> str:
        return f"{self.a_type} x {self.b_type}"

    def describe(self) -> str:
        """"E4M3 x E4M3 -> BF16, rowwise fp32 scales"."""
        out = f" -> {self.out_type}" if self.out_type else ""
        return f"{self.operands}{out}, {scale_words(self.scale_mode)}"


@dataclass(frozen=True)
class ExpectedGemm:
    """The GEMM a scheme's quantized linears must run: both operands of `element`, `scale_mode` scales."""

    element: str                  # E4M3, E2M1 ...; E4M3 fnuz once resolved for a gfx942 device
    scale_mode: str
    out_type: str = "BF16"
    scheme: str | None = None

    def on(self, arch: str | None) -> ExpectedGemm:
        """The same GEMM for a device: FP8 is fnuz on gfx942, OCP on gfx950 and NVIDIA."""
        if self.element in FP8_ELEMENTS and (arch or "").startswith(FNUZ_ARCHS):
            return replace(self, element=self.element + " fnuz")
        return self

    def accepts(self, form: GemmForm) -> bool:
        return element_matches(form.a_type, self.element) and element_matches(form.b_type, self.element)

    def describe(self) -> str:
        return f"{self.element} x {self.element} with {scale_words(self.scale_mode)}"


SCHEME_GEMMS = {
    "ptpc_fp8": ExpectedGemm("E4M3", "rowwise", scheme="ptpc_fp8"),           # per-token x per-channel scales
    "fp8": ExpectedGemm("E4M3", "tensorwise", scheme="fp8"),                  # static per-tensor scalars
    "w_mxfp4_a_mxfp4": ExpectedGemm("E2M1", "block32_ue8m0", scheme="w_mxfp4_a_mxfp4"),   # OCP MX
}


def _spec_matches(spec, config: dict) -> bool:
    """A schemes.TensorQuantSpec against one tensor's Quark config (dtype, qscheme, ch_axis, group_size, is_dynamic)."""
    return (config.get("dtype") == spec.dtype and config.get("qscheme") == spec.granularity
            and bool(config.get("is_dynamic")) == spec.dynamic
            and (spec.granularity != "per_channel" or config.get("ch_axis") == spec.ch_axis)
            and config.get("group_size") in (None, spec.group_size))


def scheme_of(quant_config: dict) -> str | None:
    """The registered scheme whose weight and input specs the artifact's Quark global config declares."""
    from eagle3_quant.schemes import SCHEMES

    global_config = quant_config.get("global_quant_config")
    specs = [global_config.get(key) if isinstance(global_config, dict) else None for key in ("weight", "input_tensors")]
    if not all(isinstance(spec, dict) for spec in specs):
        return None
    return next((s.name for s in SCHEMES.values()
                 if _spec_matches(s.weight, specs[0]) and _spec_matches(s.input, specs[1])), None)


def expected_gemm(quant_config: dict, probe_scale_mode: str) -> ExpectedGemm:
    """The table's GEMM for the artifact's scheme; for a scheme without a row, FP8 E4M3 with the scale mode the
    probe passed to ``torch._scaled_mm``."""
    scheme = scheme_of(quant_config)
    return SCHEME_GEMMS.get(scheme) or ExpectedGemm("E4M3", probe_scale_mode, scheme=scheme)
