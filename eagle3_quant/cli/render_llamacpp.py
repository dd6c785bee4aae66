"""`eagle3-quant gguf` and `bench --engine llamacpp` on the terminal."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.records.llamacpp_bench import LlamaCppBenchRun, SpeedRatio
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.util.formatting import differences_text, human_bytes, interval, number


def speed_text(ratio: SpeedRatio) -> str:
    return f"{ratio.ratio:.2f}x ({ratio.low:.2f}..{ratio.high:.2f})"


def print_gguf(result) -> None:
    record = result.record
    kinds: dict[str, int] = {}
    for row in record.tensors.values():
        kinds[row.type] = kinds.get(row.type, 0) + 1
    console.print(f"[bold]{record.label}[/] GGUF of {result.manifest.source.path} by {record.made_by}; "
                  f"{record.llama_cpp.get('build_info')} ({record.llama_cpp.get('package') or 'own build'})",
                  markup=True)
    taps = record.taps
    corrected = "" if taps.get("converter_alone") == taps.get("target_layers") else \
        f" (llama.cpp's converter alone would feed {taps.get('converter_alone')})"
    console.print(f"target layers: {taps.get('target_layers')}{corrected}; {taps.get('origin')}", markup=False)
    console.print("tensor types: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())), markup=False)
    for name, why in record.kept.items():
        console.print(f"kept BF16: {name}: {why}", markup=False)
    for line in record.fallbacks:
        console.print(f"fallback: {line}", markup=False)
    if record.carried:
        console.print(f"carried: {record.carried['tensors']} tensors, {record.carried['proof']}", markup=False)
    size = result.file.stat().st_size
    console.print(f"wrote {result.file} ({human_bytes(size)}) in {result.seconds:.1f} s; manifest {MANIFEST_NAME}",
                  markup=False)


def print_llamacpp_bench(result) -> None:
    report: LlamaCppBenchRun = result.record
    engine, prompts = report.engine, report.prompts
    console.print(f"[bold]engine[/] llama.cpp {engine.get('build_info')} ({engine.get('package') or 'own build'}) "
                  f"on {engine.get('device')}, {engine.get('threads')} threads; target {report.target.get('name')}; "
                  f"{prompts.count} prompts from {prompts.source}, {prompts.max_tokens} new tokens, k={report.k}, "
                  "greedy", markup=True)
    table = Table(title="acceptance as llama.cpp counts it (1 + accepted / verify steps)")
    for col in ("draft", "acceptance length", "per position", "verify steps"):
        table.add_column(col)
    for name, row in report.acceptance.items():
        table.add_row(name, number(row.acceptance_length, ".3f"),
                      " ".join(number(x, ".3f") for x in row.per_position), str(row.drafts))
    console.print(table)
    ratio = report.acceptance_ratio
    line = f"acceptance ratio artifact / reference: [bold]{ratio.ratio:.4f}[/] (95% {interval(ratio.low, ratio.high)})"
    predicted = report.predicted
    if predicted is not None and predicted.acceptance_ratio is not None:
        agree = "intervals overlap" if predicted.intervals_overlap else "[red]intervals do not overlap[/]"
        line += (f"; predicted in llama.cpp's arithmetic {predicted.acceptance_ratio:.4f} "
                 f"({interval(*predicted.interval)}): {agree}")
    console.print(line)
    if report.prediction_skipped:
        console.print(f"offline prediction not made: {report.prediction_skipped}", markup=False)
    lossless = report.lossless
    console.print("lossless (greedy output with the draft == without): " + "; ".join(
        f"{name} {match.equal_sequences}/{match.sequences}{differences_text(match)}"
        for name, match in lossless.drafts.items()) + ("" if lossless.lossless else "  [red]NOT lossless[/]"))
    table = Table(title="speed (end to end, interleaved repetitions; 95% paired bootstrap)")
    for col in ("slots", "no draft tok/s", "BF16 draft", "artifact", "artifact / BF16", "decoding: BF16, artifact",
                "prompt ms: none, BF16, artifact"):
        table.add_column(col)
    for speed in report.speed:
        rate, prompt = speed.tokens_per_s, speed.prompt_ms
        table.add_row(str(speed.slots), number(rate.get("none"), ".1f"),
                      f"{number(rate.get('reference'), '.1f')} tok/s, {speed_text(speed.speedup.reference)}",
                      f"{number(rate.get('artifact'), '.1f')} tok/s, {speed_text(speed.speedup.artifact)}",
                      speed_text(speed.artifact_over_reference),
                      f"{speed_text(speed.decode_speedup.reference)}, {speed_text(speed.decode_speedup.artifact)}",
                      ", ".join(number(prompt.get(n), ".0f") for n in ("none", "reference", "artifact")))
    console.print(table)
    table = Table(title="where a step's time goes (ms; verify: llama-bench's batch of k+1 at that depth)")
    for col in ("context", "draft", "tokens/step", "step", "drafting", "verify", "rest", "1 target token",
                "break-even tokens/step"):
        table.add_column(col)
    for part in report.breakdown:
        for name, step in part.drafts.items():
            table.add_row(f"{part.context} ({part.depth})", name, f"{step.tokens_per_step:.2f}",
                          f"{step.step_ms:.1f}", number(step.draft_ms, ".1f"), f"{step.verify_ms:.1f}",
                          number(step.rest_ms, ".1f"), f"{part.token_ms:.2f}", f"{step.break_even_tokens:.2f}")
    console.print(table)
    for name, model in report.speed_model.items():
        inside = "inside" if model.inside_interval else "[red]outside[/]"
        console.print(f"speed model ({name}): {model.tokens_per_step:.2f} tokens a step x one target token / the "
                      f"step's measured parts = {model.predicted:.2f}x; measured decode "
                      f"{speed_text(model.measured)}: {inside} the interval")
    console.print(f"[bold]verdict[/]: {report.verdict}", markup=True)
    console.print(f"wrote {result.path.name} in {report.wall_s:.0f} s", markup=False)
