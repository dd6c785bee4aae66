"""Run one command in a fresh child process; measure its wall time and peak RSS.

Peak RSS comes from GNU time's %M (the max RSS of the command itself). os.wait4's ru_maxrss is only a
fallback: a child forked from this process inherits this process's RSS as its starting high-water mark
(~230 MB once torch is imported here), which would inflate small commands.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GNU_TIME = Path("/usr/bin/time")


class BenchCommandError(RuntimeError):
    """A measured command exited non-zero; carries the tail of its output."""


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    peak_rss_bytes: int
    stdout: str

    def to_dict(self) -> dict:
        return {"wall_s": round(self.wall_s, 4), "peak_rss_bytes": self.peak_rss_bytes}


def rss_method() -> str:
    return "GNU time %M" if GNU_TIME.exists() else "os.wait4 ru_maxrss (includes the parent's RSS at fork)"


def run_measured(cmd: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Measurement:
    """Wall time from spawn to exit (GNU time adds ~1 ms) and the command's peak RSS."""
    with tempfile.TemporaryFile("w+") as out, tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        wrapped = [str(GNU_TIME), "-f", "%M", "-o", rss.name, *cmd] if GNU_TIME.exists() else list(cmd)
        started = time.perf_counter()
        child = subprocess.Popen(wrapped, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:      # interrupted: leave no measured child running
            child.kill()
            child.wait()
            raise
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
        peak_kib = int(rss.read().split()[-1]) if GNU_TIME.exists() and child.returncode == 0 else usage.ru_maxrss
    if child.returncode != 0:
        raise BenchCommandError(f"{' '.join(map(str, cmd))} exited {child.returncode}:\n{text[-3000:]}")
    return Measurement(wall, peak_kib * 1024, text)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def drop_dirty_pages() -> None:
    """Flush written outputs so one contender's write-back does not land in the next one's time."""
    os.sync()
