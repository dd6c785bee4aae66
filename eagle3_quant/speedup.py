"""Speedup estimate of speculative decoding with a draft, from measured acceptance and a cycle-time model.

One speculation cycle = the draft side (k draft steps, ``fc`` once) + one verification forward of the target.
Expected tokens per cycle (Leviathan et al. 2023, with measured per-position rates):
``E = 1 + sum_{j=1..k} prod_{i<=j} a_i``, where ``a_i`` is the conditional acceptance of step i. The validation
report's ``per_position_acceptance_*`` already holds the products (the share of chains whose first j steps were
all accepted, vLLM's per-position counters), so ``E = 1 + sum(per_position[:k])``.

Without speculation the target spends one forward per token; ``--verify-ms`` is the time of one target forward,
taken to be the same for a verification of k+1 tokens (memory-bound decode); where the two differ (llama.cpp on a
CPU, `estimate_gguf`), one token costs ``token_ms`` and the speedup is ``E * token_ms / cycle``. So::

    cycle = draft_ms + verify_ms;  verify share = verify_ms / cycle
    speedup over no speculation = E * verify_ms / cycle
    speedup over the BF16 draft = (E / cycle) / (E_bf16 / cycle_bf16)

Draft-side time, in order of preference: given (``--draft-ms``); measured FP8 kernel timings in the report
(batch 1, the quantized linears, k steps) plus the bandwidth floor of the rest; else the bandwidth floor of
the whole cycle (a lower bound: the estimate is then an upper bound). The BF16 draft's time is the same minus
the FP8 saving: measured BF16 timings where the FP8 ones were measured, else the floors' difference.
Everything here is an estimate and says so; nothing is measured on an engine.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eagle3_quant.cost import DeviceProfile, DraftCost
from eagle3_quant.errors import EstimateInputError, ValidationRecordError
from eagle3_quant.options import TIME
from eagle3_quant.reading.limits import json_from_bytes, read_limited_bytes
from eagle3_quant.records.speedup_estimate import ESTIMATE_NAME, SpeedupEstimate  # noqa: F401 - owned there
from eagle3_quant.records.validation_report import REPORT_NAME, ValidationMetrics, evidence_problem


def tokens_per_round(per_position: Sequence[float], k: int) -> float:
    """E = 1 + sum of the first k cumulative per-position acceptance rates."""
    if k > len(per_position):
        raise EstimateInputError(f"k={k} but acceptance was measured for {len(per_position)} positions", field="k")
    return 1.0 + sum(per_position[:k])


@dataclass(frozen=True)
class ReportAcceptance:
    """What an estimate needs from a validation report."""

    per_position: tuple[float, ...]            # the FP8 draft's cumulative rates
    per_position_bf16: tuple[float, ...] | None
    drafts: int | None
    layer_ms: float | None = None              # measured FP8 quantized linears, batch 1, one step
    layer_ms_bf16: float | None = None         # the same linears in BF16
    kernel_device: str | None = None
    reference: str | None = None               # the BF16 draft the acceptance was compared with
    sha256: str | None = None                  # of the report's bytes


def read_report_acceptance(path: str | Path, artifact: Mapping[str, str] | None = None) -> ReportAcceptance:
    """Per-position acceptance (and batch-1 kernel timings when measured) from a validation.json; `artifact`
    (path -> sha256): the report must name exactly these files. Acceptance numbers that disagree with each other
    are refused (`ValidationMetrics.acceptance_problem`)."""
    path = Path(path)
    try:
        raw = read_limited_bytes(path, error=EstimateInputError)
        data = json_from_bytes(raw, path, EstimateInputError)
    except FileNotFoundError:
        raise EstimateInputError("no such file", path=path) from None
    except OSError as exc:
        raise EstimateInputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    problem = evidence_problem(data, artifact) if artifact is not None and isinstance(data, dict) else None
    if problem:
        raise EstimateInputError(problem, path=path, field="artifact_files")
    found = data.get("metrics") if isinstance(data, dict) else None
    if not isinstance(found, dict):
        raise EstimateInputError("no metrics object: not a validation report", path=path, field="metrics")
    try:
        metrics = ValidationMetrics.read(found, path)
    except ValidationRecordError as exc:
        raise EstimateInputError(exc.message, path=path, field=exc.field) from None
    disagree = metrics.acceptance_problem()
    if disagree:
        raise EstimateInputError(disagree[1], path=path, field=disagree[0])
    fp8 = _rates(metrics.per_position_acceptance_fp8)
    if fp8 is None:
        raise EstimateInputError("acceptance was not measured (validate needs --calib and --reference)",
                                 path=path, field="metrics.per_position_acceptance_fp8")
    layer_ms, layer_ms_bf16, device = _batch1_timing(data.get("kernel"))
    reference = data.get("reference")
    return ReportAcceptance(fp8, _rates(metrics.per_position_acceptance_bf16), metrics.drafts, layer_ms,
                            layer_ms_bf16, device, reference if isinstance(reference, str) else None,
                            hashlib.sha256(raw).hexdigest())


def _rates(value: Any) -> tuple[float, ...] | None:
    if not isinstance(value, list | tuple) or not value:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in value):
        return None
    return tuple(float(v) for v in value)


def _batch1_timing(kernel: Any) -> tuple[float | None, float | None, str | None]:
    timing = kernel.get("timing") if isinstance(kernel, Mapping) else None
    if not isinstance(timing, Mapping) or 1 not in (timing.get("batch_sizes") or []):
        return None, None, None
    i = timing["batch_sizes"].index(1)
    try:
        fp8, bf16 = float(timing["total_fp8_ms"][i]), float(timing["total_bf16_ms"][i])
    except (KeyError, IndexError, TypeError, ValueError):
        return None, None, None
    if not (math.isfinite(fp8) and math.isfinite(bf16) and fp8 > 0 and bf16 > 0):
        return None, None, None
    return fp8, bf16, str(kernel.get("device") or "") or None


def cycle_speedup(tokens: float, verify_ms: float, draft_ms: float, token_ms: float | None = None
                  ) -> tuple[float, float, float]:
    """(cycle ms, verify share of the cycle, speedup over one target forward per token); `token_ms`: one target
    forward of one token when it costs less than the verify of k + 1 (a CPU's compute-bound batches)."""
    cycle = draft_ms + verify_ms
    return cycle, verify_ms / cycle, tokens * (token_ms if token_ms is not None else verify_ms) / cycle


def draft_side_ms(cost: DraftCost | None, profile: DeviceProfile | None, k: int, *, given_ms: float | None,
                  acceptance: ReportAcceptance | None) -> tuple[float, float | None, str]:
    """(FP8 draft ms, BF16 draft ms or None, where the numbers come from) for one cycle of k steps."""
    floor = bf16_floor = None
    if cost is not None and profile is not None:
        floor, bf16_floor = cost.written.floor_ms(profile, k), cost.bf16.floor_ms(profile, k)
    if given_ms is not None:
        TIME.check(given_ms, "draft_ms", EstimateInputError)
        bf16 = given_ms + (bf16_floor - floor) if floor is not None else None
        return given_ms, bf16, "given (--draft-ms); BF16 draft: + the bandwidth floors' difference" \
            if bf16 is not None else "given (--draft-ms)"
    if floor is None:
        raise EstimateInputError("no draft-side time: give --draft-ms, or a device profile for the bandwidth "
                                 "floor", field="draft_ms")
    if acceptance is not None and acceptance.layer_ms is not None:
        rest = _unmeasured_floor_ms(cost, profile, k)
        return (k * acceptance.layer_ms + rest, k * acceptance.layer_ms_bf16 + rest,
                f"measured FP8/BF16 kernel timings at batch 1 ({acceptance.kernel_device or 'device'}) x {k} "
                f"steps + the {profile.name} bandwidth floor of the other weights")
    return floor, bf16_floor, f"{profile.name} bandwidth floor ({profile.hbm_bytes_per_s / 1e12:.1f} TB/s): " \
                              "a lower bound, so the speedups are upper bounds"


def _unmeasured_floor_ms(cost: DraftCost, profile: DeviceProfile, k: int) -> float:
    """Floor of what the kernel timing does not cover: everything but the FP8 linears' weights and scales."""
    by_part = cost.written.bytes_by_part
    fc = by_part.get("fc", 0)
    timed = sum(t.read_bytes for t in cost.tensors if t.dtype.startswith("F8") or t.is_scale)
    per_step = sum(by_part.values()) - fc - timed
    return (fc + k * per_step) / profile.hbm_bytes_per_s * 1e3


def estimate_speedup(acceptance: ReportAcceptance, verify_ms: float, *, k: int | None = None,
                     draft_ms: float | None = None, cost: DraftCost | None = None,
                     profile: DeviceProfile | None = None, source: str = "validation report") -> SpeedupEstimate:
    TIME.check(verify_ms, "verify_ms", EstimateInputError, required=True)
    k = k or len(acceptance.per_position)
    if k < 1:
        raise EstimateInputError(f"k={k} must be at least 1", field="k")
    tokens = tokens_per_round(acceptance.per_position, k)
    tokens_bf16 = tokens_per_round(acceptance.per_position_bf16, k) \
        if acceptance.per_position_bf16 and len(acceptance.per_position_bf16) >= k else None
    fp8_ms, bf16_ms, where = draft_side_ms(cost, profile, k, given_ms=draft_ms, acceptance=acceptance)
    cycle, share, speedup = cycle_speedup(tokens, verify_ms, fp8_ms)
    vs_bf16 = None
    if tokens_bf16 is not None and bf16_ms is not None:
        vs_bf16 = speedup / cycle_speedup(tokens_bf16, verify_ms, bf16_ms)[2]
    return SpeedupEstimate(
        k=k, tokens_per_round=tokens, tokens_per_round_bf16=tokens_bf16, verify_ms=verify_ms, draft_ms=fp8_ms,
        draft_ms_source=where, draft_ms_bf16=bf16_ms, device_profile=profile.name if profile else None,
        cycle_ms=cycle, verify_share=share, speedup_vs_no_spec=speedup, speedup_vs_bf16_draft=vs_bf16,
        acceptance_source=f"{source}: {acceptance.drafts or '?'} chains, per-position "
                          + ", ".join(f"{r:.3f}" for r in acceptance.per_position[:k]))


DEFAULT_DEVICE_PROFILE = "mi355x"


def estimate_draft(out: str | Path, verify_ms: float, *, validation: str | Path | None = None,
                   draft_ms: float | None = None, k: int | None = None,
                   device_profile: str = DEFAULT_DEVICE_PROFILE, write: bool = False) -> SpeedupEstimate:
    """Estimate the speedup of the artifact OUT (its files as its manifest lists them) from its validation report
    (default OUT/validation.json: any report must name OUT's files) and its step bytes; with write=True, write
    OUT/speedup_estimate.json (which the model card then shows). The BF16 draft's bytes are the report's reference
    draft's when that folder still exists (a pruned vocabulary's reference is unpruned), else OUT's own read back
    as BF16."""
    from eagle3_quant.cost import checkpoint_cost, get_device_profile
    from eagle3_quant.records.evidence import check_integrity, manifest_digests
    from eagle3_quant.records.manifest import Manifest

    out = Path(out)
    profile = get_device_profile(device_profile)
    manifest = Manifest.read(out, EstimateInputError)
    check_integrity(out, manifest, EstimateInputError)
    artifact = manifest_digests(manifest)
    report = Path(validation) if validation is not None else out / REPORT_NAME
    acceptance = read_report_acceptance(report, artifact)
    cost = checkpoint_cost(out)
    if acceptance.reference and Path(acceptance.reference).is_dir():
        cost = replace(cost, bf16=checkpoint_cost(acceptance.reference).bf16)
    result = estimate_speedup(acceptance, verify_ms, k=k, draft_ms=draft_ms, cost=cost, profile=profile,
                              source=report.name)
    result = replace(result, artifact_files=artifact, validation_sha256=acceptance.sha256)
    if write:
        result.write(out)
    return result


def estimate_gguf(out: str | Path, *, validation: str | Path | None = None, k: int | None = None,
                  write: bool = False) -> SpeedupEstimate:
    """A GGUF draft's speedup from validate's offline acceptance (llama.cpp's arithmetic) and the step costs llama.cpp
    measured in OUT/bench.json (llama-bench's verify batch and token, the draft's drafting timer), beside the
    decoding speedup llama.cpp measured; with write=True, OUT/speedup_estimate.json."""
    from eagle3_quant.errors import BenchRecordError
    from eagle3_quant.records.bench_run import BENCH_NAME
    from eagle3_quant.records.gguf_artifact import open_gguf_artifact
    from eagle3_quant.records.llamacpp_bench import LlamaCppBenchRun

    out = Path(out)
    artifact = open_gguf_artifact(out, EstimateInputError)
    report = Path(validation) if validation is not None else out / REPORT_NAME
    acceptance = read_report_acceptance(report, artifact.files)
    try:
        bench = LlamaCppBenchRun.read(out)
    except BenchRecordError as exc:
        raise EstimateInputError(exc.message, path=exc.path, field=exc.field,
                                 hint="run `eagle3-quant bench OUT --engine llamacpp` first") from None
    if not bench.measured(artifact.files):
        raise EstimateInputError(f"{BENCH_NAME} measured other files than OUT's", path=out / BENCH_NAME,
                                 field="artifact_files", hint="bench again")
    part = bench.breakdown[0]
    step, reference = part.drafts["artifact"], part.drafts["reference"]
    if step.draft_ms is None:
        raise EstimateInputError("llama.cpp reported no drafting time", path=out / BENCH_NAME,
                                 field="breakdown.drafts.artifact.draft_ms")
    k = k or bench.k
    tokens = tokens_per_round(acceptance.per_position, k)
    token_ms = part.llama_bench.token_ms
    cycle, share, speedup = cycle_speedup(tokens, step.verify_ms, step.draft_ms, token_ms)
    tokens_bf16 = tokens_per_round(acceptance.per_position_bf16, k) \
        if acceptance.per_position_bf16 and len(acceptance.per_position_bf16) >= k else None
    vs_bf16 = None
    if tokens_bf16 is not None and reference.draft_ms is not None:
        vs_bf16 = speedup / cycle_speedup(tokens_bf16, step.verify_ms, reference.draft_ms, token_ms)[2]
    one = bench.speed_at(1)
    measured = None
    if one is not None:
        decode = one.decode_speedup.artifact
        measured = {"speedup": decode.ratio, "interval": [decode.low, decode.high],
                    "what": f"llama.cpp's decoding speedup over no draft at one slot ({BENCH_NAME})",
                    "inside_interval": decode.low <= speedup <= decode.high}
    result = SpeedupEstimate(
        k=k, tokens_per_round=tokens, tokens_per_round_bf16=tokens_bf16, verify_ms=step.verify_ms,
        draft_ms=step.draft_ms, draft_ms_source=f"llama.cpp's drafting timer ({BENCH_NAME}; the draft's pass over "
                                                "the verified batch is not in it)", draft_ms_bf16=reference.draft_ms,
        device_profile=f"llama.cpp {bench.engine.get('build_info')} on {bench.engine.get('device')}",
        cycle_ms=cycle, verify_share=share, speedup_vs_no_spec=speedup, speedup_vs_bf16_draft=vs_bf16,
        acceptance_source=f"{report.name}: {acceptance.drafts or '?'} chains, per-position "
                          + ", ".join(f"{r:.3f}" for r in acceptance.per_position[:k]),
        artifact_files=dict(artifact.files), validation_sha256=acceptance.sha256, token_ms=token_ms,
        measured=measured)
    if write:
        result.write(out)
    return result
