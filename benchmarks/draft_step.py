"""`python -m benchmarks.draft_step`: one whole draft step on a GPU, BF16 / PTPC / static per-tensor FP8, eager and
as a CUDA-graph replay (what an engine runs), beside the cost model's bandwidth floor.

A step is ``draft(input_ids, aux_hidden_states, position_ids)`` on one new token per sequence (batch 1/4/16/64,
positions on the device): fc, the decoder layer, the final norm and the lm_head. Each draft is loaded with
``eagle3_quant.load_draft(..., device=...)``; CUDA events, L2 flushed before each call, median
(``validate/gpu_timing.py``). The floor is ``eagle3_quant.cost`` for the very folder timed.

The drafts: a synthetic one of the fixture shape (``fixtures/synthetic.py``) and its artifacts made by
``quantize_draft``: the default PTPC, and ``--scheme fp8`` (static per-tensor) on a small random calibration set.
Made here, the shape keeps its own embedding with a target vocabulary cut to the draft's (``vocab = draft_vocab``):
a step reads one embedding row per token whatever the vocabulary, so its time and floor do not change, and the
Kimi-K2.5-shaped draft is ~2 GB to write instead of ~6 GB. `make gpu-check` passes its own source and PTPC
artifact to :func:`run_step_bench` instead.

On a machine without a CUDA/ROCm GPU it prints why and writes a ``skipped`` record (exit 0): it never passes there.
``status`` is ``passed`` when every variant was timed eager and as a graph, ``failed`` when one could not be; the
issue's goals (for an H200, Kimi-K2.5 shape) are reported with each ratio, ``met`` or not, and decide nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

SHAPES = ("llama3-8b", "kimi-k2.5")
BATCHES = (1, 4, 16, 64)
ITERS = 100
WARMUP = 10
POSITION = 100                      # the new token's position (any; the step attends to itself only)
CALIB_SAMPLES, CALIB_TOKENS = 2, 16
VARIANTS = ("bf16", "ptpc", "fp8_static")
GOALS = (  # the goals for an H200 and the Kimi-K2.5 shape: (key of the ratio, at most, what it says)
    ("ptpc_over_bf16", 1.0, "PTPC step <= 1.0x BF16 (graph)"),
    ("fp8_static_over_bf16", 0.85, "static per-tensor FP8 step <= 0.85x BF16 (graph)"),
    ("bf16_over_floor", 1.5, "BF16 step <= 1.5x the cost model's floor (graph)"),
)


def run_step_bench(shape: str, source: Path | None = None, artifact: Path | None = None, device: str | None = None,
                   *, batches: tuple[int, ...] = BATCHES, out_json: Path | None = None, workdir: Path | None = None,
                   iters: int = ITERS) -> dict:
    """The step record of one shape: made here unless `source` (BF16) and `artifact` (its PTPC) are given; the
    static artifact is always made here. Written to `out_json` too when given."""
    import torch

    started = time.perf_counter()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        record = skipped_record(shape, f"needs a CUDA/ROCm GPU (device {device!r}; torch.cuda.is_available() is "
                                       f"{torch.cuda.is_available()}): a step's time on a CPU says nothing of an "
                                       "engine's")
    else:
        with tempfile.TemporaryDirectory(prefix="eagle3-step-", dir=workdir) as tmp:
            folders, setup = build_drafts(shape, Path(tmp), device, source, artifact)
            record = measure_drafts(shape, folders, device, batches, iters)
            record["setup_s"] = setup
    record["seconds"] = round(time.perf_counter() - started, 1)
    if out_json is not None:
        out_json.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
    return record


def skipped_record(shape: str, reason: str) -> dict:
    return {"benchmark": "draft_step", "shape": shape, "status": "skipped", "reason": reason,
            "summary": f"skipped: {reason}", "table": []}


def build_drafts(shape: str, work: Path, device: str, source: Path | None = None, ptpc: Path | None = None,
                 ) -> tuple[dict[str, Path], dict[str, float]]:
    """{bf16, ptpc, fp8_static} folders, and the seconds each took to make."""
    from eagle3_quant.quantize.api import quantize_draft
    from fixtures.synthetic import SHAPES as FIXTURE_SHAPES

    setup: dict[str, float] = {}
    clock = time.perf_counter()
    dims = FIXTURE_SHAPES[shape]
    if source is None:
        source = write_step_source(shape, work / "bf16")
        setup["bf16"] = round(time.perf_counter() - clock, 1)
    if ptpc is None:
        clock = time.perf_counter()
        ptpc = quantize_draft(source, work / "ptpc", device=device).output
        setup["ptpc"] = round(time.perf_counter() - clock, 1)
    clock = time.perf_counter()
    calib = write_calibration(source, work / "calib", dims.target_layers)
    static = quantize_draft(source, work / "fp8_static", scheme="fp8", calib=calib, device=device).output
    setup["fp8_static"] = round(time.perf_counter() - clock, 1)
    return {"bf16": Path(source), "ptpc": Path(ptpc), "fp8_static": static}, setup


def write_step_source(shape: str, folder: Path) -> Path:
    """A synthetic BF16 draft of `shape` whose target vocabulary is cut to the draft's, with its own embedding: a step
    reads one embedding row either way, so time and floor are the same, and a Kimi-K2.5 shape is ~2.4 GB, not ~6."""
    from fixtures.synthetic import SHAPES as FIXTURE_SHAPES
    from fixtures.synthetic import write_synthetic_draft

    dims = FIXTURE_SHAPES[shape]
    return write_synthetic_draft(folder, replace(dims, vocab=dims.draft_vocab, with_embedding=True))


def write_calibration(source: Path, folder: Path, target_layers: int, seed: int = 0) -> Path:
    """A small random calibration set for `source` (its tap ids, widths and vocabulary; the target's depth recorded):
    enough for static input scales of the right shape, which is all a timing needs. A source without an embedding
    gets a random target embedding beside it (``folder/target``), which the set names."""
    import torch
    from safetensors.torch import save_file

    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.reading.layout import EMBEDDING_NAMES
    from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter

    draft = read_draft(source)
    config = draft.config
    gen = torch.Generator().manual_seed(seed)
    target = Path(source)
    if not any(name in draft.checkpoint.tensors for name in EMBEDDING_NAMES):
        target = folder / "target"
        target.mkdir(parents=True)
        embedding = torch.randn(config.vocab_size, config.hidden_size, generator=gen).mul_(0.02)
        save_file({"model.embed_tokens.weight": embedding.to(torch.bfloat16)}, target / "model.safetensors")
    info = CalibrationInfo(target=str(target), aux_layer_ids=tuple(config.aux_layer_ids or ()),
                           target_hidden_size=config.target_hidden_size, source="benchmarks.draft_step (random)",
                           extra={"target_layers": target_layers})
    writer = CalibrationWriter(folder / "set", info, shard_samples=CALIB_SAMPLES)
    for _ in range(CALIB_SAMPLES):
        ids = torch.randint(0, config.vocab_size, (CALIB_TOKENS,), generator=gen)
        aux = torch.randn(CALIB_TOKENS, config.num_aux * config.target_hidden_size, generator=gen)
        writer.add(CalibrationSample(ids, aux.to(torch.bfloat16), torch.roll(ids, -1)))
    writer.flush()
    return folder / "set"


def measure_drafts(shape: str, folders: dict[str, Path], device: str, batches: tuple[int, ...], iters: int) -> dict:
    import torch

    from eagle3_quant.cost import checkpoint_cost
    from eagle3_quant.runtime import fp8_fused
    from eagle3_quant.validate.gpu_timing import device_profile

    name = torch.cuda.get_device_name(torch.device(device))
    profile = device_profile(name)
    variants = {}
    for variant, folder in folders.items():
        entry = measure_variant(folder, device, batches, iters)
        if profile is not None:
            cost = checkpoint_cost(folder)
            entry["floor_ms"] = (cost.bf16 if variant == "bf16" else cost.written).floor_ms(profile)
        variants[variant] = entry
    record = {"benchmark": "draft_step", "shape": shape, "device": name, "torch": torch.__version__,
              "batches": list(batches), "iters": iters, "device_profile": profile.name if profile else None,
              "quant_method": fp8_fused.quant_method(device), "quant_fallbacks": dict(fp8_fused.FAILURES),
              "variants": variants,
              "timing": f"CUDA events, median of {iters} after {WARMUP} warm-ups, L2 flushed before each; graph: "
                        "the step captured once as a torch.cuda.CUDAGraph and replayed"}
    return {**record, **summarize(record)}


def measure_variant(folder: Path, device: str, batches: tuple[int, ...], iters: int) -> dict:
    """eager_ms and graph_ms by batch size of one draft folder (graph_error instead when capture fails)."""
    import torch

    from eagle3_quant import load_draft
    from eagle3_quant.validate.gpu_timing import eager_ms, graph_ms

    draft = load_draft(folder, device=device)
    if draft.embedding_weight is None:      # the target's in use: a random one, made on the device
        c = draft.config
        draft.set_embedding(torch.randn(c.vocab_size, c.hidden_size, device=device).mul_(0.02).to(draft.dtype))
    entry: dict = {"folder": folder.name, "eager_ms": {}, "graph_ms": {}}
    gen = torch.Generator().manual_seed(0)
    width = draft.spec.num_aux * draft.config.target_hidden_size
    with torch.no_grad():
        for batch in batches:
            ids = torch.randint(0, draft.config.vocab_size, (batch, 1), generator=gen).to(device)
            aux = torch.randn(batch, 1, width, generator=gen).to(device, torch.bfloat16)
            positions = torch.full((batch, 1), POSITION, dtype=torch.long, device=device)

            def step(ids=ids, aux=aux, positions=positions, model=draft):
                return model(ids, aux, positions)

            entry["eager_ms"][str(batch)] = eager_ms(step, iters, WARMUP)
            try:
                entry["graph_ms"][str(batch)] = graph_ms(step, iters, WARMUP)
            except Exception as exc:    # say why capture failed (as the H200 run saw), keep measuring
                entry.setdefault("graph_error", {})[str(batch)] = f"{type(exc).__name__}: {str(exc)[:300]}"
    del draft
    torch.cuda.empty_cache()
    return entry


def summarize(record: dict) -> dict:
    """status, ratios, goals, summary and table from the measured numbers (no GPU needed)."""
    batches = [str(b) for b in record["batches"]]
    variants = record["variants"]
    complete = all(set(v.get("graph_ms", {})) == set(batches) == set(v.get("eager_ms", {}))
                   for v in variants.values())

    def over(key: str, bottom: dict[str, float | None]) -> dict[str, float | None]:
        top = variants.get(key, {}).get("graph_ms", {})
        return {b: top[b] / bottom[b] if b in top and bottom.get(b) else None for b in batches}

    bf16 = variants.get("bf16", {}).get("graph_ms", {})
    floor = variants.get("bf16", {}).get("floor_ms")
    ratios = {"ptpc_over_bf16": over("ptpc", bf16), "fp8_static_over_bf16": over("fp8_static", bf16),
              "bf16_over_floor": over("bf16", dict.fromkeys(batches, floor))}
    goals = [{"goal": text, "at_most": limit, "values": ratios[key],
              "met": all(v is not None and v <= limit for v in ratios[key].values())} for key, limit, text in GOALS]

    def spread(values: dict) -> str:
        found = [v for v in values.values() if v is not None]
        return f"{min(found):.2f}-{max(found):.2f}x" if found else "-"

    graph = "; ".join(f"{v} " + "/".join(f"{variants[v]['graph_ms'].get(b, float('nan')):.3f}" for b in batches)
                      for v in VARIANTS if v in variants)
    summary = (f"graph step ms at batch {'/'.join(batches)}: {graph}; PTPC/BF16 {spread(ratios['ptpc_over_bf16'])}, "
               f"static/BF16 {spread(ratios['fp8_static_over_bf16'])}, BF16/floor "
               f"{spread(ratios['bf16_over_floor'])}; goals met {sum(g['met'] for g in goals)}/{len(goals)}")
    return {"status": "passed" if complete else "failed", "ratios": ratios, "goals": goals, "summary": summary,
            "table": table(record)}


def table(record: dict) -> list[str]:
    batches = [str(b) for b in record["batches"]]
    cells = " ".join(f"{'b' + b:>7}" for b in batches)
    lines = [f"{record['shape']:<10} {'variant':<10} {'floor ms':>8} | eager ms {cells} | graph ms {cells}"]
    for name in VARIANTS:
        v = record["variants"].get(name)
        if v is None:
            continue
        floor = f"{v['floor_ms']:8.3f}" if v.get("floor_ms") is not None else f"{'-':>8}"
        eager = " ".join(f"{v['eager_ms'][b]:7.3f}" if b in v["eager_ms"] else f"{'-':>7}" for b in batches)
        graph = " ".join(f"{v['graph_ms'][b]:7.3f}" if b in v["graph_ms"] else f"{'fail':>7}" for b in batches)
        lines.append(f"{'':<10} {name:<10} {floor} |          {eager} |          {graph}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.draft_step", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, from: {', '.join(SHAPES)}")
    parser.add_argument("--device", default=None, help="cuda, cuda:1, ... (default: the first GPU)")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)), help="batch sizes (sequences)")
    parser.add_argument("--iters", type=int, default=ITERS, help="timed calls per median")
    parser.add_argument("--json", type=Path, default=None, help="write the records here")
    args = parser.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; valid: {', '.join(SHAPES)}")
    batches = tuple(int(b) for b in args.batches.split(",") if b)
    records = {shape: run_step_bench(shape, device=args.device, batches=batches, iters=args.iters)
               for shape in shapes}
    for record in records.values():
        print("\n".join(record["table"]) if record["table"] else f"{record['shape']}: {record['summary']}")
        if record["status"] != "skipped":
            print(f"  {record['status']}: {record['summary']}")
    if args.json is not None:
        args.json.write_text(json.dumps({"benchmark": "draft_step", "records": records}, indent=1,
                                        allow_nan=False) + "\n")
        print(f"wrote {args.json}")
    return 1 if any(r["status"] == "failed" for r in records.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
