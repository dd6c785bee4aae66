"""A manifest read back (validate, push, card): the fields they use, of the right types, and every output path a
file inside OUT (a manifest listing `../secret.txt` would make push hash and upload that file). Errors are
PublishError by default; `validate` asks for DraftFormatError."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eagle3_quant.errors import Eagle3QuantError, PublishError
from eagle3_quant.reading.limits import load_json_file

MANIFEST_NAME = "eagle3_quant.json"

SHA256 = re.compile(r"^[0-9a-f]{64}$")
OBJECT_FIELDS = ("source", "scheme", "versions")
LIST_FIELDS = ("layers", "outputs")


def output_path(out: Path, rel: object, manifest: Path, error: type[Eagle3QuantError] = PublishError) -> Path:
    """OUT/rel, refused unless `rel` is a relative path that stays inside OUT (links included)."""
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts \
            or "\\" in rel:
        raise error(f"output path {rel!r} is not a path inside the output folder", path=manifest,
                           field="outputs.path")
    path = out / rel
    if not path.resolve().is_relative_to(out.resolve()):
        raise error(f"output {rel!r} is a link leading outside the output folder", path=manifest,
                           field="outputs.path")
    return path


def check_manifest_data(data: Any, out: Path, manifest: Path, error: type[Eagle3QuantError] = PublishError) -> dict:
    """The manifest's object, checked; raises PublishError naming the field."""
    if not isinstance(data, dict):
        raise error("the manifest is not a JSON object", path=manifest)
    for key in (*OBJECT_FIELDS, *LIST_FIELDS):
        if key not in data:
            raise error("manifest lacks this field", path=manifest, field=key)
    for key in OBJECT_FIELDS:
        if not isinstance(data[key], dict):
            raise error("is not an object", path=manifest, field=key)
    for key in LIST_FIELDS:
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


def read_checked_manifest(out: Path, error: type[Eagle3QuantError] = PublishError) -> dict | None:
    """OUT's manifest checked as above; None when OUT has none."""
    path = out / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        data = load_json_file(path, error)
    except OSError as exc:
        raise error(f"unreadable manifest ({exc.strerror or exc})", path=path) from None
    return check_manifest_data(data, out, path, error)
