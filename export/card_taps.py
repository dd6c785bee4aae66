"""The model card's "target layers" section: per engine the layers fed as the source shipped and as this artifact
ships, what `quantize --serve-taps` wrote and why, and the acceptance measured under each candidate set of layers
(`quantize` on the BF16 draft, `validate` on the BF16 draft and the FP8 artifact)."""

from __future__ import annotations

from eagle3_quant.records.serve_taps import ServeTapsRecord
from eagle3_quant.records.validation_report import ValidationSummary
from eagle3_quant.taps.engine_rules import READERS
from eagle3_quant.util.formatting import NOT_MEASURED, number


def _layers(indices) -> str:
    return "unknown (the target's depth)" if indices is None else f"`hidden_states{list(indices)}`"


def _written(record: ServeTapsRecord) -> str:
    if not record.written:
        return "nothing: the ids are as the source wrote them"
    return "; ".join(f"`{key}` = {value} " + (f"(was {record.before[key]})" if record.before.get(key) is not None
                                                else "(not set before)") for key, value in record.written.items())


def taps_section(record: ServeTapsRecord | None, validation: ValidationSummary) -> dict | None:
    """Template values; None when neither the manifest nor the report says anything about the layers."""
    if record is None and not validation.taps_measured:
        return None
    feeds = [] if record is None else [
        (r.label, _layers(record.feeds_before.get(r.name))
         + (f" (cannot run: {record.problems_before[r.name]})" if r.name in record.problems_before else ""),
         _layers(record.feeds_after.get(r.name))) for r in READERS]
    quantize_lengths = {tuple(m.indices): m.acceptance_length for m in record.measured} if record else {}
    labels = {r.name: r.label for r in READERS}
    validated = {m.indices: m for m in validation.taps_measured}
    rows = []
    for indices in dict.fromkeys([*quantize_lengths, *validated]):
        m = validated.get(indices)
        name = m.name if m else next(x.name for x in record.measured if tuple(x.indices) == indices)
        fed = ", ".join(labels.get(r, r) for r in m.fed_by) if m and m.fed_by else "-"
        served = " (served)" if record is not None and record.served == list(indices) else ""
        lengths = (quantize_lengths.get(indices), m.acceptance_length_bf16 if m else None,
                   m.acceptance_length_fp8 if m else None)
        rows.append((f"`hidden_states{list(indices)}`", name + served, fed,
                     *(number(length, ".3f", NOT_MEASURED) for length in lengths)))
    summary = ("" if record is None else
               f"`--serve-taps {record.mode}`" + (f", decided by {record.decided_by}: {record.reason}."
                                                   if record.mode == "trained" else
                                                   f": {record.reason.removeprefix('--serve-taps as-is: ')}."))
    return {"summary": summary, "feeds": feeds, "written": _written(record) if record else "",
            "rows": rows, "best": validation.taps_best,
            "calibration": record.calibration if record and record.calibration else None}
