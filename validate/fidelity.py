"""How close the FP8 draft stays to its BF16 reference: weight SQNR (data-free, ``runtime/weight_sqnr.py``); on
calibration data the step-0 logits (KL, top-1 agreement) and the simulated acceptance of greedy k-step chains are
measured by ``eagle3_quant.runtime.acceptance.calibration_fidelity`` (in the core: `quantize --scheme auto` runs
both too)."""

from __future__ import annotations

from eagle3_quant.runtime.acceptance import Fidelity, calibration_fidelity
from eagle3_quant.runtime.weight_sqnr import sqnr_db, weight_sqnr
from eagle3_quant.util.formatting import interval
from eagle3_quant.validate.report import Check, failed, gate

__all__ = ["Fidelity", "calibration_fidelity", "fidelity_gates", "sqnr_db", "weight_sqnr"]


def fidelity_gates(result: Fidelity, gates, label: str, k: int, how: str = "") -> list[Check]:
    """The top-1 and acceptance-ratio gates of a fidelity run (`label`: the quantized draft in words; `how`: the
    arithmetic, when not the engine's)."""
    checks = [gate("top1_agreement", result.top1_agreement, gates.min_top1_agreement,
                   f"step-0 top-1 agreement with the BF16 draft over {result.positions} positions{how}")]
    if result.ratio is None:
        checks.append(failed("acceptance_ratio", "no chain start in the calibration set is a greedy continuation "
                                                 "of the target (calibrate with generated tokens)"))
        return checks
    what = (f"acceptance length {label} {result.candidate.acceptance_length:.3f} / BF16 "
            f"{result.reference.acceptance_length:.3f} at k={k} over {result.reference.drafts} chains "
            f"(95% CI {interval(result.ratio.low, result.ratio.high)}); ratio")
    checks.append(gate("acceptance_ratio", result.ratio.ratio, gates.min_acceptance_ratio, what))
    return checks
