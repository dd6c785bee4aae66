"""`eagle3_quant.json`: what was made, from what, with which tools, and the hash of every file.

The one owner of the manifest: its file name, its schema (frozen dataclasses), writing, reading with field-by-field
checks (every output path confined to OUT: a manifest listing `../secret.txt` would make push hash and upload that
file) and "the outputs still match". Every reader (validate, the card, push, the pipeline, the bench) goes through
`Manifest.read`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from eagle3_quant.errors import Eagle3QuantError, ManifestError, PublishError, one_line
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.records.auto_choice import AutoChoiceRecord
from eagle3_quant.records.gguf_record import GgufRecord
from eagle3_quant.records.serve_taps import ServeTapsRecord
from eagle3_quant.util.hashing import FileDigest, digest_folder, sha256_file

MANIFEST_NAME = "eagle3_quant.json"
MANIFEST_VERSION = 1
SHA256 = re.compile(r"^[0-9a-f]{64}$")
LIBRARIES = ("eagle3-quant", "amd-quark", "torch", "transformers", "safetensors", "huggingface_hub")


def library_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0]}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


@dataclass(frozen=True)
class SourceRecord:
    path: str                                # a local source by its folder name only (nothing private published)
    format: str
    architecture: str | None = None
    hub_id: str | None = None                # the Hub id a local folder was downloaded as, when its path says so
    repo_id: str | None = None
    revision: str | None = None
    commit: str | None = None
    pickle_converted: bool = False
    card: dict[str, Any] | None = None       # license / base_model read from the source's own card


@dataclass(frozen=True)
class SchemeRecord:
    name: str
    weight: str
    input: str


@dataclass(frozen=True)
class ExcludeRecord:
    modules: list[str]
    vllm_patterns: list[str]
    reasons: dict[str, str]


@dataclass(frozen=True)
class EnginesRecord:
    requested: str                 # --engine as given: auto, both, vllm or sglang
    serves: list[str]              # the engines the artifact is for
    left_out: dict[str, str]       # engine -> why the artifact is not for it (engines/choice.py)


@dataclass(frozen=True)
class LayerRecord:
    role: str
    module: str
    shape: list[int]          # [out_features, in_features]
    quantized: bool
    reason: str


@dataclass(frozen=True)
class Manifest:
    source: SourceRecord
    scheme: SchemeRecord
    exclude: ExcludeRecord
    layers: list[LayerRecord]
    inputs: list[FileDigest]
    outputs: list[FileDigest]
    device: str = "cpu"
    calibration: dict[str, Any] | None = None     # static scales: the set, samples, tokens, every input scale
    sensitivity: dict[str, Any] | None = None     # --auto-exclude: threshold and the measured table
    vocab_pruning: dict[str, Any] | None = None   # --draft-vocab: sizes and coverage before and after
    smoothing: dict[str, Any] | None = None       # --smooth-alpha: alpha, sites, the BF16 tensors it folded into
    gptq: dict[str, Any] | None = None            # --gptq: samples, draft steps, the rounding order, Quark's settings
    auto_choice: AutoChoiceRecord | None = None   # --scheme auto: the candidate ladder, measured, and the choice
    serve_taps: ServeTapsRecord | None = None     # --serve-taps: the layers each engine feeds, what was written, why
    engines: EnginesRecord | None = None          # the engines it is for (None: written before --engine auto)
    gguf: GgufRecord | None = None                # a GGUF draft (`eagle3-quant gguf`): its file, type, tensors
    manifest_version: int = MANIFEST_VERSION
    created_at: str = ""
    command: list[str] = field(default_factory=list)   # verb, flags, public names (records/public_names.py)
    versions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for optional in ("calibration", "sensitivity", "vocab_pruning", "smoothing", "gptq", "auto_choice",
                         "serve_taps", "engines", "gguf"):
            if data[optional] is None:
                del data[optional]
        order = ("manifest_version", "created_at", "command", "versions", "source", "scheme", "engines", "exclude",
                 "layers", "device", "serve_taps", "calibration", "sensitivity", "vocab_pruning", "smoothing", "gptq",
                 "auto_choice", "gguf", "inputs", "outputs")
        return {key: data[key] for key in order if key in data}

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> Manifest:
        """Check every field's shape; a wrong one is a `ManifestError` naming it."""
        if not isinstance(data, dict):
            raise ManifestError("is not a JSON object", path=path)
        if data.get("manifest_version") != MANIFEST_VERSION:
            raise ManifestError(f"unknown version {data.get('manifest_version')!r} (this tool reads "
                                f"{MANIFEST_VERSION})", path=path, field="manifest_version")
        try:
            return cls(
                source=_record(SourceRecord, data, "source", path),
                scheme=_record(SchemeRecord, data, "scheme", path),
                exclude=_record(ExcludeRecord, data, "exclude", path),
                layers=[_record(LayerRecord, {"layers": x}, "layers", path) for x in _list(data, "layers", path)],
                inputs=[_digest(x, "inputs", path) for x in _list(data, "inputs", path)],
                outputs=[_digest(x, "outputs", path) for x in _list(data, "outputs", path)],
                device=str(data.get("device", "cpu")),
                calibration=data.get("calibration") if isinstance(data.get("calibration"), dict) else None,
                sensitivity=data.get("sensitivity") if isinstance(data.get("sensitivity"), dict) else None,
                vocab_pruning=data.get("vocab_pruning") if isinstance(data.get("vocab_pruning"), dict) else None,
                smoothing=data.get("smoothing") if isinstance(data.get("smoothing"), dict) else None,
                gptq=data.get("gptq") if isinstance(data.get("gptq"), dict) else None,
                auto_choice=(AutoChoiceRecord.from_dict(data["auto_choice"], path)
                             if data.get("auto_choice") is not None else None),
                serve_taps=(ServeTapsRecord.from_dict(data["serve_taps"], path)
                            if data.get("serve_taps") is not None else None),
                engines=_record(EnginesRecord, data, "engines", path) if data.get("engines") is not None else None,
                gguf=GgufRecord.from_dict(data["gguf"], path) if data.get("gguf") is not None else None,
                created_at=str(data.get("created_at", "")),
                command=[str(c) for c in data.get("command") or []],
                versions={str(k): str(v) for k, v in (data.get("versions") or {}).items()},
            )
        except (TypeError, AttributeError) as exc:
            raise ManifestError(f"malformed ({exc})", path=path) from None

    @classmethod
    def read(cls, folder: Path, error: type[Eagle3QuantError] = ManifestError) -> Manifest:
        """The manifest of an output folder, read within the parser limits, every field checked and every output
        path confined to the folder; a missing or malformed one raises `error`."""
        folder = Path(folder)
        data = _read_checked(folder, error)
        if data is None:
            raise error(f"no {MANIFEST_NAME}: not an eagle3-quant output folder", path=folder,
                        hint="make it with `eagle3-quant quantize SRC OUT`")
        try:
            return cls.from_dict(data, folder / MANIFEST_NAME)
        except ManifestError as exc:
            if error is ManifestError:
                raise
            raise error(exc.message, path=exc.path, field=exc.field) from None

    def write(self, folder: Path) -> Path:
        path = Path(folder) / MANIFEST_NAME
        path.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")
        return path

    def output_problems(self, folder: Path, skip: frozenset[str] = frozenset(),
                        digests: Mapping[str, FileDigest] | None = None) -> list[str]:
        """Every listed output (but `skip`) still present with its recorded size and sha256; else one line each.
        `digests` (relative path -> digest): the folder's files as already read, instead of reading them again."""
        problems = []
        for entry in (e for e in self.outputs if e.path not in skip):
            file = Path(folder) / entry.path
            known = digests.get(entry.path) if digests is not None else None
            if known is None and not file.is_file():
                problems.append(f"{entry.path} is missing")
                continue
            size, sha = (known.size, known.sha256) if known else (file.stat().st_size, None)
            if size != entry.size or (sha if sha is not None else sha256_file(file)) != entry.sha256:
                problems.append(f"{entry.path} changed after export (sha256 differs from the manifest)")
        return problems

    @property
    def source_name(self) -> str:
        return self.source.repo_id or self.source.path


def served_layers(artifact: Path) -> list[int] | None:
    """The layers `quantize --serve-taps trained` made every engine feed (its manifest), else None."""
    if not (artifact / MANIFEST_NAME).is_file():
        return None
    try:
        record = Manifest.read(artifact).serve_taps
    except Eagle3QuantError:
        return None
    return record.served if record is not None and record.mode == "trained" else None


def output_path(out: Path, rel: object, manifest: Path, error: type[Eagle3QuantError] = PublishError) -> Path:
    """OUT/rel, refused unless `rel` is a relative path that stays inside OUT (links included)."""
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts \
            or "\\" in rel or one_line(rel) != rel:      # a control character: not a name this tool writes
        raise error(f"output path {rel!r} is not a path inside the output folder", path=manifest,
                    field="outputs.path")
    path = out / rel
    if not path.resolve().is_relative_to(out.resolve()):
        raise error(f"output {rel!r} is a link leading outside the output folder", path=manifest,
                    field="outputs.path")
    return path


def _check_data(data: Any, out: Path, manifest: Path, error: type[Eagle3QuantError]) -> dict:
    """The fields validate, push and the card use, of the right types, every output path inside OUT."""
    if not isinstance(data, dict):
        raise error("the manifest is not a JSON object", path=manifest)
    for key in ("source", "scheme", "versions", "layers", "outputs"):
        if key not in data:
            raise error("manifest lacks this field", path=manifest, field=key)
    for key in ("source", "scheme", "versions"):
        if not isinstance(data[key], dict):
            raise error("is not an object", path=manifest, field=key)
    for key in ("layers", "outputs"):
        if not isinstance(data[key], list) or not all(isinstance(e, dict) for e in data[key]):
            raise error("is not a list of objects", path=manifest, field=key)
    if not isinstance(data["scheme"].get("name"), str):
        raise error("is not a scheme name", path=manifest, field="scheme.name")
    for entry in data["outputs"]:
        output_path(out, entry.get("path"), manifest, error)
        size, sha = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise error(f"output {entry['path']!r} has no byte size", path=manifest, field="outputs.size")
        if not isinstance(sha, str) or not SHA256.match(sha):
            raise error(f"output {entry['path']!r} has no sha256", path=manifest, field="outputs.sha256")
    for layer in data["layers"]:
        if not isinstance(layer.get("quantized"), bool) or not isinstance(layer.get("module"), str):
            raise error("a layer entry lacks 'module' or 'quantized'", path=manifest, field="layers")
    return data


def _read_checked(out: Path, error: type[Eagle3QuantError]) -> dict | None:
    """OUT's manifest as checked JSON; None when OUT has none."""
    path = out / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        data = load_json_file(path, error)
    except OSError as exc:
        raise error(f"unreadable manifest ({exc.strerror or exc})", path=path) from None
    return _check_data(data, out, path, error)


def _list(data: dict, key: str, path: Path | None) -> list:
    value = data.get(key)
    if not isinstance(value, list):
        raise ManifestError("missing or not a list", path=path, field=key)
    return value


def _record(cls: type, data: dict, key: str, path: Path | None):
    value = data.get(key)
    if not isinstance(value, dict):
        raise ManifestError("missing or not an object", path=path, field=key)
    names = cls.__dataclass_fields__
    try:
        return cls(**{k: v for k, v in value.items() if k in names})
    except TypeError as exc:
        raise ManifestError(f"incomplete ({exc})", path=path, field=key) from None


def _digest(value: Any, key: str, path: Path | None) -> FileDigest:
    if not (isinstance(value, dict) and isinstance(value.get("path"), str) and isinstance(value.get("size"), int)
            and isinstance(value.get("sha256"), str)):
        raise ManifestError("an entry is not {path, size, sha256}", path=path, field=key)
    return FileDigest(value["path"], value["size"], value["sha256"])


def write_manifest(out: Path, body: Manifest, outputs: list[FileDigest] | None = None) -> Manifest:
    """Write the manifest last, with every output file's digest (the manifest itself excepted) and provenance
(`body.command` is the caller's: `public_command`, never the process's argv with its local paths).

    `outputs` are digests already taken after the last write (by the export check); else OUT is hashed here.
    """
    if outputs is None:
        outputs = digest_folder(out, skip=frozenset({MANIFEST_NAME}))
    manifest = replace(body, outputs=list(outputs), manifest_version=MANIFEST_VERSION,
                       created_at=datetime.now(UTC).isoformat(timespec="seconds"), versions=library_versions())
    manifest.write(out)
    return manifest
