"""How many torch threads a transformers calibration uses, so that it shares the machine.

torch starts one OpenMP thread per core. When other processes also run on those cores, every parallel region
waits for its slowest thread, and a descheduled thread costs a whole scheduler slice: a decode step of ~100 small
ops then takes ~100 slices instead of milliseconds (issue 23: with two other torch processes on the machine, 128
prompts did not finish in 40 minutes). So unless the user fixed the count (`--threads`, or OMP_NUM_THREADS), the
run takes the cores nobody else is running on: the usable cores minus the other tasks runnable right now
(`procs_running` of /proc/stat, sampled a few times), at least one; it looks again between batches, at most every
`RECHECK_S` seconds, so two calibrations started together settle on a share each.
"""

from __future__ import annotations

import os
import statistics
import time

RECHECK_S = 5.0
SAMPLES = 5
SAMPLE_GAP_S = 0.004


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not Linux
        return os.cpu_count() or 1


def runnable_elsewhere() -> int | None:
    """Tasks runnable now besides this thread (median of a few samples of /proc/stat); None where unknown."""
    counts = []
    for _ in range(SAMPLES):
        try:
            with open("/proc/stat") as stat:
                line = next(x for x in stat if x.startswith("procs_running"))
        except (OSError, StopIteration):
            return None
        counts.append(int(line.split()[1]) - 1)
        time.sleep(SAMPLE_GAP_S)
    return max(0, int(statistics.median(counts)))


def fair_threads(cores: int, busy: int | None) -> int:
    """The cores nobody else is running on, at least one (all of them when that is unknown)."""
    return cores if busy is None else max(1, min(cores, cores - busy))


class ThreadShare:
    """Sets torch's thread count now and, unless fixed, again between batches as the machine's load changes; as a
    context manager it gives the caller's count back at the end (an API caller's process keeps its own)."""

    def __init__(self, fixed: int | None = None) -> None:
        import torch

        self._torch = torch
        self.before = torch.get_num_threads()
        self.fixed = fixed if fixed is not None else (int(os.environ["OMP_NUM_THREADS"])
                                                      if os.environ.get("OMP_NUM_THREADS", "").isdigit() else None)
        self.checked = float("-inf")
        self.history: list[int] = []
        self.update(force=True)

    @property
    def threads(self) -> int:
        return self._torch.get_num_threads()

    def update(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and (self.fixed is not None or now - self.checked < RECHECK_S):
            return
        self.checked = now
        wanted = self.fixed or fair_threads(usable_cores(), runnable_elsewhere())
        if wanted != self._torch.get_num_threads():
            self._torch.set_num_threads(wanted)
        if not self.history or self.history[-1] != wanted:
            self.history.append(wanted)

    def __enter__(self) -> ThreadShare:
        return self

    def __exit__(self, *exc) -> None:
        self._torch.set_num_threads(self.before)
