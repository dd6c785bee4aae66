"""A manifest read back for publishing: the fields push and the card use, of the right types, and every output
path a file inside OUT (a manifest listing `../secret.txt` would make push hash and upload that file)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eagle3_quant.errors import PublishError

SHA256 = re.compile(r"^[0-9a-f]{64}$")
OBJECT_FIELDS = ("source", "scheme", "versions")
LIST_FIELDS = ("layers", "outputs")


def output_path(out: Path, rel: object, manifest: Path) -> Path:
    """OUT/rel, refused unless `rel` is a relative path that stays inside OUT (links included)."""
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts \
            or "\\" in rel:
        raise PublishError(f"output path {rel!r} is not a path inside the output folder", path=manifest,
                           field="outputs.path")
    path = out / rel
    if not path.resolve().is_relative_to(out.resolve()):
        raise PublishError(f"output {rel!r} is a link leading outside the output folder", path=manifest,
                           field="outputs.path")
    return path


def check_manifest_data(data: Any, out: Path, manifest: Path) -> dict:
    """The manifest's object, checked; raises PublishError naming the field."""
    if not isinstance(data, dict):
        raise PublishError("the manifest is not a JSON object", path=manifest)
    for key in (*OBJECT_FIELDS, *LIST_FIELDS):
        if key not in data:
            raise PublishError("manifest lacks this field", path=manifest, field=key)
    for key in OBJECT_FIELDS:
        if not isinstance(data[key], dict):
            raise PublishError("is not an object", path=manifest, field=key)
    for key in LIST_FIELDS:
        if not isinstance(data[key], list) or not all(isinstance(e, dict) for e in data[key]):
            raise PublishError("is not a list of objects", path=manifest, field=key)
    if not isinstance(data["scheme"].get("name"), str):
        raise PublishError("is not a scheme name", path=manifest, field="scheme.name")
    for entry in data["outputs"]:
        output_path(out, entry.get("path"), manifest)
        size, sha = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise PublishError(f"output {entry['path']!r} has no byte size", path=manifest, field="outputs.size")
        if not isinstance(sha, str) or not SHA256.match(sha):
            raise PublishError(f"output {entry['path']!r} has no sha256", path=manifest, field="outputs.sha256")
    for layer in data["layers"]:
        if not isinstance(layer.get("quantized"), bool) or not isinstance(layer.get("module"), str):
            raise PublishError("a layer entry lacks 'module' or 'quantized'", path=manifest, field="layers")
    return data
