"""Capture throughput of `calibrate_target` on a tiny random Llama target built in code (CPU or GPU).

    python -m bench.calib_capture --samples 64 --seq-len 256 [--layers 4 --hidden 64] [--generate-tokens 32]

Prints one JSON line: tokens captured, capture seconds (model load excluded), tokens/s, bytes written.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

WORDS = ("the draft model reads three hidden states of the target and proposes the next tokens while the "
         "target verifies them in one pass which makes decoding faster when most proposals are accepted").split()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--generate-tokens", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()

    import torch
    from eagle3_quant.calib.api import calibrate_target

    from fixtures.synthetic import DraftShape, write_synthetic_draft
    from fixtures.synthetic_target import TargetShape, write_tiny_target

    if args.threads:
        torch.set_num_threads(args.threads)
    shape = TargetShape(layers=args.layers, hidden=args.hidden, intermediate=2 * args.hidden, heads=4, kv_heads=2,
                        vocab=512, max_positions=max(1024, args.seq_len))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = write_tiny_target(root / "target", shape)
        ids = [1, args.layers // 2, args.layers - 2]
        draft = write_synthetic_draft(root / "draft", DraftShape(32, 64, 4, 2, 8, 512, 128, target_hidden=args.hidden,
                                                                 target_layers=args.layers), aux_layer_ids=ids)
        words = args.seq_len  # byte-level BPE on this corpus: about one token a word or more, then truncated
        rows = [{"text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))} for i in range(args.samples)]
        (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        started = time.perf_counter()
        result = calibrate_target(target, draft, root / "data.jsonl", root / "cal", num_samples=args.samples,
                                  seq_len=args.seq_len, generate_tokens=args.generate_tokens, dtype="float32")
        wall = time.perf_counter() - started
    print(json.dumps({
        "target": {"layers": args.layers, "hidden": args.hidden, "vocab": shape.vocab, "dtype": "float32"},
        "samples": result.samples, "seq_len": args.seq_len, "generate_tokens": args.generate_tokens,
        "tokens": result.tokens, "generated_tokens": result.generated_tokens,
        "cut_generations": result.cut_generations, "capture_s": round(result.capture_seconds, 3),
        "tokens_per_s": round(result.tokens_per_second, 1), "wall_s": round(wall, 2), "bytes": result.bytes,
        "torch_threads": torch.get_num_threads(), "device": "cuda" if torch.cuda.is_available() else "cpu",
    }))


if __name__ == "__main__":
    main()
