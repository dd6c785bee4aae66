"""Quantization schemes as data: one registry shared by the API, the CLI and the export."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from eagle3_quant.errors import SchemeError

MX_GROUP_SIZE = 32          # OCP microscaling: one E8M0 scale per 32 consecutive input elements
NVFP4_GROUP_SIZE = 16       # NVFP4: one FP8 E4M3 scale per 16 inputs, times one FP32 scale per tensor
INT4_GROUP_SIZES = (128, 64, 32)   # W4A16: 128 where every quantized input width divides, else the largest that does
# element dtype (Quark's name) -> (name in docs, bits per element)
ELEMENT_DTYPES = {"fp8_e4m3": ("FP8 E4M3", 8), "fp4": ("MXFP4 E2M1", 4), "fp6_e2m3": ("MXFP6 E2M3", 6),
                  "fp6_e3m2": ("MXFP6 E3M2", 6), "int8": ("INT8", 8), "uint4": ("INT4", 4), "bf16": ("BF16", 16)}
DEVICE_PROFILE_NAMES = ("mi355x", "mi300x", "h200", "h100", "b200")


@dataclass(frozen=True)
class TensorQuantSpec:
    """How one tensor kind (weight or input activation) is quantized.

    FP8 and INT8: per output channel, per token (``ch_axis`` 1) or per tensor, with float32 scales. Per group
    (``group_size`` elements along the input dimension): OCP MX (one E8M0 power-of-two scale a group), NVFP4 (one
    FP8 E4M3 scale a group times one FP32 scale a tensor) or INT4 (a scale and, asymmetric, a zero point a
    group). ``granularity`` "none": not quantized (a weight-only scheme's activations).
    """

    granularity: Literal["per_channel", "per_tensor", "per_group", "none"]
    ch_axis: int | None
    dynamic: bool
    dtype: str = "fp8_e4m3"
    group_size: int | None = None
    scale_format: Literal["float32", "e8m0", "fp8_e4m3"] = "float32"
    symmetric: bool = True

    @property
    def quantized(self) -> bool:
        return self.granularity != "none"

    @property
    def mx(self) -> bool:
        return self.granularity == "per_group" and self.scale_format == "e8m0"

    @property
    def nvfp4(self) -> bool:
        return self.granularity == "per_group" and self.scale_format == "fp8_e4m3"

    @property
    def element_bits(self) -> int:
        return ELEMENT_DTYPES[self.dtype][1]

    @property
    def kind(self) -> str:
        """The tensor layout it writes: fp8, mx (packed MXFP4/MXFP6), mxfp8, nvfp4, int8, int4 or none."""
        if not self.quantized:
            return "none"
        if self.nvfp4:
            return "nvfp4"
        if self.mx:
            return "mxfp8" if self.dtype == "fp8_e4m3" else "mx"
        return {"int8": "int8", "uint4": "int4"}.get(self.dtype, "fp8")

    def describe(self) -> str:
        if not self.quantized:
            return "BF16 (not quantized)"
        name = "NVFP4 E2M1" if self.nvfp4 else "MXFP8 E4M3" if self.mx and self.dtype == "fp8_e4m3" else \
            ELEMENT_DTYPES[self.dtype][0]
        if self.mx:
            where = f"per group of {self.group_size} (E8M0 scales)"
        elif self.nvfp4:
            where = f"per group of {self.group_size} (E4M3 scales, one FP32 scale a tensor)"
        elif self.granularity == "per_group":
            where = f"per group of {self.group_size} ({'symmetric' if self.symmetric else 'scales and zero points'})"
        else:
            where = "per-token" if self.ch_axis == 1 else (
                "per-channel" if self.granularity == "per_channel" else "per-tensor")
        return f"{name} {where}, {'dynamic' if self.dynamic else 'static'}"


NOT_QUANTIZED = TensorQuantSpec("none", None, dynamic=True, dtype="bf16")


def mx_spec(dtype: str, dynamic: bool) -> TensorQuantSpec:
    return TensorQuantSpec("per_group", -1, dynamic, dtype, MX_GROUP_SIZE, "e8m0")


def nvfp4_spec(dynamic: bool) -> TensorQuantSpec:
    return TensorQuantSpec("per_group", -1, dynamic, "fp4", NVFP4_GROUP_SIZE, "fp8_e4m3")


# Which devices run a scheme's GEMM natively in vLLM 0.33, from its kernel tables (model_executor/kernels/linear/
# __init__.py, each kernel's is_supported): FP8 everywhere (MI300X as e4m3fnuz); INT8 (CUTLASS on NVIDIA, Triton/AITER
# on ROCm) and W4A16 (Machete/Marlin; Triton/Exllama/Conch on ROCm) everywhere; MXFP4 W4A4: AITER on gfx95x
# (supports_mx), FlashInfer on sm100; MXFP4 x FP8: AITER gemm_a8wfp4 on gfx95x; MXFP8: RocmDotScaled on gfx95x,
# FlashInfer/CUTLASS on sm100; NVFP4: FlashInfer/CUTLASS FP4 on sm100 only; MXFP6: emulation only (ROCm) and Humming's
# weight dequantizing kernels (CUDA), so nowhere natively.
EVERY_DEVICE = DEVICE_PROFILE_NAMES
GFX950_SM100 = ("mi355x", "b200")


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    weight: TensorQuantSpec
    input: TensorQuantSpec
    needs_calibration: bool                         # static input scales: --calib is required
    vllm_scheme: str = "QuarkW8A8Fp8"
    engines: tuple[str, ...] = ("vllm", "sglang")   # the engines whose Quark loader builds this scheme
    engine_notes: tuple[tuple[str, str], ...] = ()  # (engine, why it cannot load this scheme)
    native_devices: tuple[str, ...] = EVERY_DEVICE  # device profiles whose vLLM kernels run its GEMM natively
    gemm: tuple[tuple[str, str], ...] = (("nvidia", "FP8 scaled GEMM (CUTLASS scaled_mm)"),
                                         ("amd", "FP8 scaled GEMM (hipBLASLt through torch._scaled_mm)"))
    file_to_file: bool = True       # Quark's file-to-file path writes what the engines load (else its in-memory path)
    rounding: Literal["rtn", "awq"] = "rtn"         # the default rounding (awq needs --calib; --rtn overrides it)

    @property
    def mx(self) -> bool:
        return self.weight.mx

    @property
    def static_input(self) -> bool:
        return self.input.quantized and not self.input.dynamic

    @property
    def activation_bits(self) -> int | None:
        """Bits of a quantized activation element; None when activations stay BF16."""
        return self.input.element_bits if self.input.quantized else None

    def needs_data(self, rounding_replaced: bool = False) -> bool:
        """Does quantizing need a calibration set: static input scales, or a default rounding that measures on one
        (AWQ) unless another rounding replaces it (--rtn, --gptq)."""
        return self.needs_calibration or (self.rounding == "awq" and not rounding_replaced)

    def why_not(self, engine: str) -> str | None:
        """None when `engine` loads this scheme, else the reason it cannot."""
        if engine in self.engines:
            return None
        return dict(self.engine_notes).get(engine, f"{engine} has no loader for scheme {self.name}")


_SGLANG_NO_DENSE_W4A8 = ("sglang", "SGLang 0.5.23's Quark loader has no dense linear scheme for MXFP4 weights with "
                                   "FP8 activations (W4A8 is MoE-only)")

_SGLANG_NO_MXFP6 = ("sglang", "SGLang 0.5.23's Quark loader has no linear scheme for MXFP6 weights (quark.py "
                              "_get_scheme_from_config): they raise 'No quark compatible scheme was found'")


def _sglang_none(what: str) -> tuple[str, str]:
    return ("sglang", f"SGLang 0.5.23's Quark loader has no linear scheme for {what} (quark.py "
                      "_get_scheme_from_config): they raise 'No quark compatible scheme was found'")


def _mxfp6_scheme(element: str) -> Scheme:
    """MXFP6 weights with dynamic MXFP6 activations of the same element (vLLM 0.33: ``QuarkOCP_MX``, emulated by
    ``EmulationMxfp6LinearKernel`` on every platform; its dense parser has no MXFP6 weight + FP8 activation scheme)."""
    doc = ELEMENT_DTYPES[element][0]
    return Scheme(
        name=f"w_mx{element}_a_mx{element}",
        summary=f"{doc} weights and activations (one E8M0 scale per 32 inputs, 4 elements in 3 bytes; activations "
                "dynamic); no data needed",
        weight=mx_spec(element, dynamic=False),
        input=mx_spec(element, dynamic=True),
        needs_calibration=False,
        vllm_scheme="QuarkOCP_MX",
        engines=("vllm",),
        engine_notes=(_SGLANG_NO_MXFP6,),
        native_devices=(),
        gemm=(("nvidia", "MXFP6 GEMM: none in vLLM 0.33 (Humming dequantizes the weights)"),
              ("amd", "MXFP6 GEMM: none in vLLM 0.33 (EmulationMxfp6LinearKernel)")),
    )


SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme(
            name="ptpc_fp8",
            summary="FP8 weights per output channel (static) and activations per token (dynamic); no data needed",
            weight=TensorQuantSpec("per_channel", 0, dynamic=False),
            input=TensorQuantSpec("per_channel", 1, dynamic=True),
            needs_calibration=False,
        ),
        Scheme(
            name="fp8",
            summary="FP8 weights and activations per tensor, both static; needs calibration data (--calib)",
            weight=TensorQuantSpec("per_tensor", None, dynamic=False),
            input=TensorQuantSpec("per_tensor", None, dynamic=False),
            needs_calibration=True,
        ),
        Scheme(
            name="w_mxfp4_a_mxfp4",
            summary="MXFP4 weights and activations (E2M1, one E8M0 scale per 32 inputs; activations dynamic); "
                    "no data needed",
            weight=mx_spec("fp4", dynamic=False),
            input=mx_spec("fp4", dynamic=True),
            needs_calibration=False,
            vllm_scheme="QuarkOCP_MX",
            native_devices=GFX950_SM100,
            gemm=(("nvidia", "MXFP4 block-scaled GEMM (FlashInfer, sm100)"),
                  ("amd", "MXFP4 block-scaled GEMM (AITER, gfx950)")),
        ),
        Scheme(
            name="w_mxfp4_a_fp8",
            summary="MXFP4 weights (one E8M0 scale per 32 inputs), FP8 activations per tensor (static); needs "
                    "calibration data (--calib)",
            weight=mx_spec("fp4", dynamic=False),
            input=TensorQuantSpec("per_tensor", None, dynamic=False),
            needs_calibration=True,
            vllm_scheme="QuarkW4A8_MXFP4_FP8",
            engines=("vllm",),
            engine_notes=(_SGLANG_NO_DENSE_W4A8,),
            native_devices=("mi355x",),
            gemm=(("nvidia", "MXFP4 x FP8 GEMM: none in vLLM 0.33 (emulated)"),
                  ("amd", "MXFP4 x FP8 GEMM (AITER gemm_a8wfp4, gfx950)")),
        ),
        _mxfp6_scheme("fp6_e2m3"),
        _mxfp6_scheme("fp6_e3m2"),
        Scheme(
            name="w8a8_int8",
            summary="INT8 weights per output channel (static, symmetric) and activations per token (dynamic); no "
                    "data needed (--smooth-alpha with --calib migrates activation outliers first)",
            weight=TensorQuantSpec("per_channel", 0, dynamic=False, dtype="int8"),
            input=TensorQuantSpec("per_channel", 1, dynamic=True, dtype="int8"),
            needs_calibration=False,
            vllm_scheme="QuarkW8A8Int8",
            engines=("vllm",),
            engine_notes=(_sglang_none("INT8 weights"),),
            gemm=(("nvidia", "INT8 x INT8 GEMM (CUTLASS scaled_mm)"),
                  ("amd", "INT8 x INT8 GEMM (AITER or Triton scaled_mm)")),
        ),
        Scheme(
            name="w4a16_int4",
            summary="INT4 weights per group of 128 inputs (64 or 32 where the widths need it) with a scale and a "
                    "zero point each, BF16 activations; AWQ on --calib by default (--gptq, --rtn)",
            weight=TensorQuantSpec("per_group", -1, dynamic=False, dtype="uint4", group_size=INT4_GROUP_SIZES[0],
                                   symmetric=False),
            input=NOT_QUANTIZED,
            needs_calibration=False,
            vllm_scheme="QuarkW4A16Int4",
            engines=("vllm",),
            engine_notes=(_sglang_none("INT4 weights"),),
            gemm=(("nvidia", "W4A16 mixed-precision GEMM (Machete, Marlin)"),
                  ("amd", "W4A16 mixed-precision GEMM (Triton W4A16, Exllama)")),
            file_to_file=False,
            rounding="awq",
        ),
        Scheme(
            name="nvfp4",
            summary="NVFP4 weights and activations (E2M1, one E4M3 scale per 16 inputs and one FP32 scale a "
                    "tensor; activations dynamic per group, static per tensor); needs calibration data (--calib)",
            weight=nvfp4_spec(dynamic=False),
            input=nvfp4_spec(dynamic=True),
            needs_calibration=True,
            vllm_scheme="QuarkNVFP4",
            engines=("vllm",),
            engine_notes=(_sglang_none("NVFP4 weights"),),
            native_devices=("b200",),
            gemm=(("nvidia", "NVFP4 block-scaled GEMM (FlashInfer or CUTLASS FP4, sm100)"),
                  ("amd", "NVFP4 GEMM: none in vLLM 0.33 (EmulationNvFp4LinearKernel)")),
        ),
        Scheme(
            name="w_mxfp8_a_mxfp8",
            summary="MXFP8 E4M3 weights and activations (one E8M0 scale per 32 inputs; activations dynamic); no "
                    "data needed",
            weight=mx_spec("fp8_e4m3", dynamic=False),
            input=mx_spec("fp8_e4m3", dynamic=True),
            needs_calibration=False,
            vllm_scheme="QuarkOCP_MX",
            engines=("vllm",),
            engine_notes=(_sglang_none("MXFP8 weights"),),
            native_devices=GFX950_SM100,
            gemm=(("nvidia", "MXFP8 block-scaled GEMM (FlashInfer or CUTLASS, sm100)"),
                  ("amd", "MXFP8 block-scaled GEMM (RocmDotScaled, gfx950)")),
        ),
    )
}
DEFAULT_SCHEME = "ptpc_fp8"


def get_scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise SchemeError(f"unknown scheme {name!r}; valid schemes: {', '.join(SCHEMES)}",
                          field="scheme") from None


def resolve_group(scheme: Scheme, widths: Iterable[int]) -> Scheme:
    """INT4 groups: 128 inputs, or the largest of INT4_GROUP_SIZES that divides every quantized input width (one
    group size for the whole artifact: vLLM reads it from the global config); the smallest when none does (the plan
    then refuses the linear that does not divide). Other schemes unchanged."""
    if scheme.weight.kind != "int4":
        return scheme
    widths = list(widths)
    group = next((g for g in INT4_GROUP_SIZES if all(w % g == 0 for w in widths)), INT4_GROUP_SIZES[-1])
    return replace(scheme, weight=replace(scheme.weight, group_size=group))


def scheme_label(name: str | None) -> str:
    """What a table calls a linear quantized with scheme `name` (None or unknown: the default scheme's): its weight
    element as `describe` names it, "FP8 E4M3", "MXFP4 E2M1"; a new scheme's label comes from its own spec."""
    return SCHEMES.get(name or DEFAULT_SCHEME, SCHEMES[DEFAULT_SCHEME]).weight.describe().partition(" per")[0]


SHORT_NAMES = {"fp8": "FP8", "int8": "INT8", "int4": "INT4", "nvfp4": "NVFP4", "mxfp8": "MXFP8"}


def _short(spec: TensorQuantSpec) -> str:
    if spec.kind == "mx":
        return "MXFP4" if spec.dtype == "fp4" else "MXFP6"
    return SHORT_NAMES.get(spec.kind, "BF16")


def precision_label(name: str | None) -> str:
    """The one word every printed or published line uses for scheme `name`'s quantized linears: FP8, INT8, INT4,
    NVFP4, MXFP4, MXFP6 or MXFP8 (None or unknown: the default scheme's)."""
    return _short(SCHEMES.get(name or DEFAULT_SCHEME, SCHEMES[DEFAULT_SCHEME]).weight)


def precision_words(name: str | None) -> str:
    """The weights' and the activations' precision when they differ ("MXFP4 weights, FP8 activations", "INT4
    weights, BF16 activations"), else the label alone."""
    scheme = SCHEMES.get(name or DEFAULT_SCHEME, SCHEMES[DEFAULT_SCHEME])
    weights, inputs = _short(scheme.weight), _short(scheme.input) if scheme.input.quantized else "BF16"
    return weights if weights == inputs else f"{weights} weights, {inputs} activations"


def amd_gemm(name: str | None) -> str:
    """What runs the scheme's linears on AMD GPUs, from the registry's kernel table."""
    scheme = SCHEMES.get(name or DEFAULT_SCHEME, SCHEMES[DEFAULT_SCHEME])
    return dict(scheme.gemm).get("amd", "")


ENGINES = ("vllm", "sglang")
AUTO_ENGINE = "auto"                      # the engines that can serve the draft and scheme (engines/choice.py)
SERVING_CHOICES = (AUTO_ENGINE, "both", *ENGINES)      # what --engine accepts


def serving_engines(choice: str) -> tuple[str, ...]:
    """The engines an --engine choice names: both means vLLM and SGLang; auto, any of them."""
    return ENGINES if choice in ("both", AUTO_ENGINE) else (choice,)


def check_engines(scheme: Scheme, engines: tuple[str, ...]) -> None:
    """Refuse, in one line, a scheme that one of `engines` cannot load."""
    for engine in engines:
        if engine not in ENGINES:
            raise SchemeError(f"unknown engine {engine!r}; valid engines: {', '.join(ENGINES)}", field="engine")
        why = scheme.why_not(engine)
        if why:
            raise SchemeError(f"scheme {scheme.name} cannot be served by {engine}: {why} (--engine names the engines "
                              f"the artifact must load in; the default, {AUTO_ENGINE}, takes those that can)",
                              field="engine")
