"""`python -m benchmarks.studies.candidate_draft DIR`: is a newly trained real-pair draft better than the shipped one
in vLLM's engine? Both BF16 drafts' acceptance on the held-out prompts beside the bf16 target, prompt by prompt
(the prompts, order and lengths of `make bench-predictions`, whose bench of the shipped draft is reused), each with
its 95% bootstrap interval, candidate minus shipped with its paired interval, and both by kind of prompt. The
candidate runs as the reference draft of its own PTPC artifact (bench's BF16 side). Writes
benchmarks/results/candidate_draft.json and prints the table."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from benchmarks.studies.predictions import acceptance, al_text, by_kind, capture, engine_counts, per_prompt_gap
from benchmarks.studies.quantized_targets import quantized
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.records.manifest import MANIFEST_NAME
from fixtures.real_pair.evaluate import sample_kinds
from fixtures.real_pair.target import prepare

RESULTS = Path(__file__).resolve().parents[1] / "results" / "candidate_draft.json"


def ptpc(cache: Path, draft: Path) -> Path:
    digest = hashlib.sha256((draft / "model.safetensors").read_bytes()).hexdigest()[:12]
    out = cache / f"candidate-{digest}"
    if not (out / MANIFEST_NAME).is_file():
        subprocess.run([eagle3_quant_bin(), "quantize", str(draft), str(out), "--force"], check=True)
    return out


def study(candidate: Path, cache: Path, prompts: int, tokens: int) -> dict:
    bf16 = prepare()
    served = capture(cache, "bf16", bf16, prompts, tokens, "vllm")
    kinds = sample_kinds(list(load_calibration(served).samples())[:prompts], bf16)
    shipped = engine_counts(quantized(cache, "ptpc", []), bf16, served, prompts, tokens, cache / "bench-bf16.json")
    artifact = ptpc(cache, candidate)
    new = engine_counts(artifact, bf16, served, prompts, tokens, artifact / "bench-bf16.json", reference=candidate)
    results = {"date": time.strftime("%Y-%m-%d"), "candidate": str(candidate), "prompts": prompts,
               "max_tokens": tokens, "shipped": acceptance(shipped), "candidate_draft": acceptance(new),
               "candidate_minus_shipped": per_prompt_gap(new, shipped),
               "by_kind": {"shipped": by_kind(kinds, shipped), "candidate": by_kind(kinds, new)}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    return results


def table(results: dict) -> Iterable[str]:
    gap = results["candidate_minus_shipped"]
    low, high = gap["interval"]
    yield "| kind | prompts | shipped draft, engine AL (95% CI; per position) | candidate |"
    yield "|---|---|---|---|"
    shipped, candidate = results["shipped"], results["candidate_draft"]
    yield f"| all | {shipped['prompts']} | {al_text(shipped)} | {al_text(candidate)} |"
    for kind, cell in results["by_kind"]["shipped"].items():
        yield f"| {kind} | {cell['prompts']} | {al_text(cell)} | {al_text(results['by_kind']['candidate'][kind])} |"
    yield ""
    yield f"candidate - shipped: {gap['difference']:+.3f} ({low:+.3f}..{high:+.3f}); per prompt mean " \
          f"{gap['mean']:+.3f}, largest {gap['largest']:+.3f}, {gap['over_0_25']} prompts more than 0.25 apart"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.candidate_draft",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("candidate", type=Path, help="the newly trained draft's folder")
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "predictions")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    for line in table(study(args.candidate, args.cache, args.num_prompts, args.max_tokens)):
        print(line)


if __name__ == "__main__":
    main()
