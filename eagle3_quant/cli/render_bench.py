"""`eagle3-quant bench` on the terminal: vLLM's own acceptance per draft, the ratio, losslessness, the prediction."""

from __future__ import annotations

from rich.table import Table

from eagle3_quant.cli.render import console
from eagle3_quant.util.formatting import interval, number


def _interval(row: dict | None) -> str:
    if not row or row.get("interval") is None:
        return "-"
    return interval(*row["interval"])


def speed_line(speed: dict) -> str:
    """tokens/s and speedup over no draft on a GPU engine; on a CPU one, why there are none."""
    if not speed.get("tokens_per_s"):     # a CPU engine: one unwarmed pass per draft is no speed measurement
        return f"tokens/s and speedup: {speed.get('note') or 'not measured'}"
    return ("tokens/s: " + ", ".join(f"{n} {number(v, '.1f')}" for n, v in speed["tokens_per_s"].items())
            + "; speedup over no draft: " + ", ".join(f"{n} {number(v, '.2f')}x"
                                                     for n, v in speed["speedup_over_no_draft"].items()))


def print_bench(result) -> None:
    report = result.report
    engine = report["engine"]
    console.print(f"[bold]engine[/] {engine['distribution']} {engine['version']} (torch {engine['torch']}) on "
                  f"{engine['device']}, {engine['dtype']}; {report['prompts']['count']} prompts from "
                  f"{report['prompts']['source']}, {report['prompts']['max_tokens']} new tokens, k={report['k']}, "
                  "greedy")
    predicted = report.get("predicted") or {}
    table = Table(title="acceptance as vLLM counts it (1 + accepted / drafts)")
    for col in ("draft", "acceptance length", "per position", "drafts", "predicted (validate)"):
        table.add_column(col)
    for name in ("reference", "artifact"):
        row = report["acceptance"][name]
        table.add_row(name, number(row["acceptance_length"], ".3f"),
                      " ".join(number(x, ".3f") for x in row["per_position"]), str(row["drafts"]),
                      number((predicted.get("acceptance_length") or {}).get(name), ".3f"))
    console.print(table)
    ratio = report["acceptance_ratio"]
    line = f"acceptance ratio artifact / reference: [bold]{ratio['ratio']:.4f}[/] (95% {_interval(ratio)})"
    if predicted.get("acceptance_ratio") is not None:
        agree = "intervals overlap" if predicted["intervals_overlap"] else "[red]intervals do not overlap[/]"
        line += (f"; predicted {predicted['acceptance_ratio']:.4f} ({_interval(predicted)}, "
                 f"{predicted['compute_dtype']}), engine - predicted {predicted['engine_minus_predicted']:+.4f}: "
                 f"{agree}")
    console.print(line)
    walk = predicted.get("engine_walk") or {}
    if walk.get("acceptance_ratio") is not None:
        console.print(f"predicted on the chains vLLM's decoding walk drafts: {walk['acceptance_ratio']:.4f} "
                      f"({_interval(walk)})")
    taps = report.get("serve_taps")
    if taps:
        shipped, served, gain = taps["reference_as_shipped"], taps["reference_as_served"], taps["gain"]
        console.print(f"served as trained (--serve-taps wrote {taps['written']}): the BF16 draft as shipped "
                      f"{shipped['acceptance_length']:.3f}, with the artifact's ids {served['acceptance_length']:.3f}"
                      f" = x{gain['ratio']:.3f} (95% {_interval(gain)}); the ratio above compares the artifact with "
                      "the BF16 draft given the same ids")
    lossless = report["lossless"]
    console.print("lossless (greedy output with the draft == without): " + "; ".join(
        f"{name} {lossless[name]['equal_sequences']}/{lossless[name]['sequences']}" for name in ("reference",
                                                                                                 "artifact"))
        + ("" if lossless["lossless"] else "  [red]NOT lossless[/]"))
    console.print(speed_line(report["speed"]), markup=False)
    for op, row in report["substituted_ops"].items():
        console.print(f"substituted: _C.{op} ({row['why']}): {row['with']}, called {row['calls']} times")
    sweep = report["concurrency_sweep"]
    if sweep["status"] == "skipped":
        console.print(f"concurrency sweep: skipped: {sweep['reason']}")
    elif sweep["status"] == "measured":
        table = Table(title=f"throughput and TPOT, {sweep['input_len']} in / {sweep['output_len']} out")
        for col in ("concurrency", "no draft tok/s", "BF16 tok/s (x)", "FP8 tok/s (x)", "TPOT ms none/BF16/FP8"):
            table.add_column(col)
        for row in sweep["points"]:
            table.add_row(str(row["concurrency"]), number(row["none"]["output_tokens_per_s"], ".1f"),
                          f"{number(row['reference']['output_tokens_per_s'], '.1f')} "
                          f"({number(row['reference']['speedup'], '.2f')})",
                          f"{number(row['artifact']['output_tokens_per_s'], '.1f')} "
                          f"({number(row['artifact']['speedup'], '.2f')})",
                          "/".join(number(row[n]["tpot_ms"], ".2f") for n in ("none", "reference", "artifact")))
        console.print(table)
    where = "and OUT/validation.json (engine_run)" if result.validation_note is None else \
        f"(validation.json not updated: {result.validation_note})"
    console.print(f"wrote {result.path.name} {where} in {report['wall_s']:.0f} s")
