"""How a stage reports progress without drawing anything: the caller (the CLI) passes a `Progress`.

A stage says what it is about to do (`say`) and advances counted work (`task`); the CLI draws that as text
and a progress bar, the Python API stays silent unless the caller passes its own `Progress`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

# advance(items, tokens): items done since the last call, and how many tokens they held
Advance = Callable[[int, int], None]


class Progress(Protocol):
    def say(self, text: str) -> None: ...

    def task(self, name: str, total: int, done: int = 0) -> Iterator[Advance]: ...


class Silent:
    """The default: says nothing, counts nothing."""

    def say(self, text: str) -> None:
        pass

    @contextmanager
    def task(self, name: str, total: int, done: int = 0) -> Iterator[Advance]:
        yield lambda items, tokens=0: None


SILENT = Silent()


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"
