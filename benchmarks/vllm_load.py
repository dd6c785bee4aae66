"""`python -m benchmarks.vllm_load` (`make bench-vllm`): what the vllm_load check adds to `eagle3-quant validate`.

Quantizes the tiny draft once (cached), then runs `eagle3-quant validate OUT --no-kernel` with and without
`--no-vllm`, alternating, each in a fresh process; prints the medians and the difference, and the check's
own timing (vLLM import + build, forward) from the report.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import BENCH_SHAPES, DEFAULT_CACHE, cached_draft
from benchmarks.measure import median, run_measured
from eagle3_quant.records.manifest import MANIFEST_NAME


def quantized_tiny(cache: Path) -> Path:
    src = cached_draft(BENCH_SHAPES["tiny"], cache)
    out = cache / "tiny-fp8-vllm-bench"
    if not (out / MANIFEST_NAME).is_file():
        run_measured([eagle3_quant_bin(), "quantize", str(src), str(out), "--device", "cpu", "--force"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_load", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    out = quantized_tiny(args.cache)
    walls: dict[str, list[float]] = {"with vllm_load": [], "--no-vllm": []}
    check = {}
    for i in range(args.repeat):
        order = list(walls) if i % 2 == 0 else list(reversed(walls))
        for name in order:
            flags = ["--no-kernel"] + (["--no-vllm"] if name == "--no-vllm" else [])
            report = args.cache / "vllm-bench-report.json"
            walls[name].append(run_measured([eagle3_quant_bin(), "validate", str(out), *flags,
                                             "--report", str(report)]).wall_s)
            if name == "with vllm_load":
                check = next(c for c in json.loads(report.read_text())["checks"] if c["name"] == "vllm_load")
    medians = {name: median(values) for name, values in walls.items()}
    added = medians["with vllm_load"] - medians["--no-vllm"]
    print(f"load average {os.getloadavg()[0]:.1f}; validate on the tiny draft, medians of {args.repeat}:")
    for name, value in medians.items():
        print(f"  {name:15s} {value:6.1f} s")
    print(f"  vllm_load adds {added:.1f} s (check status {check.get('status')}, worker wall {check.get('wall_s')} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
