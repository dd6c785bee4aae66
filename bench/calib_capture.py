"""Capture throughput of `calibrate_target` beside a bare transformers run over the same prompts, on the same tiny
random Llama target built in code (CPU or GPU).

    python -m bench.calib_capture --samples 16 --seq-len 256 [--layers 4 --hidden 256] [--generate-tokens 32]

The bare run is what transformers alone costs for the same tokens: one forward per prompt (``model(input_ids)``)
without generated tokens, ``model.generate`` to the same length with them. One `calibrate_target` run first fixes
the prompts, warms everything up and gives calibrate's own end-to-end tokens/s. Then `--repeat` rounds over the
prompts: each prompt is captured as calibrate's loop does (``TargetRunner.capture`` + ``CalibrationWriter.add``)
and run bare right after or before (alternating), so both sides of a prompt share the machine's load of that
moment; a round's ratio is bare seconds / capture seconds over all prompts (same tokens). Reported: the median round
ratio with its spread (min, max), by wall clock and by this process's CPU time (which other sessions' load does
not inflate), and the median tokens/s of each side. With generated tokens it also measures how far the states kept
from the decoding passes are from one full pass over each finished sequence. Prints one JSON line (goal: median
wall ratio >= 0.8). Model loads excluded.
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


def bare_run(model, sample, generate: bool) -> None:
    """The bare transformers work for one captured sample: its prompt generated to its length, or one forward."""
    import torch
    from transformers import GenerationConfig

    ids = sample.input_ids
    with torch.inference_mode():
        if generate and sample.generated_from is not None:
            prompt, new = ids[: sample.generated_from], ids.numel() - sample.generated_from
            config = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
            model.generate(prompt[None], generation_config=config)
        else:
            model(input_ids=ids[None])


def timed(run) -> tuple[float, float]:
    """Wall and CPU seconds of run(): CPU time counts this process's work only, not other sessions' load."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def paired_round(model, runner, writer, samples, generate_tokens: int, bare_first: bool) -> dict[str, float]:
    """One pass over the samples, each captured as `calibrate` does (`TargetRunner.capture` + `writer.add`) and
    run bare, right after one another (which goes first alternates): summed wall and CPU seconds of each side."""
    totals = {"capture_wall": 0.0, "capture_cpu": 0.0, "bare_wall": 0.0, "bare_cpu": 0.0}
    for i, sample in enumerate(samples):
        prompt = tuple(sample.input_ids[: sample.generated_from].tolist()) if generate_tokens else \
            tuple(sample.input_ids.tolist())
        sides = [("bare", lambda s=sample: bare_run(model, s, generate_tokens > 0)),
                 ("capture", lambda p=prompt: writer.add(runner.capture(p, generate_tokens).sample))]
        for side, run in sides if (i % 2 == 0) == bare_first else reversed(sides):
            wall, cpu = timed(run)
            totals[f"{side}_wall"] += wall
            totals[f"{side}_cpu"] += cpu
    return totals


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
    from eagle3_quant.calib.capture import TargetRunner
    from eagle3_quant.calib.format import CalibrationWriter, load_calibration
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fixtures.synthetic import DraftShape, write_synthetic_draft
    from fixtures.synthetic_target import TargetShape, write_tiny_target

    shape = TargetShape(layers=layers, hidden=hidden, intermediate=2 * hidden, heads=4, kv_heads=2, vocab=512,
                        max_positions=max(1024, seq_len + generate_tokens))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = write_tiny_target(root / "target", shape)
        ids = [1, layers // 2, layers - 1]          # distinct for 4 layers and more
        draft = write_synthetic_draft(root / "draft", DraftShape(32, 64, 4, 2, 8, 512, 128, target_hidden=hidden,
                                                                 target_layers=layers), aux_layer_ids=ids)
        rows = [{"text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(seq_len))} for i in range(samples)]
        (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        options = {"num_samples": samples, "seq_len": seq_len + generate_tokens, "generate_tokens": generate_tokens,
                   "dtype": "float32"}
        # calibrate end to end (its capture loop timed by itself): fixes the prompts and warms everything up
        whole = calibrate_target(target, draft, root / "data.jsonl", root / "first", **options)
        captured = list(load_calibration(root / "first").samples())
        tokens = sum(int(s.input_ids.numel()) for s in captured)
        model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
        eos = AutoTokenizer.from_pretrained(target).eos_token_id         # calibrate stops at it: so does the runner
        runner = TargetRunner(model, whole.taps, torch.float32, None if eos is None else [eos])
        bare_run(model, captured[0], generate_tokens > 0)                         # warm-up, untimed
        rounds = [paired_round(model, runner, CalibrationWriter(root / f"paired{n}", whole.info), captured,
                               generate_tokens, n % 2 == 0) for n in range(repeat)]
        difference = decode_vs_full_pass(target, captured, whole.taps) if generate_tokens else None
    ratios = {clock: [r[f"bare_{clock}"] / r[f"capture_{clock}"] for r in rounds if r[f"capture_{clock}"] > 0]
              for clock in ("wall", "cpu")}
    capture_tps = statistics.median(tokens / r["capture_wall"] for r in rounds)
    bare_tps = statistics.median(tokens / r["bare_wall"] for r in rounds)
    return {
        "target": {"layers": layers, "hidden": hidden, "vocab": shape.vocab, "dtype": "float32"},
        "samples": whole.samples, "seq_len": seq_len, "generate_tokens": generate_tokens, "repeat": repeat,
        "tokens": tokens, "generated_tokens": whole.generated_tokens, "bytes": whole.bytes,
        "calibrate_tokens_per_s": round(whole.tokens_per_second, 1),
        "tokens_per_s": round(capture_tps, 1), "bare_tokens": tokens, "bare_tokens_per_s": round(bare_tps, 1),
        "capture_over_bare": spread(ratios["wall"])["median"] if ratios["wall"] else None,
        "ratio_spread": spread(ratios["wall"]) if ratios["wall"] else None,
        "cpu_ratio_spread": spread(ratios["cpu"]) if ratios["cpu"] else None,
        "rounds_s": [{k: round(v, 3) for k, v in r.items()} for r in rounds],
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
    parser.add_argument("--repeat", type=int, default=3, help="rounds over the prompts, each prompt captured and run "
                                                              "bare back to back; the median round ratio is reported")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = measure(args.samples, args.seq_len, args.layers, args.hidden, args.generate_tokens, args.repeat)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
