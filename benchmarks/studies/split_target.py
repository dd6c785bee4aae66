"""`python -m benchmarks.studies.split_target` (`make bench-split`): the real pair's target split across vLLM processes
on vLLM's CPU build, as a target split across GPUs is served.

1. `calibrate --backend vllm` of the same held-out prompts in one process and at tensor parallel 3 (SmolLM2-135M has
   9 heads), and with transformers for scale: over the positions both share, the states' difference relative to
   each position's largest state and the next tokens; where the greedy continuations part.
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


def calibrated(cache: Path, target: Path, backend: str, split: int, samples: int, tokens: int) -> tuple[Path, float]:
    out = cache / f"calib-{backend}-tp{split}"
    started = time.monotonic()
    if not (out / "calib.json").is_file():
        engine = ["--backend", "vllm", "--tensor-parallel-size", str(split)] if backend == "vllm" else []
        subprocess.run([eagle3_quant_bin(), "calibrate", str(out), "--target", str(target), "--draft", str(DRAFT_DIR),
                        "--data", str(HELDOUT_FILE), "--num-samples", str(samples), "--generate-tokens", str(tokens),
                        "--seq-len", "512", "--force", *engine], check=True)
    return out, time.monotonic() - started


def compared(first: Path, second: Path) -> dict:
    """Sample by sample over the tokens both sets share: the prompt, and the greedy continuation up to where the two
    part (bf16 sums rounded in another order can turn a near tie among the target's top logits the other way; from
    there on they hold different tokens). Per tap, each shared position's largest state difference relative to its
    largest state (median, 99th percentile, largest), and the next tokens over the shared positions."""
    a, b = load_calibration(first), load_calibration(second)
    taps = len(a.info.aux_layer_ids)
    relative: list[list] = [[] for _ in range(taps)]
    whole, parted, next_equal, next_total = 0, [], 0, 0
    for x, y in zip(a.samples(), b.samples(), strict=True):
        length = min(x.input_ids.numel(), y.input_ids.numel())
        common = int((x.input_ids[:length] == y.input_ids[:length]).long().cumprod(0).sum())
        if common < max(x.input_ids.numel(), y.input_ids.numel()):
            parted.append(common - x.generated_from if x.generated_from else common)
        else:
            whole += 1
        states = [s.aux_hidden_states[:common].float().reshape(common, taps, -1) for s in (x, y)]
        for t in range(taps):
            relative[t].append((states[0][:, t] - states[1][:, t]).abs().amax(-1)
                               / states[0][:, t].abs().amax(-1).clamp_min(1e-30))
        agree = x.target_next_ids[:common - 1] == y.target_next_ids[:common - 1]
        next_equal, next_total = next_equal + int(agree.sum()), next_total + agree.numel()
    rows = {}
    for layer, values in zip(a.info.aux_layer_ids, relative, strict=True):
        joined = torch.cat(values)
        rows[f"hidden_states[{layer}]"] = [float(joined.median()), float(joined.quantile(0.99)), float(joined.max())]
    return {"samples": a.num_samples, "identical_samples": whole, "parted_after_generated_tokens": parted,
            "next_tokens_equal": [next_equal, next_total], "relative_difference_median_p99_max": rows,
            "dtype": a.info.dtype, "differences": a.info.differences(b.info)}


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
    sets = {name: calibrated(args.cache, target, backend, split, args.num_samples, args.generate_tokens)
            for name, backend, split in (("vllm tp1", "vllm", 1), (f"vllm tp{args.split}", "vllm", args.split),
                                         ("transformers", "transformers", 1))}
    states = {f"vllm tp1 vs tp{args.split}": compared(sets["vllm tp1"][0], sets[f"vllm tp{args.split}"][0]),
              "vllm tp1 vs transformers": compared(sets["vllm tp1"][0], sets["transformers"][0]),
              "seconds": {name: round(seconds, 1) for name, (_, seconds) in sets.items()}}
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
    for name, row in states.items():
        if name != "seconds":
            equal, total = row["next_tokens_equal"]
            spread = "; ".join(f"{tap} {m:.1e} / {p:.1e} / {x:.1e}"
                               for tap, (m, p, x) in row["relative_difference_median_p99_max"].items())
            print(f"{name}: {row['identical_samples']} of {row['samples']} samples identical, the others part after "
                  f"{row['parted_after_generated_tokens']} generated tokens; next tokens equal {equal}/{total} over "
                  f"the shared positions; state difference median / p99 / largest: {spread} ({row['dtype']})")
    print(f"seconds: {states['seconds']}")
    for name, row in refusals.items():
        print(f"{name}: exit {row['exit']} in {row['seconds']} s: {row['error']}")


if __name__ == "__main__":
    main()
