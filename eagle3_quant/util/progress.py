"""How a stage reports progress without drawing anything: the caller (the CLI) passes a `Progress`.

A stage says what it is about to do (`say`) and advances counted work (`task`); the CLI draws that as text
and a progress bar, the Python API stays silent unless the caller passes its own `Progress`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

# advance(items, tokens): items done since the last call, and how many tokens they held
Advance = Callable[[int, int], None]


class Progress(Protocol):
    def say(self, text: str) -> None: ...

    def task(self, name: str, total: int, done: int = 0, unit: str = "prompts") -> Iterator[Advance]: ...


class Silent:
    """The default: says nothing, counts nothing."""

    def say(self, text: str) -> None:
        pass

    @contextmanager
    def task(self, name: str, total: int, done: int = 0, unit: str = "prompts") -> Iterator[Advance]:
        yield lambda items, tokens=0: None


SILENT = Silent()


@dataclass
class Throughput:
    """Items and tokens counted since a task started (work done before a resume is not timed): tokens/s and the
    time left, the remaining items at the average time per item so far."""

    total: int
    done: int = 0                                # items done before this run (resumed): counted, not timed
    started: float = field(default_factory=time.perf_counter)
    items: int = 0                               # done by this run
    tokens: int = 0

    def add(self, items: int, tokens: int = 0) -> None:
        self.items, self.tokens = self.items + items, self.tokens + tokens

    def tokens_per_s(self, now: float | None = None) -> float:
        elapsed = (now or time.perf_counter()) - self.started
        return self.tokens / elapsed if elapsed > 0 else 0.0

    def seconds_left(self, now: float | None = None) -> float | None:
        if self.items == 0:
            return None
        elapsed = (now or time.perf_counter()) - self.started
        return max(0, self.total - self.done - self.items) * elapsed / self.items

    def line(self, unit: str = "prompts", now: float | None = None) -> str:
        """`12/128 prompts, 1,234 tokens/s, 0:03:10 left`."""
        left = self.seconds_left(now)
        text = f"{self.done + self.items}/{self.total} {unit}"
        if self.tokens:
            text += f", {self.tokens_per_s(now):,.0f} tokens/s"
        return text + (f", {clock(left)} left" if left is not None else "")


def clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
