"""`llama-server` on a loopback port, asked over its HTTP API, its whole process tree ended whatever happens.

Read in tools/server/ of the pinned llama.cpp: it binds its port before loading (a busy port: "couldn't bind HTTP
server socket", exit 1), answers /health 503 while loading and 200 once ready, then prints "listening on
http://HOST:PORT" (``--port 0``: a free port, read from that line). An EAGLE-3 draft needs ``--spec-type
draft-eagle3``; a draft it cannot use leaves it serving without one ("failed to initialize speculative decoding
context"), so every draft server is checked to be speculating (/slots ``speculative``). Per request, /completion
returns ``timings`` (``draft_n``, ``draft_n_accepted`` when it drafted); /metrics (``--metrics``) counts verify
steps and accepted tokens per position; at verbosity 4 each request ends with the draft's cumulative
``statistics draft-eagle3: ... dur(b,g,a) = B, G, A ms`` (common/speculative.cpp `common_speculative_print_stats`).

Settings that would make runs differ are pinned: ``--fit off`` and an explicit context (no automatic resizing),
``-cram 0`` (no host prompt cache), every request ``cache_prompt: false``; the environment holds no ``LLAMA_ARG_*``.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.llamacpp.tools import LlamaCppTools
from eagle3_quant.engines.runner import DeferredInterrupts, end_tree
from eagle3_quant.errors import EngineError

LISTENING = re.compile(r"listening on http://(?P<host>[^:\s]+):(?P<port>\d+)")
STATISTICS = re.compile(r"statistics\s+draft-eagle3: .*?#gen tokens =\s*(?P<tokens>\d+), #acc tokens =\s*(?P<acc>\d+)"
                        r".*?dur\(b,g,a\) = (?P<begin>[\d.]+), (?P<draft>[\d.]+), (?P<accept>[\d.]+) ms")
METRIC = re.compile(r"^llamacpp:(?P<name>[a-z_]+)(?:\{position=\"(?P<pos>\d+)\"\})?\s+(?P<value>\S+)$", re.M)
# llama-server's failure lines, the most telling first (its last line, "exiting due to ...", says least)
FAILURES = ("couldn't bind", "invalid magic", "unknown model architecture", "error loading model",
            "draft model is not eagle3", "failed to initialize speculative decoding", "GGML_ASSERT",
            "exceeds target n_layer", "input not extracted", "failed to load", "error:", "exiting due to")
LOAD_TIMEOUT_S = 600.0
STATISTICS_TAIL = 1 << 16          # the log's last bytes hold the latest statistics line (one per request)
HOST = "127.0.0.1"


@dataclass(frozen=True)
class ServerSpec:
    target: Path
    draft: Path | None
    k: int                      # --spec-draft-n-max
    slots: int                  # -np
    context: int                # -c: every slot's context together
    threads: int
    port: int = 0               # 0: any free port

    def argv(self, tools: LlamaCppTools) -> list[str]:
        argv = [str(tools.binary("llama-server")), "-m", str(self.target), "-np", str(self.slots), "-c",
                str(self.context), "-t", str(self.threads), "-tb", str(self.threads), "--host", HOST, "--port",
                str(self.port), "--metrics", "--slots", "-cram", "0", "--fit", "off", "--no-webui", "-lv", "4",
                "--no-cache-prompt"]
        if self.draft is not None:
            argv += ["-md", str(self.draft), "--spec-type", "draft-eagle3", "--spec-draft-n-max", str(self.k),
                     "-td", str(self.threads), "-tbd", str(self.threads)]
        return argv


@dataclass(frozen=True)
class DraftStatistics:
    """The draft's cumulative counters at one moment: tokens drafted and accepted, ms drafting (``g``)."""

    tokens: int
    accepted: int
    draft_ms: float
    begin_ms: float
    accept_ms: float


class LlamaServer:
    """``with LlamaServer(tools, spec, log) as server:`` ready on return, ended (its tree) on exit."""

    def __init__(self, tools: LlamaCppTools, spec: ServerSpec, log: Path, name: str,
                 load_timeout_s: float = LOAD_TIMEOUT_S) -> None:
        self.tools, self.spec, self.log, self.name = tools, spec, log, name
        self.load_timeout_s = load_timeout_s
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.load_s = 0.0

    def __enter__(self) -> LlamaServer:
        started = time.perf_counter()
        with open(self.log, "wb") as out, DeferredInterrupts() as deferred:
            try:
                self.proc = subprocess.Popen(self.spec.argv(self.tools), env=self.tools.env(), stdout=out,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            except OSError as exc:
                raise EngineError(f"cannot start llama-server: {exc.strerror or exc}") from exc
        try:
            deferred.deliver()
            self._wait_ready()
            if self.spec.draft is not None:
                self._check_speculating()
        except BaseException:
            self.close()
            raise
        self.load_s = time.perf_counter() - started
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.proc is not None:
            end_tree(self.proc)

    def text(self, tail: int | None = None) -> str:
        """The log (its last `tail` bytes)."""
        try:
            with open(self.log, "rb") as fh:
                if tail is not None:
                    fh.seek(max(0, fh.seek(0, 2) - tail))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def failure(self, what: str) -> EngineError:
        lines = [line.strip() for line in self.text().splitlines() if line.strip()]
        marked = next(([line for line in lines if m in line] for m in FAILURES if any(m in x for x in lines)), [])
        why = " ".join((marked or lines or ["no output"])[-1].split())[:500]
        return EngineError(f"llama-server ({self.name}) {what}: {why}", hint=f"its log: {self.log}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.load_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self.failure(f"exited with status {self.proc.returncode} while starting")
            found = LISTENING.search(self.text())
            if found:
                self.url = f"http://{found['host']}:{found['port']}"
                if self._health() == 200:
                    return
            time.sleep(0.05)
        raise self.failure(f"was not ready within {self.load_timeout_s:.0f} s")

    def _health(self) -> int | None:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as reply:
                return reply.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return None

    def _check_speculating(self) -> None:
        slots = self.get("/slots")
        if not isinstance(slots, list) or not all(isinstance(s, dict) and s.get("speculative") for s in slots):
            raise self.failure("serves without speculative decoding: the draft was not taken")

    def get(self, path: str, timeout_s: float = 30.0):
        return self._request(urllib.request.Request(self.url + path), timeout_s)

    def complete(self, body: dict, timeout_s: float) -> dict:
        request = urllib.request.Request(self.url + "/completion", data=json.dumps(body, allow_nan=False).encode(),
                                         headers={"Content-Type": "application/json"})
        return self._request(request, timeout_s)

    def _request(self, request: urllib.request.Request, timeout_s: float):
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise EngineError(f"llama-server ({self.name}) answered {exc.code} to {request.full_url}: {detail}",
                              hint=f"its log: {self.log}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            if self.proc is not None and self.proc.poll() is not None:
                raise self.failure(f"died (status {self.proc.returncode})") from None
            raise EngineError(f"llama-server ({self.name}) did not answer {request.full_url} within {timeout_s:.0f} s "
                              f"({exc})", hint=f"its log: {self.log}") from None
        return json.loads(raw) if raw.strip()[:1] in (b"{", b"[") else raw.decode("utf-8", "replace")

    def metrics(self) -> dict[str, float]:
        """/metrics as name -> value; per-position counters as ``name[i]``."""
        text = self.get("/metrics")
        return {(m["name"] if m["pos"] is None else f"{m['name']}[{m['pos']}]"): float(m["value"])
                for m in METRIC.finditer(text if isinstance(text, str) else "")}

    def statistics(self) -> DraftStatistics | None:
        """The draft's latest cumulative statistics line (None before any request drafted)."""
        found = list(STATISTICS.finditer(self.text(tail=STATISTICS_TAIL)))
        if not found:
            return None
        last = found[-1]
        return DraftStatistics(int(last["tokens"]), int(last["acc"]), float(last["draft"]), float(last["begin"]),
                               float(last["accept"]))

    def build_info(self) -> str | None:
        props = self.get("/props")
        return props.get("build_info") if isinstance(props, dict) else None


def complete_all(server: LlamaServer, bodies: list[dict], timeout_s: float) -> tuple[list[dict], float]:
    """Send every body at once (one thread each; the server batches them over its slots); (replies, wall s)."""
    replies: list = [None] * len(bodies)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        try:
            replies[i] = server.complete(bodies[i], timeout_s)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            with lock:
                errors.append(exc)

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return replies, time.perf_counter() - started
