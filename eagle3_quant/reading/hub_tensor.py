"""One tensor of a Hub checkpoint, read with HTTP range requests: never the shard that holds it.

The shard index (or the single ``model.safetensors``) says which file holds the tensor; two range requests
read that file's 8-byte header length and its JSON header; a third reads the tensor's bytes. A target's
lm_head (~2 GB of a 5 GB shard for Kimi-K2.5) costs its own bytes plus a few kB.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import CheckpointFileError, DraftFormatError, SourceNotFoundError
from eagle3_quant.reading.hub_errors import hub_failure
from eagle3_quant.reading.hub_reach import reach_hub
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.reading.safetensors_header import MAX_HEADER_BYTES, TensorInfo, _parse_entry

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


@dataclass(frozen=True)
class HubTensor:
    info: TensorInfo           # info.file is the shard's name in the repo
    data: bytes


def read_hub_json(repo_id: str, filename: str, revision: str | None) -> dict | None:
    """A small JSON file of the repo (downloaded to the cache), or None when the repo has no such file."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    with _hub_errors(repo_id):
        try:
            path = Path(hf_hub_download(repo_id, filename, revision=revision))
        except EntryNotFoundError as exc:
            if hub_failure(exc, repo_id) is not None:     # offline or unreachable: not a file the repo lacks
                raise
            return None
    try:
        return load_json_file(path)
    except OSError as exc:
        raise DraftFormatError(f"cannot read ({exc.strerror or exc})", path=f"{repo_id}/{filename}") from exc
    except DraftFormatError as exc:
        raise DraftFormatError(exc.message, path=f"{repo_id}/{filename}", field=exc.field) from None


def read_hub_tensor(repo_id: str, pick: Callable[[list[str]], str | None], revision: str | None = None) \
        -> HubTensor | None:
    """The tensor `pick` chooses among the checkpoint's tensor names (None: none fits, returns None)."""
    index = read_hub_json(repo_id, INDEX, revision)
    if index is not None:
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointFileError("no weight_map object", path=f"{repo_id}/{INDEX}")
        name = pick(list(weight_map))
        if name is None:
            return None
        shard = weight_map[name]
        if not isinstance(shard, str) or not shard.endswith(".safetensors"):
            raise CheckpointFileError(f"{shard!r} is not a safetensors file", path=f"{repo_id}/{INDEX}", tensor=name)
        remote = _RemoteFile(repo_id, shard, revision)
        header = remote.header()
    else:
        remote = _RemoteFile(repo_id, SINGLE, revision)
        header = remote.header()
        name = pick(list(header.entries))
        if name is None:
            return None
    if name not in header.entries:
        raise CheckpointFileError(f"the index names {remote.filename} but its header has no such tensor",
                                  path=f"{repo_id}/{remote.filename}", tensor=name)
    info = _parse_entry(Path(remote.filename), name, header.entries[name], header.file_size - header.data_start)
    begin, end = info.data_offsets
    data = remote.read(header.data_start + begin, header.data_start + end) if end > begin else b""
    return HubTensor(info, data)


@dataclass(frozen=True)
class _Header:
    entries: dict
    data_start: int
    file_size: int


@dataclass(frozen=True)
class _RemoteFile:
    repo_id: str
    filename: str
    revision: str | None

    @property
    def where(self) -> str:
        return f"{self.repo_id}/{self.filename}"

    def header(self) -> _Header:
        prefix, file_size = self._get(0, 8)
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES or 8 + length > file_size:
            raise CheckpointFileError(f"header length {length} goes beyond the file ({file_size} bytes)",
                                      path=self.where)
        raw, _ = self._get(8, 8 + length)
        try:
            entries = json.loads(raw)
        except RecursionError:
            raise CheckpointFileError("header JSON is nested too deeply to be a safetensors header",
                                      path=self.where) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise CheckpointFileError(f"header is not valid JSON ({exc})", path=self.where) from exc
        if not isinstance(entries, dict):
            raise CheckpointFileError("header is not a JSON object", path=self.where)
        entries.pop("__metadata__", None)
        return _Header(entries, 8 + length, file_size)

    def read(self, begin: int, end: int) -> bytes:
        return self._get(begin, end)[0]

    def _get(self, begin: int, end: int) -> tuple[bytes, int]:
        """Bytes [begin, end) of the file and the file's size, from one range request."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        url = hf_hub_url(self.repo_id, self.filename, revision=self.revision)
        with _hub_errors(self.repo_id):
            response = get_session().get(url, headers={**build_hf_headers(), "range": f"bytes={begin}-{end - 1}"})
            hf_raise_for_status(response)
        total = re.fullmatch(r"bytes \d+-\d+/(\d+)", response.headers.get("content-range") or "")
        if response.status_code != 206 or total is None:
            raise SourceNotFoundError(f"the server did not answer a range request for {self.filename} (status "
                                      f"{response.status_code}); the tensor is read without downloading the shard",
                                      path=self.repo_id)
        if len(response.content) != end - begin:
            raise CheckpointFileError(f"range {begin}-{end - 1} returned {len(response.content)} bytes: truncated?",
                                      path=self.where)
        return response.content, int(total.group(1))


class _hub_errors:
    """Hub errors as one-line eagle3_quant errors naming the repo."""

    def __init__(self, repo_id: str) -> None:
        self.repo_id = repo_id

    def __enter__(self) -> None:
        reach_hub()

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None:
            return False
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

        failure = hub_failure(exc, self.repo_id)     # unreachable, no such repository, offline: the common line
        if failure is not None:
            raise failure from exc
        if isinstance(exc, RepositoryNotFoundError | RevisionNotFoundError):
            raise SourceNotFoundError("Hub repository or revision not found (or private without a token)",
                                      path=self.repo_id) from exc
        if isinstance(exc, HfHubHTTPError | OSError) and not isinstance(exc, DraftFormatError | SourceNotFoundError):
            raise SourceNotFoundError(f"Hub request failed: {' '.join(str(exc).split())}", path=self.repo_id) \
                from exc
        return False
