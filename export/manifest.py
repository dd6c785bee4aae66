"""`eagle3_quant.json`: what was made, from what, with which tools, and the hash of every file."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from eagle3_quant.hashing import FileDigest, digest_folder

MANIFEST_NAME = "eagle3_quant.json"
MANIFEST_VERSION = 1
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
class Manifest:
    data: dict[str, Any]

    @property
    def outputs(self) -> list[dict]:
        return self.data["outputs"]

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        return cls(json.loads((folder / MANIFEST_NAME).read_text()))


def write_manifest(out: Path, body: dict[str, Any], inputs: list[FileDigest],
                   outputs: list[FileDigest] | None = None) -> Manifest:
    """Write the manifest last, with every output file's digest (the manifest itself excepted).

    `outputs` are digests already taken after the last write (by the export check); else OUT is hashed here.
    """
    if outputs is None:
        outputs = digest_folder(out, skip=frozenset({MANIFEST_NAME}))
    data = {
        "manifest_version": MANIFEST_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": sys.argv[:1] and [Path(sys.argv[0]).name, *sys.argv[1:]],
        "versions": library_versions(),
        **body,
        "inputs": [d.to_dict() for d in inputs],
        "outputs": [d.to_dict() for d in outputs],
    }
    (out / MANIFEST_NAME).write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    return Manifest(data)
