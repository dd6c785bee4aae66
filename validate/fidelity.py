"""How close the FP8 draft stays to its BF16 reference: weight SQNR (data-free, ``runtime/weight_sqnr.py``); on
calibration data the step-0 logits (KL, top-1 agreement) and the simulated acceptance of greedy k-step chains are
measured by ``eagle3_quant.runtime.acceptance.calibration_fidelity`` (in the core: `quantize --scheme auto` runs
both too)."""

from __future__ import annotations

from eagle3_quant.runtime.acceptance import Fidelity, calibration_fidelity
from eagle3_quant.runtime.weight_sqnr import sqnr_db, weight_sqnr

__all__ = ["Fidelity", "calibration_fidelity", "sqnr_db", "weight_sqnr"]
