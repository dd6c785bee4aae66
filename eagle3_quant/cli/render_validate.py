"""Terminal tables for a ValidationReport."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.records.validation_report import REPORT_NAME, TapsMetrics
from eagle3_quant.validate.kernel_evidence import KernelEvidence

STATUS_STYLE = {"passed": "[green]passed[/]", "failed": "[red]FAILED[/]", "skipped": "[yellow]skipped[/]"}


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, list | tuple):
        return ", ".join(_fmt(v, digits) for v in value)
    return str(value)


def gates_line(gates: dict, source: dict) -> str:
    """"min_top1_agreement 0.9 (default for w_mxfp6_e2m3_a_mxfp6_e2m3), ..." - which gates applied and why."""
    return ", ".join(f"{name} {value} ({source.get(name, 'set')})" for name, value in gates.items())


def kernel_lines(kernel: dict) -> list[str]:
    """The kernel check's lines under the table: the profiler's kernels by family and count (the full names stay
    in validation.json), then the timing."""
    lines = []
    if kernel.get("kernel_counts"):
        families = KernelEvidence.read([], kernel["kernel_counts"]).describe_kernels()
        lines.append(f"kernels by family (full names in {REPORT_NAME}): {families}")
    if kernel.get("timing"):
        from eagle3_quant.validate.linear_timing import timing_lines

        lines += timing_lines(kernel["timing"])
    return lines


def print_validation(report) -> None:
    table = Table(title=f"validation of {report.artifact}")
    for col in ("check", "status", "detail"):
        table.add_column(col)
    for check in report.checks:
        table.add_row(check.name, STATUS_STYLE[check.status], check.detail)
    console.print(table)
    if report.gate_source:
        console.print("gates: " + gates_line(report.gates.to_dict(), report.gate_source))
    m = report.metrics
    if m.acceptance_length_bf16 is not None:
        metrics = Table(title=f"fidelity on calibration data (k={m.k}, {m.drafts} chains, {m.positions} positions)")
        for col in ("metric", "BF16", report.label, f"{report.label} / BF16"):
            metrics.add_column(col)
        interval = m.acceptance_ratio_interval
        ratio = _fmt(m.acceptance_ratio) + (f" [{_fmt(interval)}]" if interval else "")
        metrics.add_row("acceptance length", _fmt(m.acceptance_length_bf16, 3), _fmt(m.acceptance_length_fp8, 3),
                        ratio)
        metrics.add_row("per-position acceptance", _fmt(m.per_position_acceptance_bf16, 3),
                        _fmt(m.per_position_acceptance_fp8, 3), "")
        walk = m.engine_walk
        if walk:
            walk_ratio = _fmt(walk.acceptance_ratio) + (
                f" [{_fmt(walk.acceptance_ratio_interval)}]" if walk.acceptance_ratio_interval else "")
            metrics.add_row(f"acceptance length, vLLM's walk ({walk.drafts_bf16} / {walk.drafts_fp8} drafts)",
                            _fmt(walk.acceptance_length_bf16, 3), _fmt(walk.acceptance_length_fp8, 3), walk_ratio)
        metrics.add_row("top-1 agreement (step 0)", "", "", _fmt(m.top1_agreement))
        metrics.add_row(f"KL(BF16 || {report.label}) per token", "", "", _fmt(m.kl, 6))
        console.print(metrics)
        if m.prediction:
            console.print(f"predicted with {m.prediction_text} ({m.prediction.dtype_reason}) on {m.device}")
    if report.layers:
        layers = Table(title=f"weight SQNR (dequantized {report.label} vs BF16)")
        for col in ("module", "shape", "SQNR dB"):
            layers.add_column(col)
        for layer in report.layers:
            layers.add_row(layer["module"], "x".join(map(str, layer["shape"])), _fmt(layer["sqnr_db"], 2))
        console.print(layers)
    for line in kernel_lines(report.kernel):
        console.print(line, markup=False)
    from eagle3_quant.cli.render_taps import print_candidates

    taps = m.taps or TapsMetrics()
    print_candidates(taps, report.label)
    for note in taps.notes:
        console.print(f"[yellow]note:[/] {note}")
    verdict = "[green]PASSED[/]" if report.passed else \
        f"[red]FAILED[/] ({', '.join(c.name for c in report.failed_checks)})"
    skipped = [c.name for c in report.checks if c.status == "skipped"]
    console.print(f"validation {verdict}; report {report.report_path}"
                  + (f"; not run: {', '.join(skipped)}" if skipped else ""))
