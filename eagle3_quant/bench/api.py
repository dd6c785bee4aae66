"""`bench_draft` (`eagle3-quant bench`): the target runs in vLLM's real serving engine three ways on the same prompts
- no draft, the BF16 reference draft, the artifact - greedy, and vLLM's own spec-decode counters say how well each
draft drafts. Beside them: whether greedy output with each draft equals the output without one (lossless), the
offline prediction of `validate` on the same prompts and continuations, and tokens/s.

The engine runs in its own environment and process (``eagle3_quant/engines/runner.py``, ``environment.py``); the
child is ``eagle3_quant/engines/vllm/serve_child.py``, one per draft. Everything that cannot work is refused in one
line before any engine starts (``calib/engine_preflight.py``, shared with `calibrate --backend vllm`): a target
the draft does not fit or without a tokenizer, layer ids beyond the target's depth, an artifact that is not what its
manifest says, an OUT that cannot be written, bad prompts, no engine environment, a scheme the engine cannot load.
Writes ``OUT/bench.json`` (atomically, at the end; no local paths) and the ``engine_run`` of OUT's validation report
when that report is about the same files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eagle3_quant.bench.options import BenchOptions
from eagle3_quant.bench.prompts import load_prompts
from eagle3_quant.bench.stats import (
    TOP_LOGITS,
    engine_acceptance,
    lossless,
    paired_ratio,
    prompt_counts,
    speed_section,
)
from eagle3_quant.bench.taps import AS_SHIPPED, served_reference, taps_section
from eagle3_quant.calib.engine_preflight import engine_preflight
from eagle3_quant.calib.target import TargetSpec, check_servable, check_target, read_target, torch_has_gpu
from eagle3_quant.engines.bench_result import result_problem
from eagle3_quant.engines.changes import changes_for
from eagle3_quant.engines.environment import (
    VLLM_CHILDREN,
    EngineInfo,
    EnginePython,
    engine_env,
    find_engine_python,
    probe_engine,
)
from eagle3_quant.engines.layout_check import LayoutRun, check_layout
from eagle3_quant.engines.runner import ChildCommand, ChildRun, run_child
from eagle3_quant.errors import DraftFormatError, EngineError, OptionsError
from eagle3_quant.options import build_options, require_device
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.records.artifact import QuantizedArtifact, open_artifact, read_reference
from eagle3_quant.records.bench_run import (
    BENCH_VERSION,
    BenchRun,
    ConcurrencySweep,
    DraftPair,
    EngineAcceptance,
    EngineRatio,
    EngineRecord,
    Lossless,
    Prediction,
    PromptsRecord,
    RegisteredKernel,
    SequencesMatch,
    SubstitutedOp,
    SweepPoint,
    SweepRate,
    output_digest,
)
from eagle3_quant.records.public_names import public_name
from eagle3_quant.records.validation_report import record_engine_run
from eagle3_quant.schemes import SCHEMES
from eagle3_quant.util.outdir import scratch_for
from eagle3_quant.util.progress import SILENT, Progress
from eagle3_quant.validate.gate_choice import artifact_scheme

DRAFTS = ("none", "reference", "artifact")
SWEEP_SKIPPED = ("{engine}: throughput and TPOT on a CPU say nothing about serving on a GPU; not run. Run bench "
                 "--concurrency on a GPU machine, with --engine-python pointing at its vLLM")


@dataclass(frozen=True)
class BenchResult:
    """What `bench_draft` measured: the bench record as written, where, and whether OUT's report holds it."""

    path: Path                                    # OUT's bench record
    engine: EngineInfo
    record: BenchRun
    validation_note: str | None                   # None: the engine run is recorded in OUT's validation report

    @property
    def acceptance(self) -> DraftPair[EngineAcceptance]:
        """vLLM's own counters, per draft."""
        return self.record.acceptance

    @property
    def ratio(self) -> EngineRatio:
        """artifact / reference, paired bootstrap over prompts."""
        return self.record.acceptance_ratio

    @property
    def lossless(self) -> bool:
        """Every greedy output with either draft equals the no-draft one."""
        return self.record.lossless.lossless

    @property
    def predicted(self) -> Prediction | None:
        """validate's offline prediction on the same sequences."""
        return self.record.predicted

    @property
    def report(self) -> dict[str, Any]:
        """The bench record's JSON content."""
        return self.record.to_dict()


def engine_refusal(info: EngineInfo, scheme: str | None) -> str | None:
    """Why this engine cannot load an artifact of `scheme` (None: it can, or the scheme is not ours to judge)."""
    known = SCHEMES.get(scheme) if scheme else None
    if known is None:
        return None
    why = known.why_not("vllm")
    if why:
        return why
    if known.mx and info.cpu and not info.quark:
        return (f"{info.distribution} {info.version} on a CPU runs {scheme} only through vLLM's MX emulation kernels, "
                "which import amd-quark, and the engine's environment has none: `make setup-engine` installs it, "
                "or pip install amd-quark into the --engine-python environment")
    return None


def mx_emulation(info: EngineInfo, scheme: str | None) -> bool:
    """Whether the engine child registers vLLM's MX and NVFP4 emulation kernels for the CPU platform (which lists
    none)."""
    known = SCHEMES.get(scheme) if scheme else None
    return bool(info.cpu and known is not None and (known.mx or known.weight.nvfp4))


def _command(python: EnginePython, info: EngineInfo) -> ChildCommand:
    return ChildCommand(python.path, VLLM_CHILDREN / "serve_child.py", name=f"vLLM ({info.distribution} "
                        f"{info.version})", env=engine_env(info), unset=("PYTHONPATH",))


def _requests(opts: BenchOptions, target: TargetSpec, drafts: dict[str, Path | None], prompts: list[list[int]],
              sweep: dict | None, mx: bool, info: EngineInfo) -> dict[str, dict]:
    """One engine request per draft, in the options' parallel layout; vLLM's MX emulation kernels for an MX
    artifact's run, and for every run when the target itself is MX (on a CPU engine)."""
    target_mx = info.cpu and target.precision.mx
    longest = max(len(p) for p in prompts) + opts.max_tokens + opts.k + 16
    if sweep:
        longest = max(longest, opts.input_len + opts.output_len + opts.k + 16)
    if opts.max_model_len is not None and opts.max_model_len < longest:
        raise OptionsError(f"{opts.max_model_len} is shorter than the longest run: the longest prompt, "
                           f"{opts.max_tokens} new tokens and the drafts' look-ahead", field="max_model_len",
                           hint=f"pass at least {longest}, or fewer --max-tokens")
    return {name: {"target": target.name, "draft": str(Path(draft).resolve()) if draft else None, "k": opts.k,
                   "dtype": opts.dtype, "prompts": prompts, "max_tokens": opts.max_tokens,
                   "max_model_len": opts.max_model_len or longest,
                   "max_num_seqs": max(opts.max_num_seqs, *opts.concurrency) if sweep else opts.max_num_seqs,
                   "seed": opts.seed, "sweep": sweep, "quantization": opts.target_quantization,
                   "engine": opts.layout().llm_kwargs(),
                   "changes": changes_for(info, (mx and name == "artifact") or target_mx),
                   "top_logits": TOP_LOGITS if draft is None else 0}
            for name, draft in drafts.items()}


def _check_inputs(opts: BenchOptions, out: Path):
    art = open_artifact(out)
    reference = read_reference(opts.reference, art)
    if reference is None:
        raise DraftFormatError("no BF16 reference draft: the source recorded at quantization is gone", path=out,
                               field="reference", hint="pass --reference with the BF16 draft")
    if not opts.target:
        raise OptionsError("bench runs the target in vLLM: name it", field="target", hint="pass --target")
    target = read_target(opts.target, quantization=opts.target_quantization)
    check_target(target, art.files.config, str(out))
    check_target(target, reference.config, str(reference.path))
    return art, reference, target


def _engine_result(run: ChildRun, command: ChildCommand, request: dict, target: TargetSpec, sweep: dict | None,
                   log: Path) -> dict:
    """The child's result once it fits the schema (`bench_result.py`); else the engine's failure (a crash, a timeout,
    an error or a result bench cannot use), in one line naming the log of its last lines, kept beside OUT. One rule:
    a failed run's log is kept and named; a run that succeeds removes the log an earlier failure left."""
    if run.ok:
        problem = result_problem(run.result, len(request["prompts"]), request["k"], target.vocab_size, sweep)
        if problem is None:
            log.unlink(missing_ok=True)
            return run.result
        message = f"{command.name} returned a result bench cannot use: {problem}"
    else:
        message = run.error
    try:
        log.write_text(run.stderr_tail + "\n")
        where = f"the engine's last log lines: {log}"
    except OSError as exc:
        where = f"its log could not be kept ({exc.strerror or exc})"
    raise EngineError(message, hint=where)


def sweep_section(opts: BenchOptions, info: EngineInfo, runs: dict[str, dict]) -> ConcurrencySweep:
    """`concurrency_sweep`: not requested; skipped on a CPU engine, with the reason; else the measured points."""
    if not opts.concurrency:
        return ConcurrencySweep("not requested")
    if info.cpu:
        return ConcurrencySweep("skipped", reason=SWEEP_SKIPPED.format(engine=info.describe()))
    return ConcurrencySweep("measured", input_len=opts.input_len, output_len=opts.output_len,
                            prompts="bench prompts laid end to end, cut to input_len", points=_sweep_table(runs))


def _sweep_table(runs: dict[str, dict]) -> tuple[SweepPoint, ...]:
    rows = []
    for index, point in enumerate(runs["none"]["sweep"]):
        base = point["output_tokens_per_s"]
        reference, artifact = (_rate(runs[name]["sweep"][index], base) for name in ("reference", "artifact"))
        rows.append(SweepPoint(point["concurrency"], _rate(point, None), DraftPair(reference, artifact)))
    return tuple(rows)


def _rate(measured: dict, base: float | None) -> SweepRate:
    """One run's point; `base` (the no-draft run's tokens/s) gives its speedup."""
    mine = measured["output_tokens_per_s"]
    return SweepRate(mine, measured["tpot_ms"], mine / base if base and mine else None)


def bench_draft(out: str | Path, options: BenchOptions | None = None, *, progress: Progress = SILENT,
                **overrides) -> BenchResult:
    """Run OUT, its BF16 reference and no draft in vLLM's engine on the same prompts; write OUT/bench.json.

    `options`: a `BenchOptions` (target, reference, prompts, num_prompts, max_tokens, k, engine_python, dtype,
    predict, concurrency, ...); keywords override its fields. Bad input raises an `Eagle3QuantError` before any
    engine starts; an engine that fails or times out raises `EngineError`; Ctrl-C ends the engine's processes."""
    started = time.perf_counter()
    opts = build_options(BenchOptions, options, overrides)
    require_device(opts.device)
    out = Path(out).expanduser().resolve()
    art, reference, target = _check_inputs(opts, out)
    engine_preflight(out, target, {"artifact": (art.files.config, out),
                                   "reference": (reference.config, reference.path)},
                     artifact=art)
    prompts, prompt_source = load_prompts(opts, target)
    python = find_engine_python(opts.engine_python)
    info = probe_engine(python)
    scheme = artifact_scheme(art.manifest, art.files.quant_config)
    refusal = engine_refusal(info, scheme)
    if refusal:
        raise EngineError(refusal, path=out)
    check_servable(target, info)
    files = art.artifact_files
    sweep = None
    if opts.concurrency and not info.cpu:
        sweep = {"concurrency": list(opts.concurrency), "input_len": opts.input_len, "output_len": opts.output_len}
    written = art.written_taps
    with scratch_for(out, "bench-reference") as scratch:
        # the reference given the artifact's layer ids, so that the ratio is quantization's alone
        drafts = {"none": None, "reference": served_reference(reference, written, scratch / "reference")
                  if written else reference.path, "artifact": out}
        if written:
            drafts[AS_SHIPPED] = reference.path
        command = _command(python, info)
        runs = {}
        requests = _requests(opts, target, drafts, prompts, sweep, mx_emulation(info, scheme), info)
        for note in check_layout(python, info, opts.layout(), [
                LayoutRun(f"the {name} draft", "serve_child", requests[name]) for name in ("reference", "artifact")]):
            progress.say(f"layout check: {note}")
        for name, request in requests.items():
            progress.say(f"vLLM {info.version} on {info.device}: {len(prompts)} prompts x {opts.max_tokens} "
                         f"tokens, draft: {name}, {opts.layout().describe()}")
            runs[name] = _engine_result(run_child(command, request, opts.timeout_s), command, request, target, sweep,
                                        out.parent / f".{out.name}.bench-{name}.log")
    k = opts.k
    drafted = [name for name in drafts if name != "none"]
    counts = {name: prompt_counts(runs[name]["per_request"], k) for name in drafted}
    measured = {name: engine_acceptance(runs[name]["counters"], counts[name], k) for name in drafted}
    acceptance = DraftPair(measured["reference"], measured["artifact"])
    ratio = paired_ratio(counts["reference"], counts["artifact"], opts.seed)
    top = runs["none"].get("top_logits")
    same_all = {name: lossless(runs[name]["outputs"], runs["none"]["outputs"], top, opts.dtype) for name in drafted}
    same = DraftPair(same_all["reference"], same_all["artifact"])
    taps = taps_section(written, measured[AS_SHIPPED], measured["reference"],
                        paired_ratio(counts[AS_SHIPPED], counts["reference"], opts.seed),
                        same_all[AS_SHIPPED]) if written else None
    predicted, skipped = None, prediction_refusal(target) if opts.predict else None
    if opts.predict and skipped is None:
        progress.say("offline prediction (validate) on the same prompts and the engine's continuations")
        predicted = _prediction(art, reference, target, prompts, runs["none"]["outputs"], opts, ratio)
    elif skipped:
        progress.say(f"offline prediction not made: {skipped}")
    record = replace(_record(opts, info, target, reference.path, prompt_source, prompts, runs, acceptance, ratio,
                             same, predicted, files, time.perf_counter() - started, taps),
                     target_precision=target.precision, prediction_skipped=skipped)
    path = record.write(out)
    note = record_engine_run(out, record.engine_run(), files)
    return BenchResult(path, info, record, note)


def prediction_refusal(target: TargetSpec) -> str | None:
    """Why the offline prediction cannot be made for this target (None: it can): it runs the target in transformers,
    which reproduces neither vLLM's online quantization nor, on a CPU, Quark's MX kernels."""
    precision = target.precision
    if precision.online:
        return f"transformers does not reproduce vLLM's online {precision.method} quantization of the target"
    if precision.mx and not torch_has_gpu():
        return ("transformers runs a Quark MX target through Quark's GPU-only kernels; to predict from the states "
                "vLLM computes, run `calibrate --backend vllm` on these prompts, then `validate --calib`")
    return None


def _prediction(art: QuantizedArtifact, reference: DraftCheckpoint, target: TargetSpec, prompts, continuations,
                opts: BenchOptions, ratio: EngineRatio) -> Prediction:
    from eagle3_quant.bench.predict import predict

    with scratch_for(art.path, "bench") as scratch:
        predicted = predict(art, reference, target, prompts, continuations, opts.k, opts.device, scratch)
    if predicted.acceptance_ratio is None:
        return predicted
    low, high = predicted.interval
    return replace(predicted, engine_minus_predicted=ratio.ratio - predicted.acceptance_ratio,
                   intervals_overlap=ratio.low <= high and low <= ratio.high)


def _record(opts: BenchOptions, info: EngineInfo, target: TargetSpec, reference: Path, prompt_source: str,
            prompts: list[list[int]], runs: dict[str, dict], acceptance: DraftPair[EngineAcceptance],
            ratio: EngineRatio, same: DraftPair[SequencesMatch], predicted: Prediction | None,
            files: dict[str, str], seconds: float, taps) -> BenchRun:
    kernels = {kernel: RegisteredKernel(row["kernel_type"], row["platform"], row["why"],
                                        tuple(dict.fromkeys(row.get("processes", ()))))
               for name in runs for kernel, row in runs[name].get("registered_kernels", {}).items()}
    return BenchRun(
        bench_version=BENCH_VERSION, created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        artifact_files=files,
        engine=EngineRecord(**info.to_dict(), dtype=opts.dtype, device_kind="cpu" if info.cpu else "gpu",
                            layout=opts.layout()),
        target=public_name(target.name), reference=public_name(str(reference)),
        prompts=PromptsRecord(prompt_source, len(prompts), opts.max_tokens, sum(len(p) for p in prompts)),
        k=opts.k, sampling="greedy (temperature 0, ignore_eos)", acceptance=acceptance, acceptance_ratio=ratio,
        lossless=Lossless(all(s.lossless for _, s in same.items()), same,
                          tuple(output_digest(o) for o in runs["none"]["outputs"])), predicted=predicted,
        speed=speed_section({name: runs[name] for name in DRAFTS}, info.cpu),
        substituted_ops=substituted_ops(runs), registered_kernels=kernels,
        concurrency_sweep=sweep_section(opts, info, runs), wall_s=seconds, serve_taps=taps)


def substituted_ops(runs: dict[str, dict]) -> dict[str, SubstitutedOp]:
    """Every op the engine runs supplied and called: calls summed over the runs, compared calls too, the largest
    difference of all."""
    found: dict[str, list[dict]] = {}
    for run in runs.values():
        for op, row in run.get("substituted_ops", {}).items():
            if row["calls"]:
                found.setdefault(op, []).append(row)
    merged = {}
    for op, rows in found.items():
        checked = [row for row in rows if row.get("compared_calls") is not None]
        merged[op] = SubstitutedOp(rows[0]["why"], sum(row["calls"] for row in rows), rows[0]["with"],
                                   sum(row["compared_calls"] for row in checked) if checked else None,
                                   max(row["max_abs_diff"] for row in checked) if checked else None,
                                   tuple(dict.fromkeys(p for row in rows for p in row.get("processes", {}))))
    return merged
