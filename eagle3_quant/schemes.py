"""Quantization schemes as data: one registry shared by the API, the CLI and the export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from eagle3_quant.errors import SchemeError

MX_GROUP_SIZE = 32          # OCP microscaling: one E8M0 scale per 32 consecutive input elements
# element dtype -> (name in docs, bits per element)
ELEMENT_DTYPES = {"fp8_e4m3": ("FP8 E4M3", 8), "fp4": ("MXFP4 E2M1", 4), "fp6_e2m3": ("MXFP6 E2M3", 6),
                  "fp6_e3m2": ("MXFP6 E3M2", 6)}


@dataclass(frozen=True)
class TensorQuantSpec:
    """How one tensor kind (weight or input activation) is quantized.

    FP8: per output channel, per token (``ch_axis`` 1) or per tensor, with float32 scales. MX (``per_group``):
    groups of `group_size` elements along the input dimension, each with one E8M0 (power of two) scale.
    """

    granularity: Literal["per_channel", "per_tensor", "per_group"]
    ch_axis: int | None
    dynamic: bool
    dtype: str = "fp8_e4m3"
    group_size: int | None = None
    scale_format: Literal["float32", "e8m0"] = "float32"

    @property
    def mx(self) -> bool:
        return self.granularity == "per_group" and self.scale_format == "e8m0"

    @property
    def element_bits(self) -> int:
        return ELEMENT_DTYPES[self.dtype][1]

    def describe(self) -> str:
        if self.mx:
            where = f"per group of {self.group_size} (E8M0 scales)"
        else:
            where = "per-token" if self.ch_axis == 1 else (
                "per-channel" if self.granularity == "per_channel" else "per-tensor")
        return f"{ELEMENT_DTYPES[self.dtype][0]} {where}, {'dynamic' if self.dynamic else 'static'}"


def mx_spec(dtype: str, dynamic: bool) -> TensorQuantSpec:
    return TensorQuantSpec("per_group", -1, dynamic, dtype, MX_GROUP_SIZE, "e8m0")


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    weight: TensorQuantSpec
    input: TensorQuantSpec
    needs_calibration: bool
    vllm_scheme: str = "QuarkW8A8Fp8"
    engines: tuple[str, ...] = ("vllm", "sglang")   # the engines whose Quark loader builds this scheme
    engine_notes: tuple[tuple[str, str], ...] = ()  # (engine, why it cannot load this scheme)

    @property
    def mx(self) -> bool:
        return self.weight.mx

    def why_not(self, engine: str) -> str | None:
        """None when `engine` loads this scheme, else the reason it cannot."""
        if engine in self.engines:
            return None
        return dict(self.engine_notes).get(engine, f"{engine} has no loader for scheme {self.name}")


_SGLANG_NO_DENSE_W4A8 = ("sglang", "SGLang 0.5.23's Quark loader has no dense linear scheme for MXFP4 weights with "
                                   "FP8 activations (W4A8 is MoE-only)")

_SGLANG_NO_MXFP6 = ("sglang", "SGLang 0.5.23's Quark loader builds only MXFP4 (QuarkW4A4MXFP4) and FP8 linear schemes: "
                              "MXFP6 weights raise 'No quark compatible scheme was found'")


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
        ),
        _mxfp6_scheme("fp6_e2m3"),
        _mxfp6_scheme("fp6_e3m2"),
    )
}
DEFAULT_SCHEME = "ptpc_fp8"


def get_scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise SchemeError(f"unknown scheme {name!r}; valid schemes: {', '.join(SCHEMES)}",
                          field="scheme") from None


def scheme_label(name: str | None) -> str:
    """What a table calls a linear quantized with scheme `name` (None or unknown: the default scheme's): its weight
    element as `describe` names it, "FP8 E4M3", "MXFP4 E2M1"; a new scheme's label comes from its own spec."""
    return SCHEMES.get(name or DEFAULT_SCHEME, SCHEMES[DEFAULT_SCHEME]).weight.describe().partition(" per")[0]


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
