"""The table of `quantize --scheme auto`: the candidates measured, their step bytes, acceptance and gate (every row,
with why the others were not measured, with --measure-all and in the manifest); the choice and the devices that run
it natively."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.records.auto_choice import TABLE_HEADER, AutoChoiceRecord, table_rows
from eagle3_quant.records.validation_report import prediction_text

NUMBER_COLUMNS = ("step bytes", "of BF16", "acceptance ratio (95% CI)", "top-1", "coverage")


def gate_title(record: AutoChoiceRecord) -> str:
    rule = "the 95% interval's lower bound, and each scheme's validate gates" if record.gate == "lower" else \
        "point ratio"
    where = f"; only what {record.device_profile} runs natively" if record.device_profile else ""
    return (f"--scheme auto: gate acceptance ratio >= {record.min_acceptance_ratio} ({rule}; k={record.k}, "
            f"{record.drafts} chains of {record.calibration}, BF16 acceptance length "
            f"{record.acceptance_length_bf16:.3f}; engine {record.engine}{where}"
            + (f"; {prediction_text(record.prediction)}" if record.prediction else "") + ")")


def short_gate(status: str) -> str:
    """A rung stopped early, without the why its own line printed (and the manifest keeps): one screen wide."""
    head, _, _why = status.partition(": ")
    where, _, _ = _why.partition(": ")
    return f"{head}: {where}" if where.startswith(("stopped after", "before any sample")) else status


def print_auto_choice(record: AutoChoiceRecord) -> None:
    table = Table(title=gate_title(record))
    for column in TABLE_HEADER:      # numbers whole; names and reasons wrap
        table.add_column(column, no_wrap=column in NUMBER_COLUMNS, overflow="fold")
    hidden = 0
    for row, candidate in zip(table_rows(record), record.candidates, strict=True):
        if not (candidate.measured or candidate.chosen or record.measure_all):
            hidden += 1         # one screen: what was measured; the manifest holds every row
            continue
        table.add_row(*row[:-2], short_gate(row[-2]), row[-1], style="bold green" if candidate.chosen else None)
    console.print(table)
    if hidden:
        console.print(f"  {hidden} more candidates not measured (left out, or dearer than the choice): every row is "
                      f"in the manifest's auto_choice; --measure-all measures them all", markup=False)
    for reason in record.skipped:
        console.print(f"  not in the ladder: {reason}")
    chosen = record.chosen_candidate
    native = f"its GEMM runs natively on {', '.join(chosen.native_devices)} (emulated elsewhere)" \
        if chosen.native_devices else "no device runs its GEMM natively: vLLM emulates it (--device-profile " \
        "keeps what a device runs natively)"
    measured = sum(c.measured for c in record.candidates)
    console.print(f"chose {chosen.name}: {chosen.step_bytes_over_bf16:.3f} of the BF16 step's "
                  f"{record.bf16_step_bytes:,} bytes, acceptance ratio {chosen.acceptance_ratio:.4f}; {native}; "
                  f"{measured} of {len(record.candidates)} candidates measured in {record.seconds:.1f} s",
                  markup=False)
