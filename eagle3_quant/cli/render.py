"""Rich tables for the terminal. Pure presentation: takes result objects, prints them."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from eagle3_quant.cli.data_console import data_console
from eagle3_quant.records.validation_report import prediction_text
from eagle3_quant.schemes import scheme_label
from eagle3_quant.util.formatting import human_bytes

console = data_console()


def print_inspection(report) -> None:
    summary = Table.grid(padding=(0, 2))
    rows = [
        ("source", report.source),
        ("format", f"{report.format} ({report.architecture})"),
        ("vLLM family", report.family),
        ("hidden / intermediate", f"{report.hidden_size} / {report.intermediate_size}"),
        ("attention heads", report.heads),
        ("target hidden", str(report.target_hidden_size)),
        ("vocab target / draft", f"{report.target_vocab} / {report.draft_vocab}"),
        ("aux layer ids", str(report.aux_layer_ids)),
        ("verifier", report.verifier or "-"),
        ("weights", f"{human_bytes(report.source_bytes)} in {report.weight_files} file(s)"),
        ("parameters", ", ".join(f"{k} {v:,}" for k, v in report.params_by_part.items())),
        ("optional parts", ", ".join(report.optional_parts) or "-"),
        ("extra tensors (kept)", ", ".join(report.extra_tensors) or "-"),
        ("scheme", f"{report.scheme}: {report.scheme_summary}"),
        ("estimated output", human_bytes(report.estimated_output_bytes)),
        ("vLLM exclude", ", ".join(report.vllm_exclude)),
        *((f"served by {engine}", "yes" if why is None else f"[red]no[/]: {escape(why)}")
          for engine, why in report.engines.items()),
        ("quantize writes it for", ", ".join(report.artifact_engines["serves"]) or "[red]no engine[/]: refused"),
    ]
    for key, value in rows:
        summary.add_row(f"[bold]{key}[/]", value)
    console.print(summary)
    table = Table(title="linears")
    for col in ("module", "shape", "dtype", "action", "why"):
        table.add_column(col)
    label = scheme_label(report.scheme)
    for row in report.linears:
        table.add_row(row.module, "x".join(map(str, row.shape)), row.dtype,
                      f"[green]{label}[/]" if row.quantize else "BF16 (kept)", row.reason)
    console.print(table)


def print_loader_check(check, label: str, depth: int | None = None) -> None:
    """vLLM's loading rules replayed: per runtime layer, what vLLM loads (`label`, the scheme's, or BF16)."""
    depth = depth if depth is not None else check.depths[-2 if len(check.depths) > 1 else 0]
    table = Table(title=f"vLLM loader check (rules replayed for target depths {', '.join(map(str, check.depths))}; "
                        f"names shown for T={depth})")
    for col in ("runtime layer", "vLLM loads", "scheme", "intended", "ok"):
        table.add_column(col)
    for layer in check.layers:
        if layer.depth != depth:
            continue
        loads = "refuses" if layer.quantized is None else (label if layer.quantized else "BF16")
        intended = "-" if layer.intended is None else (label if layer.intended else "BF16")
        table.add_row(layer.runtime_name, loads, layer.scheme or "-", intended,
                      "[green]yes[/]" if layer.ok else f"[red]NO[/] {layer.problem}")
    console.print(table)
    for problem in check.config_problems:
        console.print(f"[red]config:[/] {problem}")


def print_sensitivity(report) -> None:
    table = Table(title=f"sensitivity of {report.source} to {report.scheme} ({report.samples} samples, "
                        f"{report.positions} positions, first draft step; baseline top-1 = target's next token "
                        f"{report.baseline_target_agreement:.2%})")
    for col in ("rank", "layer group", "default plan", "top-1 agreement", "disagreement", "KL (nats)",
                "target agreement"):
        table.add_column(col, justify="right" if col not in ("layer group", "default plan") else "left")
    rows = [(str(i), g) for i, g in enumerate(report.groups, 1)] + [("all", report.default_plan)]
    label = scheme_label(report.scheme)
    for rank, g in rows:
        table.add_row(rank, g.group, label if g.default_quantized else "BF16", f"{1 - g.disagreement:.2%}",
                      f"{g.disagreement:.2%}", f"{g.kl:.3g}",
                      f"{g.target_agreement:.2%} ({g.target_agreement - report.baseline_target_agreement:+.2%})")
    console.print(table)
    console.print(f"computed with {prediction_text(report.prediction)} ({report.prediction['dtype_reason']})")
    console.print("--auto-exclude T keeps BF16 every group whose disagreement is above T (a fraction, e.g. 0.01).")
