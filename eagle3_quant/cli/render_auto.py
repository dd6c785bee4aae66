"""The table of `quantize --scheme auto`: every candidate, its step bytes and acceptance, the choice."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.records.auto_choice import TABLE_HEADER, AutoChoiceRecord, table_rows
from eagle3_quant.records.validation_report import prediction_text


def print_auto_choice(record: AutoChoiceRecord) -> None:
    table = Table(title=f"--scheme auto: gate acceptance ratio >= {record.min_acceptance_ratio} (point ratio; "
                        f"k={record.k}, {record.drafts} chains of {record.calibration}, BF16 acceptance length "
                        f"{record.acceptance_length_bf16:.3f}; engine {record.engine}"
                        + (f"; {prediction_text(record.prediction)}" if record.prediction else "") + ")")
    for column in TABLE_HEADER:
        table.add_column(column)
    for row, candidate in zip(table_rows(record), record.candidates, strict=True):
        table.add_row(*row, style="bold green" if candidate.chosen else None)
    console.print(table)
    for reason in record.skipped:
        console.print(f"  not in the ladder: {reason}")
    chosen = record.chosen_candidate
    console.print(f"chose {chosen.name}: {chosen.step_bytes_over_bf16:.3f} of the BF16 step's "
                  f"{record.bf16_step_bytes:,} bytes, acceptance ratio {chosen.acceptance_ratio:.4f} "
                  f"(measured in {record.seconds:.1f} s)")
