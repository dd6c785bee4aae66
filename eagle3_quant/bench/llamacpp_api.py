"""`bench_gguf` (`eagle3-quant bench OUT --engine llamacpp`): the target in llama.cpp's own server three ways on the
same prompts - no draft, the BF16 draft, OUT's GGUF draft - greedy; llama.cpp's own counters say how well each draft
drafts, its greedy outputs say whether the drafts change the text, and interleaved timed repetitions say how fast
each runs: on a CPU llama.cpp's speed is the real thing. Where a step's time goes comes from llama.cpp's timings
(the draft's drafting time, llama-bench's verify batch); the toolkit's cycle model, fed those costs, is set beside
the measured speedup. Writes OUT/bench.json (`records/llamacpp_bench.py`) atomically at the end.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from eagle3_quant.bench.llamacpp_inputs import (
    GgufArtifact,
    check_draft_gguf,
    check_pair,
    open_gguf_artifact,
    reference_gguf,
    target_gguf,
    target_spec,
    tokenizer_target,
)
from eagle3_quant.bench.llamacpp_options import LlamaCppBenchOptions
from eagle3_quant.bench.llamacpp_run import DRAFTS, Measured, first_pass, timed_passes
from eagle3_quant.bench.llamacpp_stats import depth, draft_step, lossless, prompt_counts, speed_ratio, token_ms
from eagle3_quant.bench.prompts import load_prompts
from eagle3_quant.bench.stats import engine_acceptance, paired_ratio
from eagle3_quant.engines.llamacpp.gguf_files import GgufFile
from eagle3_quant.engines.llamacpp.llama_bench import step_cost
from eagle3_quant.engines.llamacpp.server import LlamaServer, ServerSpec
from eagle3_quant.engines.llamacpp.tools import LlamaCppTools, find_tools
from eagle3_quant.options import build_options
from eagle3_quant.records.bench_run import DraftPair, EngineRatio, Lossless, Prediction, PromptsRecord, output_digest
from eagle3_quant.records.llamacpp_bench import (
    ENGINE_NAME,
    Breakdown,
    LlamaCppBenchRun,
    SlotsSpeed,
    SpeedModel,
    SpeedRatio,
    StepCost,
)
from eagle3_quant.records.public_names import public_name
from eagle3_quant.util.outdir import scratch_for
from eagle3_quant.util.progress import SILENT, Progress

SAMPLING = "greedy (temperature 0, top-k 1, ignore_eos, cache_prompt off)"
LONG_PROMPTS = 4               # prompts timed at the long context
CONTEXT_SLACK = 16


@dataclass(frozen=True)
class LlamaCppBenchResult:
    path: Path
    record: LlamaCppBenchRun

    @property
    def report(self) -> dict:
        return self.record.to_dict()


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"cpu ({line.split(':', 1)[1].strip()})"
    except OSError:
        pass
    return f"cpu ({platform.processor() or platform.machine()})"


def _long_prompts(prompts: list[list[int]], length: int) -> list[list[int]]:
    """Each of the first prompts preceded by the others' tokens, up to `length` tokens in all."""
    pool = [t for p in prompts for t in p]
    out = []
    for prompt in prompts[:LONG_PROMPTS]:
        need = max(length - len(prompt), 0)
        filler = (pool * (need // max(len(pool), 1) + 1))[:need]
        out.append(filler + prompt)
    return out


def server_log(out: Path, name: str, slots: int) -> Path:
    """Where a server's log goes: beside OUT, hidden; kept when a run fails (its errors name it), removed after a
    run that succeeds."""
    return out.parent / f".{out.name}.llamacpp-{name}-{slots}.log"


def _servers(tools: LlamaCppTools, files: dict[str, GgufFile | None], target: GgufFile, opts: LlamaCppBenchOptions,
             slots: int, context: int, out: Path) -> dict[str, LlamaServer]:
    return {name: LlamaServer(tools, ServerSpec(target.path, draft.path if draft else None, opts.k, slots,
                                                context * slots, opts.thread_count),
                              server_log(out, name, slots), name)
            for name, draft in files.items()}


def _started(servers: dict[str, LlamaServer], stack) -> dict[str, LlamaServer]:
    return {name: stack.enter_context(server) for name, server in servers.items()}


def bench_gguf(out: str | Path, options: LlamaCppBenchOptions | None = None, *, progress: Progress = SILENT,
               **overrides) -> LlamaCppBenchResult:
    """Run OUT's GGUF draft, its BF16 reference and no draft in llama-server on the same prompts; write
    OUT/bench.json. Bad input raises an `Eagle3QuantError` before any server starts; a server that fails, dies or
    hangs raises `EngineError` naming its log; Ctrl-C ends every server."""
    from contextlib import ExitStack

    started = time.perf_counter()
    opts = build_options(LlamaCppBenchOptions, options, overrides)
    out = Path(out).expanduser().resolve()
    artifact = open_gguf_artifact(out)
    tools = find_tools(opts.llamacpp)
    tokenizer = tokenizer_target(opts.target, artifact)
    with ExitStack() as stack:
        from eagle3_quant.engines.llamacpp.gguf_files import describe_gguf

        draft = describe_gguf(tools, artifact.file)
        check_draft_gguf(draft)
        target = stack.enter_context(target_gguf(tools, opts.target, artifact))
        check_pair(target, draft)
        ref = stack.enter_context(reference_gguf(tools, opts.reference, artifact, tokenizer))
        reference = ref.gguf
        check_pair(target, reference)
        prompts, source = load_prompts(opts, target_spec(tokenizer, target))
        files = {"none": None, "reference": reference, "artifact": draft}
        longest = max(len(p) for p in prompts)
        context = max(longest, opts.long_context or 0) + opts.max_tokens + opts.k + CONTEXT_SLACK
        progress.say(f"{tools.describe()}, {opts.thread_count} threads: {target.path.name} with no draft, "
                     f"{reference.path.name} and {draft.path.name}; {len(prompts)} prompts x {opts.max_tokens} tokens")
        measured, long_runs, long = Measured(), None, []
        for slots in opts.slots:           # one slot first (the options keep it there): counts, outputs, steps
            with ExitStack() as running:
                per_slot = context if slots == 1 else longest + opts.max_tokens + opts.k + CONTEXT_SLACK
                servers = _started(_servers(tools, files, target, opts, slots, per_slot, out), running)
                if slots == 1:
                    with progress.task("first pass (acceptance, outputs)", len(prompts)) as advance:
                        first = first_pass(servers, prompts, opts.max_tokens, opts.k, opts.seed, opts.timeout_s,
                                           lambda n: advance(n, 0))
                    measured.first, measured.counters = first.first, first.counters
                with progress.task(f"timed passes at {slots} slot(s)",
                                   len(prompts) * opts.repeats * len(DRAFTS)) as advance:
                    measured.timed[slots] = timed_passes(servers, prompts, slots, opts.repeats, opts.max_tokens,
                                                         opts.k, opts.seed, opts.timeout_s, measured.first,
                                                         lambda n: advance(n, 0))
                if slots == 1 and opts.long_context:
                    long = _long_prompts(prompts, opts.long_context)
                    with progress.task(f"a pass at {opts.long_context} tokens of context", len(long)) as advance:
                        long_runs = first_pass(servers, long, opts.max_tokens, opts.k, opts.seed, opts.timeout_s,
                                               lambda n: advance(n, 0), probs=False).first
        progress.say("llama-bench: a verify batch and a token of the target at each context length")
        breakdown = [_breakdown(tools, target, measured.timed[1].requests, prompts, opts, "prompts")]
        if long_runs is not None:
            breakdown.append(_breakdown(tools, target, long_runs, long, opts, "long"))
        predicted, skipped = _prediction(opts, out, ref, tokenizer, prompts, measured, progress)
    record = _record(opts, artifact, tools, target, ref.name, prompts, source, measured, breakdown,
                     time.perf_counter() - started, predicted, skipped)
    path = record.write(out)
    for name in files:
        for slots in opts.slots:
            server_log(out, name, slots).unlink(missing_ok=True)
    return LlamaCppBenchResult(path, record)


def _prediction(opts: LlamaCppBenchOptions, out: Path, ref, tokenizer: str | None, prompts: list[list[int]],
                measured: Measured, progress: Progress) -> tuple[Prediction | None, str | None]:
    """validate's prediction on these prompts and llama.cpp's no-draft continuations; or why none was made."""
    if not opts.predict:
        return None, None
    if ref.folder is None or not ref.folder.is_dir():
        return None, "the reference is a GGUF: the offline prediction reads the BF16 draft's folder (--reference)"
    if tokenizer is None or not Path(tokenizer).expanduser().is_dir() and "/" not in tokenizer:
        return None, "the target runs in transformers for its states: pass --target with the target's folder"
    from eagle3_quant.bench.llamacpp_predict import predict_gguf
    from eagle3_quant.calib.target import read_target

    progress.say("offline prediction (validate, llama.cpp's arithmetic) on the same prompts and continuations")
    continuations = [list(run.tokens) for run in measured.first["none"]]
    with scratch_for(out, "bench-predict") as scratch:
        found = predict_gguf(out, ref.folder, read_target(tokenizer), prompts, continuations, opts.k, opts.llamacpp,
                             scratch)
    return found, None


def _breakdown(tools: LlamaCppTools, target: GgufFile, runs, prompts: list[list[int]],
               opts: LlamaCppBenchOptions, context: str) -> Breakdown:
    at = depth(prompts, opts.max_tokens)
    cost = step_cost(tools, target.path, opts.k + 1, at, opts.thread_count)
    per_token = token_ms(runs["none"])
    return Breakdown(context, at, per_token, StepCost(**cost.to_dict()),
                     {name: draft_step(runs[name], cost, per_token) for name in ("reference", "artifact")})


def _speed(slots: int, timed, repeats: int, seed: int, tokens: int) -> SlotsSpeed:
    """`tokens`: generated by one repetition of every prompt."""
    seconds = timed.seconds
    units = "prompts" if slots == 1 else f"waves of {slots} prompts"
    rate = {name: tokens * len(rows) / sum(sum(row) for row in rows) for name, rows in seconds.items()}
    speedup = DraftPair(*(speed_ratio(seconds["none"], seconds[name], units, seed)
                          for name in ("reference", "artifact")))
    decode = DraftPair(*(speed_ratio(timed.decode_ms["none"], timed.decode_ms[name], units, seed)
                         for name in ("reference", "artifact")))
    prompt = {name: sum(map(sum, rows)) / sum(map(len, rows)) for name, rows in timed.prompt_ms.items()}
    return SlotsSpeed(slots, repeats, units, rate, dict(timed.decode_tokens_per_s), speedup,
                      speed_ratio(seconds["reference"], seconds["artifact"], units, seed), decode, prompt,
                      {k: v for k, v in timed.changed.items() if v})


def _speed_model(breakdown: Breakdown, measured: SpeedRatio | None, name: str) -> SpeedModel | None:
    """The toolkit's cycle model (eagle3_quant/speedup.py: tokens a step x one target token / (draft side +
    verify)) fed parts llama.cpp measured apart from the speed it is compared with: llama-bench's verify batch and
    token, the draft's own drafting timer. What it leaves out (the draft's pass over each verified batch, sampling)
    shows as the distance to the measured decode speedup."""
    from eagle3_quant.speedup import cycle_speedup

    step = breakdown.drafts[name]
    if measured is None or step.draft_ms is None:
        return None
    _, _, ratio = cycle_speedup(step.tokens_per_step, step.verify_ms, step.draft_ms)
    predicted = ratio * breakdown.llama_bench.token_ms / step.verify_ms
    return SpeedModel(step.tokens_per_step, "llama.cpp's counters (tokens a step); llama-bench's verify batch and "
                      "token; the draft's drafting timer", predicted, measured, measured.contains(predicted))


def verdict(speed: SlotsSpeed | None, step: Breakdown, label: str, new_tokens: int) -> str:
    """One plain sentence: does the draft pay off here, end to end and while decoding, and why not."""
    if speed is None:
        return "not timed at one slot"
    art, decode = speed.speedup.artifact, speed.decode_speedup.artifact
    drafts = step.drafts["artifact"]
    why = (f"a step takes {drafts.step_ms:.1f} ms (verify batch of k+1 {drafts.verify_ms:.1f} ms, drafting "
           f"{drafts.draft_ms or 0:.1f} ms, the rest {drafts.rest_ms or 0:.1f} ms) and yields "
           f"{drafts.tokens_per_step:.2f} tokens, while one target token costs {step.token_ms:.1f} ms: a step must "
           f"yield {drafts.break_even_tokens:.2f} tokens to break even")
    end = f"{art.ratio:.2f}x of no draft ({art.low:.2f}..{art.high:.2f}) end to end at one slot"
    decoding = f"decoding {decode.ratio:.2f}x ({decode.low:.2f}..{decode.high:.2f})"
    if art.low > 1.0:
        return f"the {label} draft speeds this target up: {end}, {decoding}"
    prompt = speed.prompt_ms
    if decode.low > 1.0:
        return (f"the {label} draft speeds decoding up, {decoding}, but not a request of {new_tokens} new tokens "
                f"({end}): it also reads every prompt ({prompt.get('artifact', 0):.0f} ms a prompt against "
                f"{prompt.get('none', 0):.0f} without a draft); longer answers gain more")
    if art.high < 1.0:
        return f"the {label} draft slows this target down: {end}, {decoding}; {why}"
    if decode.high < 1.0:
        return f"the {label} draft slows decoding down, {decoding}; end to end it is within noise ({end}); {why}"
    return f"the {label} draft neither speeds up nor slows this target measurably: {end}, {decoding}; {why}"


def _record(opts: LlamaCppBenchOptions, artifact: GgufArtifact, tools: LlamaCppTools, target: GgufFile,
            reference: str, prompts: list[list[int]], source: str, measured: Measured, breakdown: list[Breakdown],
            seconds: float, predicted: Prediction | None = None, skipped: str | None = None) -> LlamaCppBenchRun:
    first, k = measured.first, opts.k
    counts = {name: prompt_counts(first[name], k) for name in ("reference", "artifact")}
    acceptance = DraftPair(*(engine_acceptance(measured.counters[name], counts[name], k)
                             for name in ("reference", "artifact")))
    ratio = paired_ratio(counts["reference"], counts["artifact"], opts.seed)
    same = DraftPair(lossless(first["reference"], first["none"]), lossless(first["artifact"], first["none"]))
    speeds = tuple(_speed(s, measured.timed[s], opts.repeats, opts.seed, opts.max_tokens * len(prompts))
                   for s in opts.slots)
    one = next((s for s in speeds if s.slots == 1), None)
    models = {}
    for name in ("reference", "artifact"):
        model = _speed_model(breakdown[0], getattr(one.decode_speedup, name) if one else None, name)
        if model is not None:
            models[name] = model
    build = tools.build
    return LlamaCppBenchRun(
        datetime.now(UTC).isoformat(timespec="seconds"), dict(artifact.files),
        {"name": ENGINE_NAME, **build.to_dict(), "package": tools.package, "device": _cpu(),
         "threads": opts.thread_count},
        {"name": public_name(str(target.path)), "architecture": target.architecture,
         "file_type": target.field("general.file_type"), "layers": target.arch_field("block_count")},
        reference, PromptsRecord(source, len(prompts), opts.max_tokens, sum(len(p) for p in prompts)), k, SAMPLING,
        acceptance, ratio, Lossless(all(s.lossless for _, s in same.items()), same,
                                    tuple(output_digest(list(r.tokens)) for r in first["none"])),
        speeds, tuple(breakdown), models, verdict(one, breakdown[0], artifact.record.label, opts.max_tokens), seconds,
        predicted=_beside(predicted, ratio), prediction_skipped=skipped)


def _beside(predicted: Prediction | None, ratio: EngineRatio) -> Prediction | None:
    """The prediction with its distance to llama.cpp's ratio, as vLLM's bench records it."""
    if predicted is None or predicted.acceptance_ratio is None:
        return predicted
    from dataclasses import replace

    low, high = predicted.interval
    return replace(predicted, engine_minus_predicted=ratio.ratio - predicted.acceptance_ratio,
                   intervals_overlap=ratio.low <= high and low <= ratio.high)
