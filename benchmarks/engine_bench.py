"""`python -m benchmarks.engine_bench` (`make bench-engine`): `eagle3-quant bench` on the tiny pair's PTPC artifact in
vLLM's real engine (`make setup-engine`), one measured child process; prints what vLLM measured beside the
prediction and where the wall time went. The artifact is quantized once into the cache folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.auto_choice import PAIR
from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from benchmarks.measure import run_measured
from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME


def tiny_pair_ptpc(cache: Path) -> Path:
    folder = cache / "tiny-pair-ptpc"
    if not (folder / MANIFEST_NAME).is_file():
        from eagle3_quant.quantize.api import quantize_draft

        quantize_draft(PAIR / "draft", folder, device="cpu", force=True)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--artifact", type=Path, default=None, help="default: the tiny pair's PTPC, cached")
    args = parser.parse_args(argv)
    artifact = args.artifact or tiny_pair_ptpc(DEFAULT_CACHE)
    run = run_measured([eagle3_quant_bin(), "bench", str(artifact), "--target", str(PAIR / "target"),
                        "--reference", str(PAIR / "draft"), "--prompts", str(PAIR / "heldout_prompts.safetensors"),
                        "--num-prompts", str(args.num_prompts), "--max-tokens", str(args.max_tokens)])
    report = json.loads((artifact / BENCH_NAME).read_text())
    acc, ratio, predicted = report["acceptance"], report["acceptance_ratio"], report["predicted"] or {}
    print(f"eagle3-quant bench, {report['engine']['distribution']} {report['engine']['version']} on "
          f"{report['engine']['device']}: {args.num_prompts} prompts x {args.max_tokens} tokens, k={report['k']}")
    for name in ("reference", "artifact"):
        print(f"  {name:9s} acceptance length {acc[name]['acceptance_length']:.3f} (vLLM), "
              f"{(predicted.get('acceptance_length') or {}).get(name) or float('nan'):.3f} (predicted)")
    print(f"  ratio {ratio['ratio']:.4f} ({ratio['interval'][0]:.4f}..{ratio['interval'][1]:.4f}); predicted "
          f"{predicted.get('acceptance_ratio') or float('nan'):.4f}; lossless {report['lossless']['lossless']}")
    print(f"  wall {run.wall_s:.0f} s, peak RSS {run.peak_rss_bytes / 1e9:.2f} GB (this process; the engines are its "
          f"children); engine load s: " + ", ".join(f"{k} {v:.0f}" for k, v in report["speed"]["load_s"].items()))


if __name__ == "__main__":
    main()
