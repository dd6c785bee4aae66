"""Evidence belongs to its artifact: a validation report names the artifact files it validated by sha256.

`validate` records ``artifact_files`` (path -> sha256 of every file of OUT but the manifest, the card, the
report itself and bench.json); `push` and the card accept a report only when those are exactly the manifest's
outputs, whose files push checks against their hashes before sending them.
"""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest
from eagle3_quant.records.validation_report import REPORT_NAME
from eagle3_quant.util.hashing import digest_folder

NOT_ARTIFACT = frozenset({REPORT_NAME, MANIFEST_NAME, "README.md", BENCH_NAME})   # report, manifest, card, engine run


def artifact_digests(out: Path) -> dict[str, str]:
    """path -> sha256 of the artifact files in OUT (hidden files, manifest, card and report left out)."""
    return {d.path: d.sha256 for d in digest_folder(out) if d.path not in NOT_ARTIFACT}


def manifest_digests(manifest: Manifest | None) -> dict[str, str]:
    """path -> sha256 of the artifact files as the manifest lists them ({} without a manifest)."""
    if manifest is None:
        return {}
    return {e.path: e.sha256 for e in manifest.outputs if e.path not in NOT_ARTIFACT}

