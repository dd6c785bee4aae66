"""Calibration tokens/s of both backends on the tiny pair or the real pair (SmolLM2-135M-Instruct, `make real-pair`):
`calibrate_target` with the target in transformers (this process, batched) and in vLLM's engine (`--backend vllm`:
its own Python, one batch), on the same held-out prompts; and how far the two sets are apart.

    python -m benchmarks.calib_backends [--pair tiny|real] [--samples 32] [--seq-len 256] [--generate-tokens 32]

Capture tokens/s leave out the model (engine) load, as `calibrate` reports them; end-to-end tokens/s divide by the
whole call (the engine's start, import and load included). Prints one JSON line. Without an engine environment
the vllm side says why (`make setup-engine`).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAIR = REPO / "tests" / "fixtures" / "tiny_pair"


def heldout_rows(path: Path) -> Path:
    """Text rows from the tiny pair's held-out files (never seen by its tokenizer, target or draft)."""
    import sys

    sys.path.insert(0, str(REPO / "fixtures"))
    from tiny_corpus import Corpus, read_texts

    texts = read_texts(Corpus.stdlib().heldout_files)
    path.write_text("".join(json.dumps({"text": t[i:i + 1500]}) + "\n" for t in texts for i in range(0, 6000, 1500)))
    return path


def compare(a: Path, b: Path) -> dict:
    import torch

    from eagle3_quant.records.calibration import load_calibration

    worst = scale = 0.0
    same_tokens = True
    for x, y in zip(load_calibration(a).samples(), load_calibration(b).samples(), strict=True):
        same_tokens &= torch.equal(x.input_ids, y.input_ids) and torch.equal(x.target_next_ids, y.target_next_ids)
        worst = max(worst, float((x.aux_hidden_states.float() - y.aux_hidden_states.float()).abs().max()))
        scale = max(scale, float(x.aux_hidden_states.float().abs().max()))
    return {"tokens_equal": same_tokens, "max_abs_state_diff": float(f"{worst:.3g}"), "max_abs_state": round(scale, 3)}


def pair_files(pair: str, root: Path) -> tuple[Path, Path, Path]:
    """(target, draft, held-out prompts) of the tiny or the real pair."""
    if pair == "tiny":
        return PAIR / "target", PAIR / "draft", heldout_rows(root / "heldout.jsonl")
    from fixtures.real_pair.draft_files import DRAFT_DIR
    from fixtures.real_pair.prompts import HELDOUT_FILE
    from fixtures.real_pair.target import prepare

    return prepare(), DRAFT_DIR, HELDOUT_FILE


def measure(samples: int, seq_len: int, generate_tokens: int, dtype: str, pair: str = "tiny") -> dict:
    from eagle3_quant.calib.api import calibrate_target

    from eagle3_quant.errors import EngineError

    options = {"num_samples": samples, "seq_len": seq_len, "generate_tokens": generate_tokens, "dtype": dtype}
    report: dict = {"pair": pair, "samples": samples, "seq_len": seq_len,
                    "generate_tokens": generate_tokens, "dtype": dtype}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target, draft, data = pair_files(pair, root)
        for backend in ("transformers", "vllm"):
            try:
                result = calibrate_target(target, draft, data, root / backend, backend=backend, **options)
            except EngineError as exc:
                report[backend] = {"skipped": str(exc)}
                continue
            report[backend] = {"tokens": result.captured_tokens, "tokens_per_s": round(result.tokens_per_second, 1),
                               "end_to_end_tokens_per_s": round(result.captured_tokens / result.seconds, 1),
                               "seconds": round(result.seconds, 1), "capture_seconds": round(result.capture_seconds, 1),
                               **({"engine": result.info.extra["capture_engine"]} if backend == "vllm" else {})}
        if "tokens" in report["vllm"]:
            report["difference"] = compare(root / "transformers", root / "vllm")
    report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return report


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calib_backends")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=256, help="prompt + generated tokens at most")
    parser.add_argument("--generate-tokens", type=int, default=32)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--pair", default="tiny", choices=("tiny", "real"))
    args = parser.parse_args(argv)
    result = measure(args.samples, args.seq_len, args.generate_tokens, args.dtype, args.pair)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
