"""Capture throughput of `calibrate_target` beside a bare transformers `generate` over the same prompts and tokens, on
a tiny random Llama target built in code (CPU or GPU).

    python -m benchmarks.calib_capture --samples 16 --seq-len 256 [--layers 4 --hidden 256] [--generate-tokens 32]
                                  [--batch-size N] [--threads N] [--repeat 3]

One `calibrate_target` run with the default options (batch size, threads) first fixes the prompts, warms everything
up and gives calibrate's own end-to-end tokens/s (`calibrate_tokens_per_s`, model load excluded). Then `--repeat`
rounds over the prompts in calibrate's batches (`--batch-size`, default calibrate's): each batch is captured as
calibrate's loop does it (`TargetRunner.capture_batch` + `CalibrationWriter.add`) and run bare right before or after
it (alternating), so both sides share the machine's load of that moment. Bare is `model.generate` of the batch
(left-padded, attention mask) to the same lengths, or with `--generate-tokens 0` one forward of it; the same work
at batch 1 (a loop over the prompts) is timed once per round too. A round's ratio is capture seconds / bare seconds
(same prompts, same tokens). Reported: the median round ratio and its spread (min, max), by wall clock and by this
process's CPU time, and each side's median tokens/s. With generated tokens it also measures how far the states kept
from the decoding passes are from one full pass over each finished sequence. Prints one JSON line (goal: calibrate
within `GOAL`x of the bare batched generate). Model loads excluded.
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
GOAL = 1.5                   # calibrate's capture at most 1.5x the time of a bare generate of the same tokens


TOY_VOCAB = 512


def toy_inputs(root: Path, samples: int, seq_len: int, layers: int, hidden: int, generate: int) -> tuple[Path, ...]:
    """(target, draft, data) in `root`: a random Llama target of `layers` x `hidden`, a draft for it, and `samples`
    text prompts of four lengths up to `seq_len` tokens (batches pad)."""
    from fixtures.synthetic import DraftShape, write_synthetic_draft
    from fixtures.synthetic_target import TargetShape, write_tiny_target

    shape = TargetShape(layers=layers, hidden=hidden, intermediate=2 * hidden, heads=4, kv_heads=2, vocab=TOY_VOCAB,
                        max_positions=max(1024, seq_len + generate))
    target = write_tiny_target(root / "target", shape)
    ids = [1, layers // 2, layers - 1]          # distinct for 4 layers and more
    draft = write_synthetic_draft(root / "draft", DraftShape(32, 64, 4, 2, 8, TOY_VOCAB, 128, target_hidden=hidden,
                                                             target_layers=layers), aux_layer_ids=ids)
    rows = [{"text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(seq_len - 8 * (i % 4)))}
            for i in range(samples)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return target, draft, root / "data.jsonl"


def bare_run(model, samples, generate: bool) -> None:
    """The bare transformers work for captured samples: their prompts generated to their lengths (one left-padded
    batch), or one forward of their tokens."""
    import torch
    from transformers import GenerationConfig

    from eagle3_quant.calib.capture import _left_padded

    with torch.inference_mode():
        if generate and all(s.generated_from is not None for s in samples):
            prompts = [tuple(s.input_ids[: s.generated_from].tolist()) for s in samples]
            new = max(s.input_ids.numel() - s.generated_from for s in samples)
            ids, mask, _, _ = _left_padded(prompts, model.device)
            config = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
            model.generate(ids, attention_mask=mask, generation_config=config)
        else:
            ids, mask, positions, _ = _left_padded([tuple(s.input_ids.tolist()) for s in samples], model.device)
            model(input_ids=ids, attention_mask=mask, position_ids=positions)


def timed(run) -> tuple[float, float]:
    """Wall and CPU seconds of run(): CPU time counts this process's work only, not other sessions' load."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def paired_round(model, runner, writer, samples, generate_tokens: int, size: int, bare_first: bool) -> dict:
    """One pass over the samples in batches of `size`, each captured as `calibrate` does (`capture_batch` +
    `writer.add`) and run bare, back to back (which goes first alternates); then bare again at batch 1."""
    totals = {"capture_wall": 0.0, "capture_cpu": 0.0, "bare_wall": 0.0, "bare_cpu": 0.0}
    batches = [samples[i:i + size] for i in range(0, len(samples), size)]
    for i, batch in enumerate(batches):
        prompts = [tuple(s.input_ids[: s.generated_from].tolist()) if generate_tokens else tuple(s.input_ids.tolist())
                   for s in batch]

        def capture(prompts=prompts):
            for captured in runner.capture_batch(prompts, generate_tokens):
                writer.add(captured.sample)

        sides = [("bare", lambda b=batch: bare_run(model, b, generate_tokens > 0)), ("capture", capture)]
        for side, run in sides if (i % 2 == 0) == bare_first else reversed(sides):
            wall, cpu = timed(run)
            totals[f"{side}_wall"] += wall
            totals[f"{side}_cpu"] += cpu
    totals["bare_batch1_wall"] = timed(lambda: [bare_run(model, [s], generate_tokens > 0) for s in samples])[0]
    return totals


def decode_vs_full_pass(target: Path, samples, taps: tuple[int, ...]) -> dict:
    """How far the states kept from the decoding passes are from one full pass over each finished sequence."""
    import torch
    from transformers import AutoModelForCausalLM

    from eagle3_quant.calib.capture import TargetRunner

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


def measure(samples: int, seq_len: int, layers: int, hidden: int, generate_tokens: int, repeat: int = 3,
            batch_size: int | None = None, threads: int | None = None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eagle3_quant.calib.api import calibrate_target
    from eagle3_quant.calib.capture import TargetRunner
    from eagle3_quant.calib.threads import ThreadShare
    from eagle3_quant.calib.transformers_capture import batch_size as default_batch
    from eagle3_quant.records.calibration import CalibrationWriter, load_calibration

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target, draft, data = toy_inputs(root, samples, seq_len, layers, hidden, generate_tokens)
        options = {"num_samples": samples, "seq_len": seq_len + generate_tokens, "generate_tokens": generate_tokens,
                   "dtype": "float32", "threads": threads}
        # calibrate end to end, default options (its capture loop timed by itself): fixes the prompts, warms up
        whole = calibrate_target(target, draft, data, root / "first", **options)
        captured = list(load_calibration(root / "first").samples())
        tokens = sum(int(s.input_ids.numel()) for s in captured)
        share = ThreadShare(threads)                                 # as calibrate shares the machine
        model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
        size = batch_size or default_batch(model, max(int(s.input_ids.numel()) for s in captured), "float32", None)
        eos = AutoTokenizer.from_pretrained(target).eos_token_id         # calibrate stops at it: so does the runner
        runner = TargetRunner(model, whole.taps, torch.float32, None if eos is None else [eos])
        bare_run(model, captured[:size], generate_tokens > 0)                   # warm-up, untimed
        rounds = []
        for n in range(repeat):
            share.update()
            rounds.append(paired_round(model, runner, CalibrationWriter(root / f"paired{n}", whole.info), captured,
                                       generate_tokens, size, n % 2 == 0))
        difference = decode_vs_full_pass(target, captured, whole.taps) if generate_tokens else None
    ratios = {clock: [r[f"capture_{clock}"] / r[f"bare_{clock}"] for r in rounds if r[f"bare_{clock}"] > 0]
              for clock in ("wall", "cpu")}
    median_tps = {side: statistics.median(tokens / r[f"{side}_wall"] for r in rounds)
                  for side in ("capture", "bare", "bare_batch1")}
    return {
        "target": {"layers": layers, "hidden": hidden, "vocab": TOY_VOCAB, "dtype": "float32"},
        "samples": whole.samples, "seq_len": seq_len, "generate_tokens": generate_tokens, "repeat": repeat,
        "batch_size": size, "tokens": tokens, "generated_tokens": whole.generated_tokens, "bytes": whole.bytes,
        "calibrate_tokens_per_s": round(whole.tokens_per_second, 1),
        "tokens_per_s": round(median_tps["capture"], 1), "bare_tokens": tokens,
        "bare_tokens_per_s": round(median_tps["bare"], 1),
        "bare_batch1_tokens_per_s": round(median_tps["bare_batch1"], 1),
        "capture_over_bare": spread(ratios["wall"])["median"] if ratios["wall"] else None,
        "ratio_spread": spread(ratios["wall"]) if ratios["wall"] else None,
        "cpu_ratio_spread": spread(ratios["cpu"]) if ratios["cpu"] else None,
        "rounds_s": [{k: round(v, 3) for k, v in r.items()} for r in rounds],
        "decode_vs_full_pass": difference,
        "goal": GOAL, "torch_threads": torch.get_num_threads(), "load_average": [round(x, 2) for x in os.getloadavg()],
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calib_capture")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256, help="prompt tokens (generated ones come on top)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--generate-tokens", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=None, help="default: calibrate's own default")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: calibrate's sharing)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds over the prompts, each batch captured and run "
                                                              "bare back to back; the median round ratio is reported")
    args = parser.parse_args(argv)
    result = measure(args.samples, args.seq_len, args.layers, args.hidden, args.generate_tokens, args.repeat,
                     args.batch_size, args.threads)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
