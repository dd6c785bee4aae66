"""`python -m benchmarks.studies.real_pair` (`make bench-real`): every scheme and option on the real pair
(SmolLM2-135M-Instruct and its trained Eagle3 draft) through `eagle3-quant bench` in vLLM's engine, on the held-out
prompts; beside it, what static FP8 scales see on the real target (max |x|, 99.99th percentile and outlier channels
of every quantized linear's input). Writes benchmarks/results/real_pair.json and prints the table docs/bench.md shows.

Artifacts and the calibration set are cached under benchmarks/cache/real-pair (delete it to start over)."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME
from fixtures.real_pair.draft_files import DRAFT_DIR
from fixtures.real_pair.prompts import HELDOUT_FILE, TRAIN_FILE
from fixtures.real_pair.target import prepare

RESULTS = Path(__file__).resolve().parents[1] / "results" / "real_pair.json"


@dataclass(frozen=True)
class Variant:
    name: str
    flags: tuple[str, ...]
    calib: bool = True


VARIANTS = (
    Variant("ptpc (default)", (), calib=False),
    Variant("static fp8", ("--scheme", "fp8")),
    Variant("mxfp4 W4A8", ("--scheme", "w_mxfp4_a_fp8")),
    Variant("mxfp4 W4A4", ("--scheme", "w_mxfp4_a_mxfp4")),
    Variant("mxfp6 e2m3", ("--scheme", "w_mxfp6_e2m3_a_mxfp6_e2m3")),
    Variant("mxfp6 e3m2", ("--scheme", "w_mxfp6_e3m2_a_mxfp6_e3m2")),
    Variant("int8 W8A8", ("--scheme", "w8a8_int8"), calib=False),
    Variant("int4 W4A16 (AWQ)", ("--scheme", "w4a16_int4")),
    Variant("nvfp4", ("--scheme", "nvfp4")),
    Variant("mxfp8", ("--scheme", "w_mxfp8_a_mxfp8"), calib=False),
    Variant("--scheme auto", ("--scheme", "auto")),
    Variant("ptpc, --draft-vocab 4096", ("--draft-vocab", "4096")),
    Variant("ptpc --gptq", ("--gptq",)),
    Variant("ptpc --smooth-alpha 0.5", ("--smooth-alpha", "0.5")),
    Variant("ptpc --auto-exclude 0.02", ("--auto-exclude", "0.02")),
)


def run(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - started


def calibration(cache: Path, target: Path, samples: int) -> Path:
    """The target's states on training prompts (never the held-out ones), captured by `calibrate`."""
    cal = cache / "calib"
    if not (cal / "calib.json").is_file():
        run([eagle3_quant_bin(), "calibrate", str(cal), "--target", str(target), "--draft", str(DRAFT_DIR),
             "--data", str(TRAIN_FILE), "--num-samples", str(samples), "--generate-tokens", "64", "--seed", "1",
             "--force"])
    return cal


def quantized(cache: Path, variant: Variant, cal: Path) -> tuple[Path, float | None]:
    out = cache / variant.name.replace(" ", "_").replace(",", "").replace("-", "").replace(".", "")
    if (out / MANIFEST_NAME).is_file():
        return out, None
    cmd = [eagle3_quant_bin(), "quantize", str(DRAFT_DIR), str(out), "--force", *variant.flags]
    if variant.calib:
        cmd += ["--calib", str(cal)]
    return out, run(cmd)


def benched(out: Path, target: Path, prompts: int, tokens: int) -> dict:
    """bench.json, or {"not_run": REASON} where the engine refuses the artifact (MX on vLLM's CPU build)."""
    done = subprocess.run([eagle3_quant_bin(), "bench", str(out), "--target", str(target), "--reference",
                           str(DRAFT_DIR), "--prompts", str(HELDOUT_FILE), "--num-prompts", str(prompts),
                           "--max-tokens", str(tokens)], stderr=subprocess.PIPE, text=True)
    if done.returncode == 2:
        return {"not_run": done.stderr.strip().splitlines()[-1].removeprefix("error: ")}
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, stderr=done.stderr)
    return json.loads((out / BENCH_NAME).read_text())


@torch.no_grad()
def heldout_calibration(cache: Path, target: Path, prompts: int, tokens: int) -> Path:
    """The target's greedy continuations of the held-out prompts, for the offline prediction of rows the engine
    cannot run (what `bench` predicts from the engine's own continuations when it can)."""
    cal = cache / "heldout-calib"
    if not (cal / "calib.json").is_file():
        run([eagle3_quant_bin(), "calibrate", str(cal), "--target", str(target), "--draft", str(DRAFT_DIR),
             "--data", str(HELDOUT_FILE), "--num-samples", str(prompts), "--generate-tokens", str(tokens),
             "--seed", "1", "--force"])
    return cal


def offline_prediction(out: Path, cal: Path, target: Path) -> dict:
    """`validate`'s acceptance ratio with its interval on the held-out continuations (its gates may fail: exit 1)."""
    from eagle3_quant.records.validation_report import read_validation

    report = out / "validation.json"
    subprocess.run([eagle3_quant_bin(), "validate", str(out), "--reference", str(DRAFT_DIR), "--calib", str(cal),
                    "--target", str(target), "--report", str(report), "--no-kernel", "--no-vllm", "--no-sglang"],
                   stdout=subprocess.DEVNULL, check=False)
    metrics = read_validation(out).metrics
    return {"acceptance_ratio": metrics.acceptance_ratio, "interval": metrics.acceptance_ratio_interval,
            "acceptance_length": {"reference": metrics.acceptance_length_bf16,
                                  "artifact": metrics.acceptance_length_fp8}}


def activation_outliers(cal: Path, target: Path, samples: int = 32) -> dict:
    """Per quantized linear (and fc): max |x|, the 99.99th percentile of |x| and the top channels by max |x|, over
    the draft's inputs on the calibration set (step 0 of each position, the states the engine feeds)."""
    from eagle3_quant.records.calibration import load_calibration
    from eagle3_quant.runtime.loading import load_draft

    draft = load_draft(DRAFT_DIR, dtype=torch.float32, embedding=target)
    seen: dict[str, list[torch.Tensor]] = {}
    hooks = [module.register_forward_hook(lambda m, args, out, name=name: seen.setdefault(name, []).append(
        args[0].reshape(-1, args[0].shape[-1]).abs())) for name, module in draft.linears().items()
        if name != "lm_head"]
    view = load_calibration(cal).select(draft_taps())
    for i, sample in enumerate(view.samples()):
        if i == samples:
            break
        draft(sample.input_ids[None, 1:], sample.aux_hidden_states[None, :-1])
    for hook in hooks:
        hook.remove()
    stats = {}
    for name, chunks in seen.items():
        x = torch.cat(chunks)
        per_channel = x.amax(0)
        top = per_channel.topk(3)
        channels = [[int(c), round(float(v), 1)] for v, c in zip(top.values, top.indices, strict=True)]
        stats[name] = {"max": float(x.max()), "p9999": float(torch.quantile(x.flatten()[::7].float(), 0.9999)),
                       "median_channel_max": float(per_channel.median()),
                       "top_channels": channels}
    return stats


def draft_taps() -> tuple[int, ...]:
    config = json.loads((DRAFT_DIR / "config.json").read_text())
    return tuple(i + 1 for i in config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])


def _lossless(report: dict) -> str:
    """"yes" / "no", with the differing sequences told apart (near ties among the target's top logits, real ones)."""
    lossless = report["lossless"]
    parts = []
    for name in ("reference", "artifact"):
        match = lossless[name]
        if match["equal_sequences"] < match["sequences"]:
            parts.append(f"{name} {match['sequences'] - match['equal_sequences']} differ: "
                         f"{match.get('near_ties', '?')} near ties, {match.get('real_differences', '?')} real")
    return ("yes" if lossless["lossless"] else "**no**") + (f" ({'; '.join(parts)})" if parts else "")


def _interval(value: float | None, ends) -> str:
    if value is None:
        return "not run"
    return f"{value:.4f} ({ends[0]:.4f}..{ends[1]:.4f})" if ends else f"{value:.4f}"


def step_bytes(out: Path) -> int:
    """What one draft step of the artifact reads (the cost model: `eagle3-quant cost`)."""
    from eagle3_quant.cost import checkpoint_cost

    return checkpoint_cost(out).written.total_bytes


def row(name: str, report: dict, written: int | None = None) -> str:
    size = f"{written / 1e6:.1f} MB" if written else ""
    if "not_run" in report:
        pred = report.get("offline") or {}
        offline = _interval(pred.get("acceptance_ratio"), pred.get("interval")) if pred else "not run"
        return f"| {name} | not run in the engine: {report['not_run']} | | | | {offline} | | {size} |"
    acc, ratio, pred = report["acceptance"], report["acceptance_ratio"], report.get("predicted") or {}
    ref, art = acc["reference"], acc["artifact"]
    per_pos = "/".join(f"{p:.2f}" for p in art.get("per_position", []))
    return (f"| {name} | {ref['acceptance_length']:.3f} | {art['acceptance_length']:.3f} | {per_pos} | "
            f"{_interval(ratio['ratio'], ratio['interval'])} | "
            f"{_interval(pred.get('acceptance_ratio'), pred.get('interval'))} | {_lossless(report)} | {size} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.real_pair",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--calib-samples", type=int, default=128)
    parser.add_argument("--only", nargs="*", default=None, help="variant names to run (default: all)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "real-pair")
    args = parser.parse_args(argv)
    target = prepare()
    args.cache.mkdir(parents=True, exist_ok=True)
    cal = calibration(args.cache, target, args.calib_samples)
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": {}}
    results.update(date=time.strftime("%Y-%m-%d"), machine=f"{platform.processor() or platform.machine()}, "
                   f"{torch.get_num_threads()} threads", prompts=args.num_prompts, max_tokens=args.max_tokens,
                   command="make bench-real")
    for variant in VARIANTS:
        if args.only and variant.name not in args.only:
            continue
        out, quantize_s = quantized(args.cache, variant, cal)
        report = benched(out, target, args.num_prompts, args.max_tokens)
        if "not_run" in report:
            heldout = heldout_calibration(args.cache, target, args.num_prompts, args.max_tokens)
            report["offline"] = offline_prediction(out, heldout, target)
        results["rows"][variant.name] = {"quantize_s": quantize_s, "bench": report, "step_bytes": step_bytes(out)}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    results["activations"] = activation_outliers(cal, target)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print("| variant | BF16 AL | artifact AL | per position | ratio (95% CI) | predicted ratio (95% CI) | lossless | "
          "step bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for name, entry in results["rows"].items():
        print(row(name, entry["bench"], entry.get("step_bytes")))
    print("\n| linear input | max abs | 99.99th pct | median channel max | top channels (channel, max) |")
    print("|---|---|---|---|---|")
    for name, s in results["activations"].items():
        print(f"| {name} | {s['max']:.1f} | {s['p9999']:.1f} | {s['median_channel_max']:.2f} | "
              f"{', '.join(f'{c}: {v}' for c, v in s['top_channels'])} |")


if __name__ == "__main__":
    main()
