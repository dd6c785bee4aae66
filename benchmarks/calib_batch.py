"""How calibration capture speed depends on the batch size: the measurement behind `calibrate`'s default
`--batch-size` (calib/transformers_capture.py DEFAULT_BATCH).

    python -m benchmarks.calib_batch [--target tiny-pair|toy] [--samples 32] [--generate-tokens 64]
                                [--sizes 1,2,4,8,16,32] [--repeat 2] [--threads N]

Captures the same prompts (the tiny real pair's held-out prompts cut to 12..64 tokens: every batch pads) with
`TargetRunner.capture_batch` at each batch size, in alternating order between repeats, torch threads as calibrate
sets them (its machine share, or `--threads`); prints tokens/s (prompt + generated tokens per wall second) and per
CPU second for each size, medians over the repeats, as one JSON line. Model load excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

PAIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tiny_pair"


def _model(target: str):
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM

    if target == "tiny-pair":
        return AutoModelForCausalLM.from_pretrained(PAIR / "target", dtype=torch.float32).eval()
    from fixtures.synthetic_target import TargetShape, write_tiny_target

    with tempfile.TemporaryDirectory() as tmp:   # the bench's toy target: 4 layers, hidden 256
        folder = write_tiny_target(Path(tmp) / "toy", TargetShape(layers=4, hidden=256, intermediate=512, heads=4,
                                                                   kv_heads=2, vocab=512))
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def measure(target: str, samples: int, generate: int, sizes: list[int], repeat: int, threads: int | None) -> dict:
    import torch
    from safetensors.torch import load_file

    from eagle3_quant.calib.capture import TargetRunner
    from eagle3_quant.calib.threads import ThreadShare

    held = load_file(PAIR / "heldout_prompts.safetensors")["prompts"].long()
    gen = torch.Generator().manual_seed(0)
    model = _model(target)
    vocab = model.config.vocab_size
    prompts = [tuple((held[i % len(held), : int(torch.randint(12, 65, (1,), generator=gen))] % vocab).tolist())
               for i in range(samples)]
    runner = TargetRunner(model, (1, 2, 3), torch.float32, None)        # no EOS: every prompt gets `generate`
    share = ThreadShare(threads)
    runner.capture_batch(prompts[:2], 2)                                 # warm-up
    runs: dict[int, list[tuple[float, float]]] = {s: [] for s in sizes}
    for r in range(repeat):
        for size in sizes if r % 2 == 0 else list(reversed(sizes)):
            share.update()
            wall, cpu = time.perf_counter(), time.process_time()
            tokens = sum(int(c.sample.input_ids.numel()) for i in range(0, samples, size)
                         for c in runner.capture_batch(prompts[i:i + size], generate))
            runs[size].append((tokens / (time.perf_counter() - wall), tokens / (time.process_time() - cpu)))
    return {"target": target, "samples": samples, "generate_tokens": generate, "repeat": repeat,
            "threads": share.history, "load_average": [round(x, 2) for x in os.getloadavg()],
            "tokens_per_s": {s: round(statistics.median(w for w, _ in v), 1) for s, v in runs.items()},
            "tokens_per_cpu_s": {s: round(statistics.median(c for _, c in v), 1) for s, v in runs.items()}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calib_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("tiny-pair", "toy"), default="tiny-pair")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--generate-tokens", type=int, default=64)
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    result = measure(args.target, args.samples, args.generate_tokens, [int(s) for s in args.sizes.split(",")],
                     args.repeat, args.threads)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
