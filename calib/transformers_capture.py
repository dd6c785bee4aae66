"""The transformers backend of `calibrate`: the target in this process (`target.load_model`), prompts run in batches
(`capture.TargetRunner.capture_batch`), torch's threads shared with the machine (`threads.ThreadShare`), each
sample written as its batch finishes, progress counted in prompts and tokens."""

from __future__ import annotations

import time

from eagle3_quant.calib.options import CalibrationOptions
from eagle3_quant.calib.target import TargetSpec, load_model
from eagle3_quant.calib.threads import ThreadShare
from eagle3_quant.util.progress import Progress
from eagle3_quant.util.resources import available_memory_bytes

DEFAULT_BATCH = 32          # measured (benchmarks/calib_batch.py): docs/performance.md, "Calibration batch size"
MEMORY_SHARE = 4            # a batch's logits and hidden states may take a quarter of the free memory
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def batch_size(model, longest_prompt: int, dtype: str, asked: int | None) -> int:
    """`asked`, else DEFAULT_BATCH, fewer when one batch's prompt pass (logits [B, T, V] and every layer's hidden
    states [B, T, H], in the model's dtype) would take more than 1/MEMORY_SHARE of the free memory where the
    logits land."""
    if asked is not None:
        return asked
    import torch

    config = model.config.get_text_config()
    per_prompt = longest_prompt * (config.vocab_size + (config.num_hidden_layers + 1) * config.hidden_size) \
        * DTYPE_BYTES[dtype]
    device = model.get_output_embeddings().weight.device
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else available_memory_bytes()
    if free is None:
        return DEFAULT_BATCH
    return max(1, min(DEFAULT_BATCH, free // MEMORY_SHARE // max(per_prompt, 1)))


def aligned_batches(todo: list, size: int, done: int) -> list[list]:
    """`todo` (the prompts after the first `done`) cut where an uninterrupted run cuts them, at multiples of `size`
    counted from the first prompt: a run resumed at a multiple of `size` (the default shard of 64 samples, batches
    of 16) runs the same batches, so it writes the same bytes."""
    cuts = [0, *range(-done % size or size, len(todo), size), len(todo)]
    return [todo[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def capture_with_transformers(spec: TargetSpec, taps: tuple[int, ...], dtype: str, opts: CalibrationOptions,
                              tokenizer, todo: list[tuple[int, ...]], writer, progress: Progress, total: int,
                              done: int) -> tuple[int, int, float, int, int]:
    """Capture `todo` into `writer`: (samples, tokens, seconds, generated tokens, cut generations)."""
    import torch

    from eagle3_quant.calib.capture import TargetRunner

    if not todo:
        return 0, 0, 0.0, 0, 0
    with ThreadShare(opts.threads) as threads:
        model = load_model(spec, dtype, opts.max_memory, opts.trust_remote_code, opts.device)
        eos = tokenizer.eos_token_id
        runner = TargetRunner(model, taps, getattr(torch, dtype), [eos] if eos is not None else None)
        size = batch_size(model, max(len(p) for p in todo), dtype, opts.batch_size)
        progress.say(f"batches of {size} prompts, {threads.threads} torch thread(s)" + (
            "" if threads.fixed else " (the cores no other process is running on, checked between batches)"))
        tokens = generated = cut = 0
        start = time.perf_counter()
        with progress.task("capture", total, done) as advance:
            for batch in aligned_batches(todo, size, done):
                threads.update()
                for captured in runner.capture_batch(batch, opts.generate_tokens):
                    writer.add(captured.sample)
                    n = int(captured.sample.input_ids.numel())
                    tokens, generated, cut = tokens + n, generated + captured.generated, cut + captured.cut
                    advance(1, n)
    return len(todo), tokens, time.perf_counter() - start, generated, cut
