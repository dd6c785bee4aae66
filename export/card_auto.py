"""The model card's `--scheme auto` section: the measured candidate ladder from the manifest's ``auto_choice``."""

from __future__ import annotations

from eagle3_quant.records.auto_choice import TABLE_HEADER, AutoChoiceRecord, table_rows
from eagle3_quant.records.validation_report import prediction_text


def auto_section(record: AutoChoiceRecord | None) -> dict | None:
    """Template values (intro line, header, rows, what was left out); None when the scheme was chosen by hand."""
    if record is None:
        return None
    chosen = record.chosen_candidate
    intro = (f"Chosen by `eagle3-quant quantize --scheme auto --min-acceptance-ratio {record.min_acceptance_ratio} "
             f"--engine {record.engine}"
             + (f" --device-profile {record.device_profile}" if record.device_profile else "") +
             "`: candidates measured cheapest draft step (weight bytes one step reads) first, and the first whose "
             "simulated acceptance length relative to the BF16 draft keeps the gate "
             + ("(the 95% paired bootstrap interval's lower bound, and the scheme's validate gates) was written. "
                if record.gate == "lower" else "on its point ratio was written. ") +
             f"Measured on `{record.calibration}`: k={record.k}, "
             f"{record.drafts:,} chains, BF16 acceptance length {record.acceptance_length_bf16:.3f}"
             + (f", computed with {prediction_text(record.prediction)}" if record.prediction else "") + ". "
             f"Chosen: **{chosen.name}**, {chosen.step_bytes_over_bf16:.3f} of the BF16 step's "
             f"{record.bf16_step_bytes:,} bytes"
             + (f"; its GEMM runs natively on {', '.join(chosen.native_devices) or 'no device'}"
                if chosen.native_devices is not None else "")
             + ". Coverage and ratios of pruned vocabularies are in-sample (ranked on the same calibration set).")
    return {"intro": intro, "header": TABLE_HEADER, "rows": table_rows(record), "skipped": record.skipped}
