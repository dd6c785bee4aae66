"""The benchmark's printed table and its targets."""

from __future__ import annotations

from typing import Any

from eagle3_quant.util.formatting import human_bytes

GOAL_SHAPE = "llama3-8b"      # issue 23: quantize of an 8B-shaped draft at <= 0.5x Quark's own script
TARGETS = {  # name -> upper limit
    "quantize wall / bare Quark": 1.25,
    f"quantize wall / Quark's script ({GOAL_SHAPE})": 0.5,
    "quantize peak RSS / bare Quark": 1.10,
    "--help wall s": 1.0,
    "inspect wall s (largest shape)": 2.0,
}


def target_values(results: dict[str, Any]) -> dict[str, float]:
    """Worst case over the shapes measured (tiny excluded: its wall time is all imports)."""
    shapes = {k: v for k, v in results["shapes"].items() if k != "tiny"} or results["shapes"]
    values: dict[str, float] = {}
    if shapes:
        values["quantize wall / bare Quark"] = max(s["ratio"]["wall"] for s in shapes.values())
        values["quantize peak RSS / bare Quark"] = max(s["ratio"]["peak_rss"] for s in shapes.values())
    if GOAL_SHAPE in results["shapes"]:
        values[f"quantize wall / Quark's script ({GOAL_SHAPE})"] = results["shapes"][GOAL_SHAPE]["ratio"]["wall"]
    cli = results.get("cli", {})
    if "help" in cli:
        values["--help wall s"] = cli["help"]["median_s"]
    if "inspect" in cli:
        values["inspect wall s (largest shape)"] = cli["inspect"]["median_s"]
    return values


def check_targets(results: dict[str, Any]) -> dict[str, dict]:
    return {name: {"value": round(value, 4), "limit": TARGETS[name], "met": value <= TARGETS[name]}
            for name, value in target_values(results).items()}


def format_table(results: dict[str, Any]) -> str:
    lines = [f"{'shape':<11} {'size':>9}  {'contender':<13} {'wall s':>8} {'peak RSS':>10} "
             f"{'wall x Quark':>12} {'RSS x Quark':>11}  (medians; paired = median of per-repeat ratios)"]
    for shape, entry in results["shapes"].items():
        base = entry["median"]["bare Quark"]
        size = human_bytes(entry["source"]["bytes"])
        for i, (name, med) in enumerate(entry["median"].items()):
            wall, rss = med["wall_s"] / base["wall_s"], med["peak_rss_bytes"] / base["peak_rss_bytes"]
            paired = f"  paired {entry['ratio']['wall_paired_median']:.2f}" if name == "eagle3-quant" else ""
            lines.append(f"{shape if i == 0 else '':<11} {size if i == 0 else '':>9}  {name:<13} {med['wall_s']:>8.2f} "
                         f"{human_bytes(med['peak_rss_bytes']):>10} {wall:>12.2f} {rss:>11.2f}{paired}")
    return "\n".join(lines)


def format_breakdowns(results: dict[str, Any]) -> str:
    lines = []
    for shape, entry in results["shapes"].items():
        stages = entry.get("breakdown")
        if stages:
            parts = ", ".join(f"{k} {v:.2f}" for k, v in stages.items())
            lines.append(f"{shape}: {parts}")
    return "\n".join(lines)


def format_extras(results: dict[str, Any]) -> str:
    lines = []
    cli = results.get("cli", {})
    if "help" in cli:
        runs = len(cli["help"]["runs_s"])
        lines.append(f"eagle3-quant --help: median {cli['help']['median_s']:.3f} s over {runs} runs")
    if "inspect" in cli:
        ins = cli["inspect"]
        lines.append(f"eagle3-quant inspect ({ins['shape']}): median {ins['median_s']:.3f} s over "
                     f"{len(ins['runs_s'])} runs; modules imported: {ins['imports']}")
    if "first_run" in results:
        from benchmarks.first_run import format_first_run

        lines.append(format_first_run(results["first_run"]))
    tp = results.get("throughput")
    if isinstance(tp, dict):
        lines.append(f"draft forward on CPU ({tp['shape']}, batch {tp['batch']} x {tp['tokens']} tokens, "
                     f"{tp['threads']} threads): BF16 {tp['bf16']['tokens_per_s']:.0f} tokens/s, "
                     f"FP8 {tp['fp8']['tokens_per_s']:.0f} tokens/s (x{tp['fp8_over_bf16']:.2f})")
    elif tp:
        lines.append(f"draft forward throughput: {tp}")
    for run in results.get("calib_capture", []):
        lines.append(format_capture(run))
    for run in results.get("calib_backends", {}).values():
        lines.append(format_backends(run))
    if "calib_share" in results:
        from benchmarks.calib_share import format_share

        lines.append(format_share(results["calib_share"]))
    for name, t in results.get("targets", {}).items():
        lines.append(f"target {name} <= {t['limit']}: {t['value']:.3f} -> {'met' if t['met'] else 'NOT met'}")
    return "\n".join(lines)


def format_capture(run: dict[str, Any]) -> str:
    """One line: calibrate's capture beside a bare transformers run of the same prompts and tokens (goal: capture
    seconds / bare seconds at most `goal`)."""
    t = run["target"]
    ratio = run["capture_over_bare"]
    verdict = "met" if ratio is not None and ratio <= run["goal"] else "NOT met"
    return (f"calibrate capture ({run['samples']} prompts x {run['seq_len']} tokens, +{run['generate_tokens']} "
            f"generated; {t['layers']}-layer hidden-{t['hidden']} target, {run['device']}, batch {run['batch_size']}, "
            f"{run['torch_threads']} threads): {run['tokens_per_s']:.0f} tokens/s vs bare transformers "
            f"{run['bare_tokens_per_s']:.0f} tokens/s (batch 1: {run['bare_batch1_tokens_per_s']:.0f}); time "
            f"x{ratio:.2f} of bare (goal <= {run['goal']}: {verdict})"
            + (f"; rounds x{spread['min']:.2f}..x{spread['max']:.2f}" if (spread := run.get("ratio_spread")) else "")
            + f"; calibrate end to end {run['calibrate_tokens_per_s']:.0f} tokens/s")


def format_backends(run: dict[str, Any]) -> str:
    """One line: calibrate's tokens/s with the target in transformers and in vLLM's engine, and how far apart."""
    if "skipped" in run:
        return f"calibrate backends: skipped ({run['skipped']})"

    def side(name: str) -> str:
        got = run[name]
        if "skipped" in got:
            return f"{name} skipped ({got['skipped']})"
        engine = f" ({got['engine']})" if "engine" in got else ""
        return (f"{name}{engine} {got['tokens_per_s']:.0f} tokens/s ({got['end_to_end_tokens_per_s']:.0f} end to "
                f"end, load included)")

    diff = run.get("difference")
    differ = f"differ in {(diff or {}).get('samples_differing', 'some')} samples (states compared up to where)"
    apart = (f"; tokens {'equal' if diff['tokens_equal'] else differ}, max |state diff| "
             f"{diff['max_abs_state_diff']:.2g}" if diff else "")
    dump = run.get("from_dump")
    imported = (f"; --from-dump of vLLM's export ({dump['export_seconds']:.0f} s): {dump['import_tokens_per_s']:.0f} "
                f"tokens/s, max |state diff| {dump['difference_from_vllm_backend']['max_abs_state_diff']:.2g}"
                if dump else "")
    return (f"calibrate backends ({run.get('pair', 'tiny')} pair, {run['samples']} prompts, <= {run['seq_len']} "
            f"tokens with {run['generate_tokens']} generated, {run['dtype']}): {side('transformers')}, "
            f"{side('vllm')}{apart}{imported}")
