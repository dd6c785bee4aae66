"""An artifact folder as the verbs that measure and publish it read it, each part once: its tensors and config
(`reading/artifact.py`) and what its manifest says quantize did (the vocabulary it pruned, the layer ids it wrote,
the tensors smoothing folded, the source it came from). `bench`, `validate` and `push` open it once and hand it on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from eagle3_quant.errors import DraftFormatError, ManifestError
from eagle3_quant.reading.artifact import Fp8Artifact, read_artifact
from eagle3_quant.reading.draft import DraftCheckpoint, read_draft
from eagle3_quant.records.evidence import NOT_ARTIFACT
from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest
from eagle3_quant.records.public_names import recorded_source_path
from eagle3_quant.util.hashing import FileDigest, digest_folder

VOCAB_TENSORS = frozenset({"lm_head.weight", "d2t", "t2d"})


@dataclass(frozen=True)
class QuantizedArtifact:
    files: Fp8Artifact
    manifest: Manifest | None               # None: OUT has none, or one that does not read (`manifest_error`)
    manifest_error: ManifestError | None = None

    @property
    def path(self) -> Path:
        return self.files.path

    @cached_property
    def digests(self) -> dict[str, FileDigest]:
        """Every file of OUT (hidden ones left out) by relative path, each read once; config.json's from the bytes
        its config was parsed from."""
        known = self.files.config_digest
        found = digest_folder(self.path, skip=frozenset({known.path}) if known else frozenset())
        return {d.path: d for d in [*found, *([known] if known else [])]}

    @property
    def artifact_files(self) -> dict[str, str]:
        """path -> sha256 of the artifact's own files (what evidence names; `records/evidence.py`)."""
        return {path: d.sha256 for path, d in sorted(self.digests.items()) if path not in NOT_ARTIFACT}

    def manifest_problems(self) -> list[str]:
        """What differs from the manifest's outputs, from the digests already taken ([] without a manifest)."""
        return self.manifest.output_problems(self.path, digests=self.digests) if self.manifest else []

    @property
    def pruned_vocab(self) -> int | None:
        """The draft vocabulary `quantize --draft-vocab` pruned OUT to, else None."""
        try:
            return int((self.manifest.vocab_pruning or {})["draft_vocab"]) if self.manifest else None
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def written_taps(self) -> dict:
        """The aux layer ids `quantize --serve-taps trained` wrote into OUT's config, else {}."""
        record = self.manifest.serve_taps if self.manifest else None
        return dict(record.written) if record is not None else {}

    @property
    def smoothed_tensors(self) -> set[str]:
        """The BF16 tensors `quantize --smooth-alpha` folded its scales into."""
        try:
            return {str(n) for n in (self.manifest.smoothing or {}).get("folded_tensors", [])} if self.manifest \
                else set()
        except (TypeError, AttributeError):
            return set()

    def source(self) -> Path | None:
        """The BF16 source folder recorded at quantization, if it is a local folder."""
        source = recorded_source_path(self.path)
        if source is None and self.manifest is not None:   # written before the local record: the manifest's path
            recorded = self.manifest.source.path
            source = Path(recorded) if recorded and Path(recorded).is_absolute() else None
        return source


def open_artifact(out: Path) -> QuantizedArtifact:
    """OUT's headers and config, and its manifest when it has one (its error kept, for the caller to raise)."""
    files = read_artifact(out)
    if not (out / MANIFEST_NAME).is_file():
        return QuantizedArtifact(files, None)
    try:
        return QuantizedArtifact(files, Manifest.read(out))
    except ManifestError as exc:
        return QuantizedArtifact(files, None, exc)


def read_reference(reference: Path | None, artifact: QuantizedArtifact) -> DraftCheckpoint | None:
    """The BF16 draft to compare with: the one given, else the manifest's local source if it still exists."""
    if reference is not None:
        return read_draft(reference)
    source = artifact.source()
    if source is not None and source.is_dir():
        try:
            return read_draft(source)
        except DraftFormatError:
            return None
    return None
