"""Run one llama.cpp tool (the converter, `llama-quantize`, `llama-bench`) to its end, as the engine runner runs an
engine child (`engines/runner.py`): its own session, its whole process tree ended on a timeout, an error or Ctrl-C
(which then propagates), its output kept in a file and the last lines returned."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.runner import DeferredInterrupts, end_tree
from eagle3_quant.errors import EngineError

TAIL_BYTES = 65536


@dataclass(frozen=True)
class ToolRun:
    returncode: int | None          # None: timed out (its processes were ended)
    output: str                     # stdout and stderr, interleaved: the last TAIL_BYTES
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def lines(self) -> list[str]:
        return self.output.splitlines()


def run_tool(argv: Sequence[str | Path], env: Mapping[str, str], timeout_s: float, name: str,
             cwd: Path | None = None) -> ToolRun:
    """Run `argv` to its end (or `timeout_s`); `EngineError` when it cannot start."""
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        with DeferredInterrupts() as deferred:
            try:
                proc = subprocess.Popen([str(a) for a in argv], env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                raise EngineError(f"cannot start {name} ({argv[0]}): {exc.strerror or exc}") from exc
        try:
            deferred.deliver()
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            end_tree(proc)
        seconds = time.perf_counter() - started
        size = log.seek(0, 2)
        log.seek(max(0, size - TAIL_BYTES))
        output = log.read().decode("utf-8", "replace")
    return ToolRun(returncode, output, seconds)


def failure(run: ToolRun, name: str, timeout_s: float, markers: Sequence[str] = ()) -> str:
    """One line saying why a tool failed: a timeout, else the last output line holding one of `markers` (an
    exception's or llama.cpp's own error line), else the last line."""
    if run.returncode is None:
        return f"{name} did not finish within {timeout_s:.0f} s (its processes were ended)"
    lines = [line.strip() for line in run.lines() if line.strip()]
    marked = [line for line in lines if any(m in line for m in markers)]
    last = (marked or lines or ["no output"])[-1]
    status = f"exit status {run.returncode}" if run.returncode >= 0 else f"signal {-run.returncode}"
    return f"{name} failed ({status}): {' '.join(last.split())[:600]}"
