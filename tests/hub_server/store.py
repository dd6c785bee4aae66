"""In-memory git-like storage for the test Hub: repos, commits, branches, tags, pull requests, LFS objects."""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import threading
from dataclasses import dataclass, field

LFS_THRESHOLD = 10 * 1024 * 1024
GITATTRIBUTES = "\n".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text" for pattern in (
    "*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.onnx", "*.msgpack", "*.gguf", "*.zip")) + "\n"


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str
    lfs: bool

    def oid(self, content: bytes) -> str:
        """The git oid the Hub reports: of the pointer for LFS files, of the content otherwise."""
        return git_oid(lfs_pointer(self.sha256, self.size) if self.lfs else content)


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, FileEntry]
    title: str


@dataclass
class Repo:
    repo_id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    prs: dict[int, str] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        if revision.startswith("refs/pr/") and revision[8:].isdigit():
            return self.prs.get(int(revision[8:]))
        return revision if revision in self.commits else None


class HubStore:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}   # sha256 -> content (regular files and uploaded LFS objects)
        self._counter = itertools.count()

    def content(self, entry: FileEntry) -> bytes:
        return self.blobs[entry.sha256]

    def put_blob(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[sha] = data
        return sha

    def is_lfs(self, repo: Repo, commit: str | None, path: str, size: int, sample: bytes) -> bool:
        attributes = b""
        if commit and ".gitattributes" in repo.commits[commit].files:
            attributes = self.content(repo.commits[commit].files[".gitattributes"])
        patterns = [line.split()[0] for line in attributes.decode().splitlines() if "filter=lfs" in line]
        return size >= LFS_THRESHOLD or b"\0" in sample or any(fnmatch.fnmatch(path, p) for p in patterns)

    def new_commit(self, repo: Repo, parent: str | None, files: dict[str, FileEntry], title: str) -> str:
        seed = f"{repo.repo_id}|{parent}|{title}|{next(self._counter)}|{sorted(files.items())}"
        oid = hashlib.sha1(seed.encode()).hexdigest()
        repo.commits[oid] = Commit(oid, parent, dict(files), title)
        return oid

    def create_repo(self, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_id, private)
        sha = self.put_blob(GITATTRIBUTES.encode())
        files = {".gitattributes": FileEntry(len(GITATTRIBUTES), sha, False)}
        repo.branches["main"] = self.new_commit(repo, None, files, "initial commit")
        self.repos[repo_id] = repo
        return repo

    def commit_count(self, repo_id: str) -> int:
        return len(self.repos[repo_id].commits)
