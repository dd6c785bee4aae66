"""validate's default gates per scheme, as data beside the schemes (docs/mx.md, docs/guarantees.md).

A gate the user does not set (``--min-top1``, ``--min-acceptance-ratio``, ``--min-sqnr-db``, or ``validate.gates``
in a pipeline file) takes the artifact's scheme default here; an explicit value always wins. FP8's gates are the
historical ones. MX elements have fewer bits, so their weight SQNR and step-0 top-1 agreement are lower by
construction while acceptance, what serving speed depends on, can hold: their SQNR and top-1 gates are set from
the tiny pair's measurements (docs/mx.md), and the acceptance gate stays close to FP8's.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.errors import SchemeError

GATE_NAMES = ("min_top1_agreement", "min_acceptance_ratio", "min_weight_sqnr_db")


@dataclass(frozen=True)
class SchemeGates:
    min_top1_agreement: float
    min_acceptance_ratio: float
    min_weight_sqnr_db: float
    why: str

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in GATE_NAMES}


FP8_GATES = SchemeGates(0.95, 0.99, 25.0, "FP8 E4M3: ~31 dB weight SQNR on real drafts; near-tied top-1 tokens flip "
                                          "under any rounding (the tiny pair's BF16 draft run in fp32 agrees on 98.8%)")
MXFP4_GATES = SchemeGates(0.85, 0.98, 15.0, "MXFP4 E2M1: ~18-20 dB weight SQNR and ~0.83-0.91 top-1 by construction; "
                                            "judged by acceptance (tiny pair: 0.980-0.999 of BF16)")
MXFP6_E2M3_GATES = SchemeGates(0.95, 0.99, 25.0, "MXFP6 E2M3: measured like FP8 on the tiny pair (31.0 dB weight "
                                                 "SQNR, top-1 0.960, acceptance 1.0007): FP8's gates")
MXFP6_E3M2_GATES = SchemeGates(0.90, 0.98, 20.0, "MXFP6 E3M2: 2 mantissa bits; tiny pair 25.5 dB weight SQNR, top-1 "
                                                 "0.929, acceptance 0.991 (0.983..1.000)")

INT8_GATES = SchemeGates(0.95, 0.99, 25.0, "INT8 per-channel weights: more weight SQNR than FP8 E4M3 (7 mantissa bits "
                                           "against 3); FP8's gates")
INT4_GATES = SchemeGates(0.85, 0.98, 15.0, "INT4 per group: 4-bit weights like MXFP4 (~20 dB weight SQNR), BF16 "
                                           "activations; MXFP4's gates")
NVFP4_GATES = SchemeGates(0.85, 0.98, 15.0, "NVFP4: E2M1 like MXFP4, finer scales (FP8 per 16 inputs); MXFP4's gates")
MXFP8_GATES = SchemeGates(0.95, 0.99, 25.0, "MXFP8 E4M3: FP8 elements with a power-of-two scale per 32 inputs; "
                                            "FP8's gates")

SCHEME_GATES: dict[str, SchemeGates] = {
    "ptpc_fp8": FP8_GATES,
    "fp8": FP8_GATES,
    "w_mxfp4_a_mxfp4": MXFP4_GATES,
    "w_mxfp4_a_fp8": MXFP4_GATES,
    "w_mxfp6_e2m3_a_mxfp6_e2m3": MXFP6_E2M3_GATES,
    "w_mxfp6_e3m2_a_mxfp6_e3m2": MXFP6_E3M2_GATES,
    "w8a8_int8": INT8_GATES,
    "w4a16_int4": INT4_GATES,
    "nvfp4": NVFP4_GATES,
    "w_mxfp8_a_mxfp8": MXFP8_GATES,
}


def gates_for_scheme(scheme: str | None) -> SchemeGates:
    """The default gates of a registered scheme; None (an artifact whose scheme is unknown, e.g. a foreign FP8
    checkpoint) gets FP8's."""
    if scheme is None:
        return FP8_GATES
    try:
        return SCHEME_GATES[scheme]
    except KeyError:
        raise SchemeError(f"no default gates for scheme {scheme!r}; schemes with gates: {', '.join(SCHEME_GATES)}",
                          field="scheme") from None
