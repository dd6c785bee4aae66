"""`eagle3-quant bench` on the terminal: vLLM's own acceptance per draft, the ratio, losslessness, the prediction."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.records.bench_run import BenchRun, Speed
from eagle3_quant.records.validation_report import REPORT_NAME
from eagle3_quant.util.formatting import differences_text, engine_op, interval, number


def _interval(ends: tuple | None) -> str:
    return "-" if ends is None else interval(*ends)


def speed_line(speed: Speed) -> str:
    """tokens/s and speedup over no draft on a GPU engine; on a CPU one, why there are none."""
    if not speed.tokens_per_s:     # a CPU engine: one unwarmed pass per draft is no speed measurement
        return f"tokens/s and speedup: {speed.note or 'not measured'}"
    return ("tokens/s: " + ", ".join(f"{n} {number(v, '.1f')}" for n, v in speed.tokens_per_s.items())
            + "; speedup over no draft: " + ", ".join(f"{n} {number(v, '.2f')}x"
                                                     for n, v in (speed.speedup_over_no_draft or {}).items()))


def print_bench(result) -> None:
    report: BenchRun = result.record
    engine, prompts = report.engine, report.prompts
    console.print(f"[bold]engine[/] {engine.distribution} {engine.version} (torch {engine.torch}) on "
                  f"{engine.device}, {engine.dtype}, {engine.ran.describe()}; {prompts.count} prompts from "
                  f"{prompts.source}, {prompts.max_tokens} new tokens, k={report.k}, "
                  "greedy")
    if report.target_precision is not None:
        console.print(f"[bold]target[/] {report.target}: {report.target_precision.describe()}", markup=True)
    if report.prediction_skipped:
        console.print(f"offline prediction not made: {report.prediction_skipped}", markup=False)
    predicted = report.predicted
    table = Table(title="acceptance as vLLM counts it (1 + accepted / drafts)")
    for col in ("draft", "acceptance length", "per position", "drafts", "predicted (validate)"):
        table.add_column(col)
    guesses = predicted.acceptance_length.to_dict() if predicted else {}
    for name, row in report.acceptance.items():
        table.add_row(name, number(row.acceptance_length, ".3f"),
                      " ".join(number(x, ".3f") for x in row.per_position), str(row.drafts),
                      number(guesses.get(name), ".3f"))
    console.print(table)
    ratio = report.acceptance_ratio
    line = (f"acceptance ratio artifact / reference: [bold]{ratio.ratio:.4f}[/] "
            f"(95% {_interval((ratio.low, ratio.high))})")
    if predicted is not None and predicted.acceptance_ratio is not None:
        agree = "intervals overlap" if predicted.intervals_overlap else "[red]intervals do not overlap[/]"
        line += (f"; predicted {predicted.acceptance_ratio:.4f} ({_interval(predicted.interval)}, "
                 f"{predicted.compute_dtype}), engine - predicted {predicted.engine_minus_predicted:+.4f}: "
                 f"{agree}")
    console.print(line)
    walk = predicted.engine_walk if predicted else None
    if walk is not None and walk.acceptance_ratio is not None:
        console.print(f"predicted on the chains vLLM's decoding walk drafts: {walk.acceptance_ratio:.4f} "
                      f"({_interval(walk.interval)})")
    taps = report.serve_taps
    if taps:
        shipped, served, gain = taps.reference_as_shipped, taps.reference_as_served, taps.gain
        console.print(f"served as trained (--serve-taps wrote {taps.written}): the BF16 draft as shipped "
                      f"{shipped.acceptance_length:.3f}, with the artifact's ids {served.acceptance_length:.3f}"
                      f" = x{gain.ratio:.3f} (95% {_interval((gain.low, gain.high))}); the ratio above compares the "
                      "artifact with the BF16 draft given the same ids")
    lossless = report.lossless
    console.print("lossless (greedy output with the draft == without): " + "; ".join(
        f"{name} {match.equal_sequences}/{match.sequences}{differences_text(match)}"
        for name, match in lossless.drafts.items()) + ("" if lossless.lossless else "  [red]NOT lossless[/]"))
    console.print(speed_line(report.speed), markup=False)
    for op, row in report.substituted_ops.items():
        checked = "" if row.compared_calls is None else \
            f"; {row.compared_calls} calls compared with the original, max |diff| {row.max_abs_diff:.3g}"
        console.print(f"substituted: {engine_op(op)} ({row.why}): {row.with_}, called {row.calls} times{checked}",
                      markup=False)
    for kernel, row in report.registered_kernels.items():
        console.print(f"registered: {kernel} as a {row.kernel_type} kernel for vLLM's {row.platform} platform "
                      f"({row.why})", markup=False)
    sweep = report.concurrency_sweep
    if sweep.status == "skipped":
        console.print(f"concurrency sweep: skipped: {sweep.reason}")
    elif sweep.status == "measured":
        table = Table(title=f"throughput and TPOT, {sweep.input_len} in / {sweep.output_len} out")
        for col in ("concurrency", "no draft tok/s", "BF16 tok/s (x)", "OUT tok/s (x)", "TPOT ms none/BF16/OUT"):
            table.add_column(col)
        for point in sweep.points or ():
            reference, artifact = point.drafts.reference, point.drafts.artifact
            table.add_row(str(point.concurrency), number(point.none.output_tokens_per_s, ".1f"),
                          f"{number(reference.output_tokens_per_s, '.1f')} ({number(reference.speedup, '.2f')})",
                          f"{number(artifact.output_tokens_per_s, '.1f')} ({number(artifact.speedup, '.2f')})",
                          "/".join(number(rate.tpot_ms, ".2f") for rate in (point.none, reference, artifact)))
        console.print(table)
    where = f"and OUT/{REPORT_NAME} (engine_run)" if result.validation_note is None else \
        f"({REPORT_NAME} not updated: {result.validation_note})"
    console.print(f"wrote {result.path.name} {where} in {report.wall_s:.0f} s")
