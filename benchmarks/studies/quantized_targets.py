"""`python -m benchmarks.studies.quantized_targets` (`make bench-targets`): the real pair's BF16 draft and its FP8
drafts beside the target people serve, in vLLM's engine on the held-out prompts.

Targets: the bf16 SmolLM2-135M-Instruct, the same quantized by AMD Quark to FP8 (PTPC) and to MXFP4 (W4A4), and vLLM's
online FP8 quantization of the bf16 one (`--target-quantization fp8`). For each: the default (PTPC) FP8 draft against
the BF16 draft (acceptance per position, ratio with its interval, lossless against that target's own greedy output);
and static FP8 calibrated on the bf16 target's states against static FP8 calibrated on the served target's states.
Writes benchmarks/results/quantized_targets.json and prints the table docs/bench.md shows. Artifacts and calibration
sets are cached under benchmarks/cache/quantized-targets (delete it to start over).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from benchmarks.studies.real_pair import _interval, _lossless
from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME
from fixtures.real_pair.draft_files import DRAFT_DIR
from fixtures.real_pair.prompts import HELDOUT_FILE, TRAIN_FILE
from fixtures.real_pair.quantized_targets import prepare as prepare_quantized
from fixtures.real_pair.target import cache_dir, prepare

RESULTS = Path(__file__).resolve().parents[1] / "results" / "quantized_targets.json"
CALIB_SAMPLES, CALIB_TOKENS = 128, 64


def run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True)


def calibration(cache: Path, name: str, target: Path) -> Path:
    """The target's states on training prompts; an MX target through vLLM's engine (transformers cannot run it on a
    CPU)."""
    cal = cache / f"calib-{name}"
    if not (cal / "calib.json").is_file():
        backend = ["--backend", "vllm"] if name == "mxfp4" else []
        run([eagle3_quant_bin(), "calibrate", str(cal), "--target", str(target), "--draft", str(DRAFT_DIR), "--data",
             str(TRAIN_FILE), "--num-samples", str(CALIB_SAMPLES), "--generate-tokens", str(CALIB_TOKENS), "--seed",
             "1", "--force", *backend])
    return cal


def quantized(cache: Path, name: str, flags: list[str]) -> Path:
    out = cache / name
    if not (out / MANIFEST_NAME).is_file():
        run([eagle3_quant_bin(), "quantize", str(DRAFT_DIR), str(out), "--force", *flags])
    return out


def benched(artifact: Path, target: Path, prompts: int, tokens: int, extra: list[str]) -> dict:
    """bench.json of ARTIFACT beside TARGET (bench writes it into the artifact: one copy per target)."""
    run([eagle3_quant_bin(), "bench", str(artifact), "--target", str(target), "--reference", str(DRAFT_DIR),
         "--prompts", str(HELDOUT_FILE), "--num-prompts", str(prompts), "--max-tokens", str(tokens), "--no-predict",
         *extra])
    return json.loads((artifact / BENCH_NAME).read_text())


def row(label: str, report: dict) -> str:
    acc, ratio = report["acceptance"], report["acceptance_ratio"]
    ref, art = acc["reference"], acc["artifact"]
    per = "/".join(f"{p:.2f}" for p in ref["per_position"]), "/".join(f"{p:.2f}" for p in art["per_position"])
    return (f"| {label} | {ref['acceptance_length']:.3f} ({per[0]}) | {art['acceptance_length']:.3f} ({per[1]}) | "
            f"{_interval(ratio['ratio'], ratio['interval'])} | {_lossless(report)} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.quantized_targets",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "quantized-targets")
    parser.add_argument("--static-targets", default="fp8,mxfp4",
                        help="quantized targets for the static-FP8 calibration comparison (comma-separated)")
    args = parser.parse_args(argv)
    bf16 = prepare()
    targets = {"bf16": bf16, **prepare_quantized(bf16, cache_dir())}
    args.cache.mkdir(parents=True, exist_ok=True)
    results = {"date": time.strftime("%Y-%m-%d"), "prompts": args.num_prompts, "max_tokens": args.max_tokens,
               "command": "make bench-targets", "rows": {}}
    calib_bf16 = calibration(args.cache, "bf16", bf16)
    plan = []
    for name, target in targets.items():
        plan.append((f"PTPC beside the {name} target", "ptpc", [], target, []))
    plan.append(("PTPC beside vLLM's online FP8 of the bf16 target", "ptpc", [], bf16,
                 ["--target-quantization", "fp8"]))
    for name in filter(None, args.static_targets.split(",")):
        plan.append((f"static FP8 calibrated on the bf16 target, beside the {name} target", "static-bf16-calib",
                     ["--scheme", "fp8", "--calib", str(calib_bf16)], targets[name], []))
        served = calibration(args.cache, name, targets[name])
        plan.append((f"static FP8 calibrated on the {name} target, beside it", f"static-{name}-calib",
                     ["--scheme", "fp8", "--calib", str(served)], targets[name], []))
    for label, artifact_name, flags, target, extra in plan:
        report = benched(quantized(args.cache, artifact_name, flags), target, args.num_prompts, args.max_tokens,
                         extra)
        results["rows"][label] = report
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print("| draft and target | BF16 draft AL (per position) | FP8 draft AL (per position) | ratio (95% CI) | "
          "lossless vs that target |")
    print("|---|---|---|---|---|")
    for label, report in results["rows"].items():
        print(row(label, report))


if __name__ == "__main__":
    main()
