"""`python -m benchmarks.studies.split_target` (`make bench-split`): the real pair's target split across vLLM processes
on vLLM's CPU build, as a target split across GPUs is served.

1. `calibrate --backend vllm` of the same held-out prompts in one process and at tensor parallel 3 (SmolLM2-135M has
   9 heads): equal prompts, continuations and next tokens; the largest difference of the states, relative to each
   position's largest state.
2. What vLLM refuses before anything loads, and how long the refusal takes: calibration at pipeline parallel 2
   (vLLM's hidden-state export has no ``SupportsPP``), bench at tensor parallel 3 (the draft's 16,384-token
   vocabulary across ``ParallelLMHead``), bench with expert parallelism (a dense target).
Writes benchmarks/results/split_target.json and prints the lines docs/bench.md shows. The calibration sets are cached
under benchmarks/cache/split-target (delete it to start over).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch

from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from eagle3_quant.records.calibration import load_calibration
from fixtures.real_pair.draft_files import DRAFT_DIR
from fixtures.real_pair.prompts import HELDOUT_FILE
from fixtures.real_pair.target import cache_dir, prepare

RESULTS = Path(__file__).resolve().parents[1] / "results" / "split_target.json"


def calibrated(cache: Path, target: Path, split: int, samples: int, tokens: int) -> tuple[Path, float]:
    out = cache / f"calib-tp{split}"
    started = time.monotonic()
    if not (out / "calib.json").is_file():
        subprocess.run([eagle3_quant_bin(), "calibrate", str(out), "--target", str(target), "--draft", str(DRAFT_DIR),
                        "--data", str(HELDOUT_FILE), "--num-samples", str(samples), "--generate-tokens", str(tokens),
                        "--seq-len", "512", "--backend", "vllm", "--tensor-parallel-size", str(split), "--force"],
                       check=True)
    return out, time.monotonic() - started


def compared(single: Path, split: Path) -> dict:
    a, b = load_calibration(single), load_calibration(split)
    worst, positions, same_next = 0.0, 0, 0
    for x, y in zip(a.samples(), b.samples(), strict=True):
        if not torch.equal(x.input_ids, y.input_ids):
            raise SystemExit(f"prompt or continuation differs: sample {positions}")
        same_next += int(torch.equal(x.target_next_ids, y.target_next_ids))
        scale = x.aux_hidden_states.float().abs().amax(dim=-1, keepdim=True)
        worst = max(worst, float(((x.aux_hidden_states.float() - y.aux_hidden_states.float()).abs() / scale).max()))
        positions += x.input_ids.numel()
    return {"samples": a.num_samples, "positions": positions, "same_next_tokens": same_next,
            "largest_relative_difference": worst, "dtype": a.info.dtype,
            "differences": a.info.differences(b.info)}


def refusal(args: list[str]) -> dict:
    started = time.monotonic()
    done = subprocess.run([eagle3_quant_bin(), *args], capture_output=True, text=True)
    line = next((x for x in done.stderr.splitlines() if x.startswith("error: ")), done.stderr[-300:])
    return {"exit": done.returncode, "seconds": round(time.monotonic() - started, 1), "error": line}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.split_target",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=16)
    parser.add_argument("--generate-tokens", type=int, default=48)
    parser.add_argument("--split", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "split-target")
    args = parser.parse_args(argv)
    prepare()
    target = cache_dir() / "target"
    args.cache.mkdir(parents=True, exist_ok=True)
    single, single_s = calibrated(args.cache, target, 1, args.num_samples, args.generate_tokens)
    split, split_s = calibrated(args.cache, target, args.split, args.num_samples, args.generate_tokens)
    states = {**compared(single, split), "seconds": {"tp1": round(single_s, 1), f"tp{args.split}": round(split_s, 1)}}
    artifact = args.cache / "ptpc"
    if not artifact.is_dir():
        subprocess.run([eagle3_quant_bin(), "quantize", str(DRAFT_DIR), str(artifact), "--force"], check=True)
    bench = ["bench", str(artifact), "--target", str(target), "--reference", str(DRAFT_DIR), "--prompts",
             str(HELDOUT_FILE), "--num-prompts", "4", "--no-predict"]
    refusals = {
        "calibrate, pipeline parallel 2": refusal(["calibrate", str(args.cache / "never"), "--target", str(target),
                                                   "--draft", str(DRAFT_DIR), "--data", str(HELDOUT_FILE),
                                                   "--num-samples", "2", "--backend", "vllm",
                                                   "--pipeline-parallel-size", "2"]),
        f"bench, tensor parallel {args.split}": refusal([*bench, "--tensor-parallel-size", str(args.split)]),
        "bench, expert parallel": refusal([*bench, "--enable-expert-parallel"]),
    }
    result = {"states": states, "refusals": refusals}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"calibrate --backend vllm, tensor parallel 1 vs {args.split}: {states['samples']} samples, "
          f"{states['positions']} positions, next tokens equal in {states['same_next_tokens']}/{states['samples']}, "
          f"largest state difference {states['largest_relative_difference']:.2e} of the position's largest "
          f"({states['dtype']}); {states['seconds']}")
    for name, row in refusals.items():
        print(f"{name}: exit {row['exit']} in {row['seconds']} s: {row['error']}")


if __name__ == "__main__":
    main()
