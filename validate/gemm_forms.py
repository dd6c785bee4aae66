"""What one GEMM was (from a BLAS log line or a kernel name) and what an artifact's scheme needs it to be.

Element types are named alike for every vendor: ``E4M3`` (OCP), ``E4M3 fnuz``, and ``E4M3 (OCP or fnuz)`` where the
source cannot tell them apart (hipBLASLt's bench line prints both as ``f8_r``; its trace before ROCm 6.4 prints
fnuz as ``R_8F_E4M3``; Tensile named fnuz ``F8`` before it had ``F8N``): the device's architecture decides those;
``E2M1``, ``E2M3``, ``E3M2`` (FP4/FP6), ``I8``, ``I32``, ``U4`` (INT4 with zero points), ``BF16``.
Scale modes: ``rowwise`` (one fp32 scale per row of each operand: cuBLASLt's ``OUTER_VEC_32F``, hipBLASLt's vector
code 2), ``tensorwise`` (one fp32 scalar each), ``none``, ``block<N>_<scale type>`` for block scales (MX:
``block32_ue8m0``, NVFP4: ``block16_ue4m3``) and ``block<N>_zp`` (INT4 groups with zero points). None: the source
does not show it.

`SCHEME_GEMMS` is derived from eagle3_quant/schemes.py: a scheme added there has its row here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from eagle3_quant.schemes import INT4_GROUP_SIZES, SCHEMES, Scheme, TensorQuantSpec

AMBIGUOUS = " (OCP or fnuz)"
FNUZ_ARCHS = ("gfx942",)                        # MI300X: FP8 is fnuz (vLLM converts e4m3fn checkpoints)
FP8_ELEMENTS = ("E4M3", "E5M2")
NAMED_FP8 = "FP8 (E4M3 or E5M2)"                # a kernel name that says FP8 but not which
NOT_FP8 = "non-FP8"                             # a kernel name that says its operands are something else
SCALE_WORDS = {"rowwise": "rowwise fp32 scales", "tensorwise": "one fp32 scale per tensor", "none": "no scales",
               None: "scale mode not shown"}
BLOCK_MODE = re.compile(r"^block(\d+(?:x\d+)?)_(\w+)$")


def scale_words(mode: str | None) -> str:
    """"rowwise fp32 scales", "UE8M0 scales per block of 32", "scales and zero points per group of 128" ..."""
    if mode in SCALE_WORDS:
        return SCALE_WORDS[mode]
    block = BLOCK_MODE.match(mode)
    if block and block.group(2) == "zp":
        return f"scales and zero points per group of {block.group(1)}"
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
    """The GEMM a scheme's quantized linears must run: a weight of `element`, an activation of `input_element` (the
    same when None), `scale_mode` scales."""

    element: str                  # E4M3, E2M1, I8 ...; E4M3 fnuz once resolved for a gfx942 device
    scale_mode: str
    out_type: str = "BF16"
    scheme: str | None = None
    input_element: str | None = None

    @property
    def activation(self) -> str:
        return self.input_element or self.element

    def on(self, arch: str | None) -> ExpectedGemm:
        """The same GEMM for a device: FP8 is fnuz on gfx942, OCP on gfx950 and NVIDIA."""
        if not (arch or "").startswith(FNUZ_ARCHS):
            return self
        fnuz = {e: e + " fnuz" for e in FP8_ELEMENTS}
        return replace(self, element=fnuz.get(self.element, self.element),
                       input_element=fnuz.get(self.input_element, self.input_element))

    def accepts(self, form: GemmForm) -> bool:
        """Operand types agree (either order where they differ: the libraries name the weight A or B)."""
        w, x = self.element, self.activation
        return (element_matches(form.a_type, w) and element_matches(form.b_type, x)) or (
            element_matches(form.a_type, x) and element_matches(form.b_type, w))

    def describe(self) -> str:
        return f"{self.element} x {self.activation} with {scale_words(self.scale_mode)}"


# Quark's element dtypes (schemes.ELEMENT_DTYPES) as the GEMM forms name them
GEMM_ELEMENTS = {"fp8_e4m3": "E4M3", "fp4": "E2M1", "fp6_e2m3": "E2M3", "fp6_e3m2": "E3M2", "int8": "I8",
                 "uint4": "U4", "bf16": "BF16"}


def spec_scale_mode(spec: TensorQuantSpec) -> str:
    """The scale mode a GEMM passes for one operand of this spec. INT8: none (PyTorch's int8_gemm, the vendor BLAS's
    INT8 GEMM, takes no scales: the per-token and per-channel scales multiply its int32 output)."""
    if not spec.quantized or spec.kind == "int8":
        return "none"
    if spec.mx or spec.nvfp4:
        return f"block{spec.group_size}_{'ue8m0' if spec.mx else 'ue4m3'}"
    if spec.kind == "int4":
        return f"block{spec.group_size}_zp"
    return "tensorwise" if spec.granularity == "per_tensor" else "rowwise"


def scheme_gemm(scheme: Scheme) -> ExpectedGemm:
    """The GEMM of a registered scheme, from its weight and input specs."""
    weight, inputs = scheme.weight, scheme.input
    mode = spec_scale_mode(weight)
    if inputs.quantized:
        mode = one_mode(mode, spec_scale_mode(inputs))
    activation = GEMM_ELEMENTS[inputs.dtype]
    return ExpectedGemm(GEMM_ELEMENTS[weight.dtype], mode, "I32" if weight.kind == "int8" else "BF16", scheme.name,
                        None if activation == GEMM_ELEMENTS[weight.dtype] else activation)


SCHEME_GEMMS = {name: scheme_gemm(s) for name, s in SCHEMES.items()}


def _first(entry):
    """NVFP4's weight and input configs are lists (the group spec, then the per-tensor global one)."""
    return entry[0] if isinstance(entry, list) and entry else entry


def _spec_matches(spec: TensorQuantSpec, config) -> bool:
    """A schemes.TensorQuantSpec against one tensor's Quark config (dtype, qscheme, ch_axis, group_size, is_dynamic);
    no config (None) is an unquantized tensor."""
    if not isinstance(config, dict):
        return config is None and not spec.quantized
    group = config.get("group_size")
    return (spec.quantized and config.get("dtype") == spec.dtype and config.get("qscheme") == spec.granularity
            and bool(config.get("is_dynamic")) == spec.dynamic
            and (spec.granularity != "per_channel" or config.get("ch_axis") == spec.ch_axis)
            and (group in (None, spec.group_size) or (spec.kind == "int4" and group in INT4_GROUP_SIZES)))


def scheme_of(quant_config: dict) -> str | None:
    """The registered scheme whose weight and input specs the artifact's Quark global config declares."""
    global_config = quant_config.get("global_quant_config")
    if not isinstance(global_config, dict) or not isinstance(_first(global_config.get("weight")), dict):
        return None
    weight, inputs = (_first(global_config.get(key)) for key in ("weight", "input_tensors"))
    return next((s.name for s in SCHEMES.values()
                 if _spec_matches(s.weight, weight) and _spec_matches(s.input, inputs)), None)


def expected_gemm(quant_config: dict, probe_scale_mode: str) -> ExpectedGemm:
    """The table's GEMM for the artifact's scheme; for a scheme without a row, FP8 E4M3 with the scale mode the
    probe passed to ``torch._scaled_mm``."""
    scheme = scheme_of(quant_config)
    return SCHEME_GEMMS.get(scheme) or ExpectedGemm("E4M3", probe_scale_mode, scheme=scheme)
