"""The pipeline file (`eagle3-quant run PIPELINE.yaml`): a strict schema, unknown keys rejected by name.

Every section is a frozen dataclass; the YAML maps onto it field by field. Overrides (`--set a.b=value`)
apply to the raw mapping before validation, so they obey the same rules.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_quant.bench.options import BenchOptions
from eagle3_quant.calib.options import CalibrationOptions, ImportOptions
from eagle3_quant.errors import Eagle3QuantError, PipelineSpecError, one_line
from eagle3_quant.export.options import PushOptions
from eagle3_quant.quantize.gguf_options import GgufOptions
from eagle3_quant.quantize.options import AUTO_SCHEME, QuantizeOptions
from eagle3_quant.reading.limits import MAX_YAML_BYTES, load_yaml_text, read_limited_text
from eagle3_quant.reading.repo_ids import repo_id_problem
from eagle3_quant.schemes import DEFAULT_SCHEME, SCHEMES
from eagle3_quant.validate.options import ValidateOptions

PIPELINE_VERSION = 1
PLACEHOLDER_OWNERS = ("ORG", "YOUR_ORG")     # the repository owner the shipped files and the docs leave to fill in
ENGINES = ("vllm", "sglang")           # taps.engine_rules.Engine (a test keeps them equal)


def _section(name: str, options: type, extra: list[tuple[str, Any, Any]]) -> type:
    """A pipeline-file section: `extra` fields, then the options class's fields a pipeline file may set (same
    types, defaults and help), so the file's schema cannot drift from the API and the CLI."""
    hints = typing.get_type_hints(options)
    fields = [(n, t, d if isinstance(d, dataclasses.Field) else dataclasses.field(default=d)) for n, t, d in extra]
    fields += [(f.name, hints[f.name], dataclasses.field(default=f.default, default_factory=f.default_factory,
                                                         metadata=f.metadata))
               for f in dataclasses.fields(options) if f.metadata.get("pipeline", True)]
    return dataclasses.make_dataclass(name, fields, frozen=True)


def _import_fields() -> list[tuple[str, Any, Any]]:
    """ImportOptions' own pipeline fields (format, dump_layer_ids): those CalibrationOptions lacks, target aside."""
    hints, captured = typing.get_type_hints(ImportOptions), {f.name for f in dataclasses.fields(CalibrationOptions)}
    return [(f.name, hints[f.name], dataclasses.field(default=f.default, metadata=f.metadata))
            for f in dataclasses.fields(ImportOptions)
            if f.metadata.get("pipeline", True) and f.name not in captured and f.name != "target"]


IMPORT_FIELDS = tuple(name for name, _, _ in _import_fields())
CalibrateSpec = _section("CalibrateSpec", CalibrationOptions,
                         [("data", str | None, None), ("from_dump", str | None, None), *_import_fields()])
QuantizeSpec = _section("QuantizeSpec", QuantizeOptions, [])
ValidateSpec = _section("ValidateSpec", ValidateOptions, [("enabled", bool, True)])
BenchSpec = _section("BenchSpec", BenchOptions, [("enabled", bool, True)])
PushSpec = _section("PushSpec", PushOptions, [("repo_id", str | None, None), ("enabled", bool, True)])
# a GGUF draft for llama.cpp beside the artifact (off by default): made, validated, benched when bench_target names a
# GGUF target, pushed when repo_id is set
GgufSpec = _section("GgufSpec", GgufOptions, [("enabled", bool, False), ("from_artifact", bool, False),
                                             ("bench_target", str | None, None), ("repo_id", str | None, None)])
STAGE_KEYS = ("data", "from_dump", "enabled", "repo_id", "from_artifact", "bench_target")


def section_values(section: Any) -> dict[str, Any]:
    """A section's fields that belong to its stage's options (without `data`, `enabled`, `repo_id`, ...)."""
    return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)
            if f.name not in (*STAGE_KEYS, *IMPORT_FIELDS)}


@dataclass(frozen=True)
class PipelineSpec:
    source: str
    workdir: str
    pipeline_version: int = PIPELINE_VERSION
    revision: str | None = None
    target: str | None = None
    target_quantization: str | None = None      # vLLM's online quantization of the target, for calibrate and bench
    scheme: str = DEFAULT_SCHEME
    calibrate: CalibrateSpec = field(default_factory=CalibrateSpec)
    quantize: QuantizeSpec = field(default_factory=QuantizeSpec)
    validate: ValidateSpec = field(default_factory=ValidateSpec)
    bench: BenchSpec = field(default_factory=BenchSpec)
    push: PushSpec = field(default_factory=PushSpec)
    gguf: GgufSpec = field(default_factory=GgufSpec)
    path: str | None = field(default=None, metadata={"internal": True})   # the file it was read from

    @property
    def out(self) -> Path:
        return Path(self.workdir) / "draft-fp8"

    @property
    def gguf_out(self) -> Path:
        return Path(self.workdir) / "draft-gguf"

    @property
    def calib(self) -> Path:
        return Path(self.workdir) / "calib"


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        item = typing.get_args(hint)[0]
        return isinstance(value, list | tuple) and all(_type_ok(v, item) for v in value)
    if hint is Path:
        return isinstance(value, str)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _build(cls: type, raw: Any, where: str, file: str | None) -> Any:
    if not isinstance(raw, dict):
        raise PipelineSpecError(f"expected a mapping, got {type(raw).__name__}", path=file, field=where or None)
    hints = typing.get_type_hints(cls)
    public = [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]
    names = [f.name for f in public]
    not_names = [key for key in raw if not isinstance(key, str)]
    if not_names:
        raise PipelineSpecError(f"key {not_names[0]!r} is not a name; valid keys: {', '.join(names)}", path=file,
                                field=where or None)
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise PipelineSpecError(f"unknown key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(names)}",
                                path=file, field=where or None)
    values = {}
    for f in public:
        name = f"{where}.{f.name}" if where else f.name
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise PipelineSpecError("required", path=file, field=name)
            continue
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            values[f.name] = _build(hint, raw[f.name] if raw[f.name] is not None else {}, name, file)
        elif not _type_ok(raw[f.name], hint):
            raise PipelineSpecError(f"{raw[f.name]!r} is not {_describe(hint)}", path=file, field=name)
        elif problem := _text_problem(raw[f.name]):
            raise PipelineSpecError(problem, path=file, field=name)
        else:
            value = raw[f.name]
            values[f.name] = tuple(value) if typing.get_origin(hint) is tuple or (
                isinstance(value, list) and tuple in map(typing.get_origin, typing.get_args(hint))) else value
    try:
        return cls(**values)
    except Eagle3QuantError as exc:    # a nested options object (validate.gates) checks its own values
        field = ".".join(x for x in (where, exc.field) if x) or None
        raise PipelineSpecError(exc.message, path=file, field=field) from None


def _text_problem(value: Any) -> str | None:
    """Why a string value (or one in a list) cannot mean what it says: empty (a path "" would be the current
    folder), or holding a control character (invisible when printed)."""
    for text in value if isinstance(value, list | tuple) else [value]:
        if isinstance(text, str) and not text.strip():
            return f"{text!r} is empty: write a value, or leave the key out"
        if isinstance(text, str) and one_line(text) != text:
            return f"{text!r} holds a control character"
    return None


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if origin in (list, tuple):
        return f"a list of {_describe(typing.get_args(hint)[0])}s"
    names = {"str": "a string", "int": "an integer", "bool": "true or false", "dict": "a mapping", "NoneType": "null",
             "float": "a number", "Path": "a path"}
    return names.get(getattr(hint, "__name__", ""), str(hint))


def _check(spec: PipelineSpec, file: str | None) -> PipelineSpec:
    if spec.pipeline_version != PIPELINE_VERSION:
        raise PipelineSpecError(f"version {spec.pipeline_version} is not supported (this tool reads "
                                f"{PIPELINE_VERSION})", path=file, field="pipeline_version")
    if spec.scheme not in SCHEMES and spec.scheme != AUTO_SCHEME:
        raise PipelineSpecError(f"unknown scheme {spec.scheme!r}; valid schemes: {', '.join(SCHEMES)}, "
                                f"{AUTO_SCHEME}", path=file, field="scheme")
    has_calib = bool(spec.calibrate.data or spec.calibrate.from_dump)
    if spec.calibrate.data and spec.calibrate.from_dump:
        raise PipelineSpecError("set either data (capture with transformers) or from_dump (import an engine's "
                                "dump), not both", path=file, field="calibrate.from_dump")
    if _needs_calibration(spec) and not has_calib:
        awq = spec.scheme in SCHEMES and SCHEMES[spec.scheme].rounding == "awq"
        why = " (AWQ by default; quantize.rtn: true rounds to nearest instead)" if awq else ""
        raise PipelineSpecError(f"scheme {spec.scheme!r} needs calibration data{why}", path=file,
                                field="calibrate.data")
    if spec.quantize.auto_exclude is not None and not has_calib:
        raise PipelineSpecError("auto_exclude measures sensitivity on calibration data: set calibrate.data",
                                path=file, field="quantize.auto_exclude")
    if spec.quantize.smooth_alpha is not None and not has_calib:
        raise PipelineSpecError("smooth_alpha measures each input channel on calibration data: set calibrate.data",
                                path=file, field="quantize.smooth_alpha")
    if spec.quantize.gptq and not has_calib:
        raise PipelineSpecError("gptq takes each linear's input Hessian from calibration data: set calibrate.data "
                                "or calibrate.from_dump", path=file, field="quantize.gptq")
    if spec.calibrate.engine not in ENGINES:
        raise PipelineSpecError(f"{spec.calibrate.engine!r} is not one of {', '.join(ENGINES)}", path=file,
                                field="calibrate.engine")
    if spec.quantize.draft_vocab is not None and not has_calib:
        raise PipelineSpecError("draft_vocab ranks the target's own next tokens in calibration data: set "
                                "calibrate.data", path=file, field="quantize.draft_vocab")
    if spec.calibrate.data and not spec.target:
        raise PipelineSpecError("calibration runs the target model: name it", path=file, field="target")
    if spec.calibrate.from_dump and not spec.target:
        raise PipelineSpecError("importing a dump reads the target's config, final norm and lm_head: name it",
                                path=file, field="target")
    if spec.push.enabled:
        if not spec.push.repo_id:
            raise PipelineSpecError("required when push is enabled (or set push.enabled: false)", path=file,
                                    field="push.repo_id")
        problem = repo_id_problem(spec.push.repo_id)
        if problem:
            raise PipelineSpecError(f"{spec.push.repo_id!r} is {problem}", path=file, field="push.repo_id")
        if spec.push.repo_id.split("/")[0] in PLACEHOLDER_OWNERS:
            raise PipelineSpecError(f"{spec.push.repo_id!r} is a placeholder: pass --repo-id with your user or "
                                    "organisation, or --no-push", path=file, field="push.repo_id")
        for key in ("target", "base_model"):      # the card names them by Hub id: judged now, not after the run
            value = getattr(spec.push, key)
            if value is not None and repo_id_problem(value):
                raise PipelineSpecError(f"{value!r} is {repo_id_problem(value)}: the card names the {key} by its Hub "
                                        "id", path=file, field=f"push.{key}")
    if spec.gguf.enabled:
        _check_gguf(spec, has_calib, file)
    for name in ("source", "target"):
        value = getattr(spec, name)
        if value is not None and not _is_local(value) and repo_id_problem(value):
            raise PipelineSpecError(f"{value!r} is no such folder (a relative path starts from the current folder, "
                                    f"{Path.cwd()}), and {repo_id_problem(value)}", path=file, field=name)
    workdir = Path(spec.workdir).expanduser().resolve()
    for name, value in (("source", spec.source), ("target", spec.target), ("calibrate.from_dump",
                                                                           spec.calibrate.from_dump)):
        if value is not None and _is_local(value) and workdir.is_relative_to(Path(value).expanduser().resolve()):
            raise PipelineSpecError(f"{spec.workdir!r} is inside {name} {value!r}: the run would write into what it "
                                    "reads", path=file, field="workdir")
    for section, build in (("calibrate", calibrate_options), ("calibrate", import_options),
                           ("quantize", quantize_options),
                           ("validate", validate_options), ("bench", bench_options), ("push", push_options)):
        try:       # every stage's options are checked before the first stage runs
            build(spec)
        except Eagle3QuantError as exc:
            where = f"{section}.{exc.field}" if exc.field else section
            raise PipelineSpecError(exc.message, path=file, field=where) from None
    return spec


def _check_gguf(spec: PipelineSpec, has_calib: bool, file: str | None) -> None:
    g = spec.gguf
    if not spec.target:
        raise PipelineSpecError("llama.cpp's converter takes the target's tokenizer and config: name it", path=file,
                                field="target")
    if g.draft_vocab is not None and not has_calib:
        raise PipelineSpecError("draft_vocab ranks the target's own next tokens in calibration data: set "
                                "calibrate.data", path=file, field="gguf.draft_vocab")
    if g.repo_id is not None and repo_id_problem(g.repo_id):
        raise PipelineSpecError(f"{g.repo_id!r} is {repo_id_problem(g.repo_id)}", path=file, field="gguf.repo_id")
    if g.bench_target is not None and not Path(g.bench_target).expanduser().is_file():
        raise PipelineSpecError(f"{g.bench_target!r} is no GGUF file", path=file, field="gguf.bench_target")
    try:
        gguf_options(spec)
    except Eagle3QuantError as exc:
        raise PipelineSpecError(exc.message, path=file, field=f"gguf.{exc.field}" if exc.field else "gguf") from None


def gguf_options(spec: PipelineSpec, **runtime: Any) -> GgufOptions:
    """The gguf stage's options: the pipeline's target; the workdir's set for draft_vocab."""
    values = section_values(spec.gguf)
    return GgufOptions(**values, target=spec.target, calib=spec.calib if values["draft_vocab"] else None,
                       **runtime)


def _needs_calibration(spec: PipelineSpec) -> bool:
    """The scheme's own need (schemes.Scheme.needs_data: static scales, or AWQ unless rtn or gptq replaces it)."""
    q = spec.quantize
    return spec.scheme == AUTO_SCHEME or SCHEMES[spec.scheme].needs_data(bool(q.rtn or q.gptq))


def calibrate_options(spec: PipelineSpec, **runtime: Any) -> CalibrationOptions:
    """The calibrate stage's options: a capture runs the target as the pipeline serves it (`target_quantization`)."""
    served = spec.target_quantization if spec.calibrate.data else None
    return CalibrationOptions(**section_values(spec.calibrate), revision=spec.revision, target_quantization=served,
                              **runtime)


def import_options(spec: PipelineSpec, **runtime: Any) -> ImportOptions:
    """The options of `calibrate.from_dump`'s import: the section's taps and engine, its format and layer ids."""
    c = spec.calibrate
    return ImportOptions(target=spec.target, engine=c.engine, tap_convention=c.tap_convention,
                         aux_layer_ids=c.aux_layer_ids, revision=spec.revision,
                         **{name: getattr(c, name) for name in IMPORT_FIELDS}, **runtime)


def quantize_options(spec: PipelineSpec, **runtime: Any) -> QuantizeOptions:
    """The quantize stage's options; `calib` is the workdir's set when the scheme or auto_exclude needs one, or
    when there is one and serve_taps is trained (the candidate layers are measured on it)."""
    has_calib = bool(spec.calibrate.data or spec.calibrate.from_dump)
    needs_calib = (_needs_calibration(spec) or spec.quantize.auto_exclude is not None
                   or spec.quantize.draft_vocab is not None or spec.quantize.smooth_alpha is not None
                   or spec.quantize.gptq or (has_calib and spec.quantize.serve_taps == "trained"))
    return QuantizeOptions(**section_values(spec.quantize), scheme=spec.scheme, revision=spec.revision,
                           calib=spec.calib if needs_calib else None, **runtime)


def validate_options(spec: PipelineSpec, **runtime: Any) -> ValidateOptions:
    return ValidateOptions(**section_values(spec.validate), target=spec.target, **runtime)


def bench_options(spec: PipelineSpec, **runtime: Any) -> BenchOptions:
    """The bench stage's options: the pipeline's target; prompts from the section, else the workdir's set."""
    from eagle3_quant.records.calibration import INDEX_NAME

    values = section_values(spec.bench)
    if values.get("prompts") is None and (spec.calib / INDEX_NAME).is_file():
        values["prompts"] = str(spec.calib)
    return BenchOptions(**values, target=spec.target, target_quantization=spec.target_quantization, **runtime)


def push_options(spec: PipelineSpec, **runtime: Any) -> PushOptions:
    """The push stage's options; the card's target and base model default to the pipeline's target and source when
    those are Hub ids (a local folder's name is no name for a card)."""
    values = section_values(spec.push)
    hub_ids = {"target": spec.target, "base_model": spec.source}
    for key, value in hub_ids.items():
        if values[key] is None and value is not None and not _is_local(value) and not repo_id_problem(value):
            values[key] = value
    return PushOptions(**{**values, **runtime})


def _is_local(value: str) -> bool:
    return Path(value).expanduser().exists()


NULL_TEXTS = ("", "null", "Null", "NULL", "~")     # what YAML reads as null


Override = str | tuple[str, Any]     # "KEY=VALUE" from --set, or (dotted key, value) from one of run's own flags


def _field_hint(keys: list[str]) -> Any:
    """The type of the pipeline field at `keys` (a dotted path); None when no field is there."""
    cls, hint = PipelineSpec, None
    for key in keys:
        if cls is None or not dataclasses.is_dataclass(cls):
            return None
        fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
        if key not in fields:
            return None
        hint = typing.get_type_hints(cls)[key]
        cls = hint if dataclasses.is_dataclass(hint) else None
    return hint


def _is_text(hint: Any) -> bool:
    """A string field (`str`, `str | None`, a path): its --set value is the text itself, never read as YAML."""
    args = [a for a in (typing.get_args(hint) or (hint,)) if a is not type(None)]
    return bool(args) and all(a in (str, Path) for a in args)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`push.repo_id=org/x` -> (["push", "repo_id"], "org/x"). A string field takes the text as written (`wd #1`,
    `007`); nothing or `null` unsets one that may be null. Any other field reads the value as a YAML scalar."""
    key, sep, value = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(keys):
        raise PipelineSpecError(f"override {text!r} is not KEY=VALUE (for example push.dry_run=true)", field="--set")
    hint = _field_hint(keys)
    if hint is not None and _is_text(hint):
        nullable = type(None) in typing.get_args(hint)
        return keys, None if not value or (nullable and value in NULL_TEXTS) else value
    if not value.strip():
        return keys, None
    return keys, load_yaml_text(value, f"--set {key.strip()}", PipelineSpecError, kind="value")


def apply_overrides(raw: dict, overrides: list[Override]) -> dict:
    merged = dict(raw)
    for override in overrides:
        keys, value = (override[0].split("."), override[1]) if isinstance(override, tuple) \
            else parse_override(override)
        node = merged
        for key in keys[:-1]:
            child = node.get(key)
            node[key] = dict(child) if isinstance(child, dict) else {}
            node = node[key]
        node[keys[-1]] = value
    return merged


def load_pipeline(path: str | Path, overrides: list[Override] | None = None) -> PipelineSpec:
    path = Path(path)
    try:
        raw = load_yaml_text(read_limited_text(path, MAX_YAML_BYTES, PipelineSpecError), path, PipelineSpecError)
    except FileNotFoundError:
        raise PipelineSpecError("no such pipeline file", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineSpecError(f"not a readable YAML file ({exc})", path=path) from None
    raw = {} if raw is None else raw
    if isinstance(raw, dict):
        raw = apply_overrides(raw, overrides or [])
    spec = _build(PipelineSpec, raw, "", str(path))   # workdir stays relative to where `run` is started
    return _check(dataclasses.replace(spec, path=str(path)), str(path))
