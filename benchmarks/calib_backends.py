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
import time
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
    differing = next_differing = positions = 0
    for x, y in zip(load_calibration(a).samples(), load_calibration(b).samples(), strict=True):
        same = x.input_ids.shape == y.input_ids.shape and torch.equal(x.input_ids, y.input_ids) and \
            torch.equal(x.target_next_ids, y.target_next_ids)
        differing += not same
        # states compared up to where the two greedy continuations part (bf16 can flip a near-tie)
        n = min(len(x.input_ids), len(y.input_ids))
        shared = int((x.input_ids[:n] == y.input_ids[:n]).long().cumprod(0).sum())
        worst = max(worst, float((x.aux_hidden_states[:shared].float() - y.aux_hidden_states[:shared].float())
                                 .abs().max()) if shared else 0.0)
        next_differing += int((x.target_next_ids[:shared] != y.target_next_ids[:shared]).sum())
        positions += shared
        scale = max(scale, float(x.aux_hidden_states.float().abs().max()))
    return {"tokens_equal": differing == 0, "samples_differing": differing,
            "next_token_positions_differing": f"{next_differing}/{positions}",
            "max_abs_state_diff": float(f"{worst:.3g}"), "max_abs_state": round(scale, 3)}


def import_of_vllms_export(root: Path, target: Path, draft: Path, dtype: str, generate_tokens: int) -> dict:
    """`calibrate --from-dump` of vLLM's own export (its extract_hidden_states files, the draft's layers and the
    final one) of the same prompts: the export's seconds, the import's tokens/s, and how far the imported set is
    from the vllm backend's."""
    from eagle3_quant.calib import vllm_capture
    from eagle3_quant.calib.importer import import_calibration
    from eagle3_quant.calib.options import CalibrationOptions
    from eagle3_quant.calib.target import read_target
    from eagle3_quant.records.calibration import load_calibration
    from eagle3_quant.util.progress import SILENT

    captured = load_calibration(root / "vllm")
    spec = read_target(target)
    layer_ids = (*captured.info.aux_layer_ids, spec.num_layers)
    prompts = {i: tuple(int(t) for t in s.input_ids[:s.generated_from]) for i, s in enumerate(captured.samples())}
    dump = root / "vllm-dump"
    dump.mkdir()
    started = time.perf_counter()
    vllm_capture._run_engine(vllm_capture.find_vllm(None), spec, layer_ids, dtype,
                             CalibrationOptions(generate_tokens=generate_tokens), prompts, dump, SILENT,
                             lambda items, tokens=0: None)
    export_s = time.perf_counter() - started
    started = time.perf_counter()
    result = import_calibration(dump, draft, root / "imported", target=str(target), format="vllm",
                                dump_layer_ids=layer_ids)
    import_s = time.perf_counter() - started
    return {"dump_layer_ids": list(layer_ids), "export_seconds": round(export_s, 1), "samples": result.samples,
            "import_seconds": round(import_s, 2), "import_tokens_per_s": round(result.tokens / import_s, 1),
            "difference_from_vllm_backend": compare(root / "vllm", root / "imported")}


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
            report["from_dump"] = import_of_vllms_export(root, target, draft, dtype, generate_tokens)
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
