"""Draft forward throughput on CPU, BF16 vs the FP8 output, as validation runs it (teacher-forced passes).

Usage: python -m benchmarks.throughput BF16_DIR FP8_DIR [--batch B] [--tokens T] [--repeat N] -> JSON on the last line.
A draft without an embedding gets a seeded random [vocab, hidden] one (the target's, in real use).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from eagle3_quant import load_draft


def _embedding(folder: Path, seed: int = 0) -> torch.Tensor | None:
    config = json.loads((folder / "config.json").read_text())
    from eagle3_quant.reading.checkpoint import read_checkpoint

    if any(name.endswith("embed_tokens.weight") for name in read_checkpoint(folder).tensors):
        return None
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(config["vocab_size"], config["hidden_size"], generator=gen) * 0.02).to(torch.bfloat16)


def tokens_per_second(folder: Path, batch: int, tokens: int, repeat: int) -> dict:
    embedding = _embedding(folder)
    draft = load_draft(folder, embedding=embedding)
    del embedding
    cfg = draft.config
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (batch, tokens), generator=gen)
    aux = torch.randn(batch, tokens, 3 * cfg.target_hidden_size, generator=gen).to(draft.dtype)
    seconds = []
    with torch.inference_mode():
        draft(ids, aux)                      # warm-up (allocator, kernels)
        for _ in range(repeat):
            started = time.perf_counter()
            draft(ids, aux)
            seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    return {"tokens_per_s": round(batch * tokens / median, 1), "median_s": round(median, 4),
            "runs_s": [round(s, 4) for s in seconds]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput")
    parser.add_argument("bf16", type=Path)
    parser.add_argument("fp8", type=Path)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    result = {"batch": args.batch, "tokens": args.tokens, "threads": torch.get_num_threads(),
              "bf16": tokens_per_second(args.bf16, args.batch, args.tokens, args.repeat),
              "fp8": tokens_per_second(args.fp8, args.batch, args.tokens, args.repeat)}
    result["fp8_over_bf16"] = round(result["fp8"]["tokens_per_s"] / result["bf16"]["tokens_per_s"], 3)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
