"""Resolve SRC: a local folder, or a Hub repo id (+ revision) fetched through huggingface_hub."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import SourceNotFoundError
from eagle3_quant.reading.hub_errors import hub_reads
from eagle3_quant.reading.repo_ids import repo_id_problem

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# What a draft folder needs; pickles are left behind on purpose.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.py", "*.md", "*.jinja"]
PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth"]   # fetched only when the user opts in to pickle weights


@dataclass(frozen=True)
class DraftSource:
    """Where a draft came from: a local folder, or a Hub repo at a resolved commit."""

    path: Path
    repo_id: str | None = None
    revision: str | None = None
    commit: str | None = None

    def describe(self) -> str:
        if self.repo_id:
            return f"{self.repo_id}@{self.commit or self.revision or 'main'}"
        return str(self.path)


def resolve_source(src: str | Path, revision: str | None = None, include_pickle: bool = False) -> DraftSource:
    """A local folder wins; otherwise SRC must look like ORG/NAME and is fetched from the Hub.

    Honours HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE through huggingface_hub itself.
    """
    path = Path(src).expanduser()
    if path.exists():
        if not path.is_dir():
            raise SourceNotFoundError("is a file; give the draft's folder", path=path)
        return DraftSource(path=path.resolve())
    text = str(src)
    problem = repo_id_problem(text)
    if problem:      # refused before any request
        raise SourceNotFoundError(f"no such folder, and {problem}", path=text)
    from huggingface_hub import snapshot_download

    with hub_reads(text):       # unreachable, no such repository, offline with nothing cached: one line
        local = snapshot_download(repo_id=text, revision=revision, allow_patterns=HUB_PATTERNS)
        if include_pickle and not any(Path(local).glob("*.safetensors")):  # pickles only when nothing else
            local = snapshot_download(repo_id=text, revision=revision, allow_patterns=HUB_PATTERNS + PICKLE_PATTERNS)
    local_path = Path(local)
    return DraftSource(path=local_path, repo_id=text, revision=revision, commit=local_path.name)
