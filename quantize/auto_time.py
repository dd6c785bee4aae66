"""The time `quantize --scheme auto` has left: each rung still to measure costs drafting every sample (at the
seconds per sample of the faster of the last two draftings: it follows the load) plus building its weights,
unless a rung of the same scheme built them (a Quark write at the average write so far, the in-memory twins at
theirs, each without the first of its kind, which pays once-only costs; with no other yet, as long as drafting every
sample). Rungs stopped early make it an upper end: `quantize` prints "up to about" until a rung keeps the gate.

A drafting timed while Quark's import ran in the background is counted at the measuring thread's CPU seconds, not
its wall seconds (`Stopwatch`): the import holds the GIL for seconds and then ends; on the tiny pair it tripled the
first rungs' wall time, and the estimate read that rate for every rung after them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


class Stopwatch:
    """Times work on this thread; `alone(seconds)` scales seconds it measured to the work alone: by this thread's
    CPU share of the wall time when `beside()` (other work in this process) held at the start or at the end."""

    def __init__(self, beside: Callable[[], bool]) -> None:
        self.beside, self.shared = beside, beside()
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def elapsed(self) -> float:
        return time.perf_counter() - self.wall

    def elapsed_alone(self) -> float:
        return self.alone(self.elapsed())

    def alone(self, seconds: float) -> float:
        wall = self.elapsed()
        if not (self.shared or self.beside()) or wall <= 0:
            return seconds
        return seconds * min(1.0, (time.thread_time() - self.cpu) / wall)


@dataclass
class MeasuringCost:
    samples: int
    rates: list[float] = field(default_factory=list)     # each drafting's seconds per sample, in order
    built_s: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})   # written? -> seconds

    def add_drafting(self, samples: int, seconds: float) -> None:
        if samples and seconds > 0:         # a reading of 0 s (none taken) would win every `min` after it
            self.rates.append(seconds / samples)

    @property
    def per_sample_s(self) -> float | None:
        """The faster of the last two draftings: it follows the machine's load, past a one-off slow rung."""
        return min(self.rates[-2:]) if self.rates else None

    def add_rung(self, drafted: int, seconds: float, built_s: float | None, written: bool) -> None:
        """A measured rung: samples it drafted, its seconds, of which `built_s` built its weights (None: a rung of
        the same scheme had built them)."""
        self.add_drafting(drafted, seconds - (built_s or 0.0))
        if built_s is not None:
            self.built_s[written].append(built_s)

    def rung_s(self, written: bool, built: bool) -> float | None:
        if self.per_sample_s is None:
            return None
        every_sample = self.samples * self.per_sample_s
        seen = self.built_s[written][1:]        # the first of a kind also pays once-only costs (imports, reads)
        return every_sample + (0.0 if built else sum(seen) / len(seen) if seen else every_sample)

    def left(self, rungs: Iterable[tuple[bool, bool]]) -> float | None:
        """Seconds for these rungs ((written, weights already built) each), None before any sample was timed."""
        costs = [self.rung_s(written, built) for written, built in rungs]
        return None if any(c is None for c in costs) else sum(costs)
