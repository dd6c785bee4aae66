"""Run one command in a fresh child process; measure its wall time and peak RSS (os.wait4 rusage)."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class BenchCommandError(RuntimeError):
    """A measured command exited non-zero; carries the tail of its output."""


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    peak_rss_bytes: int
    stdout: str

    def to_dict(self) -> dict:
        return {"wall_s": round(self.wall_s, 4), "peak_rss_bytes": self.peak_rss_bytes}


def run_measured(cmd: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Measurement:
    """Wall time from spawn to exit, and ru_maxrss of that child alone (Linux reports KiB)."""
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        child = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if child.returncode != 0:
        raise BenchCommandError(f"{' '.join(map(str, cmd))} exited {child.returncode}:\n{text[-3000:]}")
    return Measurement(wall, usage.ru_maxrss * 1024, text)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def drop_dirty_pages() -> None:
    """Flush written outputs so one contender's write-back does not land in the next one's time."""
    os.sync()
