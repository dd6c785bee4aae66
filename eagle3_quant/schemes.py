"""Quantization schemes as data: one registry shared by the API, the CLI and the export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from eagle3_quant.errors import SchemeError


@dataclass(frozen=True)
class TensorQuantSpec:
    """How one tensor kind (weight or input activation) is quantized."""

    granularity: Literal["per_channel", "per_tensor"]
    ch_axis: int | None
    dynamic: bool
    dtype: str = "fp8_e4m3"

    def describe(self) -> str:
        where = "per-token" if self.ch_axis == 1 else (
            "per-channel" if self.granularity == "per_channel" else "per-tensor")
        return f"FP8 E4M3 {where}, {'dynamic' if self.dynamic else 'static'}"


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    weight: TensorQuantSpec
    input: TensorQuantSpec
    needs_calibration: bool
    vllm_scheme: str = "QuarkW8A8Fp8"


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
    )
}
DEFAULT_SCHEME = "ptpc_fp8"


def get_scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise SchemeError(f"unknown scheme {name!r}; valid schemes: {', '.join(SCHEMES)}",
                          field="scheme") from None
