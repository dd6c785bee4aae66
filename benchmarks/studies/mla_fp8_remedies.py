"""Remedies for the tiny MLA draft's FP8 acceptance loss (docs/families.md, issue 12), each a real artifact:
`quantize_draft` (real Quark) then `validate_draft`'s paired acceptance ratio with its 95% interval, on the
calibration set of tests/tiny_pair_fixtures.py (the target's greedy continuations of the first 128 held-out
prompts, 48 new tokens: ~6.6K chains of k = 3). The smoothing scales are measured on the same set; GPTQ's Hessians
on the other 128 held-out prompts (tests/tiny_pair_fixtures.py's holdout_calib).

    .venv/bin/python -m benchmarks.studies.mla_fp8_remedies WORKDIR [--only LABEL ...] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.studies.mx_tiny_pair import PAIR, calibration

MLA_DRAFT = PAIR.parent / "tiny_pair_mla" / "draft"
# (label, quantize options beyond the draft, OUT and --calib)
RUNS = (
    ("ptpc_fp8 (default plan)", {}),
    ("ptpc_fp8 --smooth-alpha 0.5", {"smooth_alpha": 0.5}),
    ("ptpc_fp8 --smooth-alpha 0.75", {"smooth_alpha": 0.75}),
    ("ptpc_fp8 --smooth-alpha 0.25", {"smooth_alpha": 0.25}),
    ("ptpc_fp8 --gptq (Hessians on prompts 128-255)", {"gptq": True}),
    ("ptpc_fp8 --exclude gate_up_proj", {"exclude": ("gate_up_proj",)}),
    ("ptpc_fp8 --exclude mlp", {"exclude": ("mlp",)}),
    ("fp8 (static per-tensor, calibrated)", {"scheme": "fp8"}),
    ("fp8 --smooth-alpha 0.5", {"scheme": "fp8", "smooth_alpha": 0.5}),
)


def measure(label: str, options: dict, calib: Path, workdir: Path, other: Path | None = None) -> dict:
    from eagle3_quant import quantize_draft
    from eagle3_quant.validate.api import validate_draft

    started = time.perf_counter()
    out = workdir / label.split(" (")[0].replace(" ", "_").replace("--", "")
    learn_from = other if options.get("gptq") and other is not None else calib
    result = quantize_draft(MLA_DRAFT, out, calib=learn_from, device="cpu", force=True, **options)
    report = validate_draft(out, reference=MLA_DRAFT, calib=calib, kernel=False, vllm=False, sglang=False)
    m = report.metrics
    return {"options": {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()},
            "fp8_layers": [d.role for d in result.plan.quantized],
            "acceptance_ratio": m.acceptance_ratio, "interval": m.acceptance_ratio_interval,
            "al_bf16": m.acceptance_length_bf16, "al_fp8": m.acceptance_length_fp8,
            "top1": m.top1_agreement, "kl": m.kl, "drafts": m.drafts, "passed": report.passed,
            "failed_checks": [c.name for c in report.failed_checks],
            "smoothing": (result.manifest.smoothing or {}).get("sites"),
            "seconds": round(time.perf_counter() - started)}


def kimi_step_bytes() -> dict[str, float]:
    """GB of weights one draft step of a Kimi-K2.5-shaped MLA draft reads (``fixtures/synthetic.py``'s
    kimi-k2.5-mla; embedding: one row), default plan vs the MLP (or gate_up) kept BF16."""
    from benchmarks.studies.mla_kv_b import kimi_shares
    from fixtures.synthetic import SHAPES

    shape = SHAPES["kimi-k2.5-mla"]
    shares = kimi_shares()
    total = 3 * shape.hidden * shape.intermediate / shares["mlp"]          # every parameter of the draft
    counts = {name: share * total for name, share in shares.items()}
    counts["embed_tokens"] = shape.hidden                                   # one row read per token
    fp8 = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj", "mlp"}

    def gb(fp8_parts: set[str], gate_up_bf16: bool = False) -> float:
        size = sum(n * (1 if part in fp8_parts else 2) for part, n in counts.items())
        if gate_up_bf16:
            size += counts["mlp"] * 2 / 3                                   # gate + up: 1 -> 2 bytes
        return size / 1e9

    return {"default plan": gb(fp8), "--exclude gate_up_proj": gb(fp8, gate_up_bf16=True),
            "--exclude mlp": gb(fp8 - {"mlp"}), "BF16": gb(set())}


def table(results: dict) -> str:
    lines = ["| artifact | FP8 linears | acceptance length | ratio (paired, 95% CI) | step-0 top-1 | validate |",
             "|---|---|---|---|---|---|"]
    for label, r in results.items():
        low, high = r["interval"]
        lines.append(f"| {label} | {len(r['fp8_layers'])} | {r['al_bf16']:.3f} -> {r['al_fp8']:.3f} | "
                     f"{r['acceptance_ratio']:.4f} ({low:.4f}..{high:.4f}) | {r['top1']:.4f} | "
                     f"{'passed' if r['passed'] else 'failed: ' + ', '.join(r['failed_checks'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.mla_fp8_remedies")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--only", action="append", help="run only these labels")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    calib = calibration(args.workdir)
    other = calibration(args.workdir, "calib-other", first=128)
    results = {}
    for label, options in RUNS:
        if args.only and label not in args.only:
            continue
        results[label] = measure(label, options, calib, args.workdir, other)
        print(label, json.dumps(results[label]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print("Kimi-K2.5-shaped MLA draft, weight bytes per draft step (GB):",
          ", ".join(f"{k} {v:.3f}" for k, v in kimi_step_bytes().items()))
    return results


if __name__ == "__main__":
    main()
