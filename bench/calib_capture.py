"""Capture throughput of `calibrate_target` beside a bare transformers run over the same prompts, on the same tiny
random Llama target built in code (CPU or GPU).

    python -m bench.calib_capture --samples 16 --seq-len 256 [--layers 4 --hidden 256] [--generate-tokens 32]

The bare run is what transformers alone costs for the same tokens: one forward per prompt (``model(input_ids)``)
without generated tokens, ``model.generate`` to the same length with them. Everything runs warm in this process (an
untimed forward, an untimed capture that fixes the prompts and an untimed bare run first), model loads excluded.
Then `--repeat` pairs of one bare run and one capture, alternating which goes first: the two runs of a pair share
the machine's load, so the ratio of each pair is what is compared; the median ratio and its spread (min, max) are
reported, with the median tokens/s of each side. With generated tokens it also measures how far the states kept
from the decoding passes are from one full pass over each finished sequence. Prints one JSON line (goal: median
capture / bare >= 0.8).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

WORDS = ("the draft model reads three hidden states of the target and proposes the next tokens while the "
         "target verifies them in one pass which makes decoding faster when most proposals are accepted").split()
GOAL = 0.8


def bare_seconds(model, samples, generate: bool) -> tuple[float, int]:
    """Seconds and tokens of the bare transformers run: the captured prompts, generated to the captured length."""
    import torch
    from transformers import GenerationConfig

    tokens, seconds = 0, 0.0
    with torch.inference_mode():
        for sample in samples:
            ids = sample.input_ids
            started = time.perf_counter()
            if generate and sample.generated_from is not None:
                prompt, new = ids[: sample.generated_from], ids.numel() - sample.generated_from
                config = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
                out = model.generate(prompt[None], generation_config=config)
                tokens += int(out.shape[1])
            else:
                model(input_ids=ids[None])
                tokens += int(ids.numel())
            seconds += time.perf_counter() - started
    return seconds, tokens


def decode_vs_full_pass(target: Path, samples, taps: tuple[int, ...]) -> dict:
    """How far the states kept from the decoding passes are from one full pass over each finished sequence."""
    import torch
    from eagle3_quant.calib.capture import TargetRunner
    from transformers import AutoModelForCausalLM

    runner = TargetRunner(AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval(), taps,
                          torch.float32)
    diff = scale = 0.0
    agree = total = 0
    for sample in samples:
        aux, next_ids = runner.forward(sample.input_ids)
        diff = max(diff, float((aux - sample.aux_hidden_states.float()).abs().max()))
        scale = max(scale, float(aux.abs().max()))
        agree, total = agree + int((next_ids == sample.target_next_ids).sum()), total + int(next_ids.numel())
    return {"max_abs_diff": float(f"{diff:.3g}"), "max_abs_state": round(scale, 3),
            "next_token_agreement": round(agree / total, 5) if total else None}


def spread(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 3), "min": round(ordered[0], 3),
            "max": round(ordered[-1], 3)}


def measure(samples: int, seq_len: int, layers: int, hidden: int, generate_tokens: int, repeat: int = 5) -> dict:
    import torch
    from eagle3_quant.calib.api import calibrate_target
    from eagle3_quant.calib.format import load_calibration
    from transformers import AutoModelForCausalLM

    from fixtures.synthetic import DraftShape, write_synthetic_draft
    from fixtures.synthetic_target import TargetShape, write_tiny_target

    shape = TargetShape(layers=layers, hidden=hidden, intermediate=2 * hidden, heads=4, kv_heads=2, vocab=512,
                        max_positions=max(1024, seq_len + generate_tokens))
    generate = generate_tokens > 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = write_tiny_target(root / "target", shape)
        ids = [1, layers // 2, layers - 1]          # distinct for 4 layers and more
        draft = write_synthetic_draft(root / "draft", DraftShape(32, 64, 4, 2, 8, 512, 128, target_hidden=hidden,
                                                                 target_layers=layers), aux_layer_ids=ids)
        rows = [{"text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(seq_len))} for i in range(samples)]
        (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
        with torch.inference_mode():
            model(input_ids=torch.arange(seq_len)[None] % shape.vocab)        # warm-up, untimed
        options = {"num_samples": samples, "seq_len": seq_len + generate_tokens, "generate_tokens": generate_tokens,
                   "dtype": "float32"}
        first = calibrate_target(target, draft, root / "data.jsonl", root / "first", **options)   # prompts, untimed
        captured = list(load_calibration(root / "first").samples())
        bare_tokens = sum(int(s.input_ids.numel()) for s in captured)
        bare_seconds(model, captured, generate)                                # warm-up, untimed
        bare_runs, results = [], []
        for n in range(repeat):          # pairs, alternating which runs first: each pair shares the machine's load
            pair = [lambda: bare_runs.append(bare_seconds(model, captured, generate)[0]),
                    lambda n=n: results.append(calibrate_target(target, draft, root / "data.jsonl", root / f"cal{n}",
                                                                **options))]
            for run in pair if n % 2 == 0 else reversed(pair):
                run()
        forward_s = bare_seconds(model, captured, False)[0] if generate else None
        difference = decode_vs_full_pass(target, captured, first.taps) if generate else None
    ratios = [r.tokens_per_second / (bare_tokens / b) for r, b in zip(results, bare_runs, strict=True) if b > 0]
    capture_tps = [r.tokens_per_second for r in results]
    bare_tps = [bare_tokens / b for b in bare_runs if b > 0]
    result = results[0]
    ratio = spread(ratios)["median"] if ratios else None
    return {
        "target": {"layers": layers, "hidden": hidden, "vocab": shape.vocab, "dtype": "float32"},
        "samples": result.samples, "seq_len": seq_len, "generate_tokens": generate_tokens, "repeat": repeat,
        "tokens": result.tokens, "generated_tokens": result.generated_tokens, "bytes": result.bytes,
        "tokens_per_s": round(statistics.median(capture_tps), 1), "bare_tokens": bare_tokens,
        "bare_tokens_per_s": round(statistics.median(bare_tps), 1) if bare_tps else 0.0,
        "capture_runs_s": [round(r.capture_seconds, 3) for r in results],
        "bare_runs_s": [round(b, 3) for b in bare_runs],
        "capture_over_bare": ratio, "ratio_spread": spread(ratios) if ratios else None,
        # with generated tokens: a forward alone over the finished sequences (no decoding), for scale
        "bare_forward_tokens_per_s": round(bare_tokens / forward_s, 1) if forward_s else None,
        "decode_vs_full_pass": difference,
        "goal": GOAL, "torch_threads": torch.get_num_threads(), "load_average": [round(x, 2) for x in os.getloadavg()],
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.calib_capture")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256, help="prompt tokens (generated ones come on top)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--generate-tokens", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--repeat", type=int, default=5, help="capture/bare pairs; the median ratio is reported")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = measure(args.samples, args.seq_len, args.layers, args.hidden, args.generate_tokens, args.repeat)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
