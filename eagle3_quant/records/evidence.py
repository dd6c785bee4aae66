"""Evidence belongs to its artifact: a validation report names the artifact files it validated by sha256.

`validate` records ``artifact_files`` (path -> sha256 of every file of OUT but the manifest, the card, the
report itself and bench.json); `push` and the card accept a report only when those are exactly the manifest's
outputs, whose files push checks against their hashes before sending them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest
from eagle3_quant.util.hashing import digest_folder

BENCH_NAME = "bench.json"        # `eagle3-quant bench`: vLLM's own measurement (eagle3_quant/bench/api.py)
NOT_ARTIFACT = frozenset({"validation.json", MANIFEST_NAME, "README.md", BENCH_NAME})   # report, manifest, card,
                                                                                       # engine run


def artifact_digests(out: Path) -> dict[str, str]:
    """path -> sha256 of the artifact files in OUT (hidden files, manifest, card and report left out)."""
    return {d.path: d.sha256 for d in digest_folder(out) if d.path not in NOT_ARTIFACT}


def manifest_digests(manifest: Manifest | None) -> dict[str, str]:
    """path -> sha256 of the artifact files as the manifest lists them ({} without a manifest)."""
    if manifest is None:
        return {}
    return {e.path: e.sha256 for e in manifest.outputs if e.path not in NOT_ARTIFACT}


def evidence_problem(report: Mapping[str, Any], expected: Mapping[str, str]) -> str | None:
    """Why this report is not evidence for the artifact whose files are `expected` (None when it is)."""
    files = report.get("artifact_files")
    named = report.get("artifact")
    which = f" (it names artifact {named!r})" if isinstance(named, str) else ""
    if not isinstance(files, dict) or not files:
        return f"the validation report does not name the files it validated{which}: validate this folder again"
    if dict(files) != dict(expected):
        differ = sorted(p for p in set(files) | set(expected) if files.get(p) != expected.get(p))
        return (f"the validation report belongs to another artifact{which}: its sha256 differ for "
                f"{', '.join(differ[:3])}; validate this folder again")
    return None
