"""`python -m benchmarks.studies.predictions` (`make bench-predictions`): the offline prediction against vLLM's
engine, prompt by prompt, beside the real pair's bf16, Quark FP8 and Quark MXFP4 targets; and both by kind of
prompt.

For each target, on the same held-out prompts (k=3, greedy):
- the engine: the BF16 draft's acceptance per prompt, from `bench` of the PTPC draft beside that target
  (bench.json's per-prompt counts; the prompts are those of the vLLM capture below, in its order);
- the prediction: the same draft offline, counted over the chains vLLM's decoding walk drafts
  (`runtime.acceptance.engine_walk`), on two captures of the target's states and greedy continuations:
  transformers' (`calibrate`, what `validate --calib` reads; transformers cannot run an MX target on a CPU) and the
  engine's own (`calibrate --backend vllm`).
Each acceptance length comes with its 95% bootstrap interval over prompts; per prompt, engine minus prediction.
Writes benchmarks/results/predictions.json and prints the tables docs/bench.md shows. Captures and artifacts are
cached under benchmarks/cache/predictions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from benchmarks.contenders import eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from benchmarks.studies.quantized_targets import quantized
from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.runtime.acceptance import engine_walk, valid_starts
from eagle3_quant.runtime.drafting import draft_inputs
from fixtures.real_pair.draft_files import DRAFT_DIR, TRAINED_STATES
from fixtures.real_pair.evaluate import sample_kinds
from fixtures.real_pair.prompts import HELDOUT_FILE
from fixtures.real_pair.quantized_targets import prepare as prepare_quantized
from fixtures.real_pair.target import cache_dir, prepare

RESULTS = Path(__file__).resolve().parents[1] / "results" / "predictions.json"
K = 3
RESAMPLES, SEED = 2000, 0
NO_TRANSFORMERS = "transformers runs a Quark MX target through Quark's GPU-only kernels"

Counts = tuple[int, ...]          # (drafts, accepted at position 1, ..., at position k)


def capture(cache: Path, name: str, target: Path, prompts: int, tokens: int, backend: str) -> Path:
    cal = cache / f"calib-{name}-{backend}"
    if not (cal / "calib.json").is_file():
        subprocess.run([eagle3_quant_bin(), "calibrate", str(cal), "--target", str(target), "--draft",
                        str(DRAFT_DIR), "--data", str(HELDOUT_FILE), "--num-samples", str(prompts),
                        "--generate-tokens", str(tokens), "--backend", backend, "--force"], check=True)
    return cal


def engine_counts(artifact: Path, target: Path, prompts_from: Path, prompts: int, tokens: int, kept: Path,
                  reference: Path = DRAFT_DIR) -> list[Counts]:
    """The BF16 reference draft's counts per prompt in vLLM's engine, in the order of `prompts_from`'s samples
    (the bench.json kept as `kept` and reused)."""
    if not kept.is_file():
        subprocess.run([eagle3_quant_bin(), "bench", str(artifact), "--target", str(target), "--reference",
                        str(reference), "--prompts", str(prompts_from), "--num-prompts", str(prompts),
                        "--max-tokens", str(tokens), "--no-predict"], check=True)
        shutil.copyfile(artifact / BENCH_NAME, kept)
    report = json.loads(kept.read_text())
    return [tuple(row) for row in report["acceptance"]["reference"]["per_prompt"]]


def walked(accepted: torch.Tensor, k: int = K) -> Counts:
    return (len(accepted), *(int((accepted >= i + 1).sum()) for i in range(k)))


@torch.no_grad()
def predicted_counts(cal: Path, embedding: Path) -> dict[Counts, Counts]:
    """Per sample, keyed by its prompt's token ids: the draft's counts over the chains vLLM's walk drafts."""
    from eagle3_quant.runtime.loading import load_draft

    draft = load_draft(DRAFT_DIR, dtype=torch.bfloat16, embedding=embedding)
    found = {}
    for s in load_calibration(cal).select(TRAINED_STATES).samples():
        ids, aux, _ = draft_inputs(s.input_ids, s.aux_hidden_states, s.target_next_ids)
        proposals = draft.propose_all(ids, aux, K).target_ids[0]
        starts = valid_starts(s.input_ids, s.target_next_ids, K)
        found[prompt_key(s)] = walked(engine_walk(proposals, s.target_next_ids, starts, s.generated_from - 1))
    return found


def prompt_key(sample) -> Counts:
    return tuple(sample.input_ids[:sample.generated_from].tolist())


def acceptance(rows: list[Counts]) -> dict:
    """Acceptance length and per position over the rows, and the length's bootstrap interval over prompts."""
    table = torch.tensor(rows, dtype=torch.float64)
    drafts, at = table[:, 0], table[:, 1:]
    picks = torch.randint(0, len(rows), (RESAMPLES, len(rows)), generator=torch.Generator().manual_seed(SEED))
    boot = 1.0 + at[picks].sum((1, 2)) / drafts[picks].sum(1)
    low, high = torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return {"acceptance_length": round(1.0 + float(at.sum() / drafts.sum()), 4),
            "interval": [round(low, 4), round(high, 4)],
            "per_position": [round(float(v), 4) for v in at.sum(0) / drafts.sum()],
            "prompts": len(rows), "drafts": int(drafts.sum())}


def per_prompt_gap(engine: list[Counts], predicted: list[Counts]) -> dict:
    """Engine minus prediction: the pooled acceptance lengths' difference with its paired bootstrap interval over
    prompts (both resampled together); per prompt, the mean, the largest and the prompts more than 0.25 apart."""
    gaps = [length(e) - length(p) for e, p in zip(engine, predicted, strict=True)]
    eng, pred = (torch.tensor(rows, dtype=torch.float64) for rows in (engine, predicted))
    picks = torch.randint(0, len(gaps), (RESAMPLES, len(gaps)), generator=torch.Generator().manual_seed(SEED))

    def pooled(table: torch.Tensor, index) -> torch.Tensor:
        return table[index, 1:].sum((-1, -2)) / table[index, 0].sum(-1)

    everyone = torch.arange(len(gaps))
    boot = pooled(eng, picks) - pooled(pred, picks)
    low, high = torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return {"difference": round(float(pooled(eng, everyone) - pooled(pred, everyone)), 4),
            "interval": [round(low, 4), round(high, 4)], "mean": round(sum(gaps) / len(gaps), 4),
            "largest": round(max(gaps, key=abs), 4), "over_0_25": sum(abs(g) > 0.25 for g in gaps)}


def length(row: Counts) -> float:
    return 1.0 + sum(row[1:]) / row[0] if row[0] else float("nan")


def by_kind(kinds: list[str], rows: list[Counts]) -> dict[str, dict]:
    return {kind: acceptance([r for r, k in zip(rows, kinds, strict=True) if k == kind])
            for kind in sorted(set(kinds))}


def study(cache: Path, prompts: int, tokens: int) -> dict:
    bf16 = prepare()
    targets = {"bf16": bf16, **prepare_quantized(bf16, cache_dir())}
    artifact = quantized(cache, "ptpc", [])
    results = {}
    for name, target in targets.items():
        served = capture(cache, name, target, prompts, tokens, "vllm")
        samples = list(load_calibration(served).samples())[:prompts]      # bench's prompts, in its order
        keys = [prompt_key(s) for s in samples]
        engine = engine_counts(artifact, target, served, prompts, tokens, cache / f"bench-{name}.json")
        row = {"engine": acceptance(engine), "predicted": {}, "engine_by_kind": by_kind(sample_kinds(samples, bf16),
                                                                                            engine)}
        for backend in ("transformers", "vllm"):
            if backend == "transformers" and "mx" in name:
                row["predicted"][backend] = {"skipped": NO_TRANSFORMERS}
                continue
            found = predicted_counts(capture(cache, name, target, prompts, tokens, backend), bf16)
            matched = [found.get(key) for key in keys]
            pairs = [(e, p) for e, p in zip(engine, matched, strict=True) if p is not None and p[0] and e[0]]
            row["predicted"][backend] = {**acceptance([p for _, p in pairs]), "matched_prompts": len(pairs),
                                         "engine_on_matched": acceptance([e for e, _ in pairs]),
                                         "per_prompt_gap": per_prompt_gap([e for e, _ in pairs], [p for _, p in pairs]),
                                         "per_prompt": {"engine": [e for e, _ in pairs],
                                                        "predicted": [p for _, p in pairs]}}
        results[name] = row
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "prompts": prompts, "max_tokens": tokens,
                                       "k": K, "command": "make bench-predictions", "targets": results},
                                      indent=1) + "\n")
    return results


def al_text(cell: dict) -> str:
    if "skipped" in cell:
        return "not made: " + cell["skipped"]
    low, high = cell["interval"]
    per = "/".join(f"{p:.2f}" for p in cell["per_position"])
    return f"{cell['acceptance_length']:.3f} ({low:.3f}..{high:.3f}; {per})"


def tables(results: dict) -> Iterable[str]:
    yield "| target | engine AL (95% CI; per position) | predicted, transformers' states | predicted, vLLM's states |"
    yield "|---|---|---|---|"
    for name, row in results.items():
        yield f"| {name} | {al_text(row['engine'])} | {al_text(row['predicted']['transformers'])} | " \
              f"{al_text(row['predicted']['vllm'])} |"
    yield ""
    yield "| target, states | prompts matched | engine - predicted AL (95% CI) | per prompt: mean, largest, " \
          "prompts > 0.25 apart |"
    yield "|---|---|---|---|"
    for name, row in results.items():
        for backend, cell in row["predicted"].items():
            if "skipped" not in cell:
                gap = cell["per_prompt_gap"]
                low, high = gap["interval"]
                yield f"| {name}, {backend} | {cell['matched_prompts']} | {gap['difference']:+.3f} " \
                      f"({low:+.3f}..{high:+.3f}) | {gap['mean']:+.3f}, {gap['largest']:+.3f}, {gap['over_0_25']} |"
    yield ""
    kinds = sorted({kind for row in results.values() for kind in row["engine_by_kind"]})
    yield "| kind | prompts | " + " | ".join(f"engine AL, {name} target" for name in results) + " |"
    yield "|---|---|" + "---|" * len(results)
    for kind in kinds:
        cells = [row["engine_by_kind"].get(kind) for row in results.values()]
        count = next(c["prompts"] for c in cells if c)
        yield f"| {kind} | {count} | " + " | ".join(al_text(c) if c else "" for c in cells) + " |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.predictions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "predictions")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    for line in tables(study(args.cache, args.num_prompts, args.max_tokens)):
        print(line)


if __name__ == "__main__":
    main()
