"""Run a serving engine in its own interpreter: the one place in eagle3-quant that spawns engine processes.

An engine (vLLM, SGLang) patches global state, takes seconds to import, may start processes of its own, and may
live in another Python environment (``make setup-engine``, ``--engine-python``). So it always runs in a child
process, and the parent talks to it through two JSON files.

API::

    command = ChildCommand(python, entry, name="vLLM", env={...})   # entry: a script Path (run by path) or a
                                                                    # module name (run with -m)
    run = run_child(command, request={...}, timeout_s=600)          # -> ChildRun; Ctrl-C propagates
    run.ok, run.result, run.error, run.returncode, run.seconds      # error: one line, None when ok
    result = run.checked()                                          # the result dict, or EngineError (exit 2)

The child protocol: ``PYTHON ENTRY REQUEST.json RESULT.json``. The child reads the request, writes one JSON object
to RESULT.json (it may rewrite it as it goes: what it wrote survives a later crash in ``run.result``) and exits 0.
A child that refuses writes ``{"error": "one line"}`` and exits non-zero. Files live in a temporary folder that
is always removed; the child's cwd is that folder, and its temporary folder (``TMPDIR``, ``TMP``, ``TEMP``) a
folder inside it, so what the engine leaves in its temp folder (vLLM's ``vllm_dist_*`` file-based init file, one
per start) is removed with it, whatever the ending: success, error, timeout, Ctrl-C.

What the parent guarantees: the child starts in its own session (process group), so a terminal's Ctrl-C reaches
only the parent, which then ends the child's whole process tree and re-raises ``KeyboardInterrupt`` (the CLI exits
130). A timeout ends the tree too. After every run, successful or not, whatever the child left running in its
group is ended: no engine process outlives the call. Errors are one line: the child's own ``error``, else the
exception line at the end of its stderr, else its exit status or the signal that killed it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_quant.errors import EngineError

TERM_GRACE_S = 3.0
TEMP_VARS = ("TMPDIR", "TMP", "TEMP")    # what Python's tempfile (vLLM's ``vllm_dist_*`` init file) and others read
ERROR_CHARS = 2000
RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s*")      # torch.distributed prefixes a rank's stderr
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure)\b.*")


@dataclass(frozen=True)
class ChildCommand:
    python: str | Path                 # the interpreter the engine lives in
    entry: str | Path                  # a Path: a script run by its path; a str: a module run with -m
    name: str = "the engine"           # for messages: "vLLM", "SGLang's loader"
    env: Mapping[str, str] = field(default_factory=dict)   # added to os.environ
    unset: tuple[str, ...] = ()        # removed from the child's environment (e.g. PYTHONPATH)

    def argv(self, request: Path, result: Path) -> list[str]:
        """Paths made absolute here: the child runs in its temporary folder."""
        python = str(self.python)
        python = str(Path(python).absolute()) if os.sep in python else python      # a bare name: found on PATH
        entry = [str(self.entry.absolute())] if isinstance(self.entry, Path) else ["-m", self.entry]
        return [python, *entry, str(request), str(result)]


@dataclass(frozen=True)
class ChildRun:
    result: dict[str, Any] | None      # what the child wrote to RESULT.json (possibly partial when it failed)
    error: str | None                  # one line; None when the child exited 0 with a result
    returncode: int | None             # None: timed out (the tree was killed)
    seconds: float
    stderr_tail: str = ""              # the last lines of the child's stderr, for a debug log

    @property
    def ok(self) -> bool:
        return self.error is None

    def checked(self) -> dict[str, Any]:
        """The result, or `EngineError` with the one-line reason."""
        if self.error is not None:
            raise EngineError(self.error)
        assert self.result is not None
        return self.result


def run_child(command: ChildCommand, request: Mapping[str, Any], timeout_s: float) -> ChildRun:
    """Run the child on `request` and wait at most `timeout_s`; see the module docstring."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **command.env}
    for name in command.unset:
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="e3q-engine-", ignore_cleanup_errors=True) as tmp:
        folder = Path(tmp)
        req, res, err = folder / "request.json", folder / "result.json", folder / "stderr.txt"
        own_tmp = folder / "tmp"           # the child's temp folder: whatever the engine puts there goes with it
        own_tmp.mkdir()
        env.update({name: str(own_tmp) for name in TEMP_VARS})
        req.write_text(json.dumps(dict(request), allow_nan=False))
        started = time.perf_counter()
        with open(err, "wb") as stderr:
            with DeferredInterrupts() as deferred:    # a Ctrl-C while the child starts: taken once `proc` is known
                try:
                    proc = subprocess.Popen(command.argv(req, res), cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                            stdout=stderr, stderr=subprocess.STDOUT, start_new_session=True)
                except OSError as exc:
                    raise EngineError(f"cannot start {command.name} with {command.python}: "
                                      f"{exc.strerror or exc}") from exc
            try:
                deferred.deliver()
                returncode: int | None = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:                       # also on Ctrl-C / SIGTERM, which then propagate
                end_tree(proc)
        seconds = time.perf_counter() - started
        tail = _tail(err)
        result = _read_result(res)
    error = _error(command, returncode, result, tail, timeout_s)
    return ChildRun(result if isinstance(result, dict) else None, error, returncode, seconds, tail)


class DeferredInterrupts:
    """SIGINT/SIGTERM inside the block are recorded, not raised (main thread only), so no child is started without
    the parent knowing its pid; `deliver()` afterwards hands a recorded one to the handler that was in place (the
    CLI's, which remembers it and raises KeyboardInterrupt), or raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> DeferredInterrupts:
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, lambda signum, frame: self.received.append(signum))
                             for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def deliver(self) -> None:
        if self.received:
            handler = self.previous.get(self.received[0])
            if callable(handler):
                handler(self.received[0], None)
            raise KeyboardInterrupt


def _error(command: ChildCommand, returncode: int | None, result: Any, tail: str, timeout_s: float) -> str | None:
    if returncode is None:
        return f"{command.name} did not finish within {timeout_s:.0f} s (its processes were ended)"
    own = result.get("error") if isinstance(result, dict) else None
    if returncode == 0 and isinstance(result, dict) and not own:
        return None
    if isinstance(own, str) and own:
        return _one_line(own)
    if returncode == 0:
        return f"{command.name} exited without writing a result" + (f": {_last_line(tail)}" if tail else "")
    if returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        hint = " (out of memory?)" if sig == "SIGKILL" else ""
        return f"{command.name} was killed by {sig}{hint}" + (f": {_last_line(tail)}" if tail else "")
    return f"{command.name} failed (exit status {returncode})" + (f": {_last_line(tail)}" if tail else "")


def _read_result(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 3] + "..."


def _last_line(tail: str) -> str:
    """The exception line at the end of a traceback, else the last non-empty line."""
    lines = [RANK_PREFIX.sub("", x.strip()) for x in tail.splitlines() if x.strip()]
    exceptions = [x for x in lines if EXCEPTION_LINE.match(x)]
    return _one_line(exceptions[-1] if exceptions else lines[-1]) if lines else ""


def end_tree(proc: subprocess.Popen) -> None:
    """End the child and everything it started: its process group (the child leads its own session) and any
    descendant that left the group. SIGTERM first, SIGKILL to what is left after `TERM_GRACE_S`."""
    pids = tree(proc.pid)
    _signal_all(proc.pid, pids, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < deadline and (proc.poll() is None or tree(proc.pid, pids)):
        time.sleep(0.05)
    _signal_all(proc.pid, tree(proc.pid, pids), signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _signal_all(group: int, pids: set[int], sig: signal.Signals) -> None:
    for send, target in ((os.killpg, group), *((os.kill, pid) for pid in pids)):
        try:
            send(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process (Linux /proc; empty elsewhere)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), fields[0])
        except (OSError, IndexError, ValueError):
            continue
    return table


def tree(leader: int, known: set[int] = frozenset()) -> set[int]:
    """The live (not zombie) processes among `leader`'s process group, its descendants and `known`."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, group, _) in table.items() if group == leader} | set(known)
    todo = [leader]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if pid in table and table[pid][2] != "Z"}
