"""Two calibrations at once against one alone: does a run share the machine (calib/threads.py)?

    python -m benchmarks.calib_share [--samples 32] [--seq-len 96] [--generate-tokens 32] [--repeat 2]

Each run is a fresh `eagle3-quant calibrate` process on the bench's toy target (benchmarks/calib_capture.py
`toy_inputs`), timed from spawn to exit. Two settings: `shared` (the default: torch threads = the cores no other
process is running on, checked between batches) and `all cores` (`--threads` = every core: torch's own default, what
calibrate did before). For each, `--repeat` times in alternating order: one run alone, then two started together.
Reported: the median wall of a run alone and of each run of a pair, and pair / alone (goal for `shared`: each of two
concurrent runs within `GOAL`x of one alone). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.calib_capture import toy_inputs
from benchmarks.contenders import REPO, eagle3_quant_bin
from benchmarks.measure import median

GOAL = 2.5


def _command(out: Path, target: Path, draft: Path, data: Path, samples: int, seq_len: int, generate: int,
             threads: int | None) -> list[str]:
    return [eagle3_quant_bin(), "calibrate", str(out), "--draft", str(draft), "--target", str(target), "--data",
            str(data), "--num-samples", str(samples), "--seq-len", str(seq_len + generate), "--generate-tokens",
            str(generate), "--dtype", "float32", *(["--threads", str(threads)] if threads else [])]


def run_together(commands: list[list[str]]) -> list[float]:
    """Start every command at once; each one's wall seconds from its start to its exit."""
    started = time.perf_counter()
    children = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                for c in commands]
    walls = [0.0] * len(children)
    pending = {child.pid: i for i, child in enumerate(children)}
    try:
        while pending:
            pid, status = os.wait()
            if pid in pending:
                walls[pending.pop(pid)] = time.perf_counter() - started
                if os.waitstatus_to_exitcode(status) != 0:
                    raise RuntimeError(f"calibrate exited {os.waitstatus_to_exitcode(status)}")
    finally:
        for child in children:
            if child.poll() is None and child.pid in pending:
                child.kill()
    return walls


def measure(samples: int, seq_len: int, generate: int, repeat: int) -> dict:
    results = {}
    with tempfile.TemporaryDirectory(prefix="eagle3-share-") as tmp:
        root = Path(tmp)
        target, draft, data = toy_inputs(root, samples, seq_len, 4, 256, generate)
        for name, threads in (("shared", None), ("all cores", os.cpu_count())):
            alone, pairs = [], []
            for r in range(repeat):
                for kind in ("alone", "pair") if r % 2 == 0 else ("pair", "alone"):
                    outs = [root / f"out-{i}" for i in range(1 if kind == "alone" else 2)]
                    for out in outs:
                        shutil.rmtree(out, ignore_errors=True)
                    walls = run_together([_command(o, target, draft, data, samples, seq_len, generate, threads)
                                          for o in outs])
                    (alone if kind == "alone" else pairs).append(walls)
            one = median([w[0] for w in alone])
            pair = [median([w[i] for w in pairs]) for i in range(2)]
            results[name] = {"alone_s": round(one, 2), "pair_s": [round(p, 2) for p in pair],
                             "pair_over_alone": round(max(pair) / one, 3), "runs": {"alone": alone, "pair": pairs}}
    return {"samples": samples, "seq_len": seq_len, "generate_tokens": generate, "repeat": repeat,
            "cores": os.cpu_count(), "goal": GOAL, "load_average": [round(x, 2) for x in os.getloadavg()],
            **results}


def format_share(result: dict) -> str:
    lines = [f"two concurrent calibrations vs one alone ({result['samples']} prompts x {result['seq_len']} + "
             f"{result['generate_tokens']} tokens, toy target, {result['cores']} cores, medians):"]
    for name in ("shared", "all cores"):
        r = result[name]
        verdict = f" (goal <= {result['goal']}: {'met' if r['pair_over_alone'] <= result['goal'] else 'NOT met'})" \
            if name == "shared" else ""
        lines.append(f"  {name:<10} alone {r['alone_s']:7.1f} s, each of two {r['pair_s'][0]:7.1f} / "
                     f"{r['pair_s'][1]:7.1f} s: x{r['pair_over_alone']:.2f}{verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calib_share", description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=96)
    parser.add_argument("--generate-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    result = measure(args.samples, args.seq_len, args.generate_tokens, args.repeat)
    print(format_share(result))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
