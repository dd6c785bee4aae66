"""Ctrl-C and SIGTERM, made reliable: the request is remembered even where a library swallows the exception.

A signal raises ``KeyboardInterrupt`` as usual, and also sets a flag. Code deep in torch or Quark sometimes
turns that exception into another error (or loses it); the flag still stops `staged_output` from putting
OUT in place, and lets the CLI report an interruption rather than that error.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_requested = threading.Event()


@dataclass
class InterruptRecord:
    requested: bool = False   # set when the block ends: was Ctrl-C or SIGTERM received in it?


def requested() -> bool:
    """Inside `handling_interrupts`: has Ctrl-C or SIGTERM been received (even if its exception was lost)?"""
    return _requested.is_set()


def _interrupt(signum, frame) -> None:
    _requested.set()
    raise KeyboardInterrupt


@contextmanager
def handling_interrupts(record: InterruptRecord | None = None) -> Iterator[None]:
    """Within the block (main thread only), SIGINT and SIGTERM interrupt the way `requested` remembers;
    `record` tells afterwards whether one came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested.clear()
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if record is not None:
            record.requested = _requested.is_set()
        _requested.clear()
