"""A GGUF draft folder (`eagle3-quant gguf`) as the verbs that measure and publish it open it: its manifest (with its
gguf record), its files checked against the manifest, what evidence names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.records.evidence import check_integrity, manifest_digests
from eagle3_quant.records.gguf_record import GgufRecord
from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest


@dataclass(frozen=True)
class GgufArtifact:
    path: Path
    manifest: Manifest
    record: GgufRecord
    files: dict[str, str]           # path -> sha256 (what the bench measured)

    @property
    def file(self) -> Path:
        return self.path / self.record.file


def is_gguf_artifact(out: Path) -> bool:
    """OUT was written by `gguf` (its manifest has a gguf record), or holds a .gguf file beside a manifest."""
    if not (out / MANIFEST_NAME).is_file():
        return False
    try:
        return Manifest.read(out).gguf is not None
    except Exception:   # noqa: BLE001 - a damaged manifest is the verb's to report
        return any(out.glob("*.gguf"))


def open_gguf_artifact(out: Path, error=DraftFormatError) -> GgufArtifact:
    manifest = Manifest.read(out, error)
    if manifest.gguf is None:
        raise error("not a GGUF draft (its manifest has no gguf record)", path=out,
                    hint="make one with `eagle3-quant gguf DRAFT OUT --target TARGET`")
    check_integrity(out, manifest, error)
    return GgufArtifact(out, manifest, manifest.gguf, manifest_digests(manifest))
