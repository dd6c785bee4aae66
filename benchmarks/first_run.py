"""Quark's first-run cost: `import quark.torch` on a fresh machine (nothing cached) and once warm, plainly (Quark's
defaults, as its own scripts import it) and as `eagle3-quant` imports it (quantize/quark_import.py: kernels built
on first use, the transformers scan cached once per machine, quiet logging without QUARK_LOG_LEVEL's cost).

    python -m benchmarks.first_run [--repeat 3]

"Fresh" points TORCH_EXTENSIONS_DIR (where torch compiles Quark's C++ kernels) and XDG_CACHE_HOME (eagle3-quant's
scan cache) at new empty folders; "warm" uses the machine's own caches after one warming run. Each import runs in
its own child process; the four variants alternate order between repeats; medians are reported with whether the
kernels were compiled (files in the fresh extension folder afterwards). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks.contenders import PYTHON, REPO
from benchmarks.measure import median, run_measured

PLAIN = "import time; t = time.perf_counter(); import quark.torch; print(time.perf_counter() - t)"
OURS = ("import time; t = time.perf_counter(); from eagle3_quant.quantize.quark_import import import_quark; "
        "import_quark(); print(time.perf_counter() - t)")
VARIANTS = {"plain": PLAIN, "eagle3-quant": OURS}


def _environment(fresh_root: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "QUARK_LOG_LEVEL"}    # Quark's default logging
    if fresh_root is not None:
        env["TORCH_EXTENSIONS_DIR"] = str(fresh_root / "torch_extensions")
        env["XDG_CACHE_HOME"] = str(fresh_root / "cache")
    return env


def import_once(variant: str, fresh: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="eagle3-first-run-") as tmp:
        root = Path(tmp) if fresh else None
        measured = run_measured([PYTHON, "-c", VARIANTS[variant]], cwd=REPO, env=_environment(root))
        compiled = fresh and any((root / "torch_extensions").rglob("*.so"))
    return {"import_s": round(float(measured.stdout.strip().splitlines()[-1]), 3),
            "process_s": round(measured.wall_s, 3), "compiled_kernels": compiled}


def measure(repeat: int = 3) -> dict:
    for variant in VARIANTS:                 # warm: the machine's caches filled once, untimed
        import_once(variant, fresh=False)
    order = [(v, fresh) for fresh in (True, False) for v in VARIANTS]
    runs: dict[str, list[dict]] = {f"{v} {'fresh' if f else 'warm'}": [] for v, f in order}
    for i in range(repeat):
        for variant, fresh in order if i % 2 == 0 else list(reversed(order)):
            runs[f"{variant} {'fresh' if fresh else 'warm'}"].append(import_once(variant, fresh))
    medians = {name: {"import_s": round(median([r["import_s"] for r in rs]), 3),
                      "process_s": round(median([r["process_s"] for r in rs]), 3),
                      "compiled_kernels": any(r["compiled_kernels"] for r in rs)} for name, rs in runs.items()}
    return {"repeat": repeat, "runs": runs, "median": medians, "load_average": [round(x, 2) for x in os.getloadavg()]}


def format_first_run(result: dict) -> str:
    lines = ["import quark.torch (child process; medians):"]
    for name, med in result["median"].items():
        lines.append(f"  {name:<20} {med['import_s']:7.2f} s import, {med['process_s']:7.2f} s process"
                     f"{'  (compiled the C++ kernels)' if med['compiled_kernels'] else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_run", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    result = measure(parser.parse_args(argv).repeat)
    print(format_first_run(result))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
