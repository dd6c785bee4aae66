"""A Hub-compatible HTTP server (the subset huggingface_hub 2.x uses to create, upload, tag and download).

Runs in a thread on 127.0.0.1 at a random port. Every request is recorded (method, path, status, whether it
carried a token - never the token itself); faults can be injected per method and path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from .store import FileEntry, HubStore, Repo, git_oid

VALID_RELATIONS = {"adapter", "merge", "quantized", "finetune"}


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: str
    status: int
    authorized: bool


@dataclass
class Fault:
    method: str
    pattern: str            # regex searched in the request path
    status: int
    times: int = 1
    echo_auth: bool = False  # put the request's Authorization header into the error body (a careless server)

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and method == self.method and re.search(self.pattern, path) is not None


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, **extra) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubHTTPServer

    def log_message(self, format, *args):  # noqa: A002 - keep test output quiet
        pass

    # -- plumbing --------------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json(self) -> dict:
        body = self._body()
        return json.loads(body) if body else {}

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json",
              headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self._status = status

    def _send_json(self, data, status: int = 200, headers: dict | None = None) -> None:
        self._send(status, json.dumps(data).encode(), headers=headers)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:] if auth.startswith("Bearer ") else None

    def _user(self, required: bool) -> str | None:
        token = self._token()
        user = self.server.tokens.get(token) if token else None
        if required and user is None:
            message = "Invalid credentials in Authorization header" if token else "Unauthorized"
            raise HubError(401, message)
        return user

    def _dispatch(self, method: str) -> None:
        self._status = 500
        url = urlsplit(self.path)
        try:
            for fault in self.server.faults:
                if fault.matches(method, url.path):
                    fault.times -= 1
                    self._body()
                    echo = f" (request had {self.headers.get('Authorization')})" if fault.echo_auth else ""
                    raise HubError(fault.status, f"injected failure{echo}")
            self._route(method, [unquote(p) for p in url.path.strip("/").split("/")], parse_qs(url.query))
        except HubError as exc:
            headers = {"X-Error-Message": exc.message.encode("ascii", "replace").decode()}
            if exc.code:
                headers["X-Error-Code"] = exc.code
            # a HEAD answer carries no body, or the client reads it as the next response's status line
            self._send(exc.status, json.dumps({"error": exc.message, **exc.extra}).encode(), headers=headers,
                       head=method == "HEAD")
        finally:
            self.server.record(Recorded(method, url.path, url.query, self._status, self._token() is not None))

    def do_GET(self):  # noqa: N802
        self._dispatch("GET")

    def do_HEAD(self):  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    # -- routing ---------------------------------------------------------------------------------------------
    def _route(self, method: str, parts: list[str], query: dict) -> None:
        store = self.server.store
        with store.lock:
            if parts[:2] == ["api", "whoami-v2"]:
                user = self._user(required=True)
                return self._send_json({"type": "user", "name": user, "orgs": [],
                                        "auth": {"type": "access_token", "accessToken": {"role": "write"}}})
            if parts[:2] == ["api", "agent-harnesses"]:
                return self._send_json({"standardEnvVars": [], "harnesses": {}})
            if parts[:3] == ["api", "repos", "create"] and method == "POST":
                return self._create_repo()
            if parts[:2] == ["api", "validate-yaml"] and method == "POST":
                return self._validate_yaml()
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                return self._model_api(method, self._repo("/".join(parts[2:4])), parts[4:], query)
            if parts[0] == "lfs-objects" and method == "PUT":
                return self._lfs_put(parts[1])
            if len(parts) >= 6 and parts[1].endswith(".git") and parts[2:5] == ["info", "lfs", "objects"]:
                repo = self._repo(f"{parts[0]}/{parts[1][:-4]}", write=True)
                return self._lfs_batch(repo) if parts[5] == "batch" else self._lfs_verify()
            if len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
                return self._resolve(self._repo(f"{parts[0]}/{parts[1]}"), parts[3], "/".join(parts[4:]),
                                     head=method == "HEAD")
        raise HubError(404, f"no such route: {method} {'/'.join(parts)}")

    def _repo(self, repo_id: str, write: bool = False) -> Repo:
        user = self._user(required=write)
        repo = self.server.store.repos.get(repo_id)
        if repo is None or (repo.private and user is None):
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def _commit(self, repo: Repo, revision: str) -> str:
        oid = repo.resolve(revision)
        if oid is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return oid

    def _model_api(self, method: str, repo: Repo, rest: list[str], query: dict) -> None:
        if method == "GET" and not rest:
            return self._model_info(repo, self._commit(repo, "main"), query)
        verb = rest[0]
        if method == "GET" and verb == "revision":
            return self._model_info(repo, self._commit(repo, rest[1]), query)
        if method == "GET" and verb == "tree":
            return self._tree(repo, self._commit(repo, rest[1]), "/".join(rest[2:]))
        if method == "GET" and verb == "refs":
            return self._refs(repo)
        self._user(required=True)
        if method == "POST" and verb == "preupload":
            return self._preupload(repo, rest[1], query)
        if method == "POST" and verb == "commit":
            return self._commit_ndjson(repo, rest[1], query)
        if method == "POST" and verb == "paths-info":
            return self._paths_info(repo, self._commit(repo, rest[1]))
        if method == "POST" and verb == "branch":
            return self._create_ref(repo, repo.branches, rest[1], self._json().get("startingPoint") or "main")
        if method == "POST" and verb == "tag":
            return self._create_ref(repo, repo.tags, self._json()["tag"], rest[1])
        raise HubError(404, f"no such route: {method} models/{repo.repo_id}/{'/'.join(rest)}")

    # -- repos, refs, info -----------------------------------------------------------------------------------
    def _create_repo(self) -> None:
        user = self._user(required=True)
        body = self._json()
        repo_id = f"{body.get('organization') or user}/{body['name']}"
        base = f"{self.server.url}/{repo_id}"
        if repo_id in self.server.store.repos:
            raise HubError(409, "You already created this model repo", url=base)
        self.server.store.create_repo(repo_id, body.get("visibility") == "private" or bool(body.get("private")))
        self._send_json({"url": base, "name": repo_id, "id": hashlib.sha1(repo_id.encode()).hexdigest()[:24]})

    def _create_ref(self, repo: Repo, refs: dict, name: str, start: str) -> None:
        if name in refs:
            raise HubError(409, f"Reference already exists: {name}")
        refs[name] = self._commit(repo, start)
        self._send_json({})

    def _refs(self, repo: Repo) -> None:
        def ref(kind: str, name: str, oid: str) -> dict:
            return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": oid}
        self._send_json({"branches": [ref("heads", n, o) for n, o in repo.branches.items()],
                         "tags": [ref("tags", n, o) for n, o in repo.tags.items()], "converts": [],
                         "pullRequests": [{"name": str(n), "ref": f"refs/pr/{n}", "targetCommit": o}
                                          for n, o in repo.prs.items()]})

    def _entry_json(self, path: str, entry: FileEntry) -> dict:
        data = {"type": "file", "path": path, "size": entry.size,
                "oid": entry.oid(self.server.store.content(entry))}
        if entry.lfs:
            data["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": 130}
        return data

    def _model_info(self, repo: Repo, oid: str, query: dict) -> None:
        files = repo.commits[oid].files
        blobs = query.get("blobs") == ["True"] or query.get("blobs") == ["true"]
        siblings = []
        for path, entry in sorted(files.items()):
            sibling = {"rfilename": path}
            if blobs:
                info = self._entry_json(path, entry)
                sibling.update(size=entry.size, blobId=info["oid"], lfs=info.get("lfs"))
            siblings.append(sibling)
        card = {}
        if "README.md" in files:
            text = self.server.store.content(files["README.md"]).decode()
            card = _front_matter(text) or {}
        self._send_json({"id": repo.repo_id, "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0],
                         "sha": oid, "private": repo.private, "siblings": siblings, "tags": card.get("tags", []),
                         "cardData": card, "library_name": card.get("library_name"),
                         "lastModified": "2025-01-01T00:00:00.000Z", "downloads": 0, "likes": 0})

    def _tree(self, repo: Repo, oid: str, prefix: str) -> None:
        files = repo.commits[oid].files
        entries = [self._entry_json(p, e) for p, e in sorted(files.items())
                   if not prefix or p.startswith(prefix.rstrip("/") + "/")]
        self._send_json(entries)

    def _paths_info(self, repo: Repo, oid: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode()) if length else {}
        wanted = form.get("paths", [])
        files = repo.commits[oid].files
        self._send_json([self._entry_json(p, files[p]) for p in wanted if p in files])

    # -- upload ----------------------------------------------------------------------------------------------
    def _preupload(self, repo: Repo, revision: str, query: dict) -> None:
        base = repo.resolve(revision) or repo.branches["main"]
        files = repo.commits[base].files
        store = self.server.store
        result = []
        for item in self._json()["files"]:
            sample = base64.b64decode(item["sample"])
            lfs = store.is_lfs(repo, base, item["path"], item["size"], sample)
            existing = files.get(item["path"])
            oid = None
            if existing is not None:
                oid = existing.sha256 if existing.lfs else git_oid(store.content(existing))
            result.append({"path": item["path"], "uploadMode": "lfs" if lfs else "regular",
                           "shouldIgnore": False, "oid": oid})
        self._send_json({"files": result})

    def _lfs_batch(self, repo: Repo) -> None:
        body = self._json()
        objects = []
        for obj in body["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.server.store.blobs:
                entry["actions"] = {
                    "upload": {"href": f"{self.server.url}/lfs-objects/{obj['oid']}"},
                    "verify": {"href": f"{self.server.url}/{repo.repo_id}.git/info/lfs/objects/verify"}}
            objects.append(entry)
        self._send_json({"transfer": "basic", "objects": objects})

    def _lfs_put(self, oid: str) -> None:
        data = self._body()
        if hashlib.sha256(data).hexdigest() != oid:
            raise HubError(400, "sha256 mismatch")
        self.server.store.blobs[oid] = data
        self._send(200)

    def _lfs_verify(self) -> None:
        body = self._json()
        data = self.server.store.blobs.get(body["oid"])
        if data is None or len(data) != body["size"]:
            raise HubError(404, "object not found")
        self._send_json({})

    def _commit_ndjson(self, repo: Repo, revision: str, query: dict) -> None:
        store = self.server.store
        lines = [json.loads(line) for line in self._body().decode().splitlines() if line.strip()]
        header = lines[0]["value"]
        create_pr = query.get("create_pr") == ["1"]
        base = self._commit(repo, revision)
        if header.get("parentCommit") and not create_pr and header["parentCommit"] != base:
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        files = dict(repo.commits[base].files)
        for op in lines[1:]:
            key, value = op["key"], op["value"]
            if key == "file":
                data = base64.b64decode(value["content"])
                files[value["path"]] = FileEntry(len(data), store.put_blob(data), False)
            elif key == "lfsFile":
                if value["oid"] not in store.blobs:
                    raise HubError(422, f"LFS object {value['oid']} was never uploaded")
                files[value["path"]] = FileEntry(len(store.blobs[value["oid"]]), value["oid"], True)
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                files = {p: e for p, e in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
            else:
                raise HubError(400, f"unknown operation {key}")
        oid = store.new_commit(repo, base, files, header["summary"])
        pr_url = None
        if create_pr:
            number = max(repo.prs, default=0) + 1
            repo.prs[number] = oid
            pr_url = f"{self.server.url}/{repo.repo_id}/discussions/{number}"
        elif revision.startswith("refs/pr/"):
            repo.prs[int(revision[8:])] = oid
        else:
            if revision not in repo.branches:
                raise HubError(400, f"cannot commit to {revision}: not a branch")
            repo.branches[revision] = oid
        self._send_json({"commitUrl": f"{self.server.url}/{repo.repo_id}/commit/{oid}", "commitOid": oid,
                         "pullRequestUrl": pr_url, "success": True})

    def _validate_yaml(self) -> None:
        content = self._json().get("content", "")
        meta = _front_matter(content)
        if meta is None:
            raise HubError(400, "Invalid YAML in model card metadata")
        problems = []
        if meta.get("base_model_relation") is not None:
            if meta["base_model_relation"] not in VALID_RELATIONS:
                problems.append("base_model_relation is not one of " + ", ".join(sorted(VALID_RELATIONS)))
            if not meta.get("base_model"):
                problems.append("base_model_relation needs base_model")
        if "tags" in meta and not (isinstance(meta["tags"], list) and all(isinstance(t, str) for t in meta["tags"])):
            problems.append("tags must be a list of strings")
        if problems:
            raise HubError(400, "; ".join(problems))
        self._send_json({"errors": [], "warnings": []})

    # -- download --------------------------------------------------------------------------------------------
    def _resolve(self, repo: Repo, revision: str, path: str, head: bool) -> None:
        oid = self._commit(repo, revision)
        entry = repo.commits[oid].files.get(path)
        if entry is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        data = self.server.store.content(entry)
        headers = {"X-Repo-Commit": oid, "ETag": f'"{entry.oid(data)}"', "Accept-Ranges": "bytes"}
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
        status, body = 200, data
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if wanted:                       # a range request (what get_safetensors_metadata sends): 206, the slice
            start, end = int(wanted[1]), min(int(wanted[2] or len(data) - 1), len(data) - 1)
            status, body = 206, data[start:end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        if not head:
            self.server.count_bytes(path, len(body))
        self._send(status, body, "application/octet-stream", headers, head=head)


def _front_matter(text: str) -> dict | None:
    if not text.startswith("---"):
        return {}
    end = text.find("\n---", 3)
    try:
        data = yaml.safe_load(text[3:end]) if end > 0 else None
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


class HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, tokens: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), HubHandler)
        self.store = HubStore()
        self.tokens = dict(tokens)
        self.faults: list[Fault] = []
        self.requests: list[Recorded] = []
        self.bytes_served: dict[str, int] = {}     # file path in a repo -> body bytes sent by resolve GETs
        self._record_lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, entry: Recorded) -> None:
        with self._record_lock:
            self.requests.append(entry)

    def count_bytes(self, path: str, n: int) -> None:
        with self._record_lock:
            self.bytes_served[path] = self.bytes_served.get(path, 0) + n
