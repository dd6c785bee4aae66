"""Terminal tables for `cost` and `estimate`. Pure presentation."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.cost import READ_PARTS
from eagle3_quant.util.formatting import human_bytes


def print_cost(report) -> None:
    bf16, written = report.bf16, report.written
    table = Table(title=f"one draft step of {report.source} (one token, batch 1)")
    for col in ("part", "bf16", written.label, "ratio"):
        table.add_column(col, justify="left" if col == "part" else "right")
    for part in READ_PARTS:
        a, b = bf16.bytes_by_part.get(part, 0), written.bytes_by_part.get(part, 0)
        if a or b:
            table.add_row(part + (" (one row)" if part == "embedding" else ""), human_bytes(a), human_bytes(b),
                          f"{b / a:.3f}" if a else "-")
    table.add_row("[bold]weights read per step[/]", human_bytes(bf16.total_bytes), human_bytes(written.total_bytes),
                  f"[bold]{report.ratio:.3f}[/]")
    table.add_row("matmul FLOPs per token", f"{bf16.flops_per_token / 1e9:.4g} G",
                  f"{written.flops_per_token / 1e9:.4g} G", "")
    console.print(table)
    console.print(f"KV cache per token of context: {report.kv_bytes_per_context_token:,} B (BF16); attention "
                  f"FLOPs per token of context: {report.attention_flops_per_context_token:,}")
    if report.profile is not None:
        p, k = report.profile, report.k
        console.print(f"bandwidth floor on {p.device} ({p.hbm_bytes_per_s / 1e12:.1f} TB/s peak HBM): one step "
                      f"{bf16.floor_ms(p):.4g} ms bf16 -> {written.floor_ms(p):.4g} ms; a cycle of {k} steps (fc once) "
                      f"{bf16.floor_ms(p, k):.4g} ms -> {written.floor_ms(p, k):.4g} ms")
    for note in report.notes:
        console.print(f"note: {note}")


def print_estimate(est, written=None) -> None:
    bf16 = f"{est.tokens_per_round_bf16:.3f}" if est.tokens_per_round_bf16 is not None else "not measured"
    rows = [
        (f"tokens per cycle E (k={est.k})", f"{est.tokens_per_round:.3f} (BF16 draft: {bf16})"),
        ("acceptance", est.acceptance_source),
        ("verify (one target forward)", f"{est.verify_ms:.3f} ms (given)") if est.token_ms is None else
        ("verify batch / one target token", f"{est.verify_ms:.3f} ms / {est.token_ms:.3f} ms ({est.device_profile})"),
        ("draft side per cycle", f"{est.draft_ms:.3f} ms: {est.draft_ms_source}"),
        ("cycle", f"{est.cycle_ms:.3f} ms; verify share {est.verify_share:.1%}"),
        ("speedup over no speculation", f"{est.speedup_vs_no_spec:.3f}x"),
        *((("measured", f"{est.measured['speedup']:.3f}x ({est.measured['interval'][0]:.3f}.."
                        f"{est.measured['interval'][1]:.3f}): {est.measured['what']}; the estimate is "
                        f"{'inside' if est.measured['inside_interval'] else 'outside'} its interval"),)
          if est.measured else ()),
        ("speedup over the BF16 draft", f"{est.speedup_vs_bf16_draft:.4f}x"
         if est.speedup_vs_bf16_draft is not None else "not measured (no BF16 acceptance or draft time)"),
    ]
    table = Table(title="speedup ESTIMATE (cycle model from measured acceptance; not an engine measurement)",
                  show_header=False)
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", value)
    console.print(table)
    if written is not None:
        console.print(f"wrote {written} (the model card shows it)")
