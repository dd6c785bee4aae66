"""Evidence belongs to its artifact: a validation report, a bench record and a speedup estimate name the artifact
files they are about by sha256.

`validate` records ``artifact_files`` (path -> sha256 of every file of OUT but the manifest, the card, the
report itself, bench.json and the estimate); `push`, the card and `estimate` accept a report only when those are
exactly the manifest's outputs, and only an artifact whose files still are what the manifest lists
(`check_integrity`, asked first).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from eagle3_quant.errors import Eagle3QuantError
from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest
from eagle3_quant.records.speedup_estimate import ESTIMATE_NAME
from eagle3_quant.records.validation_report import REPORT_NAME
from eagle3_quant.util.hashing import FileDigest, digest_folder

CARD_NAME = "README.md"
# written about the artifact after quantization: report, manifest, card, engine run, estimate
NOT_ARTIFACT = frozenset({REPORT_NAME, MANIFEST_NAME, CARD_NAME, BENCH_NAME, ESTIMATE_NAME})


def check_integrity(out: Path, manifest: Manifest, error: type[Eagle3QuantError],
                    known: Mapping[str, FileDigest] | None = None) -> None:
    """Refuse OUT unless it holds what its manifest lists, unchanged, and nothing else but the files written about
    it (`NOT_ARTIFACT`; hidden files aside). `known`: digests of files already read (not read again)."""
    listed = {entry.path for entry in manifest.outputs}
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                     if p.is_file() and not any(part.startswith(".") for part in p.relative_to(out).parts))
    unknown = [p for p in present if p not in listed and p not in NOT_ARTIFACT]
    if unknown:
        raise error(f"files not in the manifest: {', '.join(map(repr, unknown[:5]))}", path=out,
                    hint="remove them, or quantize again; only what the manifest lists is published")
    problems = manifest.output_problems(out, skip=frozenset({CARD_NAME}), digests=known)
    if problems:
        raise error(f"the artifact differs from its manifest: {'; '.join(problems[:3])}", path=out,
                    hint="quantize again; a changed artifact is never published")


def artifact_digests(out: Path) -> dict[str, str]:
    """path -> sha256 of the artifact files in OUT (hidden files, manifest, card and report left out)."""
    return {d.path: d.sha256 for d in digest_folder(out) if d.path not in NOT_ARTIFACT}


def manifest_digests(manifest: Manifest | None) -> dict[str, str]:
    """path -> sha256 of the artifact files as the manifest lists them ({} without a manifest)."""
    if manifest is None:
        return {}
    return {e.path: e.sha256 for e in manifest.outputs if e.path not in NOT_ARTIFACT}

