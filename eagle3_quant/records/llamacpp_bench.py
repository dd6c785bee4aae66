"""`bench.json` of a GGUF draft (`bench --engine llamacpp`): the one owner of its layout, writing it atomically and
reading it field by field (a wrong field: `BenchRecordError` naming it).

Layout (``bench_version`` 1, ``engine.name`` "llama.cpp")::

    {
      "bench_version": 1, "created_at": "...", "artifact_files": {"draft-Q8_0.gguf": "<sha256>", ...},
      "engine": {"name": "llama.cpp", "build_info", "version", "commit", "package", "device", "threads"},
      "target": {"name", "file_type", "architecture", "layers"}, "reference": NAME, "reference_type": "BF16",
      "prompts": {"source", "count", "max_tokens", "tokens"}, "k": 3, "sampling": "greedy (...)",
      "acceptance": {"reference": ACCEPTANCE, "artifact": ACCEPTANCE},   # llama.cpp's /metrics, one slot
      "acceptance_ratio": RATIO,                                         # artifact / reference, paired bootstrap
      "lossless": {"lossless", "reference": MATCH, "artifact": MATCH, "outputs": [DIGEST per prompt]},
      "speed": [{"slots", "repeats", "units", "tokens_per_s": {none, reference, artifact},
                 "decode_tokens_per_s": {...}, "speedup": {"reference": SPEED, "artifact": SPEED},
                 "artifact_over_reference": SPEED, "nondeterministic": {...}}],
      "breakdown": [{"context", "depth", "token_ms", "llama_bench": {...}, "drafts": {name: STEP}}],
      "speed_model": {"tokens_per_step", "predicted_speedup", "measured", "inside_interval"} per draft,
      "verdict": "...", "wall_s": 80.6,
      "predicted": PREDICTION | null,      # validate in llama.cpp's arithmetic on these prompts (bench_run.Prediction)
      "prediction_skipped": WHY            # only when none was made
    }
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_quant.errors import BenchRecordError
from eagle3_quant.records.bench_run import (
    DraftPair,
    EngineAcceptance,
    EngineRatio,
    Lossless,
    Prediction,
    PromptsRecord,
    read_bench_json,
    write_bench_json,
)
from eagle3_quant.records.fields import RecordFields
from eagle3_quant.util.json_values import json_safe

ENGINE_NAME = "llama.cpp"
LLAMACPP_BENCH_VERSION = 1
DRAFT_NAMES = ("reference", "artifact")


def _plain(cls, data: Any, fields: RecordFields, key: str):
    """A flat record of numbers, texts and lists, every declared field present."""
    if not isinstance(data, dict):
        raise fields.fail(key, "an object")
    missing = [name for name in cls.__dataclass_fields__ if name not in data]
    if missing:
        raise fields.fail(f"{key}.{missing[0]}", "present")
    return cls(**{name: data[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class SpeedRatio:
    """Time without / time with (> 1: faster), over the same units; its 95% interval and each repetition's value."""

    ratio: float
    low: float
    high: float
    per_repeat: tuple[float, ...]
    method: str

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "interval": [self.low, self.high], "confidence": 0.95,
                "per_repeat": list(self.per_repeat), "method": self.method}

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @classmethod
    def read(cls, fields: RecordFields) -> SpeedRatio:
        interval = fields.interval("interval")
        ratio = fields.number("ratio")
        if interval is None or ratio is None or None in interval:
            raise fields.fail("interval", "a ratio and an interval [low, high]")
        return cls(ratio, *interval, tuple(fields.numbers("per_repeat") or ()), fields.text("method"))


def _pair(fields: RecordFields, key: str) -> DraftPair[SpeedRatio]:
    pair = fields.object(key)
    return DraftPair(SpeedRatio.read(pair.object("reference")), SpeedRatio.read(pair.object("artifact")))


@dataclass(frozen=True)
class SlotsSpeed:
    slots: int
    repeats: int
    units: str                                    # "prompts" or "waves of N prompts"
    tokens_per_s: dict[str, float]                # none, reference, artifact: end to end (client wall time)
    decode_tokens_per_s: dict[str, float]         # llama.cpp's timings: tokens after the first
    speedup: DraftPair[SpeedRatio]                # each draft over no draft, end to end
    artifact_over_reference: SpeedRatio
    decode_speedup: DraftPair[SpeedRatio]         # the same on llama.cpp's decode time (after the first token)
    prompt_ms: dict[str, float]                   # llama.cpp's prompt time a request (a draft also reads the prompt)
    nondeterministic: dict[str, int] = field(default_factory=dict)   # one slot: replies that changed

    def to_dict(self) -> dict:
        return {"slots": self.slots, "repeats": self.repeats, "units": self.units,
                "tokens_per_s": dict(self.tokens_per_s), "decode_tokens_per_s": dict(self.decode_tokens_per_s),
                "speedup": self.speedup.to_dict(SpeedRatio.to_dict),
                "artifact_over_reference": self.artifact_over_reference.to_dict(),
                "decode_speedup": self.decode_speedup.to_dict(SpeedRatio.to_dict), "prompt_ms": dict(self.prompt_ms),
                "nondeterministic": dict(self.nondeterministic)}

    @classmethod
    def read(cls, fields: RecordFields) -> SlotsSpeed:
        return cls(fields.integer("slots"), fields.integer("repeats"), fields.text("units"),
                   fields.numbers_by_name("tokens_per_s") or {}, fields.numbers_by_name("decode_tokens_per_s") or {},
                   _pair(fields, "speedup"), SpeedRatio.read(fields.object("artifact_over_reference")),
                   _pair(fields, "decode_speedup"), fields.numbers_by_name("prompt_ms") or {},
                   {k: int(v) for k, v in (fields.numbers_by_name("nondeterministic") or {}).items()})


@dataclass(frozen=True)
class StepCost:
    """llama-bench on the target: a batch of `batch` tokens and one generated token at `depth`."""

    depth: int
    batch: int
    batch_ms: float
    batch_ms_sd: float
    token_ms: float
    token_ms_sd: float
    repetitions: int

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


@dataclass(frozen=True)
class DraftStep:
    """One draft's average speculative step, from its one-slot requests and llama-bench's verify cost."""

    steps: int
    tokens_per_step: float          # tokens emitted per step (the accepted ones and the target's own)
    step_ms: float                  # llama.cpp's decode time (after the first token) over the steps
    draft_ms: float | None          # drafting k tokens (the draft's statistics, `g`)
    verify_ms: float                # llama-bench: one batch of k + 1 tokens at this depth
    rest_ms: float | None           # the rest: the draft's pass over the verified batch, sampling, bookkeeping
    break_even_tokens: float        # tokens a step needs to match no draft: step_ms / token_ms

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


@dataclass(frozen=True)
class Breakdown:
    """Where a step's time goes at one context length."""

    context: str                    # "prompts" or "long"
    depth: int                      # mean tokens in the KV cache over the generated tokens
    token_ms: float                 # no draft: one generated token (llama.cpp's timings)
    llama_bench: StepCost
    drafts: dict[str, DraftStep]

    def to_dict(self) -> dict:
        return {"context": self.context, "depth": self.depth, "token_ms": self.token_ms,
                "llama_bench": self.llama_bench.to_dict(),
                "drafts": {name: step.to_dict() for name, step in self.drafts.items()}}

    @classmethod
    def read(cls, fields: RecordFields) -> Breakdown:
        drafts = fields.object("drafts")
        return cls(fields.text("context"), fields.integer("depth"), fields.number("token_ms"),
                   _plain(StepCost, fields.raw("llama_bench"), fields, "llama_bench"),
                   {name: _plain(DraftStep, drafts.raw(name), drafts, name) for name in drafts.data})


@dataclass(frozen=True)
class SpeedModel:
    """The toolkit's cycle model fed llama.cpp's measured step costs, beside the speedup llama.cpp measured:
    predicted = tokens a step x token_ms / (draft + verify + rest)."""

    tokens_per_step: float
    source: str                     # where the tokens a step came from
    predicted: float
    measured: SpeedRatio            # decode speedup over no draft at one slot
    inside_interval: bool

    def to_dict(self) -> dict:
        return {"tokens_per_step": self.tokens_per_step, "source": self.source, "predicted_speedup": self.predicted,
                "measured": self.measured.to_dict(), "inside_interval": self.inside_interval}

    @classmethod
    def read(cls, fields: RecordFields) -> SpeedModel:
        return cls(fields.number("tokens_per_step"), fields.text("source"), fields.number("predicted_speedup"),
                   SpeedRatio.read(fields.object("measured")), fields.flag("inside_interval"))


@dataclass(frozen=True)
class LlamaCppBenchRun:
    created_at: str
    artifact_files: dict[str, str]
    engine: dict[str, Any]          # name, build_info, version, commit, package, device, threads
    target: dict[str, Any]          # name, file_type, architecture, layers
    reference: str
    prompts: PromptsRecord
    k: int
    sampling: str
    acceptance: DraftPair[EngineAcceptance]
    acceptance_ratio: EngineRatio
    lossless: Lossless
    speed: tuple[SlotsSpeed, ...]
    breakdown: tuple[Breakdown, ...]
    speed_model: dict[str, SpeedModel]
    verdict: str
    wall_s: float
    predicted: Prediction | None = None
    prediction_skipped: str | None = None
    bench_version: int = LLAMACPP_BENCH_VERSION

    def to_dict(self) -> dict[str, Any]:
        return json_safe({
            "bench_version": self.bench_version, "created_at": self.created_at,
            "artifact_files": dict(self.artifact_files), "engine": dict(self.engine), "target": dict(self.target),
            "reference": self.reference, "prompts": self.prompts.to_dict(), "k": self.k, "sampling": self.sampling,
            "acceptance": self.acceptance.to_dict(EngineAcceptance.to_dict),
            "acceptance_ratio": self.acceptance_ratio.to_dict(), "lossless": self.lossless.to_dict(),
            "speed": [s.to_dict() for s in self.speed], "breakdown": [b.to_dict() for b in self.breakdown],
            "speed_model": {name: m.to_dict() for name, m in self.speed_model.items()},
            "verdict": self.verdict, "wall_s": self.wall_s,
            "predicted": self.predicted.to_dict() if self.predicted else None,
            **({"prediction_skipped": self.prediction_skipped} if self.prediction_skipped else {})})

    def speed_at(self, slots: int) -> SlotsSpeed | None:
        return next((s for s in self.speed if s.slots == slots), None)

    def measured(self, files: dict[str, str]) -> bool:
        return bool(self.artifact_files) and self.artifact_files == dict(files)

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> LlamaCppBenchRun:
        if not isinstance(data, dict):
            raise BenchRecordError("is not a JSON object", path=path)
        if data.get("bench_version") != LLAMACPP_BENCH_VERSION:
            raise BenchRecordError(f"unknown version {data.get('bench_version')!r}", path=path,
                                   field="bench_version")
        fields = RecordFields(data, path)
        engine = fields.object("engine")
        if engine.text("name") != ENGINE_NAME:
            raise fields.fail("engine.name", f"{ENGINE_NAME!r}")
        acceptance = fields.object("acceptance")
        return cls(
            fields.text("created_at"), fields.texts_by_name("artifact_files"), engine.data,
            fields.object("target").data, fields.text("reference"), PromptsRecord.read(fields.object("prompts")),
            fields.integer("k"), fields.text("sampling"),
            DraftPair(EngineAcceptance.read(acceptance.object("reference")),
                      EngineAcceptance.read(acceptance.object("artifact"))),
            EngineRatio.read(fields.object("acceptance_ratio")), Lossless.read(fields.object("lossless")),
            tuple(SlotsSpeed.read(f) for f in _objects(fields, "speed")),
            tuple(Breakdown.read(f) for f in _objects(fields, "breakdown")),
            {name: SpeedModel.read(fields.object("speed_model").object(name))
             for name in fields.object("speed_model").data},
            fields.text("verdict"), fields.number("wall_s") or 0.0,
            Prediction.read(predicted) if (predicted := fields.optional_object("predicted")) else None,
            fields.optional_text("prediction_skipped"))

    @classmethod
    def read(cls, folder: str | Path) -> LlamaCppBenchRun:
        data, path = read_bench_json(folder, "run `eagle3-quant bench OUT --engine llamacpp` first")
        return cls.from_dict(data, path)

    def write(self, folder: str | Path) -> Path:
        return write_bench_json(folder, self.to_dict())


def _objects(fields: RecordFields, key: str) -> list[RecordFields]:
    rows = fields.raw(key)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise fields.fail(key, "a list of objects")
    return [RecordFields(row, fields.path, fields.name(f"{key}.{i}")) for i, row in enumerate(rows)]


def measured_llamacpp(folder: str | Path, files: dict[str, str]) -> LlamaCppBenchRun | None:
    """OUT's llama.cpp bench run when it measured exactly these files; None when there is none, it does not read,
    or it is about other files."""
    try:
        run = LlamaCppBenchRun.read(folder)
    except BenchRecordError:
        return None
    return run if run.measured(dict(files)) else None
