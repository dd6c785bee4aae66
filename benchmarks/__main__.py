"""`python -m benchmarks` (`make bench`): eagle3-quant quantize vs Quark's bare call vs a file copy, side by side.

Each contender runs in a fresh child process; wall time and that child's peak RSS (wait4 ru_maxrss) are
recorded; contenders alternate order between repeats; medians are reported. Drafts are built once into
the cache folder and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import calib_share, first_run
from benchmarks.auto_choice import bench_auto_choice, format_auto_choice
from benchmarks.contenders import (
    CONTENDERS,
    INSPECT_IMPORTS_CODE,
    PYTHON,
    REPO,
    breakdown_command,
    contender_command,
    eagle3_quant_bin,
    parse_last_json,
    quark_exclude_list,
    throughput_command,
)
from benchmarks.drafts import BENCH_SHAPES, DEFAULT_CACHE, cached_draft, folder_bytes
from benchmarks.measure import drop_dirty_pages, median, rss_method, run_measured
from benchmarks.report import check_targets, format_breakdowns, format_extras, format_table
from benchmarks.step_bytes import format_step_bytes, step_bytes
from eagle3_quant.records.manifest import MANIFEST_NAME

DEFAULT_OUT = REPO / "benchmarks" / "results" / "latest.json"
CLI_REPEAT = 5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="tiny,llama3-8b,kimi-k2.5",
                        help=f"comma-separated, from: {', '.join(BENCH_SHAPES)}")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs per contender (default: 3 for tiny, 5 for llama3-8b, 3 for kimi-k2.5)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where drafts are built and kept")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the per-stage timing run")
    parser.add_argument("--no-extras", action="store_true",
                        help="skip --help/inspect timing, the quark.torch import timing and throughput")
    parser.add_argument("--no-engine", action="store_true",
                        help="skip the extra that runs vLLM's engine (calibrate --backend vllm beside transformers)")
    args = parser.parse_args(argv)
    args.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in args.shapes if s not in BENCH_SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; valid: {', '.join(BENCH_SHAPES)}")
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def machine() -> dict[str, Any]:
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
    versions = {}
    for name in ("eagle3-quant", "amd-quark", "torch", "safetensors"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {"cpus": os.cpu_count(), "memory_gb": round(int(meminfo["MemTotal"].split()[0]) / 1e6, 1),
            "platform": platform.platform(), "python": platform.python_version(), "versions": versions,
            "peak_rss_from": rss_method(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def bench_shape(name: str, repeat: int, cache: Path, breakdown: bool) -> dict[str, Any]:
    src = cached_draft(BENCH_SHAPES[name], cache)
    exclude = quark_exclude_list(src)
    for file in sorted(src.glob("*.safetensors")):   # warm the page cache for every contender alike
        with file.open("rb") as fh:
            while fh.read(64 << 20):
                pass
    runs: dict[str, list[dict]] = {c: [] for c in CONTENDERS}
    work = cache / "runs"
    for i in range(repeat):
        order = CONTENDERS if i % 2 == 0 else tuple(reversed(CONTENDERS))
        for contender in order:
            out = work / f"{name}-{contender.replace(' ', '-')}"
            shutil.rmtree(out, ignore_errors=True)
            drop_dirty_pages()
            measured = run_measured(contender_command(contender, src, out, exclude), cwd=REPO)
            run = measured.to_dict()
            if contender == "bare Quark":    # its own split: import quark.torch, quark
                run["stages"] = parse_last_json(measured.stdout)
            runs[contender].append(run)
            print(f"  {name} run {i + 1}/{repeat} {contender:<13} {measured.wall_s:8.2f} s "
                  f"{measured.peak_rss_bytes / 1e9:6.2f} GB", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    med = {c: {"wall_s": round(median([r["wall_s"] for r in runs[c]]), 4),
               "peak_rss_bytes": int(median([r["peak_rss_bytes"] for r in runs[c]]))} for c in CONTENDERS}
    entry: dict[str, Any] = {
        "source": {"path": str(src), "bytes": folder_bytes(src), "weight_files": len(list(src.glob("*.safetensors"))),
                   "quark_exclude": exclude},
        "repeat": repeat, "runs": runs, "median": med,
        "ratio": {"wall": round(med["eagle3-quant"]["wall_s"] / med["bare Quark"]["wall_s"], 4),
                  "peak_rss": round(med["eagle3-quant"]["peak_rss_bytes"] / med["bare Quark"]["peak_rss_bytes"], 4),
                  # each repeat's two runs are back to back, so their ratio shares the machine's load of the moment
                  "wall_paired_median": round(median([a["wall_s"] / b["wall_s"] for a, b in
                                                      zip(runs["eagle3-quant"], runs["bare Quark"], strict=True)]), 4)},
    }
    if breakdown:   # its output is kept: the throughput run loads it
        out = fp8_folder(name, cache)
        shutil.rmtree(out, ignore_errors=True)
        drop_dirty_pages()
        entry["breakdown"] = parse_last_json(run_measured(breakdown_command(src, out), cwd=REPO).stdout)
    return entry


def fp8_folder(name: str, cache: Path) -> Path:
    return cache / "runs" / f"{name}-fp8"


def bench_cli(largest: Path, repeat: int) -> dict[str, Any]:
    tool = eagle3_quant_bin()
    help_runs = [run_measured([tool, "--help"]).wall_s for _ in range(repeat)]
    inspect_runs = [run_measured([tool, "inspect", str(largest)]).wall_s for _ in range(repeat)]
    imports = run_measured([PYTHON, "-c", INSPECT_IMPORTS_CODE, str(largest)]).stdout.strip().splitlines()[-1]
    return {"help": {"runs_s": [round(x, 4) for x in help_runs], "median_s": round(median(help_runs), 4)},
            "inspect": {"shape": largest.name, "runs_s": [round(x, 4) for x in inspect_runs],
                        "median_s": round(median(inspect_runs), 4), "imports": imports}}


def bench_throughput(shapes: list[str], cache: Path) -> dict[str, Any] | str:
    """BF16 vs FP8 forward on the Llama-3.1-8B-shaped draft (the Kimi one is too slow for CPU validation)."""
    name = next((s for s in ("llama3-8b", "tiny") if s in shapes), None)
    fp8 = fp8_folder(name, cache) if name else None
    if fp8 is None or not (fp8 / MANIFEST_NAME).is_file():
        return "not measured: needs the llama3-8b or tiny shape with its breakdown run (the FP8 draft it writes)"
    src = cached_draft(BENCH_SHAPES[name], cache)
    return {"shape": name, **parse_last_json(run_measured(throughput_command(src, fp8), cwd=REPO).stdout)}


def bench_calib_capture() -> list[dict[str, Any]]:
    """`calibrate`'s capture beside a bare transformers run on the same prompts, without and with generated tokens."""
    runs = []
    for generate in (0, 64):
        command = [PYTHON, "-m", "benchmarks.calib_capture", "--generate-tokens", str(generate),
                   *(["--samples", "32", "--seq-len", "128"] if generate else [])]
        runs.append(parse_last_json(run_measured(command, cwd=REPO).stdout))
    return runs


def bench_calib_backends() -> dict[str, Any]:
    """Calibration tokens/s with the target in transformers and in vLLM's engine, on the tiny pair and, once
    `make real-pair` has prepared it, on the real pair (SmolLM2-135M-Instruct, bf16)."""
    from fixtures.real_pair.target import DONE, cache_dir

    results = {"tiny": parse_last_json(run_measured([PYTHON, "-m", "benchmarks.calib_backends"], cwd=REPO).stdout)}
    if (cache_dir() / "target" / DONE).is_file():
        command = [PYTHON, "-m", "benchmarks.calib_backends", "--pair", "real", "--dtype", "bfloat16",
                   "--seq-len", "384"]
        results["real"] = parse_last_json(run_measured(command, cwd=REPO).stdout)
    else:
        results["real"] = {"skipped": "the real pair is not prepared: make real-pair"}
    return results


def bench_engine_gemm() -> dict[str, Any]:
    """An FP8 draft against its BF16 original in vLLM's CPU engine, torch's _scaled_mm against the fp32 GEMM the
    engine child uses (`benchmarks/engine_gemm.py`), once the real pair is prepared."""
    from fixtures.real_pair.target import DONE, cache_dir

    if not (cache_dir() / "target" / DONE).is_file():
        return {"skipped": "the real pair is not prepared: make real-pair"}
    return parse_last_json(run_measured([PYTHON, "-m", "benchmarks.engine_gemm"], cwd=REPO).stdout)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {"command": [Path(sys.argv[0]).name, *sys.argv[1:]] if argv is None else argv,
                               "machine": machine(), "note": "medians over alternating repeats; shared machine",
                               "shapes": {}, "step_bytes": step_bytes()}
    print(format_step_bytes(results["step_bytes"]), end="\n\n", flush=True)
    for name in args.shapes:
        repeat = args.repeat or BENCH_SHAPES[name].repeat
        print(f"{name}: {repeat} run(s) per contender", flush=True)
        results["shapes"][name] = bench_shape(name, repeat, args.cache, not args.no_breakdown)
    if not args.no_extras:
        largest_name = [s for s in BENCH_SHAPES if s in args.shapes][-1]
        largest = cached_draft(BENCH_SHAPES[largest_name], args.cache)
        results["cli"] = bench_cli(largest, CLI_REPEAT)
        results["first_run"] = first_run.measure(args.repeat or 3)
        results["throughput"] = bench_throughput(args.shapes, args.cache)
        results["calib_capture"] = bench_calib_capture()
        if not args.no_engine:
            results["calib_backends"] = bench_calib_backends()
            results["engine_gemm"] = bench_engine_gemm()
        results["calib_share"] = calib_share.measure(32, 96, 32, 2)
        results["auto_choice"] = bench_auto_choice(args.cache)
    results["targets"] = check_targets(results)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(format_table(results))
    print()
    print("where eagle3-quant's time goes (s, one run):")
    print(format_breakdowns(results))
    print()
    print(format_extras(results))
    if "auto_choice" in results:
        print(format_auto_choice(results["auto_choice"]))
    print(f"\nwrote {args.out}")
    return results


if __name__ == "__main__":
    main()
