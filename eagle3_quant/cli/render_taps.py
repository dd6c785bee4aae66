"""Terminal tables for the target layers each engine feeds a draft (inspect, quantize, validate)."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.records.validation_report import TapsMetrics
from eagle3_quant.taps.engine_rules import READERS, reader
from eagle3_quant.util.formatting import number


def _layers(indices) -> str:
    return "-" if indices is None else f"hidden_states{list(indices)}"


def print_taps(taps: dict) -> None:
    """`inspect`: per engine the layers fed and where that comes from; the trained layers; the candidates."""
    depth = taps.get("target_layers")
    table = Table(title="target layers fed to the draft (hidden_states[k]: the input of layer k"
                        + (f"; {depth}-layer target)" if depth else "; target depth unknown: --target)"))
    for col in ("engine", "feeds", "read from"):
        table.add_column(col)
    trained = taps.get("trained")
    for feed in taps["feeds"]:
        fed = _layers(feed["indices"])
        if feed["problem"]:
            fed = f"[red]{fed}[/]: {feed['problem']}"
        elif trained is not None and feed["indices"] is not None and feed["indices"] != trained:
            fed = f"[yellow]{fed}[/] (not the trained layers)"
        table.add_row(feed["label"], fed, feed["source"])
    table.add_row("trained on", _layers(trained), taps.get("trained_source") or "unknown")
    console.print(table)
    for feed in taps["feeds"]:
        console.print(f"[dim]{feed['label']}: {feed['code']}[/]")
    for candidate in taps.get("candidates") or []:
        console.print(f"candidate {candidate['name']}: {_layers(candidate['indices'])}")
    for note in taps.get("notes") or []:
        console.print(f"note: {note}")


def print_serve_taps(record) -> None:
    """`quantize`: what each engine fed the source and feeds the artifact, what was written, why, as measured."""
    table = Table(title=f"--serve-taps {record.mode}: target layers each engine feeds the draft")
    for col in ("engine", "as shipped", "as written"):
        table.add_column(col)
    for r in READERS:
        before = _layers(record.feeds_before.get(r.name))
        problem = record.problems_before.get(r.name)
        table.add_row(r.label, f"[red]{before}[/]: {problem}" if problem else before,
                      _layers(record.feeds_after.get(r.name)))
    console.print(table)
    written = "; ".join(f"{key} = {value}" + (f" (was {record.before[key]})" if record.before.get(key) is not None
                                              else " (not set before)") for key, value in record.written.items())
    served = "" if record.mode == "as-is" else f"served {_layers(record.served)}, "
    console.print(f"{served}decided by {record.decided_by}: {record.reason}")
    console.print(f"written: {written or 'nothing (the ids unchanged)'}")
    if record.measured:
        measured = Table(title=f"BF16 draft on {record.calibration}, k={record.k}")
        for col in ("candidate", "layers", "acceptance length", "per position", "chains"):
            measured.add_column(col)
        for row in record.measured:
            length = "not measurable" if row.acceptance_length is None else f"{row.acceptance_length:.3f}"
            mark = " [green](served)[/]" if row.indices == record.served else ""
            measured.add_row(row.name + mark, _layers(row.indices), length,
                             " ".join(f"{p:.3f}" for p in row.per_position), str(row.drafts))
        console.print(measured)


def print_candidates(taps: TapsMetrics, label: str) -> None:
    """`validate`: the acceptance under each candidate the calibration set holds, BF16 and quantized (`label`)."""
    if not taps.measured:
        return
    table = Table(title="acceptance under each candidate set of layers (calibration set, k as above)")
    for col in ("candidate", "layers", "fed by", "BF16", label):
        table.add_column(col)
    for row in taps.measured:
        fed = ", ".join(reader(name).label for name in row.fed_by) or "-"
        table.add_row(row.name + (" [green](best)[/]" if row.name == taps.best else ""), _layers(row.indices), fed,
                      number(row.acceptance_length_bf16, ".3f"), number(row.acceptance_length_fp8, ".3f"))
    console.print(table)
