"""Measure the MX schemes on the committed tiny real pair (docs/mx.md): `validate`'s paired acceptance ratio with
its interval for each MX artifact (MXFP4 and MXFP6; default exclusions, then more), and the sensitivity table per
group of each MX scheme.

The calibration set is the tiny pair fixture's: the target's greedy continuations of the first 128 held-out
prompts (48 new tokens), ~6.7K draft chains of k = 3.

    .venv/bin/python -m benchmarks.studies.mx_tiny_pair WORKDIR [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

PAIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "tiny_pair"
CALIB_PROMPTS, NEW_TOKENS = 128, 48
# (label, scheme, extra exclusions beyond fc and lm_head)
RUNS = (
    ("ptpc_fp8", "ptpc_fp8", ()),
    ("w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp4", ()),
    ("w_mxfp4_a_fp8", "w_mxfp4_a_fp8", ()),
    ("w_mxfp4_a_mxfp4 -mlp", "w_mxfp4_a_mxfp4", ("mlp",)),
    ("w_mxfp4_a_mxfp4 -down_proj", "w_mxfp4_a_mxfp4", ("down_proj",)),
    ("w_mxfp4_a_mxfp4 -attention", "w_mxfp4_a_mxfp4", ("attention",)),
    ("w_mxfp4_a_fp8 -mlp", "w_mxfp4_a_fp8", ("mlp",)),
    ("w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e2m3_a_mxfp6_e2m3", ()),
    ("w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp6_e3m2_a_mxfp6_e3m2", ()),
)
SENSITIVITY_SCHEMES = ("w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8", "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e3m2_a_mxfp6_e3m2")


def calibration(workdir: Path, name: str = "calib", first: int = 0) -> Path:
    """The target's greedy continuations of CALIB_PROMPTS held-out prompts from `first` (the tests' set: 0)."""
    calib = workdir / name
    if calib.exists():
        return calib
    sys.path.insert(0, str(PAIR.parent.parent.parent / "fixtures"))
    import tiny_capture
    import torch
    from transformers import LlamaForCausalLM

    target = LlamaForCausalLM.from_pretrained(PAIR / "target", dtype=torch.float32).eval()
    prompts = load_file(PAIR / "heldout_prompts.safetensors")["prompts"].long()
    samples = tiny_capture.greedy_samples(target, prompts[first:first + CALIB_PROMPTS], NEW_TOKENS)
    return tiny_capture.write_calibration(samples, calib, str(PAIR / "target"))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.mx_tiny_pair")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", action="append", help="run only these labels")
    args = parser.parse_args(argv)
    from eagle3_quant import quantize_draft
    from eagle3_quant.quantize.sensitivity import measure_sensitivity
    from eagle3_quant.validate.api import validate_draft

    args.workdir.mkdir(parents=True, exist_ok=True)
    calib = calibration(args.workdir)
    results: dict = {"runs": {}, "sensitivity": {}}
    for label, scheme, exclude in RUNS:
        if args.only and label not in args.only:
            continue
        started = time.perf_counter()
        out = args.workdir / label.replace(" ", "_")
        quantize_draft(PAIR / "draft", out, scheme=scheme, calib=calib, exclude=exclude, device="cpu", force=True,
                       engine="vllm")
        report = validate_draft(out, reference=PAIR / "draft", calib=calib, kernel=False, sglang=False,
                                vllm=False)
        m = report.metrics
        row = {"scheme": scheme, "exclude": list(exclude), "acceptance_ratio": m.acceptance_ratio,
               "interval": m.acceptance_ratio_interval, "al_bf16": m.acceptance_length_bf16,
               "al_quantized": m.acceptance_length_fp8, "top1": m.top1_agreement, "kl": m.kl,
               "drafts": m.drafts, "min_weight_sqnr_db": m.min_weight_sqnr_db, "passed": report.passed,
               "failed_checks": [c.name for c in report.failed_checks], "seconds": round(time.perf_counter() - started)}
        results["runs"][label] = row
        print(label, json.dumps(row), flush=True)
    for scheme in SENSITIVITY_SCHEMES:
        if args.only and f"sensitivity {scheme}" not in args.only:
            continue
        report = measure_sensitivity(PAIR / "draft", calib, scheme=scheme, device="cpu")
        results["sensitivity"][scheme] = report.to_dict()
        for g in report.groups:
            print(f"sensitivity {scheme} {g.group}: top-1 changed {g.disagreement:.2%}, KL {g.kl:.4g}", flush=True)
        print(f"sensitivity {scheme} <default plan>: top-1 changed {report.default_plan.disagreement:.2%}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
